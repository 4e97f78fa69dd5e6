"""How much signal the real model (SmolLM2-135M-Instruct) gives GRPO on plain addition, and what a step costs.

Prints, for the base model with its chat template on "What is a + b? Reply with only the number."
(the reply scored by the last number in it): pass@1 and pass@8 for 1- and 2-digit operands at
T = 0.7 and 1.0 (16 prompts x 8 samples, at most 16 new tokens), with the number of mixed groups
(some samples right, some wrong: the groups that give GRPO a gradient); then the time of GRPO steps
with LoRA (r = 8) through rlbook's OnlineTrainer on 16 completions (2 prompts x 8).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/smollm2_addition.py

The first run builds the model into the cache (rlbook.models.pretrained). Times are this machine's:
wall-clock and process (CPU) time, which a busy machine inflates less.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np
import torch

from rlbook.metrics import pass_at_k
from rlbook.models import load_model
from rlbook.rollout import sample
from rlbook.trainers import OnlineTrainer, preset

QUESTION = "What is {a} + {b}? Reply with only the number."
NUMBER = re.compile(r"-?\d+")


def addition_rows(n: int, digits: int, seed: int) -> list[dict]:
    """``n`` questions with ``digits``-digit operands, each a chat conversation and its answer."""
    low, high = (0, 9) if digits == 1 else (10 ** (digits - 1), 10 ** digits - 1)
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in rng.integers(low, high + 1, size=(n, 2)).tolist():
        rows.append({"prompt": [{"role": "user", "content": QUESTION.format(a=a, b=b)}], "answer": a + b})
    return rows


def last_number_reward(text: str, example: dict) -> float:
    """1 if the last integer in the reply is the answer, else 0."""
    numbers = NUMBER.findall(text)
    return float(bool(numbers) and int(numbers[-1]) == example["answer"])


def measure_pass_at_k(model, tokenizer, rows, *, temperature: float, samples: int, max_new_tokens: int,
                      seed: int) -> dict:
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    rollout = sample(model, tokenizer, [r["prompt"] for r in rows], num_samples=samples,
                     max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    rewards = np.array([last_number_reward(t, rows[i // samples]) for i, t in enumerate(rollout.texts)])
    correct = rewards.reshape(len(rows), samples).sum(axis=1).astype(int)
    return {
        "pass@1": float(np.mean([pass_at_k(samples, int(c), 1) for c in correct])),
        f"pass@{samples}": float(np.mean([pass_at_k(samples, int(c), samples) for c in correct])),
        "mixed": int(((correct > 0) & (correct < samples)).sum()),
        "wall_s": wall, "cpu_s": cpu, "example": rollout.texts[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=2, help="GRPO + LoRA steps to time (0: none)")
    parser.add_argument("--seed", type=int, default=0, help="another seed draws other prompts and other samples")
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    model, tokenizer = load_model("smollm2-135m-instruct")

    print(f"\nbase model, {args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new tokens, "
          f"last number scored, seed {args.seed}")
    print(f"{'digits':>6} {'T':>4} {'pass@1':>7} {'pass@' + str(args.samples):>7} {'mixed':>6} {'wall s':>7} "
          f"{'cpu s':>7}  first reply")
    for digits in (1, 2):
        rows = addition_rows(args.prompts, digits, seed=digits + 10 * args.seed)
        for temperature in (0.7, 1.0):
            m = measure_pass_at_k(model, tokenizer, rows, temperature=temperature, samples=args.samples,
                                  max_new_tokens=args.max_new_tokens, seed=args.seed)
            print(f"{digits:>6} {temperature:>4} {m['pass@1']:>7.3f} {m[f'pass@{args.samples}']:>7.3f} "
                  f"{m['mixed']:>3}/{args.prompts:<2} {m['wall_s']:>7.1f} {m['cpu_s']:>7.1f}  {m['example']!r}")

    if args.grpo_steps:
        config = preset("grpo", lora=8, group_size=8, prompts_per_step=2, max_new_tokens=args.max_new_tokens,
                        temperature=0.7, lr=2e-4)
        trainer = OnlineTrainer(model, tokenizer, last_number_reward, config,
                                train_dataset=addition_rows(64, 1, seed=3))
        print(f"\nGRPO + LoRA r=8 ({config.batch_size} completions, <= {config.max_new_tokens} tokens, kl_beta "
              f"{config.kl_beta}) through OnlineTrainer")
        for _ in range(args.grpo_steps):
            start_cpu = time.process_time()
            row = trainer.train_step()
            print(f"step {row['step']}: wall {row['step_time']:.1f} s, cpu {time.process_time() - start_cpu:.1f} s, "
                  f"reward {row['reward']:.2f}, mean length {row['length_mean']:.1f} tokens")


if __name__ == "__main__":
    main()
