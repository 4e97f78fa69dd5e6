"""Lesson 17 (R1-Zero in miniature): the reward, completion kinds, the length decomposition, the
scratchpad audit, the figures and the exercise checker."""

import copy
import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from rlbook import reasoning as rz
from rlbook.exercises.r1_zero import CASES, PROFILE_PAIRS, check_r1_zero_reward, check_within_term
from rlbook.tasks import ArithmeticTask, arithmetic_reward, format_reward
from rlbook.tasks.verifiers import extract_answer
from rlbook.viz import r1_zero as rz_viz

TASK = ArithmeticTask(digits=3)
EXAMPLE = {"answer": "623", "a": 345, "b": 278}
WORKED = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"
DIRECT_RIGHT, DIRECT_WRONG = "<answer>623</answer>", "<answer>613</answer>"
MALFORMED = "<answer>623</answer> done"


def test_completion_kind_and_outcome():
    assert rz.completion_kind(WORKED) == "scratchpad"
    assert rz.completion_kind(DIRECT_RIGHT) == "direct"
    assert rz.completion_kind(MALFORMED) == "malformed"
    assert rz.outcome_of(WORKED, True) == "scratchpad, right"
    assert rz.outcome_of(DIRECT_WRONG, False) == "direct, wrong"
    assert rz.outcome_of(MALFORMED, True) == "malformed"
    with pytest.raises(ValueError, match="text"):
        rz.completion_kind(3)


def test_r1_zero_reward_sums_strict_accuracy_and_format():
    assert rz.r1_zero_reward(WORKED, EXAMPLE, TASK) == 1.5
    assert rz.r1_zero_reward(DIRECT_WRONG, EXAMPLE, TASK, format_weight=0.2) == pytest.approx(0.2)
    assert rz.r1_zero_reward(DIRECT_RIGHT, EXAMPLE, TASK, think_required=True) == 1.0
    assert rz.r1_zero_reward(WORKED, EXAMPLE, TASK, accuracy_weight=0.0, format_weight=1.0, think_required=True) == 1.0
    assert rz.r1_zero_reward("<answer>623 1</answer>", EXAMPLE, TASK) == 0.5  # lax would pay; strict does not
    with pytest.raises(ValueError, match="format_weight"):
        rz.r1_zero_reward(WORKED, EXAMPLE, TASK, format_weight=-1.0)
    with pytest.raises(ValueError, match="think_required"):
        rz.r1_zero_reward(WORKED, EXAMPLE, TASK, think_required=1)


def test_mean_advantage_by_outcome_scale_invariance_and_format_cancellation():
    texts = [WORKED, DIRECT_WRONG, DIRECT_WRONG, DIRECT_RIGHT, WORKED, WORKED, DIRECT_WRONG, MALFORMED]
    correct = [1, 0, 0, 1, 1, 1, 0, 0]
    base = rz.mean_advantage_by_outcome(texts, correct, 4)
    doubled = rz.mean_advantage_by_outcome(texts, correct, 4, accuracy_weight=2.0, format_weight=1.0)
    assert all(math.isclose(base[o], doubled[o], rel_tol=1e-5) for o in rz.OUTCOMES if not math.isnan(base[o]))
    assert math.isnan(base["scratchpad, wrong"])
    # the first group has no malformed completion: its advantages do not depend on the format weight
    first = rz.mean_advantage_by_outcome(texts[:4], correct[:4], 4, format_weight=0.0)
    assert first == pytest.approx(rz.mean_advantage_by_outcome(texts[:4], correct[:4], 4, format_weight=2.0),
                                  nan_ok=True)
    # paying only for the tag: every scratchpad up, every direct answer down
    tag = rz.mean_advantage_by_outcome(texts, correct, 4, accuracy_weight=0.0, format_weight=1.0, think_required=True)
    assert tag["scratchpad, right"] > 0 > tag["direct, right"]
    with pytest.raises(ValueError, match="group_size"):
        rz.mean_advantage_by_outcome(texts, correct, 3)
    with pytest.raises(ValueError, match="correct"):
        rz.mean_advantage_by_outcome(texts, [0.5] * 8, 4)


def test_profile_and_length_decomposition_is_exact():
    before = rz.profile([WORKED, DIRECT_WRONG, DIRECT_WRONG, DIRECT_RIGHT], [30, 6, 6, 6], [1, 0, 0, 1])
    assert before["scratchpad"]["share"] == 0.25 and before["direct"]["length"] == 6
    assert math.isnan(before["malformed"]["length"]) and before["all"]["accuracy"] == 0.5
    after = rz.profile([WORKED, WORKED, WORKED, MALFORMED], [31, 29, 30, 8], [1, 1, 0, 0])
    parts = rz.length_decomposition(before, after)
    assert parts["change"] == pytest.approx(after["all"]["length"] - before["all"]["length"])
    assert parts["mix"] + parts["within"] == pytest.approx(parts["change"])
    assert parts["within"] == pytest.approx(0.0)  # scratchpads keep their mean length of 30
    accuracy = rz.length_decomposition(before, after, metric="accuracy")
    assert accuracy["before"] == pytest.approx(0.5) and accuracy["after"] == pytest.approx(0.5)
    # mix: scratchpad share 0.25 → 0.75 at accuracy 1, direct 0.75 → 0 at 1/3, malformed 0 → 0.25 at 0
    assert accuracy["mix"] == pytest.approx(0.5 * 1 - 0.75 / 3)
    assert accuracy["mix"] + accuracy["within"] == pytest.approx(accuracy["change"])
    with pytest.raises(ValueError, match="metric"):
        rz.length_decomposition(before, after, metric="entropy")
    with pytest.raises(ValueError, match="before"):
        rz.length_decomposition({}, after)
    with pytest.raises(ValueError, match="texts, lengths and correct"):
        rz.profile([WORKED], [1, 2], [1])


def test_audit_addition_scratchpad():
    clean = rz.audit_addition_scratchpad(WORKED, 345, 278)
    assert clean == {"lines": 3, "steps": 3, "wrong": 0, "extra": 0, "missing": 0, "other": 0, "follows_work": True}
    slipped = rz.audit_addition_scratchpad("<think>5+8=13\n4+7+1=12\n3+2=5</think><answer>523</answer>", 345, 278)
    assert slipped["steps"] == 2 and slipped["wrong"] == 1 and slipped["follows_work"] is True
    checked = rz.audit_addition_scratchpad(WORKED.replace("</think>", "\ncheck: 623-278=345</think>"), 345, 278)
    assert checked["extra"] == 1 and checked["other"] == 1 and checked["follows_work"] is False
    assert rz.audit_addition_scratchpad(DIRECT_RIGHT, 345, 278) is None
    with pytest.raises(ValueError, match="a must"):
        rz.audit_addition_scratchpad(WORKED, -1, 278)


def test_figures_draw():
    texts = [WORKED, DIRECT_WRONG, DIRECT_WRONG, DIRECT_RIGHT]
    means = rz_viz.plot_advantage_by_outcome(texts, [1, 0, 0, 1], 4)
    assert means["scratchpad, right"] > 0
    _, ax = plt.subplots()
    rz_viz.plot_advantage_by_outcome(texts, [1, 0, 0, 1], 4, ax=ax, ylim=(-3, 3))
    assert ax.get_ylim() == (-3, 3)
    labels = [t.get_text() for t in ax.texts]
    assert any(label.endswith("n = 2") for label in labels) and any(label.endswith("n = 1") for label in labels)
    probes = pd.DataFrame({"seed": [0, 0, 1, 1], "step": [0, 10, 0, 10], "accuracy": [0.3, 0.6, 0.3, 0.7],
                           "length": [12, 20, 12, 22], "scratchpad": [0.25, 0.6, 0.25, 0.7]})
    assert len(rz_viz.plot_twin_curves(probes).axes) == 3
    profile = rz.profile(texts, [30, 6, 6, 6], [1, 0, 0, 1])
    assert len(rz_viz.plot_length_accuracy_path(probes, profile).get_lines()) == 4  # line, its ends, 2 seeds
    assert len(rz_viz.plot_length_accuracy_path(probes, profile, line_se=0.03).collections) == 1  # the band
    both = rz_viz.plot_length_accuracy_path(probes, profile, line_se=0.03, direct_se=0.02).collections[0]
    widths = np.ptp(both.get_paths()[0].vertices[:, 1])  # the band's height spans both ends' SEs
    assert widths > 2 * 0.02 - 1e-9
    ax = rz_viz.plot_length_decomposition({"a": {"mix": 10.0, "within": -0.5}, "b": {"mix": 8.0, "within": 1.0}})
    ax = ax if hasattr(ax, "patches") else plt.gca()
    within_bars = ax.patches[2:]  # a negative within term is drawn below zero, a positive one on the mix's top
    assert within_bars[0].get_y() == pytest.approx(0.0) and within_bars[0].get_height() == pytest.approx(-0.5)
    assert within_bars[1].get_y() == pytest.approx(8.0)
    with pytest.raises(ValueError, match="probes"):
        rz_viz.plot_twin_curves(probes.drop(columns="length"))
    plt.close("all")


def test_advantage_widget_has_three_knobs_and_each_changes_the_bars():
    texts = [WORKED, DIRECT_WRONG, MALFORMED, DIRECT_RIGHT]
    interactive = rz_viz.advantage_widget(texts, [1, 0, 0, 1], 4).widget
    assert [c._kwarg for c in interactive.kwargs_widgets] == ["accuracy_weight", "format_weight", "think_required"]
    for control in interactive.kwargs_widgets:  # the interact redraws on each change without raising
        control.value = not control.value if isinstance(control.value, bool) else control.max
    plt.close("all")
    bars = [rz_viz.plot_advantage_by_outcome(texts, [1, 0, 0, 1], 4, **knobs) for knobs in
            ({}, {"accuracy_weight": 0.1}, {"format_weight": 2.0}, {"think_required": True})]
    assert all(bars[0] != other for other in bars[1:])
    plt.close("all")


def test_checker_accepts_the_reference_and_names_mistakes(capsys):
    def right(text, answer, w):
        return arithmetic_reward(text, answer) + w * format_reward(text)

    assert check_r1_zero_reward(right) is True
    mistakes = {
        "lax verifier": lambda t, a, w: arithmetic_reward(t, a, strict=False) + w * format_reward(t),
        "format term is missing": lambda t, a, w: arithmetic_reward(t, a),
        "wrong term": lambda t, a, w: w * arithmetic_reward(t, a) + format_reward(t),
        "only to right answers": lambda t, a, w: arithmetic_reward(t, a) * (1 + w),
        "paid only to right answers": lambda t, a, w: arithmetic_reward(t, a) * (1 + w * format_reward(t)),
        "only to well-formed": lambda t, a, w: (arithmetic_reward(t, a) + w) * format_reward(t),
        "requires <think>": lambda t, a, w: arithmetic_reward(t, a) + w * float("<think>" in t and format_reward(t)),
        "partial": lambda t, a, w: arithmetic_reward(t, a) + w * format_reward(t, partial=True),
        "last of several": lambda t, a, w: float(bool(blocks(t)) and blocks(t)[-1].strip() == a) + w * format_reward(t),
        "text after the answer block": lambda t, a, w: (float(len(blocks(t)) == 1 and blocks(t)[0].strip() == a)
                                                        + w * format_reward(t)),
        "two answer blocks are not well formed": lambda t, a, w: arithmetic_reward(t, a) + w * float(
            re.fullmatch(r"\s*(<think>.*?</think>)?\s*<answer>.*?</answer>\s*", t, re.S) is not None),
        "'0623' is not '623'": lambda t, a, w: float(_as_int(t) == int(a)) + w * format_reward(t),
    }
    for phrase, fn in mistakes.items():
        assert check_r1_zero_reward(fn) is False
        assert phrase in capsys.readouterr().out, phrase
    assert check_r1_zero_reward(lambda t, a, w: 7.0) is False
    assert "expected" in capsys.readouterr().out
    assert len(CASES) >= 6


def blocks(text):
    return re.findall(r"<answer>(.*?)</answer>", text, re.S)


def _as_int(text):
    found = extract_answer(text)
    try:
        return int(found.strip()) if found is not None else None
    except ValueError:
        return None


def test_checker_accepts_hand_written_right_answers(capsys):
    def by_hand(text, answer, w):
        body = text.rstrip()
        one_block = body.count("<answer>") == 1 and body.count("</answer>") == 1 and body.endswith("</answer>")
        accuracy = float(one_block and body[body.index("<answer>") + 8:-9].strip() == answer)
        return accuracy + w * float(rz.completion_kind(text) != "malformed")

    assert check_r1_zero_reward(by_hand) is True
    assert "matches" in capsys.readouterr().out


def test_within_checker_accepts_the_reference_and_names_mistakes(capsys):
    def right(before, after):
        total = 0.0
        for kind in rz.KINDS:
            p, q = before[kind]["share"], after[kind]["share"]
            if p > 0 and q > 0:
                total += q * (after[kind]["length"] - before[kind]["length"])
        return total

    assert check_within_term(right) is True
    assert check_within_term(lambda b, a: rz.length_decomposition(b, a)["within"]) is True
    capsys.readouterr()

    def weighted(before, after, base_shares=False, zero=False):
        total = 0.0
        for kind in rz.KINDS:
            p, q = before[kind]["share"], after[kind]["share"]
            length = 0.0 if (zero and p == 0) else before[kind]["length"]
            length_new = 0.0 if (zero and q == 0) else after[kind]["length"]
            if not zero and (p == 0 or q == 0):
                continue
            total += (p if base_shares else q) * (length_new - length)
        return total

    mistakes = {
        "other exact split": lambda b, a: weighted(b, a, base_shares=True),
        "whole change": lambda b, a: rz.length_decomposition(b, a)["change"],
        "mix term": lambda b, a: rz.length_decomposition(b, a)["mix"],
        "not length 0": lambda b, a: weighted(b, a, zero=True),
        "NaN": lambda b, a: sum(a[k]["share"] * (a[k]["length"] - b[k]["length"]) for k in rz.KINDS),
    }
    for phrase, fn in mistakes.items():
        assert check_within_term(fn) is False
        assert phrase in capsys.readouterr().out, phrase
    assert any(math.isnan(b[k]["length"]) or math.isnan(a[k]["length"]) for b, a in PROFILE_PAIRS for k in rz.KINDS)


def test_clustered_decomposition_matches_the_point_split_and_its_se_the_clustered_one():
    rng = np.random.default_rng(0)
    prompts = np.repeat(np.arange(40), 4)
    texts_before = [WORKED if u < 0.3 else DIRECT_WRONG for u in rng.random(160)]
    texts_after = [WORKED if u < 0.9 else DIRECT_WRONG for u in rng.random(160)]
    lengths_before = [30 if t == WORKED else 6 for t in texts_before]
    lengths_after = [30 + int(rng.integers(0, 3)) if t == WORKED else 6 for t in texts_after]
    correct_before = (rng.random(160) < np.where(np.array(texts_before) == WORKED, 0.9, 0.1)).astype(float)
    correct_after = (rng.random(160) < np.where(np.array(texts_after) == WORKED, 0.9, 0.1)).astype(float)
    before = (texts_before, lengths_before, correct_before)
    after = (texts_after, lengths_after, correct_after)
    for metric in ("length", "accuracy"):
        found = rz.clustered_decomposition(before, after, prompts, metric=metric, n_resamples=400)
        point = rz.length_decomposition(rz.profile(*before), rz.profile(*after), metric=metric)
        for key in ("before", "after", "change", "mix", "within"):
            assert found[key] == pytest.approx(point[key])
            assert found[f"{key}_se"] >= 0
    # one kind only: the within term is the change of that kind's mean, and its SE the clustered SE of a
    # difference of two means over the same prompts
    worked = [WORKED] * 160
    one = rz.clustered_decomposition((worked, lengths_before, correct_before), (worked, lengths_before, correct_after),
                                     prompts, metric="accuracy", n_resamples=4000)
    per_prompt = (correct_after - correct_before).reshape(40, 4).mean(axis=1)
    assert one["within"] == pytest.approx(per_prompt.mean())
    assert one["within_se"] == pytest.approx(per_prompt.std(ddof=1) / np.sqrt(40), rel=0.15)
    # identical probes: no change and no spread
    same = rz.clustered_decomposition(before, before, prompts, n_resamples=50)
    assert same["change"] == 0 and same["within_se"] == 0 and same["mix_se"] == 0
    # the other exact split: the point terms of length_decomposition(shares="before"), and the two splits agree
    # on the change
    for metric in ("length", "accuracy"):
        other = rz.clustered_decomposition(before, after, prompts, metric=metric, n_resamples=100, shares="before")
        point = rz.length_decomposition(rz.profile(*before), rz.profile(*after), metric=metric, shares="before")
        for key in ("change", "mix", "within"):
            assert other[key] == pytest.approx(point[key])
        assert other["mix"] + other["within"] == pytest.approx(other["change"])
    with pytest.raises(ValueError, match="shares"):
        rz.clustered_decomposition(before, after, prompts, shares="mean")
    with pytest.raises(ValueError, match="clusters"):
        rz.clustered_decomposition(before, after, prompts[:-1])
    with pytest.raises(ValueError, match="metric"):
        rz.clustered_decomposition(before, after, prompts, metric="entropy")


def test_first_decision_push_is_zero_without_a_reward_gap_and_matches_a_batch():
    assert rz.first_decision_push(0.3, 0.0, 30.0, 6.0) == 0.0
    assert rz.first_decision_push(0.3, 0.0, 30.0, 6.0, normaliser=64) == 0.0
    assert rz.first_decision_push(0.3, 0.5, 30.0, 6.0, normaliser=64) == pytest.approx(0.3 * 0.5 / 64)
    # a batch whose kinds have fixed lengths and whose advantages sum to zero: the mean over the batch of
    # A_i · w_i · ∂log π(first token)/∂z equals the formula
    p, length_s, length_d = 0.25, 30.0, 6.0
    is_scratchpad = torch.tensor([1.0, 0, 0, 0] * 4, dtype=torch.float64)
    advantages = torch.where(is_scratchpad == 1, torch.tensor(1.2, dtype=torch.float64), torch.tensor(-0.4, dtype=torch.float64))
    assert float(advantages.sum()) == pytest.approx(0.0)
    dlogp = 1 - p - is_scratchpad.new_ones(()) + is_scratchpad  # 1 − p for <think>, −p otherwise
    lengths = length_d + (length_s - length_d) * is_scratchpad
    assert float((advantages / lengths * dlogp).mean()) == pytest.approx(rz.first_decision_push(p, 1.2, length_s, length_d))
    assert float((advantages / 64 * dlogp).mean()) == pytest.approx(rz.first_decision_push(p, 1.2, length_s, length_d,
                                                                                            normaliser=64))
    with pytest.raises(ValueError, match="p must"):
        rz.first_decision_push(1.5, 0.1, 30.0, 6.0)


def test_format_constant_in_every_group():
    assert rz.format_constant_in_every_group([WORKED, DIRECT_WRONG, WORKED, DIRECT_RIGHT], 2)
    assert not rz.format_constant_in_every_group([WORKED, DIRECT_WRONG, WORKED, DIRECT_RIGHT], 2, think_required=True)
    assert not rz.format_constant_in_every_group([WORKED, MALFORMED, WORKED, DIRECT_RIGHT], 2)


def test_checker_errors(capsys):
    assert check_r1_zero_reward(lambda t, a, w: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    with pytest.raises(ValueError):
        check_r1_zero_reward(3)


# ---------------------------------------------------------------- lesson 05: the scratchpad as the first decision


def test_kl_mode_split_is_the_chain_rule_sample_by_sample_and_in_expectation():
    import numpy as np
    import torch

    # six outcomes of one prompt, the first three "in mode" (a scratchpad), under a policy and a reference
    policy = torch.tensor([0.5, 0.2, 0.1, 0.1, 0.05, 0.05], dtype=torch.float64)
    reference = torch.tensor([0.05, 0.1, 0.1, 0.25, 0.25, 0.25], dtype=torch.float64)
    in_mode_outcome = torch.tensor([True, True, True, False, False, False])
    q, q_ref = float(policy[in_mode_outcome].sum()), float(reference[in_mode_outcome].sum())
    exact_total = float((policy * (policy / reference).log()).sum())
    exact_mode = q * math.log(q / q_ref) + (1 - q) * math.log((1 - q) / (1 - q_ref))
    draws = torch.multinomial(policy, 20_000, replacement=True, generator=torch.Generator().manual_seed(0))
    log_ratio = (policy / reference).log()[draws]
    split = rz.kl_mode_split(log_ratio, in_mode_outcome[draws], [q] * len(draws), [q_ref] * len(draws),
                             clusters=range(len(draws)))
    assert split["total"][0] == pytest.approx(split["mode"][0] + split["within"][0], abs=1e-12)
    assert split["mode_exact"] == pytest.approx(exact_mode, abs=1e-12)
    for part, exact in (("total", exact_total), ("mode", exact_mode), ("within", exact_total - exact_mode)):
        mean, se = split[part]
        assert abs(mean - exact) < 4 * se, part
    assert np.allclose(split["within_per_sample"], log_ratio.numpy() - np.where(
        in_mode_outcome[draws].numpy(), math.log(q / q_ref), math.log((1 - q) / (1 - q_ref))))


def test_success_conditioned_split_is_the_chain_rule_of_log_one_over_p():
    import numpy as np
    import torch

    # prompt 0: 8 samples, 4 in the mode (3 right), 4 not (1 right); prompt 1 never solved; prompt 2 always
    in_mode = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]])
    correct = torch.tensor([[1, 1, 1, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    split = rz.success_conditioned_mode_split(in_mode, correct)
    per = split["per_problem"]
    assert np.allclose(per[:, 0], [math.log(2), 0.0, 0.0])       # log(1/p̂), 0 for the prompt never solved
    assert np.allclose(per[:, 0], per[:, 1] + per[:, 2])
    # prompt 0 by hand: q̂ = 1/2, q̂* = 3/4; within = 3/4 log(1/(3/4)) + 1/4 log(1/(1/4))
    assert per[0, 1] == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5))
    assert per[0, 2] == pytest.approx(0.75 * math.log(4 / 3) + 0.25 * math.log(4))
    assert split["total"][0] == pytest.approx(math.log(2) / 3)
    assert split["mode_share"] == pytest.approx((0.75 + 0.25) / 2)
    with pytest.raises(ValueError, match="one shape"):
        rz.success_conditioned_mode_split(in_mode, correct[:, :4])
    with pytest.raises(ValueError, match="in_mode"):
        rz.success_conditioned_mode_split(in_mode * 2, correct)


@pytest.mark.parametrize("kwargs,message", [
    (dict(log_ratio=[0.1, 0.2], in_mode=[True]), "one length"),
    (dict(in_mode=[1, 0]), "booleans"),
    (dict(policy_mode_prob=[1.2, 0.5]), "policy_mode_prob"),
    (dict(reference_mode_prob=[0.0, 0.5]), "positive probability"),
    (dict(log_ratio=[float("nan"), 0.2]), "log_ratio"),
])
def test_kl_mode_split_names_bad_input(kwargs, message):
    arguments = dict(log_ratio=[0.1, 0.2], in_mode=[True, False], policy_mode_prob=[0.9, 0.5],
                     reference_mode_prob=[0.3, 0.5], clusters=[0, 1])
    with pytest.raises(ValueError, match=message):
        rz.kl_mode_split(**{**arguments, **kwargs})


def test_the_scratchpad_is_the_first_tokens_decision_and_its_probability_matches_sampling():
    import torch

    from rlbook.models import load_model
    from rlbook.rollout import sample

    model, tokenizer = load_model("arith-base")
    prompts = [[{"role": "user", "content": f"What is {a}+{b}?"}] for a, b in ((345, 278), (101, 909))]
    probability = rz.scratchpad_opening_probability(model, tokenizer, prompts)
    assert probability.shape == (2,) and bool(((probability > 0) & (probability < 1)).all())
    rollout = sample(model, tokenizer, prompts, num_samples=200, max_new_tokens=4, seed=0)
    opens = rz.opens_scratchpad(rollout, tokenizer)
    assert opens.tolist() == [text.startswith("<think>") for text in rollout.texts]
    share = opens.view(2, 200).double().mean(dim=1)
    assert torch.all((share - probability).abs() < 4 * (probability * (1 - probability) / 200).sqrt())

    class Splits:
        def encode(self, text, add_special_tokens=False):
            return [1, 2]

    with pytest.raises(ValueError, match="tokenizer"):
        rz.scratchpad_token_id(Splits())


def test_normaliser_push_ratio_against_the_budget_and_the_mean_length():
    # at the base's profile: (0.742/29.5 + 0.258/6.6) × 64 ≈ 4.1, and × the mean length 12.5 ≈ 0.80
    p, length_s, length_d = 0.258, 29.5, 6.6
    bracket = (1 - p) / length_s + p / length_d
    assert rz.normaliser_push_ratio(p, length_s, length_d, constant=64) == pytest.approx(bracket * 64)
    mean_length = p * length_s + (1 - p) * length_d
    assert rz.normaliser_push_ratio(p, length_s, length_d) == pytest.approx(bracket * mean_length)
    assert rz.normaliser_push_ratio(p, length_s, length_d) < 1 < rz.normaliser_push_ratio(0.97, length_s, length_d)
    assert rz.normaliser_push_ratio(0.5, 10.0, 10.0) == pytest.approx(1.0)  # equal lengths: no reweighting
    with pytest.raises(ValueError, match="probability"):
        rz.normaliser_push_ratio(1.5, length_s, length_d)


def test_both_splits_are_exact_and_differ():
    before = {"scratchpad": {"share": 0.25, "length": 29.5, "accuracy": 0.92},
              "direct": {"share": 0.75, "length": 6.6, "accuracy": 0.06},
              "malformed": {"share": 0.0, "length": math.nan, "accuracy": math.nan}}
    after = {"scratchpad": {"share": 0.97, "length": 29.0, "accuracy": 0.90},
             "direct": {"share": 0.03, "length": 6.0, "accuracy": 0.0},
             "malformed": {"share": 0.0, "length": math.nan, "accuracy": math.nan}}
    for metric in ("length", "accuracy"):
        trained, base = (rz.length_decomposition(before, after, metric=metric, shares=s) for s in ("after", "before"))
        for split in (trained, base):
            assert split["mix"] + split["within"] == pytest.approx(split["change"])
        assert trained["within"] != pytest.approx(base["within"])
    base = rz.length_decomposition(before, after, metric="accuracy", shares="before")
    assert base["within"] == pytest.approx(0.25 * (0.90 - 0.92) + 0.75 * (0.0 - 0.06))
    with pytest.raises(ValueError, match="shares"):
        rz.length_decomposition(before, after, shares="mean")


def test_clustered_decomposition_of_kept_samples_matches_the_profile_of_those_samples():
    rng = np.random.default_rng(1)
    prompts = np.repeat(np.arange(30), 4)
    texts_before = [WORKED if u < 0.3 else DIRECT_WRONG for u in rng.random(120)]
    texts_after = [WORKED if u < 0.8 else DIRECT_WRONG for u in rng.random(120)]
    lengths_before = np.array([30 if t == WORKED else 6 for t in texts_before], dtype=float)
    lengths_after = np.array([29 if t == WORKED else 7 for t in texts_after], dtype=float)
    correct_before = (rng.random(120) < np.where(np.array(texts_before) == WORKED, 0.9, 0.1)).astype(float)
    correct_after = (rng.random(120) < np.where(np.array(texts_after) == WORKED, 0.9, 0.1)).astype(float)
    wrong_before, wrong_after = correct_before == 0, correct_after == 0
    found = rz.clustered_decomposition((texts_before, lengths_before, correct_before),
                                       (texts_after, lengths_after, correct_after), prompts, n_resamples=300,
                                       keep=(wrong_before, wrong_after))
    point = rz.length_decomposition(
        rz.profile([t for t, w in zip(texts_before, wrong_before) if w], lengths_before[wrong_before],
                   correct_before[wrong_before]),
        rz.profile([t for t, w in zip(texts_after, wrong_after) if w], lengths_after[wrong_after],
                   correct_after[wrong_after]))
    for key in ("before", "after", "change", "mix", "within"):
        assert found[key] == pytest.approx(point[key])
        assert found[f"{key}_se"] > 0
    # keeping everything is the plain decomposition, resample for resample
    everything = np.ones(120)
    plain = rz.clustered_decomposition((texts_before, lengths_before, correct_before),
                                       (texts_after, lengths_after, correct_after), prompts, n_resamples=100)
    kept = rz.clustered_decomposition((texts_before, lengths_before, correct_before),
                                      (texts_after, lengths_after, correct_after), prompts, n_resamples=100,
                                      keep=(everything, everything))
    assert kept == pytest.approx(plain)
    with pytest.raises(ValueError, match="keep"):
        rz.clustered_decomposition((texts_before, lengths_before, correct_before),
                                   (texts_after, lengths_after, correct_after), prompts, keep=(wrong_before,))
    with pytest.raises(ValueError, match="keep"):
        rz.clustered_decomposition((texts_before, lengths_before, correct_before),
                                   (texts_after, lengths_after, correct_after), prompts,
                                   keep=(wrong_before[:-1], wrong_after))


def test_first_token_kl_by_prompt_sums_k3_per_group():
    logprobs = torch.log(torch.tensor([[0.5, 0.9, 0.9], [0.8, 0.5, 1.0], [0.2, 0.9, 1.0], [0.9, 0.9, 0.9]]))
    reference = torch.log(torch.tensor([[0.25, 0.9, 0.9], [0.8, 0.25, 1.0], [0.6, 0.9, 1.0], [0.9, 0.9, 0.9]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    first, total = rz.first_token_kl_by_prompt(logprobs, reference, mask, 2)

    def k3(p, q):  # π = p, π_ref = q
        return q / p - math.log(q / p) - 1

    assert first == pytest.approx([k3(0.5, 0.25) + 0.0, k3(0.2, 0.6) + 0.0])
    assert total == pytest.approx([k3(0.5, 0.25) + k3(0.5, 0.25), k3(0.2, 0.6)])
    assert (first <= total + 1e-12).all()
    with pytest.raises(ValueError, match="group_size"):
        rz.first_token_kl_by_prompt(logprobs, reference, mask, 3)
    with pytest.raises(ValueError, match="shape"):
        rz.first_token_kl_by_prompt(logprobs, reference[:, :2], mask, 2)


def test_push_checker_accepts_the_formula_and_names_mistakes(capsys):
    from rlbook.exercises.r1_zero import check_first_decision_push

    def right(p, a, ls, ld):
        return p * a * ((1 - p) / ls + p / ld)

    assert check_first_decision_push(right) is True
    wrong = {
        "scratchpads' part alone": lambda p, a, ls, ld: p * a * (1 - p) / ls,
        "wrong sign": lambda p, a, ls, ld: p * a * ((1 - p) / ls - p / ld),
        "carries a factor p": lambda p, a, ls, ld: a * ((1 - p) / ls + p / ld),
        "lengths are swapped": lambda p, a, ls, ld: p * a * ((1 - p) / ld + p / ls),
        "constant normaliser": lambda p, a, ls, ld: p * a / (p * ls + (1 - p) * ld),
    }
    for phrase, fn in wrong.items():
        capsys.readouterr()
        assert check_first_decision_push(fn) is False
        out = capsys.readouterr().out
        assert phrase in out and "✗" in out, (phrase, out)

    def stub(p, a, ls, ld):
        raise NotImplementedError

    assert check_first_decision_push(stub) is None


def test_exact_first_token_kl_sums_the_vocabulary_and_k3_estimates_it():
    from rlbook.models import load_model
    from rlbook.rollout import completion_forward, sample

    model, tokenizer = load_model("arith-base")
    policy = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter, generator=torch.Generator().manual_seed(0)))
    prompts = [[{"role": "user", "content": f"What is {a}+{b}?"}] for a, b in ((345, 278), (101, 909))]
    rollout = sample(policy, tokenizer, prompts, num_samples=64, max_new_tokens=8, seed=0)
    tensors = (rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask)
    first, total = rz.exact_first_token_kl_by_prompt(policy, model, *tensors, 64, batch_size=50)
    # by hand at position 0 of row 0: Σ_v π (log π − log π_ref)
    with torch.no_grad():
        p = torch.log_softmax(completion_forward(policy, *(t[:1] for t in tensors))[0, 0].double(), -1)
        q = torch.log_softmax(completion_forward(model, *(t[:1] for t in tensors))[0, 0].double(), -1)
    # same prompt on every row; the cached prompt pass differs from the plain one by float32 rounding
    assert first[0] == pytest.approx(64 * float((p.exp() * (p - q)).sum()), rel=1e-4)
    assert (first >= 0).all() and (first <= total + 1e-12).all()
    # k3 on the sampled tokens estimates the same sum: the two agree within the sampling noise
    with torch.no_grad():
        from rlbook.rollout import completion_logprobs
        reference_logp = completion_logprobs(model, *tensors)
    k3_first, _ = rz.first_token_kl_by_prompt(rollout.logprobs, reference_logp, rollout.completion_mask, 64)
    assert k3_first.sum() == pytest.approx(first.sum(), rel=0.5)
    with pytest.raises(ValueError, match="group_size"):
        rz.exact_first_token_kl_by_prompt(policy, model, *tensors, 3)


def test_kl_off_first_token_against_coin_values_and_se():
    first, total = np.array([0.9, 1.1]), np.array([1.2, 1.5])
    after = np.array([[1, 1, 1, 0], [1, 1, 0, 1]])
    before = np.array([[0, 1, 0, 0], [0, 0, 0, 1]])
    result = rz.kl_off_first_token_against_coin(first, total, after, before)
    qa, qb = 6 / 8, 2 / 8
    coin = qa * math.log(qa / qb) + (1 - qa) * math.log((1 - qa) / (1 - qb))
    assert result["off"] == pytest.approx((0.3 + 0.4) / 8)
    assert result["coin"] == pytest.approx(coin)
    assert result["margin"] == pytest.approx(coin - 0.7 / 8)
    # the delta-method SE against the spread of the margin over simulated replicate evaluations
    rng = np.random.default_rng(0)
    n_problems, samples = 150, 8

    def one_evaluation():
        rate_after = rng.beta(9, 1, n_problems)[:, None]
        rate_before = rng.beta(1, 3, n_problems)[:, None]
        worked_after = rng.random((n_problems, samples)) < rate_after
        worked_before = rng.random((n_problems, samples)) < rate_before
        off = rng.gamma(2.0, 0.2, (n_problems, samples)).sum(1)
        first_kl = rng.gamma(2.0, 0.4, n_problems)
        return rz.kl_off_first_token_against_coin(first_kl, first_kl + off, worked_after, worked_before)

    replicates = [one_evaluation() for _ in range(400)]
    spread = np.std([r["margin"] for r in replicates], ddof=1)
    assert np.mean([r["se"] for r in replicates]) == pytest.approx(spread, rel=0.15)
    with pytest.raises(ValueError, match="same P problems"):
        rz.kl_off_first_token_against_coin(first, total, after[:1], before[:1])
    with pytest.raises(ValueError, match="strictly between"):
        rz.kl_off_first_token_against_coin(first, total, np.ones((2, 4)), before)
