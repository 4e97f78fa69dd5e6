"""Checkers for the exercises of lesson 21 (scaling up): the memory a trained parameter costs, and the
memory, GPUs and generation waves of a 7B GRPO run.

The reader writes ``my_bytes_per_parameter(weight_bytes, gradient_bytes, moment_bytes) -> (weight, gradient,
optimizer)``: the bytes one parameter trained with Adam costs, in three parts, under ZeRO's accounting
(Rajbhandari et al. 2020, arXiv:1910.02054, §3; mixed precision as Micikevicius et al. 2018,
arXiv:1710.03740) generalised: the weight at ``weight_bytes``, the gradient at ``gradient_bytes``, Adam's two
moments at ``moment_bytes`` each (4: fp32; 1: 8-bit Adam, Dettmers et al. 2022, arXiv:2110.02861) and,
below fp32 weights, an fp32 master copy (4). The checker asks for bf16 mixed precision (2, 2, 12), fp32
(4, 4, 8: the weights are their own master copy), bf16 weights with fp32 gradients (Megatron-LM's
``accumulate_allreduce_grads_in_fp32``: 2, 4, 12) and 8-bit Adam (2, 2, 6), and names the likely mistake from the answers to all four (one case alone
cannot tell a missing moment from a missing master copy in bf16; fp32 can).
The lesson prints the first two; the last two need the rule, not the numbers.

The planning exercise: the reader writes ``my_run_gib(lora) -> (states GiB, pool GiB, GPUs, waves)`` for a
GRPO run of Qwen2.5-7B: the GiB of the model states and the frozen reference, summed over the GPUs that shard
them (the job's total of what ZeRO-3 shards); the GiB of one generation engine's KV pool holding 32 sequences
of 8,192 tokens at once (what every GPU keeps whole); the 80 GiB GPUs it needs (each GPU one engine with its
own pool and the whole bf16 policy to generate with, ZeRO-3 sharding the rest; activations and logits left
out); and the waves in which the rollout of 256 sequences streams through the engines' pools. The two GiB are
asked apart because one is a job total and the other is per GPU: one GPU holds states / N + pool + the
weights × (1 − 1/N) it gathers to generate. ``check_gpu_plan`` compares them with
``training_memory``, ``plan_gpus`` and ``plan_waves`` and names the likely mistake (the reference or the KV
cache forgotten, the whole rollout's KV cache charged as if generated in one wave, the reference or an fp32
master copy charged under LoRA, grouped-query attention ignored, GB for GiB, the generation weights left out of the GPU
count, the total divided by 80 GiB, one engine's waves).
"""

from __future__ import annotations

import functools
import math
import numbers

from rlbook.exercises.framework import _failed, _not_attempted, _run, _verdict
from rlbook.scaling import HUB_SHAPES, generation_waves, gpus_needed, optimizer_bytes_per_parameter, training_memory

__all__ = ["BYTES_CASES", "PLAN_GPU_GIB", "PLAN_IN_FLIGHT", "PLAN_LORA_FRACTION", "PLAN_MODEL", "PLAN_ROLES",
           "PLAN_ROLLOUT", "check_bytes_per_parameter", "check_gpu_plan", "plan_gpus", "plan_waves",
           "reference_bytes_breakdown", "reference_bytes_per_parameter", "reference_plan", "reference_pool_gib",
           "reference_states_gib"]


def reference_bytes_breakdown(weight_bytes: int, gradient_bytes: int | None = None,
                              moment_bytes: int = 4) -> tuple[int, int, int]:
    """(weight, gradient, optimizer) bytes per trained parameter: the weight at ``weight_bytes``, the gradient
    at ``gradient_bytes`` (default: the weights' width, ZeRO's accounting), Adam's two moments at
    ``moment_bytes`` each (4: fp32; 1: 8-bit Adam, Dettmers et al. 2022, arXiv:2110.02861, its small
    block-wise quantisation constants left out) and, below fp32 weights, an fp32 master copy (4)."""
    gradient_bytes = weight_bytes if gradient_bytes is None else gradient_bytes
    return weight_bytes, gradient_bytes, optimizer_bytes_per_parameter(weight_bytes, moment_bytes=moment_bytes)


def reference_bytes_per_parameter(weight_bytes: int, gradient_bytes: int | None = None, moment_bytes: int = 4) -> int:
    """Weight + gradient + Adam's moments and (below fp32) an fp32 master copy: ``reference_bytes_breakdown``'s sum."""
    return sum(reference_bytes_breakdown(weight_bytes, gradient_bytes, moment_bytes))


# The cases the checker asks for, (weight_bytes, gradient_bytes, moment_bytes), and what each tests.
BYTES_CASES = {
    (2, 2, 4): "bf16 mixed precision, ZeRO's accounting",
    (4, 4, 4): "fp32 training",
    (2, 4, 4): "bf16 weights with fp32 gradients (Megatron-LM's accumulate_allreduce_grads_in_fp32)",
    (2, 2, 1): "bf16 weights with 8-bit Adam",
}


def _master_bytes(weight_bytes: int) -> int:
    return 4 if weight_bytes < 4 else 0


# Wrong rules for the optimizer's bytes, each a function of (weight_bytes, gradient_bytes, moment_bytes), with
# what it gets wrong. A rule is named only when it reproduces the reader's optimizer bytes on every case of
# BYTES_CASES: one case alone cannot tell "one moment missing" (2 + 2 + 8 in bf16) from "no master copy" (also 8);
# fp32 can (4 against 8).
_OPTIMIZER_MISTAKES = (
    (lambda w, g, m: 2 * m,
     "the fp32 master copy is missing: below fp32 the optimizer keeps 4 bytes of fp32 weights to update"),
    (lambda w, g, m: 2 * m + 4,
     "an fp32 master copy beside fp32 weights: fp32 weights are their own master copy"),
    (lambda w, g, m: m + _master_bytes(w),
     "one of Adam's two moments (m and v) is missing"),
    (lambda w, g, m: 8 + _master_bytes(w),
     "Adam's two moments at moment_bytes each (8-bit Adam quantises them), not 4"),
    (lambda w, g, m: 2 * m + m * _master_bytes(w) // 4,
     "the master copy quantised too: 8-bit Adam quantises only the moments; the master copy stays fp32"),
    (lambda w, g, m: optimizer_bytes_per_parameter(w, moment_bytes=m) + (4 if g < 4 else 0),
     "an fp32 copy of the gradient beside the low-precision one (Megatron's fp16 accounting, 2 + 2 + 16); "
     "this exercise counts the gradient once, at gradient_bytes"),
    (lambda w, g, m: optimizer_bytes_per_parameter(w, moment_bytes=m) + g,
     "a copy of the gradient counted among the optimizer's states: it is counted once, as the gradient"),
)


def _bytes_hint(case, answer, answers=None) -> str | None:
    """The likely mistake behind a wrong ``answer`` (weight, gradient, optimizer) for one of ``BYTES_CASES``.

    ``answers``: the reader's answer on every case (case → answer), when known. An optimizer mistake whose rule
    matches the reader's optimizer bytes on all of them is named first; failing that, one that matches ``case``."""
    weight_bytes, gradient_bytes, moment_bytes = case
    weight, gradient, optimizer = answer
    if weight != weight_bytes:
        return "the weight is held at weight_bytes" if weight else "the weights themselves also take memory"
    if gradient != gradient_bytes:
        if gradient == weight_bytes:
            return "the gradient has gradient_bytes, which need not be the weights' width"
        return "the gradient is held at gradient_bytes" if gradient else "the gradients also take memory"
    if optimizer == reference_bytes_breakdown(*case)[2]:
        return None
    # a rule that explains every answer first; else one that explains this case (two mistakes at once, e.g. 12
    # copied for every precision: a master copy beside fp32 weights here, unscaled moments under 8-bit Adam)
    for seen in (answers or {}), {case: answer}:
        for rule, mistake in _OPTIMIZER_MISTAKES:
            if seen and all(part[2] == rule(*known) for known, part in seen.items()):
                return mistake.replace("moment_bytes each", f"moment_bytes = {moment_bytes} each")
    return None


def _as_parts(answer):
    """The reader's answer as a tuple of three plain numbers, or None when it is not three real numbers."""
    if hasattr(answer, "tolist") and not isinstance(answer, (tuple, list)):  # a NumPy array or a tensor
        answer = answer.tolist()
    if (not isinstance(answer, (tuple, list)) or len(answer) != 3
            or not all(isinstance(part, numbers.Real) and not isinstance(part, bool) for part in answer)):
        return None
    # NumPy's numbers are numbers too; shown as plain ints (or floats) in the verdict
    return tuple(int(part) if float(part).is_integer() else float(part) for part in answer)


def check_bytes_per_parameter(fn) -> bool | None:
    """Check ``fn(weight_bytes, gradient_bytes, moment_bytes) -> (weight, gradient, optimizer)``, the bytes one
    parameter trained with Adam costs, on ``BYTES_CASES``: bf16 mixed precision, fp32, fp32 gradients beside
    bf16 weights, and 8-bit Adam. Any sequence or array of three real numbers is an answer. Every case is run
    before the verdict, which reports the first case ``fn`` gets wrong and names the likely mistake from all of
    them (the master copy missing or counted for fp32 weights, one moment missing, the moments not at
    ``moment_bytes``, the master copy quantised, a second gradient copy, ...); returns True / False, or None
    when ``fn`` is None or raises NotImplementedError."""
    if _not_attempted(fn, "bytes-per-parameter function"):
        return None
    answers = {}
    for case in BYTES_CASES:
        answer, error = _run(fn, *case)
        if error:
            return _failed(error)
        parts = _as_parts(answer)
        if parts is None:
            return _verdict(False, "", f"return the three parts (weight, gradient, optimizer) in bytes, not "
                                       f"{answer!r} for {case}")
        answers[case] = parts
    for case, name in BYTES_CASES.items():
        answer, right = answers[case], reference_bytes_breakdown(*case)
        if answer != right:
            hint = _bytes_hint(case, answer, answers)
            if hint is None and sum(answer) == sum(right):
                hint = "the total is right, the split is not: weight, gradient, then everything the optimizer keeps"
            return _verdict(False, "", f"{name}, (weight_bytes, gradient_bytes, moment_bytes) = {case}: expected "
                                       f"{right}, got {answer}" + (f" — {hint}" if hint else ""))
    totals = ", ".join(f"{name.split(' (')[0]} {sum(reference_bytes_breakdown(*case))}"
                       for case, name in BYTES_CASES.items())
    return _verdict(True, f"bytes per trained parameter: {totals}", "")


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


def reference_states_gib(lora: bool) -> float:
    """The planning exercise's model states and reference (``PLAN_STATES`` of ``training_memory`` for
    ``PLAN_MODEL`` in bf16 with Adam; the reference is free under LoRA, the base with the adapters off), GiB
    summed over the GPUs that shard them; LoRA trains ``PLAN_LORA_FRACTION`` when ``lora``."""
    if not isinstance(lora, bool):
        raise ValueError(f"lora must be True or False, got {lora!r}")
    memory = _plan_memory(lora)
    return sum(memory[role] for role in PLAN_STATES)


def reference_pool_gib(lora: bool) -> float:
    """The planning exercise's KV pool of one engine, ``PLAN_IN_FLIGHT`` sequences in flight, GiB."""
    if not isinstance(lora, bool):
        raise ValueError(f"lora must be True or False, got {lora!r}")
    return _plan_memory(lora)["KV cache"]


def _plan_mistakes(lora: bool) -> dict[str, dict[str, float]]:
    """What each known mistake gives, from the library's own numbers for the run: ``{"states": {message:
    GiB}, "pool": {message: GiB}}``."""
    memory, states = _plan_memory(lora), reference_states_gib(lora)
    params = memory["parameters (B)"] * 1e9 / 1024 ** 3  # parameters, in units that give GiB per byte
    frozen = params * (1 - PLAN_LORA_FRACTION)
    shape = HUB_SHAPES[PLAN_MODEL]
    kv = memory["KV cache"]
    rollout = PLAN_ROLLOUT["sequences"]
    gb = "GB (10⁹ bytes) where the checker asks GiB (2³⁰ bytes)"
    pool = {
        f"the KV cache of the whole rollout, {rollout} sequences at once: that is the pool that would generate it "
        f"in one wave; the engine holds {PLAN_IN_FLIGHT} in flight and streams the rest through in waves":
            kv * rollout / PLAN_IN_FLIGHT,
        "the KV cache is half what it is: either only keys or only values are counted (it holds both, 2 × layers "
        "× KV heads × head dimension values per token), or values are counted where bytes are asked (2 bytes "
        "each in bf16)": kv / 2,
        "the KV cache is in fp32: it is kept at the weights' width, 2 bytes": 2 * kv,
        f"the KV cache uses all {shape['num_attention_heads']} attention heads: with grouped-query attention "
        f"only the {shape['num_key_value_heads']} KV heads are cached": kv * (
            shape["num_attention_heads"] / shape["num_key_value_heads"]),
        gb: kv * 1024 ** 3 / 1e9,
    }
    states_mistakes = {gb: states * 1024 ** 3 / 1e9,
                       "the KV pool is counted with the model states: it is asked apart, as the second number (each "
                       "GPU keeps a whole pool; ZeRO-3 shards only the states)": states + kv}
    if lora:
        states_mistakes.update({
            "the reference (or gradients of the frozen weights) is counted under LoRA: the reference is the "
            "frozen base with the adapters switched off, no second copy, and only the adapters have "
            "gradients": states + memory["policy weights"],
            "an fp32 master copy of every parameter under LoRA: the frozen weights are never updated, so only "
            "the trained 1 % has a master copy and Adam's moments": states + 4 * frozen,
            "Adam's moments and an fp32 master copy for every parameter under LoRA: only the trained 1 % has "
            "optimizer state": states + 12 * frozen,
        })
    else:
        states_mistakes.update({
            "the reference is missing: GRPO's KL term needs a frozen copy of the policy's bf16 weights":
                states - memory["reference"],
            "the fp32 master copy is missing: mixed precision keeps 4 bytes of fp32 weights per trained "
            "parameter beside Adam's 8": states - 4 * params,
            "the gradients are counted in fp32: they have the weights' width, 2 bytes": states + 2 * params,
        })
    return {"states": states_mistakes, "pool": pool}


def plan_waves(lora: bool) -> int:
    """The waves the planning exercise's rollout takes on ``plan_gpus(lora)`` GPUs, each one engine with a pool
    of ``PLAN_IN_FLIGHT`` sequences: ``generation_waves``."""
    return generation_waves(PLAN_ROLLOUT["sequences"], in_flight=PLAN_IN_FLIGHT, engines=plan_gpus(lora))


def reference_plan(lora: bool) -> tuple[float, float, int, int]:
    """The planning exercise's answer: (``reference_states_gib``, ``reference_pool_gib``, ``plan_gpus``,
    ``plan_waves``)."""
    return reference_states_gib(lora), reference_pool_gib(lora), plan_gpus(lora), plan_waves(lora)


def _plan_count_hint(lora: bool, gpus, waves) -> str | None:
    memory = _plan_memory(lora)
    states, pool = sum(memory[role] for role in PLAN_STATES), memory["KV cache"]
    right_gpus = plan_gpus(lora)
    if gpus != right_gpus:
        rule = ("N is the fewest with states / N + weights × (1 − 1/N) + pool ≤ "
                f"{PLAN_GPU_GIB:.0f}")
        slips = []
        if gpus == _fewest_gpus(states, pool, 0.0):
            slips.append("the weights each engine gathers to generate are left out: an engine samples from the "
                         f"whole bf16 policy ({memory['policy weights']:,.1f} GiB), so besides its 1/N shard of the "
                         "states every GPU holds the other (1 − 1/N) of the weights")
        if gpus == math.ceil((states + pool) / PLAN_GPU_GIB):
            slips.append("the total divided by 80 GiB: ZeRO-3 divides only the model states and the reference; every "
                         f"GPU keeps its own {pool:,.0f} GiB pool and the whole weights to generate with")
        if slips:
            return "; or ".join(slips) + f": {rule}"
        return f"the fewest N with (model states + reference) / N + weights × (1 − 1/N) + one pool ≤ {PLAN_GPU_GIB:.0f} GiB"
    if waves != plan_waves(lora):
        if waves == generation_waves(PLAN_ROLLOUT["sequences"], in_flight=PLAN_IN_FLIGHT):
            return (f"the waves of one engine: each of the {right_gpus} GPUs generates with its own pool, so "
                    f"{PLAN_ROLLOUT['sequences']} sequences / ({right_gpus} × {PLAN_IN_FLIGHT}), rounded up")
        return f"waves: ⌈{PLAN_ROLLOUT['sequences']} sequences / (GPUs × {PLAN_IN_FLIGHT} in flight)⌉"
    return None


def check_gpu_plan(fn) -> bool | None:
    """Check ``fn(lora) -> (states GiB, pool GiB, GPUs, waves)``: the plan of a GRPO run of Qwen2.5-7B, for full
    fine-tuning (``lora=False``) and LoRA (``lora=True``), against the library's ``training_memory``.

    The run: bf16 weights, Adam in mixed precision, a frozen reference policy for the KL term, a rollout of
    256 sequences × 8,192 tokens generated by engines whose KV pool holds 32 of them at once; LoRA trains
    1 % of the parameters. States GiB: the model states and the reference, summed over the GPUs (ZeRO-3 shards
    them): ``PLAN_STATES``. Pool GiB: one engine's KV pool, which every GPU, generating on its own, keeps
    whole, and the whole bf16 policy, of which it gathers the (1 − 1/N) it does not own, to generate with.
    GPUs: the fewest N with states / N + weights × (1 − 1/N) + pool ≤ 80 GiB (``plan_gpus``). Waves: ⌈256 / (N × 32)⌉
    (``plan_waves``). Prints a verdict naming the likely mistake (the reference forgotten, the whole rollout's
    KV cache, an fp32 master copy counted under LoRA, all heads cached, the total divided by 80, one engine's
    waves, ...); returns True / False, or None when ``fn`` is None or raises NotImplementedError.
    """
    if _not_attempted(fn, "planning function"):
        return None
    answers = {}
    for lora in (False, True):
        answer, error = _run(fn, lora)
        if error:
            return _failed(error)
        if (not isinstance(answer, (tuple, list)) or len(answer) != 4
                or any(isinstance(part, bool) or not isinstance(part, numbers.Real) or not math.isfinite(part)
                       for part in answer)):
            return _verdict(False, "", "return (states GiB, pool GiB, GPUs, waves), four numbers, got "
                                       f"{answer!r} for lora={lora}")
        answers[lora] = (float(answer[0]), float(answer[1]), answer[2], answer[3])
    failures = []
    for lora, (states, pool, gpus, waves) in answers.items():
        setting = "with LoRA" if lora else "in full fine-tuning"
        mistakes = _plan_mistakes(lora)
        wrong = []
        for what, given, right in (("states", states, reference_states_gib(lora)),
                                   ("pool", pool, reference_pool_gib(lora))):
            if abs(given - right) > PLAN_TOLERANCE * right:
                mistake, value = min(mistakes[what].items(), key=lambda item: abs(item[1] - given))
                label = "model states and reference" if what == "states" else "KV pool of one engine"
                if abs(given - value) <= PLAN_TOLERANCE * abs(value):  # a named slip: the slip, not the answer
                    wrong.append(f"{setting} the {label}: got {given:,.1f} GiB — {mistake}")
                else:
                    wrong.append(f"{setting} the {label}: expected ≈ {right:,.1f} GiB, got {given:,.1f}")
        if wrong:
            failures.extend(wrong)
            continue
        hint = _plan_count_hint(lora, gpus, waves)
        if hint is not None:
            failures.append(f"{setting} the GiB are right; expected {plan_gpus(lora)} GPUs and {plan_waves(lora)} "
                            f"waves, got {gpus} and {waves} — {hint}")
    if failures:
        return _verdict(False, "", "; ".join(failures))
    fuller = {lora: gpus_needed(HUB_SHAPES[PLAN_MODEL], gpu_gib=PLAN_GPU_GIB, gradient_checkpointing=True,
                                lora_fraction=PLAN_LORA_FRACTION if lora else None, in_flight=PLAN_IN_FLIGHT,
                                **PLAN_ROLLOUT)
              for lora in (False, True)}
    weights = {lora: _plan_memory(lora)["policy weights"] for lora in (False, True)}
    per_gpu = {lora: reference_states_gib(lora) / plan_gpus(lora) + reference_pool_gib(lora)
               + weights[lora] * (1 - 1 / plan_gpus(lora)) for lora in (False, True)}
    job = {lora: reference_states_gib(lora) + plan_gpus(lora) * reference_pool_gib(lora)
           + (plan_gpus(lora) - 1) * weights[lora] for lora in (False, True)}
    return _verdict(True, f"in full fine-tuning {reference_states_gib(False):,.0f} GiB of states sharded over "
                          f"{plan_gpus(False)} GPUs of 80 GiB, each with its own {reference_pool_gib(False):,.0f} GiB "
                          f"pool and the weights it gathers to generate ({per_gpu[False]:,.1f} GiB per GPU, {job[False]:,.1f} for the job), the rollout in "
                          f"{plan_waves(False)} waves; with LoRA {reference_states_gib(True):,.0f} GiB → "
                          f"{plan_gpus(True)} GPU ({per_gpu[True]:,.1f} GiB), in {plan_waves(True)} waves. Adding what "
                          "does not shard and the plan left out (checkpointed activations and fp32 logits of one "
                          f"sequence), gpus_needed says {fuller[False]} and {fuller[True]}", "")


def plan_gpus(lora: bool) -> int:
    """The fewest 80 GiB GPUs for the planning exercise's run: ZeRO-3 shards the model states
    and the reference over N GPUs, and each GPU, one generation engine at tensor-parallel degree 1, keeps its
    whole KV pool and the whole bf16 policy to generate with (its own 1/N shard plus the (1 − 1/N) it gathers,
    ``training_memory``'s "weights gathered for generation"): the fewest N with
    states / N + weights × (1 − 1/N) + pool ≤ ``PLAN_GPU_GIB``. Activations and logits are left out."""
    memory = _plan_memory(lora)
    states, pool = sum(memory[role] for role in PLAN_STATES), memory["KV cache"]
    return _fewest_gpus(states, pool, memory["policy weights"])


def _fewest_gpus(states: float, pool: float, weights: float) -> int:
    """The fewest N with states / N + weights × (1 − 1/N) + pool ≤ ``PLAN_GPU_GIB`` (GiB)."""
    if pool + weights >= PLAN_GPU_GIB:
        raise ValueError(f"the KV pool and the weights to generate with, {pool + weights:.1f} GiB, fill a "
                         f"{PLAN_GPU_GIB:.0f} GiB GPU")
    return max(1, math.ceil((states - weights) / (PLAN_GPU_GIB - pool - weights)))
