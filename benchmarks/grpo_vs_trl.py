"""One GRPO step: rlbook's OnlineTrainer against TRL's GRPOTrainer, measured in the same run.

    make bench                                                       # under the settings make gives a user
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py               # zoo "arith-base", 8 prompts x G=8, 48 tokens
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py --steps 5 --prompts 8 --group-size 8 --max-new-tokens 48
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py --beside-busy  # also: rlbook's step beside a busy process

Both trainers get the same model weights (a fresh copy each), tokenizer, task (addition with the
zoo recipe's number of digits; prompts through the tokenizer's chat template), batch (``--prompts``
× ``--group-size`` completions, one optimizer step per batch), generation length, temperature 1,
learning rate, and
the same objective: GRPO's group-normalised advantages (Bessel's σ, as TRL computes it), clip ε = 0.2,
per-response token mean (TRL ``loss_type="grpo"``), β = 0 (no reference model), on the CPU — one
``OnlineConfig`` handed to TRL through ``rlbook.scaling.trl_grpo_config``, which also turns off TRL's
default activation checkpointing (rlbook recomputes nothing, so neither should TRL here). A step is everything from
sampling to the optimizer step. The first step of each is a warm-up and is not counted; the
median of the remaining ``--steps`` is reported, with the ratio TRL / rlbook.

``--beside-busy`` then times rlbook's step again while another process keeps one core busy (a
plain Python loop, started and stopped by this script, ending by itself after 10 minutes at most)
and prints that time against the idle one: a thread policy that collapses when the machine is
shared shows up as a large ratio.

TRL's trainer is built fully offline: the model is saved to a temporary folder and TRL loads it
from there; the tokenizer is the same object type rlbook uses (``rlbook.models.load_tokenizer``,
which keeps the character tokenizer's own pipeline); no hub access, no logging integrations.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from transformers import AutoModelForCausalLM, TrainerCallback

from rlbook.models import build_char_tokenizer, build_tiny_model, load_model, load_tokenizer, zoo_names
from rlbook.scaling import trl_grpo_config
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, preset
from rlbook.zoo.recipes import RECIPES


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help='zoo name or folder (default: "arith-base" if shipped)')
    parser.add_argument("--prompts", type=int, default=8, help="distinct prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up (median reported)")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--digits", type=int, default=None, help="addition digits (default: the zoo recipe's, else 3)")
    parser.add_argument("--beside-busy", action="store_true",
                        help="also time rlbook's step while another process keeps one core busy")
    return parser.parse_args()


def get_model(name):
    """The requested model, else the zoo's arith-base, else a fresh random "small" model (said so)."""
    if name is None and "arith-base" in zoo_names():
        name = "arith-base"
    if name is not None:
        model, tokenizer = load_model(name)
        return model, tokenizer, name
    tokenizer = build_char_tokenizer()
    return build_tiny_model(tokenizer, shape="small"), tokenizer, "random small Qwen2 (no zoo model shipped)"


def benchmark_config(args):
    """The one GRPO configuration both trainers run (TRL's through ``rlbook.scaling.trl_grpo_config``)."""
    return preset("grpo", kl_beta=0.0, group_size=args.group_size, prompts_per_step=args.prompts,
                  max_new_tokens=args.max_new_tokens, lr=args.lr, max_grad_norm=1.0, unbiased_std=True)


def time_rlbook(folder, tokenizer, task, dataset, args) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(folder)
    trainer = OnlineTrainer(model, tokenizer, task, benchmark_config(args), train_dataset=dataset)
    return time_steps(trainer, args)


def time_steps(trainer, args) -> list[float]:
    """Wall time of ``args.steps`` steps after one warm-up step."""
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - start)
    return times[1:]


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step of a transformers Trainer (generation included for GRPO)."""

    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def time_trl(folder, task, dataset, args) -> list[float]:
    from trl import GRPOConfig, GRPOTrainer

    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(output_dir=output_dir, use_cpu=True, report_to="none", save_strategy="no",
                            logging_steps=10_000, max_steps=args.steps + 1, dataloader_num_workers=0,
                            **trl_grpo_config(benchmark_config(args)))
        timer = StepTimer()
        trainer = GRPOTrainer(model=folder, reward_funcs=[task.reward_fn()], args=config, train_dataset=dataset,
                              processing_class=load_tokenizer(folder), callbacks=[timer])
        trainer.train()
    return timer.times[1:]


BUSY_LOOP = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"


def time_rlbook_beside_busy(folder, tokenizer, task, dataset, args) -> list[float]:
    """rlbook's step times while a separate process spins on one core (bounded: it stops itself)."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        return time_rlbook(folder, tokenizer, task, dataset, args)
    finally:
        busy.kill()
        busy.wait()


def main():
    args = parse_args()
    load_before = os.getloadavg()[0]
    warnings.filterwarnings("ignore")
    model, tokenizer, name = get_model(args.model)
    recipe = RECIPES.get(name)
    digits = args.digits or (recipe.task_settings.get("digits", 3) if recipe is not None else 3)
    task = get_task("arithmetic", digits=digits)
    dataset = task.dataset(512, seed=0, split="train")
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        ours = time_rlbook(folder, tokenizer, task, dataset, args)
        theirs = time_trl(folder, task, dataset, args)
        busy = time_rlbook_beside_busy(folder, tokenizer, task, dataset, args) if args.beside_busy else None
    ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
    threads = {name: os.environ.get(name, "unset") for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    print(f"model: {name}; {task!r}; batch {args.prompts} prompts x G={args.group_size}, "
          f"{args.max_new_tokens} new tokens; torch threads {torch.get_num_threads()} "
          f"({', '.join(f'{k}={v}' for k, v in threads.items())}); load average before: {load_before:.1f}")
    print(f"rlbook OnlineTrainer step: median {ours_median:.3f} s  ({', '.join(f'{t:.3f}' for t in ours)})")
    print(f"TRL GRPOTrainer step:      median {theirs_median:.3f} s  ({', '.join(f'{t:.3f}' for t in theirs)})")
    print(f"speed-up (TRL / rlbook): {theirs_median / ours_median:.2f}x")
    if busy is not None:
        print(f"rlbook step beside a busy process: median {statistics.median(busy):.3f} s "
              f"({', '.join(f'{t:.3f}' for t in busy)}) = {statistics.median(busy) / ours_median:.2f}x the idle step")


if __name__ == "__main__":
    main()
