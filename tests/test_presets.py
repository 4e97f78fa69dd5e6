"""Tests of rlbook.trainers.config: presets are valid configurations; bad ones fail at construction."""

from __future__ import annotations

import warnings

import pytest

from rlbook.losses.policy import VARIANT_DEFAULTS
from rlbook.trainers import PRESETS, OnlineConfig, preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_config(name):
    config = preset(name)
    assert isinstance(config, OnlineConfig) and config.name == name
    assert OnlineConfig.from_dict(config.to_dict()) == config


def test_presets_set_their_papers_choices():
    assert preset("ppo").has_critic and preset("ppo").kl_placement == "reward"
    assert preset("grpo").kl_beta == 0.04 and preset("grpo").kl_placement == "loss"
    assert preset("dr_grpo").advantage == "dr_grpo" and preset("dr_grpo").kl_beta == 0
    dapo = preset("dapo", max_new_tokens=40)
    assert dapo.dynamic_sampling and dapo.overlong == (40, 10)
    assert VARIANT_DEFAULTS[dapo.variant]["eps_high"] == 0.28
    assert preset("rloo").advantage == "rloo" and preset("rloo").variant == "reinforce"
    assert preset("grpo", lr=1e-3).lr == 1e-3


@pytest.mark.parametrize("field, settings", [
    ("group_size", dict(advantage="grpo", group_size=1)),
    ("group_size", dict(advantage="rloo", group_size=1)),
    ("eps_high", dict(variant="ppo", eps_low=0.3, eps_high=0.2)),
    ("eps_high", dict(variant="gspo", eps_high=1e-4)),
    ("variant", dict(variant="trpo")),
    ("advantage", dict(advantage="vtrace")),
    ("lr", dict(lr=-1e-4)),
    ("lr", dict(lr=0.0)),
    ("kl_placement", dict(kl_placement="both")),
    ("kl_estimator", dict(kl_estimator="k4")),
    ("tau_pos", dict(variant="grpo", tau_pos=1.0)),
    ("dual_clip", dict(variant="ppo", dual_clip=0.5)),
    ("overlong", dict(overlong=(8, 16))),
    ("minibatch_size", dict(minibatch_size=0)),
    ("lam", dict(lam=1.5)),
    ("gmpo", dict(variant="gmpo", advantage="gae", group_size=1)),
    ("dynamic_sampling", dict(advantage="none", group_size=1, dynamic_sampling=True)),
])
def test_bad_configurations_name_the_field(field, settings):
    with pytest.raises(ValueError, match=field):
        OnlineConfig(**settings)


def test_unknown_preset_and_unknown_override_raise():
    with pytest.raises(ValueError, match="name"):
        preset("trpo")
    with pytest.raises(ValueError, match="learning_rate"):
        preset("grpo", learning_rate=1e-3)
    with pytest.raises(ValueError, match="group_size"):
        preset("grpo", group_size=1)


@pytest.mark.parametrize("estimator", ["k2", "k3", "k3+"])
def test_a_non_k1_estimator_in_the_reward_warns(estimator):
    # Only k1 placed in the reward gives the reverse-KL gradient (lesson 02, §6).
    with pytest.warns(UserWarning, match="only 'k1' in the reward"):
        OnlineConfig(kl_beta=0.05, kl_placement="reward", kl_estimator=estimator)


def test_k1_in_the_reward_the_loss_placement_and_zero_beta_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preset("ppo")
        preset("grpo")
        OnlineConfig(kl_beta=0.0, kl_placement="reward", kl_estimator="k3")
