"""What the benchmark scripts share: the model under test, their defaults, and the real model's task.

``--model`` picks the model: nothing for the zoo's ``arith-base`` (a fresh random tiny model when no
zoo is shipped), a zoo name or folder, or a pretrained name (``smollm2-135m-instruct``, the real
SmolLM2-135M-Instruct). A script's defaults (batch, lengths, steps) depend on which kind it is:
the real model is ~135 M parameters against the zoo's ~1 M, so it gets smaller batches and fewer
repeats to stay within minutes on a CPU.

Every run is offline: this module turns the hub client offline before ``transformers`` is imported
(import it before rlbook), and a pretrained model must already be built in rlbook's cache — the
benchmarks never download it (``ensure_pretrained`` does, once, when asked).

The real model's task is plain addition, "What is a + b? Reply with only the number." through the
model's chat template, rewarded 1 when the last integer of the reply is a + b (the task of
``scripts/smollm2_addition.py``, on which the model is mostly wrong but not always: GRPO's groups
are mixed).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub reads it (at its import)
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402

from rlbook.models import build_char_tokenizer, build_tiny_model, load_model, pretrained_names, zoo_names  # noqa: E402
from rlbook.models.pretrained import SOURCE_JSON, pretrained_folder  # noqa: E402
from rlbook.tasks.verifiers import completion_text  # noqa: E402
from report import RESULT_PREFIX  # noqa: E402

ZOO_DEFAULT = "arith-base"
QUESTION = "What is {a} + {b}? Reply with only the number."
NUMBER = re.compile(r"-?\d+")


def is_pretrained(name) -> bool:
    """Whether ``name`` is one of rlbook's real pretrained models (built into the user's cache)."""
    return name in pretrained_names()


def fill_defaults(args: argparse.Namespace, defaults: dict) -> argparse.Namespace:
    """Set each option left at None to ``defaults["pretrained" or "zoo"][option]`` (by ``args.model``)."""
    for option, value in defaults["pretrained" if is_pretrained(args.model) else "zoo"].items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    return args


def get_model(name, device="cpu"):
    """``(model, tokenizer, description)``: ``name`` loaded, else the zoo's arith-base, else a fresh random
    ``build_tiny_model(shape="small")`` (the description says which, and why a random model is a poor test)."""
    if name is None:
        name = ZOO_DEFAULT if ZOO_DEFAULT in zoo_names() else "random"
    if is_pretrained(name) and not (pretrained_folder(name) / SOURCE_JSON).is_file():
        raise SystemExit(f"{name} is not built in rlbook's cache ({pretrained_folder(name)}); the benchmarks run "
                         f"offline, so build it once first (a download): .venv/bin/python -c "
                         f"\"from rlbook.models import ensure_pretrained; ensure_pretrained('{name}')\"")
    if name != "random":
        model, tokenizer = load_model(name, device=device)
        return model, tokenizer, name
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="small").to(device).eval()
    note = ("a fresh random build_tiny_model(shape='small') (no zoo model shipped). A random model emits the "
            "end token only by chance, so most rows run to max_new_tokens and dropping finished rows helps "
            "little; a trained model's mixed lengths gain more")
    return model, tokenizer, note


def addition_rows(n: int, digits: int, seed: int) -> list[dict]:
    """``n`` plain-addition questions with ``digits``-digit operands: ``{"prompt": [user message], "answer": a + b}``."""
    low, high = (0, 9) if digits == 1 else (10 ** (digits - 1), 10 ** digits - 1)
    pairs = np.random.default_rng(seed).integers(low, high + 1, size=(n, 2)).tolist()
    return [{"prompt": [{"role": "user", "content": QUESTION.format(a=a, b=b)}], "answer": a + b} for a, b in pairs]


def last_number_reward(text: str, example: dict) -> float:
    """1.0 if the last integer in the reply is ``example["answer"]``, else 0.0 (rlbook's convention)."""
    numbers = NUMBER.findall(text)
    return float(bool(numbers) and int(numbers[-1]) == int(example["answer"]))


def trl_last_number_reward(prompts=None, completions=None, answer=None, **columns) -> list[float]:
    """``last_number_reward`` in TRL's convention: completions as strings or chat messages, the
    dataset's ``answer`` column aligned with them."""
    return [last_number_reward(completion_text(c), {"answer": a}) for c, a in zip(completions, answer)]


def emit_result(benchmark: str, *, rlbook: str, reference: str, ratio: float, ratio_cpu: float,
                load_before: float) -> None:
    """Print the run's result as one ``RESULT {json}`` line, the form ``benchmarks/report.py`` reads:
    what was measured (``benchmark``), rlbook's and the reference's figures as text, the ratio of the two
    by the wall clock and by process (CPU) time (> 1: rlbook faster), and the load average before."""
    fields = {"benchmark": benchmark, "rlbook": rlbook, "reference": reference, "ratio": round(ratio, 3),
              "ratio_cpu": round(ratio_cpu, 3), "load_before": round(load_before, 2)}
    print(RESULT_PREFIX + json.dumps(fields, ensure_ascii=False), flush=True)
