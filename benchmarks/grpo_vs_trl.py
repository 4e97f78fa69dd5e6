"""One GRPO step: rlbook's OnlineTrainer against TRL's GRPOTrainer, measured in the same run.

    make bench                                                       # under the settings make gives a user
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py               # zoo "arith-base", 8 prompts x G=8, 48 tokens
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py --steps 5 --prompts 8 --group-size 8 --max-new-tokens 48
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py --beside-busy  # also: rlbook's step beside a busy process
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py --model smollm2-135m-instruct   # the real model, LoRA r=8

Both trainers get the same model weights (a fresh copy each), tokenizer, task, batch (``--prompts``
× ``--group-size`` completions, one optimizer step per batch), generation length, temperature 1,
learning rate, and the same objective: GRPO's group-normalised advantages (Bessel's σ, as TRL
computes it), clip ε = 0.2, per-response token mean (TRL ``loss_type="grpo"``), β = 0 (no reference
model, so no reference pass in either), on the CPU in float32 — one ``OnlineConfig`` handed to TRL
through ``rlbook.scaling.trl_grpo_config``, which also turns off TRL's default activation
checkpointing (rlbook recomputes nothing, so neither should TRL here); TRL's default bf16 mixed
precision (autocast on the CPU too) is turned off here, as rlbook computes in float32. With one
optimizer step per generation batch TRL computes no separate old-policy pass either (its ratio's
denominator is the detached current log-prob, as rlbook's first minibatch uses the sampler's).

Task and model: a zoo model (default ``arith-base``) trains all its weights on the arithmetic task
(the zoo recipe's number of digits; prompts through the chat template; the task's verifier); the real
model (``--model smollm2-135m-instruct``) trains LoRA adapters (``--lora 8``: rank 8 on the attention
projections, ``rlbook.models.lora.lora_config``, which TRL gets as its ``peft_config``) on plain
addition, "What is a + b? Reply with only the number.", rewarded by the last integer of the reply
(``benchmarks/common.py``). A step is everything from sampling to the optimizer step. The first step
of each is a warm-up and is not counted; the median of the remaining ``--steps`` is reported, with the
ratio TRL / rlbook, by the wall clock and by process (CPU) time. Each step's completions and generated
tokens (end token included) are printed for both, so that the two can be seen doing the same work.

Differences that remain, and are what is being compared: each samples its own completions (other
draws, so each step's lengths differ a little); TRL generates with ``model.generate``, which computes
every row until the longest is done and runs each prompt once per sample, while rlbook drops finished
rows and shares the prompts' prefill; TRL scores the whole batch in one forward pass over every prompt
and completion, rlbook runs each distinct prompt once and scores rows in length-sorted chunks. TRL also
draws its prompts with its own sampler (the same dataset); a prompt is the same token ids in both (TRL's
tokenised chat template equals rlbook's, checked for the real model's).

``--beside-busy`` then times rlbook's step again while another process keeps one core busy (a
plain Python loop, started and stopped by this script, ending by itself after 10 minutes at most)
and prints that time against the idle one: a thread policy that collapses when the machine is
shared shows up as a large ratio.

TRL's trainer is built fully offline: the model is saved to a temporary folder (the real model is read
from rlbook's cache, where it must already be built) and TRL loads it from there; the tokenizer is
the same object type rlbook uses (``rlbook.models.load_tokenizer``, which keeps the character
tokenizer's own pipeline); no hub access, no logging integrations.
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
from dataclasses import dataclass, field

from common import (  # first: offline
    addition_rows, emit_result, fill_defaults, get_model, is_pretrained, last_number_reward, trl_last_number_reward,
)

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from rlbook.models import load_tokenizer
from rlbook.models.lora import lora_config
from rlbook.models.pretrained import pretrained_folder
from rlbook.scaling import trl_grpo_config
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, preset
from rlbook.zoo.recipes import RECIPES

# Defaults by model kind (an option given on the command line wins).
DEFAULTS = {"zoo": {"prompts": 8, "max_new_tokens": 48, "steps": 5, "lr": 1e-5, "lora": 0},
            "pretrained": {"prompts": 4, "max_new_tokens": 32, "steps": 3, "lr": 2e-4, "lora": 8}}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None,
                        help='zoo name, folder or pretrained name (smollm2-135m-instruct); default "arith-base"')
    parser.add_argument("--prompts", type=int, default=None, help="distinct prompts per step (zoo 8, real model 4)")
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="zoo 48, real model 32")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps after the warm-up, median reported (zoo 5, real model 3)")
    parser.add_argument("--lr", type=float, default=None, help="zoo 1e-5, real model (LoRA) 2e-4")
    parser.add_argument("--lora", type=int, default=None, help="LoRA rank, 0 for all weights (zoo 0, real model 8)")
    parser.add_argument("--digits", type=int, default=None,
                        help="addition digits (default: the zoo recipe's, else 3; real model 2)")
    parser.add_argument("--beside-busy", action="store_true",
                        help="also time rlbook's step while another process keeps one core busy")
    return fill_defaults(parser.parse_args(), DEFAULTS)


@dataclass
class Workload:
    """What both trainers train on: rlbook's reward (a task or a function), TRL's, and the prompts."""

    description: str
    reward: object
    trl_reward: object
    dataset: Dataset


def workload(name, args) -> Workload:
    """The real model's plain addition, or the arithmetic task at the zoo recipe's digits."""
    if is_pretrained(name):
        digits = args.digits or 2
        return Workload(f"plain addition, {digits}-digit operands, last integer scored", last_number_reward,
                        trl_last_number_reward, Dataset.from_list(addition_rows(512, digits, seed=0)))
    recipe = RECIPES.get(name)
    digits = args.digits or (recipe.task_settings.get("digits", 3) if recipe is not None else 3)
    task = get_task("arithmetic", digits=digits)
    return Workload(repr(task), task, task.reward_fn(), task.dataset(512, seed=0, split="train"))


def benchmark_config(args):
    """The one GRPO configuration both trainers run (TRL's through ``rlbook.scaling.trl_grpo_config``)."""
    return preset("grpo", kl_beta=0.0, group_size=args.group_size, prompts_per_step=args.prompts,
                  max_new_tokens=args.max_new_tokens, lr=args.lr, max_grad_norm=1.0, unbiased_std=True,
                  lora=args.lora or None)


@dataclass
class Steps:
    """Per step: wall seconds, process CPU seconds, completions and generated tokens (end token included)."""

    wall: list = field(default_factory=list)
    cpu: list = field(default_factory=list)
    completions: list = field(default_factory=list)
    tokens: list = field(default_factory=list)

    def timed(self) -> Steps:
        """The steps after the warm-up."""
        return Steps(*(values[1:] for values in (self.wall, self.cpu, self.completions, self.tokens)))

    def summary(self) -> str:
        work = ", ".join(f"{c}/{t}" for c, t in zip(self.completions, self.tokens))
        return (f"median {statistics.median(self.wall):.3f} s (cpu {statistics.median(self.cpu):.3f} s); "
                f"steps {', '.join(f'{t:.3f}' for t in self.wall)} s; completions/tokens {work}")


def time_rlbook(folder, tokenizer, work: Workload, args) -> Steps:
    model = AutoModelForCausalLM.from_pretrained(folder)
    trainer = OnlineTrainer(model, tokenizer, work.reward, benchmark_config(args), train_dataset=work.dataset)
    steps = Steps()
    for _ in range(args.steps + 1):
        start_cpu = time.process_time()
        row = trainer.train_step()
        steps.cpu.append(time.process_time() - start_cpu)
        steps.wall.append(row["step_time"])
        steps.completions.append(row["trained_samples"])
        steps.tokens.append(round(row["length_mean"] * row["trained_samples"]))
    return steps.timed()


class StepTimer(TrainerCallback):
    """Wall and process time of each optimizer step of a transformers Trainer (generation included for GRPO)."""

    def __init__(self, steps: Steps):
        self.steps, self._start = steps, None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.wall.append(time.perf_counter() - self._start[0])
        self.steps.cpu.append(time.process_time() - self._start[1])


def counting(reward_function, steps: Steps):
    """``reward_function`` (TRL's convention), also recording each call's completions and generated tokens."""

    def reward(prompts=None, completions=None, completion_ids=None, **columns):
        steps.completions.append(len(completions))
        steps.tokens.append(sum(len(ids) for ids in completion_ids))
        return reward_function(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)

    reward.__name__ = getattr(reward_function, "__name__", "reward")
    return reward


def time_trl(folder, work: Workload, args) -> Steps:
    from trl import GRPOConfig, GRPOTrainer

    config = benchmark_config(args)
    steps = Steps()
    with tempfile.TemporaryDirectory() as output_dir:
        trl_config = GRPOConfig(output_dir=output_dir, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                                logging_steps=10_000, max_steps=args.steps + 1, dataloader_num_workers=0,
                                disable_tqdm=True, **trl_grpo_config(config))
        trainer = GRPOTrainer(model=folder, reward_funcs=[counting(work.trl_reward, steps)], args=trl_config,
                              train_dataset=work.dataset, processing_class=load_tokenizer(folder),
                              peft_config=lora_config(r=config.lora) if config.lora else None,
                              callbacks=[StepTimer(steps)])
        trainer.remove_callback(PrinterCallback)  # it would print the end-of-training log
        if trainer.accelerator.mixed_precision != "no" or trainer.model.dtype != torch.float32:
            raise SystemExit(f"TRL would not run in float32 (mixed precision {trainer.accelerator.mixed_precision}, "
                             f"model {trainer.model.dtype}): the comparison would not be like for like")
        trainer.train()
    return steps.timed()


BUSY_LOOP = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"


def time_rlbook_beside_busy(folder, tokenizer, work: Workload, args) -> Steps:
    """rlbook's step times while a separate process spins on one core (bounded: it stops itself)."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        return time_rlbook(folder, tokenizer, work, args)
    finally:
        busy.kill()
        busy.wait()


def main():
    args = parse_args()
    load_before = os.getloadavg()[0]
    warnings.filterwarnings("ignore")
    model, tokenizer, name = get_model(args.model)
    work = workload(name, args)
    with tempfile.TemporaryDirectory() as scratch:
        if is_pretrained(name):
            folder = str(pretrained_folder(name))  # built already (get_model checked): read in place
        else:
            folder = scratch
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        del model
        ours = time_rlbook(folder, tokenizer, work, args)
        theirs = time_trl(folder, work, args)
        busy = time_rlbook_beside_busy(folder, tokenizer, work, args) if args.beside_busy else None
    threads = {name: os.environ.get(name, "unset") for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    print(f"model: {name}; {work.description}; batch {args.prompts} prompts x G={args.group_size}, "
          f"{args.max_new_tokens} new tokens; {f'LoRA r={args.lora}' if args.lora else 'all weights'}, lr {args.lr}; "
          f"torch threads {torch.get_num_threads()} ({', '.join(f'{k}={v}' for k, v in threads.items())}); "
          f"load average before: {load_before:.1f}")
    print(f"rlbook OnlineTrainer step: {ours.summary()}")
    print(f"TRL GRPOTrainer step:      {theirs.summary()}")
    wall = statistics.median(theirs.wall) / statistics.median(ours.wall)
    cpu = statistics.median(theirs.cpu) / statistics.median(ours.cpu)
    print(f"speed-up (TRL / rlbook): {wall:.2f}x (by cpu time, steadier on a shared machine: {cpu:.2f}x)")
    what = (f"`{name}` ({args.prompts} prompts × G = {args.group_size}, {args.max_new_tokens} new tokens"
            f"{f', LoRA r = {args.lora}' if args.lora else ''})")
    emit_result(f"GRPO{' + LoRA' if args.lora else ''} step, {what}",
                rlbook=f"{statistics.median(ours.wall):.3f} s/step",
                reference=f"TRL `GRPOTrainer` {statistics.median(theirs.wall):.3f} s/step", ratio=wall, ratio_cpu=cpu,
                load_before=load_before)
    if busy is not None:
        slower = statistics.median(busy.wall) / statistics.median(ours.wall)
        print(f"rlbook step beside a busy process: {busy.summary()} = {slower:.2f}x the idle step")
        emit_result(f"the same rlbook step, {what}, beside a process that keeps one core busy",
                    rlbook=f"{statistics.median(busy.wall):.3f} s/step",
                    reference=f"rlbook's idle step {statistics.median(ours.wall):.3f} s/step", ratio=1 / slower,
                    ratio_cpu=statistics.median(ours.cpu) / statistics.median(busy.cpu), load_before=load_before)


if __name__ == "__main__":
    main()
