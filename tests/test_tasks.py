"""The task families: exact text formats, datasets, splits, reference solutions, reward plumbing."""

from collections import Counter

import pytest

from rlbook.tasks import (
    FORMAT_INSTRUCTION,
    ArithmeticTask,
    CountdownTask,
    addition_steps,
    get_task,
    is_well_formed,
    split_of,
)
from rlbook.tasks.expressions import evaluate, numbers_in, parse_expression, render
from rlbook.tasks.verifiers import extract_answer

TASK_SETTINGS = [
    ("arithmetic", {"digits": 1}),
    ("arithmetic", {"digits": 3}),
    ("arithmetic", {"digits": 5}),
    ("arithmetic", {"digits": 3, "first_digits": 2}),
    ("countdown", {}),
    ("countdown", {"n_numbers": 4, "max_number": 25}),
    ("countdown", {"n_numbers": 2, "max_number": 10, "max_target": 50}),
]


def task_id(setting):
    name, difficulty = setting
    return name + "".join(f"-{key}{value}" for key, value in difficulty.items())


@pytest.fixture(params=TASK_SETTINGS, ids=[task_id(s) for s in TASK_SETTINGS])
def task(request):
    name, difficulty = request.param
    return get_task(name, **difficulty)


# --- exact formats ---------------------------------------------------------------------------


def test_arithmetic_formats_match_the_spec():
    task = ArithmeticTask(digits=3)
    example = {"question": "What is 345+278?", "answer": "623", "a": 345, "b": 278}
    assert task.solution(example) == "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"
    assert task.solution(example, style="direct") == "<answer>623</answer>"
    row = task._row((345, 278))
    assert row == {"question": "What is 345+278?", "answer": "623", "a": 345, "b": 278}


def test_arithmetic_scratchpad_carry_out_and_unequal_lengths():
    assert addition_steps(999, 1) == ["9+1=10", "9+0+1=10", "9+0+1=10"]
    task = ArithmeticTask()
    assert task.solution({"a": 999, "b": 1}) == "<think>9+1=10\n9+0+1=10\n9+0+1=10</think><answer>1000</answer>"
    assert addition_steps(7, 12) == ["7+2=9", "0+1=1"]
    assert addition_steps(0, 0) == ["0+0=0"]
    assert addition_steps(95, 5) == ["5+5=10", "9+0+1=10"]


def test_arithmetic_scratchpad_last_line_and_carries_spell_the_sum():
    task = ArithmeticTask(digits=4)
    for row in task.dataset(200, seed=3):
        lines = addition_steps(row["a"], row["b"])
        sums = [int(line.split("=")[1]) for line in lines]
        digits = "".join(str(s % 10) for s in reversed(sums))
        leading = "1" if sums[-1] >= 10 else ""
        assert leading + digits == row["answer"] == str(row["a"] + row["b"])


def test_countdown_formats_match_the_spec():
    task = CountdownTask()
    example = {"numbers": [3, 5, 7], "target": 22, "reference": "3*5+7"}
    assert task.solution(example) == "<think>3*5=15\n15+7=22</think><answer>3*5+7</answer>"
    assert task.solution(example, style="direct") == "<answer>3*5+7</answer>"
    row = task._row(([3, 5, 7], ("+", ("*", 3, 5), 7), 22))
    assert row == {
        "question": "Using 3 5 7 make 22.",
        "answer": "22",
        "numbers": [3, 5, 7],
        "target": 22,
        "reference": "3*5+7",
    }


def test_countdown_scratchpad_with_parentheses():
    task = CountdownTask()
    example = {"numbers": [10, 14, 9], "target": 2, "reference": "10/(14-9)"}
    assert task.solution(example) == "<think>14-9=5\n10/5=2</think><answer>10/(14-9)</answer>"


def test_solutions_are_well_formed(task):
    for row in task.dataset(50, seed=1):
        for style in ("scratchpad", "direct"):
            text = task.solution(row, style=style)
            assert is_well_formed(text)
            assert (style == "scratchpad") == text.startswith("<think>")


# --- reference solutions verify --------------------------------------------------------------


def test_solutions_verify_strict_and_lax(task):
    for split in ("train", "test"):
        for row in task.dataset(100, seed=2, split=split):
            for style in ("scratchpad", "direct"):
                text = task.solution(row, style=style)
                assert task.reward(text, row, strict=True) == 1.0
                assert task.reward(text, row, strict=False) == 1.0


def test_countdown_reference_uses_each_number_once_with_positive_integer_steps():
    task = CountdownTask(n_numbers=5, max_number=30, max_target=200)
    for row in task.dataset(300, seed=4):
        tree = parse_expression(row["reference"])
        assert Counter(numbers_in(tree)) == Counter(row["numbers"])
        assert evaluate(tree) == row["target"]
        assert 1 <= row["target"] <= 200
        assert render(tree) == row["reference"]
        for line in task.solution(row).removeprefix("<think>").split("</think>")[0].split("\n"):
            value = line.split("=")[1]
            assert value.isdigit() and int(value) > 0
        assert extract_answer(task.solution(row)) == row["reference"]


def test_countdown_question_lists_the_numbers_and_target():
    for row in CountdownTask(n_numbers=4).dataset(50, seed=0):
        assert row["question"] == f"Using {' '.join(map(str, row['numbers']))} make {row['target']}."
        assert row["answer"] == str(row["target"])
        assert len(row["numbers"]) == 4
        assert all(1 <= number <= 20 for number in row["numbers"])


# --- datasets ----------------------------------------------------------------------------------


def test_dataset_columns(task):
    data = task.dataset(20, seed=0)
    family = {"arithmetic": {"a", "b"}, "countdown": {"numbers", "target", "reference"}}[task.name]
    assert set(data.column_names) == {"prompt", "question", "answer"} | family
    assert len(data) == 20
    row = data[0]
    assert row["prompt"] == [{"role": "user", "content": row["question"]}]
    assert isinstance(row["answer"], str)
    if task.name == "arithmetic":
        assert row["question"] == f"What is {row['a']}+{row['b']}?"
        assert row["answer"] == str(row["a"] + row["b"])
        assert len(str(row["a"])) == task.difficulty.get("first_digits", task.digits)
        assert len(str(row["b"])) == task.digits


def test_dataset_system_prompt():
    row = ArithmeticTask().dataset(1, system_prompt=FORMAT_INSTRUCTION)[0]
    assert row["prompt"] == [
        {"role": "system", "content": FORMAT_INSTRUCTION},
        {"role": "user", "content": row["question"]},
    ]


def test_empty_dataset_keeps_its_columns():
    data = CountdownTask().dataset(0)
    assert len(data) == 0
    assert set(data.column_names) == {"prompt", "question", "answer", "numbers", "target", "reference"}


def test_dataset_is_deterministic_for_a_seed(task):
    first = task.dataset(64, seed=7, split="test").to_list()
    assert first == task.dataset(64, seed=7, split="test").to_list()
    assert first != task.dataset(64, seed=8, split="test").to_list()
    assert task.dataset(16, seed=7, split="test").to_list() == first[:16]


def test_train_and_test_are_disjoint(task):
    train = set(task.dataset(2000, seed=0, split="train")["question"])
    test = set(task.dataset(500, seed=0, split="test")["question"])
    assert train and test
    assert train.isdisjoint(test)


def test_mirrored_problems_share_a_split():
    task = ArithmeticTask(digits=2)
    test = task.dataset(300, seed=0, split="test")
    for row in test:
        assert split_of(task._split_key((row["b"], row["a"]))) == "test"
    countdown = CountdownTask()
    for row in countdown.dataset(300, seed=0, split="test"):
        shuffled = (list(reversed(row["numbers"])), None, row["target"])
        assert split_of(countdown._split_key(shuffled)) == "test"


def test_split_of_is_stable_and_near_the_test_fraction():
    assert split_of("345+278") == split_of("345+278")
    keys = [f"{a}+{a + 1}" for a in range(5000)]
    fraction = sum(split_of(key) == "test" for key in keys) / len(keys)
    assert 0.17 < fraction < 0.23


def test_split_of_is_pinned():
    # Pinned values: if this fails, problems have silently moved between train and test, and
    # every recorded held-out score (the zoo cards) is no longer held out.
    assert [a for a in range(40) if split_of(f"{a}+{a}") == "test"] == [0, 2, 15, 21, 24, 25, 26, 30, 31, 32, 34]


def test_generation_grows_linearly_with_the_number_of_problems(monkeypatch):
    """10x the problems costs about 10x the work: the draws (each one problem proposed, then kept or
    rejected by the held-out split) are counted, not timed, so a busy machine cannot fail this. A
    generation step that retried more as the dataset filled (deduplication by rejection, say) would
    need more draws per problem at 10,000 than at 1,000."""
    for task in (ArithmeticTask(), CountdownTask()):
        calls = {"draws": 0}
        draw = task._draw

        def counted(rng, draw=draw, calls=calls):
            calls["draws"] += 1
            return draw(rng)

        monkeypatch.setattr(task, "_draw", counted)
        draws = {}
        for n in (1_000, 10_000):
            calls["draws"] = 0
            assert len(task.dataset(n, seed=0)) == n
            draws[n] = calls["draws"]
        assert draws[1_000] >= 1_000 and draws[10_000] < 1.2 * 10 * draws[1_000], (type(task).__name__, draws)


# --- rewards -----------------------------------------------------------------------------------


def test_reward_of_wrong_answers_is_zero():
    arithmetic = ArithmeticTask()
    example = arithmetic._row((345, 278))
    assert arithmetic.reward("<answer>624</answer>", example) == 0.0
    countdown = CountdownTask()
    example = countdown._row(([3, 5, 7], ("+", ("*", 3, 5), 7), 22))
    assert countdown.reward("<answer>3*7+5</answer>", example) == 0.0
    assert countdown.reward("<answer>3*5+7</answer>", example) == 1.0


def test_reward_accepts_conversational_completions_and_end_of_turn():
    task = ArithmeticTask()
    example = task._row((345, 278))
    messages = [{"role": "assistant", "content": "<think>5+8=13</think><answer>623</answer>"}]
    assert task.reward(messages, example) == 1.0
    assert task.reward("<answer>623</answer><|im_end|>", example) == 1.0
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "<answer>623</answer>"}]}]
    assert task.reward(parts, example) == 1.0


def test_reward_fn_with_string_and_conversational_completions(task):
    data = task.dataset(8, seed=5)
    columns = {name: data[name] for name in data.column_names if name != "prompt"}
    texts = [task.solution(row) for row in data]
    texts[0] = "<answer>-1</answer>"
    expected = [0.0] + [1.0] * 7
    for strict in (True, False):
        reward = task.reward_fn(strict=strict)
        assert reward.__name__ == f"{task.name}_{'strict' if strict else 'lax'}_reward"
        assert reward(data["prompt"], texts, **columns) == expected
        conversational = [[{"role": "assistant", "content": text}] for text in texts]
        # TRL passes keyword arguments and extra ones (completion_ids, trainer_state).
        trl_extras = {"completion_ids": None, "trainer_state": None}
        assert reward(prompts=data["prompt"], completions=conversational, **trl_extras, **columns) == expected


def test_reward_fn_names_a_missing_column():
    reward = CountdownTask().reward_fn()
    with pytest.raises(ValueError, match="target"):
        reward(None, ["<answer>1</answer>"], numbers=[[1, 2]])
    with pytest.raises(ValueError, match="answer"):
        ArithmeticTask().reward_fn()(None, ["<answer>1</answer>"], answer=["1", "2"])


def test_get_task_and_difficulty_round_trip():
    for name, difficulty in TASK_SETTINGS:
        task = get_task(name, **difficulty)
        rebuilt = get_task(task.name, **task.difficulty)
        assert repr(rebuilt) == repr(task)
        assert rebuilt.dataset(5, seed=1).to_list() == task.dataset(5, seed=1).to_list()
    assert repr(ArithmeticTask()) == "ArithmeticTask(digits=3)"
    assert repr(ArithmeticTask(first_digits=2)) == "ArithmeticTask(digits=3, first_digits=2)"


def test_first_digits_leaves_the_default_draws_alone():
    # the operands are drawn in the same order with the same calls, so digits=3 datasets are unchanged
    assert ArithmeticTask(digits=3, first_digits=3).dataset(8, seed=2).to_list() == \
        ArithmeticTask(digits=3).dataset(8, seed=2).to_list()
    row = ArithmeticTask(digits=3, first_digits=2).dataset(1, seed=0, split="test")[0]
    assert row["question"] == f"What is {row['a']}+{row['b']}?" and 10 <= row["a"] < 100 <= row["b"] < 1000


# --- bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: ArithmeticTask(digits=0), "digits"),
        (lambda: ArithmeticTask(digits=19), "digits"),
        (lambda: ArithmeticTask(digits=2.0), "digits"),
        (lambda: ArithmeticTask(first_digits=0), "first_digits"),
        (lambda: ArithmeticTask(first_digits=19), "first_digits"),
        (lambda: CountdownTask(n_numbers=1), "n_numbers"),
        (lambda: CountdownTask(n_numbers=9), "n_numbers"),
        (lambda: CountdownTask(max_number=0), "max_number"),
        (lambda: CountdownTask(min_target=0), "min_target"),
        (lambda: CountdownTask(min_target=50, max_target=10), "max_target"),
        (lambda: CountdownTask(max_target=2**63), "max_target"),
        (lambda: CountdownTask(max_number=10**12), "max_number"),
        (lambda: get_task("sudoku"), "name"),
        (lambda: ArithmeticTask().dataset(-1), "n"),
        (lambda: ArithmeticTask().dataset(1.5), "n"),
        (lambda: ArithmeticTask().dataset(5, split="validation"), "split"),
        (lambda: ArithmeticTask().dataset(5, seed="zero"), "seed"),
        (lambda: ArithmeticTask().dataset(5, system_prompt=3), "system_prompt"),
        (lambda: ArithmeticTask().solution({"a": 1, "b": 2}, style="verbose"), "style"),
        (lambda: CountdownTask().solution({"a": 1, "b": 2}, style="verbose"), "style"),
        (lambda: CountdownTask().solution({"numbers": [1, 2], "target": 3}), "reference"),
        (lambda: ArithmeticTask().solution({"a": -1, "b": 2}), "'a'"),
        (lambda: ArithmeticTask().reward("<answer>1</answer>", {"a": 1}), "answer"),
        (lambda: ArithmeticTask().reward("<answer>1</answer>", "1"), "example"),
        (lambda: ArithmeticTask().reward(None, {"answer": "1"}), "completion"),
        (lambda: ArithmeticTask().reward(["text"], {"answer": "1"}), "messages"),
        (lambda: ArithmeticTask().reward("x", {"answer": "1"}, strict="yes"), "strict"),
        (lambda: ArithmeticTask().reward_fn(strict=1), "strict"),
        (lambda: CountdownTask().reward("x", {"numbers": [1, 2], "target": "3"}), "target"),
        (lambda: CountdownTask().reward("x", {"numbers": "1 2", "target": 3}), "numbers"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_argument(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


def test_unsatisfiable_settings_raise_instead_of_looping():
    task = CountdownTask(n_numbers=2, max_number=1, min_target=50, max_target=60)
    with pytest.raises(ValueError, match="difficulty"):
        task.dataset(1)
