"""The online surrogate losses and the single entry point policy_loss (rlbook.losses.policy)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.aggregation import aggregate
from rlbook.kl import k3
from rlbook.losses import VARIANT_DEFAULTS, VARIANTS, clipped_surrogate, policy_loss, value_loss

MAX_LEN = {"dr_grpo": {"max_len": 8}}


def _batch(seed=0, batch=4, width=5, spread=0.1):
    generator = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(batch, width, generator=generator, dtype=torch.float64) * 2).requires_grad_()
    old_logp = logp.detach() + spread * torch.randn(batch, width, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.2], dtype=torch.float64)[:batch]
    mask = torch.ones(batch, width)
    mask[1, 3:] = 0
    mask[3, 2:] = 0
    return logp, old_logp, advantages, mask


def _grad(loss, logp):
    (grad,) = torch.autograd.grad(loss, logp, retain_graph=True)
    return grad


def test_clipped_surrogate_worked_examples():
    ratio = torch.tensor([1.5, 0.5, 1.5, 0.5, 1.1, 5.0])
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0, -1.0])
    loss = clipped_surrogate(ratio, advantages, eps_low=0.2, eps_high=0.2)
    # min(rA, clip(r)A): clipped at 1.2; pessimistic 0.5; pessimistic −1.5; clipped −0.8; inside 1.1; −5.
    assert torch.allclose(loss, -torch.tensor([1.2, 0.5, -1.5, -0.8, 1.1, -5.0]))
    dual = clipped_surrogate(ratio, advantages, eps_low=0.2, eps_high=0.2, dual_clip=3.0)
    assert dual[-1].item() == pytest.approx(3.0)  # max(−5, 3 · (−1)) = −3
    assert torch.allclose(dual[:-1], loss[:-1])


def test_clipped_tokens_get_zero_gradient_and_the_others_do_not():
    ratio = torch.tensor([1.5, 0.5, 1.5, 0.5, 1.1, 5.0], requires_grad=True)
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0, -1.0])
    clipped_surrogate(ratio, advantages, eps_low=0.2, eps_high=0.2, dual_clip=3.0).sum().backward()
    assert torch.allclose(ratio.grad, torch.tensor([0.0, -1.0, 1.0, 0.0, -1.0, 0.0]))


@pytest.mark.parametrize("variant", VARIANTS)
def test_on_policy_every_variant_has_the_policy_gradient(variant):
    """With r = 1 (old = current policy) PPO, GRPO, DAPO, GSPO, GMPO, SAPO, CISPO all give REINFORCE's gradient."""
    logp, _, advantages, mask = _batch()
    same_aggregation = {"aggregation": VARIANT_DEFAULTS[variant]["aggregation"], **MAX_LEN.get(variant, {})}
    loss, metrics = policy_loss(logp, logp.detach(), advantages, mask, variant=variant, **MAX_LEN.get(variant, {}))
    reference, _ = policy_loss(logp, logp.detach(), advantages, mask, variant="reinforce", **same_aggregation)
    assert torch.allclose(_grad(loss, logp), _grad(reference, logp), atol=1e-12)
    assert metrics["ratio_mean"] == pytest.approx(1.0) and metrics["clip_frac"] == 0.0


def test_published_defaults():
    assert VARIANT_DEFAULTS["ppo"]["eps_low"] == 0.2 and VARIANT_DEFAULTS["grpo"]["eps_high"] == 0.2
    assert (VARIANT_DEFAULTS["dapo"]["eps_low"], VARIANT_DEFAULTS["dapo"]["eps_high"]) == (0.2, 0.28)
    assert (VARIANT_DEFAULTS["gspo"]["eps_low"], VARIANT_DEFAULTS["gspo"]["eps_high"]) == (3e-4, 4e-4)
    assert (VARIANT_DEFAULTS["gmpo"]["eps_low"], VARIANT_DEFAULTS["gmpo"]["eps_high"]) == (0.4, 0.4)
    assert (VARIANT_DEFAULTS["sapo"]["tau_pos"], VARIANT_DEFAULTS["sapo"]["tau_neg"]) == (1.0, 1.05)
    assert (VARIANT_DEFAULTS["cispo"]["eps_low"], VARIANT_DEFAULTS["cispo"]["eps_high"]) == (None, 4.0)
    assert VARIANT_DEFAULTS["dapo"]["aggregation"] == "token_mean"
    assert VARIANT_DEFAULTS["grpo"]["aggregation"] == "seq_mean_token_mean"
    assert VARIANT_DEFAULTS["dr_grpo"]["aggregation"] == "seq_mean_token_sum_norm"


def _one_token(ratio, advantage):
    old_logp = torch.zeros(1, 1, dtype=torch.float64)
    logp = torch.full((1, 1), float(torch.log(torch.tensor(ratio))), dtype=torch.float64, requires_grad=True)
    return logp, old_logp, torch.tensor([advantage], dtype=torch.float64), torch.ones(1, 1)


def test_clip_higher_lets_dapo_push_where_grpo_stops():
    logp, old_logp, advantages, mask = _one_token(1.25, 1.0)
    grpo, grpo_metrics = policy_loss(logp, old_logp, advantages, mask, variant="grpo")
    dapo, dapo_metrics = policy_loss(logp, old_logp, advantages, mask, variant="dapo")
    assert _grad(grpo, logp).item() == 0.0 and grpo_metrics["clip_frac_high"] == 1.0
    assert _grad(dapo, logp).item() == pytest.approx(-1.25) and dapo_metrics["clip_frac_high"] == 0.0


def test_cispo_keeps_a_gradient_where_ppo_clips_it_to_zero():
    logp, old_logp, advantages, mask = _one_token(1.5, 1.0)
    ppo, _ = policy_loss(logp, old_logp, advantages, mask, variant="ppo")
    cispo, metrics = policy_loss(logp, old_logp, advantages, mask, variant="cispo")
    assert _grad(ppo, logp).item() == 0.0
    assert _grad(cispo, logp).item() == pytest.approx(-1.5)  # −sg[min(r, 5)] · A
    capped, capped_metrics = policy_loss(logp, old_logp, advantages, mask, variant="cispo", eps_high=0.2)
    assert _grad(capped, logp).item() == pytest.approx(-1.2) and capped_metrics["clip_frac_high"] == 1.0
    assert metrics["clip_frac_high"] == 0.0


def test_sapo_attenuates_smoothly_instead_of_cutting():
    # The unclipped surrogate r·A has gradient r·A·∇log π; SAPO's is f'(r)·r·A·∇log π. Their quotient
    # f'(r) is 1 on-policy and decays smoothly, never to exactly 0 (PPO's hard clip jumps to 0 at 1.2).
    relative = []
    for ratio in (1.0, 1.25, 2.0, 4.0):
        logp, old_logp, advantages, mask = _one_token(ratio, 1.0)
        loss, _ = policy_loss(logp, old_logp, advantages, mask, variant="sapo")
        relative.append(-_grad(loss, logp).item() / ratio)
    assert relative[0] == pytest.approx(1.0)
    assert all(0 < later < earlier for earlier, later in zip(relative, relative[1:]))
    assert relative[-1] == pytest.approx(4 * 0.9526 * 0.0474, abs=1e-3)  # 4σ(3)(1 − σ(3))


def test_gspo_clips_whole_sequences():
    old_logp = torch.zeros(2, 3, dtype=torch.float64)
    logp = torch.tensor([[0.0015, 0.0, 0.0], [0.0003, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    advantages = torch.tensor([1.0, 1.0], dtype=torch.float64)
    loss, metrics = policy_loss(logp, old_logp, advantages, torch.ones(2, 3), variant="gspo")
    grad = _grad(loss, logp)
    # Sequence 0: s = e^{0.0015/3} > 1 + 4e-4 → every token clipped; sequence 1: s = e^{1e-4}, none.
    assert torch.equal(grad[0], torch.zeros(3, dtype=torch.float64))
    assert (grad[1] < 0).all()
    assert metrics["clip_frac_high"] == pytest.approx(0.5)


def test_gspo_equals_its_sequence_formula_and_gspo_token_matches_with_equal_token_advantages():
    logp, old_logp, advantages, mask = _batch(seed=3, spread=3e-4)
    loss, _ = policy_loss(logp, old_logp, advantages, mask, variant="gspo")
    log_s = ((logp - old_logp) * mask).sum(1) / mask.sum(1)
    s = log_s.exp()
    sequence_loss = -torch.minimum(s * advantages, s.clamp(1 - 3e-4, 1 + 4e-4) * advantages).mean()
    assert loss.item() == pytest.approx(sequence_loss.item(), rel=1e-10)
    assert torch.allclose(_grad(loss, logp), _grad(sequence_loss, logp), atol=1e-12)
    per_token = advantages.unsqueeze(1).expand_as(logp)
    token_loss, _ = policy_loss(logp, old_logp, per_token, mask, variant="gspo")
    assert torch.allclose(_grad(token_loss, logp), _grad(sequence_loss, logp), atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(VARIANTS), st.integers(1, 3), st.integers(0, 2**16))
def test_appending_padding_never_changes_the_loss_or_gradient(variant, extra, seed):
    logp, old_logp, advantages, mask = _batch(seed=seed, spread=0.3)
    kwargs = {**MAX_LEN.get(variant, {}), "ref_logp": old_logp - 0.1, "beta": 0.05}
    loss, _ = policy_loss(logp, old_logp, advantages, mask, variant=variant, **kwargs)
    generator = torch.Generator().manual_seed(seed + 1)
    garbage = -5 * torch.rand(logp.shape[0], extra, generator=generator, dtype=torch.float64)
    padded_logp = torch.cat([logp, garbage], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(logp.shape[0], extra)], dim=1)
    padded_old = torch.cat([old_logp, garbage + 3], dim=1)
    kwargs["ref_logp"] = torch.cat([kwargs["ref_logp"], garbage - 2], dim=1)
    padded, _ = policy_loss(padded_logp, padded_old, advantages, padded_mask, variant=variant, **kwargs)
    assert padded.item() == pytest.approx(loss.item(), rel=1e-9, abs=1e-12)
    grad = _grad(padded, logp)
    assert torch.allclose(grad, _grad(loss, logp), atol=1e-12)


@pytest.mark.parametrize("variant", VARIANTS)
def test_permuting_responses_does_not_change_the_loss(variant):
    logp, old_logp, advantages, mask = _batch(seed=5, spread=0.3)
    order = torch.tensor([2, 0, 3, 1])
    loss, _ = policy_loss(logp, old_logp, advantages, mask, variant=variant, **MAX_LEN.get(variant, {}))
    permuted, _ = policy_loss(logp[order], old_logp[order], advantages[order], mask[order], variant=variant, **MAX_LEN.get(variant, {}))
    assert permuted.item() == pytest.approx(loss.item(), rel=1e-10)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "gmpo"])
def test_per_token_advantages_equal_to_the_sequence_advantage_give_the_same_loss(variant):
    logp, old_logp, advantages, mask = _batch(seed=6, spread=0.3)
    kwargs = MAX_LEN.get(variant, {})
    loss, _ = policy_loss(logp, old_logp, advantages, mask, variant=variant, **kwargs)
    expanded, _ = policy_loss(logp, old_logp, advantages.unsqueeze(1).expand_as(logp), mask, variant=variant, **kwargs)
    assert expanded.item() == pytest.approx(loss.item(), rel=1e-10)


def test_kl_in_loss_adds_beta_times_aggregated_k3():
    logp, old_logp, advantages, mask = _batch(seed=7)
    ref_logp = old_logp - 0.2
    base, _ = policy_loss(logp, old_logp, advantages, mask, variant="grpo")
    with_kl, metrics = policy_loss(logp, old_logp, advantages, mask, variant="grpo", ref_logp=ref_logp, beta=0.04)
    expected = base + 0.04 * aggregate(k3(logp, ref_logp), mask, "seq_mean_token_mean")
    assert with_kl.item() == pytest.approx(expected.item(), rel=1e-10)
    assert metrics["kl"] == pytest.approx((k3(logp, ref_logp).detach() * mask).sum().item() / mask.sum().item())
    logged_only, logged_metrics = policy_loss(logp, old_logp, advantages, mask, variant="grpo", ref_logp=ref_logp)
    assert logged_only.item() == pytest.approx(base.item()) and "kl" in logged_metrics


def test_entropy_bonus_subtracts_coef_times_mean_entropy():
    logp, old_logp, advantages, mask = _batch(seed=8)
    entropy = torch.rand(logp.shape, dtype=torch.float64)
    base, _ = policy_loss(logp, old_logp, advantages, mask)
    bonus, metrics = policy_loss(logp, old_logp, advantages, mask, entropy=entropy, entropy_coef=0.01)
    mean_entropy = (entropy * mask).sum() / mask.sum()
    assert bonus.item() == pytest.approx(base.item() - 0.01 * mean_entropy.item(), rel=1e-10)
    assert metrics["entropy"] == pytest.approx(mean_entropy.item())


def test_decoupled_objective_weights_tokens_by_behaviour_ratio():
    logp, prox_logp, advantages, mask = _batch(seed=9)
    plain, _ = policy_loss(logp, prox_logp, advantages, mask, variant="ppo")
    same, metrics = policy_loss(logp, prox_logp, advantages, mask, variant="ppo", behaviour_logp=prox_logp)
    assert same.item() == pytest.approx(plain.item()) and metrics["behaviour_weight_mean"] == pytest.approx(1.0)
    stale = prox_logp - 0.5  # behaviour policy gave these tokens less probability: weight e^{0.5}
    weighted, _ = policy_loss(logp, prox_logp, advantages, mask, variant="ppo", behaviour_logp=stale)
    assert weighted.item() == pytest.approx(plain.item() * torch.e**0.5, rel=1e-10)
    dropped, _ = policy_loss(logp, prox_logp, advantages, mask, variant="ppo", behaviour_logp=stale, behaviour_weight_cap=1.5)
    assert dropped.item() == 0.0


def test_metrics_report_clip_fractions_and_ratio_stats():
    old_logp = torch.zeros(2, 2, dtype=torch.float64)
    ratios = torch.tensor([[1.5, 1.0], [0.5, 1.0]], dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    _, metrics = policy_loss(ratios.log(), old_logp, advantages, torch.ones(2, 2), variant="ppo")
    assert metrics["clip_frac_low"] == 0.25 and metrics["clip_frac_high"] == 0.25 and metrics["clip_frac"] == 0.5
    assert (metrics["ratio_min"], metrics["ratio_max"]) == (0.5, 1.5) and metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["approx_kl"] > 0 and isinstance(metrics["policy_loss"], float)


def test_value_loss_unclipped_and_clipped():
    values = torch.tensor([[1.0, 3.0]])
    old_values = torch.tensor([[0.0, 2.0]])
    returns = torch.tensor([[2.0, 2.0]])
    mask = torch.ones(1, 2)
    assert value_loss(values, old_values, returns, mask).item() == pytest.approx(0.5 * (1 + 1) / 2)
    # clip 0.5: V_clip = [0.5, 2.5] → (V_clip − R)² = [2.25, 0.25]; max with [1, 1] → [2.25, 1].
    assert value_loss(values, old_values, returns, mask, clip_eps=0.5).item() == pytest.approx(0.5 * 3.25 / 2)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"variant": "trpo"}, "variant"),
        ({"variant": "grpo", "eps_high": -0.1}, "eps_high"),
        ({"variant": "dapo", "eps_low": float("nan")}, "eps_low"),
        ({"variant": "grpo", "tau_pos": 1.0}, "tau_pos"),
        ({"variant": "sapo", "eps_high": 0.2}, "eps_high"),
        ({"variant": "sapo", "tau_neg": 0.0}, "tau_neg"),
        ({"variant": "ppo", "dual_clip": 0.5}, "dual_clip"),
        ({"variant": "dr_grpo"}, "max_len"),
        ({"variant": "grpo", "aggregation": "mean"}, "aggregation"),
        ({"variant": "grpo", "beta": 0.1}, "ref_logp"),
        ({"variant": "grpo", "beta": -0.1, "ref_logp": torch.zeros(4, 5)}, "beta"),
        ({"variant": "grpo", "ref_logp": torch.zeros(4, 4)}, "ref_logp"),
        ({"variant": "grpo", "kl_estimator": "k5"}, "kl_estimator"),
        ({"variant": "grpo", "entropy_coef": 0.1}, "entropy"),
        ({"variant": "grpo", "behaviour_weight_cap": 2.0}, "behaviour_logp"),
    ],
)
def test_bad_options_name_the_argument(kwargs, argument):
    logp, old_logp, advantages, mask = _batch()
    with pytest.raises(ValueError, match=argument):
        policy_loss(logp, old_logp, advantages, mask, **kwargs)


@pytest.mark.parametrize(
    "change, argument",
    [
        (lambda a: {**a, "old_logp": a["old_logp"][:, :3]}, "old_logp"),
        (lambda a: {**a, "logp": a["logp"].detach()[0]}, "logp"),
        (lambda a: {**a, "logp": a["logp"].detach().bool()}, "logp"),
        (lambda a: {**a, "old_logp": torch.full_like(a["old_logp"], float("nan"))}, "old_logp"),
        (lambda a: {**a, "advantages": torch.zeros(3)}, "advantages"),
        (lambda a: {**a, "advantages": torch.tensor([1.0, float("inf"), 0.0, 0.0])}, "advantages"),
        (lambda a: {**a, "mask": torch.zeros(4, 5)}, "mask"),
        (lambda a: {**a, "mask": torch.ones(4, 6)}, "mask"),
        (lambda a: {**a, "mask": torch.full((4, 5), 2.0)}, "mask"),
    ],
)
def test_bad_tensors_name_the_argument(change, argument):
    logp, old_logp, advantages, mask = _batch()
    arguments = change({"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask})
    with pytest.raises(ValueError, match=argument):
        policy_loss(**arguments)


def test_gmpo_needs_sequence_advantages():
    logp, old_logp, advantages, mask = _batch()
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logp, old_logp, advantages.unsqueeze(1).expand_as(logp), mask, variant="gmpo")
