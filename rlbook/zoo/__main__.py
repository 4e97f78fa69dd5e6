"""Command line for the zoo: ``python -m rlbook.zoo {list,build,eval} ...``."""

from __future__ import annotations

import json
import sys
from functools import partial

from rlbook.cli import (ArgumentParser, add_device_arguments, check_device_arguments, check_model_name, device_and_dtype,
                        run_prepared)
from rlbook.models import load_model
from rlbook.zoo.build import build, read_card
from rlbook.zoo.evaluate import evaluate
from rlbook.zoo.recipes import RECIPES


def prepare(argv: list[str]):
    """Parse and check ``argv`` (``list``, ``build NAME ...`` or ``eval NAME ...``) without loading a
    model; returns the work (a function of no arguments returning an exit code). A bad ``--model``,
    ``--device`` or ``--dtype`` is a ``ValueError`` naming the argument."""
    parser = ArgumentParser(prog="python -m rlbook.zoo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the recipes and their measured cards")
    build_cmd = commands.add_parser("build", help="build a zoo model (or 'all') from its recipe")
    build_cmd.add_argument("name", choices=[*RECIPES, "all"])
    build_cmd.add_argument("--out", help="output folder (default: the package's zoo)")
    build_cmd.add_argument("--steps", type=int, help="override the recipe's training steps")
    build_cmd.add_argument("--corpus-size", type=int, help="override the recipe's corpus size")
    build_cmd.add_argument("--eval-prompts", type=int, help="override the number of held-out prompts")
    build_cmd.add_argument("--no-eval", action="store_true", help="skip measuring the card")
    eval_cmd = commands.add_parser("eval", help="re-measure a zoo model's card numbers, or measure another "
                                                 "model (--model) on the same held-out prompts")
    eval_cmd.add_argument("name", choices=list(RECIPES), help="the recipe: its task, prompts and samples")
    eval_cmd.add_argument("--model", help="zoo name, folder (e.g. rlbook train's OUT/model) or hub id to "
                                          "measure instead of the recipe's own model")
    add_device_arguments(eval_cmd)
    args = parser.parse_args(argv)
    if args.command == "eval":
        if args.model is not None:
            check_model_name("--model", args.model)
        check_device_arguments(args)
    return partial(_run, args)


def _run(args) -> int:
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


def main(argv: list[str] | None = None) -> int:
    """``python -m rlbook.zoo ...``: a mistake in the arguments exits with status 2 and one line on stderr."""
    return run_prepared("python -m rlbook.zoo", prepare, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
