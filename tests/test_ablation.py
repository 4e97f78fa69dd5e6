"""Tests of rlbook.ablation: the same model, task, seeds and budget for every configuration."""

from __future__ import annotations


import pytest

from rlbook.ablation import run_ablation
from rlbook.tasks import get_task
from rlbook.trainers import preset

SMALL = dict(group_size=3, prompts_per_step=2, max_new_tokens=6, lr=1e-2)


@pytest.fixture(scope="module")
def task():
    return get_task("arithmetic", digits=1)


@pytest.fixture(scope="module")
def result(model_dir, task):
    configs = {"grpo": preset("grpo", **SMALL), "dapo": preset("dapo", **SMALL, max_resample_rounds=1)}
    return run_ablation(configs, model=model_dir, task=task, steps=2, seeds=(0, 1),
                        eval_dataset=task.dataset(3, seed=5, split="test"), eval_samples=2, progress=False)


def test_every_label_runs_once_per_seed(result):
    assert result.labels == ["grpo", "dapo"]
    assert all(len(runs) == 2 and all(len(h) == 2 for h in runs) for runs in result.histories.values())
    frame = result.frame
    assert len(frame) == 2 * 2 * 2
    assert set(frame["seed"]) == {0, 1}


def test_table_summarises_each_label(result):
    table = result.table(last=1)
    assert list(table.index) == ["grpo", "dapo"]
    for column in ("reward", "entropy", "seconds", "samples_per_step", "eval_pass@1"):
        assert column in table.columns
    # the table's reward is the mean over seeds of each run's last step
    last = [h[-1]["reward"] for h in result.histories["grpo"]]
    assert table.loc["grpo", "reward"] == pytest.approx(sum(last) / 2)
    assert table.loc["grpo", "samples_per_step"] == 6  # no dynamic sampling: the batch only


def test_same_seed_same_numbers(model_dir, task, result):
    again = run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, steps=2, seeds=(1,),
                         progress=False)
    assert again.histories["grpo"][0].column("reward") == result.histories["grpo"][1].column("reward")
    assert again.histories["grpo"][0].column("entropy") == result.histories["grpo"][1].column("entropy")


def test_plot_has_one_panel_per_metric(result):
    figure = result.plot(("reward", "entropy"), x="wall_time")
    assert len(figure.axes) == 2
    assert len(figure.axes[0].lines) == 2
    assert "mean of 2 seeds" in figure.axes[0].get_legend().get_title().get_text()


def test_default_task_comes_from_the_zoo_card():
    from rlbook.ablation import _task_for

    assert _task_for("arith-base").digits == 3


@pytest.mark.parametrize("kwargs, name", [
    (dict(configs={}), "configs"),
    (dict(configs={"x": "grpo"}), "configs"),
    (dict(steps=0), "steps"),
    (dict(seeds=()), "seeds"),
    (dict(seeds=(-1,)), "seeds"),
])
def test_bad_input_names_the_argument(model_dir, task, kwargs, name):
    arguments = dict(configs={"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, progress=False)
    arguments.update(kwargs)
    configs = arguments.pop("configs")
    with pytest.raises(ValueError, match=name):
        run_ablation(configs, **arguments)


def test_bad_plot_and_table_arguments(result):
    with pytest.raises(ValueError, match="metrics"):
        result.plot(("no_such_metric",))
    with pytest.raises(ValueError, match="x"):
        result.plot(("reward",), x="epoch")
    with pytest.raises(ValueError, match="last"):
        result.table(last=0)


@pytest.fixture(scope="module")
def evaluated(model_dir, task):
    return run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, steps=3, seeds=(0, 1),
                        eval_dataset=task.dataset(3, seed=5, split="test"), eval_samples=2, eval_every=2,
                        progress=False)


def test_eval_every_evaluates_during_training(evaluated):
    frame = evaluated.eval_frame
    assert sorted(frame["step"].unique()) == [0, 2, 3]  # step 0, every 2 steps, and the end
    assert len(frame) == 2 * 3 and set(frame["seed"]) == {0, 1}
    assert {"pass@1", "length_mean", "n_prompts"} <= set(frame.columns)
    # the end-of-run evaluation is the curve's last point, not a second draw
    last = [curve[-1]["pass@1"] for curve in evaluated.eval_curves["grpo"]]
    assert [e["pass@1"] for e in evaluated.evaluations["grpo"]] == last
    assert "eval_pass@1" in evaluated.table(last=1).columns
    figure = evaluated.plot_evaluations("pass@1")
    assert len(figure.axes[0].lines) == 1 and "held-out" in figure.axes[0].get_title()
    with pytest.raises(ValueError, match="metric"):
        evaluated.plot_evaluations("nope")


def test_held_out_table_gives_each_runs_pass1_with_a_clustered_se(result, evaluated):
    from rlbook.evidence import pass_at_k_with_se

    for run in (result, evaluated):  # with and without evaluations during training
        table = run.held_out_table()
        label = run.labels[0]
        assert list(table.index) == [(name, seed) for name in run.labels for seed in (0, 1)]
        for seed, evaluation, correct in zip((0, 1), run.evaluations[label], run.held_out_correct[label]):
            assert len(correct) == 3 and all(len(row) == 2 for row in correct)  # 3 prompts x 2 samples
            assert table.loc[(label, seed), "pass@1"] == pytest.approx(evaluation["pass@1"])
            assert table.loc[(label, seed), "se"] == pytest.approx(pass_at_k_with_se(correct, 1)[1])
        assert all("correct" not in evaluation for evaluation in run.evaluations[label])


def test_held_out_table_needs_an_evaluation(model_dir, task):
    plain = run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, steps=1, seeds=(0,),
                         progress=False)
    with pytest.raises(ValueError, match="eval_dataset"):
        plain.held_out_table()


def test_evaluating_does_not_change_training(model_dir, task, evaluated):
    plain = run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, steps=3, seeds=(1,),
                         progress=False)
    assert plain.histories["grpo"][0].column("reward") == evaluated.histories["grpo"][1].column("reward")
    assert plain.histories["grpo"][0].column("entropy") == evaluated.histories["grpo"][1].column("entropy")
    assert plain.eval_curves == {} and plain.eval_frame.empty
    with pytest.raises(ValueError, match="eval_every"):
        plain.plot_evaluations()


@pytest.mark.parametrize("kwargs, name", [
    (dict(eval_every=2), "eval_dataset"),
    (dict(eval_every=0, eval_dataset=[{"prompt": "x"}]), "eval_every"),
    (dict(eval_every=True, eval_dataset=[{"prompt": "x"}]), "eval_every"),
])
def test_bad_eval_every_names_the_argument(model_dir, task, kwargs, name):
    with pytest.raises(ValueError, match=name):
        run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, progress=False, **kwargs)


def test_knob_effects_compares_gaps_with_the_seed_noise():
    import pandas as pd

    from rlbook.ablation import knob_effects

    index = pd.MultiIndex.from_tuples([(label, seed) for label in ("a", "b", "c", "d") for seed in (0, 1)])
    # a and b have knob x (+1 on average); c and d do not; every label's two seeds differ by 0.2
    values = pd.Series([1.1, 0.9, 1.2, 1.0, 0.1, -0.1, 0.0, 0.2], index=index)
    effects = knob_effects(values, {"x": ["a", "b"], "y": ["a", "c"]})
    sd = (0.2 ** 2 / 2) ** 0.5  # each label's sample variance is 0.02
    assert effects.loc["x", "gap"] == pytest.approx(1.0) and effects.loc["x", "seed_sd"] == pytest.approx(sd)
    assert effects.loc["x", "se"] == pytest.approx(sd * (1 / 4 + 1 / 4) ** 0.5)
    assert effects.loc["y", "gap"] == pytest.approx(-0.1)
    assert effects.loc["x", "z"] == pytest.approx(1.0 / effects.loc["x", "se"])


@pytest.mark.parametrize("knobs, name", [({}, "knobs"), ({"x": ["z"]}, "knobs"), ({"x": ["a", "b"]}, "split")])
def test_knob_effects_bad_input(knobs, name):
    import pandas as pd

    from rlbook.ablation import knob_effects

    values = pd.Series([1.0, 2.0, 3.0, 4.0], index=pd.MultiIndex.from_tuples([("a", 0), ("a", 1), ("b", 0), ("b", 1)]))
    with pytest.raises(ValueError, match=name):
        knob_effects(values, knobs)
    with pytest.raises(ValueError, match="values"):
        knob_effects([1.0], {"x": ["a"]})
    single = pd.Series([1.0, 2.0], index=pd.MultiIndex.from_tuples([("a", 0), ("b", 0)]))
    with pytest.raises(ValueError, match="two or more seeds"):
        knob_effects(single, {"x": ["a"]})


def test_per_run_is_each_runs_tail_mean(result):
    runs = result.per_run("reward", last=1)
    assert runs[("grpo", 1)] == result.histories["grpo"][1][-1]["reward"]
    with pytest.raises(ValueError, match="metric"):
        result.per_run("nope")
    with pytest.raises(ValueError, match="last"):
        result.per_run("reward", last=0)


def test_config_kwargs_reach_only_their_configuration(model_dir, task):
    from rlbook.aggregation import token_weights

    calls = []

    def recording_weights(mask, mode, max_len):
        calls.append(mask.shape[0])
        return token_weights(mask, mode, max_len=max_len)

    configs = {"hooked": preset("dr_grpo", **SMALL), "plain": preset("dr_grpo", **SMALL)}
    both = run_ablation(configs, model=model_dir, task=task, steps=1, seeds=(0,), progress=False, workers=1,
                        config_kwargs={"hooked": {"token_weights_fn": recording_weights}})
    with_plain = list(calls)
    calls.clear()
    run_ablation({"hooked": configs["hooked"]}, model=model_dir, task=task, steps=1, seeds=(0,), progress=False,
                 workers=1, config_kwargs={"hooked": {"token_weights_fn": recording_weights}})
    assert with_plain and with_plain == calls  # the plain run added no call
    # the hook returns the library's own weights, so the hooked run took the plain run's step
    assert both.histories["hooked"][0].column("reward") == both.histories["plain"][0].column("reward")


@pytest.mark.parametrize("config_kwargs", [{"missing": {}}, {"grpo": "not a dict"}, ["grpo"]])
def test_bad_config_kwargs_names_the_argument(model_dir, task, config_kwargs):
    with pytest.raises(ValueError, match="config_kwargs"):
        run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, progress=False,
                     config_kwargs=config_kwargs)


def test_paired_differences_pairs_runs_by_seed():
    import numpy as np

    from rlbook.ablation import AblationResult
    from rlbook.evidence import compare_seeds

    def table(n_right):  # 4 prompts x 2 samples, n_right completions correct, filled prompt by prompt
        flat = [1] * n_right + [0] * (8 - n_right)
        return [flat[i:i + 2] for i in range(0, 8, 2)]

    hand = AblationResult(seeds=(0, 1, 2), held_out_correct={
        "base": [table(4), table(5), table(6)], "new": [table(6), table(6), table(7)]})
    frame = hand.paired_differences("base")
    assert list(frame.index) == ["new − base"]
    row = frame.loc["new − base"]
    differences = np.array([2, 1, 1]) / 8
    assert [row[f"seed {s}"] for s in (0, 1, 2)] == pytest.approx(differences)
    assert row["mean"] == pytest.approx(differences.mean())
    assert row["sd over seeds"] == pytest.approx(differences.std(ddof=1))
    half = 4.302653 * differences.std(ddof=1) / np.sqrt(3)  # t_{0.975, 2}
    assert (row["CI low"], row["CI high"]) == pytest.approx((differences.mean() - half, differences.mean() + half),
                                                            rel=1e-4)
    comparison = compare_seeds([6 / 8, 6 / 8, 7 / 8], [4 / 8, 5 / 8, 6 / 8])
    assert bool(row["separated"]) is comparison.separated is False  # 6/8 is not above 6/8
    # paired and t-based, like the interval: (t_{0.975, 2} + t_{0.8, 2}) · sd(differences) / √3, not the
    # unpaired normal-quantile 2.80 · pooled sd · √(2/3)
    assert row["detectable"] == pytest.approx((4.302653 + 1.060660) * differences.std(ddof=1) / np.sqrt(3), rel=1e-4)
    assert 0 < row["eval SE"] < 1
    swapped = hand.paired_differences("base", pairs=[("base", "new")])
    assert swapped.loc["base − new", "mean"] == pytest.approx(-differences.mean())
    with pytest.raises(ValueError, match="baseline"):
        hand.paired_differences("nope")
    with pytest.raises(ValueError, match="pairs"):
        hand.paired_differences("base", pairs=[("new", "nope")])
    with pytest.raises(ValueError, match="2 seeds"):
        AblationResult(seeds=(0,), held_out_correct={"base": [table(4)]}).paired_differences("base")


def test_after_keeps_what_each_trained_run_returns(model_dir, task):
    seen = run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, steps=1, seeds=(0, 1),
                        progress=False, after=lambda trainer: (trainer.config.seed, trainer.step))
    assert seen.after == {"grpo": [(0, 1), (1, 1)]}
    assert run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, steps=1, seeds=(0,),
                        progress=False).after == {}
    with pytest.raises(ValueError, match="after"):
        run_ablation({"grpo": preset("grpo", **SMALL)}, model=model_dir, task=task, progress=False, after="no")


def test_held_out_samples_gives_paired_tables_and_scratchpad_use(model_dir):
    from rlbook.ablation import held_out_samples
    from rlbook.models import load_model

    task = get_task("arithmetic", digits=1)
    policy, tokenizer = load_model(model_dir)
    rows = task.dataset(3, seed=5, split="test")
    first = held_out_samples(policy, tokenizer, rows, task.reward, n_samples=2, max_new_tokens=6, seed=1)
    again = held_out_samples(policy, tokenizer, rows, task.reward, n_samples=2, max_new_tokens=6, seed=1)
    assert all(first[k] == again[k] for k in ("correct", "length", "scratchpad"))  # same seed, same draws
    for key in ("correct", "length", "scratchpad"):
        assert len(first[key]) == 3 and all(len(row) == 2 for row in first[key])
    assert first["pass@1"] == pytest.approx(sum(map(sum, first["correct"])) / 6)
    assert first["scratchpad_rate"] == pytest.approx(sum(map(sum, first["scratchpad"])) / 6)
    assert first["length_mean"] == pytest.approx(sum(map(sum, first["length"])) / 6)


def test_run_async_arms_runs_each_arm_per_seed_and_evaluates_the_current_policy(model_dir, task):
    from rlbook.ablation import run_async_arms, train_async_run
    from rlbook.trainers import AsyncConfig

    config = preset("grpo", **SMALL)
    arms = {"naive": (AsyncConfig(staleness=1, objective="naive"), {}),
            "decoupled, small lr": (AsyncConfig(staleness=1), {"lr": 1e-3})}
    held_out = task.dataset(2, seed=5, split="test")
    result = run_async_arms(arms, config, model=model_dir, task=task, seeds=(0, 1), steps=3, eval_dataset=held_out,
                            evaluate_at=(2, 3), eval_samples=2, progress=False)
    assert list(result) == ["naive", "decoupled, small lr"]
    assert [run.seed for run in result["naive"]] == [0, 1]
    run = result["naive"][0]
    assert len(run.history) == 3 and run.history.column("staleness_max") == [0, 1, 1]
    assert [e["step"] for e in run.evaluations] == [2, 3]  # the last step is evaluated once
    assert result["decoupled, small lr"][0].history.config["lr"] == 1e-3
    alone = train_async_run(config, AsyncConfig(staleness=1, objective="naive"), model=model_dir, task=task,
                            label="naive", seed=0, steps=3, eval_dataset=held_out, evaluate_at=(2, 3),
                            eval_samples=2, progress=False)
    assert alone.history.column("loss") == run.history.column("loss")  # same seed, same numbers in a worker
    assert alone.evaluations[-1]["correct"] == run.evaluations[-1]["correct"]
    with pytest.raises(ValueError, match="arms"):
        run_async_arms({"x": AsyncConfig()}, config, model=model_dir, task=task)
    with pytest.raises(ValueError, match="evaluate_at"):
        train_async_run(config, AsyncConfig(), model=model_dir, task=task, steps=3, evaluate_at=(2,))
