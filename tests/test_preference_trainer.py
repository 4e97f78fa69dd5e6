"""The preference loop: DPO starts at ln 2, every loss trains, references stay frozen, seeds repeat."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.trainers.preference import PREFERENCE_LOSSES, PreferenceTrainer


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def pairs():
    films = ["Dune", "Heat", "Jaws", "Up"]
    return Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"Review {film}."}] for film in films],
        "chosen": ["the plot was great.", "the cast was fun.", "the music was superb.", "the ending was moving."],
        "rejected": ["the plot was dull.", "the cast was weak.", "the music was bland.", "the ending was slow."],
    })


def _trainer(tokenizer, pairs, **kwargs):
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    settings = dict(steps=3, batch_size=4, lr=1e-2, progress=False)
    return PreferenceTrainer(model, tokenizer, pairs, **{**settings, **kwargs})


def _parameters(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_dpo_loss_starts_at_ln2_and_accuracy_is_logged(tokenizer, pairs):
    history = _trainer(tokenizer, pairs, loss="dpo", eval_pairs=pairs, eval_every=1).train()
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert history[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    for key in ("rewards/accuracies", "rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected",
                "eval/rewards/accuracies"):
        assert key in history[-1]
    frame = history.to_pandas()
    assert len(frame) == 3 and frame["loss"].notna().all()


@pytest.mark.parametrize("loss", PREFERENCE_LOSSES)
def test_each_loss_changes_the_policy_and_never_the_reference(tokenizer, pairs, loss):
    trainer = _trainer(tokenizer, pairs, loss=loss)
    before = _parameters(trainer.model)
    reference_before = _parameters(trainer.reference) if trainer.reference is not None else None
    history = trainer.train()
    assert all(math.isfinite(row["loss"]) for row in history)
    after = _parameters(trainer.model)
    assert any(not torch.equal(before[name], after[name]) for name in before)
    if loss in ("simpo", "cpo", "orpo"):
        assert trainer.reference is None
    else:
        assert trainer.reference is not trainer.model
        for name, value in _parameters(trainer.reference).items():
            assert torch.equal(value, reference_before[name])


def test_kto_runs_unpaired_with_a_reference_point(tokenizer, pairs):
    history = _trainer(tokenizer, pairs, loss="kto").train()
    assert history[0]["loss"] == pytest.approx(0.5, abs=1e-6)  # 1 - σ(0) for every example when π = π_ref
    assert all(row["kl"] >= 0 for row in history)


def test_same_seed_same_history(tokenizer, pairs):
    first = _trainer(tokenizer, pairs, loss="dpo", batch_size=2, seed=3).train()
    second = _trainer(tokenizer, pairs, loss="dpo", batch_size=2, seed=3).train()
    assert first.rows == second.rows


def test_lora_trains_only_adapters_and_uses_the_base_as_reference(tokenizer, pairs):
    trainer = _trainer(tokenizer, pairs, loss="dpo", lora={"r": 2})
    assert trainer.reference is None  # the reference is the base model: the adapters switched off
    before = _parameters(trainer.model)
    history = trainer.train()
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    changed = {name for name, value in _parameters(trainer.model).items() if not torch.equal(value, before[name])}
    assert changed and all("lora_" in name for name in changed)


def test_lora_false_means_no_adapters_and_a_frozen_copy_as_reference(tokenizer, pairs):
    trainer = _trainer(tokenizer, pairs, loss="dpo", lora=False)
    assert trainer.reference is not None and trainer.reference is not trainer.model
    reference_before = _parameters(trainer.reference)
    history = trainer.train()
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert all(torch.equal(value, reference_before[name]) for name, value in _parameters(trainer.reference).items())


def test_epochs_set_the_number_of_steps(tokenizer, pairs):
    trainer = _trainer(tokenizer, pairs, steps=None, epochs=2, batch_size=3)
    assert trainer.steps == 4  # ceil(4 / 3) batches per epoch


@pytest.mark.parametrize("kwargs, name", [
    (dict(loss="rlhf"), "loss"),
    (dict(beta=0.0), "beta"),
    (dict(beta=-1.0), "beta"),
    (dict(tau=0.0), "tau"),
    (dict(lr=0.0), "lr"),
    (dict(steps=0), "steps"),
    (dict(lora="yes"), "lora"),
    (dict(loss="kto", batch_size=1), "batch_size"),
    (dict(lr_schedule="step"), "lr_schedule"),
    (dict(group_by_length="yes"), "group_by_length"),
    (dict(precompute_reference="auto"), "precompute_reference"),
])
def test_bad_arguments_name_themselves(tokenizer, pairs, kwargs, name):
    with pytest.raises(ValueError, match=name):
        _trainer(tokenizer, pairs, **kwargs)


@pytest.mark.parametrize("loss", ["dpo", "ipo"])
def test_precomputed_reference_gives_the_same_run(tokenizer, pairs, loss):
    """Scoring the pairs with π_ref once, before training, changes the cost, not the numbers."""
    settings = dict(loss=loss, steps=4, batch_size=2, group_by_length=True)
    once = _trainer(tokenizer, pairs, precompute_reference=True, **settings)
    every_step = _trainer(tokenizer, pairs, precompute_reference=False, **settings)
    assert once.precompute_reference and not every_step.precompute_reference
    once.train(), every_step.train()
    for a, b in zip(once.history.rows, every_step.history.rows, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


def test_reference_is_precomputed_only_when_asked_and_there_is_one(tokenizer, pairs):
    assert _trainer(tokenizer, pairs).precompute_reference is False
    assert _trainer(tokenizer, pairs, precompute_reference=True).precompute_reference is True
    assert _trainer(tokenizer, pairs, loss="simpo", precompute_reference=True).precompute_reference is False


@pytest.mark.parametrize("schedule, warmup_steps, expected", [
    ("constant", 2, [0.0, 0.5, 1.0, 1.0]),
    ("linear", 0, [1.0, 0.75, 0.5, 0.25]),
    ("cosine", 0, [0.5 * (1 + math.cos(math.pi * s / 4)) for s in range(4)]),
])
def test_the_learning_rate_follows_the_schedule(tokenizer, pairs, schedule, warmup_steps, expected):
    trainer = _trainer(tokenizer, pairs, steps=4, lr=1e-3, lr_schedule=schedule, warmup_steps=warmup_steps)
    rates, train_step = [], trainer._train_step

    def recording_step(*args):
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        return train_step(*args)

    trainer._train_step = recording_step
    trainer.train()
    assert rates == pytest.approx([1e-3 * m for m in expected])


def test_a_decaying_schedule_resumes_only_with_the_same_budget(tokenizer, pairs, tmp_path):
    _trainer(tokenizer, pairs, steps=2, lr_schedule="linear").train(checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="steps"):
        _trainer(tokenizer, pairs, steps=4, lr_schedule="linear").train(resume_from=tmp_path)


def test_empty_or_malformed_pairs_are_refused(tokenizer, pairs):
    with pytest.raises(ValueError, match="pairs is empty"):
        _trainer(tokenizer, pairs.select([]))
    with pytest.raises(ValueError, match="rejected"):
        _trainer(tokenizer, pairs.remove_columns("rejected"))
    with pytest.raises(ValueError, match="eval_pairs"):
        _trainer(tokenizer, pairs, eval_pairs=pairs.remove_columns("chosen"))


def test_evaluate_on_given_pairs_before_training(tokenizer, pairs):
    trainer = _trainer(tokenizer, pairs, loss="dpo")
    result = trainer.evaluate(pairs)
    assert (result["rewards/accuracies"], result["rewards/margins"]) == (0.0, 0.0)  # π = π_ref: all ties
    with pytest.raises(ValueError, match="pairs must be given"):
        trainer.evaluate()


def test_cli_preference_writes_history_summary_and_model(tokenizer, pairs, tmp_path):
    from rlbook.cli import main

    build_tiny_model(tokenizer, shape="test").save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    pairs.to_json(tmp_path / "pairs.jsonl")
    out = tmp_path / "run"
    code = main(["preference", "dpo", "--model", str(tmp_path / "tiny"), "--pairs", str(tmp_path / "pairs.jsonl"),
                 "--eval-pairs", str(tmp_path / "pairs.jsonl"), "--out", str(out), "--steps", "2",
                 "--set", "batch_size=2", "--set", "progress=false"])
    assert code == 0
    assert {"history.csv", "history.json", "summary.json", "model", "pairs.jsonl"} <= {p.name for p in out.iterdir()}


def test_cli_preference_relabels_pairs_with_another_repeat_penalty(tokenizer, pairs, tmp_path):
    from rlbook.cli import main

    build_tiny_model(tokenizer, shape="test").save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    repeat = "the plot was great, the cast was great."  # gold 0.5; 2.0 without the repeat rule
    relabelled = Dataset.from_dict({"prompt": pairs["prompt"], "chosen": list(pairs["chosen"][:3]) + ["the plot was fun."],
                                    "rejected": list(pairs["rejected"][:3]) + [repeat]})
    relabelled.to_json(tmp_path / "pairs.jsonl")
    common = ["preference", "dpo", "--model", str(tmp_path / "tiny"), "--pairs", str(tmp_path / "pairs.jsonl"),
              "--eval-pairs", str(tmp_path / "pairs.jsonl"), "--steps", "1", "--set", "batch_size=2",
              "--set", "progress=false", "--repeat-penalty", "0"]
    with pytest.raises(SystemExit):  # noisy labels are drawn, not ordered: the option needs --labels gold
        main(common + ["--out", str(tmp_path / "noisy")])
    assert main(common + ["--labels", "gold", "--out", str(tmp_path / "run")]) == 0
    saved = Dataset.from_json(str(tmp_path / "run" / "pairs.jsonl"))
    assert saved["chosen"][3] == repeat and saved["rejected"][3] == "the plot was fun."
    assert saved["chosen"][:3] == pairs["chosen"][:3]


@pytest.mark.parametrize("loss", ["dpo", "ipo"])
def test_own_loss_fn_equal_to_the_library_gives_the_same_run(tokenizer, pairs, loss):
    from rlbook import losses

    library = losses.dpo_loss if loss == "dpo" else losses.ipo_loss
    own = _trainer(tokenizer, pairs, loss=loss, tau=0.5, loss_fn=lambda *a: library(*a)).train().to_pandas()
    built_in = _trainer(tokenizer, pairs, loss=loss, tau=0.5).train().to_pandas()
    assert own["loss"].tolist() == pytest.approx(built_in["loss"].tolist(), abs=1e-6)


def test_a_wrong_loss_fn_changes_the_run(tokenizer, pairs):
    flipped = _trainer(tokenizer, pairs, loss="dpo", loss_fn=lambda c, r, rc, rr, beta:
                       torch.nn.functional.logsigmoid(beta * ((c - rc) - (r - rr)))).train()
    assert flipped[0]["loss"] == pytest.approx(-math.log(2), abs=1e-6)
    assert flipped[-1]["rewards/margins"] < 0  # it trains the rejected completions up


@pytest.mark.parametrize("kwargs, words", [
    (dict(loss="dpo", loss_fn=3), "loss_fn must be None or a function"),
    (dict(loss="kto", loss_fn=lambda *a: a[0]), "loss must be 'dpo' or 'ipo'"),
])
def test_bad_loss_fn_names_itself(tokenizer, pairs, kwargs, words):
    with pytest.raises(ValueError, match=words):
        _trainer(tokenizer, pairs, **kwargs)


@pytest.mark.parametrize("loss_fn, words", [
    (lambda c, r, rc, rr, beta: ((c - r) * beta).mean(), "shape"),
    (lambda c, r, rc, rr, beta: (c - r).detach(), "no gradient"),
])
def test_loss_fn_with_the_wrong_output_is_named_at_the_first_step(tokenizer, pairs, loss_fn, words):
    with pytest.raises(ValueError, match=f"loss_fn.*{words}"):
        _trainer(tokenizer, pairs, loss="dpo", loss_fn=loss_fn).train()
