"""Models and tokenizers: the character tokenizer, tiny Qwen2 models, the one loader, LoRA."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from rlbook.models import add_lora, build_char_tokenizer, build_tiny_model, load_model, resolve, zoo_names
from rlbook.models.tokenizer import REASONING_TAGS


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_tokenizer_is_a_fast_transformers_tokenizer_with_one_token_per_character(tokenizer):
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    ids = tokenizer("12+3=15\n", add_special_tokens=False)["input_ids"]
    assert len(ids) == 8
    assert tokenizer.decode(ids) == "12+3=15\n"


def test_reasoning_tags_are_single_tokens_kept_by_decoding(tokenizer):
    text = "<think>5+8=13</think><answer>13</answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    for tag in REASONING_TAGS:
        assert tokenizer.convert_tokens_to_ids(tag) in ids
    assert len(ids) == 4 + len("5+8=13") + len("13")
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_chat_template_is_chatml_and_ends_turns_with_eos(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 1+2?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\nWhat is 1+2?<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id == 0 and tokenizer.padding_side == "left"


def test_tokenizer_is_deterministic_and_maps_unknown_characters(tokenizer):
    assert build_char_tokenizer().get_vocab() == tokenizer.get_vocab()
    assert tokenizer("é", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id]


def test_tiny_model_is_a_qwen2_and_seeded(tokenizer):
    a = build_tiny_model(tokenizer, shape="test", seed=3)
    b = build_tiny_model(tokenizer, shape="test", seed=3)
    assert isinstance(a, Qwen2ForCausalLM)
    assert a.config.vocab_size == len(tokenizer)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    with pytest.raises(ValueError, match="shape"):
        build_tiny_model(tokenizer, shape="huge")


def test_load_model_from_a_local_folder_round_trips(tmp_path, tokenizer):
    model = build_tiny_model(tokenizer, shape="test")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert resolve(str(tmp_path))[0] == "local"
    loaded, loaded_tok = load_model(str(tmp_path))
    x = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        assert torch.allclose(model(x).logits, loaded(x).logits)
    assert loaded_tok.get_vocab() == tokenizer.get_vocab()
    text = "<|im_start|>user\nWhat is 12 + 3?<|im_end|>\n"
    assert loaded_tok(text, add_special_tokens=False)["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert loaded_tok.chat_template == tokenizer.chat_template
    assert not loaded.training


def test_load_model_rejects_names_that_are_nothing():
    with pytest.raises(ValueError, match="name_or_path"):
        load_model("no-such-zoo-model")
    with pytest.raises(ValueError, match="name_or_path"):
        load_model("")


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.2-1B", "rlbook-test/tiny-qwen2"])
def test_realistic_hub_ids_resolve_to_the_hub(name):
    assert resolve(name) == ("hub", name)  # dots, digits and dashes are ordinary in hub ids


@pytest.mark.parametrize("name", ["gpt2.safetensors", "a/b/c", "./x", "a/.b", "a--b/c", "/abs/missing"])
def test_names_that_are_not_hub_ids_are_refused(name):
    with pytest.raises(ValueError, match="name_or_path"):
        resolve(name)


def test_hub_id_path_loads_from_the_local_hub_cache_offline(tmp_path, tokenizer):
    """The hub-id code path, exercised offline: a tiny Qwen2 saved in the layout of the HF cache,
    under a realistic id with dots, digits and dashes."""
    repo = tmp_path / "models--rlbook-test--Tiny-Qwen2.5-0.5M-Instruct"
    snapshot = repo / "snapshots" / ("0" * 40)
    model = build_tiny_model(tokenizer, shape="test", seed=7)
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    expected = float(model.model.embed_tokens.weight.sum())
    script = (
        "import json; from rlbook.models import load_model, resolve\n"
        "m, t = load_model('rlbook-test/Tiny-Qwen2.5-0.5M-Instruct')\n"
        "print(json.dumps([resolve('rlbook-test/Tiny-Qwen2.5-0.5M-Instruct')[0], type(m).__name__, len(t),"
        " float(m.model.embed_tokens.weight.sum()), t('a b\\nc', add_special_tokens=False)['input_ids']]))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    source, cls, vocab, weight_sum, ids = json.loads(out.stdout.strip().splitlines()[-1])
    assert (source, cls, vocab) == ("hub", "Qwen2ForCausalLM", len(tokenizer))
    assert ids == tokenizer("a b\nc", add_special_tokens=False)["input_ids"]
    assert weight_sum == pytest.approx(expected, rel=1e-6)


def test_lora_trains_only_the_adapters(tokenizer):
    model = add_lora(build_tiny_model(tokenizer, shape="test"), r=4)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=0.5)
    x = torch.randint(8, 100, (4, 12))
    for _ in range(2):  # B starts at zero, so A's gradient appears from the second step
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed, "a LoRA step changed nothing"
    assert all("lora_" in name for name in changed)
    assert any("lora_A" in name for name in changed) and any("lora_B" in name for name in changed)
    with pytest.raises(ValueError, match="r must be"):
        add_lora(build_tiny_model(tokenizer, shape="test"), r=0)


def test_every_zoo_name_loads():
    for name in zoo_names():
        model, tokenizer = load_model(name)
        assert isinstance(model, Qwen2ForCausalLM)
        assert tokenizer.eos_token == "<|im_end|>"


def test_lora_adapters_are_drawn_from_their_seed_not_from_whatever_ran_before():
    tokenizer = build_char_tokenizer()

    def adapters(seed, *, draws_before):
        torch.rand(draws_before)  # the global generator in some other state
        model = add_lora(build_tiny_model(tokenizer), r=4, seed=seed)
        return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_A" in name}

    first, second = adapters(0, draws_before=1), adapters(0, draws_before=7)
    assert first and all(torch.equal(first[name], second[name]) for name in first)
    other = adapters(1, draws_before=1)
    assert not all(torch.equal(first[name], other[name]) for name in first)
    state = torch.random.get_rng_state()
    add_lora(build_tiny_model(tokenizer), r=4, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state), "add_lora must not move the global generator"
