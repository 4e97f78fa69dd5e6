"""Tests of rlbook.rollout: sampling, the Rollout structure, and recomputed log-probs."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2ForCausalLM

from rlbook.models import add_lora, build_char_tokenizer, build_tiny_model, tiny_qwen2_config
from rlbook.rollout import Rollout, completion_forward, completion_logprobs, rollout_logprobs, sample

PROMPTS = ["What is 2+3?", "Hi", "Tell me a long story about 7 cats."]  # three lengths: left padding


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, shape="test").eval()


def with_output_bias(model, tokenizer, biases: dict[str, float]):
    """A copy of ``model`` whose output layer adds ``biases`` to the logits of the named tokens."""
    biased = build_tiny_model(tokenizer, shape="test").eval()
    biased.load_state_dict(model.state_dict())
    head = torch.nn.Linear(biased.config.hidden_size, len(tokenizer), bias=True)
    head.weight = biased.lm_head.weight
    with torch.no_grad():
        head.bias.zero_()
        for token, bias in biases.items():
            head.bias[tokenizer.convert_tokens_to_ids(token)] = bias
    biased.lm_head = head
    return biased


@pytest.fixture(scope="module")
def eos_model(model, tokenizer):
    """Ends a completion with probability about 1/8 per step, and likes writing <think>."""
    return with_output_bias(model, tokenizer, {tokenizer.eos_token: 2.7, "<think>": 2.0})


def explicit_logits(model, rollout: Rollout) -> torch.Tensor:
    """(B, C, V) logits predicting each completion token, from one plain forward pass."""
    mask = rollout.attention_mask
    with torch.no_grad():
        logits = model(input_ids=rollout.input_ids, attention_mask=mask,
                       position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    width = rollout.completion_ids.shape[1]
    return logits[:, -width - 1:-1]


# ----------------------------------------------------------------------------------------------
# The Rollout structure


def test_shapes_masks_and_contiguous_groups(eos_model, tokenizer):
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=4, max_new_tokens=12, seed=0)
    batch = len(PROMPTS) * 4
    assert len(rollout) == batch and rollout.num_samples == 4
    assert rollout.prompt_ids.shape == rollout.prompt_mask.shape
    assert rollout.completion_ids.shape == rollout.completion_mask.shape == rollout.logprobs.shape
    assert rollout.completion_ids.shape[0] == batch and rollout.completion_ids.shape[1] <= 12
    assert rollout.truncated.shape == (batch,) and rollout.truncated.dtype == torch.bool
    assert len(rollout.texts) == len(rollout.prompt_texts) == batch
    # Each prompt's samples are contiguous rows with the same prompt.
    for i, prompt in enumerate(PROMPTS):
        group = slice(4 * i, 4 * (i + 1))
        assert rollout.prompt_texts[group] == [prompt] * 4
        assert (rollout.prompt_ids[group] == rollout.prompt_ids[4 * i]).all()
        real = rollout.prompt_ids[4 * i][rollout.prompt_mask[4 * i].bool()]
        assert tokenizer.decode(real) == prompt
    # Prompts are left-padded, completions right-padded, padding holds the pad id and logprob 0.
    pad = tokenizer.pad_token_id
    assert (rollout.prompt_mask.diff(dim=1) >= 0).all() and (rollout.prompt_mask[:, -1] == 1).all()
    assert (rollout.completion_mask.diff(dim=1) <= 0).all() and (rollout.completion_mask[:, 0] == 1).all()
    assert (rollout.prompt_ids[rollout.prompt_mask == 0] == pad).all()
    assert (rollout.completion_ids[rollout.completion_mask == 0] == pad).all()
    assert (rollout.logprobs[rollout.completion_mask == 0] == 0).all()
    assert (rollout.logprobs[rollout.completion_mask == 1] < 0).all()
    # The convenience views.
    assert torch.equal(rollout.input_ids, torch.cat([rollout.prompt_ids, rollout.completion_ids], 1))
    assert torch.equal(rollout.attention_mask, torch.cat([rollout.prompt_mask, rollout.completion_mask], 1))
    assert torch.equal(rollout.completion_lengths, rollout.completion_mask.sum(1))
    moved = rollout.to("cpu")
    assert isinstance(moved, Rollout) and torch.equal(moved.logprobs, rollout.logprobs)
    assert moved.texts == rollout.texts


def test_rows_stop_at_eos_and_truncation_is_flagged(eos_model, tokenizer):
    max_new_tokens = 10
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=8, max_new_tokens=max_new_tokens, seed=1)
    eos = tokenizer.eos_token_id
    lengths = rollout.completion_lengths
    assert rollout.truncated.any() and (~rollout.truncated).any(), "want both kinds of row"
    assert (lengths < max_new_tokens).any(), "some rows should stop early"
    for row in range(len(rollout)):
        tokens = rollout.completion_ids[row, : lengths[row]]
        if rollout.truncated[row]:
            assert lengths[row] == max_new_tokens and eos not in tokens.tolist()
        else:  # the EOS is the last generated token, counted by the mask, and the only one
            assert tokens[-1] == eos and eos not in tokens[:-1].tolist()


def test_texts_are_decoded_completions_without_special_tokens(eos_model, tokenizer):
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=8, max_new_tokens=16, seed=2)
    for row, text in enumerate(rollout.texts):
        generated = rollout.completion_ids[row, : rollout.completion_lengths[row]].tolist()
        assert text == tokenizer.decode([t for t in generated if t not in tokenizer.all_special_ids])
        assert tokenizer.eos_token not in text and tokenizer.pad_token not in text
    assert any("<think>" in text for text in rollout.texts), "reasoning tags are kept"


def test_same_seed_same_rollout_different_seed_different(eos_model, tokenizer):
    first = sample(eos_model, tokenizer, PROMPTS, num_samples=4, max_new_tokens=12, seed=7)
    again = sample(eos_model, tokenizer, PROMPTS, num_samples=4, max_new_tokens=12, seed=7)
    other = sample(eos_model, tokenizer, PROMPTS, num_samples=4, max_new_tokens=12, seed=8)
    assert torch.equal(first.completion_ids, again.completion_ids) and first.texts == again.texts
    assert torch.equal(first.logprobs, again.logprobs)
    assert first.texts != other.texts


def test_conversations_go_through_the_chat_template(model, tokenizer):
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1+1?"}]
    rollout = sample(model, tokenizer, [conversation, "plain"], num_samples=2, max_new_tokens=4)
    expected = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert expected.endswith("<|im_start|>assistant\n")
    assert rollout.prompt_texts == [expected, expected, "plain", "plain"]
    assert tokenizer.decode(rollout.prompt_ids[0][rollout.prompt_mask[0].bool()]) == expected


# ----------------------------------------------------------------------------------------------
# Log-probs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recomputed_logprobs_match_the_sampler(eos_model, tokenizer, temperature):
    # Mixed lengths, left padding, groups, several generation batches (re-padded when joined).
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=5, max_new_tokens=20, temperature=temperature,
                     seed=3, batch_size=6)
    assert len(set(rollout.completion_lengths.tolist())) > 3
    logprobs = rollout_logprobs(eos_model, rollout, temperature=temperature)
    assert logprobs.shape == rollout.logprobs.shape
    assert (logprobs - rollout.logprobs).abs().max() < 1e-5
    split = completion_logprobs(eos_model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                rollout.completion_mask, temperature=temperature, batch_size=4)
    assert (split - logprobs).abs().max() < 1e-5


def test_logprobs_and_entropy_follow_the_explicit_formula(eos_model, tokenizer):
    temperature = 0.7
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=3, max_new_tokens=15, temperature=temperature)
    logprobs, entropy = rollout_logprobs(eos_model, rollout, temperature=temperature, return_entropy=True)
    distributions = torch.log_softmax(explicit_logits(eos_model, rollout) / temperature, dim=-1)
    mask = rollout.completion_mask.bool()
    expected = distributions.gather(-1, rollout.completion_ids[..., None]).squeeze(-1)
    expected_entropy = -(distributions.exp() * distributions).sum(-1)
    assert torch.allclose(logprobs[mask], expected[mask], atol=1e-5)
    assert torch.allclose(entropy[mask], expected_entropy[mask], atol=1e-5)
    assert (entropy[~mask] == 0).all() and (logprobs[~mask] == 0).all()


def test_completion_logprobs_carry_gradients(model, tokenizer):
    rollout = sample(model, tokenizer, PROMPTS, max_new_tokens=6)
    logprobs = rollout_logprobs(model, rollout)
    assert logprobs.requires_grad
    logprobs.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad()


def test_shared_prompt_pass_gives_the_plain_gradient(eos_model, tokenizer):
    # Groups share a prompt (run once, handed on as a KV cache); the gradient of a loss through the
    # log-probs must equal that of one plain forward pass over every full sequence.
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=4, max_new_tokens=16, seed=1)
    weights = torch.randn(rollout.completion_ids.shape, generator=torch.Generator().manual_seed(0))

    def gradient(logprobs):
        eos_model.zero_grad()
        (logprobs * weights).sum().backward()
        grads = [p.grad.clone() for p in eos_model.parameters() if p.grad is not None]
        eos_model.zero_grad()
        return grads

    shared = gradient(rollout_logprobs(eos_model, rollout, batch_size=5))
    mask = rollout.attention_mask
    logits = eos_model(input_ids=rollout.input_ids, attention_mask=mask,
                       position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    width = rollout.completion_ids.shape[1]
    plain_logprobs = torch.log_softmax(logits[:, -width - 1:-1], dim=-1).gather(
        -1, rollout.completion_ids[..., None]).squeeze(-1) * rollout.completion_mask
    plain = gradient(plain_logprobs)
    assert len(shared) == len(plain) > 0
    for a, b in zip(shared, plain):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_greedy_matches_hf_generate(eos_model, tokenizer):
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=2, max_new_tokens=12, temperature=0)
    assert torch.equal(rollout.completion_ids[0::2], rollout.completion_ids[1::2])
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        generated = eos_model.generate(**batch, do_sample=False, max_new_tokens=12,
                                       pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    generated = generated[:, batch["input_ids"].shape[1]:]
    for i in range(len(PROMPTS)):
        length = int(rollout.completion_lengths[2 * i])
        assert generated[i, :length].tolist() == rollout.completion_ids[2 * i, :length].tolist()
    # Greedy rows record log softmax(z) of the argmax: the largest log-prob at each step.
    distributions = torch.log_softmax(explicit_logits(eos_model, rollout), dim=-1)
    mask = rollout.completion_mask.bool()
    assert torch.allclose(rollout.logprobs[mask], distributions.max(-1).values[mask], atol=1e-5)


# ----------------------------------------------------------------------------------------------
# The sampled distribution and top-p


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_first_tokens_follow_the_tempered_softmax(model, tokenizer, temperature):
    draws = 20_000
    rollout = sample(model, tokenizer, ["Hi"], num_samples=draws, max_new_tokens=1, temperature=temperature)
    with torch.no_grad():
        logits = model(**tokenizer(["Hi"], return_tensors="pt")).logits[0, -1]
    expected = torch.softmax(logits / temperature, dim=-1)
    observed = torch.bincount(rollout.completion_ids[:, 0], minlength=len(expected)).float() / draws
    total_variation = 0.5 * (observed - expected).abs().sum()
    assert total_variation < 0.05  # sampling noise alone gives about 0.03


def test_top_p_samples_only_inside_the_nucleus(model, tokenizer):
    top_p, temperature = 0.3, 1.0
    rollout = sample(model, tokenizer, PROMPTS, num_samples=12, max_new_tokens=8, top_p=top_p, seed=4)
    probs = torch.softmax(explicit_logits(model, rollout) / temperature, dim=-1)
    # The nucleus, computed token by token: keep y when the tokens more likely than y hold < top_p.
    mass_before_sampled = ((probs > probs.gather(-1, rollout.completion_ids[..., None])) * probs).sum(-1)
    mask = rollout.completion_mask.bool()
    assert (mass_before_sampled[mask] < top_p + 1e-6).all()
    # Without top-p the same model regularly picks tokens outside that nucleus.
    free = sample(model, tokenizer, PROMPTS, num_samples=12, max_new_tokens=8, seed=4)
    free_probs = torch.softmax(explicit_logits(model, free), dim=-1)
    outside = ((free_probs > free_probs.gather(-1, free.completion_ids[..., None])) * free_probs).sum(-1) >= top_p
    assert outside[free.completion_mask.bool()].float().mean() > 0.3
    # The recorded log-probs are those of the untruncated distribution.
    assert (rollout_logprobs(model, rollout) - rollout.logprobs).abs().max() < 1e-5


def test_top_p_one_changes_nothing(model, tokenizer):
    default = sample(model, tokenizer, PROMPTS, num_samples=3, max_new_tokens=8, seed=5)
    explicit = sample(model, tokenizer, PROMPTS, num_samples=3, max_new_tokens=8, seed=5, top_p=1.0)
    assert torch.equal(default.completion_ids, explicit.completion_ids)


# ----------------------------------------------------------------------------------------------
# Other models and cache paths


def test_lora_model_samples_like_its_base_model(model, tokenizer):
    lora_model = add_lora(build_tiny_model(tokenizer, shape="test"), r=4).eval()
    base = sample(model, tokenizer, PROMPTS, num_samples=3, max_new_tokens=10, seed=6)
    adapted = sample(lora_model, tokenizer, PROMPTS, num_samples=3, max_new_tokens=10, seed=6)
    assert torch.equal(base.completion_ids, adapted.completion_ids)  # LoRA starts as the identity
    logprobs = rollout_logprobs(lora_model, adapted)
    assert (logprobs - adapted.logprobs).abs().max() < 1e-5
    logprobs.sum().backward()
    assert all(p.grad is not None for n, p in lora_model.named_parameters() if p.requires_grad)


def test_model_with_another_cache_type_gives_the_same_rollout(eos_model, tokenizer):
    """A sliding-window cache takes the model's own cache path; with a window longer than every
    sequence, the model computes the same function, so the rollout must be identical."""
    config = tiny_qwen2_config(tokenizer, shape="test")
    config.use_sliding_window, config.sliding_window = True, 512
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    sliding = Qwen2ForCausalLM(config).eval()
    sliding.load_state_dict(eos_model.state_dict(), strict=False)
    sliding.lm_head = eos_model.lm_head
    cache = sliding(**tokenizer(["ab"], return_tensors="pt"), use_cache=True).cache
    assert type(cache.layers[0]).__name__ == "DynamicSlidingWindowLayer"
    fast = sample(eos_model, tokenizer, PROMPTS, num_samples=6, max_new_tokens=16, seed=9)
    plain = sample(sliding, tokenizer, PROMPTS, num_samples=6, max_new_tokens=16, seed=9)
    assert torch.equal(fast.completion_ids, plain.completion_ids)
    assert (fast.logprobs - plain.logprobs).abs().max() < 1e-5


@pytest.mark.parametrize("stopped", [[0, 1, 0, 0, 1, 0, 1], [1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1, 1], [1] * 7])
def test_rollout_cache_drops_rows_like_indexing(stopped):
    """Dropping finished rows in place keeps exactly the live rows, whatever order is asked for."""
    from rlbook.rollout import _RolloutLayer, _rows_to_keep

    keys, values = torch.randn(7, 2, 5, 4), torch.randn(7, 2, 5, 4)
    stopped = torch.tensor(stopped, dtype=torch.bool)
    rows = _rows_to_keep(stopped)
    assert sorted(rows.tolist()) == (~stopped).nonzero().squeeze(1).tolist()
    for order in (rows, rows.flip(0)):  # the in-place path, and a general reordering
        layer = _RolloutLayer(keys, values, repeats=1, capacity=9)
        layer.update(torch.ones(7, 2, 1, 4), torch.ones(7, 2, 1, 4))
        expected_keys = layer.keys[order].clone()
        layer.reorder_cache(order)
        assert torch.equal(layer.keys, expected_keys) and layer.keys.shape[2] == 6
        assert torch.equal(layer.values[:, :, :5], values[order])


def test_batch_size_and_progress_bar(eos_model, tokenizer):
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=4, max_new_tokens=8, batch_size=5, progress=True)
    assert len(rollout) == 12
    assert (rollout_logprobs(eos_model, rollout) - rollout.logprobs).abs().max() < 1e-5


# ----------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("prompts, kwargs, name", [
    ([], {}, "prompts"),
    ("What is 1+1?", {}, "prompts"),
    ([123], {}, r"prompts\[0\]"),
    (["ok", [{"role": "user"}]], {}, r"prompts\[1\]"),
    ([""], {}, r"prompts\[0\]"),
    (PROMPTS, {"num_samples": 0}, "num_samples"),
    (PROMPTS, {"max_new_tokens": 0}, "max_new_tokens"),
    (PROMPTS, {"temperature": -0.5}, "temperature"),
    (PROMPTS, {"top_p": 0.0}, "top_p"),
    (PROMPTS, {"top_p": 1.5}, "top_p"),
    (PROMPTS, {"batch_size": 0}, "batch_size"),
    (PROMPTS, {"seed": 1.5}, "seed"),
])
def test_sample_rejects_bad_input(model, tokenizer, prompts, kwargs, name):
    with pytest.raises(ValueError, match=name):
        sample(model, tokenizer, prompts, **kwargs)


def test_completion_logprobs_rejects_mismatched_shapes(model):
    ids, mask = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)
    completion, completion_mask = torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)
    cases = [
        ((ids, mask[:, :4], completion, completion_mask), {}, "prompt_mask"),
        ((ids, mask, completion, completion_mask[:, :2]), {}, "completion_mask"),
        ((ids, mask, completion[:1], completion_mask[:1]), {}, "completion_ids"),
        ((ids.float(), mask, completion, completion_mask), {}, "prompt_ids"),
        ((ids, mask, completion[0], completion_mask), {}, "completion_ids"),
        ((ids, mask, completion, completion_mask), {"temperature": -1.0}, "temperature"),
    ]
    for args, kwargs, name in cases:
        with pytest.raises(ValueError, match=name):
            completion_logprobs(model, *args, **kwargs)


# ----------------------------------------------------------------------------------------------
# Shared-prefix prefill

SYSTEM = "You are a careful assistant. Think step by step, then answer briefly.\n"
SHARED_PROMPTS = [SYSTEM + p for p in PROMPTS]


@pytest.mark.parametrize("prompts", [SHARED_PROMPTS, PROMPTS])  # a long common prefix, and none
def test_shared_prefix_logprobs_match_the_standard_layout(eos_model, tokenizer, prompts):
    rollout = sample(eos_model, tokenizer, prompts, num_samples=4, max_new_tokens=16, temperature=0.8, seed=11)
    for i, prompt in enumerate(prompts):  # the returned prompts keep the plain left-padded layout
        assert tokenizer.decode(rollout.prompt_ids[4 * i][rollout.prompt_mask[4 * i].bool()]) == prompt
    assert (rollout.prompt_mask.diff(dim=1) >= 0).all()
    assert (rollout_logprobs(eos_model, rollout, temperature=0.8) - rollout.logprobs).abs().max() < 1e-5


@pytest.mark.parametrize("batch_size", [None, 8])
def test_shared_prefix_gives_the_same_rollout_as_the_plain_prefill(eos_model, tokenizer, monkeypatch, batch_size):
    import rlbook.rollout as rollout_module
    from rlbook.rollout import _common_prefix_length

    tokens = tokenizer(SHARED_PROMPTS, add_special_tokens=False)["input_ids"]
    assert _common_prefix_length(tokens) >= len(SYSTEM)  # the trick is really used
    assert _common_prefix_length([[1, 2, 3], [1, 2]]) == 1  # every prompt keeps one token
    kwargs = dict(num_samples=4, max_new_tokens=16, seed=12, batch_size=batch_size)
    shared = sample(eos_model, tokenizer, SHARED_PROMPTS, **kwargs)
    monkeypatch.setattr(rollout_module, "_SHARE_PREFIX", False)
    plain = sample(eos_model, tokenizer, SHARED_PROMPTS, **kwargs)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    assert torch.equal(shared.prompt_ids, plain.prompt_ids) and torch.equal(shared.prompt_mask, plain.prompt_mask)
    assert (shared.logprobs - plain.logprobs).abs().max() < 1e-5


# ------------------------------------------------------------------------------ rows: select and concat


def test_select_takes_the_same_rows_of_every_field(model, tokenizer):
    rollout = sample(model, tokenizer, PROMPTS, num_samples=2, max_new_tokens=5, seed=0)
    rows = torch.tensor([4, 0, 3])
    picked = rollout.select(rows)
    assert len(picked) == 3 and picked.num_samples == rollout.num_samples
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "truncated"):
        assert torch.equal(getattr(picked, name), getattr(rollout, name)[rows])
    assert picked.texts == [rollout.texts[i] for i in (4, 0, 3)]
    assert picked.prompt_texts == [rollout.prompt_texts[i] for i in (4, 0, 3)]
    assert torch.equal(rollout.select([4, 0, 3]).completion_ids, picked.completion_ids)  # a list works too


@pytest.mark.parametrize("rows", [torch.tensor([[0, 1]]), torch.tensor([0.0, 1.0]), torch.tensor([True, False]),
                                  [0, 9], "ab"])
def test_select_rejects_bad_rows(model, tokenizer, rows):
    rollout = sample(model, tokenizer, PROMPTS[:2], max_new_tokens=3, seed=0)
    with pytest.raises(ValueError, match="rows"):
        rollout.select(rows)


def test_concat_repads_prompts_left_and_completions_right(model, tokenizer):
    short = sample(model, tokenizer, ["Hi"], num_samples=2, max_new_tokens=2, seed=0)
    long = sample(model, tokenizer, [PROMPTS[2]], num_samples=1, max_new_tokens=6, seed=1)
    pad = tokenizer.pad_token_id
    joined = Rollout.concat([short, long], pad_id=pad)
    assert len(joined) == 3 and joined.texts == short.texts + long.texts
    assert joined.prompt_ids.shape[1] == long.prompt_ids.shape[1]
    assert joined.completion_ids.shape[1] == max(short.completion_ids.shape[1], long.completion_ids.shape[1])
    width = short.prompt_ids.shape[1]
    assert torch.equal(joined.prompt_ids[:2, -width:], short.prompt_ids)  # the prompt keeps its right edge
    assert (joined.prompt_mask[:2, :-width] == 0).all() and (joined.prompt_ids[:2, :-width] == pad).all()
    assert torch.equal(joined.completion_ids[:2, :short.completion_ids.shape[1]], short.completion_ids)
    assert torch.equal(joined.select(torch.tensor([2])).completion_ids, long.completion_ids)
    # the re-padded rows score as they did on their own
    assert torch.allclose(rollout_logprobs(model, joined)[:2, :short.completion_ids.shape[1]],
                          rollout_logprobs(model, short), atol=1e-5)


@pytest.mark.parametrize("parts, pad_id, name", [([], 0, "parts"), (["x"], 0, "parts"), (None, 0, "parts"),
                                                 ("rollout", -1, "pad_id")])
def test_concat_rejects_bad_input(model, tokenizer, parts, pad_id, name):
    if parts == "rollout":
        parts = [sample(model, tokenizer, ["Hi"], max_new_tokens=2, seed=0)]
    with pytest.raises(ValueError, match=name):
        Rollout.concat(parts, pad_id=pad_id)


# ------------------------------------------------------------------------------ one completion forward


def test_completion_forward_gives_logits_and_hidden_states_of_each_completion_token(eos_model, tokenizer):
    rollout = sample(eos_model, tokenizer, PROMPTS, num_samples=2, max_new_tokens=6, seed=0)
    args = (rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask)
    batch, width = rollout.completion_ids.shape
    with torch.no_grad():
        logits = completion_forward(eos_model, *args)
        hidden = completion_forward(eos_model, *args, output="hidden_states")
    assert logits.shape == (batch, width, len(tokenizer))
    assert hidden.shape == (batch, width, eos_model.config.hidden_size)
    assert torch.allclose(eos_model.lm_head(hidden), logits, atol=1e-5)  # the output layer reads these states
    token_logprobs = torch.log_softmax(logits, -1).gather(-1, rollout.completion_ids[..., None]).squeeze(-1)
    # the log-probs of what the sampler drew
    assert torch.allclose(token_logprobs * rollout.completion_mask, rollout.logprobs, atol=1e-4)


@pytest.mark.parametrize("change, name", [({"output": "probs"}, "output"),
                                          ({"prompt_mask": torch.ones(2, 3)}, "prompt_mask"),
                                          ({"completion_mask": torch.ones(2, 9)}, "completion_mask"),
                                          ({"completion_ids": torch.ones(3, 4, dtype=torch.long)}, "completion_ids")])
def test_completion_forward_rejects_bad_input(model, change, name):
    args = dict(prompt_ids=torch.ones(2, 4, dtype=torch.long), prompt_mask=torch.ones(2, 4, dtype=torch.long),
                completion_ids=torch.ones(2, 5, dtype=torch.long), completion_mask=torch.ones(2, 5, dtype=torch.long))
    args.update(change)
    output = args.pop("output", "logits")
    with pytest.raises(ValueError, match=name):
        completion_forward(model, **args, output=output)
