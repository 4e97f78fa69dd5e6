"""rlbook.scaling: the TRL / verl translations, the memory model, and the TRL run (lesson 21)."""

from __future__ import annotations

import pytest

from rlbook import scaling
from rlbook.exercises import scaling as exercise
from rlbook.exercises.scaling import check_bytes_per_parameter, reference_bytes_per_parameter
from rlbook.models import build_char_tokenizer, build_tiny_model, count_parameters
from rlbook.trainers import preset
from rlbook.shaping import soft_overlong_penalty
from rlbook.tasks import FORMAT_INSTRUCTION
from rlbook.trainers.config import PRESETS
from rlbook.viz import scaling as scaling_viz
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


def test_the_translation_agrees_with_the_settings_cross_checked_against_trls_loss(tmp_path):
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
    # rlbook's in-loss KL (beta * k3, gradient of k3) is TRL's with the bias-corrected KL switched off, which
    # TRL turns on by default: the cross-checked pair, produced from the rlbook side.
    grpo = scaling.trl_grpo_config(preset("grpo"))
    for key in ("beta", "use_bias_correction_kl"):
        assert grpo[key] == CASES["grpo_kl_k3"][0][key]
    assert trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", bf16=False,
                          **grpo).use_bias_correction_kl is False


def test_entropy_bonus_and_dual_clip_map_to_the_cross_checked_trl_keys(tmp_path):
    # the pairs tests/test_trl_policy_crosscheck.py shows equal on the same tensors, produced from the rlbook side
    bonus = scaling.trl_grpo_config(preset("grpo", entropy_coef=0.01))
    assert (bonus["loss_type"], bonus["entropy_coef"]) == ("grpo", CASES["grpo_entropy_bonus"][0]["entropy_coef"])
    dual = scaling.trl_grpo_config(preset("grpo", dual_clip=1.25, kl_beta=0.0))
    assert dual["delta"] == CASES["grpo_dual_clip"][0]["delta"] and dual["epsilon_high"] == 0.2
    dapo = scaling.trl_grpo_config(preset("dapo", dual_clip=1.3, dynamic_sampling=False, overlong=None))
    assert (dapo["loss_type"], dapo["epsilon_high"], dapo["delta"]) == tuple(
        CASES["dapo_dual_clip"][0][key] for key in ("loss_type", "epsilon_high", "delta"))
    trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", bf16=False, **dual)
    assert "delta" not in scaling.trl_grpo_config(preset("grpo"))
    # below 1 + eps_high TRL's delta would also cap r where A > 0: refused, with the reason
    with pytest.raises(ValueError, match="dual_clip.*epsilon_high"):
        scaling.trl_grpo_config(preset("dapo", dual_clip=1.25, dynamic_sampling=False, overlong=None))


def test_verl_refuses_an_entropy_bonus_or_dual_clip_it_would_compute_differently():
    actor = "actor_rollout_ref.actor"
    assert scaling.verl_overrides(preset("dapo", entropy_coef=0.01))[f"{actor}.entropy_coeff"] == 0.01
    with pytest.raises(ValueError, match="entropy_coef.*loss_agg_mode"):
        scaling.verl_overrides(preset("grpo", entropy_coef=0.01))
    assert scaling.verl_overrides(preset("grpo", dual_clip=2.0))[f"{actor}.clip_ratio_c"] == 2.0
    with pytest.raises(ValueError, match="dual_clip.*gspo"):
        scaling.verl_overrides(preset("gspo", dual_clip=2.0))



def test_convention_changes_name_what_the_translation_converts_and_when_it_changes_the_algorithm():
    grpo = scaling.trl_convention_changes(preset("grpo"))  # β = 0.04 and the population σ
    assert any("σ: population → Bessel" in line and "KL term weighs √(8/7) = 1.069" in line for line in grpo)
    assert any("use_bias_correction_kl=False" in line for line in grpo)
    gspo = scaling.trl_convention_changes(preset("gspo"))  # no KL, no entropy: only a rescale
    assert len(gspo) == 1 and "a rescale of the loss" in gspo[0] and "√(7/8) = 0.935" in gspo[0]
    assert any("entropy term" in line for line in scaling.trl_convention_changes(
        preset("grpo", kl_beta=0.0, entropy_coef=0.01)))
    cispo = scaling.trl_convention_changes(preset("cispo"))
    assert any("epsilon_high=5.0" in line for line in cispo)
    # the lesson's recipe (Bessel's σ, no KL) is a word-for-word translation; dr_grpo does not scale by σ
    assert scaling.trl_convention_changes(preset("grpo", kl_beta=0.0, unbiased_std=True)) == []
    assert scaling.trl_convention_changes(preset("dr_grpo")) == []
    with pytest.raises(ValueError, match="dynamic_sampling"):  # refused where the translation is
        scaling.trl_convention_changes(preset("grpo", dynamic_sampling=True))

@pytest.mark.filterwarnings("ignore:kl_placement='reward'")  # a non-k1 estimator in the reward, on purpose
def test_settings_trl_cannot_express_are_refused_by_name():
    for overrides, field in ((dict(dual_clip=1.1), "dual_clip"), (dict(cov_control="clip_cov"), "cov_control"),
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

ACTOR = "actor_rollout_ref.actor"
QWEN_05B, QWEN_7B = scaling.HUB_SHAPES["Qwen/Qwen2.5-0.5B"], scaling.HUB_SHAPES["Qwen/Qwen2.5-7B"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_translated_for_verl_or_refused_by_field(name):
    config = preset(name)
    try:
        overrides = scaling.verl_overrides(config)
    except ValueError as error:
        assert hasattr(config, str(error).split("=")[0]), f"the refusal must name a config field, got {error}"
        return
    assert not any("dynamic_filter" in key for key in overrides), "verl's key is algorithm.filter_groups"
    assert overrides["algorithm.filter_groups.enable"] is config.dynamic_sampling
    assert overrides["reward_model.overlong_buffer.enable"] is (config.overlong is not None)


def test_verl_dynamic_sampling_is_filter_groups_on_the_reward_the_advantages_see():
    overrides = scaling.verl_overrides(preset("dapo", max_resample_rounds=3))
    assert overrides["algorithm.filter_groups.enable"] is True
    assert overrides["algorithm.filter_groups.metric"] == "seq_final_reward"
    assert overrides["algorithm.filter_groups.max_num_gen_batches"] == 4  # verl counts the first batch too
    assert overrides["data.gen_batch_size"] == overrides["data.train_batch_size"]


def test_verl_overlong_buffer_is_rlbooks_soft_overlong_penalty():
    config = preset("dapo", max_new_tokens=40)
    overrides = scaling.verl_overrides(config)
    assert overrides["reward_model.reward_manager"] == "dapo"
    buffer_len = overrides["reward_model.overlong_buffer.len"]
    factor = overrides["reward_model.overlong_buffer.penalty_factor"]
    max_response = overrides["data.max_response_length"]
    assert (max_response, buffer_len) == config.overlong
    for length in range(max_response + 1):  # verl's DAPO reward manager, as its recipe documents it
        verl_penalty = min(-(length - (max_response - buffer_len)) / buffer_len * factor, 0.0)
        assert verl_penalty == pytest.approx(soft_overlong_penalty(length, *config.overlong))
    for overlong in ((32, 8), (40, 0)):  # a window not ending at the budget; a zero-length buffer
        with pytest.raises(ValueError, match="overlong"):
            scaling.verl_overrides(preset("dapo", max_new_tokens=40, overlong=overlong))


def test_verl_loss_modes_are_the_names_verl_registers():
    modes = {name: scaling.verl_overrides(preset(name))[f"{ACTOR}.policy_loss.loss_mode"]
             for name in ("grpo", "dr_grpo", "dapo", "gspo", "gmpo", "sapo", "cispo", "rloo")}
    assert modes == {"grpo": "vanilla", "dr_grpo": "vanilla", "dapo": "vanilla", "gspo": "gspo", "gmpo": "geo_mean",
                     "sapo": "sapo", "cispo": "cispo", "rloo": "gpg"}
    gmpo = scaling.verl_overrides(preset("gmpo"))
    assert (gmpo[f"{ACTOR}.clip_ratio_low"], gmpo[f"{ACTOR}.clip_ratio_high"]) == (0.4, 0.4)  # log space in both
    cispo = scaling.verl_overrides(preset("cispo", eps_high=3.0))
    # verl clamps the weight to [1 − low, 1 + high]: rlbook's cap 1 + ε_high, and no floor above 0
    assert (cispo[f"{ACTOR}.clip_ratio_low"], cispo[f"{ACTOR}.clip_ratio_high"]) == (1.0, 3.0)
    sapo = scaling.verl_overrides(preset("sapo", tau_pos=0.5, tau_neg=2.0))
    assert (sapo[f"{ACTOR}.tau_pos"], sapo[f"{ACTOR}.tau_neg"]) == (0.5, 2.0)
    dr_grpo = scaling.verl_overrides(preset("dr_grpo", max_new_tokens=40))
    assert dr_grpo[f"{ACTOR}.loss_scale_factor"] == 40  # Dr.GRPO's constant is the budget, not the padded width
    with pytest.raises(ValueError, match="aggregation"):
        scaling.verl_overrides(preset("gspo", aggregation="token_mean"))  # verl's gspo fixes its aggregation


def test_verl_translates_or_refuses_every_other_setting_by_name():
    overrides = scaling.verl_overrides(preset("grpo", lora=8, warmup_steps=5, max_grad_norm=None))
    model = "actor_rollout_ref.model"
    assert (overrides[f"{model}.lora_rank"], overrides[f"{model}.lora_alpha"]) == (8, 16.0)
    assert overrides[f"{model}.target_modules"] == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert overrides[f"{ACTOR}.optim.lr_warmup_steps"] == 5
    assert overrides[f"{ACTOR}.grad_clip"] == float("inf")  # verl always clips: 0 would zero the gradients
    kl_cov = scaling.verl_overrides(preset("grpo", cov_control="kl_cov", kl_cov_coef=0.5))
    assert (kl_cov[f"{ACTOR}.policy_loss.kl_cov_ratio"], kl_cov[f"{ACTOR}.policy_loss.ppo_kl_coef"]) == (2e-3, 0.5)
    clip_cov = scaling.verl_overrides(preset("grpo", cov_control="clip_cov", cov_bounds=(2.0, 6.0)))
    assert (clip_cov[f"{ACTOR}.policy_loss.clip_cov_lb"], clip_cov[f"{ACTOR}.policy_loss.clip_cov_ub"]) == (2.0, 6.0)
    for overrides, field in ((dict(format_reward_weight=0.1), "format_reward_weight"),
                             (dict(advantage_filter=0.0), "advantage_filter"),
                             (dict(advantage_noise=0.1), "advantage_noise"),
                             (dict(minibatch_size=12), "minibatch_size")):
        with pytest.raises(ValueError, match=field):
            scaling.verl_overrides(preset("grpo", **overrides))
    with pytest.raises(ValueError, match="cov_control"):
        scaling.verl_overrides(preset("gspo", cov_control="clip_cov"))


def test_parameter_counts_from_shapes_match_a_built_model():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer)
    assert scaling.parameters_of_shape(model.config) == count_parameters(model)
    assert scaling.parameters_of_shape(scaling.HUB_SHAPES["Qwen/Qwen2.5-0.5B"]) == pytest.approx(0.494e9, rel=0.01)
    with pytest.raises(ValueError, match="config"):
        scaling.parameters_of_shape("Qwen/Qwen2.5-0.5B")


def test_training_memory_counts_sixteen_bytes_per_trained_parameter_and_shards_the_model_states():
    full = scaling.training_memory(QWEN_05B, sequences=8, tokens_per_sequence=128)
    assert set(full) == {"parameters (B)", *scaling.MEMORY_ROLES}
    params = full["parameters (B)"] * 1e9
    per_param = (full["policy weights"] + full["policy gradients"] + full["Adam + fp32 master"]) * 1024 ** 3 / params
    assert per_param == pytest.approx(16.0)
    assert per_param == reference_bytes_per_parameter(2)
    # KV cache: 2 (K and V) x 24 layers x 2 KV heads x 64 dims x 2 bytes per token
    assert full["KV cache"] * 1024 ** 3 == pytest.approx(2 * 24 * 2 * 64 * 2 * 8 * 128)
    lora = scaling.training_memory(QWEN_05B, sequences=8, tokens_per_sequence=128, lora_fraction=0.01)
    assert lora["Adam + fp32 master"] == pytest.approx(full["Adam + fp32 master"] * 0.01)
    assert lora["policy weights"] == full["policy weights"]
    sharded = scaling.training_memory(QWEN_05B, sequences=8, tokens_per_sequence=128, shards=4)
    for role in ("policy weights", "policy gradients", "Adam + fp32 master", "reference", "KV cache"):
        assert sharded[role] == pytest.approx(full[role] / 4)
    for role in ("activations", "logits"):  # each GPU holds its own micro-batch's
        assert sharded[role] == full[role]
    # generation needs the whole model on the GPU that samples, whatever ZeRO-3 does
    assert full["weights gathered for generation"] == 0.0
    generation_weights = sharded["policy weights"] + sharded["weights gathered for generation"]
    assert generation_weights == pytest.approx(full["policy weights"])
    for bad in (dict(sequences=0), dict(shards=1.5), dict(lora_fraction=2.0), dict(micro_batch=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            scaling.training_memory(QWEN_05B, **{**dict(sequences=8, tokens_per_sequence=128), **bad})


def test_the_reference_costs_nothing_under_lora():
    kwargs = dict(sequences=8, tokens_per_sequence=128)
    assert scaling.training_memory(QWEN_05B, **kwargs)["reference"] > 0
    assert scaling.training_memory(QWEN_05B, lora_fraction=0.01, **kwargs)["reference"] == 0.0
    assert scaling.training_memory(QWEN_05B, reference=False, **kwargs)["reference"] == 0.0
    table = scaling_viz.memory_table(["Qwen/Qwen2.5-0.5B"], settings={"full": {}, "LoRA": {"lora_fraction": 0.01}},
                                     **kwargs)
    assert table.loc[("Qwen2.5-0.5B", "LoRA"), "reference"] == 0.0
    assert table.loc[("Qwen2.5-0.5B", "full"), "reference"] > 0


def test_activations_follow_korthikanti_and_logits_are_a_vocabulary_per_token():
    s, b, h, layers = 4096, 2, QWEN_7B["hidden_size"], QWEN_7B["num_hidden_layers"]
    plain = scaling.activation_bytes(QWEN_7B, tokens_per_sequence=s, micro_batch=b)
    assert plain == 34 * s * b * h * layers  # eq. 1 without the attention matrix (FlashAttention)
    checkpointed = scaling.activation_bytes(QWEN_7B, tokens_per_sequence=s, micro_batch=b, gradient_checkpointing=True)
    assert checkpointed == 2 * s * b * h * layers + 34 * s * b * h  # layer inputs + one layer recomputed
    # a 152k vocabulary in fp32 is about 2.5 GB per 4,096-token sequence
    assert scaling.logits_bytes(QWEN_7B, tokens_per_sequence=4096) / 1e9 == pytest.approx(2.49, abs=0.01)
    memory = scaling.training_memory(QWEN_7B, sequences=8, tokens_per_sequence=s, micro_batch=b,
                                     gradient_checkpointing=True)
    assert memory["activations"] * 1024 ** 3 == pytest.approx(checkpointed)
    with pytest.raises(ValueError, match="tokens_per_sequence"):
        scaling.activation_bytes(QWEN_7B, tokens_per_sequence=0)


def test_the_memory_table_shows_the_kv_cache_dominating_a_small_model_with_long_rollouts():
    table = scaling_viz.memory_table(["Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B"], sequences=256, tokens_per_sequence=4096)
    assert table.loc["Qwen2.5-0.5B", "largest role"] == "KV cache"
    assert table.loc["Qwen2.5-7B", "largest role"] == "Adam + fp32 master"
    row = table.loc["Qwen2.5-7B"]
    assert row["total"] == pytest.approx(scaling.memory_total(row))
    with pytest.raises(ValueError, match="models"):
        scaling_viz.memory_table(["Qwen/Qwen2.5-1B"], sequences=8, tokens_per_sequence=128)


def test_gpus_needed_is_the_fewest_gpus_the_run_fits_on():
    kwargs = dict(sequences=256, tokens_per_sequence=8192, gradient_checkpointing=True)
    needed = scaling.gpus_needed(QWEN_7B, gpu_gib=80.0, **kwargs)
    assert scaling.memory_total(scaling.training_memory(QWEN_7B, shards=needed, **kwargs)) <= 80.0
    assert scaling.memory_total(scaling.training_memory(QWEN_7B, shards=needed - 1, **kwargs)) > 80.0
    with pytest.raises(ValueError, match="gpu_gib"):
        scaling.gpus_needed(QWEN_7B, gpu_gib=10.0, **kwargs)  # the full weights alone take 14 GiB
    with pytest.raises(ValueError, match="shards"):
        scaling.gpus_needed(QWEN_7B, shards=2, **kwargs)


def test_the_memory_figure_has_linear_axes_one_panel_per_model_and_every_total_written():
    import matplotlib.pyplot as plt

    table = scaling_viz.memory_table(["Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B"], sequences=256, tokens_per_sequence=4096,
                                     settings={"full": {}, "LoRA 1%": {"lora_fraction": 0.01}})
    axes = scaling_viz.plot_training_memory(table)
    assert [ax.get_title() for ax in axes] == ["Qwen2.5-0.5B", "Qwen2.5-7B"]
    for ax, model in zip(axes, ("Qwen2.5-0.5B", "Qwen2.5-7B")):
        assert ax.get_yscale() == "linear"
        written = {text.get_text() for text in ax.texts}
        assert written == {f"{total:,.1f}" for total in table.loc[model, "total"]}
    assert list(scaling_viz.ROLE_COLOURS) == list(scaling.MEMORY_ROLES)
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="ax"):
        scaling_viz.plot_training_memory(table, ax=ax)


def test_trl_batch_is_divided_between_the_launched_processes():
    config = preset("grpo", minibatch_size=32)
    assert scaling.trl_grpo_config(config)["per_device_train_batch_size"] == 32
    eight = scaling.trl_grpo_config(config, num_processes=8)
    assert eight["per_device_train_batch_size"] * 8 == 32 and eight["steps_per_generation"] == config.batch_size // 32
    with pytest.raises(ValueError, match="num_processes"):
        scaling.trl_grpo_config(config, num_processes=3)


def _grpo_config_kwargs(monkeypatch, model_dir, config, steps: int) -> dict:
    """The keyword arguments train_with_trl hands trl.GRPOConfig (captured; nothing is trained)."""
    from rlbook.tasks import get_task

    seen = {}

    class Stop(Exception):
        pass

    def capture(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(trl, "GRPOConfig", capture)
    with pytest.raises(Stop):
        scaling.train_with_trl(model_dir, get_task("arithmetic", digits=1), config, steps=steps)
    return seen


def test_train_with_trl_reads_the_world_size_accelerate_sets(monkeypatch, model_dir):
    monkeypatch.setenv("WORLD_SIZE", "4")
    seen = _grpo_config_kwargs(monkeypatch, model_dir, preset("grpo", minibatch_size=32), steps=1)
    assert seen["per_device_train_batch_size"] == 8
    assert seen["bf16"] is False  # TRL's default is bf16 autocast, on the CPU too; rlbook trains in fp32


def test_trl_runs_as_many_batches_as_rlbook_steps_when_a_batch_takes_several_optimizer_steps(monkeypatch, model_dir):
    config = preset("grpo", minibatch_size=16, epochs=2)  # 64 completions: 4 minibatches, 2 epochs
    kwargs = scaling.trl_grpo_config(config)
    assert scaling.trl_optimizer_steps_per_step(kwargs) == (config.batch_size // 16) * 2 == 8
    assert scaling.trl_optimizer_steps_per_step(scaling.trl_grpo_config(preset("grpo"))) == 1
    with pytest.raises(ValueError, match="trl_kwargs"):
        scaling.trl_optimizer_steps_per_step({"steps_per_generation": 2})
    # TRL's max_steps counts optimizer steps: a new batch every 8 of them
    assert _grpo_config_kwargs(monkeypatch, model_dir, config, steps=3)["max_steps"] == 3 * 8


def test_the_launched_script_takes_its_budget_and_system_prompt_from_the_preset_and_the_model(monkeypatch, model_dir):
    calls = []
    monkeypatch.setattr(scaling, "train_with_trl",
                        lambda folder, task, config, **kwargs: calls.append((config, kwargs["train_dataset"])) or [])
    for argv, budget, system in (([], preset("grpo").max_new_tokens, None),
                                 (["--max-new-tokens", "32", "--system-prompt", "Be brief."], 32, "Be brief."),
                                 (["--model", model_dir], preset("grpo").max_new_tokens, FORMAT_INSTRUCTION),
                                 (["--model", model_dir, "--system-prompt", ""], preset("grpo").max_new_tokens, None)):
        assert scaling.main(["--steps", "1", *argv]) == 0
        config, dataset = calls[-1]
        assert config.max_new_tokens == budget
        first = dataset[0]["prompt"][0]
        assert (first["content"] if first["role"] == "system" else None) == system


def test_the_exercise_checker_names_the_missing_master_copy(capsys):
    assert check_bytes_per_parameter(exercise.reference_bytes_breakdown) is True
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m)) is False
    assert "master copy is missing" in capsys.readouterr().out


def test_the_bytes_checker_wants_the_parts_and_tests_the_rule_not_the_printed_numbers(capsys):
    assert check_bytes_per_parameter(lambda w, g, m: 16) is False  # a constant total is not the answer
    assert "three parts" in capsys.readouterr().out
    # the two cases the lesson prints, copied: the fp32-gradient and 8-bit cases catch it
    copied = {2: (2, 2, 12), 4: (4, 4, 8)}
    assert check_bytes_per_parameter(lambda w, g, m: copied[w]) is False
    assert "gradient_bytes" in capsys.readouterr().out
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 12 if w < 4 else 8)) is False
    out = capsys.readouterr().out
    assert "8-bit Adam" in out and "moment_bytes = 1" in out
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m + (m if w < 4 else 0))) is False  # master quantised
    assert "stays fp32" in capsys.readouterr().out
    assert check_bytes_per_parameter(lambda w, g, m: (w, 0, 2 * m + (4 if w < 4 else 0))) is False
    assert "gradients also take memory" in capsys.readouterr().out


def test_the_bytes_checker_takes_numpy_numbers(capsys):
    import numpy as np

    assert check_bytes_per_parameter(
        lambda w, g, m: tuple(np.int64(b) for b in exercise.reference_bytes_breakdown(w, g, m))) is True
    assert check_bytes_per_parameter(lambda w, g, m: np.array(exercise.reference_bytes_breakdown(w, g, m))) is True
    assert check_bytes_per_parameter(lambda w, g, m: [float(b) for b in exercise.reference_bytes_breakdown(w, g, m)])
    assert check_bytes_per_parameter(lambda w, g, m: np.zeros((3, 1))) is False  # not three numbers
    assert "three parts" in capsys.readouterr().out


def test_the_bytes_checker_names_a_mistake_from_every_case_not_the_first_alone(capsys):
    # bf16 alone cannot tell a missing moment (m + 4 = 8) from a missing master copy (2m = 8); fp32 can (4 vs 8)
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, m + (4 if w < 4 else 0))) is False
    out = capsys.readouterr().out
    assert "moments (m and v) is missing" in out and "master copy is missing" not in out
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m)) is False
    assert "master copy is missing" in capsys.readouterr().out
    # Megatron's fp16 accounting, 2 + 2 + 16: an fp32 copy of the gradient beside the bf16 one
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m + (4 if w < 4 else 0) + (4 if g < 4 else 0))) is False
    assert "Megatron's fp16 accounting" in capsys.readouterr().out
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m + 4)) is False
    assert "fp32 weights are their own master copy" in capsys.readouterr().out


def test_fp32_full_fine_tuning_is_sixteen_bytes_and_the_checker_accepts_it(capsys):
    # fp32: weight 4 + gradient 4 + Adam's m, v 8 (no separate master); bf16: 2 + 2 + 4 master + 8
    assert reference_bytes_per_parameter(4) == 16 and reference_bytes_per_parameter(2) == 16
    assert reference_bytes_per_parameter(2, 4) == 18 and reference_bytes_per_parameter(2, 2, 1) == 10
    # the checker's rule is the library's: Adam's moments (fp32 by default) and a master copy below fp32 weights
    assert scaling.optimizer_bytes_per_parameter(2) == 12 and scaling.optimizer_bytes_per_parameter(4) == 8
    assert scaling.optimizer_bytes_per_parameter(2, moment_bytes=1) == 6
    with pytest.raises(ValueError, match="moment_bytes"):
        scaling.optimizer_bytes_per_parameter(2, moment_bytes=0)
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m + (4 if w < 4 else 0))) is True
    capsys.readouterr()
    assert check_bytes_per_parameter(lambda w, g, m: (w, g, 2 * m + 4)) is False  # master counted for fp32 weights
    assert "their own master copy" in capsys.readouterr().out
    shape = scaling.HUB_SHAPES["Qwen/Qwen2.5-0.5B"]
    fp32 = scaling.training_memory(shape, sequences=8, tokens_per_sequence=128, weight_bytes=4)
    per_param = (fp32["policy weights"] + fp32["policy gradients"] + fp32["Adam + fp32 master"]) * 1024 ** 3
    assert per_param / (fp32["parameters (B)"] * 1e9) == pytest.approx(16.0)


@pytest.mark.slow
def _tiny_model_folder(folder):
    """A tiny zoo-shaped model and its tokenizer saved in ``folder``; returns both."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def test_train_with_trl_and_rlbook_run_the_same_config_on_a_tiny_model(tmp_path):
    from rlbook.tasks import get_task

    _tiny_model_folder(tmp_path)
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
    assert rows[-1]["mixed_precision"] == "no" and rows[-1]["world_size"] == 1
    with pytest.raises(ValueError, match="steps"):
        scaling.train_with_trl(tmp_path, task, config, steps=0)


def test_the_gpu_plan_checker_accepts_the_library_and_gives_the_gpu_counts(capsys):
    assert exercise.check_gpu_plan(exercise.reference_plan) is True
    out = capsys.readouterr().out
    assert "GPUs of 80 GiB" in out and "gpus_needed" in out and "per GPU" in out and "for the job" in out
    # an answer rounded the way a reader would (7.6 B parameters) passes too
    kv = 2 * 28 * 4 * 128 * 2 * 32 * 8192  # one engine's pool: 32 sequences in flight, not the whole rollout

    def rounded(lora):
        per_parameter = 2 + (0.01 * 14 if lora else 2 + 12 + 2)  # weights, + trained grads/Adam/master, + reference
        return 7.6e9 * per_parameter / 2 ** 30, kv / 2 ** 30, exercise.plan_gpus(lora), exercise.plan_waves(lora)

    assert exercise.check_gpu_plan(rounded) is True
    assert exercise.check_gpu_plan(None) is None
    capsys.readouterr()

    def stub(lora):
        raise NotImplementedError

    assert exercise.check_gpu_plan(stub) is None
    assert exercise.check_gpu_plan(lambda lora: "lots") is False
    assert "four numbers" in capsys.readouterr().out
    assert exercise.check_gpu_plan(exercise.reference_states_gib) is False  # the GiB alone are not a plan
    assert "four numbers" in capsys.readouterr().out
    with pytest.raises(ValueError, match="lora"):
        exercise.reference_states_gib(1)
    with pytest.raises(ValueError, match="lora"):
        exercise.reference_pool_gib("yes")


def test_the_gpu_plan_checker_names_wrong_gpu_and_wave_counts(capsys):
    assert exercise.reference_plan(False)[2:] == (3, 3) and exercise.reference_plan(True)[2:] == (1, 8)
    one_engine = {lora: (*exercise.reference_plan(lora)[:3], 8) for lora in (False, True)}
    assert exercise.check_gpu_plan(lambda lora: one_engine[lora]) is False
    assert "the waves of one engine" in capsys.readouterr().out
    assert exercise.check_gpu_plan(lambda lora: (*exercise.reference_plan(lora)[:2], 4, 1)) is False
    assert "the fewest N" in capsys.readouterr().out
    # the count without the weights each engine gathers to generate (2 GPUs, 4 waves in full fine-tuning): a plan
    # whose GPUs would hold 84.9 GiB, named as that slip
    no_weights = {False: (*exercise.reference_plan(False)[:2], 2, 4), True: exercise.reference_plan(True)}
    assert exercise.check_gpu_plan(lambda lora: no_weights[lora]) is False
    assert "gathers to generate are left out" in capsys.readouterr().out


def test_the_gpu_plan_counts_one_engines_pool_and_names_the_one_wave_cache(capsys):
    for lora in (False, True):
        memory = exercise._plan_memory(lora)
        assert exercise.reference_pool_gib(lora) * 2 ** 30 == pytest.approx(2 * 28 * 4 * 128 * 2 * 32 * 8192)
        states = exercise.reference_states_gib(lora)
        assert states + memory["KV cache"] == pytest.approx(sum(memory[role] for role in exercise.PLAN_ROLES))
        n = exercise.plan_gpus(lora)  # the fewest N with states / N + weights × (1 − 1/N) + pool <= 80

        def per_gpu(n, memory=memory, states=states):
            return states / n + memory["policy weights"] * (1 - 1 / n) + memory["KV cache"]

        assert per_gpu(n) <= 80 and (n == 1 or per_gpu(n - 1) > 80)
        # the library's own layout agrees: training_memory at n shards, the plan's roles and the gathered weights
        at_n = scaling.training_memory(scaling.HUB_SHAPES[exercise.PLAN_MODEL], shards=n, in_flight=exercise.PLAN_IN_FLIGHT,
                                       lora_fraction=exercise.PLAN_LORA_FRACTION if lora else None,
                                       **exercise.PLAN_ROLLOUT)
        assert per_gpu(n) == pytest.approx(sum(at_n[role] for role in (*exercise.PLAN_ROLES,
                                                                       "weights gathered for generation")))
    assert (exercise.plan_gpus(False), exercise.plan_gpus(True)) == (3, 1)
    # the whole rollout's KV cache charged as the pool is named as a mistake
    one_wave = {lora: (exercise.reference_states_gib(lora), exercise.reference_pool_gib(lora) * 8, 1, 1)
                for lora in (False, True)}
    assert exercise.check_gpu_plan(lambda lora: one_wave[lora]) is False
    assert "one wave" in capsys.readouterr().out
    # the hybrid of the earlier version, the pool added to the states, is named too
    hybrid = {lora: (sum(exercise.reference_plan(lora)[:2]), *exercise.reference_plan(lora)[1:]) for lora in (False, True)}
    assert exercise.check_gpu_plan(lambda lora: hybrid[lora]) is False
    assert "asked apart" in capsys.readouterr().out


@pytest.mark.parametrize("lora", [False, True])
def test_the_gpu_plan_checker_names_each_known_mistake(lora, capsys):
    mistakes = exercise._plan_mistakes(lora)
    for what, position in (("states", 0), ("pool", 1)):
        for message, wrong in mistakes[what].items():
            right = list(exercise.reference_plan(lora))
            right[position] = wrong
            answer = {lora: tuple(right), not lora: exercise.reference_plan(not lora)}
            assert exercise.check_gpu_plan(lambda flag: answer[flag]) is False
            out = capsys.readouterr().out
            assert message in out and ("with LoRA" if lora else "in full fine-tuning") in out


def test_activation_coefficient_and_the_swiglu_plan_column():
    shape = scaling.HUB_SHAPES["Qwen/Qwen2.5-7B"]
    base = scaling.activation_bytes(shape, tokens_per_sequence=4096)
    own = scaling.gated_mlp_activation_coefficient(shape)
    assert scaling.activation_bytes(shape, tokens_per_sequence=4096, coefficient=own) == pytest.approx(base * own / 34)
    with pytest.raises(ValueError, match="coefficient"):
        scaling.activation_bytes(shape, tokens_per_sequence=4096, coefficient=0)
    table = scaling_viz.memory_table(["Qwen/Qwen2.5-7B"], plan_tensor_parallel=1, in_flight=64, swiglu_plan=True,
                                     **ROLLOUT_4K)
    # the 7B full fine-tuning plan moves from 4 GPUs to 5 when the activations are charged at its own 58 bytes
    assert (int(table["GPUs needed"].iloc[0]), int(table["GPUs needed, SwiGLU"].iloc[0])) == (4, 5)


def test_problem_clusters_join_a_problem_asked_in_either_order():
    from rlbook.tasks import get_task

    task = get_task("plain_addition", min_digits=1, max_digits=2)
    rows = [{"a": 3, "b": 7, "question": "q"}, {"a": 7, "b": 3, "question": "r"}, {"a": 3, "b": 8, "question": "s"}]
    assert scaling.problem_clusters(task, rows) == ["3+7", "3+7", "3+8"]
    with pytest.raises(ValueError, match="operands"):
        scaling.problem_clusters(task, [{"question": "q"}])


def test_paired_ratio_change_is_the_change_of_two_ratios_with_a_paired_se():
    import numpy as np

    from rlbook.evidence import ratio_se

    rng = np.random.default_rng(0)
    y0 = rng.integers(1, 8, size=40)
    x0 = rng.binomial(y0, 0.3)
    y = rng.integers(1, 8, size=40)
    x = rng.binomial(y, 0.5)
    change, se = scaling.paired_ratio_change(x, y, x0, y0, list(range(40)))
    assert change == pytest.approx(x.sum() / y.sum() - x0.sum() / y0.sum())
    # with nothing shared between the two, the paired SE is about the two separate SEs combined
    separate = np.hypot(ratio_se(x, y)[1], ratio_se(x0, y0)[1])
    assert se == pytest.approx(separate, rel=0.25)
    # the same measurement twice: no change and no uncertainty in it
    assert scaling.paired_ratio_change(x, y, x, y, list(range(40))) == (0.0, pytest.approx(0.0, abs=1e-12))
    with pytest.raises(ValueError, match="one value per cluster"):
        scaling.paired_ratio_change(x, y, x0, y0, list(range(39)))


def test_right_and_wrong_replies_pick_the_first_of_each():
    rows = [{"question": "What is 1 + 1? Reply"}, {"question": "What is 2 + 2? Reply"}]
    picked = scaling.right_and_wrong_replies(["3", "5", "4", "4"], [[0, 0], [1, 1]], rows)
    assert picked == {"right": ("What is 2 + 2?", "4"), "wrong": ("What is 1 + 1?", "3")}
    assert scaling.right_and_wrong_replies(["2", "2"], [[1, 1]], rows[:1])["wrong"] is None
    with pytest.raises(ValueError, match="P × n"):
        scaling.right_and_wrong_replies(["2"], [[1, 1]], rows[:1])


def test_trl_policy_loss_runs_trls_loss_on_given_tensors_and_shows_the_cispo_cap():
    import torch

    from rlbook.losses import policy_loss

    logp = torch.tensor([[-1.0, -0.5], [-2.0, -0.3]], dtype=torch.float64)
    old = logp - torch.tensor([[1.5, 0.0], [0.1, 1.4]], dtype=torch.float64)  # ratios e^1.5 = 4.5 and e^1.4 = 4.1
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.long)
    trl_loss, trl_grad = scaling.trl_policy_loss(logp, old, advantages, mask, loss_type="cispo", epsilon_high=5.0,
                                                 group_size=2)
    current = logp.clone().requires_grad_()
    loss, _ = policy_loss(current, old, advantages, mask, variant="cispo", eps_high=4.0)
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item()) and torch.allclose(current.grad, trl_grad)
    copied, _ = scaling.trl_policy_loss(logp, old, advantages, mask, loss_type="cispo", epsilon_high=4.0, group_size=2)
    assert copied.item() != pytest.approx(loss.item())  # a copied 4.0 caps the weight at 4, not 5


def test_held_out_evidence_figure_draws_each_run_with_its_interval():
    import matplotlib.pyplot as plt

    rows = [("base", "base", 0.2, 0.04, 0.4, 0.06), ("rlbook 1", "rlbook", 0.45, 0.05, 0.65, 0.07),
            ("TRL 1", "TRL", 0.3, 0.05, 0.5, 0.07)]
    axes = scaling_viz.plot_held_out_evidence(rows, k=8)
    assert [ax.get_title() for ax in axes] == ["held-out pass@1", "held-out pass@8"]
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["base", "rlbook 1", "TRL 1"]
    with pytest.raises(ValueError, match="rows"):
        scaling_viz.plot_held_out_evidence([], k=8)
    plt.close("all")



def test_paired_gains_figure_marks_each_runs_bar_at_three_of_its_standard_errors():
    import matplotlib.pyplot as plt

    rows = [("rlbook seed 1", "rlbook", 0.27, 0.04), ("TRL seed 1", "TRL", 0.10, 0.03)]
    ax = scaling_viz.plot_paired_gains(rows, recipe=("rlbook, mean of seeds", 0.2, 0.05, 0.35))
    bars = [line for line in ax.get_lines() if len(line.get_ydata()) == 2 and line.get_linewidth() == 2]
    assert [tuple(line.get_ydata()) for line in bars] == [(0.12, 0.12), (0.09, 0.09)]  # 3 × SE, not the gain
    assert [t.get_text() for t in ax.get_xticklabels()] == ["rlbook seed 1", "TRL seed 1", "rlbook, mean of seeds"]
    with pytest.raises(ValueError, match="rows"):
        scaling_viz.plot_paired_gains([("a", "rlbook", 0.1)])
    with pytest.raises(ValueError, match="recipe"):
        scaling_viz.plot_paired_gains(rows, recipe=(0.2, 0.05, 0.35))
    plt.close("all")

LLAMA_70B = scaling.HUB_SHAPES["meta-llama/Llama-3.1-70B"]
ROLLOUT_4K = dict(sequences=256, tokens_per_sequence=4096)


def test_tensor_parallelism_divides_what_zero_cannot_and_generation_needs_only_its_slice():
    one = scaling.training_memory(QWEN_7B, **ROLLOUT_4K)
    tp = scaling.training_memory(QWEN_7B, shards=8, tensor_parallel=4, **ROLLOUT_4K)
    for role in ("policy weights", "policy gradients", "Adam + fp32 master", "reference"):
        assert tp[role] == pytest.approx(one[role] / 8)
    for role in ("activations", "logits"):  # sequence parallelism, vocabulary-parallel output: / t only
        assert tp[role] == pytest.approx(one[role] / 4)
    # generation on a group of 4: each GPU holds 1/4 of the weights, owns 1/8
    assert tp["weights gathered for generation"] == pytest.approx(one["policy weights"] * (1 / 4 - 1 / 8))
    # 4 KV heads over 4 GPUs, the sequences over 2 groups
    assert tp["KV cache"] == pytest.approx(one["KV cache"] / 8)
    at_t = scaling.training_memory(QWEN_7B, shards=4, tensor_parallel=4, **ROLLOUT_4K)
    assert at_t["weights gathered for generation"] == 0.0


def test_with_fewer_kv_heads_than_gpus_each_gpu_keeps_a_copy_of_one():
    one = scaling.training_memory(QWEN_05B, **ROLLOUT_4K)  # 2 KV heads
    tp = scaling.training_memory(QWEN_05B, shards=8, tensor_parallel=8, **ROLLOUT_4K)
    assert tp["KV cache"] == pytest.approx(one["KV cache"] / 2)  # one head of two on each GPU, one group


def test_a_70b_model_fits_under_tensor_parallelism_and_not_without():
    with pytest.raises(ValueError, match="tensor_parallel=1"):
        scaling.gpus_needed(LLAMA_70B, lora_fraction=0.01, gradient_checkpointing=True, **ROLLOUT_4K)
    lora = scaling.gpus_needed(LLAMA_70B, tensor_parallel=8, lora_fraction=0.01, **ROLLOUT_4K)
    full = scaling.gpus_needed(LLAMA_70B, tensor_parallel=8, **ROLLOUT_4K)
    assert lora == 8 and full % 8 == 0 and 8 < full <= 64
    assert scaling.memory_total(scaling.training_memory(LLAMA_70B, shards=full, tensor_parallel=8, **ROLLOUT_4K)) <= 80
    assert scaling.memory_total(scaling.training_memory(LLAMA_70B, shards=full - 8, tensor_parallel=8,
                                                        **ROLLOUT_4K)) > 80


def test_the_kv_cache_is_an_engine_pool_and_the_rollout_streams_through_it_in_waves():
    one_wave = scaling.training_memory(QWEN_7B, **ROLLOUT_4K)
    pool = scaling.training_memory(QWEN_7B, in_flight=64, **ROLLOUT_4K)
    assert pool["KV cache"] == pytest.approx(one_wave["KV cache"] * 64 / 256)
    assert pool["KV cache"] * 2 ** 30 == 64 * 4096 * scaling.kv_bytes_per_token(QWEN_7B)
    for role in scaling.MEMORY_ROLES:  # the pool changes nothing else
        if role != "KV cache":
            assert pool[role] == one_wave[role]
    # a larger rollout takes more waves, not more memory; a pool larger than an engine's share holds the share
    assert scaling.training_memory(QWEN_7B, in_flight=64, sequences=1024, tokens_per_sequence=4096) == pool
    assert scaling.training_memory(QWEN_7B, in_flight=1024, **ROLLOUT_4K)["KV cache"] == one_wave["KV cache"]
    two_engines = scaling.training_memory(QWEN_7B, in_flight=64, shards=2, **ROLLOUT_4K)
    assert two_engines["KV cache"] == pool["KV cache"]  # each engine keeps its whole pool
    assert scaling.generation_waves(256, in_flight=64) == 4
    assert scaling.generation_waves(256, in_flight=64, engines=3) == 2
    assert scaling.generation_waves(256, in_flight=None) == 1
    # GPUs: with a fixed pool the KV cache no longer sets the count
    assert scaling.gpus_needed(QWEN_7B, lora_fraction=0.01, in_flight=64, **ROLLOUT_4K) == 1
    assert scaling.gpus_needed(QWEN_7B, lora_fraction=0.01, **ROLLOUT_4K) == 2
    table = scaling_viz.memory_table(["Qwen/Qwen2.5-7B"], settings={"full": {}, "LoRA": {"lora_fraction": 0.01}},
                                     plan_tensor_parallel=1, in_flight=64, **ROLLOUT_4K)
    assert table.loc[("Qwen2.5-7B", "LoRA"), "KV, one wave"] == pytest.approx(one_wave["KV cache"])
    assert table.loc[("Qwen2.5-7B", "LoRA"), "waves"] == 4  # one GPU, one engine
    assert table.loc[("Qwen2.5-7B", "full"), "waves"] == scaling.generation_waves(
        256, in_flight=64, engines=int(table.loc[("Qwen2.5-7B", "full"), "GPUs needed"]))
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="in_flight"):
            scaling.training_memory(QWEN_7B, in_flight=bad, **ROLLOUT_4K)
        with pytest.raises(ValueError, match="in_flight"):
            scaling.generation_waves(256, in_flight=bad)


def test_tensor_parallel_must_divide_the_gpus():
    for bad in (dict(shards=6, tensor_parallel=4), dict(tensor_parallel=0), dict(tensor_parallel=2.0)):
        with pytest.raises(ValueError, match="tensor_parallel"):
            scaling.training_memory(QWEN_7B, **ROLLOUT_4K, **{"shards": 8, **bad})


def test_the_memory_table_plans_gpus_at_a_stated_tensor_parallel_degree():
    table = scaling_viz.memory_table(["Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-70B"],
                                     settings={"full": {}, "LoRA": {"lora_fraction": 0.01}},
                                     plan_tensor_parallel={"Qwen/Qwen2.5-7B": 1, "meta-llama/Llama-3.1-70B": 8},
                                     **ROLLOUT_4K)
    assert table.loc[("Llama-3.1-70B", "LoRA"), "TP degree"] == 8
    assert table.loc[("Llama-3.1-70B", "LoRA"), "GPUs needed"] == 8
    assert table.loc[("Qwen2.5-7B", "full"), "GPUs needed"] == scaling.gpus_needed(QWEN_7B, **ROLLOUT_4K)
    with pytest.raises(ValueError, match="plan_tensor_parallel"):
        scaling_viz.memory_table(["Qwen/Qwen2.5-7B"], plan_tensor_parallel={"x": 1}, **ROLLOUT_4K)


def test_engine_curves_give_each_seed_of_an_engine_its_own_line_style():
    import matplotlib.pyplot as plt
    import pandas as pd

    frame = pd.DataFrame([{"engine": engine, "seed": seed, "step": step, "reward": 0.1 * step}
                          for engine, seeds in (("rlbook", (1, 2, 3)), ("TRL", (1,))) for seed in seeds
                          for step in (1, 2)])
    ax = scaling_viz.plot_engine_curves(frame, metric="reward")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert len({lines[f"rlbook, seed {s}"].get_linestyle() for s in (1, 2, 3)}) == 3
    assert lines["TRL, seed 1"].get_color() != lines["rlbook, seed 1"].get_color()
    assert all(float(tick).is_integer() for tick in ax.get_xticks())  # training steps are whole numbers
    plt.close("all")


def test_trls_sampler_scores_every_prompt_group_size_times_with_its_settings_untouched(tmp_path):
    from rlbook.tasks import get_task

    _tiny_model_folder(tmp_path)
    task = get_task("arithmetic", digits=1)
    examples = list(task.dataset(3, seed=0, split="test"))
    config = preset("grpo", kl_beta=0.0, lora=4, max_new_tokens=8, prompts_per_step=2, group_size=4)
    measured = scaling.trl_sampler_rewards(tmp_path, task, config, examples, seed=5)
    assert [len(row) for row in measured["correct"]] == [4, 4, 4]
    assert all(value in (0, 1) for row in measured["correct"] for value in row)
    settings = measured["settings"]
    assert (settings["temperature"], settings["top_p"], settings["top_k"], settings["repetition_penalty"],
            settings["max_new_tokens"]) == (config.temperature, 1.0, 0, 1.0, 8)
    assert measured == scaling.trl_sampler_rewards(tmp_path, task, config, examples, seed=5)  # seeded
    with pytest.raises(ValueError, match="examples"):
        scaling.trl_sampler_rewards(tmp_path, task, config, [])
    with pytest.raises(ValueError, match="seed"):
        scaling.trl_sampler_rewards(tmp_path, task, config, examples, seed=1.5)


def test_one_step_of_memory_is_measured_in_a_fresh_process_and_peaks_above_the_load(monkeypatch, tmp_path):
    config = preset("grpo", kl_beta=0.0, lora=4, max_new_tokens=8, prompts_per_step=2, group_size=4)
    measured = scaling.measure_step_memory("arith-base", "arithmetic", config, task_kwargs={"digits": 1})
    assert measured["before load"] > 0 and measured["peak in step"] >= measured["after load"]
    assert 0 < measured["trained parameters"] < measured["parameters"]
    assert measured["measured as"].startswith("process RSS") and "hidden_size" in measured["model config"]
    with pytest.raises(ValueError, match="device"):
        scaling.measure_step_memory("arith-base", "arithmetic", config, device="tpu")
    with pytest.raises(ValueError, match="model_name"):
        scaling.measure_step_memory("", "arithmetic", config)


def test_verl_dynamic_sampling_on_correctness_is_filter_groups_on_acc():
    overrides = scaling.verl_overrides(preset("dapo", dynamic_sampling="correct"))
    assert overrides["algorithm.filter_groups.enable"] is True
    assert overrides["algorithm.filter_groups.metric"] == "acc"


def test_a_wide_gated_mlp_keeps_more_activations_than_the_34_bytes_assume():
    assert scaling.gated_mlp_activation_coefficient(QWEN_7B) == pytest.approx(16 + 8 * 18944 / 3584)
    assert scaling.gated_mlp_activation_coefficient(LLAMA_70B) == pytest.approx(44.0)
    for shape in scaling.HUB_SHAPES.values():
        assert scaling.gated_mlp_activation_coefficient(shape) > scaling.ACTIVATION_BYTES_PER_LAYER
    # a gated MLP 2.25 h wide and no dropout keeps what the 4h GELU MLP with dropout keeps, 34
    assert scaling.gated_mlp_activation_coefficient({**QWEN_7B, "intermediate_size": 8064}) == 34


def test_sampler_logprob_mismatch_is_float_noise_in_fp32_and_larger_in_bf16():
    from rlbook.rollout import sample

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer).eval()
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=4, max_new_tokens=12, temperature=0.7, seed=0)
    mismatch = scaling.sampler_logprob_mismatch(model, rollout, temperature=0.7)
    assert mismatch["tokens"] == int(rollout.completion_mask.sum())
    assert mismatch["fp32"]["token |Δ| max"] < 1e-4  # the same weights and precision: the same numbers
    assert mismatch["bf16"]["token |Δ| mean"] > 10 * mismatch["fp32"]["token |Δ| mean"]
    assert 0.0 <= mismatch["bf16"]["tokens with ratio outside [0.5, 2]"] <= 1.0
    with pytest.raises(ValueError, match="temperature"):
        scaling.sampler_logprob_mismatch(model, rollout, temperature=0)


def test_recording_keeps_the_tasks_rewards_and_records_the_scored_questions():
    from rlbook.tasks import get_task

    task = get_task("plain_addition", min_digits=1, max_digits=2)
    rows = list(task.dataset(3, seed=0, split="train"))
    recorder = scaling.recording(task)
    assert isinstance(recorder, type(task)) and not hasattr(task, "scored_questions")
    assert [recorder.reward(row["answer"], row) for row in rows] == [task.reward(row["answer"], row) for row in rows]
    assert recorder.scored_questions == [row["question"] for row in rows]
    prompts = [[{"role": "user", "content": row["question"]}] for row in rows]
    rewarded = recorder.reward_fn()(prompts=prompts, completions=["0"] * 3, answer=[row["answer"] for row in rows])
    assert rewarded == task.reward_fn()(prompts=prompts, completions=["0"] * 3, answer=[row["answer"] for row in rows])
    assert recorder.scored_questions == [row["question"] for row in rows] * 2
    assert recorder.scored_completions == [row["answer"] for row in rows] + ["0"] * 3
    chats = [[{"role": "assistant", "content": "7"}]] * 3
    recorder.reward_fn()(prompts=prompts, completions=chats, answer=[row["answer"] for row in rows])
    assert recorder.scored_completions[-3:] == ["7"] * 3 and len(recorder.scored_questions) == 9
