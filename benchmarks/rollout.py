"""Sampling speed: rlbook.rollout.sample against transformers' model.generate, measured in one run.

    python benchmarks/rollout.py                  # zoo "arith-base", batch 256 distinct prompts, 64 new tokens
    python benchmarks/rollout.py --num-samples 8     # 32 prompts x 8 samples: GRPO-style groups
    python benchmarks/rollout.py --model smollm2-135m-instruct                  # the real model: 64 prompts, 48 tokens
    python benchmarks/rollout.py --model smollm2-135m-instruct --num-samples 8  # 8 prompts x 8 samples
    python benchmarks/rollout.py --batch 64 --model path/or/hub-id --device cuda

Both samplers get the same model, prompts, temperature, top-p, max_new_tokens and end/pad tokens
(HF's default top-k of 50 is turned off so both sample the same distribution). The prompts, through
the tokenizer's chat template: for a zoo model the arithmetic task's "What is a+b?" (random
``--digits``-digit pairs, 3 by default); for the real model (``benchmarks/common.py``) "What is a + b?
Reply with only the number." (2 digits by default), which it answers in anything from a few tokens
to a rambling paragraph. With ``--num-samples G``, batch/G distinct prompts with G samples each.
Tokens are generated completion tokens, counted up to and including the end-of-sequence token.
Each sampler is warmed up once, then run ``--repeats`` times, alternating, and the median tokens/s
is reported with the ratio rlbook / HF; wall-clock and process (CPU) time are printed for each run.
Offline: a pretrained model must already be in rlbook's cache.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from common import addition_rows, emit_result, fill_defaults, get_model, is_pretrained  # first: it turns the hub client offline

import torch

from rlbook.rollout import format_prompts, sample

# Defaults by model kind (an option given on the command line wins).
DEFAULTS = {"zoo": {"batch": 256, "digits": 3, "max_new_tokens": 64, "repeats": 5},
            "pretrained": {"batch": 64, "digits": 2, "max_new_tokens": 48, "repeats": 3}}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None,
                        help='zoo name, pretrained name (smollm2-135m-instruct), folder, hub id or "random" '
                             '(default: "arith-base" if shipped, else random)')
    parser.add_argument("--batch", type=int, default=None, help="rows sampled at once (zoo 256, real model 64)")
    parser.add_argument("--num-samples", type=int, default=1, help="samples per prompt (batch / num-samples prompts)")
    parser.add_argument("--digits", type=int, default=None, help="digits of each addend (zoo 3, real model 2)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="zoo 64, real model 48")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed runs of each sampler, median reported (zoo 5, real model 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    parser.add_argument("--device", default="cpu")
    return fill_defaults(parser.parse_args(), DEFAULTS)


def benchmark_prompts(model_name, tokenizer, count, digits, seed=0):
    """``count`` chat-formatted addition prompts: the real model's plain question, else the arithmetic
    task's "What is a+b?" (the zoo models' format), for random ``digits``-digit a and b."""
    if is_pretrained(model_name):
        conversations = [row["prompt"] for row in addition_rows(count, digits, seed)]
    else:
        rng = random.Random(seed)
        low, high = 10 ** (digits - 1), 10 ** digits - 1
        conversations = [[{"role": "user", "content": f"What is {rng.randint(low, high)}+{rng.randint(low, high)}?"}]
                         for _ in range(count)]
    return format_prompts(tokenizer, conversations)


def run_rlbook(model, tokenizer, prompts, args, seed):
    rollout = sample(model, tokenizer, prompts, num_samples=args.num_samples, max_new_tokens=args.max_new_tokens,
                     temperature=args.temperature, top_p=args.top_p, seed=seed)
    return int(rollout.completion_mask.sum())


def run_hf(model, tokenizer, prompts, args, seed):
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    batch = batch.to(model.device)
    stop_ids = stop_token_ids(model, tokenizer)
    torch.manual_seed(seed)
    with torch.inference_mode():
        output = model.generate(**batch, do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=0,
                                num_return_sequences=args.num_samples, max_new_tokens=args.max_new_tokens,
                                pad_token_id=tokenizer.pad_token_id, eos_token_id=stop_ids)
    return count_until_stop(output[:, batch["input_ids"].shape[1]:], stop_ids)


def stop_token_ids(model, tokenizer):
    """The tokenizer's end-of-sequence id and the model's (rlbook's sampler stops at all of them)."""
    config_ids = model.generation_config.eos_token_id
    config_ids = config_ids if isinstance(config_ids, (list, tuple)) else [config_ids]
    return sorted({tokenizer.eos_token_id, *config_ids} - {None})


def count_until_stop(completions, stop_ids):
    """Generated tokens per row up to and including the first end-of-sequence token, summed."""
    is_eos = torch.isin(completions, torch.tensor(stop_ids, device=completions.device))
    first_eos = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, completions.shape[1])
    return int(first_eos.sum())


def tokens_per_second(run, *args):
    """(tokens/s by the wall clock, tokens, wall seconds, process CPU seconds) of one run."""
    start, start_cpu = time.perf_counter(), time.process_time()
    tokens = run(*args)
    seconds = time.perf_counter() - start
    return tokens / seconds, tokens, seconds, time.process_time() - start_cpu


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, model_note = get_model(args.model, args.device)
    if args.batch % args.num_samples:
        raise SystemExit(f"--num-samples {args.num_samples} must divide --batch {args.batch}")
    prompts = benchmark_prompts(args.model, tokenizer, args.batch // args.num_samples, args.digits)
    print(f"model: {model_note}")
    load = os.getloadavg()[0]
    print(f"device: {model.device}, torch threads: {torch.get_num_threads()}, torch {torch.__version__}, "
          f"load average before: {load:.1f}")
    if args.device == "cpu" and load > 1.0 and torch.get_num_threads() > 1:
        print("  note: other processes are using the CPU; multi-threaded timings then vary many-fold from run "
              "to run (threads wait for each other); --threads 1 gives steadier numbers")
    print(f"batch {args.batch} = {len(prompts)} prompts x {args.num_samples} samples, max_new_tokens "
          f"{args.max_new_tokens}, temperature {args.temperature}, top_p {args.top_p}")
    print(f"first prompt: {prompts[0]!r}")

    samplers = {"rlbook sample": run_rlbook, "HF generate": run_hf}
    for run in samplers.values():  # warm-up
        run(model, tokenizer, prompts, args, 0)
    results = {name: {"wall": [], "cpu": []} for name in samplers}
    for repeat in range(args.repeats):
        for name, run in samplers.items():
            rate, tokens, seconds, cpu = tokens_per_second(run, model, tokenizer, prompts, args, repeat + 1)
            results[name]["wall"].append(rate)
            results[name]["cpu"].append(tokens / cpu)
            print(f"  {name:14s} run {repeat + 1}: {tokens:6d} tokens ({tokens / args.batch:4.1f} per row) "
                  f"in {seconds:6.2f} s (cpu {cpu:6.2f} s) = {rate:8.0f} tokens/s", flush=True)
    medians = {name: {clock: statistics.median(rates) for clock, rates in by_clock.items()}
               for name, by_clock in results.items()}
    for name, rate in medians.items():
        print(f"{name:14s} median {rate['wall']:8.0f} tokens/s (per cpu second: {rate['cpu']:8.0f})")
    ours, theirs = medians["rlbook sample"], medians["HF generate"]
    print(f"ratio rlbook / HF generate: {ours['wall'] / theirs['wall']:.2f}x "
          f"(per cpu second, steadier on a shared machine: {ours['cpu'] / theirs['cpu']:.2f}x)")
    name = args.model or model_note.split(" ")[0]
    emit_result(f"sampler, `{name}` (batch {args.batch} = {len(prompts)} prompts × {args.num_samples} "
                f"sample{'s' if args.num_samples > 1 else ''}, {args.max_new_tokens} new tokens)",
                rlbook=f"{ours['wall']:,.0f} tokens/s", reference=f"HF `generate` {theirs['wall']:,.0f} tokens/s",
                ratio=ours["wall"] / theirs["wall"], ratio_cpu=ours["cpu"] / theirs["cpu"], load_before=load)

if __name__ == "__main__":
    main()
