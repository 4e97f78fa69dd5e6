"""Fuzzing: every verifier returns a reward in [0, 1] for any string, quickly, without raising.

Inputs: arbitrary unicode (NUL included), soups of tags, digits and operators, and hostile strings
that would hang or crash a naive verifier (a million-digit answer, 100k open parentheses, power
towers, repeated tags). Each call is timed; the bound is generous for a busy 2-core CI machine and
still far below what an unbounded verifier takes on these inputs (minutes, or a RecursionError).
"""

import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlbook.tasks import ArithmeticTask, CountdownTask
from rlbook.tasks.expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_NESTING,
    ExpressionError,
    evaluate,
    numbers_in,
    parse_expression,
    render,
)
from rlbook.tasks.verifiers import (
    MAX_COMPLETION_CHARS,
    arithmetic_reward,
    completion_text,
    countdown_reward,
    extract_answer,
    extract_answer_lax,
    format_reward,
    is_well_formed,
    last_number_reward,
)

# A verifier bounds its work on any input. Measured as this process's CPU time (time.process_time), which
# another program keeping the cores busy does not inflate, unlike the wall clock.
SECONDS_PER_CALL = 0.5
SLOW_DATA_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=SLOW_DATA_OK)

REWARDS = {
    "format": lambda text: format_reward(text),
    "format_partial": lambda text: format_reward(text, partial=True),
    "arithmetic_strict": lambda text: arithmetic_reward(text, "623", strict=True),
    "arithmetic_lax": lambda text: arithmetic_reward(text, "623", strict=False),
    "countdown_strict": lambda text: countdown_reward(text, [3, 5, 7], 22, strict=True),
    "countdown_lax": lambda text: countdown_reward(text, [3, 5, 7], 22, strict=False),
    "last_number_strict": lambda text: last_number_reward(text, "41", strict=True),
    "last_number_lax": lambda text: last_number_reward(text, "41", strict=False),
}


def timed(function, *args):
    start = time.process_time()
    result = function(*args)
    elapsed = time.process_time() - start
    assert elapsed < SECONDS_PER_CALL, f"{getattr(function, '__name__', function)} took {elapsed:.3f} s"
    return result


def check_every_verifier(text: str) -> dict:
    """Run every verifier on ``text``; check types, ranges and time; return the rewards."""
    rewards = {}
    for name, reward in REWARDS.items():
        value = timed(reward, text)
        assert isinstance(value, float), name
        assert 0.0 <= value <= 1.0, name
        rewards[name] = value
    for extract in (extract_answer, extract_answer_lax):
        answer = timed(extract, text)
        assert answer is None or isinstance(answer, str)
    assert isinstance(timed(is_well_formed, text), bool)
    # Consistency: a strict pass is always a lax pass; partial format credit never undercuts full.
    assert rewards["arithmetic_strict"] <= rewards["arithmetic_lax"]
    assert rewards["countdown_strict"] <= rewards["countdown_lax"]
    assert rewards["format"] <= rewards["format_partial"]
    assert (rewards["format_partial"] == 1.0) == (rewards["format"] == 1.0)
    return rewards


# --- strategies --------------------------------------------------------------------------------

FRAGMENTS = [
    "<think>", "</think>", "<answer>", "</answer>", "<|im_end|>", "<answer", "answer>", "</",
    "(", ")", "+", "-", "*", "/", "**", "^", "=", " ", "\n", "\t", "\x00",
    "0", "3", "5", "7", "9", "22", "623", "15", "999999999999", "9999999999999", "07", "1.5",
    "٣", "１", "é", "\u200b", "\ud7ff", "🙂",
]

arbitrary_text = st.text(max_size=3000)
fragment_soup = st.lists(st.sampled_from(FRAGMENTS), max_size=400).map("".join)
repeated_fragment = st.builds(
    lambda fragment, count: fragment * count, st.sampled_from(FRAGMENTS), st.integers(1, 60_000)
)


@st.composite
def wrapped(draw, inner):
    """``inner`` text placed where the verifiers look: inside an answer block, after a think block."""
    body = draw(inner)
    layout = draw(st.sampled_from(["{}", "<answer>{}</answer>", "<think>x</think><answer>{}</answer>", "{}\n"]))
    return layout.format(body)


HOSTILE = [
    "<answer>" + "9" * 10**6 + "</answer>",
    "(" * 100_000,
    "<answer>" + "(" * 100_000 + "</answer>",
    "<answer>" + "(" * 100 + "1" + ")" * 100 + "</answer>",
    "<answer>" + "(" * MAX_NESTING + "22" + ")" * MAX_NESTING + "</answer>",
    "<answer>" + "(" * (MAX_NESTING + 1) + "22" + ")" * (MAX_NESTING + 1) + "</answer>",
    "9**9**9**9",
    "<answer>9**9**9**9</answer>",
    "<answer>2^1000000</answer>",
    "2^1000000",
    "<answer>" + "9" * 5000 + "</answer>",
    "<answer>" + "*".join(["999999999999"] * 16) + "</answer>",
    "<answer>" + "/".join(["999999999999"] * 16) + "</answer>",
    "<answer>" + "1+" * (MAX_EXPRESSION_CHARS // 2 - 1) + "1</answer>",
    "<answer>" + "1+" * 10**5 + "1</answer>",
    "1+" * (MAX_COMPLETION_CHARS // 2 - 1) + "1",
    "<answer>" * 100_000,
    "</answer>" * 100_000,
    "<answer></answer>" * 50_000,
    "<think>" * 100_000 + "<answer>623</answer>",
    "623 " * (MAX_COMPLETION_CHARS // 4),
    "6" * (MAX_COMPLETION_CHARS - 1),
    "\n" * (MAX_COMPLETION_CHARS - 1) + "22",
    "\x00" * 10**6,
    "🙂" * 10**6,
    "<answer>623</answer>" + " " * 10**6,
    "<answer>" + "\u00a0" * 2000 + "623</answer>",
]


# --- tests -------------------------------------------------------------------------------------


@FUZZ
@given(arbitrary_text)
def test_arbitrary_text(text):
    check_every_verifier(text)


@FUZZ
@given(wrapped(fragment_soup))
def test_tag_and_operator_soup(text):
    check_every_verifier(text)


@settings(max_examples=40, deadline=None, suppress_health_check=SLOW_DATA_OK)
@given(wrapped(repeated_fragment))
def test_long_repetitions(text):
    check_every_verifier(text)


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_strings(text):
    rewards = check_every_verifier(text)
    assert rewards["arithmetic_strict"] == rewards["countdown_strict"] == 0.0


def test_hostile_strings_through_tasks_and_reward_functions():
    arithmetic, countdown = ArithmeticTask(), CountdownTask()
    a_row = arithmetic._row((345, 278))
    c_row = countdown._row(([3, 5, 7], ("+", ("*", 3, 5), 7), 22))
    for text in HOSTILE:
        for message_form in (text, [{"role": "assistant", "content": text}]):
            for strict in (True, False):
                assert timed(lambda: arithmetic.reward(message_form, a_row, strict=strict)) in (0.0, 1.0)
                assert timed(lambda: countdown.reward(message_form, c_row, strict=strict)) in (0.0, 1.0)
    columns = {"numbers": [[3, 5, 7]] * len(HOSTILE), "target": [22] * len(HOSTILE)}
    rewards = timed(lambda: countdown.reward_fn()(None, HOSTILE, **columns))
    assert rewards == [0.0] * len(HOSTILE)


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_every_fragment_repeated_up_to_the_length_cap(fragment):
    """The longest texts the verifiers read in full (longer ones get 0 at once)."""
    text = fragment * (MAX_COMPLETION_CHARS // len(fragment))
    check_every_verifier(text)
    check_every_verifier("<answer>" + text[: MAX_COMPLETION_CHARS - 17] + "</answer>")


@FUZZ
@given(st.one_of(arbitrary_text, fragment_soup))
def test_parser_raises_only_its_own_error(text):
    """Parsing any text gives a tree or an ExpressionError; evaluating a tree gives a Fraction or
    a ZeroDivisionError. Nothing else escapes (no RecursionError, no OverflowError)."""
    start = time.process_time()
    try:
        tree = parse_expression(text)
    except ExpressionError:
        return
    try:
        assert isinstance(evaluate(tree), Fraction)
    except ZeroDivisionError:
        pass
    assert time.process_time() - start < SECONDS_PER_CALL


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join))
def test_completion_text_of_messages(text):
    messages = [
        {"role": "assistant", "content": text},
        {"role": "assistant", "content": [{"type": "text", "text": text}]},
    ]
    assert completion_text(messages).startswith(text)
    check_every_verifier(completion_text(messages))


# --- generated valid expressions: the parser agrees with the tree it renders -----------------

leaves = st.integers(min_value=0, max_value=10**12 - 1)
trees = st.recursive(
    leaves,
    lambda children: st.tuples(st.sampled_from("+-*/"), children, children),
    max_leaves=12,
)


@FUZZ
@given(trees)
def test_render_parse_round_trip(tree):
    text = render(tree)
    if len(text) > MAX_EXPRESSION_CHARS:
        with pytest.raises(ExpressionError):
            parse_expression(text)
        return
    assert parse_expression(text) == tree
    spaced = "".join(f" {char} " if char in "+-*/()" else char for char in text)
    if len(spaced) <= MAX_EXPRESSION_CHARS:
        assert parse_expression(spaced) == tree


@FUZZ
@given(trees)
def test_countdown_strict_accepts_exactly_a_correct_use_of_the_numbers(tree):
    text = render(tree)
    try:
        value = evaluate(tree)
    except ZeroDivisionError:
        assert countdown_reward(f"<answer>{text}</answer>", [1], 1) == 0.0
        return
    numbers = numbers_in(tree)
    if len(text) > MAX_EXPRESSION_CHARS or value.denominator != 1:
        return
    completion = f"<answer>{text}</answer>"
    assert countdown_reward(completion, numbers, int(value)) == 1.0
    assert countdown_reward(completion, numbers + [1], int(value)) == 0.0
    assert countdown_reward(completion, numbers, int(value) + 1) == 0.0
    assert countdown_reward(completion, numbers, int(value) + 1, strict=False) == 0.0


