"""rlbook.gradients: the closed-form output-layer gradients match autograd; the estimators and their statistics."""

import copy

import numpy as np
import pytest
import torch

from rlbook.advantages import group_advantages
from rlbook.gradients import (
    BASELINES,
    baseline_statistics,
    completion_hidden_states,
    critic_explained_variance,
    fit_critic_head,
    gradient_statistics,
    group_gradient_estimates,
    grpo_length_factor,
    heuristic_noise_ratios,
    noise_ratio,
    optimal_baseline_margin,
    optimal_constant_baseline,
    output_layer_gradients,
    prompt_variances,
    value_head_outputs,
)
from rlbook.evidence import ratio_se
from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.rollout import completion_logprobs, sample
from rlbook.trainers import Critic


@pytest.fixture(scope="module")
def batch():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test", seed=1).eval()
    rollout = sample(model, tokenizer, ["1+2", "3+4"], num_samples=3, max_new_tokens=6, seed=0)
    return model, tokenizer, rollout


def test_output_layer_gradients_match_autograd(batch):
    model, _, r = batch
    weights = torch.linspace(-1.0, 2.0, len(r))
    closed_form = output_layer_gradients(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask,
                                         token_weights=weights, temperature=0.7, batch_size=4)
    untied = copy.deepcopy(model)
    untied.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    for i in range(len(r)):
        rows = slice(i, i + 1)
        logp = completion_logprobs(untied, r.prompt_ids[rows], r.prompt_mask[rows], r.completion_ids[rows],
                                   r.completion_mask[rows], temperature=0.7)
        (gradient,) = torch.autograd.grad(weights[i] * logp.sum(), untied.lm_head.weight)
        assert torch.allclose(closed_form[i].float(), gradient.flatten(), atol=1e-5)


def test_per_token_weights_and_bad_shapes(batch):
    model, _, r = batch
    args = (model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    per_row = output_layer_gradients(*args, token_weights=torch.full((len(r),), 2.0))
    per_token = output_layer_gradients(*args, token_weights=torch.full(r.completion_ids.shape, 2.0))
    assert torch.allclose(per_row, per_token)
    with pytest.raises(ValueError, match="token_weights"):
        output_layer_gradients(*args, token_weights=torch.ones(len(r) + 1))
    with pytest.raises(ValueError, match="temperature"):
        output_layer_gradients(*args, temperature=0.0)


def test_rloo_estimate_is_g_over_g_minus_1_times_the_mean_baseline():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(24, 5, generator=generator, dtype=torch.float64)
    rewards = (torch.rand(24, generator=generator) > 0.5).double()
    for g in (2, 3, 4, 6):
        rloo = group_gradient_estimates(scores, rewards, g, baseline="rloo")
        mean = group_gradient_estimates(scores, rewards, g, baseline="mean")
        assert torch.allclose(rloo, g / (g - 1) * mean)
    none = group_gradient_estimates(scores, rewards, 4, baseline="none")
    assert torch.allclose(none, (rewards[:, None] * scores).view(-1, 4, 5).mean(1))
    grpo = group_gradient_estimates(scores, rewards, 4, baseline="grpo")
    expected = (group_advantages(rewards, 4)[:, None] * scores).view(-1, 4, 5).mean(1)
    assert torch.allclose(grpo, expected)


def test_estimator_errors():
    scores, rewards = torch.zeros(8, 3), torch.zeros(8)
    with pytest.raises(ValueError, match="value_terms"):
        group_gradient_estimates(scores, rewards, 4, baseline="critic")
    with pytest.raises(ValueError, match="prompt_values"):
        group_gradient_estimates(scores, rewards, 4, baseline="value")
    with pytest.raises(ValueError, match="prompt_values"):
        group_gradient_estimates(scores, rewards, 4, baseline="value", prompt_values=torch.zeros(7))
    with pytest.raises(ValueError, match="group_size"):
        group_gradient_estimates(scores, rewards, 3, baseline="rloo")
    with pytest.raises(ValueError, match="baseline"):
        group_gradient_estimates(scores, rewards, 4, baseline="median")
    with pytest.raises(ValueError, match="rewards"):
        group_gradient_estimates(scores, torch.zeros(7), 4)


def test_statistics_of_a_known_estimator():
    # Estimates = reference + unit Gaussian noise in D dims: variance ≈ D / P per batch, scale ≈ 1.
    generator = torch.Generator().manual_seed(1)
    prompts, groups, dims = 4, 4000, 3
    reference = torch.tensor([3.0, 0.0, 4.0], dtype=torch.float64)
    estimates = reference + torch.randn(prompts * groups, dims, generator=generator, dtype=torch.float64)
    stats = gradient_statistics(estimates, reference, n_prompts=prompts)
    assert stats["variance"] == pytest.approx(dims / prompts, rel=0.05)
    assert stats["scale"] == pytest.approx(1.0, abs=0.01)
    assert stats["relative_bias"] < 3 * stats["mean_noise"] + 1e-3
    # Each group's projection on ∇J/‖∇J‖² has std 1/‖∇J‖ = 0.2: the scale's standard error is 0.2/√(P·M).
    assert stats["scale_noise"] == pytest.approx(0.2 / (prompts * groups) ** 0.5, rel=0.05)
    assert abs(stats["scale"] - 1) < 4 * stats["scale_noise"]
    shrunk = gradient_statistics(0.5 * estimates, reference, n_prompts=prompts)
    assert shrunk["scale"] == pytest.approx(0.5, abs=0.01)
    assert shrunk["relative_variance"] == pytest.approx(stats["relative_variance"])
    with pytest.raises(ValueError, match="reference"):
        gradient_statistics(estimates, torch.zeros(2), n_prompts=prompts)


def test_prompt_variances_by_hand_and_their_sum_is_the_batch_variance():
    # Prompt 0's groups: (0, 0), (2, 0) → mean (1, 0), tr Cov = (1 + 1) / (2 − 1) = 2; prompt 1's are equal → 0.
    estimates = torch.tensor([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0], [5.0, 5.0]], dtype=torch.float64)
    assert prompt_variances(estimates, n_prompts=2).tolist() == [2.0, 0.0]
    assert prompt_variances(estimates.view(2, 2, 2), n_prompts=2).tolist() == [2.0, 0.0]   # (P, M, D) as well
    generator = torch.Generator().manual_seed(3)
    noisy = torch.randn(3 * 50, 4, generator=generator, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5, 1.0])
    stats = gradient_statistics(noisy, torch.ones(4, dtype=torch.float64), n_prompts=3)
    assert float(prompt_variances(noisy, n_prompts=3).sum()) / 3**2 == pytest.approx(stats["variance"])
    with pytest.raises(ValueError, match="n_prompts"):
        prompt_variances(estimates, n_prompts=3)
    with pytest.raises(ValueError, match="at least 2 groups"):
        prompt_variances(estimates, n_prompts=4)


def test_baseline_statistics_and_critic(batch):
    model, _, r = batch
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    critic = Critic(model)
    explained = fit_critic_head(critic, *args, rewards, ridge=1e-2)
    assert 0.0 <= explained <= 1.0
    with torch.no_grad():
        values = critic(*args)
    assert values.abs().sum() > 0  # the head is no longer zero
    hidden = completion_hidden_states(model, *args, batch_size=4)
    assert torch.allclose(value_head_outputs(critic, hidden, r.completion_mask), values, atol=1e-6)
    scores = output_layer_gradients(model, *args)
    assert torch.allclose(output_layer_gradients(model, *args, hidden_states=hidden), scores, atol=1e-8)
    assert critic_explained_variance(values, rewards, r.completion_mask) == pytest.approx(explained, abs=1e-5)
    refit = Critic(model)
    assert fit_critic_head(refit, *args, rewards, ridge=1e-2, hidden_states=hidden) == pytest.approx(explained, abs=1e-6)
    with pytest.raises(ValueError, match="hidden_states"):
        output_layer_gradients(model, *args, hidden_states=hidden[:, :-1])
    value_terms = output_layer_gradients(model, *args, token_weights=values)
    reference = group_gradient_estimates(scores, rewards, 3, baseline="rloo").mean(0)
    stats = baseline_statistics(scores.repeat(2, 1), rewards.repeat(2), reference, group_size=3, n_prompts=2,
                                value_terms=value_terms.repeat(2, 1), prompt_values=torch.full((12,), 0.5))
    assert set(stats) == set(BASELINES)
    assert all(stats[name]["scale_noise"] >= 0 for name in stats)
    assert "critic" not in baseline_statistics(scores, rewards, reference, group_size=1, n_prompts=2,
                                               baselines=("none", "critic"))


def test_value_baseline_subtracts_the_prompt_value():
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(12, 4, generator=generator, dtype=torch.float64)
    rewards = (torch.rand(12, generator=generator) > 0.5).double()
    values = torch.tensor([0.25, 0.75]).repeat_interleave(6)
    value = group_gradient_estimates(scores, rewards, 3, baseline="value", prompt_values=values)
    assert torch.allclose(value, ((rewards - values)[:, None] * scores).view(-1, 3, 4).mean(1))
    # A constant added to every reward moves the no-baseline estimate, never a group baseline's.
    for baseline in ("mean", "rloo", "grpo"):
        shifted = group_gradient_estimates(scores, rewards + 1.0, 3, baseline=baseline)
        assert torch.allclose(shifted, group_gradient_estimates(scores, rewards, 3, baseline=baseline))
    none_shifted = group_gradient_estimates(scores, rewards + 1.0, 3, baseline="none")
    assert not torch.allclose(none_shifted, group_gradient_estimates(scores, rewards, 3, baseline="none"))


def test_reference_noise_adds_in_quadrature():
    generator = torch.Generator().manual_seed(4)
    reference = torch.tensor([1.0, 2.0], dtype=torch.float64)
    estimates = reference + torch.randn(2 * 30, 2, generator=generator, dtype=torch.float64)
    plain = gradient_statistics(estimates, reference, n_prompts=2)
    assert plain["scale_se"] == pytest.approx(plain["scale_noise"])
    noisy = gradient_statistics(estimates, reference, n_prompts=2, reference_noise=0.03)
    assert noisy["scale_se"] == pytest.approx((plain["scale_noise"] ** 2 + 0.03**2) ** 0.5)
    assert noisy["scale"] == plain["scale"]
    with pytest.raises(ValueError, match="reference_noise"):
        gradient_statistics(estimates, reference, n_prompts=2, reference_noise=-1.0)


def test_noise_ratio_is_the_variance_ratio_with_ratio_se_for_a_shared_mean():
    # Two estimators with the same mean on every prompt: the noise-to-signal ratio is the ratio of the summed
    # per-prompt variances, and the jackknife's SE agrees with the delta method's to first order.
    generator = torch.Generator().manual_seed(5)
    prompts, groups = 60, 6
    spread = 0.5 + torch.rand(prompts, 1, 1, generator=generator, dtype=torch.float64)
    centre = torch.randn(prompts, 1, 3, generator=generator, dtype=torch.float64) + 4
    noise = torch.randn(prompts, groups, 3, generator=generator, dtype=torch.float64)
    a = (centre + 1.5 * spread * noise).reshape(-1, 3)
    b = (centre + spread * (noise + 0.5 * torch.randn(prompts, groups, 3, generator=generator,
                                                       dtype=torch.float64))).reshape(-1, 3)
    # the same per-prompt means for both, so the signals cancel exactly
    a = (a.view(prompts, groups, 3) - a.view(prompts, groups, 3).mean(1, keepdim=True) + centre).reshape(-1, 3)
    b = (b.view(prompts, groups, 3) - b.view(prompts, groups, 3).mean(1, keepdim=True) + centre).reshape(-1, 3)
    reference = centre.mean(0).reshape(-1)
    stats_a = gradient_statistics(a, reference, n_prompts=prompts)
    stats_b = gradient_statistics(b, reference, n_prompts=prompts)
    ratio, se = noise_ratio(stats_a, stats_b)
    delta_ratio, delta_se = ratio_se(stats_a["prompt_variances"], stats_b["prompt_variances"])
    assert ratio == pytest.approx(delta_ratio)
    assert se == pytest.approx(delta_se, rel=0.1)
    assert noise_ratio(stats_a, stats_a) == pytest.approx((1.0, 0.0))
    with pytest.raises(ValueError, match="gradient_statistics"):
        noise_ratio({"variance": 1.0}, stats_b)


def test_heuristic_noise_ratios_by_hand():
    # k = 1: the plain heuristic of §1 — value 1 − p, RLOO (1 − p) G/(G − 1), an offset of 1 (1 + 3p)/p.
    plain = heuristic_noise_ratios(0.25, 1.0, (2, 4))
    assert plain["value"] == pytest.approx(0.75)
    assert plain["rloo"] == pytest.approx({2: 1.5, 4: 1.0})
    assert plain["offset"] == pytest.approx(1.75 / 0.25)
    # k = 2 by hand at p = 0.5, G = 2: v = 0.25; (0.25 + 0.25) + 0.5 (0.25 + 0.25) 2 / 0.5 = 1.5
    skewed = heuristic_noise_ratios(0.5, 2.0, (2,))
    assert skewed["rloo"][2] == pytest.approx(1.5) and skewed["value"] == pytest.approx(0.25 + 0.5)
    with pytest.raises(ValueError, match="success_rate"):
        heuristic_noise_ratios(1.0, 1.0, (2,))


def test_optimal_constant_baseline_and_grpo_length_factor():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert optimal_constant_baseline(rewards, torch.tensor([1.0, 3.0, 3.0, 1.0])) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="score_norms"):
        optimal_constant_baseline(rewards, torch.zeros(4))
    # G = 2, 0/1 rewards: every varied group has σ = 1/2, so (G − 1)/(Gσ) = 1: GRPO is RLOO; Bessel: 1/√2.
    pairs = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    assert grpo_length_factor(pairs, 2) == pytest.approx(1.0)
    assert grpo_length_factor(pairs, 2, unbiased_std=True) == pytest.approx(2**-0.5)
    assert torch.allclose(group_advantages(pairs, 2, "grpo"), group_advantages(pairs, 2, "rloo"), rtol=1e-5)
    # G = 4, one success in four: σ = √3/4, factor (3/4)/(√3/4) = √3.
    assert grpo_length_factor(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4) == pytest.approx(3**0.5)
    with pytest.raises(ValueError, match="not all equal"):
        grpo_length_factor(torch.ones(4), 2)


def test_optimal_baseline_margin_decomposition_and_se():
    # M(b) = mean((R − b)² n) = M(b*) + (b − b*)² mean(n): no baseline beats the value iff b* < J/2.
    gen = torch.Generator().manual_seed(0)
    rewards = (torch.rand(400, generator=gen) < 0.7).double()
    norms = torch.where(rewards > 0, 1.0, 20.0).double() * torch.rand(400, generator=gen, dtype=torch.float64)
    clusters = torch.arange(400).div(8, rounding_mode="floor").numpy()
    out = optimal_baseline_margin(rewards, norms, clusters)
    second = lambda b: float(((rewards - b) ** 2 * norms).mean())
    assert second(0.0) - second(out["b*"]) == pytest.approx(out["b*"] ** 2 * float(norms.mean()))
    assert (second(0.0) < second(out["J"])) == (out["margin"] > 0)
    assert out["margin"] > 0 and out["SE"] > 0          # wrong answers carry the larger scores here
    # the SE against a brute-force cluster bootstrap of the margin
    rng = np.random.default_rng(1)
    blocks = np.arange(400).reshape(50, 8)
    draws = []
    for _ in range(2000):
        rows = blocks[rng.integers(0, 50, 50)].reshape(-1)
        r, n = rewards[rows], norms[rows]
        draws.append(float(r.mean()) / 2 - float((r * n).sum() / n.sum()))
    assert out["SE"] == pytest.approx(np.std(draws), rel=0.15)
    with pytest.raises(ValueError, match="average above zero"):
        optimal_baseline_margin(torch.zeros(4), torch.ones(4), [0, 0, 1, 1])
