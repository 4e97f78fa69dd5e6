"""Build a zoo model from its recipe: corpus → training → checkpoint → measured card.

The same recipe and seed give the same weights on the same machine kind (the corpus, the batch
order and the initialisation are all seeded). Files are written to a temporary folder and moved
into place at the end, so an interrupted build never leaves a half-written checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from rlbook._checks import check_choice, check_int
from rlbook.models import build_char_tokenizer, build_tiny_model, count_parameters
from rlbook.models.loading import ZOO_DIR
from rlbook.runtime import seed_everything
from rlbook.zoo.corpora import build_corpus
from rlbook.zoo.evaluate import evaluate
from rlbook.trainers.next_token import train_on_chats
from rlbook.zoo.recipes import RECIPES

CARD_FILE = "card.json"


def build(name: str, *, out_dir: str | Path | None = None, steps: int | None = None,
          corpus_size: int | None = None, eval_prompts: int | None = None, measure: bool = True,
          progress: bool = True) -> Path:
    """Build zoo model ``name`` into ``out_dir`` (default: the package's zoo folder) and return it.

    ``steps``, ``corpus_size`` and ``eval_prompts`` override the recipe (tests use a tiny budget);
    ``measure=False`` skips the card's evaluation.
    """
    check_choice("name", name, RECIPES)
    recipe = RECIPES[name]
    overrides = {"steps": steps, "corpus_size": corpus_size, "eval_prompts": eval_prompts}
    for key, value in overrides.items():
        if value is not None:
            check_int(key, value, minimum=1)
    recipe = dataclasses.replace(recipe, **{k: v for k, v in overrides.items() if v is not None})
    target = Path(out_dir) if out_dir is not None else ZOO_DIR / name

    seed_everything(recipe.seed)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape=recipe.shape, seed=recipe.seed)
    started = time.perf_counter()
    losses = train_on_chats(model, tokenizer, build_corpus(recipe, tokenizer), steps=recipe.steps,
                            batch_size=recipe.batch_size, lr=recipe.lr, seed=recipe.seed, progress=progress)
    train_seconds = time.perf_counter() - started
    card = {
        "name": name,
        "summary": recipe.summary,
        "recipe": dataclasses.asdict(recipe),
        "model_class": type(model).__name__,
        "parameters": count_parameters(model),
        "final_train_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "train_seconds": round(train_seconds, 1),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "build_command": f"python -m rlbook.zoo build {name}",
        "measured": evaluate(model, tokenizer, recipe) if measure else None,
    }
    write_checkpoint(model, tokenizer, card, target)
    return target


def write_checkpoint(model, tokenizer, card: dict, target: Path) -> None:
    """Save weights, tokenizer, card.json and README.md into ``target`` atomically (temp dir + rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
        (staging / "README.md").write_text(render_card(card))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def render_card(card: dict) -> str:
    """The human-readable model card (README.md beside the weights)."""
    recipe = card["recipe"]
    lines = [
        f"# {card['name']}", "", card["summary"], "",
        "## How it was built", "",
        f"`{card['build_command']}` — a {card['model_class']} with {card['parameters']:,} parameters, trained from "
        f"scratch for {recipe['steps']} AdamW steps (batch {recipe['batch_size']}, peak lr {recipe['lr']}, seed "
        f"{recipe['seed']}) on {recipe['corpus_size']:,} synthetic chats of the `{recipe['task']}` task "
        f"{recipe['task_settings'] or ''} (train split), {recipe['scratchpad_fraction']:.0%} of them showing their "
        f"working in `<think>`, {recipe['noise']:.0%} with a wrong final answer on purpose, each digit of a direct "
        f"answer guessed with probability {recipe['direct_digit_noise']}. Loss on the completion "
        f"tokens only; final training loss {card['final_train_loss']}; {card['train_seconds']} s on the build "
        f"machine (torch {card['torch']}).", "",
    ]
    measured = card.get("measured")
    if measured:
        lines += ["## Measured on the held-out split", "",
                  f"{measured['eval_prompts']} test-split prompts × {measured['eval_samples']} samples at "
                  f"temperature {measured['temperature']}:", "", "| metric | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in measured.items()
                  if key not in ("eval_prompts", "eval_samples", "temperature")]
        lines += ["", "`tests/test_zoo.py` re-measures these numbers and checks them within sampling tolerance."]
    return "\n".join(lines) + "\n"


def read_card(name_or_path: str | Path) -> dict:
    """The card of a zoo model (by name) or of a built folder."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        folder = ZOO_DIR / str(name_or_path)
    path = folder / CARD_FILE
    if not path.is_file():
        raise ValueError(f"name_or_path={name_or_path!r} has no {CARD_FILE}")
    return json.loads(path.read_text())


def zoo_table(names=None) -> str:
    """A Markdown table of the shipped models' measured cards (the README shows it)."""
    names = list(RECIPES) if names is None else list(names)
    lines = ["| model | what it is | measured on held-out prompts |", "|---|---|---|"]
    for name in names:
        card = read_card(name)
        measured = card["measured"] or {}
        if "pass_at_1" in measured:
            k = measured["eval_samples"]
            numbers = (f"pass@1 {measured['pass_at_1']:.2f}, pass@{k} {measured['pass_at_' + str(k)]:.2f}, scratchpad used "
                       f"{measured['scratchpad_rate']:.0%} (accuracy {measured['accuracy_with_scratchpad']:.2f} with, "
                       f"{measured['accuracy_without_scratchpad']:.2f} without)")
        else:
            numbers = (f"mean gold reward {measured.get('mean_gold_reward', float('nan')):.2f} "
                       f"(std {measured.get('gold_reward_std', float('nan')):.2f}), parses "
                       f"{measured.get('parse_rate', float('nan')):.0%}")
        lines.append(f"| `{name}` | {card['summary']} | {numbers} |")
    return "\n".join(lines)
