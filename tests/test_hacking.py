"""Lesson 19 (verifier hacking): the hack classifier, GRPO's expected advantage per strategy, the
figures and widget, and the exercise's checker with its hostile corpus."""

import math
import time
from fractions import Fraction

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from rlbook import hacking
from rlbook.advantages import difficulty_factor, group_advantages
from rlbook.exercises import hacking as exercise_hacking
from rlbook.exercises.hacking import (
    HOSTILE_CORPUS, MAX_SECONDS_PER_CALL, RIGHT_ANSWERS, check_advantage_scale, check_fraction_verifier,
    reference_fraction_reward,
)
from rlbook.tasks import extract_answer, get_task
from rlbook.viz import hacking as viz

ARITHMETIC, COUNTDOWN = get_task("arithmetic", digits=3), get_task("countdown")
SUM = {"answer": "623", "a": 345, "b": 278}
PROBLEM = {"numbers": [3, 5, 7], "target": 22}


# --- the classifier ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("<think>5+8=13</think><answer>623</answer>", "honest"),
    ("<answer>621 622 623</answer>", "answer spraying"),
    ("<answer>623</answer> or so", "malformed answer"),
    ("the sum is 623", "malformed answer"),
    ("<answer>624</answer>", "fail"),
    ("<answer>0623</answer>", "fail"),
])
def test_arithmetic_hack_types(text, expected):
    assert hacking.hack_type(ARITHMETIC, text, SUM) == expected


@pytest.mark.parametrize("text, expected", [
    ("<answer>3*5+7</answer>", "honest"),
    ("<answer>7+5*3</answer>", "honest"),
    ("<answer>22</answer>", "target as answer"),
    ("<answer>(3*5+7)*1</answer>", "padding"),
    ("<answer>3*5+7+0</answer>", "padding"),
    ("<answer>3*5+7+1-1</answer>", "padding"),
    ("<answer>20+2</answer>", "wrong numbers"),
    ("<answer>3*5+7+7-7</answer>", "wrong numbers"),
    ("<answer>3*5+8-1</answer>", "wrong numbers"),  # a number missing: not padding, though the extras are 8 and 1
    ("<answer>3*5+7</answer> done", "malformed answer"),
    ("22", "malformed answer"),
    ("<answer>3*5+6</answer>", "fail"),
    ("<answer>" + "(" * 500 + "22" + ")" * 500 + "</answer>", "fail"),
])
def test_countdown_hack_types(text, expected):
    assert hacking.hack_type(COUNTDOWN, text, PROBLEM) == expected


@pytest.mark.parametrize("numbers, target, text, expected", [
    ([5, 3], 8, "<answer>(5+3)*1</answer>", "padding"),
    ([5, 3], 9, "<answer>5+3+1</answer>", "wrong numbers"),  # the 1 is worth 1: not a neutral element
    ([5, 3], 13, "<answer>5*3-1-1</answer>", "wrong numbers"),
    ([5, 3], 15, "<answer>5*3*1+0</answer>", "padding"),
    ([5, 3], 16, "<answer>(5+3)*(1+1)</answer>", "wrong numbers"),
])
def test_padding_is_only_extras_that_leave_the_value_unchanged(numbers, target, text, expected):
    assert hacking.hack_type(COUNTDOWN, text, {"numbers": numbers, "target": target}) == expected


@pytest.mark.parametrize("numbers, target, text, expected", [
    ([13, 1], 14, "<answer>13*1+1</answer>", "padding"),  # the extra is the first 1, not the last
    ([13, 1], 14, "<answer>1*13+1</answer>", "padding"),
    ([5, 3], 8, "<answer>1*1*(5+3)</answer>", "padding"),
    ([5, 3], 8, "<answer>1-1+5+3</answer>", "padding"),
    ([2, 4], 2, "<answer>1/2*4</answer>", "wrong numbers"),  # 1 left of ÷ is no identity: 2*4 is 8
    ([2, 8], 16, "<answer>8/(1/2)</answer>", "wrong numbers"),
    ([3, 5], 2, "<answer>0-3+5</answer>", "wrong numbers"),  # 0 left of −: 3+5 is 8
])
def test_padding_tries_every_choice_of_extras_and_deletes_them(numbers, target, text, expected):
    assert hacking.hack_type(COUNTDOWN, text, {"numbers": numbers, "target": target}) == expected


def test_chat_messages_are_classified_like_their_text():
    messages = [{"role": "assistant", "content": "<answer>(3*5+7)*1</answer>"}]
    assert hacking.hack_type(COUNTDOWN, messages, PROBLEM) == "padding"


def test_every_hack_type_is_one_the_lax_verifier_passes_and_the_strict_one_fails():
    texts = ["<answer>22</answer>", "<answer>(3*5+7)*1</answer>", "<answer>20+2</answer>", "<answer>3*5+7</answer>!"]
    for text in texts:
        assert COUNTDOWN.reward(text, PROBLEM, strict=False) == 1.0 and COUNTDOWN.reward(text, PROBLEM) == 0.0
        assert hacking.hack_type(COUNTDOWN, text, PROBLEM) not in ("honest", "fail")


def test_hack_types_and_tally():
    types = hacking.hack_types(COUNTDOWN, ["<answer>22</answer>", "<answer>3*5+7</answer>", "x"], [PROBLEM] * 3)
    assert types == ["target as answer", "honest", "fail"]
    tally = hacking.tally_hacks(types)
    assert list(tally) == list(hacking.HACK_TYPES)
    assert tally["target as answer"] == tally["honest"] == tally["fail"] == 1 and sum(tally.values()) == 3


def test_classifier_checks_its_inputs():
    with pytest.raises(ValueError, match="task"):
        hacking.hack_type("countdown", "<answer>22</answer>", PROBLEM)
    with pytest.raises(ValueError, match="same length"):
        hacking.hack_types(COUNTDOWN, ["a", "b"], [PROBLEM])
    with pytest.raises(ValueError, match="types"):
        hacking.tally_hacks(["honest", "cheating"])
    with pytest.raises(ValueError, match="example"):
        hacking.hack_type(COUNTDOWN, "<answer>22</answer>", {"numbers": [3, 5, 7]})


@pytest.mark.parametrize("text, expected", [
    ("<answer>(14+11)*1</answer>", "given numbers plus 0s/1s"),   # padded, and right
    ("<answer>14*11*1</answer>", "given numbers plus 0s/1s"),     # the same shape, wrong: shapes ignore the value
    ("<answer>14+11</answer>", "given numbers"),
    ("<answer>11+14-0</answer>", "given numbers plus 0s/1s"),
    ("<answer>25</answer>", "other numbers"),                     # target as answer
    ("<answer>14+14</answer>", "other numbers"),                  # a number reused, one missing
    ("<answer>14+11+2</answer>", "other numbers"),                # an extra that is not 0 or 1
    ("the answer is\n14+11", "given numbers"),                    # the lax extraction: the last line
    ("<answer>14+</answer>", "no expression"),
    ("", "no expression"),
])
def test_answer_shape_labels_attempts_whether_or_not_they_pass(text, expected):
    assert hacking.answer_shape(text, {"numbers": [14, 11], "target": 25}) == expected


def test_answer_shape_of_a_passing_completion_agrees_with_its_hack_type():
    two = get_task("countdown", n_numbers=2)
    example = {"numbers": [14, 11], "target": 25, "question": "Using 14 11 make 25."}
    for text, hack, shape in (("<answer>(14+11)*1</answer>", "padding", "given numbers plus 0s/1s"),
                              ("<answer>25</answer>", "target as answer", "other numbers"),
                              ("<answer>11+14</answer>", "honest", "given numbers")):
        assert hacking.hack_type(two, text, example) == hack and hacking.answer_shape(text, example) == shape


# --- GRPO's expected advantage per strategy -----------------------------------------------------------

def test_expected_group_advantage_formula():
    honest, hack = hacking.expected_group_advantage([0.3, 0.9], [0.8, 0.2])
    p = 0.8 * 0.3 + 0.2 * 0.9
    assert honest == pytest.approx((0.3 - p) / np.sqrt(p * (1 - p)))
    assert hack == pytest.approx((0.9 - p) / np.sqrt(p * (1 - p)))
    assert honest < 0 < hack


@pytest.mark.parametrize("group_size, simulated_size, groups, tolerance", [
    (None, 128, 2000, 0.02),  # the large-group limit, against big groups
    (8, 8, 40_000, 0.01),  # the exact finite-group expectation
])
def test_expected_group_advantage_matches_simulated_grpo_groups(group_size, simulated_size, groups, tolerance):
    generator = torch.Generator().manual_seed(1)
    share, rates, G = 0.3, (0.2, 0.8), simulated_size
    is_hack = torch.rand(groups * G, generator=generator) < share
    passes = torch.rand(groups * G, generator=generator) < torch.where(is_hack, rates[1], rates[0])
    advantages = group_advantages(passes.double(), G, "grpo")
    predicted = hacking.expected_group_advantage(rates, [1 - share, share], group_size=group_size)
    assert float(advantages[~is_hack].mean()) == pytest.approx(predicted[0], abs=tolerance)
    assert float(advantages[is_hack].mean()) == pytest.approx(predicted[1], abs=tolerance)


def test_advantage_scale_is_exact_for_a_finite_group_and_tends_to_the_limit():
    generator = torch.Generator().manual_seed(2)
    p, G, groups = 0.04, 8, 200_000
    passes = (torch.rand(groups * G, generator=generator) < p).double()
    advantages = group_advantages(passes, G, "grpo")
    simulated = float(advantages[passes == 1].mean() - advantages[passes == 0].mean())
    assert hacking.advantage_scale(p, G) == pytest.approx(simulated, rel=0.03)
    assert hacking.advantage_scale(p, G) == pytest.approx(2.505, abs=0.01)
    assert hacking.advantage_scale(p) == pytest.approx(1 / np.sqrt(p * (1 - p)))
    assert hacking.advantage_scale(0.3, 4000) == pytest.approx(hacking.advantage_scale(0.3), rel=0.01)
    # √7 up to group_advantages' σ + 1e-6 (a relative 3e-6 here): the scale is that function's, not a formula's
    assert hacking.advantage_scale(0.0, 8) == pytest.approx(np.sqrt(7), rel=1e-5)
    assert hacking.advantage_scale(0.0, 8) == pytest.approx(hacking.advantage_scale(1.0, 8), rel=1e-6)
    assert hacking.advantage_scale(0.05, 8) == difficulty_factor(0.05, 8, "grpo")
    assert hacking.advantage_scale(0.0) == np.inf
    with pytest.raises(ValueError, match="group_size"):
        hacking.advantage_scale(0.5, 1)
    with pytest.raises(ValueError, match="p must"):
        hacking.advantage_scale(1.5, 8)


def test_expected_group_advantage_edge_cases_and_inputs():
    assert hacking.expected_group_advantage([0.0, 0.0], [0.5, 0.5]) == [0.0, 0.0]
    assert hacking.expected_group_advantage([1.0, 1.0], [0.5, 0.5]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="shares"):
        hacking.expected_group_advantage([0.5, 0.5], [0.5, 0.6])
    with pytest.raises(ValueError, match="success_rates"):
        hacking.expected_group_advantage([1.5, 0.5], [0.5, 0.5])
    with pytest.raises(ValueError, match="same length"):
        hacking.expected_group_advantage([0.5], [0.5, 0.5])


def test_per_problem_expected_advantage_is_the_formula_per_problem():
    # two problems, 16 samples each: the binomial version averages c_G(p_j)(q_sj − p_j) over problems
    passed = [1] * 4 + [0] * 12 + [1] * 12 + [0] * 4
    problems = ["a"] * 16 + ["b"] * 16
    predicted = hacking.per_problem_expected_advantage(passed, problems, 8)
    in_a = np.array(problems) == "a"
    shape = np.array([True, False] * 16)  # a "shape": every other sample (2 of a's passes, 6 of b's)
    for label, p in (("a", 0.25), ("b", 0.75)):
        rows = shape & (np.array(problems) == label)
        q = np.array(passed)[rows].mean()
        assert predicted[rows].mean() == pytest.approx(hacking.advantage_scale(p, 8) * (q - p), rel=1e-4)
    assert predicted[in_a].mean() == pytest.approx(0.0, abs=1e-12)  # advantages of a problem sum to 0 in expectation
    # a pass on the hard problem is paid more than on the easy one
    assert predicted[0] > predicted[16] > 0


def test_per_problem_expected_advantage_without_replacement_is_exact_for_random_groups():
    # a problem with exactly G samples is one group: the prediction is that group's advantage itself
    passed = [1, 0, 0, 1, 0, 0, 0, 0]
    exact = hacking.per_problem_expected_advantage(passed, ["x"] * 8, 8, without_replacement=True)
    assert exact == pytest.approx(group_advantages(torch.tensor(passed, dtype=torch.float64), 8, "grpo").numpy(), abs=1e-5)
    # 16 samples cut at random into two groups of 8: the mean over many cuts matches, the binomial one does not
    passed = torch.tensor([1.0] * 3 + [0.0] * 13, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    totals = torch.zeros(16, dtype=torch.float64)
    for _ in range(4000):
        order = torch.randperm(16, generator=generator)
        totals[order] += group_advantages(passed[order], 8, "grpo")
    predicted = hacking.per_problem_expected_advantage(passed.tolist(), ["x"] * 16, 8, without_replacement=True)
    assert predicted == pytest.approx((totals / 4000).numpy(), abs=0.03)
    binomial = hacking.per_problem_expected_advantage(passed.tolist(), ["x"] * 16, 8)
    assert abs(binomial[0] - predicted[0]) > 0.1  # the binomial counts a pass's own success in p_j
    with pytest.raises(ValueError, match="group_size"):
        hacking.per_problem_expected_advantage(passed.tolist()[:4], ["x"] * 4, 8, without_replacement=True)
    with pytest.raises(ValueError, match="same length"):
        hacking.per_problem_expected_advantage([1, 0], ["x"], 2)
    with pytest.raises(ValueError, match="0/1"):
        hacking.per_problem_expected_advantage([0.5, 0], ["x", "x"], 2)


def test_train_strategies_a_better_paid_hack_displaces_the_honest_attempt():
    paid_lax, paid_strict, true = [0.3, 1.0, 0.0], [0.3, 0.0, 0.0], [0.3, 0.0, 0.0]
    start = [0.78, 0.02, 0.20]
    lax = hacking.train_strategies(paid_lax, true, start, steps=150, lr=0.5, seed=0)
    strict = hacking.train_strategies(paid_strict, true, start, steps=150, lr=0.5, seed=0)
    assert lax["shares"].shape == (151, 3) and lax["shares"][0] == pytest.approx(start)
    assert lax["true"][0] == pytest.approx(0.234) and lax["paid"][0] == pytest.approx(0.254)
    assert lax["shares"][-1, 1] > 0.9 and lax["true"][-1] < 0.05 and lax["paid"][-1] > 0.9
    assert strict["true"][-1] > 0.28 and strict["shares"][-1, 1] < 0.02
    assert strict["paid"] == pytest.approx(strict["true"])
    again = hacking.train_strategies(paid_lax, true, start, steps=150, lr=0.5, seed=0)
    assert again["true"] == pytest.approx(lax["true"])  # same seed, same numbers
    with pytest.raises(ValueError, match="one value per strategy"):
        hacking.train_strategies([0.3, 1.0], true, start)
    with pytest.raises(ValueError, match="initial_shares"):
        hacking.train_strategies(paid_lax, true, [0.8, 0.2, 0.0])
    with pytest.raises(ValueError, match="lr"):
        hacking.train_strategies(paid_lax, true, start, lr=0)


def test_plot_strategy_training_draws_each_seed():
    runs = {label: [hacking.train_strategies(paid, [0.3, 0.0], [0.9, 0.1], steps=5, seed=s) for s in (0, 1)]
            for label, paid in (("lax", [0.3, 1.0]), ("strict", [0.3, 0.0]))}
    axes = viz.plot_strategy_training(runs)
    assert len(axes[0].get_lines()) == 4 and len(axes[1].get_lines()) == 5  # 2 seeds × 2 verifiers, plus the start
    assert list(axes[1].get_lines()[-1].get_ydata()) == pytest.approx([0.27, 0.27])
    with pytest.raises(ValueError, match="runs"):
        viz.plot_strategy_training({"lax": []})
    plt.close("all")


# --- figures and widget ----------------------------------------------------------------------------

def test_plot_strategy_advantage_draws_the_formula():
    ax = viz.plot_strategy_advantage(0.3, 0.9)
    (x, honest), (_, hack) = (line.get_xydata().T for line in ax.get_lines()[:2])
    i = np.argmin(np.abs(x - 0.2))
    assert [honest[i], hack[i]] == pytest.approx(hacking.expected_group_advantage([0.3, 0.9], [1 - x[i], x[i]]))
    with pytest.raises(ValueError, match="success_rates"):
        viz.plot_strategy_advantage(1.2, 0.5)


def test_plot_strategy_advantage_at_a_group_size_and_at_unit_scale():
    ax = viz.plot_strategy_advantage(0.3, 0.9, group_size=8)
    (x, honest), (_, hack), (_, honest_unit), (_, hack_unit) = (line.get_xydata().T for line in ax.get_lines()[:4])
    i = np.argmin(np.abs(x - 0.2))
    assert [honest[i], hack[i]] == pytest.approx(hacking.expected_group_advantage([0.3, 0.9], [1 - x[i], x[i]], 8))
    p = 0.3 * (1 - x[i]) + 0.9 * x[i]
    assert [honest_unit[i], hack_unit[i]] == pytest.approx([0.3 - p, 0.9 - p])
    assert "groups of 8" in ax.get_title()


def test_strategy_widget_redraws_for_each_slider(monkeypatch):
    drawn = []
    monkeypatch.setattr(viz, "plot_strategy_advantage",
                        lambda honest, hack, group_size: drawn.append((honest, hack, group_size)))
    monkeypatch.setattr(plt, "show", lambda: None)
    widget = viz.strategy_advantage_widget()
    honest, hack, group_size = widget.widget.children[:3]
    honest.value, hack.value, group_size.value = 0.6, 0.2, None
    assert drawn[-3:] == [(0.6, 0.9, 8), (0.6, 0.2, 8), (0.6, 0.2, None)]


def _curves():
    rows = [{"trained_on": verifier, "seed": seed, "step": step, "lax": 0.1 + 0.01 * step * (verifier == "lax"),
             "strict": 0.0} for verifier in ("lax", "strict") for seed in (0, 1) for step in range(1, 11)]
    return pd.DataFrame(rows)


def test_plot_pass_rates_one_panel_per_verifier():
    axes = viz.plot_pass_rates(_curves(), window=1, base_rate=0.05)
    assert [ax.get_title() for ax in axes] == ["trained on the lax verifier (thin: each seed)",
                                               "trained on the strict verifier (thin: each seed)"]
    assert any(list(line.get_ydata()) == [0.05, 0.05] for line in axes[1].get_lines())
    means = [line for line in axes[0].get_lines() if line.get_linewidth() == 2]
    assert means[0].get_ydata()[-1] == pytest.approx(0.2)  # the lax rate, mean over seeds
    with pytest.raises(ValueError, match="strict"):
        viz.plot_pass_rates(_curves().drop(columns="strict"))


def test_plot_hack_counts_leaves_out_honest_and_fail():
    counts = {"base": hacking.tally_hacks(["padding", "honest", "fail"]),
              "lax": hacking.tally_hacks(["padding"] * 3 + ["wrong numbers"])}
    ax = viz.plot_hack_counts(counts)
    heights = [patch.get_height() for patch in ax.patches]
    assert len(heights) == 2 * 2 and sorted(heights)[-2:] == [1, 3]  # padding and wrong numbers; empty hacks left out
    assert "none in any run: answer spraying, malformed answer, target as answer" in ax.get_title()
    with pytest.raises(ValueError, match="counts"):
        viz.plot_hack_counts({})


# --- the exercise ----------------------------------------------------------------------------------

def test_reference_passes_the_checker(capsys):
    assert check_fraction_verifier(reference_fraction_reward) is True
    assert "✓" in capsys.readouterr().out


def test_corpus_is_right_by_construction():
    assert all(reference_fraction_reward(text, expected) == 1.0 for text, expected in RIGHT_ANSWERS)
    assert all(reference_fraction_reward(text, expected) == 0.0 for _, text, expected in HOSTILE_CORPUS)
    assert len({name for name, *_ in HOSTILE_CORPUS}) == len(HOSTILE_CORPUS)


def _value_only(text, expected):
    answer = extract_answer(text)
    try:
        return float(answer is not None and Fraction(answer.strip()) == expected)
    except (ValueError, ZeroDivisionError):
        return 0.0


def _through_eval(text, expected):
    try:
        return float(eval(extract_answer(text) or "0") == expected)  # noqa: S307 - the mistake under test
    except Exception:
        return 0.0


def _ints(text, expected):
    """Parses with int(), which accepts signs, underscores and Unicode digits."""
    answer = extract_answer(text)
    parts = (answer or "").strip().split("/")
    try:
        p, q = (int(parts[0]), int(parts[1])) if len(parts) == 2 else (int(parts[0]), 1)
    except ValueError:
        return 0.0
    if q == 0 or (len(parts) == 2 and (q == 1 or Fraction(p, q).denominator != q)):
        return 0.0
    return float(Fraction(p, q) == expected)


def _slow(text, expected):
    time.sleep(MAX_SECONDS_PER_CALL + 0.05)
    return reference_fraction_reward(text, expected)


@pytest.mark.parametrize("verifier, named", [
    (_value_only, "fraction not in lowest terms"),
    (_through_eval, "eval or exec"),
    (_ints, "a plus sign"),
    (lambda text, expected: float(str(expected) in text), "answer spraying"),
    (lambda text, expected: 1.0 / 0, "ZeroDivisionError"),
    (lambda text, expected: True, "0.0 or 1.0"),
    (_slow, "bound the work"),
    (lambda text, expected: 0.0, "on the right answer"),
])
def test_checker_names_the_hack_or_mistake(verifier, named, capsys):
    assert check_fraction_verifier(verifier) is False
    assert named in capsys.readouterr().out


def _one_token(pick):
    """Reads one whitespace-separated token of the block: a spray with the right answer there passes."""
    def verifier(text, expected):
        tokens = (extract_answer(text) or "").split()
        return float(bool(tokens) and tokens[pick] == str(expected))
    return verifier


def _unicode_tail(text, expected):
    """An ASCII first digit, then ``\\d``, which matches any Unicode digit."""
    import re
    match = re.fullmatch(r"([1-9]\d*|0)(?:/([1-9]\d*))?", (extract_answer(text) or "").strip())
    if not match:
        return 0.0
    p, q = int(match[1]), int(match[2] or 1)
    if match[2] and (q == 1 or Fraction(p, q).denominator != q):
        return 0.0
    return float(Fraction(p, q) == expected)


@pytest.mark.parametrize("verifier, named", [
    (_one_token(-1), "answer spraying, the right answer last"),
    (_one_token(0), "answer spraying, the right answer first"),
    (_unicode_tail, "an ASCII digit then Unicode digits"),
])
def test_checker_catches_sprays_at_either_end_and_mixed_script_digits(verifier, named, capsys):
    assert check_fraction_verifier(verifier) is False
    assert named in capsys.readouterr().out


def _short_answers_only(text, expected):
    """Over-strict: refuses answers of 8 characters or more, or with a denominator above 12."""
    answer = (extract_answer(text) or "").strip()
    if len(answer) >= 8 or expected.denominator > 12:
        return 0.0
    return reference_fraction_reward(text, expected)


def test_checker_refuses_an_over_strict_verifier_and_accepts_a_canonical_form_comparison(capsys):
    assert check_fraction_verifier(_short_answers_only) is False
    assert "on the right answer '<answer>123457/789</answer>'" in capsys.readouterr().out
    # str(Fraction) is the lowest-terms p/q (or p): comparing with it is a right verifier
    canonical = lambda text, expected: float((extract_answer(text) or "").strip() == str(expected))  # noqa: E731
    assert check_fraction_verifier(canonical) is True


def test_checker_restores_eval():
    check_fraction_verifier(_through_eval)
    assert eval("1 + 1") == 2  # noqa: S307


# --- the second exercise: c_G(p) ---------------------------------------------------------------------

def _scale_by_enumeration(p, G, eps=0.0):
    """A reader's answer: the expected advantage of a pass minus that of a failure, K passes among the others
    (``eps`` added to the std, as ``group_advantages`` (1e-6) and TRL (1e-4) do)."""
    total = 0.0
    for k in range(G):
        weight = math.comb(G - 1, k) * p ** k * (1 - p) ** (G - 1 - k)
        for mine in (1, 0):
            m = (k + mine) / G
            if 0 < m < 1:
                total += weight * (mine - m) / (math.sqrt(m * (1 - m)) + eps) * (1 if mine else -1)
    return total


@pytest.mark.parametrize("answer, verdict, said", [
    (_scale_by_enumeration, True, "✓"),
    (lambda p, G: hacking.advantage_scale(p), False, "large-group limit"),
    (lambda p, G: 1 / 0, False, "ZeroDivisionError"),
    (lambda p, G: "2.4", False, "one finite number"),
    (lambda p, G: 1.0, False, "expected"),
    # the convention at the ends, p = 0 and 1: √(G − 1), not the expected advantage 0 nor infinity
    (lambda p, G: 0.0 if p in (0.0, 1.0) else _scale_by_enumeration(p, G), False, "expected *advantage*"),
    (lambda p, G: hacking.advantage_scale(p) if p in (0.0, 1.0) else _scale_by_enumeration(p, G), False,
     "infinite"),
    (lambda p, G: math.sqrt(G - 1) if p in (0.0, 1.0) else _scale_by_enumeration(p, G), True, "✓"),
    (lambda p, G: exercise_hacking._scale_variant(p, G, bessel=True), False, "population std"),
    (lambda p, G: exercise_hacking._scale_variant(p, G, others=G), False, "G − 1"),
])
def test_advantage_scale_checker(answer, verdict, said, capsys):
    assert check_advantage_scale(answer) is verdict
    assert said in capsys.readouterr().out


@pytest.mark.parametrize("eps", [1e-6, 1e-4])
def test_advantage_scale_checker_accepts_an_eps_stabilised_std(eps, capsys):
    assert check_advantage_scale(lambda p, G: _scale_by_enumeration(p, G, eps)) is True


def test_advantage_scale_checker_names_the_pass_only_slip_and_the_cap(capsys):
    assert check_advantage_scale(lambda p, G: hacking.advantage_scale(p, G) * (1 - p)) is False
    assert "E[A | r = 1] = c_G(p)(1 − p)" in capsys.readouterr().out
    # the same slip computed exactly in float64 (no eps): still named
    assert check_advantage_scale(lambda p, G: exercise_hacking._scale_variant(p, G) * (1 - p)) is False
    assert "E[A | r = 1] = c_G(p)(1 − p)" in capsys.readouterr().out
    assert check_advantage_scale(lambda p, G: hacking.advantage_scale(p)) is False
    said = capsys.readouterr().out
    assert "√(G − 1)" in said and "most groups can be flat" not in said


def test_named_slips_lie_outside_the_tolerance():
    # every slip the checker names differs from the exact scale by more than SCALE_REL_TOL at the first case
    p, G = exercise_hacking.SCALE_CASES[0]
    exact = hacking.advantage_scale(p, G)
    for slip in (exercise_hacking._scale_variant(p, G, bessel=True), exercise_hacking._scale_variant(p, G, others=G),
                 exact * (1 - p), hacking.advantage_scale(p)):
        assert abs(slip - exact) > 10 * exercise_hacking.SCALE_REL_TOL * exact


def test_fraction_checker_lists_every_hack_admitted(capsys):
    assert check_fraction_verifier(_value_only) is False
    said = capsys.readouterr().out
    assert "fraction not in lowest terms" in said and "it also admits" in said
    for name in ("a plus sign", "leading zeros", "underscores in numbers", "Unicode digits"):
        assert name in said


def test_plot_advantage_scale_draws_each_group_size_below_the_limit():
    ax = viz.plot_advantage_scale((4, 8))
    finite, limit = ax.lines[0], ax.lines[-1]
    assert len(ax.lines) == 3
    assert finite.get_ydata()[0] == pytest.approx(math.sqrt(3), rel=1e-5)  # σ + 1e-6, as trained
    middle = np.argmin(abs(finite.get_xdata() - 0.5))
    assert finite.get_ydata()[middle] < hacking.advantage_scale(0.5)
    assert max(limit.get_ydata()) > max(finite.get_ydata())
    with pytest.raises(ValueError):
        viz.plot_advantage_scale((1,))
    plt.close("all")


def test_plot_hack_counts_as_shares_and_base_strict_line():
    ax = viz.plot_hack_counts({"a": {"padding": 5}, "b": {"padding": 10}}, totals={"a": 10, "b": 40})
    heights = sorted(bar.get_height() for bar in ax.patches)
    assert heights == pytest.approx([0.25, 0.5])
    assert any("n = 40" in text.get_text() for text in ax.get_legend().get_texts())
    with pytest.raises(ValueError):
        viz.plot_hack_counts({"a": {"padding": 5}}, totals={"b": 10})
    axes = viz.plot_pass_rates(_curves(), window=1, base_rate=0.05, base_strict=0.2)
    assert any(line.get_ydata()[0] == 0.2 for line in axes[0].lines)
    plt.close("all")
