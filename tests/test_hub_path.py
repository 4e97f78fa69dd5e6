"""The path a reader takes to a real model, exercised offline: a hub id (dots, digits, dashes) read from
a hub cache laid out as the hub client writes it, then sample and train with every trainer family;
and bfloat16 weights end to end (sampler, log-prob recompute, losses in float32, a step that moves
the weights), on the CPU here, as on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from rlbook.models import build_char_tokenizer, build_tiny_model

HUB_ID = "rlbook-test/Tiny-Qwen2.5-0.5M-Instruct"
REVISION = "0123456789abcdef0123456789abcdef01234567"

# Run in a fresh interpreter: the hub client reads HF_HUB_CACHE / HF_HUB_OFFLINE when it is imported.
SCRIPT = r"""
import json, sys, torch
from rlbook.models import load_model, resolve
from rlbook.rollout import sample
from rlbook.trainers import PRESETS, OnlineTrainer, PreferenceTrainer, preset
from rlbook.trainers.sft import sft

hub_id = sys.argv[1]
model, tokenizer = load_model(hub_id)
out = {"source": resolve(hub_id)[0], "class": type(model).__name__}
rollout = sample(model, tokenizer, ["1+2=", "3+4="], max_new_tokens=6, seed=0)
out["sampled"] = [len(t) for t in rollout.texts]

def moved(before, module):
    return any(not torch.equal(before[n], p.detach()) for n, p in module.named_parameters())

prompts = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(4) for b in range(3)]
trained = {}
for name in sorted(PRESETS):
    policy, _ = load_model(hub_id)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    single = name in ("ppo", "reinforce")
    config = preset(name, group_size=1 if single else 3, prompts_per_step=4 if single else 2, max_new_tokens=6, lr=1e-2)
    trainer = OnlineTrainer(policy, tokenizer, lambda text, example: float(len(text) % 2), config, train_dataset=prompts)
    trainer.train(2, progress=False)
    trained[name] = moved(before, trainer.policy)

pairs = {"prompt": ["a", "b", "c", "d"], "chosen": ["good", "fine", "nice", "ok"], "rejected": ["bad", "no", "x", "y"]}
for loss in ("dpo", "simpo"):
    policy, _ = load_model(hub_id)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    trainer = PreferenceTrainer(policy, tokenizer, pairs, loss=loss, steps=2, batch_size=2, lr=1e-2, progress=False)
    trainer.train()
    trained[loss] = moved(before, trainer.model)

policy, _ = load_model(hub_id)
before = {n: p.detach().clone() for n, p in policy.named_parameters()}
sft(policy, tokenizer, [("1+2=", "3"), ("2+2=", "4")], steps=2, batch_size=2, lr=1e-2, progress=False)
trained["sft"] = moved(before, policy)
out["trained"] = trained
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def _hub_cache(root, tokenizer):
    """A tiny Qwen2 stored as ``huggingface_hub`` stores a download: blobs behind a snapshot, refs/main."""
    owner, name = HUB_ID.split("/")
    repo = root / f"models--{owner}--{name}"
    snapshot = repo / "snapshots" / REVISION
    model = build_tiny_model(tokenizer, shape="test", seed=3)
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return root


@pytest.mark.slow
def test_a_hub_id_loads_offline_samples_and_trains_with_every_trainer_family(tmp_path, tokenizer):
    cache = _hub_cache(tmp_path, tokenizer)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(cache),
           "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", SCRIPT, HUB_ID], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["source"] == "hub" and out["class"] == "Qwen2ForCausalLM"
    assert len(out["sampled"]) == 2
    stuck = [name for name, moved in out["trained"].items() if not moved]
    assert not stuck, f"these trainers did not change the hub model's weights: {stuck}"
    assert {"grpo", "ppo", "dapo", "gspo", "gmpo", "sapo", "cispo", "reinforce", "rloo", "dr_grpo",
            "dpo", "simpo", "sft"} <= set(out["trained"])


def test_bfloat16_weights_sample_score_in_float32_and_train(tokenizer):
    from rlbook.rollout import completion_logprobs, sample
    from rlbook.trainers import OnlineTrainer, preset

    model = build_tiny_model(tokenizer, shape="test", seed=5).to(torch.bfloat16)
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], max_new_tokens=6, seed=0)
    assert rollout.logprobs.dtype == torch.float32
    logp = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                               rollout.completion_mask)
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all()
    mask = rollout.completion_mask.bool()
    # the recompute agrees with the sampler's own log-probs, to bfloat16's precision
    assert (logp[mask] - rollout.logprobs[mask]).abs().max() < 0.1

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = preset("grpo", group_size=3, prompts_per_step=2, max_new_tokens=6, lr=1e-2)
    trainer = OnlineTrainer(model, tokenizer, lambda text, example: float(len(text) % 2), config,
                            train_dataset=[{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(6)])
    history = trainer.train(2, progress=False).to_pandas()
    assert all(p.dtype == torch.bfloat16 for p in trainer.policy.parameters())
    assert any(not torch.equal(before[n], p.detach()) for n, p in trainer.policy.named_parameters())
    assert history[["reward", "entropy"]].notna().all().all()
