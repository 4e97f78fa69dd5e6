"""Checkers for the exercises of lesson 21 (scaling up): the memory a trained parameter costs, and the
memory (and GPUs) a 7B GRPO run needs.

The reader writes ``my_bytes_per_parameter(weight_bytes) -> (weight, gradient, optimizer)``: for full
fine-tuning with Adam, the bytes each trained parameter costs, in three parts, under ZeRO's accounting
(Rajbhandari et al. 2020, arXiv:1910.02054, §3; mixed precision as Micikevicius et al. 2018,
arXiv:1710.03740): its weight and its gradient at ``weight_bytes`` each, and the optimizer's states: Adam's
two fp32 moments (8) and, below fp32, an fp32 master copy of the weights (4). For bf16 that is (2, 2, 12),
16 in all; for fp32 the weights are their own master copy, (4, 4, 8), 16 again
(``rlbook.scaling.training_memory`` counts both so). The parts, unlike the total, change with the width.
The checker asks for bf16 and fp32 and names the likely mistake: the master copy forgotten in bf16 or
counted twice in fp32, the weights left out. Gradients kept in fp32 (Megatron-LM's default for bf16,
``accumulate_allreduce_grads_in_fp32``: 18 bytes) are named as another convention, not a mistake.

The planning exercise: the reader writes ``my_run_gib(lora) -> float``, the GiB a GRPO run of Qwen2.5-7B
needs (model states and the frozen reference, summed over the GPUs that shard them, plus the KV pool of one
generation engine holding 32 sequences of 8,192 tokens at once), with and without LoRA; the rollout of 256
sequences streams through that pool in waves. ``check_gpu_plan`` compares both with ``training_memory``,
names the likely mistake (the reference or the KV cache forgotten, the whole rollout's KV cache charged as
if generated in one wave, the reference or an fp32 master copy charged under LoRA, grouped-query attention
ignored, GB for GiB) and turns the totals into 80 GiB GPUs (each GPU keeps its own pool; ZeRO-3 shards the
rest).
"""

from __future__ import annotations

import functools
import math
import numbers

from rlbook.exercises.framework import _failed, _not_attempted, _run, _verdict
from rlbook.scaling import HUB_SHAPES, generation_waves, gpus_needed, optimizer_bytes_per_parameter, training_memory

__all__ = ["PLAN_GPU_GIB", "PLAN_IN_FLIGHT", "PLAN_LORA_FRACTION", "PLAN_MODEL", "PLAN_ROLES", "PLAN_ROLLOUT",
           "check_bytes_per_parameter", "check_gpu_plan", "plan_gpus", "reference_bytes_breakdown",
           "reference_bytes_per_parameter", "reference_run_gib"]


def reference_bytes_breakdown(weight_bytes: int) -> tuple[int, int, int]:
    """(weight, gradient, optimizer) bytes per trained parameter: the weight and gradient at
    ``weight_bytes``, Adam's fp32 moments and (below fp32) an fp32 master copy."""
    return weight_bytes, weight_bytes, optimizer_bytes_per_parameter(weight_bytes)


def reference_bytes_per_parameter(weight_bytes: int) -> int:
    """Weight + gradient at ``weight_bytes``, + Adam's fp32 moments and (below fp32) an fp32 master copy."""
    return sum(reference_bytes_breakdown(weight_bytes))


# Likely mistakes, each as the answers it gives for (bf16 = 2, fp32 = 4) bytes per weight.
MASTER_TWICE = ("an fp32 master copy beside fp32 weights: fp32 weights are their own master copy, so fp32 "
                "training keeps 4 + 4 + 8 = 16 bytes (weight, gradient, Adam's m and v)")
FP32_GRADIENTS = ("fp32 gradients: another convention, not a mistake (Megatron-LM accumulates and all-reduces "
                  "bf16 gradients in fp32, accumulate_allreduce_grads_in_fp32: 2 + 4 + 12 = 18 bytes); this "
                  "exercise uses ZeRO's accounting, where the gradient has the weights' width")
MISTAKES = {
    (16, 20): MASTER_TWICE,
    (20, 20): MASTER_TWICE + "; and in bf16 the weight and gradient take 2 bytes each, not 4",
    (12, 16): "8 bytes of states in bf16 where there are 12: the fp32 master copy (or one of Adam's two moments) "
              "is missing — mixed precision keeps an fp32 copy of the weights and m, v in fp32, 4 bytes each",
    (14, 12): "one of weight or gradient is missing: both are held at the training width",
    (14, 16): "one of weight or gradient is missing: both are held at the training width",
    (18, 16): FP32_GRADIENTS,
    (18, 20): FP32_GRADIENTS,
    (12, 8): "only the optimizer states: the weights and gradients themselves also take memory",
    (12, 12): "only the optimizer states: the weights and gradients themselves also take memory",
    (8, 16): "Adam's moments at the weights' width: they and the master copy are fp32 whatever the weights are",
    (20, 16): "an fp32 copy of the gradient counted among the optimizer's states (2 + 2 + 16): the optimizer keeps "
              "the fp32 master and Adam's m and v, 12 bytes; the gradient is counted once, at the weights' width",
}


def check_bytes_per_parameter(fn) -> bool | None:
    """Check ``fn(weight_bytes) -> (weight, gradient, optimizer)`` bytes for bf16/fp16 (2) and fp32 (4)
    weights, under ZeRO's accounting; prints a verdict naming the likely mistake from the totals (or the
    fp32-gradient convention); returns True / False, or None when ``fn`` is None or raises
    NotImplementedError."""
    if _not_attempted(fn, "bytes-per-parameter function"):
        return None
    answers = []
    for weight_bytes in (2, 4):
        answer, error = _run(fn, weight_bytes)
        if error:
            return _failed(error)
        if (not isinstance(answer, (tuple, list)) or len(answer) != 3
                or not all(isinstance(part, numbers.Real) and not isinstance(part, bool) for part in answer)):
            return _verdict(False, "", f"return the three parts (weight, gradient, optimizer) in bytes, not "
                                       f"{answer!r} for weight_bytes={weight_bytes}")
        # NumPy's numbers are numbers too; shown as plain ints (or floats) in the verdict
        answers.append(tuple(int(part) if float(part).is_integer() else float(part) for part in answer))
    right = tuple(reference_bytes_breakdown(w) for w in (2, 4))
    if tuple(answers) == right:
        return _verdict(True, "16 bytes per parameter in bf16 (2 + 2 + 12: 4 master + 8 Adam) and in fp32 "
                              "(4 + 4 + 8: the weights are their own master copy)", "")
    totals = tuple(sum(parts) for parts in answers)
    if answers[0][1] == 4 and answers[0][0] == 2:
        hint = FP32_GRADIENTS
    elif totals == (16, 16):
        hint = "the totals are right, the split is not: weight and gradient at the weights' width, the rest optimizer"
    else:
        hint = MISTAKES.get(totals)
    return _verdict(False, "", f"for weight_bytes 2 and 4 expected {right}, got {tuple(answers)}"
                               + (f" — {hint}" if hint else ""))


# --- the planning exercise: how much memory, and how many GPUs, a 7B GRPO run needs -------------------------

PLAN_MODEL = "Qwen/Qwen2.5-7B"
PLAN_ROLLOUT = {"sequences": 256, "tokens_per_sequence": 8192}
PLAN_IN_FLIGHT = 32  # sequences one engine's KV pool holds at once: the rollout takes 256 / 32 = 8 waves on one
PLAN_LORA_FRACTION = 0.01
PLAN_GPU_GIB = 80.0
# What the reader counts: the model states and the reference (ZeRO-3 shards them) and one engine's KV pool.
PLAN_STATES = ("policy weights", "policy gradients", "Adam + fp32 master", "reference")
PLAN_ROLES = (*PLAN_STATES, "KV cache")
PLAN_TOLERANCE = 0.02  # relative: rounding the parameter count is fine, a missing role is not


@functools.lru_cache(maxsize=2)
def _plan_memory(lora: bool) -> dict:
    return training_memory(HUB_SHAPES[PLAN_MODEL], lora_fraction=PLAN_LORA_FRACTION if lora else None,
                           in_flight=PLAN_IN_FLIGHT, **PLAN_ROLLOUT)


def reference_run_gib(lora: bool) -> float:
    """GiB the planning exercise's run needs: ``PLAN_ROLES`` of ``training_memory`` for ``PLAN_MODEL`` in bf16
    with Adam, a reference policy (free under LoRA: the base with the adapters off) and a rollout of
    ``PLAN_ROLLOUT`` generated by an engine whose KV pool holds ``PLAN_IN_FLIGHT`` sequences at once (one
    engine's pool, not the whole rollout's KV cache), LoRA training ``PLAN_LORA_FRACTION`` when ``lora``."""
    if not isinstance(lora, bool):
        raise ValueError(f"lora must be True or False, got {lora!r}")
    memory = _plan_memory(lora)
    return sum(memory[role] for role in PLAN_ROLES)


def _plan_mistakes(lora: bool) -> dict[str, float]:
    """The total each known mistake gives, from the library's own numbers for the run."""
    memory, total = _plan_memory(lora), reference_run_gib(lora)
    params = memory["parameters (B)"] * 1e9 / 1024 ** 3  # parameters, in units that give GiB per byte
    frozen = params * (1 - PLAN_LORA_FRACTION)
    shape = HUB_SHAPES[PLAN_MODEL]
    kv = memory["KV cache"]
    rollout = PLAN_ROLLOUT["sequences"]
    mistakes = {
        f"the KV cache of the whole rollout, {rollout} sequences at once: that is the pool that would generate it "
        f"in one wave; the engine holds {PLAN_IN_FLIGHT} in flight and streams the rest through in waves":
            total + kv * (rollout / PLAN_IN_FLIGHT - 1),
        f"the KV pool is missing: {PLAN_IN_FLIGHT} sequences of 8,192 tokens keep 2 (K and V) × layers × KV heads × "
        "head dimension values per token, in bf16": total - kv,
        "the KV cache is half what it is: either only keys or only values are counted (it holds both, 2 × layers "
        "× KV heads × head dimension values per token), or values are counted where bytes are asked (2 bytes "
        "each in bf16)": total - kv / 2,
        "the KV cache is in fp32: it is kept at the weights' width, 2 bytes": total + kv,
        f"the KV cache uses all {shape['num_attention_heads']} attention heads: with grouped-query attention "
        f"only the {shape['num_key_value_heads']} KV heads are cached": total + kv * (
            shape["num_attention_heads"] / shape["num_key_value_heads"] - 1),
        "GB (10⁹ bytes) where the checker asks GiB (2³⁰ bytes)": total * 1024 ** 3 / 1e9,
    }
    if lora:
        mistakes.update({
            "the reference (or gradients of the frozen weights) is counted under LoRA: the reference is the "
            "frozen base with the adapters switched off, no second copy, and only the adapters have "
            "gradients": total + memory["policy weights"],
            "an fp32 master copy of every parameter under LoRA: the frozen weights are never updated, so only "
            "the trained 1 % has a master copy and Adam's moments": total + 4 * frozen,
            "Adam's moments and an fp32 master copy for every parameter under LoRA: only the trained 1 % has "
            "optimizer state": total + 12 * frozen,
        })
    else:
        mistakes.update({
            "the reference is missing: GRPO's KL term needs a frozen copy of the policy's bf16 weights":
                total - memory["reference"],
            "the reference and the KV pool are both missing": total - memory["reference"] - kv,
            "the fp32 master copy is missing: mixed precision keeps 4 bytes of fp32 weights per trained "
            "parameter beside Adam's 8": total - 4 * params,
            "the gradients are counted in fp32: they have the weights' width, 2 bytes": total + 2 * params,
        })
    return mistakes


def check_gpu_plan(fn) -> bool | None:
    """Check ``fn(lora) -> GiB``: the memory a GRPO run of Qwen2.5-7B needs in all, for full fine-tuning
    (``lora=False``) and LoRA (``lora=True``), against the library's ``training_memory``.

    The run: bf16 weights, Adam in mixed precision, a frozen reference policy for the KL term, a rollout of
    256 sequences × 8,192 tokens generated by an engine whose KV pool holds 32 of them at once; LoRA trains
    1 % of the parameters. Count the model states and the reference (which ZeRO-3 shards over the GPUs) and
    one engine's KV pool (which every GPU generating on its own keeps whole): ``PLAN_ROLES``. The GPUs are
    then the fewest N with states / N + pool ≤ 80 GiB. Prints a verdict naming the likely mistake (the
    reference or the KV cache forgotten, the whole rollout's KV cache, an fp32 master copy counted under
    LoRA, ...) and, when right, how many 80 GiB GPUs each run needs and in how many waves it generates;
    returns True / False, or None when ``fn`` is None or raises NotImplementedError.
    """
    if _not_attempted(fn, "memory function"):
        return None
    answers = {}
    for lora in (False, True):
        answer, error = _run(fn, lora)
        if error:
            return _failed(error)
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
            return _verdict(False, "", f"return a number of GiB, got {answer!r} for lora={lora}")
        answers[lora] = float(answer)
    failures = []
    for lora, answer in answers.items():
        right = reference_run_gib(lora)
        if abs(answer - right) <= PLAN_TOLERANCE * right:
            continue
        setting = "with LoRA" if lora else "in full fine-tuning"
        mistake, value = min(_plan_mistakes(lora).items(), key=lambda item: abs(item[1] - answer))
        hint = f" — {mistake}" if abs(answer - value) <= PLAN_TOLERANCE * value else ""
        failures.append(f"{setting} expected ≈ {right:,.0f} GiB, got {answer:,.1f}{hint}")
    if failures:
        return _verdict(False, "", "; ".join(failures))
    plan = {lora: plan_gpus(lora) for lora in (False, True)}
    waves = {lora: generation_waves(PLAN_ROLLOUT["sequences"], in_flight=PLAN_IN_FLIGHT, engines=plan[lora])
             for lora in (False, True)}
    fuller = {lora: gpus_needed(HUB_SHAPES[PLAN_MODEL], gpu_gib=PLAN_GPU_GIB, gradient_checkpointing=True,
                                lora_fraction=PLAN_LORA_FRACTION if lora else None, in_flight=PLAN_IN_FLIGHT,
                                **PLAN_ROLLOUT)
              for lora in (False, True)}
    return _verdict(True, f"{reference_run_gib(False):,.0f} GiB in full fine-tuning → {plan[False]} GPUs of 80 GiB "
                          f"(the model states sharded, a {_plan_memory(False)['KV cache']:,.0f} GiB pool on each), "
                          f"the rollout in {waves[False]} waves; {reference_run_gib(True):,.0f} GiB with LoRA → "
                          f"{plan[True]}, in {waves[True]} waves. Adding what does not shard (checkpointed "
                          "activations and fp32 logits of one sequence, and the full weights generation needs), "
                          f"gpus_needed says {fuller[False]} and {fuller[True]}", "")


def plan_gpus(lora: bool) -> int:
    """The fewest 80 GiB GPUs for the planning exercise's ``reference_run_gib``: ZeRO-3 shards the model states
    and the reference over N GPUs, and each GPU, one generation engine, keeps its whole KV pool:
    the fewest N with states / N + pool ≤ ``PLAN_GPU_GIB``."""
    memory = _plan_memory(lora)
    states, pool = sum(memory[role] for role in PLAN_STATES), memory["KV cache"]
    if pool >= PLAN_GPU_GIB:
        raise ValueError(f"the KV pool alone, {pool:.1f} GiB, fills a {PLAN_GPU_GIB:.0f} GiB GPU")
    return max(1, math.ceil(states / (PLAN_GPU_GIB - pool)))
