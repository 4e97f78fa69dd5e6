"""Lesson 20 (the full R1 pipeline): the stages' data, the rejection filter, the routed reward, the
stage report, saving a stage, the figures and the exercise checker."""

import re

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch

from rlbook import pipeline as pl
from rlbook.exercises.pipeline import CASES, _mistakes, check_keep_first, reference_keep
from rlbook.models import add_lora, build_char_tokenizer, build_tiny_model, load_model
from rlbook.tasks import ArithmeticTask, arithmetic_reward
from rlbook.tasks.reviews import parse_review
from rlbook.trainers import OnlineTrainer, preset
from rlbook.viz import pipeline as pl_viz

TASK = ArithmeticTask(digits=3)
EXAMPLE = {"answer": "623", "a": 345, "b": 278}
WORKED = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"
WORKED_WRONG = "<think>5+8=13\n4+7+1=12\n3+2=5</think><answer>523</answer>"
DIRECT_RIGHT = "<answer>623</answer>"


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_char_tokenizer()
    return build_tiny_model(tokenizer, shape="test", seed=0).eval(), tokenizer


class FakeRewardModel:
    """Scores a completion by its length, so routing is visible."""

    def __init__(self):
        self.calls = 0

    def score(self, prompts, completions):
        self.calls += 1
        return torch.tensor([float(len(c)) for c in completions])


def test_r1_format():
    assert pl.is_r1_formatted(WORKED)
    assert not pl.is_r1_formatted(DIRECT_RIGHT)
    assert not pl.is_r1_formatted(WORKED + " and more")
    with pytest.raises(ValueError, match="text"):
        pl.is_r1_formatted(None)


def test_cold_start_data_is_right_and_formatted():
    pairs = pl.cold_start_data(TASK, 20, seed=1)
    rows = TASK.dataset(20, seed=1, split="train")
    assert len(pairs) == 20
    for (prompt, completion), row in zip(pairs, rows):
        assert prompt == row["prompt"]
        assert TASK.reward(completion, row) == 1.0 and pl.is_r1_formatted(completion)
    assert pl.cold_start_data(TASK, 5, seed=1) == pairs[:5]
    with pytest.raises(ValueError, match="n"):
        pl.cold_start_data(TASK, 0)


def test_general_data_are_review_requests_answered_by_reviews():
    pairs = pl.general_data(30, seed=2)
    assert len(pairs) == 30
    assert all(p[0]["role"] == "user" and p[0]["content"].startswith("Review ") for p, _ in pairs)
    assert all(parse_review(review) is not None for _, review in pairs)
    assert pl.general_data(30, seed=2) == pairs and pl.general_data(30, seed=3) != pairs


def test_keep_first_keeps_the_first_right_formatted_sample():
    assert pl.keep_first([DIRECT_RIGHT, WORKED_WRONG, WORKED], EXAMPLE, TASK) == WORKED
    assert pl.keep_first([DIRECT_RIGHT, WORKED_WRONG], EXAMPLE, TASK) is None
    assert pl.keep_first([], EXAMPLE, TASK) is None


def test_rejection_samples_counts_and_keepable_table(tiny):
    model, tokenizer = tiny
    rows = TASK.dataset(3, seed=0, split="train")
    kept, counts = pl.rejection_samples(model, tokenizer, TASK, rows, n=4, max_new_tokens=8, seed=0)
    assert counts["prompts"] == 3 and counts["samples"] == 12
    assert counts["keepable"].shape == (3, 4)
    assert counts["kept"] == len(kept) == int(counts["keepable"].any(dim=1).sum())
    assert 0.0 <= counts["sample_accuracy"] <= 1.0
    again, _ = pl.rejection_samples(model, tokenizer, TASK, rows, n=4, max_new_tokens=8, seed=0)
    assert again == kept
    with pytest.raises(ValueError, match="examples"):
        pl.rejection_samples(model, tokenizer, TASK, [], n=2)
    with pytest.raises(ValueError, match="n"):
        pl.rejection_samples(model, tokenizer, TASK, rows, n=0)


def test_mixed_examples_and_routed_reward():
    rows = pl.mixed_examples(TASK, 6, 4, seed=0)
    assert [r["domain"] for r in rows].count("reasoning") == 6 and len(rows) == 10
    assert all("prompt" in r for r in rows)
    assert [r["domain"] for r in rows] != ["reasoning"] * 6 + ["general"] * 4  # shuffled
    with pytest.raises(ValueError, match="n_reasoning"):
        pl.mixed_examples(TASK, 0, 0)

    rm = FakeRewardModel()
    reward = pl.MixedReward(TASK, rm, reward_weight=0.5)
    assert reward(WORKED, {**EXAMPLE, "domain": "reasoning"}) == 1.0
    assert reward(WORKED_WRONG, {**EXAMPLE, "domain": "reasoning"}) == 0.0
    assert rm.calls == 0
    general = next(r for r in rows if r["domain"] == "general")
    assert reward("the plot was fun.", general) == pytest.approx(0.5 * len("the plot was fun."))
    assert rm.calls == 1
    with pytest.raises(ValueError, match="domain"):
        reward(WORKED, EXAMPLE)
    with pytest.raises(ValueError, match="reward_model"):
        pl.MixedReward(TASK, object())
    with pytest.raises(ValueError, match="reward_weight"):
        pl.MixedReward(TASK, rm, reward_weight=-1.0)


def test_mixed_reward_trains_in_the_online_trainer(tiny):
    model, tokenizer = tiny
    rows = pl.mixed_examples(TASK, 8, 8, seed=0)
    config = preset("grpo", group_size=2, prompts_per_step=4, max_new_tokens=8, lr=1e-3, seed=0)
    trainer = OnlineTrainer(build_tiny_model(tokenizer, shape="test", seed=0), tokenizer,
                            pl.MixedReward(TASK, FakeRewardModel()), config, train_dataset=rows)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    trainer.train(2, progress=False)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))


def test_stage_report_keys_and_checks(tiny):
    model, tokenizer = tiny
    held_out = TASK.dataset(3, seed=7, split="test")
    report = pl.stage_report(model, tokenizer, TASK, held_out, n_samples=4, k=2, max_new_tokens=8)
    assert set(report) == {"pass@1", "pass@1 SE", "pass@2", "length", "format"}
    assert report["pass@1 SE"] >= 0
    assert 0 <= report["pass@1"] <= report["pass@2"] <= 1
    with_reviews = pl.stage_report(model, tokenizer, TASK, held_out, review_prompts=["Review Up."], n_samples=2, k=2,
                                   max_new_tokens=8, review_max_new_tokens=8)
    assert with_reviews["gold preference"] == -3.0 and with_reviews["reviews parsed"] == 0.0  # random weights
    assert with_reviews["gold of parsed"] != with_reviews["gold of parsed"]  # NaN: no review parsed
    assert with_reviews["gold SE"] != with_reviews["gold SE"]  # NaN: one distinct prompt, one cluster
    assert with_reviews["parsed SE"] != with_reviews["parsed SE"]
    assert 0.0 <= with_reviews["reviews in answer format"] <= 1.0
    chat = [[{"role": "user", "content": "Review Up."}], [{"role": "user", "content": "Review Babe."}]]  # ReviewTask's prompts
    with_chat = pl.stage_report(model, tokenizer, TASK, held_out, review_prompts=chat, n_samples=2, k=2,
                                max_new_tokens=8, review_max_new_tokens=8)
    assert with_chat["gold SE"] == 0.0 and with_chat["parsed SE"] == 0.0  # two films, both all −3
    assert not model.training
    with pytest.raises(ValueError, match="k must be at most"):
        pl.stage_report(model, tokenizer, TASK, held_out, n_samples=2, k=4)
    with pytest.raises(ValueError, match="held_out"):
        pl.stage_report(model, tokenizer, TASK, [], n_samples=2, k=1)


def test_gold_gain_split_is_exact_and_attributes_each_source():
    row = lambda p, q: {"reviews parsed": p, "gold of parsed": q, "gold preference": -3.0 + p * (q + 3.0)}  # noqa: E731
    before, after = row(0.6, -1.0), row(0.8, 0.5)
    split = pl.gold_gain_split(before, after)
    assert split["total"] == pytest.approx(after["gold preference"] - before["gold preference"])
    assert split["parsing"] + split["content"] == pytest.approx(split["total"])
    assert pl.gold_gain_split(row(0.5, -1.0), row(0.5, 0.0))["parsing"] == 0.0  # same share: all content
    only_parsing = pl.gold_gain_split(row(0.5, -1.0), row(0.9, -1.0))
    assert only_parsing["content"] == 0.0 and only_parsing["parsing"] == pytest.approx(0.4 * 2.0)
    from_none = pl.gold_gain_split({"reviews parsed": 0.0, "gold of parsed": float("nan"), "gold preference": -3.0},
                                   row(0.5, -1.0))
    assert from_none == {"total": pytest.approx(1.0), "parsing": pytest.approx(1.0), "content": 0.0}
    with pytest.raises(ValueError, match="gold of parsed"):
        pl.gold_gain_split({"gold preference": -3.0}, after)


def test_pair_kinds():
    review, other = "the plot was clever.", "<answer>12</answer>"
    pairs = [{"chosen": review, "rejected": other}, {"chosen": review, "rejected": "the music was dull."},
             {"chosen": other, "rejected": other}]
    assert pl.pair_kinds(pairs) == ["one review", "both reviews", "no review"]
    from datasets import Dataset
    assert pl.pair_kinds(Dataset.from_list(pairs)) == ["one review", "both reviews", "no review"]


def test_save_stage_round_trip(tiny, tmp_path):
    model, tokenizer = tiny
    folder = pl.save_stage(model, tokenizer, tmp_path / "stage")
    loaded, loaded_tokenizer = load_model(str(folder))
    ids = tokenizer(["<answer>1</answer>"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    with pytest.raises(ValueError, match="peft"):
        pl.save_stage(add_lora(build_tiny_model(tokenizer, shape="test", seed=1), r=2), tokenizer, tmp_path / "lora")


def test_figures_draw():
    curves = pd.DataFrame([{"run": run, "seed": s, "step": step, "pass@1": 0.1 * step, "format": 0.5}
                           for run in ("a", "b") for s in (0, 1) for step in (0, 5)])
    assert len(pl_viz.plot_rlvr_curves(curves)) == 2
    table = pd.DataFrame({"pass@1": [0.3, 0.8], "pass@8": [0.9, 1.0], "format": [0.3, 0.9],
                          "gold preference": [-3.0, -1.0], "reviews parsed": [0.0, 0.7]}, index=["base", "stage"])
    axes = pl_viz.plot_stage_table(table)
    assert len(axes) == 3
    widths = sorted(p.get_width() for p in axes[2].patches)
    assert widths == pytest.approx([0.0, 2.0])  # the preference bars grow from -3: longer is better
    keepable = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    axes = pl_viz.plot_rs_yield(keepable, 2)
    assert axes[0].get_title().startswith("n = 2")
    with pytest.raises(ValueError, match="n must be"):
        pl_viz.plot_rs_yield(keepable, 5)
    ax = pl_viz.plot_distillation(curves[curves.run == "a"], {0: 0.7, 1: 0.8}, base=0.2)
    ladder = pd.DataFrame({"gold": [1.0, 2.0, 3.0], "rm score": [-0.5, -0.7, -2.3], "rm SE": [0.2, 0.2, 0.1],
                           "gold in RM pairs": [0.0, -0.4, -2.6]}, index=pd.Index([1, 2, 3], name="clauses"))
    left, right = pl_viz.plot_stage4_reviews({"stage 3": {1: 0.3, 2: 0.7}, "stage 4": {1: 0.9, 2: 0.1}}, ladder)
    assert len(left.patches) == 6 and len(right.lines) == 2
    with pytest.raises(ValueError):
        pl_viz.plot_stage4_reviews({}, ladder)
    assert ax.get_ylabel() == "held-out pass@1"
    ax = pl_viz.plot_distillation(curves[curves.run == "a"], {0: 0.7, 1: 0.8}, base=0.2, prefilled=0.6)
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [0.6, 0.6]
    assert any("prefilled" in t.get_text() for t in ax.get_legend().get_texts())
    ax = pl_viz.plot_distillation(curves[curves.run == "a"], {"distilled": {0: 0.7, 1: 0.8}, "clean data": {0: 0.8, 1: 0.9}})
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("clean data" in t for t in labels) and any("distilled" in t for t in labels)
    ax = pl_viz.plot_distillation(curves[curves.run == "a"], {"distilled": {0: 0.7, 1: 0.8}}, rl_finals={0: 0.4, 1: 0.45},
                                  probe_label="probes of 4 problems")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("final evaluation" in t for t in labels) and any("probes of 4 problems" in t for t in labels)
    marks = [line for line in ax.get_lines() if line.get_linestyle() == "None"]
    assert sorted(v for line in marks for v in line.get_ydata()) == pytest.approx([0.4, 0.45, 0.7, 0.8])
    assert min(x for line in marks for x in line.get_xdata()) > 5  # drawn right of the last RL step
    with pytest.raises(ValueError, match="curves"):
        pl_viz.plot_rlvr_curves(pd.DataFrame({"step": [0]}))
    plt.close("all")


def test_rs_yield_widget_responds():
    from test_widgets_respond import _drive

    recorder = _drive(pl_viz.rs_yield_widget(torch.tensor([[1, 0], [0, 0]])))  # the slider must change the figure
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets) >= 2
    # two policies: the menu and the slider each change the figure
    recorder = _drive(pl_viz.rs_yield_widget({"sure": torch.tensor([[1, 1], [1, 0]]), "unsure": torch.tensor([[1, 0], [0, 0]])}))
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets) >= 3
    # the zoom tick box changes the figure too
    keepable = (torch.rand(12, 4, generator=torch.Generator().manual_seed(0)) < 0.7).int()
    recorder = _drive(pl_viz.rs_yield_widget({"a": keepable, "b": 1 - keepable}, hardest=3))
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets) >= 4
    with pytest.raises(ValueError, match="hardest"):
        pl_viz.rs_yield_widget(keepable, hardest=0)
    with pytest.raises(ValueError, match="hardest must be below"):  # 12 prompts: a box for the 12 hardest is dead
        pl_viz.rs_yield_widget({"a": keepable, "b": keepable[:5]}, hardest=5)


def test_plot_stage_table_sets_an_ablation_apart():
    table = pd.DataFrame({"pass@1": [0.3, 0.5, 0.8], "pass@8": [0.9, 0.9, 1.0], "format": [0.3, 0.6, 0.9],
                          "gold preference": [-3.0, -3.0, -1.0]}, index=["base", "ablation", "stage"])
    axes = pl_viz.plot_stage_table(table, set_apart=["ablation"])
    ticks = dict(zip([t.get_text() for t in axes[0].get_yticklabels()], axes[0].get_yticks()))
    assert ticks["ablation"] < ticks["stage"] < ticks["base"]  # the ablation is drawn last, at the bottom
    bars = {round(p.get_width(), 3): p for p in axes[0].patches}
    assert bars[0.5].get_hatch() == "//" and not bars[0.8].get_hatch()
    assert bars[0.5].get_y() < min(b.get_y() for w, b in bars.items() if w != 0.5) - 0.5  # below a gap
    with pytest.raises(ValueError, match="set_apart"):
        pl_viz.plot_stage_table(table, set_apart=["nope"])
    plt.close("all")


def test_plot_stage_table_gold_multiplier():
    table = pd.DataFrame({"pass@1": [0.3, 0.8], "pass@8": [0.9, 1.0], "format": [0.3, 0.9], "gold preference": [-3.0, -1.0],
                          "gold SE": [0.0, 0.1], "reviews parsed": [0.0, 0.7]}, index=["base", "stage"])
    spans = {}
    for m in (2.0, 2.78):
        axes = pl_viz.plot_stage_table(table, gold_multiplier=m)
        segments = [seg for coll in axes[2].collections for seg in coll.get_segments()]
        spans[m] = max(abs(seg[1][0] - seg[0][0]) for seg in segments)
    assert spans[2.0] == pytest.approx(0.4) and spans[2.78] == pytest.approx(0.556)  # ± m SE
    with pytest.raises(ValueError):
        pl_viz.plot_stage_table(table, gold_multiplier=0)
    plt.close("all")


def test_exercise_checker_names_each_mistake(capsys):
    assert check_keep_first(reference_keep) is True
    for name, phrase in (("lax", "lax verifier"), ("no_format", "<think>"), ("no_accuracy", "wrong answer"),
                         ("last", "last good sample"), ("think_substring", "appears somewhere"),
                         ("adjacent_tags", "text before"), ("int_compare", "leading zeros"),
                         ("no_whitespace", "no whitespace")):
        capsys.readouterr()
        assert check_keep_first(lambda s, a, name=name: _mistakes(s, a)[name][0]) is False
        assert phrase in capsys.readouterr().out
    assert check_keep_first(lambda s, a: next((x for x in s if arithmetic_reward(x, a) == 1.0 and x.startswith("<think>")), None)) is False
    assert "starts with '<think>'" in capsys.readouterr().out
    assert check_keep_first(lambda s, a: reference_keep(s, a) or "") is False
    assert "return None" in capsys.readouterr().out
    assert check_keep_first(lambda s, a: list(s)) is False
    assert "not a list" in capsys.readouterr().out
    # the slip a reader made: the strict verifier plus a substring test for <think> in place of the format
    assert check_keep_first(lambda s, a: next((x for x in s if arithmetic_reward(x, a) == 1.0 and "<think>" in x), None)) is False
    assert "appears somewhere" in capsys.readouterr().out
    # a blind reader's slip that passed before: a substring test for the two blocks side by side
    assert check_keep_first(lambda s, a: next((x for x in s if arithmetic_reward(x, a) == 1.0
                                               and "</think><answer>" in x), None)) is False
    assert "line break" in capsys.readouterr().out
    # two blind readers' slips: the answer compared as a number, and a whole-completion pattern without \s*
    as_int = lambda x, a: (lambda m: m is not None and m.group(1).strip().isdigit() and int(m.group(1)) == int(a))(  # noqa: E731
        re.search(r"<answer>(.*?)</answer>", x))
    assert check_keep_first(lambda s, a: next((x for x in s if pl.is_r1_formatted(x) and as_int(x, a)), None)) is False
    assert "leading zeros" in capsys.readouterr().out
    assert check_keep_first(lambda s, a: next((x for x in s if arithmetic_reward(x, a) == 1.0 and re.fullmatch(
        r"<think>.*</think><answer>.*</answer>", x, re.S)), None)) is False
    assert "no whitespace" in capsys.readouterr().out
    # right answers written other ways pass
    assert check_keep_first(lambda s, a: next((x for x in s if re.fullmatch(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", x, re.S)
                                               and arithmetic_reward(x, a) == 1.0), None)) is True
    assert check_keep_first(lambda s, a: next((x for x in s if pl.is_r1_formatted(x) and arithmetic_reward(x, a) == 1.0), None)) is True
    assert check_keep_first(lambda s, a: [x for x in s if pl.keep_first([x], {"answer": a}, TASK)][0]
                            if any(pl.keep_first([x], {"answer": a}, TASK) for x in s) else None) is True
    assert all(reference_keep(s, a) is None or pl.is_r1_formatted(reference_keep(s, a)) for s, a in CASES)


def test_cluster_se():
    # sd of the cluster means over √clusters: means 0 and 1 → sd √0.5, SE √0.5 / √2 = 0.5
    assert pl._cluster_se([0.0, 1.0]) == pytest.approx(0.5)
    assert pl._cluster_se([0.3, 0.3, 0.3]) == 0.0
    assert pl._cluster_se([0.5]) != pl._cluster_se([0.5])  # NaN: one cluster


def test_by_prompt_se_weights_clusters_by_their_size():
    # equal sizes: the same as the SE over the cluster means
    assert pl._by_prompt_se([0.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"]) == pytest.approx(pl._cluster_se([0.0, 1.0]))
    # sizes 3 and 1, mean 0.25: cluster scores −0.75 and +0.75, SE = √(2 · 2 · 0.5625) / 4
    assert pl._by_prompt_se([0.0, 0.0, 0.0, 1.0], ["a", "a", "a", "b"]) == pytest.approx(1.5 / 4)
    assert pl._by_prompt_se([0.0, 1.0], ["a", "a"]) != pl._by_prompt_se([0.0, 1.0], ["a", "a"])  # NaN: one cluster


def test_clause_ladder():
    prompts = [[{"role": "user", "content": "Review Dune."}]]
    rows = pl.clause_ladder(FakeRewardModel(), prompts, clauses=(1, 3, 5), per=4, seed=0)
    assert [r["clauses"] for r in rows] == [1, 3, 5]
    assert [r["gold"] for r in rows] == [1.0, 3.0, 3.0]  # distinct positive clauses: flat past MAX_CLAUSES
    assert all(r["rm score"] == pytest.approx(r["chars"]) for r in rows)  # the fake scores a reply by its length
    assert rows[0]["chars"] < rows[1]["chars"] < rows[2]["chars"]
    with pytest.raises(ValueError):
        pl.clause_ladder(FakeRewardModel(), prompts, clauses=(7,))
    with pytest.raises(ValueError):
        pl.clause_ladder(FakeRewardModel(), [], clauses=(1,))


def test_fewer_clauses_wins():
    one, two, three = "the plot was fun.", "the plot was fun, the cast was superb.", "the plot was fun, the cast was superb, the music was lovely."
    pairs = [{"chosen": one, "rejected": three}, {"chosen": three, "rejected": two}, {"chosen": two, "rejected": two},
             {"chosen": "no review here", "rejected": one}]
    assert pl.fewer_clauses_wins(pairs) == [1.0, 0.0, 0.5, 0.5]
    from datasets import Dataset
    assert pl.fewer_clauses_wins(Dataset.from_list(pairs)) == [1.0, 0.0, 0.5, 0.5]


def test_gold_by_clauses():
    from rlbook.tasks.reviews import gold_reward
    texts = ["the plot was fun.", "the plot was dull.", "the plot was fun, the cast was superb.", "not a review"]
    rows = pl.gold_by_clauses(texts)
    assert [(r["clauses"], r["n"]) for r in rows] == [(1, 2), (2, 1)]
    assert rows[0]["gold"] == pytest.approx((gold_reward(texts[0]) + gold_reward(texts[1])) / 2)
    assert rows[0]["gold SE"] > 0 and rows[1]["gold SE"] != rows[1]["gold SE"]  # NaN for one reply
    with pytest.raises(ValueError):
        pl.gold_by_clauses(["not a review"])


def test_checker_names_the_lax_and_well_formed_slips(capsys):
    from rlbook.tasks.verifiers import is_well_formed
    lax = lambda s, a: next((x for x in s if arithmetic_reward(x, a, strict=False) == 1.0 and pl.is_r1_formatted(x)), None)  # noqa: E731
    assert check_keep_first(lax) is False
    assert "lax verifier" in capsys.readouterr().out
    well = lambda s, a: next((x for x in s if arithmetic_reward(x, a) == 1.0 and is_well_formed(x)), None)  # noqa: E731
    assert check_keep_first(well) is False
    assert "is_well_formed" in capsys.readouterr().out


def test_solver_demonstrations_matched_on_kept_prompts():
    rows = TASK.dataset(6, seed=1, split="train")
    everything = pl.solver_demonstrations(TASK, rows)
    assert everything == pl.cold_start_data(TASK, 6, seed=1)
    # a filter that kept samples for rows 4, 1 and 3 only (in that order): one demonstration for each, in order
    kept = [(rows[i]["prompt"], "<think>x</think><answer>0</answer>") for i in (4, 1, 3)]
    matched = pl.solver_demonstrations(TASK, rows, matching=kept)
    assert [prompt for prompt, _ in matched] == [prompt for prompt, _ in kept]
    assert matched == [everything[i] for i in (4, 1, 3)]
    other = TASK.dataset(1, seed=2, split="train")[0]["prompt"]
    with pytest.raises(ValueError, match="no row"):
        pl.solver_demonstrations(TASK, rows, matching=[(other, "")])


def test_solver_agreement():
    rows = TASK.dataset(4, seed=1, split="train")
    exact = pl.cold_start_data(TASK, 4, seed=1)
    assert pl.solver_agreement(exact, rows, TASK) == 1.0
    prompt, completion = exact[0]
    altered = [(prompt, completion.replace("</think>", "\n</think>"))] + exact[1:]
    assert pl.solver_agreement(altered, rows, TASK) == pytest.approx(len(exact[1:]) / len(exact))
    assert pl.solver_disagreements(altered, rows, TASK) == [(altered[0][1], completion)]
    assert pl.solver_disagreements(exact, rows, TASK) == []
    with pytest.raises(ValueError):
        pl.solver_agreement([], rows, TASK)


def test_solver_disagreement_kinds():
    rows = TASK.dataset(4, seed=1, split="train")
    exact = pl.cold_start_data(TASK, 4, seed=1)
    assert pl.solver_disagreement_kinds(exact, rows, TASK) == {"layout": 0, "false step": 0, "other working": 0}
    (p0, c0), (p1, c1), (p2, c2) = exact[:3]
    first = c1.split("<think>")[1].split("\n")[0]  # e.g. "2+7=9"
    lhs, rhs = first.split("=")
    false = c1.replace(first, f"{lhs}={int(rhs) + 1}", 1)  # a false step, the final answer untouched
    lines = c2.split("</think>")[0].split("<think>")[1].split("\n")
    other = c2.replace("\n".join(lines), "\n".join(lines[:-1]), 1)  # a true line dropped
    altered = [(p0, c0.replace("</think>", "\n</think>")), (p1, false), (p2, other)] + exact[3:]
    assert pl.solver_disagreement_kinds(altered, rows, TASK) == {"layout": 1, "false step": 1, "other working": 1}
    assert sum(pl.solver_disagreement_kinds(altered, rows, TASK).values()) == len(pl.solver_disagreements(altered, rows, TASK))



def test_checker_names_lax_without_format(capsys):
    lax_only = lambda s, a: next((x for x in s if arithmetic_reward(x, a, strict=False) == 1.0), None)  # noqa: E731
    assert check_keep_first(lax_only) is False
    out = capsys.readouterr().out
    assert "lax verifier" in out and "no format filter" in out


def test_gold_gain_split_checker(capsys):
    from rlbook.exercises.pipeline import SPLIT_CASES, _split_mistakes, check_gold_gain_split, reference_split

    assert check_gold_gain_split(reference_split) is True

    def written(p0, q0, p1, q1):  # a right answer written from the formula
        q0, q1 = (q1 if p0 == 0 else q0), (q0 if p1 == 0 else q1)
        return (p1 - p0) * ((q0 + q1) / 2 + 3), (p0 + p1) / 2 * (q1 - q0)

    assert check_gold_gain_split(written) is True
    # the parts add up to the change of G = U + p (q − U), where both rows have reviews
    for p0, q0, p1, q1 in SPLIT_CASES:
        if p0 > 0 and p1 > 0:
            parsing, content = reference_split(p0, q0, p1, q1)
            assert parsing + content == pytest.approx((p1 * (q1 + 3)) - (p0 * (q0 + 3)))
    capsys.readouterr()
    for name, phrase in (("swapped", "swapped"), ("earlier_weights", "earlier q"), ("later_weights", "later q"),
                         ("no_interaction", "interaction"), ("from_zero", "from 0"), ("later_row", "counted twice")):
        assert check_gold_gain_split(lambda *c, name=name: _split_mistakes(*c)[name][0]) is False
        assert phrase in capsys.readouterr().out
    # the mirror of the lesson's demo slip: both parts at the later row
    assert check_gold_gain_split(lambda p0, q0, p1, q1: ((p1 - p0) * (q1 + 3), p1 * (q1 - q0))) is False
    assert "later row" in capsys.readouterr().out
    assert check_gold_gain_split(lambda p0, q0, p1, q1: ((p1 - p0) * ((q0 + q1) / 2 + 3), (p0 + p1) / 2 * (q1 - q0))) is False
    assert "NaN when no review parsed" in capsys.readouterr().out

    def before_only(p0, q0, p1, q1):  # handles p0 = 0 but not p1 = 0 (every reply stopped parsing): NaN there
        q0 = q1 if p0 == 0 else q0
        return (p1 - p0) * ((q0 + q1) / 2 + 3), (p0 + p1) / 2 * (q1 - q0)

    assert any(case[2] == 0 and case[0] > 0 for case in SPLIT_CASES)  # the p1 = 0 edge is among the cases
    assert check_gold_gain_split(before_only) is False
    assert "p1 = 0" in capsys.readouterr().out
    assert check_gold_gain_split(lambda *c: 1.0) is False
    assert "two numbers" in capsys.readouterr().out

    def stub(*c):
        raise NotImplementedError

    assert check_gold_gain_split(stub) is None


def test_t_multiplier():
    assert pl.t_multiplier(5) == pytest.approx(2.776, abs=1e-3)  # t_{0.975, 4}
    assert pl.t_multiplier(1000) == pytest.approx(1.962, abs=1e-2)
    with pytest.raises(ValueError):
        pl.t_multiplier(1)


def test_sample_replies(tiny):
    model, tokenizer = tiny
    rows = TASK.dataset(2, seed=0, split="test")
    replies = pl.sample_replies(model, tokenizer, TASK, rows, review_prompts=[[{"role": "user", "content": "Review Dune."}]],
                                n_samples=2, max_new_tokens=8, review_max_new_tokens=8)
    assert [r["kind"] for r in replies] == ["sum"] * 4 + ["review"] * 2
    assert {"right", "r1 format"} <= set(replies[0]) and {"parses", "gold"} <= set(replies[-1])
    assert replies[-1]["request"] == "Review Dune."
    assert all(r["gold"] == -3.0 for r in replies[4:] if not r["parses"])
    text = pl.show_replies(replies)
    assert text.count("\n") == 5 and "Review Dune." in text
    with pytest.raises(ValueError):
        pl.sample_replies(model, tokenizer, None, rows)


def test_plot_rs_yield_hardest():
    keepable = torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1]])
    axes = pl_viz.plot_rs_yield(keepable, 1, hardest=2)
    assert "2 hardest of 4" in axes[1].get_xlabel()
    with pytest.raises(ValueError):
        pl_viz.plot_rs_yield(keepable, 1, hardest=0)
    plt.close("all")


def test_gold_gain_split_checker_names_a_slip_that_also_gives_nan(capsys):
    from rlbook.exercises.pipeline import check_gold_gain_split

    assert check_gold_gain_split(lambda p0, q0, p1, q1: ((p1 - p0) * (q0 + 3), p0 * (q1 - q0))) is False
    out = capsys.readouterr().out
    assert "interaction" in out and "NaN" in out


def test_sample_replies_with_reward_model_and_review_readout(tiny):
    model, tokenizer = tiny
    prompts = [[{"role": "user", "content": "Review Dune."}], [{"role": "user", "content": "Review Ran."}]]
    replies = pl.sample_replies(model, tokenizer, review_prompts=prompts, n_samples=3, review_max_new_tokens=8,
                                reward_model=FakeRewardModel())
    assert all(r["rm score"] == float(len(r["reply"])) for r in replies)
    # hand-made rows: two reviews (1 and 2 clauses) and two replies that are none, on one request
    rows = [{"kind": "review", "request": "Review Dune.", "reply": text, "parses": parse_review(text) is not None,
             "gold": g, "rm score": s}
            for text, g, s in (("the plot was clever.", 1.0, 0.0), ("the plot was clever, the music was awful.", 0.0, 2.0),
                               ("plot clever", -3.0, 1.0), ("plot clever", -3.0, 3.0))]
    out = pl.review_readout(rows)
    assert out["parsed"] == 0.5 and out["gold of parsed"] == 0.5 and out["gold"] == -1.25
    assert out["clauses"] == {1: 0.5, 2: 0.5} and out["mean clauses"] == 1.5
    assert out["distinct"] == 0.75  # three distinct replies of four
    assert out["rm of parsed"] == 1.0 and out["rm of unparsed"] == 2.0
    assert out["unparsed over parsed"] == 0.75  # 1 beats 0, not 2; 3 beats both
    assert "rm score" not in pl.review_readout([{k: v for k, v in r.items() if k != "rm score"} for r in rows])
    assert "cut" not in out  # the hand-made rows carry no cut flag
    # a reply cut at the token cap: review_max_new_tokens=8 cuts every reply of the tiny model that has not ended
    assert all(isinstance(r["cut"], bool) for r in replies)
    cut = pl.review_readout([{**r, "cut": i == 2} for i, r in enumerate(rows)])
    assert cut["cut"] == 0.25 and cut["cut of unparsed"] == 0.5
    assert cut["rm of uncut unparsed"] == 3.0  # the unparsed reply that was not cut off (rm 3), not the cut one (rm 1)
    assert cut["garbled"] == 0.25 and cut["parsed"] + cut["cut"] + cut["garbled"] == 1.0  # the third reply: no review, not cut
    assert "rm of uncut unparsed" not in out
    assert out["gold SE"] != out["gold SE"]  # NaN: one request, one cluster
    two = pl.review_readout([{**r, "request": "Review Ran." if i % 2 else "Review Dune."} for i, r in enumerate(rows)])
    # requests Dune (gold 1, −3) and Ran (0, −3): the SE clustered by request (rlbook.evidence.clustered_se)
    from rlbook.evidence import clustered_se
    assert two["gold SE"] == pytest.approx(clustered_se([1.0, 0.0, -3.0, -3.0], ["D", "R", "D", "R"]))
    with pytest.raises(ValueError):
        pl.review_readout([])


def test_paired_change():
    before, after = [0.5, 0.25, 1.0, 0.0], [0.75, 0.5, 1.0, 0.25]
    out = pl.paired_change(before, after)
    assert out["change"] == pytest.approx(0.1875)
    assert out["se"] == pytest.approx(0.0625)  # differences 0.25, 0.25, 0, 0.25: sd 0.125, / √4
    assert out["t"] == pytest.approx(3.0) and out["mdd"] > 2 * out["se"]
    with pytest.raises(ValueError):
        pl.paired_change([0.5], [0.5])
    with pytest.raises(ValueError):
        pl.paired_change([0.5, 0.5], [0.5])


def test_stage_report_per_problem_and_prefilled_report(tiny):
    model, tokenizer = tiny
    rows = TASK.dataset(3, seed=0, split="test")
    report = pl.stage_report(model, tokenizer, TASK, rows, n_samples=2, k=2, per_problem=True)
    assert len(report["per-problem pass@1"]) == 3
    assert sum(report["per-problem pass@1"]) / 3 == pytest.approx(report["pass@1"])
    assert "per-problem pass@1" not in pl.stage_report(model, tokenizer, TASK, rows, n_samples=2, k=2)
    pre = pl.prefilled_report(model, tokenizer, TASK, rows, n_samples=2, max_new_tokens=8)
    assert set(pre) == {"pass@1", "pass@1 SE", "per-problem pass@1", "format"} and 0 <= pre["pass@1"] <= 1
    with pytest.raises(ValueError):
        pl.prefilled_report(model, tokenizer, TASK, rows, prefix="")


def _trajectory():
    def readout(parsed, cut, clauses, gold, rm):
        return {"replies": 8, "parsed": parsed, "cut": cut, "garbled": 1 - parsed - cut, "gold": gold, "rm score": rm,
                "mean clauses": sum(c * v for c, v in clauses.items()), "clauses": clauses}
    return pl.review_trajectory({0: readout(0.7, 0.2, {1: 0.3, 2: 0.7}, -1.5, -1.7),
                                 10: readout(0.6, 0.0, {1: 0.9, 2: 0.1}, -0.5, -0.3),
                                 5: readout(0.65, 0.1, {1: 0.6, 3: 0.4}, -1.0, -1.0)})


def test_review_trajectory():
    trajectory = _trajectory()
    assert list(trajectory.index) == [0, 5, 10]  # sorted by step
    assert trajectory.loc[10, "clauses"] == {1: 0.9, 2: 0.1} and trajectory.loc[5, "parsed"] == 0.65
    with pytest.raises(ValueError, match="at least one"):
        pl.review_trajectory({})
    with pytest.raises(ValueError, match="review_readout"):
        pl.review_trajectory({0: {"gold": 1.0}})
    with pytest.raises(ValueError, match="non-negative"):
        pl.review_trajectory({-1: {"parsed": 1.0, "clauses": {}}})


def test_stage4_widget_responds():
    from test_widgets_respond import _drive

    trajectory = _trajectory()
    axes = pl_viz.plot_stage4_step(trajectory, 5, kl=[0.0, 0.01, 0.03])
    assert len(axes[3].figure.axes) == 5  # four panels (gold and the reward model apart) and the KL's right axis
    assert not axes[1].collections  # no band without a gold SE
    with_se = trajectory.assign(**{"gold SE": [0.1, 0.2, 0.1]})
    axes = pl_viz.plot_stage4_step(with_se, 5, multiplier=2.78)
    band = axes[1].collections[0].get_paths()[0].vertices[:, 1]
    assert band.max() == pytest.approx(max(g + 2.78 * e for g, e in zip(with_se["gold"], with_se["gold SE"])))
    with pytest.raises(ValueError, match="multiplier"):
        pl_viz.plot_stage4_step(trajectory, 5, multiplier=0)
    assert [p.get_height() for p in axes[0].patches][3:] == [0.6, 0.0, 0.4]  # step 5's bars after step 0's
    assert "step 5" in axes[0].get_title()
    with pytest.raises(ValueError, match="step must be one of"):
        pl_viz.plot_stage4_step(trajectory, 7)
    with pytest.raises(ValueError, match="columns"):
        pl_viz.plot_stage4_step(trajectory.drop(columns="garbled"), 5)
    recorder = _drive(pl_viz.stage4_widget(trajectory, kl=[0.0, 0.01]))  # the step slider must change the figure
    assert len(recorder.fingerprints) == 2
    recorder = _drive(pl_viz.stage4_widget(trajectory, replies={0: "first", 5: "middle", 10: "last"}))
    assert len(recorder.fingerprints) == 2
    with pytest.raises(ValueError, match="one entry per step"):
        pl_viz.stage4_widget(trajectory, replies={0: "a"})
    with pytest.raises(ValueError, match="two steps"):
        pl_viz.stage4_widget(trajectory.loc[[0]])
    plt.close("all")


class PraiseRewardModel:
    """Scores a review +1 per positive adjective and −1 per negative one: it reads sentiment, not length."""

    def score(self, prompts, completions):
        from rlbook.tasks.reviews import NEGATIVE, POSITIVE
        return torch.tensor([float(sum(w.strip(".,") in POSITIVE for w in c.split())
                                   - sum(w.strip(".,") in NEGATIVE for w in c.split())) for c in completions])


def test_sentiment_probe_separates_a_model_that_reads_sentiment_from_one_that_reads_length():
    prompts = [[{"role": "user", "content": "Review Dune."}]]
    rows = pl.sentiment_probe(PraiseRewardModel(), prompts, per=8, seed=0)
    assert [r["sentiment"] for r in rows] == ["positive", "negative"]
    assert [r["gold"] for r in rows] == [1.0, -1.0]
    assert [r["rm score"] for r in rows] == [1.0, -1.0] and rows[0]["rm SE"] == 0.0
    by_length = pl.sentiment_probe(FakeRewardModel(), prompts, per=8, seed=0)
    assert all(r["rm score"] == pytest.approx(r["chars"]) for r in by_length)  # one clause each: similar lengths
    assert abs(by_length[0]["rm score"] - by_length[1]["rm score"]) < 3
    with pytest.raises(ValueError):
        pl.sentiment_probe(FakeRewardModel(), [], per=8)


def test_clause_mix_split_separates_a_shift_of_length_from_better_reviews():
    from rlbook.tasks.reviews import gold_reward
    one_good, one_bad = "the plot was fun.", "the plot was dull."
    two_bad = "the plot was dull, the cast was weak."
    # before: one clause half good half bad (gold 0), two clauses bad; after: only one clause, all good
    before = [one_good, one_bad, two_bad, two_bad]
    after = [one_good, one_good, "no review"]
    split = pl.clause_mix_split(before, after)
    g1, g2 = 0.0, gold_reward(two_bad)
    assert split["before"] == pytest.approx(0.5 * g1 + 0.5 * g2)
    assert split["reweighted"] == pytest.approx(g1)            # the later mix (all one clause) at the earlier gold
    assert split["length"] == pytest.approx(g1 - split["before"])
    assert split["content"] == pytest.approx(gold_reward(one_good) - g1)
    assert split["length"] + split["content"] == pytest.approx(split["after"] - split["before"])
    rows = [{"reply": t} for t in after]
    assert pl.clause_mix_split(before, rows) == split  # sample_replies' rows are read by their reply
    with pytest.raises(ValueError, match="clauses"):
        pl.clause_mix_split([one_good], [two_bad])          # no earlier gold at two clauses
    with pytest.raises(ValueError):
        pl.clause_mix_split(["no review"], [one_good])


def test_fresh_problems_are_disjoint_from_the_held_out_set():
    held = TASK.dataset(32, seed=7, split="test")
    fresh = pl.fresh_problems(TASK, 32, avoid=held, seed=8)
    assert len(fresh) == 32
    assert not set(fresh["question"]) & set(held["question"])
    assert list(fresh["question"]) == list(pl.fresh_problems(TASK, 32, avoid=held, seed=8)["question"])
