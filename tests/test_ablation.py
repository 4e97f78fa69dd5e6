"""Tests of rlbook.ablation: the same model, task, seeds and budget for every configuration."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from rlbook.ablation import run_ablation  # noqa: E402
from rlbook.models import build_char_tokenizer, build_tiny_model  # noqa: E402
from rlbook.tasks import get_task  # noqa: E402
from rlbook.trainers import preset  # noqa: E402

SMALL = dict(group_size=3, prompts_per_step=2, max_new_tokens=6, lr=1e-2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = build_char_tokenizer()
    build_tiny_model(tokenizer, shape="test").save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


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
