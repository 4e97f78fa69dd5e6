"""The command line as a user meets it: a mistake is refused in one line, with exit status 2, before
any model is loaded; a run writes the same files for every command, and its trained model loads
with ``load_model``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from rlbook.cli import main
from rlbook.models import add_lora, build_char_tokenizer, build_tiny_model, load_model
from rlbook.rollout import sample
from rlbook.tasks import get_task
from rlbook.trainers import History, OnlineTrainer, RewardModel, load_checkpoint, preset
from rlbook.trainers.checkpoint import restore_model

RUN_FILES = {"history.csv", "history.json", "config.json", "summary.json", "model"}
TINY_GRPO = ["--set", "group_size=2", "--set", "prompts_per_step=2", "--set", "max_new_tokens=8"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture
def no_model_work(monkeypatch):
    """Loading any model fails the test: a refused command must stop before that."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    for model_class in (AutoModelForCausalLM, AutoModelForSequenceClassification):
        monkeypatch.setattr(model_class, "from_pretrained", refuse)


# --- mistakes -------------------------------------------------------------------------------
MISTAKES = [  # (arguments before --out, the argument blamed, a word the message names)
    ("train grpo --steps 2 --set lr=-1", "--set", "lr must be"),
    ("train grpo --steps 2 --set lr", "--set", "KEY=VALUE"),
    ("train grpo --steps 2 --set no_such_field=1", "--set", "no_such_field"),
    ("train grpo --steps -1", "--steps", "positive int"),
    ("train grpo --steps 2 --task-set digits=0", "--task-set", "digits"),
    ("train grpo --steps 2 --task-set size=3", "--task-set", "size"),
    ("train grpo --steps 2 --model no-such-model", "--model", "no-such-model"),
    ("train grpo --steps 2 --resume", "--resume", "checkpoint"),
    ("preference dpo --resume", "--resume", "checkpoint"),
    ("reward-model --resume", "--resume", "checkpoint"),
    ("sft --task arithmetic --steps 2 --resume", "--resume", "checkpoint"),
    ("sft --task arithmetic --steps 2 --checkpoint-every 0", "--checkpoint-every", "positive int"),
    ("preference dpo --set beta=-1", "--set", "beta must be"),
    ("preference dpo --set beta", "--set", "KEY=VALUE"),
    ("preference dpo --set no_such_setting=1", "--set", "no_such_setting"),
    ("preference dpo --steps -1", "--steps", "positive int"),
    ("preference dpo --set steps=3", "--set", "--steps"),
    ("preference kto --set batch_size=1", "--set", "batch_size"),
    ("preference dpo --set lora=7", "--set", "lora"),
    ("preference dpo --pairs no-such-file.jsonl", "--pairs", "no-such-file"),
    ("preference dpo --repeat-penalty 0", "--repeat-penalty", "--labels gold"),
    ("reward-model --set lr=0", "--set", "lr must be"),
    ("reward-model --set lr", "--set", "KEY=VALUE"),
    ("reward-model --set no_such_setting=1", "--set", "no_such_setting"),
    ("reward-model --steps -1", "--steps", "positive int"),
    ("sft --task arithmetic --steps 2 --set warmup=-1", "--set", "warmup must be"),
    ("sft --task arithmetic --steps 2 --set =1", "--set", "KEY=VALUE"),
    ("sft --task arithmetic --steps 2 --set no_such_setting=1", "--set", "no_such_setting"),
    ("sft --task arithmetic --steps -1", "--steps", "positive int"),
    ("sft --data no-such-file.jsonl --model arith-base --steps 2", "--data", "no-such-file"),
    ("train grpo --steps 2 --device nowhere", "--device", "nowhere"),
    ("train grpo --steps 2 --device cuda:99", "--device", "cuda"),  # no CUDA here; on a GPU, no 100th device
    ("preference dpo --device mps:7", "--device", "mps"),
    ("reward-model --dtype float64", "--dtype", "float64"),
    ("sft --task arithmetic --steps 2 --dtype int8", "--dtype", "int8"),
    ("zoo eval arith-tiny --model no-such-model", "--model", "no-such-model"),
    ("zoo eval arith-tiny --device cuda:99", "--device", "cuda"),
    ("zoo eval arith-tiny --dtype int8", "--dtype", "int8"),
]


@pytest.mark.parametrize("arguments, blamed, named", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_one_line_on_stderr_and_status_2_before_any_work(arguments, blamed, named, tmp_path, capsys,
                                                                      no_model_work):
    command = arguments.split()[0]
    out = [] if command == "zoo" else ["--out", str(tmp_path / "run")]  # zoo eval writes nothing
    with pytest.raises(SystemExit) as exited:  # no_model_work: before any model is loaded
        main([*arguments.split(), *out])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith(f"rlbook {command}: error: argument {blamed}: "), captured.err
    assert named in captured.err
    assert not (tmp_path / "run").exists()


def test_resuming_with_another_config_is_refused_before_loading(tokenizer, tmp_path, capsys):
    overrides = dict(group_size=2, prompts_per_step=2, max_new_tokens=8)
    dataset = get_task("arithmetic", digits=1).dataset(4, seed=0)
    trainer = OnlineTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, get_task("arithmetic"),
                            preset("grpo", **overrides), train_dataset=dataset)
    trainer.save(tmp_path / "run" / "checkpoint")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("a model was loaded"))
        with pytest.raises(SystemExit) as exited:
            main(["train", "grpo", "--steps", "1", "--out", str(tmp_path / "run"), "--resume", *TINY_GRPO,
                  "--set", "lr=0.5"])
    assert exited.value.code == 2
    assert "argument --resume: config differs from the checkpoint's in ['lr']" in capsys.readouterr().err


# --- what a run writes ------------------------------------------------------------------------
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_train_saves_a_model_that_load_model_reads(tmp_path, capsys, lora):
    out = tmp_path / "run"
    code = main(["train", "grpo", "--task", "arithmetic", "--steps", "2", "--out", str(out), *TINY_GRPO,
                 "--eval-prompts", "2", "--device", "cpu", "--dtype", "float32", *(["--set", "lora=4"] if lora else [])])
    assert code == 0 and RUN_FILES | {"checkpoint"} <= {p.name for p in out.iterdir()}
    assert json.loads(capsys.readouterr().out)["saved_model"] == str(out / "model")

    model, tokenizer = load_model(out / "model")
    trained = load_checkpoint(out / "checkpoint").models["policy"]  # the trainer's policy after the last step
    if lora:  # the saved model is the adapted policy with its adapters merged in
        assert not any("lora" in name for name in model.state_dict())
        policy, _ = load_model("arith-base")
        policy = add_lora(policy, r=4)
        restore_model(policy, trained, name="policy")
        ids = tokenizer(["What is 12+34?"], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            torch.testing.assert_close(model(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)
    else:
        assert model.state_dict().keys() == trained.keys()
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, trained[name]), name
    prompts = list(get_task("arithmetic").dataset(2, seed=0, split="test")["prompt"])
    assert len(sample(model, tokenizer, prompts, num_samples=2, max_new_tokens=8, seed=0).texts) == 4

    history = History.load(out)
    assert len(history) == 2 and history.config["group_size"] == 2 and history.config["lora"] == (4 if lora else None)
    assert history.rows == load_checkpoint(out / "checkpoint").meta["history"]


def test_sft_and_reward_model_runs_write_the_same_files(tokenizer, tmp_path):
    build_tiny_model(tokenizer, shape="test").save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    Dataset.from_dict({"prompt": ["Q: 1+1\nA: "] * 2, "completion": ["2"] * 2}).to_json(tmp_path / "sft.jsonl")
    Dataset.from_dict({"prompt": ["Review Dune.", "Review Heat."], "chosen": ["great plot.", "fun cast."],
                       "rejected": ["dull plot.", "weak cast."]}).to_json(tmp_path / "pairs.jsonl")
    common = ["--model", str(tmp_path / "tiny"), "--steps", "2", "--set", "progress=false", "--set", "lr=1e-3"]
    assert main(["sft", "--data", str(tmp_path / "sft.jsonl"), "--out", str(tmp_path / "sft"), *common]) == 0
    pairs = str(tmp_path / "pairs.jsonl")
    assert main(["reward-model", "--pairs", pairs, "--eval-pairs", pairs, "--out", str(tmp_path / "rm"), *common]) == 0
    for run in ("sft", "rm"):
        assert RUN_FILES <= {p.name for p in (tmp_path / run).iterdir()}
        history = History.load(tmp_path / run)
        assert len(history) == 2 and history.config["lr"] == 1e-3 and history.config["steps"] == 2
    load_model(tmp_path / "sft" / "model")
    reward_model = RewardModel.from_pretrained(tmp_path / "rm" / "model")
    assert torch.isfinite(reward_model.score(["Review Dune."], ["great plot."])).all()


def test_history_save_and_load_round_trip(tmp_path):
    history = History([{"step": 0, "reward": np.float32(0.5), "kl": math.nan}], config={"lr": 1e-3, "name": "grpo"})
    history.save(tmp_path)
    loaded = History.load(tmp_path)
    assert loaded.config == {"lr": 1e-3, "name": "grpo"}
    assert loaded.rows[0]["reward"] == 0.5 and math.isnan(loaded.rows[0]["kl"])
    assert (tmp_path / "history.csv").read_text().splitlines()[0] == "step,reward,kl"
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        History.load(tmp_path)
    with pytest.raises(ValueError, match="missing"):
        History.load(tmp_path / "elsewhere")


# --- zoo eval ----------------------------------------------------------------------------------
def test_zoo_eval_measures_the_model_given_by_model_device_and_dtype_on_the_recipes_prompts(tmp_path, capsys,
                                                                                          monkeypatch):
    import importlib

    from rlbook.zoo.recipes import RECIPES

    zoo_evaluate = importlib.import_module("rlbook.zoo.evaluate")  # the module (rlbook.zoo has no `evaluate` name)

    model, tokenizer = load_model("arith-tiny")
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # no longer the shipped weights
    model.save_pretrained(tmp_path / "trained")
    tokenizer.save_pretrained(tmp_path / "trained")
    measured = {}

    def evaluate(model, tokenizer, recipe):  # what the card's measurement is handed (evaluate: tests/test_zoo.py)
        measured.update(model=model, recipe=recipe)
        return {"pass_at_1": 0.5}

    monkeypatch.setattr(zoo_evaluate, "evaluate", evaluate)
    assert main(["zoo", "eval", "arith-tiny", "--model", str(tmp_path / "trained"), "--device", "cpu",
                 "--dtype", "bfloat16"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pass_at_1": 0.5}
    assert measured["recipe"] is RECIPES["arith-tiny"]
    loaded = next(measured["model"].parameters())
    assert loaded.dtype == torch.bfloat16 and torch.equal(loaded, next(model.parameters()).bfloat16())


def _weights(folder) -> dict:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


@pytest.fixture
def tiny_run_files(tokenizer, tmp_path):
    """A tiny model folder, SFT data and preference pairs, as files the commands read."""
    build_tiny_model(tokenizer, shape="test").save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    Dataset.from_dict({"prompt": [f"Q: {i}+1\nA: " for i in range(6)],
                       "completion": [str(i + 1) for i in range(6)]}).to_json(tmp_path / "sft.jsonl")
    Dataset.from_dict({"prompt": ["Review Dune.", "Review Heat.", "Review Up."] * 2,
                       "chosen": ["great plot.", "fun cast.", "warm story."] * 2,
                       "rejected": ["dull plot.", "weak cast.", "cold story."] * 2}).to_json(tmp_path / "pairs.jsonl")
    return tmp_path


def test_sft_resumed_from_an_interrupted_run_ends_with_the_uninterrupted_weights(tiny_run_files):
    from rlbook.trainers import sft

    files = tiny_run_files
    common = ["--model", str(files / "tiny"), "--data", str(files / "sft.jsonl"), "--steps", "4",
              "--set", "progress=false", "--set", "batch_size=2", "--set", "lr=1e-3"]
    assert main(["sft", *common, "--out", str(files / "straight")]) == 0
    # The interrupted run: the same training, stopped after 2 of its 4 steps with its checkpoint in --out.
    model, tokenizer = load_model(files / "tiny")
    sft(model, tokenizer, Dataset.from_json(str(files / "sft.jsonl")), steps=4, batch_size=2, lr=1e-3, progress=False,
        checkpoint_dir=files / "resumed" / "checkpoint", stop_after=2)
    assert main(["sft", *common, "--out", str(files / "resumed"), "--resume"]) == 0
    straight, resumed = _weights(files / "straight" / "model"), _weights(files / "resumed" / "model")
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)
    assert History.load(files / "resumed").rows == History.load(files / "straight").rows


@pytest.mark.parametrize("command", [["reward-model"], ["preference", "dpo"]], ids=["reward-model", "preference"])
def test_a_pair_run_resumed_with_a_larger_budget_ends_where_a_straight_run_ends(tiny_run_files, command):
    files = tiny_run_files
    pairs = str(files / "pairs.jsonl")
    common = ["--model", str(files / "tiny"), "--set", "progress=false", "--set", "batch_size=2", "--set", "lr=1e-3"]
    assert main([*command, "--pairs", pairs, "--eval-pairs", pairs, "--steps", "4", "--out", str(files / "straight"),
                 *common]) == 0
    assert main([*command, "--pairs", pairs, "--eval-pairs", pairs, "--steps", "2", "--out", str(files / "resumed"),
                 *common]) == 0
    # Resumed without --pairs: it trains on the pairs the first run saved in --out.
    assert main([*command, "--steps", "4", "--out", str(files / "resumed"), "--resume", *common]) == 0
    if command == ["reward-model"]:
        straight, resumed = (RewardModel.from_pretrained(files / run / "model").model.state_dict()
                             for run in ("straight", "resumed"))
    else:
        straight, resumed = _weights(files / "straight" / "model"), _weights(files / "resumed" / "model")
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)
    losses = [[row["loss"] for row in History.load(files / run).rows] for run in ("straight", "resumed")]
    assert losses[0] == losses[1] and len(losses[0]) == 4
