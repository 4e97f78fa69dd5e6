"""One whole GRPO update through rlbook's OnlineTrainer and through TRL 1.16's GRPOTrainer, on the same
completions: the same loss, the same gradient and the same change of every parameter.

``tests/test_trl_policy_crosscheck.py`` checks the *loss code* of the two engines on given log-prob tensors.
This test checks everything around it as well, for the recipe lesson 21 runs through both engines (the
``grpo`` preset with Bessel's σ and no KL, ``trl_grpo_config``'s mapping): the advantages each computes from
the rewards, the log-probs each computes with its own model forward (temperature included), the aggregation,
the gradient clipping and AdamW's first step. The sampling is taken out of both, since the two engines draw
different random numbers: a fixed set of prompt and completion token ids, with fixed rewards, is handed to
both (rlbook's ``_next_round`` and TRL's ``_generate`` are replaced by functions that return them). The model
is the tiny one-layer Qwen2 of ``rlbook.scaling._tiny_trl_model`` (nothing is downloaded), trained in full
(no LoRA, so both start from identical weights) in float32.

On-policy the loss's value is the advantages' mean, about 0 in both engines: the gradient is the real test.
It is compared after clipping (what the optimizer steps with) and its norm before (a difference of scale,
which clipping hides). What is not the same, and why the tolerance is not zero: TRL divides by σ + 1e-4 where rlbook divides by
σ + 1e-6 (a relative difference of about 2e-4 in the advantages here), and the two engines' forwards batch
the prompts differently (float32 rounding). AdamW's first step is about lr · sign(g), so the parameter
change is compared both ways: each engine's change against −lr · g / (|g| + ε) of its own gradient, and the
two changes against each other where |g| is well above ε.
"""

import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_pre_hook  # noqa: E402

from rlbook.rollout import Rollout, completion_logprobs  # noqa: E402
from rlbook.scaling import _tiny_trl_model, trl_grpo_config  # noqa: E402
from rlbook.trainers import OnlineTrainer, preset  # noqa: E402
from rlbook.trainers.online import ScoredBatch  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

GROUP, PROMPTS, TEMPERATURE = 4, 2, 0.7
PROMPT_IDS = [[3, 4, 5], [6, 7, 8]]  # two prompts of one length: no left padding, so positions agree
COMPLETIONS = [[9, 10, 11, 12], [13, 14], [9, 15, 16], [17, 18, 19, 20, 21],
               [22, 23], [24, 25, 26, 27], [28], [29, 30, 31]]  # right-padded to 5; no end-of-sequence token
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]  # both groups mixed; the second 1 of 4 (σ differs)
MAX_NEW_TOKENS = max(len(c) for c in COMPLETIONS)


def _config():
    return preset("grpo", group_size=GROUP, prompts_per_step=PROMPTS, max_new_tokens=MAX_NEW_TOKENS,
                  temperature=TEMPERATURE, lr=1e-3, kl_beta=0.0, unbiased_std=True, seed=0)


def _captured_step(run):
    """Run ``run()`` and return the gradients every optimizer step saw (after clipping), by parameter id."""
    seen = []

    def hook(optimizer, args, kwargs):
        seen.append({id(p): p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]
                     if p.grad is not None})

    handle = register_optimizer_step_pre_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return seen


def _rlbook_step(model, tokenizer):
    config = _config()
    trainer = OnlineTrainer(model, tokenizer, lambda text, example: 0.0, config,
                            train_dataset=[{"prompt": "w1 w2"}])
    width = MAX_NEW_TOKENS
    prompt_ids = torch.tensor([PROMPT_IDS[i // GROUP] for i in range(len(COMPLETIONS))])
    completion_ids = torch.tensor([c + [0] * (width - len(c)) for c in COMPLETIONS])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in COMPLETIONS])
    prompt_mask = torch.ones_like(prompt_ids)
    with torch.no_grad():  # the sampling policy's log-probs: the policy itself, exactly on-policy
        logprobs = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                       temperature=TEMPERATURE) * completion_mask
    rollout = Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                      completion_mask=completion_mask, logprobs=logprobs,
                      truncated=torch.ones(len(COMPLETIONS), dtype=torch.bool),
                      texts=["good" if r else "bad" for r in REWARDS], prompt_texts=["p"] * len(COMPLETIONS),
                      num_samples=GROUP)
    scored = ScoredBatch(rollout=rollout, examples=[{"prompt": "p"}] * len(COMPLETIONS),
                         score=torch.tensor(REWARDS), correct=torch.tensor(REWARDS), gold=None, ref_logp=None, kl=None)
    trainer._next_round = lambda: scored
    rows = []
    grads = _captured_step(lambda: rows.append(trainer.train_step()))
    return rows[0]["loss"], rows[0]["grad_norm"], {name: grads[0][id(p)] for name, p in trainer.policy.named_parameters()}


def _trl_step(model, tokenizer, output_dir):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = trl_grpo_config(_config())
    args = GRPOConfig(output_dir=str(output_dir), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      logging_steps=1, max_steps=1, disable_tqdm=True, dataloader_num_workers=0, **settings)

    def reward(completions, **_):
        return [1.0 if text == "good" else 0.0 for text in completions]

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": ["w1 w2"] * 8}))

    def fixed_generation(prompts):  # TRL's own generate step, replaced by the fixed completions
        assert len(prompts) == len(COMPLETIONS)
        return ([PROMPT_IDS[i // GROUP] for i in range(len(COMPLETIONS))], [list(c) for c in COMPLETIONS], None,
                ["good" if r else "bad" for r in REWARDS], None, {}, None, None)

    trainer._generate = fixed_generation
    losses = []
    compute_loss = trainer.compute_loss

    def recording_loss(*a, **k):
        loss = compute_loss(*a, **k)
        losses.append(loss.detach().clone())
        return loss

    trainer.compute_loss = recording_loss
    grads = _captured_step(trainer.train)
    assert len(losses) == 1 and len(grads) == 1  # one forward-backward, one optimizer step
    grad_norm = [log["grad_norm"] for log in trainer.state.log_history if "grad_norm" in log]
    return float(losses[0]), float(grad_norm[0]), {name: grads[0][id(p)] for name, p in trainer.model.named_parameters()}


def test_one_grpo_step_matches_trl_loss_gradient_and_update(tmp_path):
    model, tokenizer = _tiny_trl_model(tmp_path / "tiny")
    ours_model, trl_model = copy.deepcopy(model), copy.deepcopy(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    ours_loss, ours_norm, ours_grads = _rlbook_step(ours_model, tokenizer)
    trl_loss, trl_norm, trl_grads = _trl_step(trl_model, tokenizer, tmp_path / "trl")

    # on-policy, the ratio is 1 and the loss is −mean over sequences of (token mean of A): the advantages'
    # own mean, 0 for group-normalised rewards, in both engines
    assert ours_loss == pytest.approx(trl_loss, abs=1e-6)
    assert set(ours_grads) == set(trl_grads)
    # the gradient's norm before clipping, as each engine logs it: clipping at 1 (the recipe's, and here the norm
    # is above 1) would hide a difference of scale, e.g. σ without Bessel's correction, from the clipped gradients
    assert trl_norm > 1.0 and ours_norm == pytest.approx(trl_norm, rel=2e-3)
    norm = torch.sqrt(sum((g ** 2).sum() for g in trl_grads.values()))
    assert norm > 1e-3  # a real gradient, not two zeros
    for name in trl_grads:
        torch.testing.assert_close(ours_grads[name], trl_grads[name], rtol=2e-3, atol=1e-6 * float(norm))
    ours_params, trl_params = dict(ours_model.named_parameters()), dict(trl_model.named_parameters())
    lr, compared = _config().lr, 0
    for name, start in before.items():
        ours_change = ours_params[name].detach() - start
        trl_change = trl_params[name].detach() - start
        # AdamW's first step (no weight decay in either) is −lr · g / (|g| + 1e-8) of each engine's own gradient
        for change, grad in ((ours_change, ours_grads[name]), (trl_change, trl_grads[name])):
            torch.testing.assert_close(change, -lr * grad / (grad.abs() + 1e-8), rtol=1e-4, atol=1e-8)
        # so the two changes agree wherever the gradient is well above Adam's ε (where it is not, g / (|g| + ε)
        # magnifies the float32 rounding of a near-zero gradient)
        clear = trl_grads[name].abs() > 1e-6  # (rows of the embedding for tokens absent here have g = 0)
        compared += int(clear.sum())
        torch.testing.assert_close(ours_change[clear], trl_change[clear], rtol=2e-3, atol=1e-7)
        assert ours_change.abs().max() > 0  # every parameter tensor moved
    assert compared > 0.5 * sum(start.numel() for start in before.values())
