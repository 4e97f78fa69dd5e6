"""Command line for the zoo: ``python -m rlbook.zoo {list,build,eval} ...``."""

from __future__ import annotations

import argparse
import json
import sys

from rlbook.models import load_model
from rlbook.zoo.build import build, read_card
from rlbook.zoo.evaluate import evaluate
from rlbook.zoo.recipes import RECIPES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlbook.zoo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the recipes and their measured cards")
    build_cmd = commands.add_parser("build", help="build a zoo model (or 'all') from its recipe")
    build_cmd.add_argument("name", choices=[*RECIPES, "all"])
    build_cmd.add_argument("--out", help="output folder (default: the package's zoo)")
    build_cmd.add_argument("--steps", type=int, help="override the recipe's training steps")
    build_cmd.add_argument("--corpus-size", type=int, help="override the recipe's corpus size")
    build_cmd.add_argument("--eval-prompts", type=int, help="override the number of held-out prompts")
    build_cmd.add_argument("--no-eval", action="store_true", help="skip measuring the card")
    eval_cmd = commands.add_parser("eval", help="re-measure a zoo model's card numbers")
    eval_cmd.add_argument("name", choices=list(RECIPES))
    args = parser.parse_args(argv)

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
        model, tokenizer = load_model(args.name)
        print(json.dumps(evaluate(model, tokenizer, RECIPES[args.name]), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
