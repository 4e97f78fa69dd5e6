"""The ``rlbook`` command line: ``rlbook COMMAND ...``.

Each command runs in two phases. *Prepare* parses the arguments and checks every setting — the
preset or the trainer's settings, the task's, the model name, the files, the checkpoint to
resume — without loading a model or sampling anything, and returns the work to do; *run* does it.
A mistake found while preparing is reported the way argparse reports one: a single line on
stderr, ``rlbook COMMAND: error: argument --set: lr must be ...``, and exit status 2, seconds
after the command started. An error while running is a bug, and raises as usual.

Every training command writes the same files into ``--out``: ``history.csv``, ``history.json`` and
``config.json`` (``History.save``), ``summary.json``, and the trained model in ``model/``
(``save_pretrained``, with its tokenizer; LoRA adapters are merged into the weights first), which
``rlbook.models.load_model(OUT / "model")`` loads like any other model (``rlbook reward-model``'s:
``RewardModel.from_pretrained(OUT / "model")``). Every training command keeps its checkpoint in
``checkpoint/`` (written at the end, and every ``--checkpoint-every`` steps where offered), and
``--resume`` goes on from it: ``preference`` and ``reward-model`` then train on the pairs the first run
saved in ``--out`` (unless ``--pairs`` names others), so an interrupted run resumed gives the weights
of an uninterrupted one.

Commands live in ``COMMANDS`` (name -> (one-line help, prepare function: the arguments -> the work,
a function of no arguments returning an exit code)); adding a command is one entry there and one
prepare function.

``rlbook --help`` and a usage mistake answer at once: the parsers are built without importing torch,
transformers or datasets (the names they offer as choices are listed here, and
``tests/test_cli_startup.py`` checks them against the library's); the library is imported to check
the settings once the arguments have parsed, and to run.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

# The model each task trains by default (a zoo name).
DEFAULT_MODELS = {"arithmetic": "arith-base", "countdown": "countdown-base"}
MODEL_DIR = "model"
# The choices the parsers offer, named here so that a parser needs no heavy import: the keys of
# rlbook.trainers.PRESETS, rlbook.tasks.TASKS and rlbook.zoo.RECIPES, and rlbook.trainers.PREFERENCE_LOSSES.
PRESET_NAMES = ("cispo", "dapo", "dr_grpo", "gmpo", "grpo", "gspo", "ppo", "reinforce", "rloo", "sapo")
TASK_NAMES = ("arithmetic", "countdown", "plain_addition")
PREFERENCE_LOSS_NAMES = ("dpo", "ipo", "kto", "simpo", "cpo", "orpo")
ZOO_MODEL_NAMES = ("arith-base", "arith-tiny", "countdown-base", "review-base")


class ArgumentParser(argparse.ArgumentParser):
    """argparse, except that a mistake raises ``ValueError`` for ``main`` to report in one line."""

    def error(self, message):
        raise ValueError(message)


# --- zoo ----------------------------------------------------------------------------------
def prepare_zoo(argv: list[str]):
    """Parse and check ``argv`` (``list``, ``build NAME ...`` or ``eval NAME ...``) without loading a
    model; returns the work (a function of no arguments returning an exit code). A bad ``--model``,
    ``--device`` or ``--dtype`` is a ``ValueError`` naming the argument."""
    parser = ArgumentParser(prog="python -m rlbook.zoo", description="Command line for the zoo: "
                            "``python -m rlbook.zoo {list,build,eval} ...`` (or ``rlbook zoo ...``).")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the recipes and their measured cards")
    build_cmd = commands.add_parser("build", help="build a zoo model (or 'all') from its recipe")
    build_cmd.add_argument("name", choices=[*ZOO_MODEL_NAMES, "all"])
    build_cmd.add_argument("--out", help="output folder (default: the package's zoo)")
    build_cmd.add_argument("--steps", type=int, help="override the recipe's training steps")
    build_cmd.add_argument("--corpus-size", type=int, help="override the recipe's corpus size")
    build_cmd.add_argument("--eval-prompts", type=int, help="override the number of held-out prompts")
    build_cmd.add_argument("--no-eval", action="store_true", help="skip measuring the card")
    eval_cmd = commands.add_parser("eval", help="re-measure a zoo model's card numbers, or measure another "
                                                 "model (--model) on the same held-out prompts")
    eval_cmd.add_argument("name", choices=list(ZOO_MODEL_NAMES), help="the recipe: its task, prompts and samples")
    eval_cmd.add_argument("--model", help="zoo name, folder (e.g. rlbook train's OUT/model) or hub id to "
                                          "measure instead of the recipe's own model")
    add_device_arguments(eval_cmd)
    args = parser.parse_args(argv)
    if args.command == "eval":
        if args.model is not None:
            check_model_name("--model", args.model)
        check_device_arguments(args)
    return partial(_run_zoo, args)


def _run_zoo(args) -> int:
    from rlbook.models import load_model
    from rlbook.zoo.build import build, read_card
    from rlbook.zoo.evaluate import evaluate
    from rlbook.zoo.recipes import RECIPES

    if args.command == "list":
        for name, recipe in RECIPES.items():
            try:
                measured = read_card(name).get("measured")
            except ValueError:
                measured = "not built"
            print(f"{name}: {recipe.summary}\n    {measured}")
    elif args.command == "build":
        names = list(RECIPES) if args.name == "all" else [args.name]
        for name in names:
            out = args.out if args.out and len(names) == 1 else (f"{args.out}/{name}" if args.out else None)
            path = build(name, out_dir=out, steps=args.steps, corpus_size=args.corpus_size,
                         eval_prompts=args.eval_prompts, measure=not args.no_eval)
            print(f"built {name} -> {path}")
            print(json.dumps(read_card(path)["measured"], indent=2))
    elif args.command == "eval":
        model, tokenizer = load_model(args.model or args.name, **device_and_dtype(args))
        print(json.dumps(evaluate(model, tokenizer, RECIPES[args.name]), indent=2))
    return 0


# --- train --------------------------------------------------------------------------------
def prepare_train(argv: list[str]):
    """``rlbook train PRESET --task arithmetic --steps N --out DIR [--model NAME] [--set key=value ...]``."""
    parser = ArgumentParser(prog="rlbook train", description="Online RL with a preset of the online trainer.")
    parser.add_argument("preset", choices=PRESET_NAMES)
    parser.add_argument("--task", choices=TASK_NAMES, default="arithmetic")
    parser.add_argument("--steps", type=positive_int, required=True)
    parser.add_argument("--out", required=True,
                        help="folder for the history, config, summary, checkpoint and trained model")
    parser.add_argument("--model", help="zoo name, folder or hub id (default: the task's zoo model)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set lr=1e-4 --set overlong=[64,16] (repeatable)")
    parser.add_argument("--task-set", dest="task_settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a task difficulty setting, e.g. --task-set digits=3 (default: the zoo recipe's)")
    parser.add_argument("--eval-prompts", type=non_negative_int, default=100,
                        help="held-out prompts for pass@k (0: skip)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    add_device_arguments(parser)
    args = parser.parse_args(argv)
    from rlbook.trainers import preset
    from rlbook.trainers.checkpoint import read_checkpoint_meta
    from rlbook.trainers.online import check_config_matches

    model_name = args.model or DEFAULT_MODELS[args.task]
    check_model_name("--model", model_name)
    check_device_arguments(args)
    with blame("--task-set"):
        task = _task(args.task, {**_recipe_task_settings(model_name), **key_values(args.task_settings)})
    with blame("--set"):
        config = preset(args.preset, **key_values(args.settings))
    checkpoint = Path(args.out) / CHECKPOINT_DIR
    if args.resume:
        with blame("--resume"):
            check_config_matches(config, read_checkpoint_meta(checkpoint).get("config"))
    return partial(_run_train, args, model_name, task, config, checkpoint)


def _run_train(args, model_name: str, task, config, checkpoint: Path) -> int:
    from rlbook.models import load_model
    from rlbook.trainers import OnlineTrainer

    model, tokenizer = load_model(model_name, **device_and_dtype(args))
    trainer = OnlineTrainer(model, tokenizer, task, config)
    held_out = task.dataset(args.eval_prompts, seed=config.seed, split="test") if args.eval_prompts else None
    before = trainer.evaluate(held_out) if held_out is not None and not args.resume else None
    history = trainer.train(args.steps, checkpoint_dir=checkpoint, resume_from=checkpoint if args.resume else None)
    summary = {"preset": args.preset, "model": model_name, "task": repr(task), "steps": trainer.step,
               "wall_time_s": round(trainer.wall_time, 1), "last_step": history.postfix()}
    if held_out is not None:
        summary["held_out_before"] = before
        summary["held_out_after"] = trainer.evaluate(held_out)
    _write_run(Path(args.out), history, summary, trainer.policy, tokenizer)
    return 0


def _task(name: str, settings: dict):
    """Task ``name`` with ``settings``; a setting the task does not have is refused by name."""
    from rlbook.tasks import TASKS, get_task

    known = sorted(inspect.signature(TASKS[name]).parameters)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a setting of task {name!r}; its settings are {', '.join(known)}")
    return get_task(name, **settings)


def _recipe_task_settings(model_name: str) -> dict:
    """The task settings a zoo model was trained for (empty for other models)."""
    from rlbook.zoo.recipes import RECIPES

    recipe = RECIPES.get(model_name)
    return dict(recipe.task_settings) if recipe is not None else {}


# --- preference and reward model ----------------------------------------------------------
def prepare_preference(argv: list[str]):
    """``rlbook preference LOSS --out DIR [--model NAME] [--pairs FILE] [--steps N] [--set key=value ...]``."""
    parser = ArgumentParser(prog="rlbook preference",
                            description="Offline preference optimisation: DPO and its relatives.")
    parser.add_argument("loss", choices=PREFERENCE_LOSS_NAMES)
    _add_preference_data_arguments(parser)
    parser.add_argument("--labels", choices=["noisy", "gold"], default="noisy",
                        help="training labels: drawn from the gold Bradley-Terry model (noisy, like people) or "
                             "the higher gold reward always chosen (gold); held-out pairs are always gold-ordered")
    parser.add_argument("--min-gold-gap", type=non_negative_float, default=0.0,
                        help="keep only training pairs whose gold rewards differ by at least this much")
    parser.add_argument("--drop-truncated", action="store_true",
                        help="drop training pairs in which either completion hit the token limit")
    parser.add_argument("--repeat-penalty", type=non_negative_float,
                        help="with --labels gold: order training and held-out pairs by a gold reward with this "
                             "repeat penalty instead of the labeller's 1.5 (0 switches the rule off; "
                             "rlbook.tasks.reviews.relabel_pairs)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a PreferenceTrainer argument, e.g. --set beta=0.1 --set lr=1e-4 (repeatable)")
    _add_resume_arguments(parser)
    args = parser.parse_args(argv)
    if args.repeat_penalty is not None and args.labels != "gold":
        parser.error("argument --repeat-penalty: it re-orders pairs by a gold reward: use it with --labels gold")
    _check_preference_data_arguments(args)
    from rlbook.trainers.preference import check_preference_settings

    with blame("--set"):
        settings = key_values(args.settings, own_arguments={"loss": "LOSS", "steps": "--steps", "seed": "--seed"})
        check_preference_settings(loss=args.loss, steps=args.steps, seed=args.seed, **settings)
    _check_resume(args)
    return partial(_run_preference, args, settings)


def _run_preference(args, settings: dict) -> int:
    from rlbook.trainers import PreferenceTrainer

    model, tokenizer, pairs, eval_pairs = _preference_data(
        args, repeat_penalty=args.repeat_penalty, noisy_labels=args.labels == "noisy",
        min_gold_gap=args.min_gold_gap, drop_truncated=args.drop_truncated)
    trainer = PreferenceTrainer(model, tokenizer, pairs, loss=args.loss, steps=args.steps, eval_pairs=eval_pairs,
                                seed=args.seed, **settings)
    start, cpu_start = time.perf_counter(), time.process_time()
    history = trainer.train(**_checkpointing(args))
    summary = {"loss": args.loss, "model": args.model, "pairs": len(pairs), "held_out_pairs": len(eval_pairs),
               "steps": trainer.steps, "wall_time_s": round(time.perf_counter() - start, 1),
               "cpu_time_s": round(time.process_time() - cpu_start, 1), "held_out": trainer.evaluate()}
    _write_run(Path(args.out), history, summary, trainer.model, tokenizer)
    return 0


def prepare_reward_model(argv: list[str]):
    """``rlbook reward-model --out DIR [--model NAME] [--pairs FILE] [--steps N] [--set key=value ...]``."""
    parser = ArgumentParser(prog="rlbook reward-model", description="A Bradley-Terry reward model on preference pairs.")
    _add_preference_data_arguments(parser)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a train_reward_model argument, e.g. --set lr=3e-4 --set batch_size=32 (repeatable)")
    _add_resume_arguments(parser)
    args = parser.parse_args(argv)
    _check_preference_data_arguments(args)
    from rlbook.trainers.reward_model import check_reward_model_settings

    with blame("--set"):
        settings = key_values(args.settings, own_arguments={"steps": "--steps", "seed": "--seed"})
        check_reward_model_settings(steps=args.steps, seed=args.seed, **settings)
    _check_resume(args)
    return partial(_run_reward_model, args, settings)


def _run_reward_model(args, settings: dict) -> int:
    from rlbook.trainers import RewardModel, pairwise_accuracy, train_reward_model

    model, tokenizer, pairs, eval_pairs = _preference_data(args)
    reward_model = RewardModel.from_causal_lm(model, tokenizer, seed=args.seed)
    start = time.perf_counter()
    history = train_reward_model(reward_model, pairs, steps=args.steps, eval_pairs=eval_pairs, seed=args.seed,
                                 **settings, **_checkpointing(args))
    summary = {"model": args.model, "pairs": len(pairs), "held_out_pairs": len(eval_pairs), "steps": len(history),
               "wall_time_s": round(time.perf_counter() - start, 1),
               "held_out": pairwise_accuracy(reward_model, eval_pairs)}
    _write_run(Path(args.out), history, summary, reward_model.model, tokenizer)
    return 0


def _add_preference_data_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``preference`` and ``reward-model``: the model, the pairs, the budget."""
    parser.add_argument("--out", required=True, help="folder for history, summary, pairs and the trained model")
    parser.add_argument("--model", default="review-base", help="zoo name, folder or hub id")
    parser.add_argument("--pairs", help="a JSON / JSON-lines file of (prompt, chosen, rejected) pairs "
                                        "(default: sample them from --model, labelled by the reviews' gold labeller)")
    parser.add_argument("--eval-pairs", help="held-out pairs (default: sampled on test prompts, gold-ordered)")
    parser.add_argument("--train-prompts", type=positive_int, default=2000, help="prompts to sample training pairs on")
    parser.add_argument("--test-prompts", type=positive_int, default=300, help="prompts to sample held-out pairs on")
    parser.add_argument("--steps", type=positive_int, help="optimizer steps (default: one epoch)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    add_device_arguments(parser)


def _check_preference_data_arguments(args) -> None:
    check_model_name("--model", args.model)
    check_device_arguments(args)
    _check_file("--pairs", args.pairs)
    _check_file("--eval-pairs", args.eval_pairs)


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

    model, tokenizer = load_model(args.model, **device_and_dtype(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    saved = {"pairs": out / "pairs.jsonl", "eval_pairs": out / "eval_pairs.jsonl"}  # written below
    # --resume: the pairs the interrupted run trained on (already re-ordered), unless others are named
    files = {name: getattr(args, name) or (str(path) if args.resume else None) for name, path in saved.items()}
    if files["pairs"]:
        pairs = Dataset.from_json(files["pairs"])
    else:
        prompts = ReviewTask().dataset(args.train_prompts, seed=args.seed, split="train")["prompt"]
        pairs = policy_preference_pairs(model, tokenizer, prompts, seed=args.seed, **pair_options)
    if files["eval_pairs"]:
        eval_pairs = Dataset.from_json(files["eval_pairs"])
    else:
        prompts = ReviewTask().dataset(args.test_prompts, seed=args.seed + 1, split="test")["prompt"]
        eval_pairs = policy_preference_pairs(model, tokenizer, prompts, seed=args.seed + 1, noisy_labels=False)
    if repeat_penalty is not None:  # re-order each set, except one read back from this run's saved (re-ordered) file
        relabel = {name: files[name] != str(path) for name, path in saved.items()}
        pairs = relabel_pairs(pairs, repeat_penalty=repeat_penalty) if relabel["pairs"] else pairs
        eval_pairs = relabel_pairs(eval_pairs, repeat_penalty=repeat_penalty) if relabel["eval_pairs"] else eval_pairs
    pairs.to_json(saved["pairs"])
    eval_pairs.to_json(saved["eval_pairs"])
    return model, tokenizer, pairs, eval_pairs


# --- sft ----------------------------------------------------------------------------------
def prepare_sft(argv: list[str]):
    """``rlbook sft --out DIR --steps N (--data FILE | --task TASK) [--model NAME] [--set key=value ...]``."""
    parser = ArgumentParser(prog="rlbook sft", description="Supervised fine-tuning on completions.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="a JSON / JSON-lines file with prompt and completion columns")
    source.add_argument("--task", choices=sorted(DEFAULT_MODELS), help="fine-tune on the task's reference solutions")
    parser.add_argument("--examples", type=positive_int, default=2000, help="training problems drawn with --task")
    parser.add_argument("--style", choices=["scratchpad", "direct"], default="scratchpad", help="solutions' style")
    parser.add_argument("--steps", type=positive_int, required=True)
    parser.add_argument("--out", required=True, help="folder for the history, config, summary and the model")
    parser.add_argument("--model", help="zoo name, folder or hub id (default with --task: the task's zoo model)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="an sft argument, e.g. --set lr=3e-4 --set batch_size=32 (repeatable)")
    _add_resume_arguments(parser)
    add_device_arguments(parser)
    args = parser.parse_args(argv)
    if args.model is None and args.task is None:
        parser.error("argument --model: it is required with --data")
    model_name = args.model or DEFAULT_MODELS[args.task]
    check_model_name("--model", model_name)
    check_device_arguments(args)
    _check_file("--data", args.data)
    from rlbook.trainers.sft import check_sft_settings

    with blame("--task"):
        task = _task(args.task, _recipe_task_settings(model_name)) if args.task is not None else None
    with blame("--set"):
        settings = key_values(args.settings, own_arguments={"steps": "--steps", "seed": "--seed"})
        check_sft_settings(steps=args.steps, seed=args.seed, **settings)
    _check_resume(args)
    return partial(_run_sft, args, model_name, task, settings)


def _run_sft(args, model_name: str, task, settings: dict) -> int:
    from datasets import Dataset

    from rlbook.models import load_model
    from rlbook.trainers import sft

    model, tokenizer = load_model(model_name, **device_and_dtype(args))
    if task is not None:
        examples = task.dataset(args.examples, seed=args.seed, split="train")
        data = [(example["prompt"], task.solution(example, style=args.style)) for example in examples]
    else:
        data = Dataset.from_json(args.data)
    start = time.perf_counter()
    history = sft(model, tokenizer, data, steps=args.steps, seed=args.seed, **settings, **_checkpointing(args))
    summary = {"model": model_name, "examples": len(data), "steps": len(history),
               "wall_time_s": round(time.perf_counter() - start, 1), "last_loss": history[-1]["loss"]}
    _write_run(Path(args.out), history, summary, model, tokenizer)
    return 0


# --- checkpoints ----------------------------------------------------------------------------
CHECKPOINT_DIR = "checkpoint"


def _add_resume_arguments(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint-every`` and ``--resume`` (``preference``, ``reward-model``, ``sft``; ``train`` has its own)."""
    parser.add_argument("--checkpoint-every", type=positive_int,
                        help=f"also checkpoint every N steps into --out/{CHECKPOINT_DIR} (default: at the end only)")
    parser.add_argument("--resume", action="store_true", help=f"continue from the checkpoint in --out/{CHECKPOINT_DIR}")


def _check_resume(args) -> None:
    """With ``--resume``, a checkpoint must be in ``--out`` (read cheaply, before any model is loaded; the
    trainer then checks that its settings are the saved ones)."""
    if args.resume:
        from rlbook.trainers.checkpoint import read_checkpoint_meta

        with blame("--resume"):
            read_checkpoint_meta(Path(args.out) / CHECKPOINT_DIR)


def _checkpointing(args) -> dict:
    """The trainer's checkpoint arguments from ``--out``, ``--checkpoint-every`` and ``--resume``."""
    checkpoint = Path(args.out) / CHECKPOINT_DIR
    return dict(checkpoint_dir=checkpoint, checkpoint_every=args.checkpoint_every,
                resume_from=checkpoint if args.resume else None)


# --- checking arguments -------------------------------------------------------------------
@contextmanager
def blame(argument: str):
    """Report a ``ValueError`` raised inside as a mistake in ``argument``, as argparse would."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"argument {argument}: {error}") from None


def key_values(pairs: list[str], *, own_arguments: dict | None = None) -> dict:
    """``["lr=1e-4", "lora=none"]`` -> ``{"lr": 0.0001, "lora": None}``: values read as JSON, else strings.

    ``own_arguments`` maps the keys that have an argument of their own to it (``steps`` -> ``--steps``),
    and such a key is refused here, so that one setting is never given twice.
    """
    values = {}
    for pair in pairs:
        key, separator, text = pair.partition("=")
        if not separator or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        if key in (own_arguments or {}):
            raise ValueError(f"{key} has an argument of its own: give it as {own_arguments[key]}")
        values[key] = None if text.lower() in ("none", "null") else _json_or_text(text)
    return values


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    return _bounded(int, text, minimum=1, expected="a positive int")


def non_negative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    return _bounded(int, text, minimum=0, expected="a non-negative int")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _bounded(float, text, minimum=0.0, expected="a finite non-negative number")


def _bounded(kind, text: str, *, minimum, expected: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not value >= minimum or value == float("inf"):  # `not >=` also refuses NaN
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def check_model_name(argument: str, name: str) -> None:
    """A zoo name, an existing folder or a hub id (``owner/name``): checked without loading anything."""
    from rlbook.models.loading import resolve

    with blame(argument):
        resolve(name)


DTYPES = ("float32", "bfloat16", "float16")


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype``, the same for every command that loads a model."""
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:N or mps (default cpu)")
    parser.add_argument("--dtype", choices=DTYPES, help="the weights' dtype (default: the checkpoint's own, "
                                                        "float32 for the zoo); bfloat16 on a GPU")


def check_device_arguments(args) -> None:
    """The device exists on this machine: checked before any model is loaded."""
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise ValueError(f"argument --device: expected cpu, cuda, cuda:N or mps, got {args.device!r}") from None
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(device.type, False):
        raise ValueError(f"argument --device: {device.type} is not available on this machine")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"argument --device: there is no {args.device} ({torch.cuda.device_count()} CUDA devices)")


def device_and_dtype(args) -> dict:
    """``load_model``'s ``device`` and ``dtype`` from the checked arguments."""
    import torch

    return {"device": args.device, "dtype": None if args.dtype is None else getattr(torch, args.dtype)}


def _check_file(argument: str, path: str | None) -> None:
    if path is not None and not Path(path).is_file():
        raise ValueError(f"argument {argument}: no such file: {path!r}")


# --- writing a run ------------------------------------------------------------------------
def _write_run(out: Path, history, summary: dict, model, tokenizer) -> None:
    """The run's files in ``out`` (``History.save``, summary.json, the model in ``model/``); print the summary."""
    from rlbook.trainers.history import json_default

    history.save(out)
    _plain_model(model).save_pretrained(out / MODEL_DIR)
    tokenizer.save_pretrained(out / MODEL_DIR)
    summary = {**summary, "saved_model": str(out / MODEL_DIR)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=json_default))
    print(json.dumps(summary, indent=1, default=json_default))


def _plain_model(model):
    """The ``transformers`` model to save: a ``peft`` model has its LoRA adapters merged into its weights
    (``merge_and_unload``, which changes the model in place, so this is done last), so that
    ``load_model`` reads it like any other checkpoint."""
    from peft import PeftModel

    return model.merge_and_unload() if isinstance(model, PeftModel) else model


COMMANDS = {
    "zoo": ("the shipped models: list, build, eval", prepare_zoo),
    "train": ("online RL: rlbook train PRESET --task TASK --steps N --out DIR", prepare_train),
    "preference": ("preference optimisation: rlbook preference LOSS --out DIR [--model NAME]", prepare_preference),
    "sft": ("supervised fine-tuning: rlbook sft --out DIR --steps N (--data FILE | --task TASK)", prepare_sft),
    "reward-model": ("a Bradley-Terry reward model: rlbook reward-model --out DIR [--model NAME]",
                     prepare_reward_model),
}


def main(argv: list[str] | None = None) -> int:
    """Run ``rlbook COMMAND ...``; a mistake in the arguments exits with status 2 and one line on stderr."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: rlbook COMMAND ...\n" + "\n".join(f"  {c:12s} {h}" for c, (h, _) in COMMANDS.items()))
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name, (_, prepare) = argv[0], COMMANDS[argv[0]]
    return run_prepared(f"rlbook {name}", prepare, argv[1:])


def run_prepared(prog: str, prepare, argv: list[str]) -> int:
    """``prepare(argv)``, then the work it returns; a ``ValueError`` while preparing is reported as
    ``PROG: error: ...`` in one line on stderr and exits with status 2."""
    try:
        work = prepare(argv)
    except ValueError as error:
        print(f"{prog}: error: {' '.join(str(error).splitlines())}", file=sys.stderr)
        raise SystemExit(2) from None
    return work()


if __name__ == "__main__":
    sys.exit(main())
