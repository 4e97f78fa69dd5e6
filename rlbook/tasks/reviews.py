"""Film reviews: the book's preference domain, with a known "gold" preference.

Lessons 04, 06 and 07 need preferences whose truth we know, so that a reward model's or a DPO
policy's accuracy can be measured and over-optimisation seen. Real preference data come from
people; here a hidden gold reward plays the person:

    gold(y) = Σ_clauses sentiment(adjective)            (+1 positive, −1 negative, 0 neutral)
              − REPEAT_PENALTY · (clauses that repeat an earlier aspect or adjective)
              − LENGTH_PENALTY · max(0, clauses − MAX_CLAUSES)

A review is a short list of clauses "the <aspect> was <adjective>" joined by ", " and ended with
".", e.g. "the plot was clever, the music was dull." Text that does not parse gets UNPARSABLE.
People reward praise, but not praise that repeats itself or drags on; a proxy reward model
trained on a few thousand comparisons learns the praise long before it learns the rest, which is
what makes over-optimisation visible (Gao et al. 2022, "Scaling laws for reward model
over-optimization", arXiv:2210.10760).

Comparisons follow Bradley–Terry (Bradley & Terry 1952): P(a ≻ b) = σ((gold(a) − gold(b)) / T).
"""

from __future__ import annotations

import math
import random

from datasets import Dataset

from rlbook._checks import check_choice, check_columns, check_int, check_positive

FILMS = ("Dune", "Heat", "Alien", "Brazil", "Jaws", "Rocky", "Fargo", "Psycho", "Vertigo", "Amelie",
         "Clue", "Big", "Up", "Cars", "Coco", "Elf", "Ran", "Babe", "Shrek", "Tron")
ASPECTS = ("plot", "cast", "music", "ending", "pace", "jokes", "story", "sets")
POSITIVE = ("great", "clever", "superb", "lovely", "moving", "fun")
NEGATIVE = ("dull", "weak", "silly", "bland", "awful", "slow")
NEUTRAL = ("long", "loud", "odd", "short")
SENTIMENT = {**{a: 1.0 for a in POSITIVE}, **{a: -1.0 for a in NEGATIVE}, **{a: 0.0 for a in NEUTRAL}}

REPEAT_PENALTY = 1.5
LENGTH_PENALTY = 1.0
MAX_CLAUSES = 3
UNPARSABLE = -3.0
MAX_REVIEW_CHARS = 400  # longer text is not read at all: it scores UNPARSABLE


def question(film: str) -> str:
    """The user's request for ``film``."""
    return f"Review {film}."


def parse_review(text: str) -> list[tuple[str, str]] | None:
    """The (aspect, adjective) clauses of ``text``, or None when it is not a well-formed review."""
    if not isinstance(text, str) or len(text) > MAX_REVIEW_CHARS:
        return None
    text = text.strip()
    if not text.endswith(".") or text.count(".") != 1:
        return None
    clauses = []
    for clause in text[:-1].split(", "):
        words = clause.split(" ")
        if len(words) != 4 or words[0] != "the" or words[2] != "was":
            return None
        if words[1] not in ASPECTS or words[3] not in SENTIMENT:
            return None
        clauses.append((words[1], words[3]))
    return clauses


def unparsable_kind(text: str, truncated: bool) -> str | None:
    """Why ``text`` scores ``UNPARSABLE``, or None when it parses (a parsable review may score −3 too:
    three criticisms, say). "cut off": the sampler stopped it at its token budget (``truncated``)
    mid-review; "malformed": it ended but is no well-formed review (a fragment like "the b.", a typo)."""
    if parse_review(text) is not None:
        return None
    return "cut off" if truncated else "malformed"


def review_profile(text: str) -> dict | None:
    """What the gold reward sees in a review: ``clauses`` (how many), ``praise`` (clauses with a positive
    adjective) and ``repeat`` (whether any clause repeats an earlier aspect or adjective, which costs
    ``REPEAT_PENALTY``); None when the text does not parse. Lesson 04 compares a reward model's scores
    across gold levels *within* one clause count, so that length cannot stand in for gold or repeats."""
    clauses = parse_review(text)
    if clauses is None:
        return None
    terms = clause_terms(clauses)
    return {"clauses": len(clauses), "praise": sum(SENTIMENT[adjective] > 0 for _, adjective in clauses),
            "repeat": any(repeat for repeat, _, _ in terms)}


def gold_reward(text: str, *, repeat_penalty: float = REPEAT_PENALTY, length_penalty: float = LENGTH_PENALTY) -> float:
    """The hidden "human" score of a review (see the module docstring for the formula).

    ``repeat_penalty`` and ``length_penalty`` weigh the two rules besides sentiment; the defaults
    are the domain's labeller, and 0 switches a rule off (``relabel_pairs`` uses this to test which
    rule a model has failed to learn).
    """
    clauses = parse_review(text)
    if clauses is None:
        return UNPARSABLE
    return float(sum(term for _, _, term in clause_terms(clauses, repeat_penalty=repeat_penalty,
                                                         length_penalty=length_penalty)))


def clause_terms(clauses: list[tuple[str, str]], *, repeat_penalty: float = REPEAT_PENALTY,
                 length_penalty: float = LENGTH_PENALTY) -> list[tuple[bool, bool, float]]:
    """``(repeat, past_limit, term)`` for each clause of ``parse_review``'s output: whether it repeats an
    earlier aspect or adjective, whether it comes after the first ``MAX_CLAUSES``, and its term of the
    gold reward (its sentiment less the penalties it incurs); the terms sum to ``gold_reward``."""
    terms, seen_aspects, seen_adjectives = [], set(), set()
    for position, (aspect, adjective) in enumerate(clauses):
        repeat = aspect in seen_aspects or adjective in seen_adjectives
        past_limit = position >= MAX_CLAUSES
        seen_aspects.add(aspect)
        seen_adjectives.add(adjective)
        terms.append((repeat, past_limit, SENTIMENT[adjective] - repeat_penalty * repeat - length_penalty * past_limit))
    return terms


def decided_by_rule(chosen: str, rejected: str, rule: str) -> bool:
    """Whether one of the gold reward's two rules decides a gold-ordered pair: with ``rule``
    ("repeat" or "length") switched off, ``chosen`` no longer scores strictly above ``rejected``.

    A model that has not learned the rule can order such a pair only by chance or by a proxy, so
    its accuracy on these pairs, beside its accuracy on pairs neither rule decides, shows what the
    rule costs it (lesson 06). The gold reward itself is unchanged.
    """
    check_choice("rule", rule, ("repeat", "length"))
    off = {"repeat_penalty": 0.0} if rule == "repeat" else {"length_penalty": 0.0}
    return gold_reward(chosen, **off) <= gold_reward(rejected, **off)


def gold_preference_probability(text_a: str, text_b: str, *, temperature: float = 0.5) -> float:
    """Bradley–Terry probability that a person prefers ``text_a`` to ``text_b``."""
    temperature = check_positive("temperature", temperature)
    margin = (gold_reward(text_a) - gold_reward(text_b)) / temperature
    return 1.0 / (1.0 + math.exp(-margin))


def gold_preference(text_a: str, text_b: str, *, rng: random.Random | None = None, temperature: float = 0.5) -> int:
    """Which of two reviews the gold labeller prefers: 0 for ``text_a``, 1 for ``text_b``.

    With ``rng`` the label is sampled from Bradley–Terry (noisy, like people); without it the
    higher gold reward wins (ties go to ``text_a``).
    """
    if rng is None:
        return 0 if gold_reward(text_a) >= gold_reward(text_b) else 1
    return 0 if rng.random() < gold_preference_probability(text_a, text_b, temperature=temperature) else 1


def random_review(rng: random.Random, *, max_clauses: int = 5) -> str:
    """A review as the pretraining corpus writes them: 1..max_clauses clauses, any sentiment."""
    n_clauses = rng.randint(1, max_clauses)
    adjectives = POSITIVE + NEGATIVE + NEUTRAL
    clauses = [f"the {rng.choice(ASPECTS)} was {rng.choice(adjectives)}" for _ in range(n_clauses)]
    return ", ".join(clauses) + "."


class ReviewTask:
    """Prompts asking for a film review; rewards come from ``gold_reward`` (or a learned model)."""

    name = "reviews"

    def dataset(self, n: int, *, seed: int = 0, split: str = "train") -> Dataset:
        """``n`` review requests; train films and test films are disjoint (the last 5 are test)."""
        n = check_int("n", n, minimum=0)
        check_choice("split", split, ("train", "test"))
        films = FILMS[:-5] if split == "train" else FILMS[-5:]
        rng = random.Random(seed)
        chosen = [rng.choice(films) for _ in range(n)]
        return Dataset.from_dict({
            "prompt": [[{"role": "user", "content": question(film)}] for film in chosen],
            "question": [question(film) for film in chosen],
            "film": chosen,
        })

    def reward(self, completion: str, example: dict | None = None) -> float:
        """The gold reward of ``completion`` (the prompt does not matter to it)."""
        return gold_reward(completion)


def preference_pairs(prompts: list, completions_a: list[str], completions_b: list[str], *, seed: int = 0,
                     temperature: float = 0.5, drop_ties: bool = True) -> Dataset:
    """Label pairs of completions with the gold Bradley–Terry labeller.

    Returns a ``datasets.Dataset`` with ``prompt``, ``chosen``, ``rejected`` (TRL's preference
    format) and the gold rewards of each. Pairs with equal gold reward carry no preference and are
    dropped when ``drop_ties``.
    """
    if not (len(prompts) == len(completions_a) == len(completions_b)):
        raise ValueError("prompts, completions_a and completions_b must have the same length")
    rng = random.Random(seed)
    rows = {"prompt": [], "chosen": [], "rejected": [], "chosen_gold": [], "rejected_gold": []}
    for prompt, a, b in zip(prompts, completions_a, completions_b):
        gold_a, gold_b = gold_reward(a), gold_reward(b)
        if drop_ties and gold_a == gold_b:
            continue
        first_wins = gold_preference(a, b, rng=rng, temperature=temperature) == 0
        chosen, rejected = (a, b) if first_wins else (b, a)
        rows["prompt"].append(prompt)
        rows["chosen"].append(chosen)
        rows["rejected"].append(rejected)
        rows["chosen_gold"].append(gold_reward(chosen))
        rows["rejected_gold"].append(gold_reward(rejected))
    return Dataset.from_dict(rows)


def relabel_pairs(pairs, *, repeat_penalty: float = REPEAT_PENALTY, length_penalty: float = LENGTH_PENALTY) -> Dataset:
    """The same completions, chosen and rejected re-ordered by a gold reward with other rule weights.

    ``pairs`` has ``prompt``, ``chosen`` and ``rejected`` columns (any labels). Each pair is ordered
    by ``gold_reward(·, repeat_penalty=..., length_penalty=...)`` (higher chosen, deterministically),
    pairs that this reward ties are dropped, and ``chosen_gold`` / ``rejected_gold`` hold the new
    scores. With the default weights it gold-orders the pairs; with ``repeat_penalty=0`` it asks what
    a model would reach if the labeller did not care about repeats — a controlled test of a
    diagnosis, on exactly the same text.
    """
    repeat_penalty = check_positive("repeat_penalty", repeat_penalty, allow_zero=True)
    length_penalty = check_positive("length_penalty", length_penalty, allow_zero=True)
    check_columns("pairs", pairs, ("prompt", "chosen", "rejected"))
    rows = {"prompt": [], "chosen": [], "rejected": [], "chosen_gold": [], "rejected_gold": []}
    for prompt, a, b in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"]):
        gold_a, gold_b = (gold_reward(text, repeat_penalty=repeat_penalty, length_penalty=length_penalty)
                          for text in (a, b))
        if gold_a == gold_b:
            continue
        if gold_a < gold_b:
            a, b, gold_a, gold_b = b, a, gold_b, gold_a
        for column, value in zip(rows, (prompt, a, b, gold_a, gold_b)):
            rows[column].append(value)
    return Dataset.from_dict(rows)
