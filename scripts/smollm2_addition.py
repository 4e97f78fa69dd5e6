"""How much signal the real model (SmolLM2-135M-Instruct) gives GRPO on plain addition, what a step costs,
and the learning-rate pilot of lesson 21.

The task is ``rlbook.tasks.PlainAdditionTask`` ("What is a + b? Reply with only the number.", the reply
scored by its last integer). Three measurements:

* the base model's pass@1 and pass@8 for operands of 1 and of 2 digits at T = 0.7 and 1.0 (16 prompts x 8
  samples, at most 16 new tokens, from the train split), with the number of mixed groups (some samples
  right, some wrong: the groups that give GRPO a gradient);
* the time of GRPO steps with LoRA (r = 8) through rlbook's OnlineTrainer on 16 completions (2 prompts x 8);
* ``--pilot``: lesson 21's recipe (1- and 2-digit operands, 2 prompts x 8 samples a step, LoRA r = 8, no KL)
  for ``--pilot-steps`` steps at each of ``--pilot-lrs``, side by side (``run_parallel``), printing the
  training reward by blocks of 5 steps. Only training prompts are used: the lesson's held-out prompts
  play no part in choosing its learning rate.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/smollm2_addition.py
    OMP_NUM_THREADS=1 .venv/bin/python scripts/smollm2_addition.py --pilot > scripts/smollm2_addition_pilot.txt

The pilot's output is stored in ``scripts/smollm2_addition_pilot.txt``, which lesson 21 prints.

The first run builds the model into the cache (rlbook.models.pretrained). Times are this machine's:
wall-clock and process (CPU) time, which a busy machine inflates less.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from rlbook.evaluation import sample_and_verify
from rlbook.metrics import mean_pass_at_k
from rlbook.models import load_model
from rlbook.parallel import run_parallel
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, preset

MODEL = "smollm2-135m-instruct"


def measure_pass_at_k(model, tokenizer, task, rows, *, temperature: float, samples: int, max_new_tokens: int,
                      seed: int) -> dict:
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    rollout, rewards = sample_and_verify(model, tokenizer, rows, task.reward, n_samples=samples,
                                         max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    correct = rewards.sum(dim=1)
    return {
        "pass@1": mean_pass_at_k(rewards, 1),
        f"pass@{samples}": mean_pass_at_k(rewards, samples),
        "mixed": int(((correct > 0) & (correct < samples)).sum()),
        "wall_s": wall, "cpu_s": cpu, "example": rollout.texts[0],
    }


def signal_and_step_time(args) -> None:
    model, tokenizer = load_model(MODEL)
    print(f"\nbase model, {args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new tokens, "
          f"last number scored, seed {args.seed}")
    print(f"{'digits':>6} {'T':>4} {'pass@1':>7} {'pass@' + str(args.samples):>7} {'mixed':>6} {'wall s':>7} "
          f"{'cpu s':>7}  first reply")
    for digits in (1, 2):
        task = get_task("plain_addition", min_digits=digits, max_digits=digits)
        rows = list(task.dataset(args.prompts, seed=digits + 10 * args.seed, split="train"))
        for temperature in (0.7, 1.0):
            m = measure_pass_at_k(model, tokenizer, task, rows, temperature=temperature, samples=args.samples,
                                  max_new_tokens=args.max_new_tokens, seed=args.seed)
            print(f"{digits:>6} {temperature:>4} {m['pass@1']:>7.3f} {m[f'pass@{args.samples}']:>7.3f} "
                  f"{m['mixed']:>3}/{args.prompts:<2} {m['wall_s']:>7.1f} {m['cpu_s']:>7.1f}  {m['example']!r}")
    if args.grpo_steps:
        config = preset("grpo", lora=8, group_size=8, prompts_per_step=2, max_new_tokens=args.max_new_tokens,
                        temperature=0.7, lr=2e-4)
        trainer = OnlineTrainer(model, tokenizer, get_task("plain_addition", min_digits=1, max_digits=1), config)
        print(f"\nGRPO + LoRA r=8 ({config.batch_size} completions, <= {config.max_new_tokens} tokens, kl_beta "
              f"{config.kl_beta}) through OnlineTrainer")
        for _ in range(args.grpo_steps):
            start_cpu = time.process_time()
            row = trainer.train_step()
            print(f"step {row['step']}: wall {row['step_time']:.1f} s, cpu {time.process_time() - start_cpu:.1f} s, "
                  f"reward {row['reward']:.2f}, mean length {row['length_mean']:.1f} tokens")


def pilot_run(lr: float, steps: int) -> tuple[list[float], float]:
    """Lesson 21's recipe at learning rate ``lr``: the training reward of each step, and the CPU seconds."""
    start = time.process_time()
    model, tokenizer = load_model(MODEL)
    config = preset("grpo", lora=8, group_size=8, prompts_per_step=2, max_new_tokens=16, temperature=0.7, lr=lr,
                    kl_beta=0.0, unbiased_std=True, seed=0)
    trainer = OnlineTrainer(model, tokenizer, get_task("plain_addition", min_digits=1, max_digits=2), config)
    rewards = [trainer.train_step()["reward"] for _ in range(steps)]
    return rewards, time.process_time() - start


def pilot(args) -> None:
    lrs = [float(lr) for lr in args.pilot_lrs.split(",")]
    print(f"pilot: {args.pilot_steps} steps of lesson 21's recipe at lr {', '.join(map(str, lrs))}; "
          "training reward (16 samples a step) by blocks of 5 steps")
    for lr, (rewards, cpu) in zip(lrs, run_parallel(pilot_run, [(lr, args.pilot_steps) for lr in lrs])):
        blocks = [np.mean(rewards[i:i + 5]) for i in range(0, len(rewards), 5)]
        print(f"lr {lr:g}: {' '.join(f'{b:.2f}' for b in blocks)}  ({cpu:.0f} s of CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=2, help="GRPO + LoRA steps to time (0: none)")
    parser.add_argument("--seed", type=int, default=0, help="another seed draws other prompts and other samples")
    parser.add_argument("--pilot", action="store_true", help="run the learning-rate pilot instead")
    parser.add_argument("--pilot-lrs", default="3e-4,1e-3")
    parser.add_argument("--pilot-steps", type=int, default=30)
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    if args.pilot:
        pilot(args)
    else:
        signal_and_step_time(args)


if __name__ == "__main__":
    main()
