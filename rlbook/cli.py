"""The ``rlbook`` command line: ``rlbook COMMAND ...``.

Commands live in ``COMMANDS`` (name -> (one-line help, function taking the remaining arguments and
returning an exit code)); adding a command is one entry there and one function.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def zoo_command(argv: list[str]) -> int:
    from rlbook.zoo.__main__ import main as zoo_main

    return zoo_main(argv)


# The model each task trains by default (a zoo name), and the zoo recipes' task settings.
DEFAULT_MODELS = {"arithmetic": "arith-base", "countdown": "countdown-base"}


def train_command(argv: list[str]) -> int:
    """``rlbook train PRESET --task arithmetic --steps N --out DIR [--model NAME] [--set key=value ...]``."""
    from rlbook.models import load_model
    from rlbook.tasks import TASKS, get_task
    from rlbook.trainers import PRESETS, OnlineTrainer, preset

    parser = argparse.ArgumentParser(prog="rlbook train", description="Online RL with a preset of the online trainer.")
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--task", choices=sorted(TASKS), default="arithmetic")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True, help="folder for history.csv, history.json and the checkpoint")
    parser.add_argument("--model", help="zoo name, folder or hub id (default: the task's zoo model)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set lr=1e-4 --set overlong=[64,16] (repeatable)")
    parser.add_argument("--task-set", dest="task_settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a task difficulty setting, e.g. --task-set digits=3 (default: the zoo recipe's)")
    parser.add_argument("--eval-prompts", type=int, default=100, help="held-out prompts for pass@k (0: skip)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    args = parser.parse_args(argv)

    model_name = args.model or DEFAULT_MODELS[args.task]
    task = get_task(args.task, **{**_recipe_task_settings(model_name), **_key_values(args.task_settings)})
    config = preset(args.preset, **_key_values(args.settings))
    model, tokenizer = load_model(model_name)
    trainer = OnlineTrainer(model, tokenizer, task, config)
    out = Path(args.out)
    held_out = task.dataset(args.eval_prompts, seed=config.seed, split="test") if args.eval_prompts else None
    before = trainer.evaluate(held_out) if held_out is not None and not args.resume else None
    history = trainer.train(args.steps, checkpoint_dir=out / "checkpoint",
                            resume_from=out / "checkpoint" if args.resume else None)
    history.to_csv(out / "history.csv")
    history.to_json(out / "history.json")
    summary = {"preset": args.preset, "model": model_name, "task": repr(task), "steps": trainer.step,
               "wall_time_s": round(trainer.wall_time, 1), "last_step": history.postfix()}
    if held_out is not None:
        summary["held_out_before"] = before
        summary["held_out_after"] = trainer.evaluate(held_out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


def _key_values(pairs: list[str]) -> dict:
    """``["lr=1e-4", "lora=none"]`` -> ``{"lr": 0.0001, "lora": None}``: values read as JSON, else strings."""
    values = {}
    for pair in pairs:
        key, separator, text = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        if text.lower() in ("none", "null"):
            values[key] = None
            continue
        try:
            values[key] = json.loads(text)
        except json.JSONDecodeError:
            values[key] = text
    return values


def _recipe_task_settings(model_name: str) -> dict:
    """The task settings a zoo model was trained for (empty for other models)."""
    from rlbook.zoo.recipes import RECIPES

    recipe = RECIPES.get(model_name)
    return dict(recipe.task_settings) if recipe is not None else {}


def preference_command(argv: list[str]) -> int:
    """``rlbook preference LOSS --out DIR [--model NAME] [--pairs FILE] [--steps N] [--set key=value ...]``."""
    from rlbook.trainers import PREFERENCE_LOSSES, PreferenceTrainer

    parser = argparse.ArgumentParser(prog="rlbook preference",
                                     description="Offline preference optimisation: DPO and its relatives.")
    parser.add_argument("loss", choices=PREFERENCE_LOSSES)
    _add_preference_data_arguments(parser)
    parser.add_argument("--labels", choices=["noisy", "gold"], default="noisy",
                        help="training labels: drawn from the gold Bradley-Terry model (noisy, like people) or "
                             "the higher gold reward always chosen (gold); held-out pairs are always gold-ordered")
    parser.add_argument("--min-gold-gap", type=float, default=0.0,
                        help="keep only training pairs whose gold rewards differ by at least this much")
    parser.add_argument("--drop-truncated", action="store_true",
                        help="drop training pairs in which either completion hit the token limit")
    parser.add_argument("--repeat-penalty", type=float,
                        help="with --labels gold: order training and held-out pairs by a gold reward with this "
                             "repeat penalty instead of the labeller's 1.5 (0 switches the rule off; "
                             "rlbook.tasks.reviews.relabel_pairs)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a PreferenceTrainer argument, e.g. --set beta=0.1 --set lr=1e-4 (repeatable)")
    args = parser.parse_args(argv)
    if args.repeat_penalty is not None and args.labels != "gold":
        parser.error("--repeat-penalty re-orders pairs by a gold reward: use it with --labels gold")

    model, tokenizer, pairs, eval_pairs = _preference_data(
        args, repeat_penalty=args.repeat_penalty, noisy_labels=args.labels == "noisy",
        min_gold_gap=args.min_gold_gap, drop_truncated=args.drop_truncated)
    trainer = PreferenceTrainer(model, tokenizer, pairs, loss=args.loss, steps=args.steps, eval_pairs=eval_pairs,
                                seed=args.seed, **_key_values(args.settings))
    start, cpu_start = time.perf_counter(), time.process_time()
    history = trainer.train()
    summary = {"loss": args.loss, "model": args.model, "pairs": len(pairs), "held_out_pairs": len(eval_pairs),
               "steps": trainer.steps, "wall_time_s": round(time.perf_counter() - start, 1),
               "cpu_time_s": round(time.process_time() - cpu_start, 1), "held_out": trainer.evaluate()}
    _write_run(Path(args.out), history, summary, trainer.model, tokenizer)
    return 0


def reward_model_command(argv: list[str]) -> int:
    """``rlbook reward-model --out DIR [--model NAME] [--pairs FILE] [--steps N] [--set key=value ...]``."""
    from rlbook.trainers import RewardModel, pairwise_accuracy, train_reward_model

    parser = argparse.ArgumentParser(prog="rlbook reward-model",
                                     description="A Bradley-Terry reward model on preference pairs.")
    _add_preference_data_arguments(parser)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a train_reward_model argument, e.g. --set lr=3e-4 --set batch_size=32 (repeatable)")
    args = parser.parse_args(argv)

    model, tokenizer, pairs, eval_pairs = _preference_data(args)
    reward_model = RewardModel.from_causal_lm(model, tokenizer, seed=args.seed)
    start = time.perf_counter()
    history = train_reward_model(reward_model, pairs, steps=args.steps, eval_pairs=eval_pairs, seed=args.seed,
                                 **_key_values(args.settings))
    summary = {"model": args.model, "pairs": len(pairs), "held_out_pairs": len(eval_pairs), "steps": len(history),
               "wall_time_s": round(time.perf_counter() - start, 1),
               "held_out": pairwise_accuracy(reward_model, eval_pairs)}
    _write_run(Path(args.out), history, summary, reward_model.model, tokenizer)
    return 0


def sft_command(argv: list[str]) -> int:
    """``rlbook sft --out DIR --steps N (--data FILE | --task TASK) [--model NAME] [--set key=value ...]``."""
    from datasets import Dataset

    from rlbook.models import load_model
    from rlbook.tasks import get_task
    from rlbook.trainers import sft

    parser = argparse.ArgumentParser(prog="rlbook sft", description="Supervised fine-tuning on completions.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="a JSON / JSON-lines file with prompt and completion columns")
    source.add_argument("--task", choices=sorted(DEFAULT_MODELS), help="fine-tune on the task's reference solutions")
    parser.add_argument("--examples", type=int, default=2000, help="training problems drawn with --task")
    parser.add_argument("--style", choices=["scratchpad", "direct"], default="scratchpad", help="solutions' style")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True, help="folder for history.csv, history.json and the model")
    parser.add_argument("--model", help="zoo name, folder or hub id (default with --task: the task's zoo model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="an sft argument, e.g. --set lr=3e-4 --set batch_size=32 (repeatable)")
    args = parser.parse_args(argv)
    if args.model is None and args.task is None:
        parser.error("--model is required with --data")

    model_name = args.model or DEFAULT_MODELS[args.task]
    model, tokenizer = load_model(model_name)
    if args.task is not None:
        task = get_task(args.task, **_recipe_task_settings(model_name))
        examples = task.dataset(args.examples, seed=args.seed, split="train")
        data = [(example["prompt"], task.solution(example, style=args.style)) for example in examples]
    else:
        data = Dataset.from_json(args.data)
    start = time.perf_counter()
    history = sft(model, tokenizer, data, steps=args.steps, seed=args.seed, **_key_values(args.settings))
    summary = {"model": model_name, "examples": len(data), "steps": len(history),
               "wall_time_s": round(time.perf_counter() - start, 1), "last_loss": history[-1]["loss"]}
    _write_run(Path(args.out), history, summary, model, tokenizer)
    return 0


def _add_preference_data_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``preference`` and ``reward-model``: the model, the pairs, the budget."""
    parser.add_argument("--out", required=True, help="folder for history, summary, pairs and the trained model")
    parser.add_argument("--model", default="review-base", help="zoo name, folder or hub id")
    parser.add_argument("--pairs", help="a JSON / JSON-lines file of (prompt, chosen, rejected) pairs "
                                        "(default: sample them from --model, labelled by the reviews' gold labeller)")
    parser.add_argument("--eval-pairs", help="held-out pairs (default: sampled on test prompts, gold-ordered)")
    parser.add_argument("--train-prompts", type=int, default=2000, help="prompts to sample training pairs on")
    parser.add_argument("--test-prompts", type=int, default=300, help="prompts to sample held-out pairs on")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: one epoch)")
    parser.add_argument("--seed", type=int, default=0)


def _preference_data(args, *, repeat_penalty: float | None = None, **pair_options):
    """(model, tokenizer, pairs, eval_pairs): pairs read from files, or sampled from the model on review
    prompts (two completions each) and labelled by the gold labeller; both are saved in --out.
    ``pair_options`` go to ``policy_preference_pairs`` for the sampled training pairs (held-out pairs:
    every untied pair on the test prompts, gold-ordered). With ``repeat_penalty`` both sets are then
    re-ordered by a gold reward with that repeat penalty (``relabel_pairs``)."""
    from datasets import Dataset

    from rlbook.models import load_model
    from rlbook.tasks.reviews import ReviewTask, relabel_pairs
    from rlbook.trainers.data import policy_preference_pairs

    model, tokenizer = load_model(args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.pairs:
        pairs = Dataset.from_json(args.pairs)
    else:
        prompts = ReviewTask().dataset(args.train_prompts, seed=args.seed, split="train")["prompt"]
        pairs = policy_preference_pairs(model, tokenizer, prompts, seed=args.seed, **pair_options)
    if args.eval_pairs:
        eval_pairs = Dataset.from_json(args.eval_pairs)
    else:
        prompts = ReviewTask().dataset(args.test_prompts, seed=args.seed + 1, split="test")["prompt"]
        eval_pairs = policy_preference_pairs(model, tokenizer, prompts, seed=args.seed + 1, noisy_labels=False)
    if repeat_penalty is not None:
        pairs, eval_pairs = (relabel_pairs(data, repeat_penalty=repeat_penalty) for data in (pairs, eval_pairs))
    pairs.to_json(out / "pairs.jsonl")
    eval_pairs.to_json(out / "eval_pairs.jsonl")
    return model, tokenizer, pairs, eval_pairs


def _write_run(out: Path, history, summary: dict, model, tokenizer) -> None:
    """history.csv, history.json, summary.json and the trained model (``model/``) in ``out``; print the summary."""
    out.mkdir(parents=True, exist_ok=True)
    history.to_csv(out / "history.csv")
    history.to_json(out / "history.json")
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


COMMANDS = {
    "zoo": ("the shipped models: list, build, eval", zoo_command),
    "train": ("online RL: rlbook train PRESET --task TASK --steps N --out DIR", train_command),
    "preference": ("preference optimisation: rlbook preference LOSS --out DIR [--model NAME]", preference_command),
    "sft": ("supervised fine-tuning: rlbook sft --out DIR --steps N (--data FILE | --task TASK)", sft_command),
    "reward-model": ("a Bradley-Terry reward model: rlbook reward-model --out DIR [--model NAME]", reward_model_command),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: rlbook COMMAND ...\n" + "\n".join(f"  {c:12s} {h}" for c, (h, _) in COMMANDS.items()))
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]][1](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
