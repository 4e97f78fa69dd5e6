"""The plain-addition task (lesson 21's real-LLM task) and its last-number verifier."""

from collections import Counter

import pytest

from rlbook.tasks import PlainAdditionTask, get_task, last_integer, last_number_reward


@pytest.mark.parametrize("text, expected", [
    ("41", "41"), ("The answer is 41.", "41"), ("7 + 34 = 41", "41"), ("41 + 1 = 42", "42"),
    ("041", "41"), ("000", "0"), ("-0", "0"), ("-41", "-41"), ("41.5", "5"), ("4,1", "1"),
    ("", None), ("no digits here", None), ("٤١", None),  # Arabic-Indic digits are not read as a number
    ("41<|im_end|>", "41"),
])
def test_last_integer(text, expected):
    assert last_integer(text) == expected


@pytest.mark.parametrize("text, strict, lax", [
    ("41", 1.0, 1.0),
    ("The sum of 7 and 34 is 41.", 1.0, 1.0),
    ("41 is the answer, not 40", 0.0, 1.0),   # the last number decides; lax finds 41 anywhere
    ("41 + 1 = 42", 0.0, 1.0),
    ("-41", 0.0, 1.0),
    ("141", 0.0, 0.0),
    ("The answer is 4", 0.0, 0.0),
])
def test_last_number_reward_cases(text, strict, lax):
    assert last_number_reward(text, "41", strict=True) == strict
    assert last_number_reward(text, "41", strict=False) == lax


def test_last_number_reward_forgives_leading_zeros_on_both_sides():
    assert last_number_reward("7", "07") == 1.0
    assert last_number_reward("0", "0") == 1.0


def test_last_number_reward_bounds_its_work():
    assert last_integer("1" * 2000) is None  # a run of digits longer than any answer is refused
    assert last_number_reward("x" * 40_000 + "41", "41") == 0.0  # a runaway reply is wrong


@pytest.mark.parametrize("call, argument", [
    (lambda: last_number_reward("41", 41), "answer"),
    (lambda: last_number_reward("41", "-41"), "answer"),
    (lambda: last_number_reward(None, "41"), "text"),
    (lambda: PlainAdditionTask(min_digits=0), "min_digits"),
    (lambda: PlainAdditionTask(max_digits=19), "max_digits"),
    (lambda: PlainAdditionTask(min_digits=3, max_digits=2), "max_digits"),
    (lambda: PlainAdditionTask().solution({"a": 1}), "'b'"),
    (lambda: PlainAdditionTask().solution({"a": 1, "b": 2}, style="verbose"), "style"),
])
def test_bad_arguments_raise_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_the_question_asks_for_only_the_number_and_the_reward_reads_the_last_one():
    task = get_task("plain_addition")
    row = {"question": "What is 7 + 34? Reply with only the number.", "answer": "41", "a": 7, "b": 34}
    assert task._row((7, 34)) == row
    assert task.solution(row) == "7 + 34 = 41" and task.solution(row, style="direct") == "41"
    for split in ("train", "test"):
        for example in task.dataset(50, seed=3, split=split):
            for style in ("scratchpad", "direct"):
                assert task.reward(task.solution(example, style=style), example) == 1.0
            assert task.reward(f"{example['answer']} + 1", example) == 0.0
    reward = task.reward_fn()
    assert reward(None, ["41", [{"role": "assistant", "content": "It is 41."}], "40"], answer=["41"] * 3) == [1.0, 1.0, 0.0]


def test_operand_digits_are_drawn_uniformly_between_the_bounds():
    task = PlainAdditionTask(min_digits=1, max_digits=2)
    digits = Counter(len(str(x)) for row in task.dataset(2000, seed=0) for x in (row["a"], row["b"]))
    assert set(digits) == {1, 2} and abs(digits[1] / 4000 - 0.5) < 0.05
    assert all(len(str(row["a"])) == 3 for row in PlainAdditionTask(min_digits=3, max_digits=3).dataset(20))


def test_train_and_test_are_disjoint_and_mirrors_share_a_split():
    task = PlainAdditionTask()
    key = lambda row: tuple(sorted((row["a"], row["b"])))  # noqa: E731
    train = {key(row) for row in task.dataset(1000, seed=0, split="train")}
    test = {key(row) for row in task.dataset(300, seed=0, split="test")}
    assert train and test and not train & test


def test_registered_and_rebuilt_from_its_difficulty():
    task = get_task("plain_addition", min_digits=2, max_digits=3)
    assert repr(task) == "PlainAdditionTask(min_digits=2, max_digits=3)"
    rebuilt = get_task(task.name, **task.difficulty)
    assert rebuilt.dataset(5, seed=1).to_list() == task.dataset(5, seed=1).to_list()


def test_reply_breakdown_separates_the_sum_written_from_the_reply_ending_on_it():
    from rlbook.tasks import reply_breakdown

    rows = [{"answer": "41"}, {"answer": "9"}]
    texts = ["41", "41 ⏎ I added 41 to 7 for", "7 + 34 = 41", "40",
             "9", "4 + 5 = 10", "the answer is 9, or 10", "9 is it"]
    parts = reply_breakdown(texts, rows, n_samples=4, truncated=[False, True, False, False] * 2)
    assert parts["right"] == [[1, 0, 1, 0], [1, 0, 0, 1]]
    assert parts["sum written"] == [[1, 1, 1, 0], [1, 0, 1, 1]]
    assert parts["stopped"] == [[1, 0, 1, 1], [1, 0, 1, 1]]
    assert "stopped" not in reply_breakdown(texts, rows, n_samples=4)
    assert "answer given" not in parts  # the rows have no operands


def test_reply_breakdown_counts_a_reply_that_ends_on_an_attempted_sum():
    from rlbook.tasks import reply_breakdown

    rows = [{"answer": "41", "a": 7, "b": 34}, {"answer": "7", "a": 7, "b": 0}]
    texts = ["41", "7 + 34 = 40", "Title: 7 + 34", "The answer is",
             "7 + 0 = 7", "7 + 0 = 0", "8", "no number"]
    parts = reply_breakdown(texts, rows, n_samples=4)
    assert parts["right"] == [[1, 0, 0, 0], [1, 0, 0, 0]]
    # a wrong sum is an answer; ending on an operand or on no integer is not (unless the operand is the sum)
    assert parts["answer given"] == [[1, 1, 0, 0], [1, 0, 1, 0]]
    assert all(g >= r for gs, rs in zip(parts["answer given"], parts["right"]) for g, r in zip(gs, rs))
    with pytest.raises(ValueError, match="texts"):
        reply_breakdown(texts[:-1], rows, n_samples=4)
    with pytest.raises(ValueError, match="truncated"):
        reply_breakdown(texts, rows, n_samples=4, truncated=[False])
    with pytest.raises(ValueError, match="n_samples"):
        reply_breakdown(texts, rows, n_samples=0)
