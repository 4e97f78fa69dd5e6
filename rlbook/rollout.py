"""Rollouts: sample completions from a causal LM in batches, and recompute their log-probs.

Every online method in the book starts the same way: take B = n_prompts × G prompts (each prompt's
G samples contiguous), let the policy write a completion for each, and keep, for every sampled
token, its log-probability under the policy that sampled it (``old_logp`` in the losses).

``sample`` is a plain autoregressive loop over ``model.forward`` with a KV cache, so it runs any
``transformers`` causal LM (a zoo model on a CPU, ``Qwen/Qwen2.5-0.5B-Instruct`` on a GPU):

1. Left-pad the distinct prompts and run them through the model once (the *prefill*); repeat its
   cache and last logits for each prompt's ``num_samples`` rows. Position ids are counted from
   each row's first real token, so left padding shifts nothing.
2. At every step, turn the last logits into a distribution, draw one token per row, and feed only
   that token back (the cache holds the rest).
3. A row that emits an end-of-sequence token is finished: it is *dropped from the batch and from
   the cache*, so a short answer stops costing compute as soon as it ends.

What makes it fast on a 2-core CPU (``benchmarks/rollout.py`` measures it against
``model.generate``): the loop runs under ``torch.inference_mode``; the prefill is shared by a
group; dropping finished rows (``generate`` keeps computing every row until the last one ends);
and a KV cache with room for the whole rollout, so a step writes one token in place instead of
re-copying the cache with ``torch.cat``, and dropping rows moves only the few rows that fill the
holes. For models whose cache is not plain full attention (sliding windows, linear attention) the
model's own cache is used, with the same results.

The prefill also shares the prompts' common prefix. In RL every prompt starts with the same chat
template (and often the same system prompt), so the prefill of a batch first runs the longest
common prefix of its prompts' tokens once, for one row, repeats that cache for every prompt, and
then runs only the remaining suffixes, left-padded among themselves: the cache holds
[prefix][pads][suffix], with the attention mask 0 on the pads and position ids counting real
tokens. Each real token thus attends to exactly the keys and positions it would see in the plain
left-padded layout (padding is masked out either way), so the result is the same up to float
rounding; the returned Rollout keeps the plain left-padded prompts. (Skipped for models whose cache
is not plain full attention; ``_SHARE_PREFIX = False`` turns it off.)

The log-prob recorded for a sampled token y_t is that of the temperature-scaled distribution,

    logprobs[i, t] = log softmax(z_t / T)[y_t],        z_t = the model's logits at step t,

taken *before* top-p truncation. This is the number ``completion_logprobs`` recomputes with one
forward pass over the whole sequence (what a trainer does), and the two agree to float precision.
With top-p < 1 the token was really drawn from the renormalised nucleus, so the recorded value is
not exactly the sampling probability; the book, like TRL's GRPOTrainer, uses the untruncated one.

Simplified on purpose, compared with ``model.generate``: no beam search, no top-k, no repetition
or length penalties, no stop strings, no speculative decoding; one stopping rule (an
end-of-sequence token or ``max_new_tokens``). These are not used by the RL methods of the book,
and leaving them out keeps the loop short enough to read and fast on a 2-core CPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers.cache_utils import DynamicCache, DynamicLayer

from rlbook._checks import check_int, check_positive, check_same_shape
from rlbook.padding import cat_padded, pad_to, stack_padded

__all__ = ["Rollout", "completion_forward", "completion_logprobs", "format_prompts", "prompt_text", "rollout_logprobs",
           "sample"]

_SHARE_PREFIX = True  # prefill the prompts' common prefix once (see the module docstring)


@dataclass
class Rollout:
    """A batch of sampled completions, B = n_prompts × num_samples rows, groups contiguous.

    - ``prompt_ids`` (B, P), ``prompt_mask`` (B, P): the prompts, left-padded with the pad id.
    - ``completion_ids`` (B, C), ``completion_mask`` (B, C): the completions, right-padded; the
      mask is 1 for every generated token, the final end-of-sequence token included.
      C is the longest completion in the batch (at most ``max_new_tokens``).
    - ``logprobs`` (B, C): log softmax(logits / temperature)[token] of each sampled token under the
      sampling policy, before top-p truncation; 0 at padding.
    - ``truncated`` (B,): True where no end-of-sequence token came within ``max_new_tokens``.
    - ``texts``: the decoded completions, without special tokens (end-of-sequence, padding); tags
      such as ``<think>`` and ``<answer>`` are kept. ``prompt_texts``: the formatted prompt of each row.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logprobs: torch.Tensor
    truncated: torch.Tensor
    texts: list[str]
    prompt_texts: list[str]
    num_samples: int

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def input_ids(self) -> torch.Tensor:
        """(B, P + C) prompt and completion tokens, side by side."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """(B, P + C) 1 on every real token of the full sequence."""
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def completion_lengths(self) -> torch.Tensor:
        """(B,) number of generated tokens per row, end-of-sequence token included."""
        return self.completion_mask.sum(dim=1)

    def to(self, device: str | torch.device) -> Rollout:
        """The same rollout with its tensors on ``device``."""
        tensors = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **tensors)

    def select(self, rows) -> Rollout:
        """The rollout restricted to ``rows`` (a 1-D tensor or list of row indices, in that order).

        Every tensor field and both text lists are indexed alike; ``num_samples`` is kept as it is,
        so a selection that breaks groups apart is the caller's to interpret.
        """
        rows = _row_indices(rows, len(self))
        indices = rows.tolist()
        tensors = {f.name: getattr(self, f.name)[rows] for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **tensors, texts=[self.texts[i] for i in indices],
                                   prompt_texts=[self.prompt_texts[i] for i in indices])

    @staticmethod
    def concat(parts: list[Rollout], *, pad_id: int) -> Rollout:
        """Stack rollouts row-wise: prompts re-padded on the left with ``pad_id``, completions on the right
        (log-probs with 0, masks with 0, ``truncated`` with False); ``num_samples`` is the first part's."""
        if not isinstance(parts, (list, tuple)) or not parts or not all(isinstance(p, Rollout) for p in parts):
            raise ValueError(f"parts must be a non-empty list of Rollouts, got {parts!r:.80}")
        check_int("pad_id", pad_id, minimum=0)
        return dataclasses.replace(
            parts[0],
            prompt_ids=cat_padded([p.prompt_ids for p in parts], pad_id, side="left"),
            prompt_mask=cat_padded([p.prompt_mask for p in parts], 0, side="left"),
            completion_ids=cat_padded([p.completion_ids for p in parts], pad_id, side="right"),
            completion_mask=cat_padded([p.completion_mask for p in parts], 0, side="right"),
            logprobs=cat_padded([p.logprobs for p in parts], 0.0, side="right"),
            truncated=torch.cat([p.truncated for p in parts]),
            texts=[t for p in parts for t in p.texts],
            prompt_texts=[t for p in parts for t in p.prompt_texts])


def _row_indices(rows, n_rows: int) -> torch.Tensor:
    """``rows`` as a 1-D int64 tensor of indices into ``n_rows`` rows; ``ValueError`` naming ``rows`` if not."""
    if not isinstance(rows, torch.Tensor):
        try:
            rows = torch.as_tensor(list(rows), dtype=torch.long)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"rows must be a 1-D sequence of row indices, got {rows!r:.80}") from None
    if rows.dim() != 1 or rows.dtype in (torch.bool,) or rows.is_floating_point() or rows.is_complex():
        raise ValueError(f"rows must be a 1-D tensor of integer row indices, got shape {tuple(rows.shape)} "
                         f"and dtype {rows.dtype}")
    if rows.numel() and (int(rows.min()) < -n_rows or int(rows.max()) >= n_rows):
        raise ValueError(f"rows must index the rollout's {n_rows} rows, got indices from {int(rows.min())} "
                         f"to {int(rows.max())}")
    return rows


# ----------------------------------------------------------------------------------------------
# Sampling


def sample(model, tokenizer, prompts, *, num_samples: int = 1, max_new_tokens: int = 64,
           temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, batch_size: int | None = None,
           progress: bool = False) -> Rollout:
    """Sample ``num_samples`` completions for each prompt; rows ``i*num_samples ... (i+1)*num_samples - 1``
    belong to ``prompts[i]``.

    ``prompts`` is a list of strings, used verbatim (no special tokens are added), or a list of
    conversations (lists of ``{"role", "content"}`` dicts) that go through the tokenizer's chat
    template with the assistant turn opened. Each row stops at an end-of-sequence token (the
    tokenizer's, and any in ``model.generation_config``) or after ``max_new_tokens`` tokens.

    ``temperature`` T > 0 samples from softmax(z / T); T = 0 is greedy decoding (argmax), whose
    recorded log-probs are those of softmax(z). ``top_p`` < 1 samples from the nucleus: the most
    likely tokens whose total probability first reaches ``top_p`` (top_p = 1 changes nothing).
    ``batch_size`` caps the rows generated at once (default: all; rounded down to whole groups of
    ``num_samples``, at least one group). ``seed`` fixes the draws: the same seed, model and
    arguments give the same rollout. The model is run as it is: call ``model.eval()`` first if it
    has dropout.
    """
    texts = format_prompts(tokenizer, prompts)
    _check_sampling_args(num_samples, max_new_tokens, temperature, top_p, seed, batch_size)
    device = _model_device(model)
    prompt_tokens = _tokenize(tokenizer, texts)
    pad_id = _pad_token_id(tokenizer)
    stop_ids = torch.tensor(_stop_token_ids(model, tokenizer), dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)

    prompts_per_batch = len(texts) if batch_size is None else max(1, batch_size // num_samples)
    batches = []
    with tqdm(total=len(texts) * num_samples, desc="sampling", unit="rollout", disable=not progress) as bar:
        for start in range(0, len(texts), prompts_per_batch):
            batches.append(_sample_batch(
                model, prompt_tokens[start:start + prompts_per_batch], num_samples=num_samples,
                max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, stop_ids=stop_ids,
                pad_id=pad_id, generator=generator, on_finished=bar.update))
    return _assemble(batches, tokenizer, pad_id=pad_id, prompt_texts=[t for t in texts for _ in range(num_samples)],
                     num_samples=num_samples)


@torch.inference_mode()
def _sample_batch(model, token_lists, *, num_samples, max_new_tokens, temperature, top_p, stop_ids,
                  pad_id, generator, on_finished):
    """The decoding loop for one batch of distinct prompts (token lists), ``num_samples`` rows each.

    The prefill runs once per distinct prompt (see ``_prefill``); its cache and logits are then
    repeated for the prompt's samples. ``live`` maps each row still being generated to its output
    row; finished rows leave the batch, its attention mask and its KV cache.
    """
    device = _model_device(model)
    prompt_ids, prompt_mask = stack_padded(token_lists, pad_id, side="left", device=device)
    logits, cache, attention_mask = _prefill(model, token_lists, prompt_ids, prompt_mask, pad_id)
    prompt_ids, prompt_mask, attention_mask, logits = (t.repeat_interleave(num_samples, dim=0)
                                                       for t in (prompt_ids, prompt_mask, attention_mask, logits))
    cache = _rollout_cache(cache, repeats=num_samples, capacity=attention_mask.shape[1] + max_new_tokens)

    batch = prompt_ids.shape[0]
    completion_ids = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.full((batch,), max_new_tokens, dtype=torch.long, device=device)
    truncated = torch.ones(batch, dtype=torch.bool, device=device)
    live = torch.arange(batch, device=device)
    next_position = attention_mask.sum(dim=1, keepdim=True)
    for step in range(max_new_tokens):
        tokens, token_logprobs = _draw(logits, temperature, top_p, generator)
        completion_ids[live, step] = tokens
        logprobs[live, step] = token_logprobs
        stopped = torch.isin(tokens, stop_ids)
        if stopped.any():
            lengths[live[stopped]] = step + 1
            truncated[live[stopped]] = False
            on_finished(int(stopped.sum()))
            rows = _rows_to_keep(stopped)
            live, tokens, attention_mask, next_position = (t[rows] for t in
                                                           (live, tokens, attention_mask, next_position))
            cache.reorder_cache(rows)
        if step == max_new_tokens - 1 or live.numel() == 0:
            break
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(live.numel(), 1)], dim=1)
        logits, cache = _last_logits(model, tokens[:, None], attention_mask, next_position, cache)
        next_position = next_position + 1
    on_finished(live.numel())
    return dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                logprobs=logprobs, lengths=lengths, truncated=truncated)


def _prefill(model, token_lists, prompt_ids, prompt_mask, pad_id):
    """Run the distinct prompts through the model; returns the last logits, the cache and its mask.

    With a common prefix of at least 2 tokens (and at least one token left in every prompt), the
    prefix is run once and its cache repeated; then only the left-padded suffixes are run, so the
    cache's layout is [prefix][pads][suffix]. Otherwise (or if the cache is not plain full
    attention) the plain left-padded prompts are run.
    """
    shared = _common_prefix_length(token_lists) if _SHARE_PREFIX else 0
    if shared >= 2:
        prefix = prompt_ids.new_tensor([token_lists[0][:shared]])
        _, cache = _last_logits(model, prefix, torch.ones_like(prefix), _position_ids(torch.ones_like(prefix)), None)
        if _is_plain(cache):
            cache.batch_repeat_interleave(len(token_lists))
            suffix_ids, suffix_mask = stack_padded([ids[shared:] for ids in token_lists], pad_id, side="left",
                                                   device=prompt_ids.device)
            mask = torch.cat([suffix_mask.new_ones(len(token_lists), shared), suffix_mask], dim=1)
            logits, cache = _last_logits(model, suffix_ids, mask, _position_ids(mask)[:, shared:], cache)
            return logits, cache, mask
    logits, cache = _last_logits(model, prompt_ids, prompt_mask, _position_ids(prompt_mask), cache=None)
    return logits, cache, prompt_mask


def _common_prefix_length(token_lists):
    """Length of the longest common prefix of the token lists, leaving every list at least one token."""
    first, limit = token_lists[0], min(len(ids) for ids in token_lists) - 1
    length = 0
    while length < limit and all(ids[length] == first[length] for ids in token_lists):
        length += 1
    return length


def _is_plain(cache):
    """Whether every layer of ``cache`` is a plain full-attention DynamicLayer holding keys."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer and layer.is_initialized for layer in layers)


def _rows_to_keep(stopped):
    """The unfinished rows, ordered so that rows that stay in place come first and each finished row
    among the first ones is replaced by an unfinished row from the end (so few rows move)."""
    kept = int((~stopped).sum())
    rows = torch.arange(kept, device=stopped.device)
    holes = stopped[:kept].nonzero().squeeze(1)
    rows[holes] = (~stopped[kept:]).nonzero().squeeze(1) + kept
    return rows


def _position_ids(mask):
    """Positions counted from each row's first real token (left padding shifts nothing)."""
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


def _last_logits(model, input_ids, attention_mask, position_ids, cache):
    """One forward pass; returns the logits at the last position (b, V) and the updated cache."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1], out.cache


class _RolloutLayer(DynamicLayer):
    """One attention layer's keys and values, in buffers with room for the whole rollout.

    ``transformers``' DynamicLayer appends a token with ``torch.cat``, copying the whole cache at
    every step; here a token is written in place. Dropping finished rows moves only the rows that
    fill their slots (see ``_rows_to_keep``), then the buffers are cut to the live rows (a view).
    """

    def __init__(self, keys, values, *, repeats, capacity):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        batch, heads, length, _ = keys.shape
        self.key_buffer = keys.new_empty((batch * repeats, heads, capacity, keys.shape[-1]))
        self.value_buffer = values.new_empty((batch * repeats, heads, capacity, values.shape[-1]))
        for buffer, states in ((self.key_buffer, keys), (self.value_buffer, values)):
            # Each prompt's states copied once into its ``repeats`` rows (a broadcast, no repeated copy).
            buffer.view(batch, repeats, heads, capacity, -1)[:, :, :, :length] = states[:, None]
        self._set_length(length)

    def _set_length(self, length):
        """``keys`` / ``values`` (what attention reads) are views of the filled part of the buffers."""
        self.length = length
        self.keys, self.values = self.key_buffer[:, :, :length], self.value_buffer[:, :, :length]

    def update(self, key_states, value_states, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.key_buffer[:, :, self.length:end] = key_states
        self.value_buffer[:, :, self.length:end] = value_states
        self._set_length(end)
        return self.keys, self.values

    def reorder_cache(self, rows):
        """Keep ``rows``, in that order. When every moved row comes from past the kept ones (as
        ``_rows_to_keep`` arranges), rows are moved inside the buffers; otherwise they are copied."""
        kept = rows.numel()
        moved = (rows != torch.arange(kept, device=rows.device)).nonzero().squeeze(1)
        if bool((rows[moved] >= kept).all()):  # only finished rows are overwritten: move in place
            for buffer in (self.key_buffer, self.value_buffer):
                buffer[moved, :, :self.length] = buffer[rows[moved], :, :self.length]
            self.key_buffer, self.value_buffer = self.key_buffer[:kept], self.value_buffer[:kept]
        else:
            self.key_buffer, self.value_buffer = self.key_buffer[rows], self.value_buffer[rows]
        self._set_length(self.length)


def _rollout_cache(cache, *, repeats, capacity):
    """The prefill's cache, each row repeated ``repeats`` times, ready for the decoding loop.

    A cache of plain DynamicLayers (every full-attention model) is rebuilt from _RolloutLayers;
    any other (sliding windows, linear attention) is kept as the model made it.
    """
    if _is_plain(cache):
        cache.layers = [_RolloutLayer(layer.keys, layer.values, repeats=repeats, capacity=capacity)
                        for layer in cache.layers]
    elif repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache


def _draw(logits, temperature, top_p, generator):
    """Draw one token per row; returns the tokens (b,) and their log-probs (b,) before top-p."""
    logprobs = torch.log_softmax(_scaled_logits(logits, temperature), dim=-1)
    if temperature == 0:
        tokens = logprobs.argmax(dim=-1)
    else:
        probs = logprobs.exp()
        if top_p < 1.0:
            probs = _nucleus(probs, top_p)
        tokens = _inverse_cdf_sample(probs, generator)
    return tokens, logprobs.gather(1, tokens[:, None]).squeeze(1)


def _inverse_cdf_sample(weights, generator):
    """One draw per row from unnormalised ``weights`` (b, V): the first token whose cumulative weight
    exceeds u ~ Uniform(0, total). Same distribution as ``torch.multinomial``, which on a CPU
    draws V exponentials per row; this draws one uniform per row and is many times faster."""
    cumulative = weights.cumsum(dim=-1)
    u = torch.rand((weights.shape[0], 1), generator=generator, device=weights.device) * cumulative[:, -1:]
    tokens = torch.searchsorted(cumulative, u, right=True).squeeze(1)
    return tokens.clamp(max=weights.shape[-1] - 1)  # u can round up to the total


def _nucleus(probs, top_p):
    """Zero every token outside the nucleus: keep a token when the tokens more likely than it hold
    less than ``top_p`` of the mass (the most likely token is always kept). Not renormalised:
    sampling only needs weights."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def _scaled_logits(logits, temperature):
    """logits / T in float32; T = 0 (greedy) scores with T = 1."""
    logits = logits.float()
    return logits / temperature if temperature not in (0, 1) else logits


def _assemble(batches, tokenizer, *, pad_id, prompt_texts, num_samples) -> Rollout:
    """Join the batches into one Rollout: prompts re-padded on the left, completions cut to the longest."""
    lengths = torch.cat([b["lengths"] for b in batches])
    width = int(lengths.max())
    prompt_ids = cat_padded([b["prompt_ids"] for b in batches], pad_id, side="left")
    prompt_mask = cat_padded([b["prompt_mask"] for b in batches], 0, side="left")
    completion_ids = torch.cat([b["completion_ids"][:, :width] for b in batches])
    logprobs = torch.cat([b["logprobs"][:, :width] for b in batches])
    completion_mask = (torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]).long()
    truncated = torch.cat([b["truncated"] for b in batches])
    return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                   completion_mask=completion_mask, logprobs=logprobs, truncated=truncated,
                   texts=_decode(tokenizer, completion_ids, lengths),
                   prompt_texts=prompt_texts, num_samples=num_samples)


def _decode(tokenizer, completion_ids, lengths) -> list[str]:
    """Decode each completion; special tokens (end-of-sequence, padding, chat markers) are left out,
    ordinary added tokens such as ``<think>`` are kept (the convention of TRL's trainers)."""
    rows = [ids[:n] for ids, n in zip(completion_ids.tolist(), lengths.tolist())]
    return tokenizer.batch_decode(rows, skip_special_tokens=True, clean_up_tokenization_spaces=False)


# ----------------------------------------------------------------------------------------------
# Log-probs of given completions (what a trainer computes, with gradients)


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                        temperature: float = 1.0, batch_size: int | None = None, return_entropy: bool = False):
    """Per-token log-probs (B, C) of ``completion_ids`` after ``prompt_ids`` under ``model``.

    logp[i, t] = log softmax(z[i, t] / T)[completion_ids[i, t]], with z[i, t] the logits that
    predict completion token t given the prompt and completion tokens before it (left-padded
    prompt, right-padded completion, as in a Rollout). 0 where ``completion_mask`` is 0.
    With ``return_entropy`` also returns the entropy of each softmax(z / T), (B, C), 0 at padding.
    Gradients flow when the caller has them enabled (training); wrap in ``torch.no_grad()`` for
    a reference or old policy. T = 0 scores with T = 1, the convention of ``sample``'s greedy mode.

    How the work is cut, two tricks a trainer needs on a CPU (the numbers are those of one plain
    forward pass over every full sequence, to float rounding; ``tests/test_rollout.py`` checks
    values and gradients):

    - **Each distinct prompt runs once.** In group methods the G rows of a prompt share it, so
      the prompt (all but its last token) is run once per distinct prompt, and its keys and values
      are handed to each of its rows as a KV cache; gradients flow back through that cache into
      the one shared pass. On the book's prompts (about 36 tokens, answers of about 15) this
      removes most of the tokens a group update would otherwise run.
    - **Rows are scored ``batch_size`` at a time after sorting by completion length** (default
      ``SCORING_ROWS``), each chunk cut to its own longest completion, so short answers do not pay
      for the batch's longest one.

    Models whose cache is not plain full attention (sliding windows, linear attention), and
    prompts of a single token, are scored by the plain pass over the full sequences.
    """
    _check_scoring_args(prompt_ids, prompt_mask, completion_ids, completion_mask, temperature, batch_size)
    device = _model_device(model)
    prompt_ids, prompt_mask, completion_ids, completion_mask = (
        t.to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask))
    prompts = _SharedPrompts(model, prompt_ids, prompt_mask)
    lengths = completion_mask.sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    width = completion_ids.shape[1]
    logprobs = completion_ids.new_zeros(completion_ids.shape, dtype=torch.float32)
    entropies = torch.zeros_like(logprobs) if return_entropy else None
    for rows in order.split(batch_size or SCORING_ROWS):
        cut = max(int(lengths[rows].max()), 1)
        logits = prompts.completion_logits(rows, completion_ids[rows, :cut], completion_mask[rows, :cut])
        token_logprobs, entropy = _token_logprobs(logits, completion_ids[rows, :cut], completion_mask[rows, :cut],
                                                  temperature, return_entropy)
        logprobs = logprobs.index_put((rows,), pad_to(token_logprobs, width))
        if return_entropy:
            entropies = entropies.index_put((rows,), pad_to(entropy, width))
    return (logprobs, entropies) if return_entropy else logprobs


# Rows per forward pass in ``completion_logprobs`` (after sorting by completion length).
SCORING_ROWS = 16


def rollout_logprobs(model, rollout: Rollout, *, temperature: float = 1.0, batch_size: int | None = None,
                     return_entropy: bool = False):
    """``completion_logprobs`` of a Rollout's completions under ``model``."""
    return completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                               rollout.completion_mask, temperature=temperature, batch_size=batch_size,
                               return_entropy=return_entropy)


def completion_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                       output: str = "logits") -> torch.Tensor:
    """One plain forward pass over the full sequences; returns, for each completion token, what predicts it.

    The input is prompt (left-padded) then completion (right-padded), as in a Rollout, with
    positions counted from each row's first real token. Entry t of the result belongs to position
    P − 1 + t, the one that chooses completion token t:

    - ``output="logits"``: the (B, C, V) logits z[:, t] (``completion_logprobs`` turns them into
      log softmax(z / T)[y_t]; only the C + 1 last positions' logits are computed);
    - ``output="hidden_states"``: the (B, C, H) last hidden states (after the final norm), which
      the output layer or a value head (``rlbook.trainers.Critic``) reads.

    Gradients flow when the caller has them enabled. No KV cache is kept.
    """
    if output not in ("logits", "hidden_states"):
        raise ValueError(f"output must be 'logits' or 'hidden_states', got {output!r}")
    _check_scoring_args(prompt_ids, prompt_mask, completion_ids, completion_mask, 1.0, None)
    width = completion_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
    positions = _position_ids(attention_mask)
    if output == "logits":
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                     use_cache=False, logits_to_keep=width + 1).logits[:, :-1]
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                output_hidden_states=True, use_cache=False, logits_to_keep=1)
    return out.hidden_states[-1][:, -width - 1:-1]


class _SharedPrompts:
    """The distinct prompts of a batch, each run through the model once, ready to be continued.

    ``completion_logits(rows, ids, mask)`` returns the logits that predict each completion token of
    ``rows``: the rows' shared prompt keys and values (all but the prompt's last token) are
    gathered into a cache, and the last prompt token plus the completion (minus its last token)
    are run on top of it. Without sharing (see ``completion_logprobs``) the full sequences are run.
    """

    def __init__(self, model, prompt_ids, prompt_mask):
        self.model, self.prompt_ids, self.prompt_mask = model, prompt_ids, prompt_mask
        self.keys_values = None
        if prompt_ids.shape[1] < 2:
            return
        distinct, self.prompt_of_row = torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0,
                                                    return_inverse=True)
        ids, mask = distinct[:, :prompt_ids.shape[1] - 1], distinct[:, prompt_ids.shape[1]:-1]
        cache = model(input_ids=ids, attention_mask=mask, position_ids=_position_ids(mask), use_cache=True,
                      logits_to_keep=1).cache
        if _is_plain(cache):
            self.keys_values = [(layer.keys, layer.values) for layer in cache.layers]

    def completion_logits(self, rows, completion_ids, completion_mask):
        prompt_mask = self.prompt_mask[rows]
        if self.keys_values is None:  # the plain pass: the logits at P-1 ... P+C-2 predict the completion
            return completion_forward(self.model, self.prompt_ids[rows], prompt_mask, completion_ids, completion_mask)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
        positions = _position_ids(attention_mask)
        prompt_rows = self.prompt_of_row[rows]
        cache = DynamicCache([(keys[prompt_rows], values[prompt_rows]) for keys, values in self.keys_values])
        shown = prompt_mask.shape[1] - 1  # prompt tokens already in the cache
        input_ids = torch.cat([self.prompt_ids[rows, -1:], completion_ids[:, :-1]], dim=1)
        return self.model(input_ids=input_ids, attention_mask=attention_mask[:, :-1],
                          position_ids=positions[:, shown:-1], cache=cache, use_cache=True).logits


def _token_logprobs(logits, completion_ids, completion_mask, temperature, return_entropy):
    """log p(y) and (optionally) the entropy of each position, from logits (b, C, V); 0 at padding.

    log p(y) = z_y - logsumexp(z) and H = logsumexp(z) - sum_v p_v z_v, with z = logits / T: the
    log-probs need no second (b, C, V) tensor, which matters for a 150k-token vocabulary.
    """
    logits = _scaled_logits(logits, temperature)
    log_normalizer = torch.logsumexp(logits, dim=-1)
    real = completion_mask.bool()
    token_logprobs = logits.gather(-1, completion_ids[..., None]).squeeze(-1) - log_normalizer
    if not return_entropy:
        return token_logprobs.where(real, 0.0), None
    entropy = log_normalizer - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    return token_logprobs.where(real, 0.0), entropy.where(real, 0.0)


# ----------------------------------------------------------------------------------------------
# Prompts, tokens, padding, checks


def prompt_text(tokenizer, prompt, *, name: str = "prompt") -> str:
    """A prompt as the model reads it: a string verbatim (no special tokens added), a conversation
    (a list of ``{"role", "content"}`` dicts) through the tokenizer's chat template with the
    assistant turn opened. ``name`` is the argument an error names."""
    if isinstance(prompt, str):
        return prompt
    if _is_conversation(prompt):
        return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    raise ValueError(f"{name} must be a string or a list of {{'role', 'content'}} dicts, got {prompt!r:.80}")


def format_prompts(tokenizer, prompts) -> list[str]:
    """``prompt_text`` of each of a non-empty list of prompts: what ``sample`` feeds the model."""
    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError(f"prompts must be a non-empty list of strings or conversations, got {prompts!r:.80}")
    return [prompt_text(tokenizer, prompt, name=f"prompts[{i}]") for i, prompt in enumerate(prompts)]


def _is_conversation(prompt) -> bool:
    return (isinstance(prompt, (list, tuple)) and len(prompt) > 0
            and all(isinstance(m, dict) and {"role", "content"} <= m.keys() for m in prompt))


def _tokenize(tokenizer, texts) -> list[list[int]]:
    token_lists = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    for i, ids in enumerate(token_lists):
        if len(ids) == 0:
            raise ValueError(f"prompts[{i}] is empty: a prompt needs at least one token")
    return token_lists


def _pad_token_id(tokenizer) -> int:
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    return 0


def _stop_token_ids(model, tokenizer) -> list[int]:
    """The tokenizer's end-of-sequence id and those of the model's generation config."""
    ids = {tokenizer.eos_token_id}
    generation_config = getattr(model, "generation_config", None)
    config_ids = getattr(generation_config, "eos_token_id", None)
    ids.update(config_ids if isinstance(config_ids, (list, tuple)) else [config_ids])
    return sorted(i for i in ids if i is not None)


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


def _check_sampling_args(num_samples, max_new_tokens, temperature, top_p, seed, batch_size) -> None:
    check_int("num_samples", num_samples, minimum=1)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_positive("temperature", temperature, allow_zero=True)
    if check_positive("top_p", top_p) > 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    check_int("seed", seed)
    if batch_size is not None:
        check_int("batch_size", batch_size, minimum=1)


def _check_scoring_args(prompt_ids, prompt_mask, completion_ids, completion_mask, temperature, batch_size) -> None:
    named = dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                 completion_mask=completion_mask)
    for name, tensor in named.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{name} must be a 2-D tensor (B, T), got {shape}")
    for name in ("prompt_ids", "completion_ids"):
        if named[name].is_floating_point() or named[name].dtype == torch.bool:
            raise ValueError(f"{name} must hold integer token ids, got dtype {named[name].dtype}")
    check_same_shape(prompt_ids=prompt_ids, prompt_mask=prompt_mask)
    check_same_shape(completion_ids=completion_ids, completion_mask=completion_mask)
    if completion_ids.shape[0] != prompt_ids.shape[0]:
        raise ValueError(f"completion_ids must have as many rows as prompt_ids ({prompt_ids.shape[0]}), "
                         f"got {completion_ids.shape[0]}")
    check_positive("temperature", temperature, allow_zero=True)
    if batch_size is not None:
        check_int("batch_size", batch_size, minimum=1)
