"""rlbook.gradients: the closed-form output-layer gradients match autograd; the estimators and their statistics."""

import copy

import numpy as np
import pytest
import torch

from rlbook.advantages import group_advantages
from rlbook.gradients import (
    BASELINES,
    baseline_statistics,
    between_prompt_variance,
    completion_hidden_states,
    critic_explained_variance,
    fit_critic_head,
    fixed_budget_noise,
    gradient_statistics,
    group_gradient_estimates,
    grpo_length_factor,
    grpo_signal_factor,
    heuristic_noise_ratios,
    max_mean_share,
    mean_gradient_share,
    noise_ratio,
    optimal_baseline_margin,
    optimal_constant_baseline,
    output_layer_gradients,
    parameter_gradients,
    per_problem_baseline_margin,
    projected_gradients,
    projection_blocks,
    prompt_variances,
    training_noise_factor,
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


def _synthetic_scores(p, group_size, groups, seed=0):
    # 0/1 rewards at rate p; s = (R − p) d + σ_R ε: E[s | R] = (R − p) d, as for any score with 0/1 rewards
    generator = torch.Generator().manual_seed(seed)
    d = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    noise = {0: 1.5, 1: 0.8}
    rewards = (torch.rand(groups * group_size, generator=generator, dtype=torch.float64) < p).to(torch.float64)
    sigma = torch.where(rewards > 0, noise[1], noise[0]).unsqueeze(1)
    scores = (rewards - p).unsqueeze(1) * d + sigma * torch.randn(rewards.shape[0], 3, generator=generator,
                                                                  dtype=torch.float64)
    exact = {r: (r - p) ** 2 * float(d @ d) + 3 * noise[r] ** 2 for r in (0, 1)}   # S_R = E[‖s‖² | R]
    gradient = p * (1 - p) * d                                                       # ∇J = E[R s]
    return scores, rewards, exact, gradient


@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_heuristic_with_the_mean_share_is_the_exact_variance_ratio(group_size):
    # Simulated groups whose scores have E[s | R] = (R − p) d: with mean_share put in, the formula gives the
    # variance ratios of the group estimates (cross terms and the subtracted mean included) to sampling noise.
    p = 0.3
    scores, rewards, exact, gradient = _synthetic_scores(p, group_size, groups=60_000)
    k, m = exact[0] / exact[1], float(gradient @ gradient) / (p * exact[1])
    predicted = heuristic_noise_ratios(p, k, (group_size,), mean_share=m)
    estimates = {name: group_gradient_estimates(scores, rewards, group_size, baseline=name,
                                                prompt_values=torch.full_like(rewards, p))
                 for name in ("none", "rloo", "value")}
    variance = {name: float(e.var(dim=0).sum()) for name, e in estimates.items()}
    assert variance["rloo"] / variance["none"] == pytest.approx(predicted["rloo"][group_size], rel=0.03)
    assert variance["value"] / variance["none"] == pytest.approx(predicted["value"], rel=0.03)
    offset = group_gradient_estimates(scores, rewards + 1, group_size, baseline="none")
    assert float(offset.var(dim=0).sum()) / variance["none"] == pytest.approx(predicted["offset"], rel=0.03)
    # mean_share = 0 is the plain second-moment heuristic, unchanged
    assert heuristic_noise_ratios(p, k, (group_size,)) == heuristic_noise_ratios(p, k, (group_size,), mean_share=0.0)


def test_leave_one_out_at_two_keeps_the_mean():
    # At G = 2 RLOO's cross term cancels the subtracted mean: its ratio is the second moment over 1 − m.
    plain, with_mean = (heuristic_noise_ratios(0.3, 1.7, (2,), mean_share=m)["rloo"][2] for m in (0.0, 0.2))
    assert with_mean == pytest.approx(plain / 0.8)
    with pytest.raises(ValueError, match="mean_share"):
        heuristic_noise_ratios(0.3, 1.0, (2,), mean_share=1.0)


def test_mean_share_is_bounded_and_the_formula_refuses_beyond_it():
    # m ≤ min(p, (1 − p)² k / p): at p = 0.3, k = 0.05 the second bound (0.0082) binds, at k = 1 the first (0.3)
    assert max_mean_share(0.3, 0.05) == pytest.approx(0.49 * 0.05 / 0.3)
    assert max_mean_share(0.3, 1.0) == pytest.approx(0.3)
    # the simulated scores of _synthetic_scores sit inside it
    p = 0.3
    _, _, exact, gradient = _synthetic_scores(p, 2, groups=10)
    assert float(gradient @ gradient) / (p * exact[1]) <= max_mean_share(p, exact[0] / exact[1])
    # scores with no noise around E[s | R] reach it: S_R = (R − p)² ‖d‖², m = p (and (1 − p)² k / p = p too)
    assert max_mean_share(p, p**2 / (1 - p) ** 2) == pytest.approx(p)
    # beyond it the formula gave negative variance ratios (the reader's p = 0.3, k = 0.05, m = 0.8); now refused
    with pytest.raises(ValueError, match="max_mean_share"):
        heuristic_noise_ratios(0.3, 0.05, (8,), mean_share=0.8)
    with pytest.raises(ValueError, match="max_mean_share"):
        heuristic_noise_ratios(0.9, 1.0, (8,), mean_share=0.85)
    # on the bound every ratio is still a variance ratio, ≥ 0
    for p, k in ((0.3, 0.05), (0.9, 1.0), (0.28, 1.73), (0.05, 20.0)):
        ratios = heuristic_noise_ratios(p, k, (2, 4, 8, 64), mean_share=max_mean_share(p, k))
        assert min(ratios["value"], ratios["offset"], *ratios["rloo"].values()) >= -1e-9


def test_mean_gradient_share_reads_the_signal_from_an_independent_gradient():
    p = 0.3
    scores, rewards, exact, gradient = _synthetic_scores(p, 4, groups=50_000, seed=1)
    share = mean_gradient_share(scores, rewards, gradient.unsqueeze(0), n_prompts=1)
    assert share == pytest.approx(float(gradient @ gradient) / (p * exact[1]), rel=0.03)
    with pytest.raises(ValueError, match="prompt_gradients"):
        mean_gradient_share(scores, rewards, gradient.unsqueeze(0).repeat(2, 1), n_prompts=1)


@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_grpo_signal_factor_is_grpo_over_the_true_gradient(group_size):
    p = 0.3
    scores, rewards, _, gradient = _synthetic_scores(p, group_size, groups=80_000, seed=2)
    mean = group_gradient_estimates(scores, rewards, group_size, baseline="grpo").mean(dim=0)
    alpha = grpo_signal_factor(p, group_size)
    assert torch.allclose(mean, alpha * gradient, rtol=0.04, atol=0.01)   # parallel to ∇J, stretched by α
    assert (alpha == pytest.approx(1.0)) if group_size == 2 else alpha >= 1.5
    with pytest.raises(ValueError, match="success_rate"):
        grpo_signal_factor(0.0, 4)


def test_gae_baseline_weights_are_the_values_at_lambda_one_and_mix_in_later_values_below():
    from rlbook.gradients import gae_baseline_weights

    values = torch.tensor([[0.2, 0.5, 0.9, 0.0], [0.4, 0.3, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    rewards = torch.tensor([1.0, 0.0], dtype=torch.float64)
    # λ = 1, γ = 1: A_t = R − V_t, so the baseline is the critic's own value at every token (0 on padding)
    assert torch.allclose(gae_baseline_weights(rewards, values, mask, 1.0), values * mask)
    # λ = 0: A_t = δ_t = V_{t+1} − V_t inside a response and R − V_last at its end, so b_t = R − V_{t+1} + V_t
    expected = torch.tensor([[1 - 0.5 + 0.2, 1 - 0.9 + 0.5, 0.9, 0.0], [0 - 0.3 + 0.4, 0.3, 0.0, 0.0]],
                            dtype=torch.float64)
    assert torch.allclose(gae_baseline_weights(rewards, values, mask, 0.0), expected)
    with pytest.raises(ValueError, match="at least one token"):
        gae_baseline_weights(rewards, values, torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]]), 0.5)


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


def test_mean_difference_components_splits_a_known_mean_and_is_unbiased_at_zero():
    # 4 prompts × 400 groups in 50 dims, unit noise; μ = 0.3 ∇J along plus 0.4 ‖∇J‖ across: the U-statistic finds
    # 0.16 where the plain mean's orthogonal norm² would add tr Cov⊥ / M of noise on top.
    from rlbook.gradients import mean_difference_components

    generator = torch.Generator().manual_seed(3)
    prompts, groups, dims = 4, 400, 50
    reference = torch.zeros(dims, dtype=torch.float64)
    reference[0] = 2.0
    mean = torch.zeros(dims, dtype=torch.float64)
    mean[0], mean[1] = 0.6, 0.8                               # along 0.3, across 0.4 (units of ‖∇J‖ = 2)
    noise = torch.randn(prompts * groups, dims, generator=generator, dtype=torch.float64)
    parts = mean_difference_components(mean + noise, reference, n_prompts=prompts)
    assert parts["batches"] == groups
    # each batch b_j averages 4 prompts' unit noise: per-coordinate sd 1/2, in units of ‖∇J‖ 1/4
    assert parts["along_se"] == pytest.approx(0.25 / groups**0.5, rel=0.1)
    assert abs(parts["along"] - 0.3) < 4 * parts["along_se"]
    assert parts["across_noise"] == pytest.approx((49 * 0.25**2 / groups) ** 0.5, rel=0.05)
    assert abs(parts["across_sq"] - 0.16) < 4 * parts["across_sq_se"]
    assert parts["across"] == pytest.approx(0.4, abs=0.03)
    # with no mean at all, zero lies within a few SE, and the plain mean's norm would not
    null = mean_difference_components(noise, reference, n_prompts=prompts)
    assert abs(null["across_sq"]) < 4 * null["across_sq_se"]
    plain = float((noise.view(prompts, groups, dims).mean(dim=(0, 1))[1:] / 2).norm() ** 2)
    assert plain > 3 * null["across_sq_se"]
    with pytest.raises(ValueError, match="at least 3 groups"):
        mean_difference_components(noise[: prompts * 2], reference, n_prompts=prompts)
    with pytest.raises(ValueError, match="must not be zero"):
        mean_difference_components(noise, torch.zeros(dims), n_prompts=prompts)


def test_per_problem_baseline_margin_is_the_sign_of_the_summed_variance_difference():
    # Σ_x [M_x(0) − M_x(p_x)] = −2 Σ_x p_x S_x (p_x/2 − b*_x): positive margin iff no baseline is quieter summed
    gen = torch.Generator().manual_seed(0)
    for wrong_scale in (20.0, 0.2):                       # wrong answers with the larger, then the smaller scores
        rewards = (torch.rand(40, 8, generator=gen) < torch.rand(40, 1, generator=gen)).double()
        norms = torch.where(rewards > 0, 1.0, wrong_scale).double() * torch.rand(40, 8, generator=gen, dtype=torch.float64)
        out = per_problem_baseline_margin(rewards.flatten(), norms.flatten(), n_prompts=40)
        p = rewards.mean(dim=1, keepdim=True)
        difference = float((((rewards ** 2) - (rewards - p) ** 2) * norms).mean(dim=1).sum())
        weights = float((p.squeeze(1) * norms.mean(dim=1)).sum())
        assert out["margin"] == pytest.approx(-difference / (2 * weights))
        assert (difference < 0) == (out["margin"] > 0) and out["SE"] > 0
        assert (out["margin"] > 0) == (wrong_scale > 1)
    with pytest.raises(ValueError, match="divide"):
        per_problem_baseline_margin(torch.ones(9), torch.ones(9), n_prompts=2)
    with pytest.raises(ValueError, match="right answer"):
        per_problem_baseline_margin(torch.zeros(8), torch.ones(8), n_prompts=2)


def test_training_noise_factor_adds_the_between_problem_spread_to_both_baselines():
    # each problem's K group estimates scatter around its own gradient; the problems' gradients scatter too
    gen = torch.Generator().manual_seed(0)
    p, k, d = 400, 4, 3
    centres = 2.0 * torch.randn(p, 1, d, generator=gen, dtype=torch.float64)        # tr Var_x(∇J_x) = 4·3 = 12
    none = (centres + 3.0 * torch.randn(p, k, d, generator=gen, dtype=torch.float64)).reshape(-1, d)   # W = 27
    with_ = (centres + 1.0 * torch.randn(p, k, d, generator=gen, dtype=torch.float64)).reshape(-1, d)  # W = 3
    out = training_noise_factor(none, with_, n_prompts=p)
    assert out["within"] == pytest.approx(9.0, rel=0.1)
    assert out["between"] == pytest.approx(12.0, rel=0.15)
    assert out["factor"] == pytest.approx((27 + 12) / (3 + 12), rel=0.1)
    assert out["share"] == pytest.approx(12 / 39, rel=0.15)
    # the jackknife SE against the spread of the factor over independent repeats
    repeats = []
    for seed in range(1, 41):
        g = torch.Generator().manual_seed(seed)
        c = 2.0 * torch.randn(p, 1, d, generator=g, dtype=torch.float64)
        repeats.append(training_noise_factor((c + 3.0 * torch.randn(p, k, d, generator=g, dtype=torch.float64)).reshape(-1, d),
                                             (c + torch.randn(p, k, d, generator=g, dtype=torch.float64)).reshape(-1, d),
                                             n_prompts=p)["factor"])
    assert out["SE"] == pytest.approx(float(np.std(repeats, ddof=1)), rel=0.4)
    with pytest.raises(ValueError, match="must match"):
        training_noise_factor(none, with_[:8], n_prompts=4)


def test_between_prompt_variance_subtracts_the_means_own_noise():
    # prompts with true gradients mu_x, each seen through M noisy groups: the raw spread of the means is
    # Var_x(mu) + noise/M; the estimate removes the second part and is unbiased for tr Var_x(mu).
    generator = torch.Generator().manual_seed(0)
    mu = torch.randn(40, 5, generator=generator, dtype=torch.float64)          # tr Var_x = 5 in expectation
    noisy = mu[:, None, :] + 3.0 * torch.randn(40, 4, 5, generator=generator, dtype=torch.float64)
    result = between_prompt_variance(noisy.reshape(-1, 5), n_prompts=40)
    truth = float(((mu - mu.mean(0)) ** 2).sum() / 39)
    assert result["raw"] == pytest.approx(result["variance"] + result["noise"])
    assert result["noise"] == pytest.approx(5 * 9 / 4, rel=0.2)                 # tr Cov of a mean of 4 groups
    assert abs(result["variance"] - truth) < 3 * result["se"] and result["se"] > 0
    # no noise within a prompt: nothing to subtract, the plain sample variance of the prompts' gradients
    exact = between_prompt_variance(mu[:, None, :].expand(40, 3, 5).reshape(-1, 5), n_prompts=40)
    assert exact["noise"] == pytest.approx(0.0, abs=1e-12) and exact["variance"] == pytest.approx(truth)
    with pytest.raises(ValueError, match="at least 3 prompts"):
        between_prompt_variance(noisy[:2].reshape(-1, 5), n_prompts=2)


def test_fixed_budget_noise_by_hand():
    # P = 4 fixed prompts, batch variance 0.5 (so mean tr Cov 2), between 1, ‖E g‖ = 2: at G = 8 and a budget of
    # 32 completions (4 prompts) the variance is (2 + 1)/4 and the noise-to-signal 0.75/4
    stats = {"variance": 0.5, "mean_norm": 2.0}
    assert fixed_budget_noise(stats, 1.0, n_prompts=4, group_size=8, budget=32) == pytest.approx(0.75 / 4)
    # halving G at the same budget doubles the prompts: only the within-prompt part can grow
    assert fixed_budget_noise(stats, 1.0, n_prompts=4, group_size=4, budget=32) == pytest.approx(0.375 / 4)
    with pytest.raises(ValueError, match="divide"):
        fixed_budget_noise(stats, 1.0, n_prompts=4, group_size=3, budget=32)


def test_parameter_gradients_match_the_output_layers_closed_form(batch):
    # on a copy with untied output weights, autograd one completion at a time gives the closed form's rows
    model, _, r = batch
    untied = copy.deepcopy(model)
    untied.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    by_autograd = parameter_gradients(untied, "lm_head.weight", *args)
    assert torch.allclose(by_autograd, output_layer_gradients(model, *args), atol=1e-4)
    name = [n for n, _ in model.named_parameters() if n.endswith("mlp.down_proj.weight")][-1]
    assert parameter_gradients(model, name, *args).shape[0] == len(r)
    with pytest.raises(ValueError, match="no parameter"):
        parameter_gradients(model, "nope", *args)


def test_per_problem_baseline_margin_share_counts_problems_with_b_star_below_half_p():
    # problem 0: the right answer has a tiny score, b*_0 = 0.5*1/(0.5*1 + 0.5*9) = 0.1 < p/2 = 0.25;
    # problem 1: equal scores, b*_1 = p = 0.5 > 0.25; problem 2: never solved, left out of the share
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    norms = torch.tensor([1.0, 9.0, 4.0, 4.0, 3.0, 5.0])
    out = per_problem_baseline_margin(rewards, norms, n_prompts=3)
    assert out["solved"] == 2
    assert out["share"] == pytest.approx(0.5)
    assert out["share SE"] == pytest.approx((0.25 / 2) ** 0.5)


def _whole_network_scores(model, r, weights=None):
    # each completion's full gradient of Σ_t w_t log π(y_t), over every parameter, by autograd one row at a time
    parameters = list(model.parameters())
    rows = []
    for i in range(len(r)):
        logp = completion_logprobs(model, r.prompt_ids[i:i + 1], r.prompt_mask[i:i + 1], r.completion_ids[i:i + 1],
                                   r.completion_mask[i:i + 1])
        w = 1.0 if weights is None else weights[i]
        rows.append(torch.cat([g.flatten() for g in torch.autograd.grad(w * logp.sum(), parameters)]).double())
    return torch.stack(rows)


def test_projected_gradients_are_the_seeded_gaussian_projection_of_the_whole_networks_gradient(batch):
    model, _, r = batch
    args = (model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    full = _whole_network_scores(model, r)
    assert full.shape[1] == sum(w.numel() for w in model.parameters())   # a tied matrix counted once
    projected = projected_gradients(*args, dim=64, seed=3, chunk_size=4)
    # the same seeded P, drawn parameter by parameter in the model's order, scaled by 1/√dim
    generator = torch.Generator().manual_seed(3)
    projection = torch.cat([torch.randn(w.numel(), 64, generator=generator) for w in model.parameters()]) / 8
    assert torch.allclose(projected, full @ projection.double(), rtol=1e-4, atol=1e-4)
    # same seed, same numbers; chunking does not matter; another seed is another projection
    assert torch.equal(projected, projected_gradients(*args, dim=64, seed=3, chunk_size=4))
    assert torch.allclose(projected, projected_gradients(*args, dim=64, seed=3, chunk_size=1), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(projected, projected_gradients(*args, dim=64, seed=4))
    # per-completion weights scale the rows
    weights = torch.linspace(-1.0, 2.0, len(r))
    weighted = projected_gradients(*args, dim=64, seed=3, token_weights=weights)
    assert torch.allclose(weighted, projected * weights.double().unsqueeze(1), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="dim"):
        projected_gradients(*args, dim=0)


def test_projection_preserves_inner_products_in_expectation(batch):
    # Johnson–Lindenstrauss: E_P <Pu, Pv> = <u, v>; averaged over independent projections the squared norms and
    # an inner product of two completions' whole-network scores come back within a few standard errors
    model, _, r = batch
    args = (model, r.prompt_ids[:2], r.prompt_mask[:2], r.completion_ids[:2], r.completion_mask[:2])
    full = _whole_network_scores(model, r)[:2]
    exact = full @ full.T
    draws = torch.stack([(lambda p: p @ p.T)(projected_gradients(*args, dim=32, seed=s)) for s in range(40)])
    # Var ‖Pu‖² = 2‖u‖⁴/dim, so the mean of 40 draws of dim 32 has a relative SE of √(2/32/40) ≈ 4 %
    se = (2 / 32 / 40) ** 0.5 * exact.diagonal()
    assert ((draws.mean(0).diagonal() - exact.diagonal()).abs() < 4 * se).all()
    off_se = ((exact[0, 0] * exact[1, 1] + exact[0, 1] ** 2) / 32 / 40) ** 0.5
    assert abs(draws.mean(0)[0, 1] - exact[0, 1]) < 4 * off_se


def test_projection_blocks_are_rescaled_independent_projections():
    projected = torch.arange(24.0).view(2, 12)
    parts = projection_blocks(projected, 3)
    assert len(parts) == 3 and all(p.shape == (2, 4) for p in parts)
    assert torch.allclose(parts[1], projected[:, 4:8] * 3 ** 0.5)
    # the blocks' mean squared norm is the whole projection's
    assert torch.allclose(sum((p ** 2).sum(1) for p in parts) / 3, (projected ** 2).sum(1))
    with pytest.raises(ValueError, match="divide"):
        projection_blocks(projected, 5)
