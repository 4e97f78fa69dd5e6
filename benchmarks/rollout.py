"""Sampling speed: rlbook.rollout.sample against transformers' model.generate, measured in one run.

    python benchmarks/rollout.py                  # batch 256, 64 new tokens, zoo "arith-base" if shipped
    python benchmarks/rollout.py --batch 64 --model path/or/hub-id --device cuda
    python benchmarks/rollout.py --num-samples 8     # 32 prompts x 8 samples: GRPO-style groups

Both samplers get the same model, prompts (chat-formatted "What is a+b?" for random 3-digit
pairs, see ``--digits``; with ``--num-samples G``, batch/G distinct prompts with G samples each),
temperature, top-p, max_new_tokens and end/pad tokens (HF's default top-k of 50 is turned off so
both sample the same distribution). Tokens are generated completion tokens, counted up to and
including the end-of-sequence token. Each sampler is warmed up once, then run ``--repeats`` times,
alternating, and the median tokens/s is reported with the ratio rlbook / HF.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from rlbook.models import build_char_tokenizer, build_tiny_model, load_model, zoo_names
from rlbook.rollout import sample


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None,
                        help='zoo name, folder, hub id or "random" (default: "arith-base" if shipped, else random)')
    parser.add_argument("--batch", type=int, default=256, help="number of rows sampled at once")
    parser.add_argument("--num-samples", type=int, default=1, help="samples per prompt (batch / num-samples prompts)")
    parser.add_argument("--digits", type=int, default=3, help="digits of each addend in the prompts")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each sampler (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    parser.add_argument("--device", default="cpu")
    return parser.parse_args()


def get_model(name, device):
    """The requested model, else the zoo's arith-base, else a fresh random tiny model (said so)."""
    if name is None:
        name = "arith-base" if "arith-base" in zoo_names() else "random"
    if name != "random":
        model, tokenizer = load_model(name, device=device)
        return model, tokenizer, name
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="small").to(device).eval()
    note = ("a fresh random build_tiny_model(shape='small'). A random "
            "model emits the end token only by chance (about 1 in 100 per step), so most rows run to "
            "max_new_tokens and dropping finished rows helps little; a trained model's mixed lengths gain more")
    return model, tokenizer, note


def arithmetic_prompts(tokenizer, count, digits=3, seed=0):
    """Chat-formatted "What is a+b?" for random ``digits``-digit a and b (the arithmetic task's format)."""
    rng = random.Random(seed)
    low, high = 10 ** (digits - 1), 10 ** digits - 1
    questions = [f"What is {rng.randint(low, high)}+{rng.randint(low, high)}?" for _ in range(count)]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in questions]


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
    start = time.perf_counter()
    tokens = run(*args)
    seconds = time.perf_counter() - start
    return tokens / seconds, tokens, seconds


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, model_note = get_model(args.model, args.device)
    if args.batch % args.num_samples:
        raise SystemExit(f"--num-samples {args.num_samples} must divide --batch {args.batch}")
    prompts = arithmetic_prompts(tokenizer, args.batch // args.num_samples, args.digits)
    print(f"model: {model_note}")
    load = os.getloadavg()[0]
    print(f"device: {model.device}, torch threads: {torch.get_num_threads()}, torch {torch.__version__}, "
          f"load average before: {load:.1f}")
    if args.device == "cpu" and load > 1.0 and torch.get_num_threads() > 1:
        print("  note: other processes are using the CPU; multi-threaded timings then vary many-fold from run "
              "to run (threads wait for each other); --threads 1 gives steadier numbers")
    print(f"batch {args.batch} = {len(prompts)} prompts x {args.num_samples} samples, max_new_tokens "
          f"{args.max_new_tokens}, temperature {args.temperature}, top_p {args.top_p}")

    samplers = {"rlbook sample": run_rlbook, "HF generate": run_hf}
    for run in samplers.values():  # warm-up
        run(model, tokenizer, prompts, args, 0)
    results = {name: [] for name in samplers}
    for repeat in range(args.repeats):
        for name, run in samplers.items():
            rate, tokens, seconds = tokens_per_second(run, model, tokenizer, prompts, args, repeat + 1)
            results[name].append(rate)
            print(f"  {name:14s} run {repeat + 1}: {tokens:6d} tokens ({tokens / args.batch:4.1f} per row) "
                  f"in {seconds:6.2f} s = {rate:8.0f} tokens/s")
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    for name, rate in medians.items():
        print(f"{name:14s} median {rate:8.0f} tokens/s")
    print(f"ratio rlbook / HF generate: {medians['rlbook sample'] / medians['HF generate']:.2f}x")


if __name__ == "__main__":
    main()
