"""Synthetic corpora for the zoo: chats in the book's format, built from the tasks' own solutions.

Each corpus is a list of ``(prompt, completion)`` texts. The prompt is the task's question in the
chat template; the completion is the task's reference solution, with its working (scratchpad) for a
``scratchpad_fraction`` of chats and without it for the rest, and with a wrong final answer for a
``noise`` fraction. Direct answers can also be guesses: each of their digits after the first is
replaced by a random one with probability ``direct_digit_noise`` (the corpus's people answer in
their heads and slip; when they write the working out, they rarely do). The mix is what gives a
base model RL headroom: it has seen both ways of answering and does not yet know which one pays.
"""

from __future__ import annotations

import random

from rlbook.tasks import get_task
from rlbook.tasks.reviews import ReviewTask, random_review
from rlbook.zoo.recipes import Recipe


def chat_prompt(tokenizer, question: str) -> str:
    """``question`` as a user turn in the chat template, ready for the assistant's answer."""
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)


def corrupt_answer(completion: str, rng: random.Random) -> str:
    """Replace the text inside ``<answer>…</answer>`` by a plausible wrong one (one digit changed)."""
    head, _, rest = completion.rpartition("<answer>")
    answer, _, tail = rest.partition("</answer>")
    digit_positions = [i for i, ch in enumerate(answer) if ch.isdigit()]
    if not digit_positions:
        return completion
    i = rng.choice(digit_positions)
    wrong = str((int(answer[i]) + rng.randint(1, 9)) % 10)
    return f"{head}<answer>{answer[:i]}{wrong}{answer[i + 1:]}</answer>{tail}"


def guess_digits(completion: str, rng: random.Random, probability: float) -> str:
    """Replace each answer digit after the first by a random digit with ``probability``."""
    head, _, rest = completion.rpartition("<answer>")
    answer, _, tail = rest.partition("</answer>")
    guessed = "".join(str(rng.randrange(10)) if i > 0 and ch.isdigit() and rng.random() < probability else ch
                      for i, ch in enumerate(answer))
    return f"{head}<answer>{guessed}</answer>{tail}"


def build_corpus(recipe: Recipe, tokenizer) -> list[tuple[str, str]]:
    """The deterministic training corpus of ``recipe`` (train split only; the card uses test)."""
    rng = random.Random(recipe.seed)
    if recipe.task == "reviews":
        data = ReviewTask().dataset(recipe.corpus_size, seed=recipe.seed, split="train")
        return [(chat_prompt(tokenizer, q), random_review(rng)) for q in data["question"]]
    task = get_task(recipe.task, **recipe.task_settings)
    data = task.dataset(recipe.corpus_size, seed=recipe.seed, split="train")
    chats = []
    for example in data:
        style = "scratchpad" if rng.random() < recipe.scratchpad_fraction else "direct"
        completion = task.solution(example, style=style)
        if style == "direct" and recipe.direct_digit_noise > 0:
            completion = guess_digits(completion, rng, recipe.direct_digit_noise)
        if rng.random() < recipe.noise:
            completion = corrupt_answer(completion, rng)
        chats.append((chat_prompt(tokenizer, example["question"]), completion))
    return chats
