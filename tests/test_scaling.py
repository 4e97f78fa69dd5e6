"""rlbook.scaling: the TRL / verl translations, the memory model, and the TRL run (lesson 21)."""

from __future__ import annotations

import pytest

from rlbook import scaling
from rlbook.exercises.scaling import check_bytes_per_parameter, reference_bytes_per_parameter
from rlbook.models import build_char_tokenizer, build_tiny_model, count_parameters
from rlbook.trainers import preset
from rlbook.trainers.config import PRESETS
from test_trl_policy_crosscheck import CASES

trl = pytest.importorskip("trl")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_grpo_config_trl_builds_or_is_refused_by_field(name, tmp_path):
    config = preset(name)
    try:
        kwargs = scaling.trl_grpo_config(config)
    except ValueError as error:
        field = str(error).split("=")[0]
        assert hasattr(config, field), f"the refusal must name a config field, got {error}"
        return
    built = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kwargs)
    assert built.num_generations == config.group_size
    assert built.per_device_train_batch_size * built.steps_per_generation == config.batch_size
    assert built.activation_checkpointing is False and built.gradient_checkpointing is False


def test_the_translation_agrees_with_the_settings_cross_checked_against_trls_loss():
    """The loss-level cross-check (tests/test_trl_policy_crosscheck.py) pairs TRL settings with rlbook's;
    the translator must produce the same TRL settings from the rlbook side."""
    cispo = scaling.trl_grpo_config(preset("cispo", eps_high=0.3))
    assert cispo["loss_type"] == "cispo" and cispo["epsilon_high"] == CASES["cispo"][0]["epsilon_high"]
    sapo = scaling.trl_grpo_config(preset("sapo", tau_pos=0.5, tau_neg=2.0))
    for key in ("loss_type", "sapo_temperature_pos", "sapo_temperature_neg"):
        assert sapo[key] == CASES["sapo_temperatures"][0][key]
    assert scaling.trl_grpo_config(preset("grpo"))["loss_type"] == CASES["grpo"][0]["loss_type"]
    assert scaling.trl_grpo_config(preset("dr_grpo"))["loss_type"] == CASES["dr_grpo"][0]["loss_type"]
    gspo = scaling.trl_grpo_config(preset("gspo"))
    assert (gspo["loss_type"], gspo["importance_sampling_level"], gspo["epsilon"], gspo["epsilon_high"]) == (
        "grpo", "sequence", 3e-4, 4e-4)


def test_settings_trl_cannot_express_are_refused_by_name():
    for overrides, field in ((dict(entropy_coef=0.01), "entropy_coef"), (dict(cov_control="clip_cov"), "cov_control"),
                             (dict(kl_beta=0.1, kl_placement="reward"), "kl_placement"),
                             (dict(kl_beta=0.1, kl_estimator="k1"), "kl_estimator"),
                             (dict(dynamic_sampling=True), "dynamic_sampling")):
        with pytest.raises(ValueError, match=field):
            scaling.trl_grpo_config(preset("grpo", **overrides))
    with pytest.raises(ValueError, match="config"):
        scaling.trl_grpo_config({"variant": "grpo"})


def test_verl_overrides_name_the_loss_aggregation_kl_and_clip():
    overrides = scaling.verl_overrides(preset("grpo"))
    actor = "actor_rollout_ref.actor"
    assert overrides[f"{actor}.loss_agg_mode"] == "seq-mean-token-mean"
    assert overrides[f"{actor}.kl_loss_type"] == "low_var_kl" and overrides[f"{actor}.use_kl_loss"] is True
    assert overrides["algorithm.norm_adv_by_std_in_grpo"] is True
    assert scaling.verl_overrides(preset("dr_grpo"))["algorithm.norm_adv_by_std_in_grpo"] is False
    ppo = scaling.verl_overrides(preset("ppo"))
    assert ppo["algorithm.adv_estimator"] == "gae" and ppo["algorithm.use_kl_in_reward"] is True
    assert scaling.verl_overrides(preset("grpo", cov_control="kl_cov"))[f"{actor}.policy_loss.loss_mode"] == "kl_cov"
    with pytest.raises(ValueError, match="variant"):
        scaling.verl_overrides(preset("gmpo"))


def test_parameter_counts_from_shapes_match_a_built_model():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer)
    assert scaling.parameters_of_shape(model.config) == count_parameters(model)
    assert scaling.parameters_of_shape(scaling.HUB_SHAPES["Qwen/Qwen2.5-0.5B"]) == pytest.approx(0.494e9, rel=0.01)
    with pytest.raises(ValueError, match="config"):
        scaling.parameters_of_shape("Qwen/Qwen2.5-0.5B")


def test_training_memory_counts_sixteen_bytes_per_trained_parameter_and_shards_everything():
    shape = scaling.HUB_SHAPES["Qwen/Qwen2.5-0.5B"]
    full = scaling.training_memory(shape, sequences=8, tokens_per_sequence=128)
    params = full["parameters (B)"] * 1e9
    per_param = (full["policy weights"] + full["policy gradients"] + full["Adam + fp32 master"]) * 1024 ** 3 / params
    assert per_param == pytest.approx(16.0)
    assert per_param == reference_bytes_per_parameter(2)
    # KV cache: 2 (K and V) x 24 layers x 2 KV heads x 64 dims x 2 bytes per token
    assert full["KV cache"] * 1024 ** 3 == pytest.approx(2 * 24 * 2 * 64 * 2 * 8 * 128)
    lora = scaling.training_memory(shape, sequences=8, tokens_per_sequence=128, lora_fraction=0.01)
    assert lora["Adam + fp32 master"] == pytest.approx(full["Adam + fp32 master"] * 0.01)
    assert lora["policy weights"] == full["policy weights"]
    sharded = scaling.training_memory(shape, sequences=8, tokens_per_sequence=128, shards=4)
    for role in ("policy weights", "Adam + fp32 master", "reference", "KV cache"):
        assert sharded[role] == pytest.approx(full[role] / 4)
    for bad in (dict(sequences=0), dict(shards=1.5), dict(lora_fraction=2.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            scaling.training_memory(shape, **{**dict(sequences=8, tokens_per_sequence=128), **bad})


def test_the_exercise_checker_names_the_missing_master_copy(capsys):
    assert check_bytes_per_parameter(reference_bytes_per_parameter) is True
    assert check_bytes_per_parameter(lambda w: 2 * w + 8) is False
    assert "master copy" in capsys.readouterr().out


def test_fp32_full_fine_tuning_is_sixteen_bytes_and_the_checker_accepts_it(capsys):
    # fp32: weight 4 + gradient 4 + Adam's m, v 8 (no separate master); bf16: 2 + 2 + 4 master + 8
    assert reference_bytes_per_parameter(4) == 16 and reference_bytes_per_parameter(2) == 16
    assert check_bytes_per_parameter(lambda w: 2 * w + (8 if w >= 4 else 12)) is True
    capsys.readouterr()
    assert check_bytes_per_parameter(lambda w: 2 * w + 12) is False  # master copy counted for fp32 weights
    assert "their own master copy" in capsys.readouterr().out
    shape = scaling.HUB_SHAPES["Qwen/Qwen2.5-0.5B"]
    fp32 = scaling.training_memory(shape, sequences=8, tokens_per_sequence=128, weight_bytes=4)
    per_param = (fp32["policy weights"] + fp32["policy gradients"] + fp32["Adam + fp32 master"]) * 1024 ** 3
    assert per_param / (fp32["parameters (B)"] * 1e9) == pytest.approx(16.0)


@pytest.mark.slow
def test_train_with_trl_and_rlbook_run_the_same_config_on_a_tiny_model(tmp_path):
    from rlbook.tasks import get_task

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    task = get_task("arithmetic", digits=1)
    config = preset("grpo", kl_beta=0.0, lora=4, lr=1e-3, max_new_tokens=8, prompts_per_step=2, group_size=4)
    calls = []

    def evaluate(policy):
        calls.append(type(policy).__name__)
        return {"checked": 1.0}

    for train in (scaling.train_with_trl, scaling.train_with_rlbook):
        rows = train(tmp_path, task, config, steps=2, evaluate=evaluate, eval_every=2)
        assert [row["step"] for row in rows] == [0, 1, 2]
        assert rows[0]["checked"] == 1.0 and rows[-1]["checked"] == 1.0 and "reward" in rows[-1]
    assert calls and all(name == "PeftModel" or name.startswith("PeftModelFor") for name in calls)
    # A LoRA run starts as its base model: evaluate_at_start=False skips measuring it again.
    rows = scaling.train_with_trl(tmp_path, task, config, steps=1, evaluate=evaluate, eval_every=1,
                                  evaluate_at_start=False)
    assert [row["step"] for row in rows] == [1] and rows[0]["checked"] == 1.0
    with pytest.raises(ValueError, match="steps"):
        scaling.train_with_trl(tmp_path, task, config, steps=0)
