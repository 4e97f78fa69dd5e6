"""Hand-written cases for the verifiers: extraction, format, strict vs lax correctness, the hacks."""

import pytest

from rlbook.tasks.expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_LITERAL_DIGITS,
    MAX_NESTING,
    ExpressionError,
    evaluate,
    numbers_in,
    parse_expression,
    render,
    steps,
)
from rlbook.tasks.verifiers import (
    MAX_ANSWER_CHARS,
    MAX_COMPLETION_CHARS,
    arithmetic_reward,
    completion_text,
    countdown_reward,
    extract_answer,
    extract_answer_lax,
    format_reward,
    is_well_formed,
)

# --- extract_answer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer>623</answer>", "623"),
        ("<think>5+8=13</think><answer>623</answer>", "623"),
        ("<answer> 623 </answer>", " 623 "),
        ("  <answer>623</answer> \n\t", "623"),
        ("The sum is <answer>623</answer>", "623"),  # the preamble is format_reward's business
        ("<answer></answer>", ""),
        ("<answer>623</answer> and more", None),  # text after the block
        ("<answer>623</answer>\n<|im_end|>", None),  # raw text: completion_text drops the marker
        ("<answer>1</answer><answer>623</answer>", None),  # two blocks
        ("<answer><answer>623</answer>", None),
        ("<answer>623</answer></answer>", None),
        ("</answer><answer>623</answer>", None),
        ("623", None),
        ("<answer>623", None),
        ("623</answer>", None),
        ("<ANSWER>623</ANSWER>", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_refuses_oversized_inputs():
    assert extract_answer("<answer>" + "1" * MAX_ANSWER_CHARS + "</answer>") == "1" * MAX_ANSWER_CHARS
    assert extract_answer("<answer>" + "1" * (MAX_ANSWER_CHARS + 1) + "</answer>") is None
    padding = " " * (MAX_COMPLETION_CHARS - len("<answer>1</answer>"))
    assert extract_answer(padding + "<answer>1</answer>") == "1"
    assert extract_answer(padding + " <answer>1</answer>") is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer>1</answer><answer>623</answer>", "623"),
        ("<answer>623</answer> trailing words", "623"),
        ("working...\nfinal: 3*5+7", "final: 3*5+7"),
        ("3*5+7\n\n", "3*5+7"),
        ("", None),
        ("   \n ", None),
    ],
)
def test_extract_answer_lax(text, expected):
    assert extract_answer_lax(text) == expected


def test_completion_text():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"
    assert completion_text("<answer>1</answer><|im_end|>\n") == "<answer>1</answer>"
    assert completion_text("<answer>1</answer><|endoftext|>") == "<answer>1</answer>"
    # Only one marker is dropped: a second one is text after the answer.
    assert extract_answer(completion_text("<answer>1</answer><|im_end|><|im_end|>")) is None


# --- format ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, well_formed",
    [
        ("<answer>623</answer>", True),
        ("<think>5+8=13\n4+7+1=12</think><answer>623</answer>", True),
        ("\n<think>x</think>\n\n<answer>623</answer>\n", True),
        ("<think></think><answer></answer>", True),
        ("Sure! <answer>623</answer>", False),  # text outside the blocks
        ("<think>x</think> so <answer>623</answer>", False),
        ("<answer>623</answer><think>x</think>", False),  # wrong order
        ("<answer>623</answer> done", False),
        ("<think>x<answer>623</answer>", False),  # unclosed think
        ("<think>a</think><think>b</think><answer>623</answer>", False),
        ("<think><think>x</think></think><answer>623</answer>", False),
        ("<answer><think>x</think>623</answer>", False),  # tag inside the answer
        ("<answer>1</answer><answer>2</answer>", False),
        ("<think>x</think>", False),
        ("623", False),
        ("", False),
    ],
)
def test_format_reward(text, well_formed):
    assert is_well_formed(text) is well_formed
    assert format_reward(text) == float(well_formed)
    partial = format_reward(text, partial=True)
    assert (partial == 1.0) is well_formed
    assert 0.0 <= partial <= 1.0


def test_format_reward_partial_credit_orders_near_misses():
    partial = lambda text: format_reward(text, partial=True)  # noqa: E731
    assert partial("no tags at all") == 0.0
    assert partial("<think>x</think> 623") == 0.0
    assert partial("<think>x</think><answer>623</answer> extra") == 0.5  # one block, nothing before
    assert partial("Sure! <answer>623</answer>") == 0.5  # one block, ends the text
    assert partial("Sure! <answer>623") == 0.0
    assert partial("<answer>1</answer><answer>2</answer>") == 0.5  # ends with it, nothing before
    assert partial("<think>x</think><answer>623</answer>") == 1.0


# --- arithmetic --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, strict, lax",
    [
        ("<answer>623</answer>", 1.0, 1.0),
        ("<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>", 1.0, 1.0),
        ("<answer> 623\n</answer>\n", 1.0, 1.0),  # surrounding whitespace is fine
        ("<answer>624</answer>", 0.0, 0.0),  # wrong answer
        ("<answer>6230</answer>", 0.0, 0.0),  # 623 is not a maximal digit run
        ("<answer>0623</answer>", 0.0, 0.0),  # leading zero: not the canonical answer
        ("<answer>+623</answer>", 0.0, 1.0),
        ("<answer>623.0</answer>", 0.0, 1.0),
        ("<answer>6 23</answer>", 0.0, 0.0),
        ("<answer>623</answer> I think", 0.0, 1.0),  # text after the block
        ("<answer>623</answer><answer>623</answer>", 0.0, 1.0),  # two blocks
        ("<answer>1</answer><answer>623</answer>", 0.0, 1.0),
        ("623", 0.0, 1.0),  # missing tags
        ("<answer>623", 0.0, 1.0),
        ("The answer is 623.", 0.0, 1.0),
        ("<answer>६२३</answer>", 0.0, 0.0),  # Devanagari digits are not ASCII digits
        ("<answer></answer>", 0.0, 0.0),
        ("", 0.0, 0.0),
    ],
)
def test_arithmetic_reward_cases(text, strict, lax):
    assert arithmetic_reward(text, "623", strict=True) == strict
    assert arithmetic_reward(text, "623", strict=False) == lax


def test_arithmetic_lax_hack_spraying_numbers():
    spray = "<answer>" + " ".join(str(n) for n in range(2000)) + "</answer>"
    assert arithmetic_reward(spray, "623", strict=False) == 1.0
    assert arithmetic_reward(spray, "623", strict=True) == 0.0
    # The same spray hacks every question with an answer below 2000.
    assert all(arithmetic_reward(spray, str(answer), strict=False) == 1.0 for answer in (0, 77, 1999))


def test_arithmetic_reward_rejects_a_bad_expected_answer():
    for answer in ("", "6x", 623, "-1"):
        with pytest.raises(ValueError, match="answer"):
            arithmetic_reward("<answer>623</answer>", answer)
    with pytest.raises(ValueError, match="text"):
        arithmetic_reward(b"<answer>623</answer>", "623")


# --- countdown ---------------------------------------------------------------------------------

NUMBERS, TARGET = [3, 5, 7], 22


@pytest.mark.parametrize(
    "text, strict, lax",
    [
        ("<answer>3*5+7</answer>", 1.0, 1.0),
        ("<think>3*5=15\n15+7=22</think><answer>3*5+7</answer>", 1.0, 1.0),
        ("<answer> 7 + 5 * 3 </answer>", 1.0, 1.0),  # any order, spaces
        ("<answer>(3*5)+7</answer>", 1.0, 1.0),
        ("<answer>((3)*(5))+(7)</answer>", 1.0, 1.0),
        ("<answer>7+15/5*5</answer>", 0.0, 1.0),  # 15 and the second 5 are not given
        ("<answer>22</answer>", 0.0, 1.0),  # the target itself: the lax hack
        ("<answer>3*5+7+0</answer>", 0.0, 1.0),  # an extra number
        ("<answer>3*5+7*1</answer>", 0.0, 1.0),
        ("<answer>7*3+5-5+1</answer>", 0.0, 1.0),  # reuses 5 and adds a 1: lax does not care
        ("<answer>3*7+5</answer>", 0.0, 0.0),  # wrong value
        ("<answer>3*5+7=22</answer>", 0.0, 0.0),  # an equation, not an expression
        ("<answer>3×5+7</answer>", 0.0, 0.0),  # unicode operator
        ("<answer>3*5+07</answer>", 0.0, 0.0),  # leading zero
        ("<answer>3**5+7</answer>", 0.0, 0.0),
        ("<answer>3^5+7</answer>", 0.0, 0.0),
        ("<answer>-3+5*5</answer>", 0.0, 0.0),  # no unary minus
        ("<answer>3*5+7</answer> done", 0.0, 1.0),  # text after the block
        ("3*5+7", 0.0, 1.0),  # missing tags: lax reads the last line
        ("I tried.\n22", 0.0, 1.0),
        ("<answer>3*5+7</answer><answer>22</answer>", 0.0, 1.0),  # two blocks: lax reads the last
        ("<answer>22</answer><answer>3*5+7</answer>", 0.0, 1.0),
        ("<answer>3*5+7", 0.0, 0.0),  # the last line is '<answer>3*5+7', not an expression
        ("<answer></answer>", 0.0, 0.0),
    ],
)
def test_countdown_reward_cases(text, strict, lax):
    assert countdown_reward(text, NUMBERS, TARGET, strict=True) == strict
    assert countdown_reward(text, NUMBERS, TARGET, strict=False) == lax


def test_countdown_exact_rational_arithmetic():
    # 7/2*4 is 14 exactly; with floor division it would be 12.
    assert countdown_reward("<answer>7/2*4</answer>", [7, 2, 4], 14) == 1.0
    assert countdown_reward("<answer>7/2*4</answer>", [7, 2, 4], 12) == 0.0
    # Non-integer intermediates are fine as long as the value is the target.
    assert countdown_reward("<answer>(1/3+2/3)*5</answer>", [1, 3, 2, 3, 5], 5) == 1.0
    # A fractional value never equals an integer target.
    assert countdown_reward("<answer>7/2</answer>", [7, 2], 3) == 0.0


def test_countdown_division_by_zero_is_zero_reward():
    assert countdown_reward("<answer>5/(3-3)</answer>", [5, 3, 3], 0) == 0.0
    assert countdown_reward("<answer>5/(3-3)</answer>", [5, 3, 3], 5, strict=False) == 0.0
    assert countdown_reward("<answer>0/5</answer>", [0, 5], 0) == 1.0


def test_countdown_number_reuse_and_repeats():
    assert countdown_reward("<answer>5*5-3</answer>", [5, 3, 7], 22) == 0.0  # 5 twice, 7 unused
    assert countdown_reward("<answer>5*5-3</answer>", [5, 3, 7], 22, strict=False) == 1.0
    assert countdown_reward("<answer>5*5-3</answer>", [5, 5, 3], 22) == 1.0  # given twice: fine
    assert countdown_reward("<answer>5*3+7</answer>", [5, 5, 3, 7], 22) == 0.0  # a 5 left unused


def test_countdown_accepts_numpy_integers():
    numpy = pytest.importorskip("numpy")
    numbers = [numpy.int64(3), numpy.int64(5), numpy.int64(7)]
    assert countdown_reward("<answer>3*5+7</answer>", numbers, numpy.int64(22)) == 1.0


def test_countdown_reward_rejects_a_bad_problem():
    with pytest.raises(ValueError, match="numbers"):
        countdown_reward("<answer>1</answer>", [1.5, 2], 3)
    with pytest.raises(ValueError, match="numbers"):
        countdown_reward("<answer>1</answer>", [True, 2], 3)
    with pytest.raises(ValueError, match="target"):
        countdown_reward("<answer>1</answer>", [1, 2], 3.0)


# --- the expression parser ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("1+2*3", 7),
        ("(1+2)*3", 9),
        ("8-3-2", 3),  # left associative
        ("8/4/2", 1),
        ("2*(3+(4-1))", 12),
        (" 12 \n+\t3 ", 15),
        ("999999999999*999999999999", 999999999999**2),
    ],
)
def test_parse_and_evaluate(text, value):
    assert evaluate(parse_expression(text)) == value


@pytest.mark.parametrize(
    "text",
    ["", "1+", "+1", "(1", "1)", "()", "1 2", "2**3", "2^3", "1e3", "1.5", "abc", "1+2=3", "--1",
     "１+２", "9" * (MAX_LITERAL_DIGITS + 1), "01", "1" + " " * MAX_EXPRESSION_CHARS,
     "(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1)],
)
def test_parse_rejects(text):
    with pytest.raises(ExpressionError):
        parse_expression(text)


def test_parse_nesting_bound_is_exact():
    assert evaluate(parse_expression("(" * MAX_NESTING + "1" + ")" * MAX_NESTING)) == 1


def test_render_round_trips_with_few_parentheses():
    for text in ["3*5+7", "10/(14-9)", "1-(2-3)", "1+(2+3)", "(1+2)*3", "2*3*4", "8/(4/2)", "8/4/2", "(1-2)*(3+4)/5"]:
        assert render(parse_expression(text)) == text
    assert render(parse_expression("((3*5))+(7)")) == "3*5+7"


def test_steps_and_numbers_in():
    tree = parse_expression("(1-2)*(3+4)/5")
    assert numbers_in(tree) == [1, 2, 3, 4, 5]
    assert steps(tree) == ["1-2=-1", "3+4=7", "-1*7=-7", "-7/5=-7/5"]
    assert steps(parse_expression("3*5+7")) == ["3*5=15", "15+7=22"]
