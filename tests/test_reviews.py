"""The preference domain: review grammar, the gold reward and the Bradley–Terry labeller."""

import random
import subprocess
import sys

import pytest
from datasets import Dataset
from hypothesis import given, settings, strategies as st

from rlbook.tasks.reviews import (
    UNPARSABLE, ReviewTask, decided_by_rule, gold_preference, gold_preference_probability, gold_reward, parse_review,
    preference_pairs, random_review,
)


def test_gold_reward_worked_examples():
    assert gold_reward("the plot was great.") == 1.0
    assert gold_reward("the plot was great, the cast was dull.") == 0.0
    # the second "great" repeats an adjective: +1 +1 −1.5
    assert gold_reward("the plot was great, the cast was great.") == pytest.approx(0.5)
    # four distinct positive clauses: +4, one clause over the limit of three: −1
    assert gold_reward("the plot was great, the cast was fun, the music was lovely, the sets was superb.") == 3.0
    assert gold_reward("great great great") == UNPARSABLE


def test_parse_review_rejects_malformed_text():
    assert parse_review("the plot was great") is None  # no full stop
    assert parse_review("the plot was great. the cast was fun.") is None
    assert parse_review("the robot was great.") is None
    assert parse_review("x" * 10_000) is None
    assert parse_review("the ending was odd, the pace was slow.") == [("ending", "odd"), ("pace", "slow")]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_gold_reward_is_defined_for_any_string(text):
    assert isinstance(gold_reward(text), float)


def test_random_reviews_always_parse():
    rng = random.Random(0)
    assert all(parse_review(random_review(rng)) is not None for _ in range(500))


def test_bradley_terry_labeller():
    better, worse = "the plot was great.", "the plot was dull."
    assert gold_preference(better, worse) == 0 and gold_preference(worse, better) == 1
    p = gold_preference_probability(better, worse, temperature=0.5)
    assert p == pytest.approx(1 / (1 + pytest.importorskip("math").exp(-4.0)))
    rng = random.Random(1)
    wins = sum(gold_preference(better, worse, rng=rng) == 0 for _ in range(4000))
    assert abs(wins / 4000 - p) < 0.02
    with pytest.raises(ValueError, match="temperature"):
        gold_preference_probability(better, worse, temperature=0)


def test_preference_pairs_and_dataset():
    data = ReviewTask().dataset(6, seed=0)
    assert set(data.column_names) >= {"prompt", "question", "film"}
    assert set(ReviewTask().dataset(50, split="train")["film"]).isdisjoint(ReviewTask().dataset(50, split="test")["film"])
    a = ["the plot was great.", "the plot was dull.", "the cast was fun."]
    b = ["the plot was dull.", "the plot was dull.", "the cast was awful."]
    pairs = preference_pairs(["p1", "p2", "p3"], a, b, seed=0)
    assert len(pairs) == 2  # the tie is dropped
    assert set(pairs.column_names) == {"prompt", "chosen", "rejected", "chosen_gold", "rejected_gold"}
    with pytest.raises(ValueError, match="same length"):
        preference_pairs(["p"], a, b)


def test_gold_reward_rule_weights():
    repeated_and_long = "the plot was great, the cast was great, the music was fun, the sets was fun."
    assert gold_reward(repeated_and_long) == pytest.approx(4 - 2 * 1.5 - 1)
    assert gold_reward(repeated_and_long, repeat_penalty=0.0) == pytest.approx(3.0)
    assert gold_reward(repeated_and_long, repeat_penalty=0.0, length_penalty=0.0) == pytest.approx(4.0)
    assert gold_reward("no review", repeat_penalty=0.0) == UNPARSABLE


def test_relabel_pairs_reorders_by_the_reweighted_gold_and_drops_its_ties():
    from rlbook.tasks.reviews import relabel_pairs

    prompt = [{"role": "user", "content": "Review Dune."}]
    repeat = "the plot was great, the cast was great."        # gold 0.5, 2.0 without the repeat rule
    single = "the plot was fun."                              # gold 1.0
    two = "the plot was fun, the cast was lovely."            # gold 2.0
    pairs = Dataset.from_dict({"prompt": [prompt] * 3, "chosen": [single, two, repeat],
                               "rejected": [repeat, repeat, "the plot was dull."]})
    same = relabel_pairs(pairs)
    assert same["chosen"] == [single, two, repeat] and same["chosen_gold"] == [1.0, 2.0, 0.5]
    relabelled = relabel_pairs(pairs, repeat_penalty=0)
    # the first pair flips, the second becomes a tie and is dropped, the third keeps its order
    assert relabelled["chosen"] == [repeat, repeat] and relabelled["rejected"] == [single, "the plot was dull."]
    assert relabelled["chosen_gold"] == [2.0, 2.0] and relabelled["rejected_gold"] == [1.0, -1.0]
    with pytest.raises(ValueError, match="repeat_penalty"):
        relabel_pairs(pairs, repeat_penalty=-1)
    with pytest.raises(ValueError, match="pairs"):
        relabel_pairs(Dataset.from_dict({"prompt": [prompt], "chosen": [single]}))


def test_the_task_does_not_import_the_trainers():
    # tasks sit below trainers: the trainers' data module imports the review domain, never the reverse
    script = "import sys, rlbook.tasks.reviews; print(sorted(m for m in sys.modules if m.startswith('rlbook.trainers')))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_decided_by_rule_names_the_rule_that_orders_a_pair():
    repeat_loses = "the plot was great, the cast was great."  # 0.5; 2 without the repeat rule
    long_loses = "the plot was great, the cast was fun, the music was lovely, the sets was superb."  # 3; 4 without
    plain = "the plot was fun."  # 1
    assert decided_by_rule(plain, repeat_loses, "repeat") and not decided_by_rule(plain, repeat_loses, "length")
    assert not decided_by_rule(long_loses, plain, "length") and not decided_by_rule(long_loses, plain, "repeat")
    assert decided_by_rule("the plot was great, the cast was fun, the music was lovely.",
                           "the plot was great, the cast was fun, the music was lovely, the sets was odd.", "length")
    assert not decided_by_rule(plain, "the plot was dull.", "repeat")
    with pytest.raises(ValueError, match="rule"):
        decided_by_rule(plain, plain, "sentiment")


def test_unparsable_kind_tells_a_cut_off_review_from_a_malformed_one_and_a_parsable_minus_three():
    from rlbook.tasks.reviews import unparsable_kind
    three_criticisms = "the plot was dull, the cast was weak, the music was awful."
    assert gold_reward(three_criticisms) == -3.0 and unparsable_kind(three_criticisms, False) is None
    assert unparsable_kind("the plot was great, the cast wa", True) == "cut off"
    assert unparsable_kind("the b.", False) == "malformed"
    assert unparsable_kind("the plot was graet.", False) == "malformed"


def test_review_profile_counts_clauses_praise_and_repeats():
    from rlbook.tasks.reviews import review_profile

    assert review_profile("the plot was great, the cast was clever, the music was fun.") == {"clauses": 3, "praise": 3, "repeat": False}
    assert review_profile("the plot was great, the plot was clever, the music was fun.") == {"clauses": 3, "praise": 3, "repeat": True}
    assert review_profile("the plot was dull, the cast was dull.") == {"clauses": 2, "praise": 0, "repeat": True}
    assert review_profile("the plot was graet.") is None and review_profile("the b.") is None
