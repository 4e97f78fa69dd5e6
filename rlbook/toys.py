"""Exactly solvable toys: problems small enough that every expectation is a finite sum or a formula.

A lesson checks a Monte Carlo estimate against the exact number, so the toys here compute both.

**A softmax bandit** (lessons 01 and 09). K arms, a policy π_θ = softmax(θ) over them, and arm k
pays a reward drawn from N(μ_k, σ²). The objective and its gradient are exact:

    J(θ) = Σ_k π_k μ_k,        ∂J/∂θ_k = π_k (μ_k − J)         (since ∇_θ log π_a = e_a − π).

REINFORCE estimates the gradient from N pulls, ĝ = (1/N) Σ_i (R_i − b_i)(e_{a_i} − π), with a
baseline b that is zero, the exact value J(θ), or the mean of the *other* rewards of the batch — and,
to show that a test of unbiasedness can fail, the batch's mean reward with R_i included (biased).

**Two Gaussians** (lesson 02). Samples x ~ π_θ = N(0, 1) and a reference π_ref = N(μ, σ²); the
per-sample KL estimators k1, k2, k3 of ``rlbook.kl`` estimate KL(π_θ ‖ π_ref), whose value is
known. The bias and spread of every estimator have closed forms too (Schulman 2020 reported them
by sampling): ``kl_estimator_table_exact`` derives them for σ = 1, ``kl_estimator_table_any_sigma``
for any σ (k3's variance is infinite once σ² ≥ 2); ``k1_k3_spread_crossover`` finds where k3 starts
to spread more than k1, and ``k3_batch_mean_spread`` how a batch mean of each narrows as it grows.

**A categorical policy and a reference** (lesson 02). E_{x~π}[∇k(x)] is the finite sum
∇ Σ_x sg[π(x)] k(x), so which divergence an estimator's gradient follows is checked exactly; and
exact gradient ascent on "reward minus a KL penalty" shows where each placement of the penalty
leads the policy; ``reverse_kl_optimum`` is the closed form that lesson 06 builds DPO on;
``per_sample_estimator_gradients`` and ``estimator_gradient_variance`` give the noise of one sampled
token's KL gradient. (The same toy over two tokens is ``rlbook.kl_sequence``.)

**A policy with rewards it was never trained on** (lesson 05). ``toy_policy`` gives π over a few
dozen outcomes and a reward per outcome, so the best-of-n distribution is an exact finite sum;
``optimum_at_kl`` finds the KL-regularised optimum with a given KL, and ``best_of_n_efficiency``
compares best-of-n's reward with that optimum's at the same KL. Under a 0/1 verifier over many prompts
of different pass rates, ``verifier_frontier`` is the optimum with one β shared by all prompts and
``verifier_best_of_n_efficiency`` compares best-of-n (one n for all prompts) with it.

**One preference pair and a tabular policy** (lesson 07). ``toy_margin_dynamics`` runs gradient
descent on DPO's or IPO's loss of one pair: DPO's margin grows without bound, IPO's stops at 1/(2τ).

**A two-decision policy and the 1/|o| length bias** (lesson 10). ``length_bias_toy`` trains an
answer-then-filler policy with GRPO's or Dr.GRPO's token weights: only 1/|o| makes wrong answers grow.

**A bandit with rare right answers** (lesson 11). ``clip_higher_bandit`` trains a softmax over one
common and many rare right answers with the clipped surrogate: how ε_high changes the entropy left.

Simplified on purpose: float64 tensors on the CPU, no batching beyond what a figure needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rlbook._checks import check_choice, check_int, check_positive
from rlbook.evidence import ratio_se
from rlbook.kl import bernoulli_kl, kl_estimate, kl_in_loss, kl_in_reward
from rlbook.losses import dpo_loss, ipo_loss
from rlbook.metrics import best_of_n_distribution, best_of_n_exact_kl

__all__ = [
    "BASELINES",
    "BIASED_BASELINES",
    "KL_PLACEMENTS",
    "GaussianBandit",
    "policy",
    "expected_reward",
    "exact_gradient",
    "score_function",
    "sample_arms",
    "baseline_values",
    "sample_batches",
    "reinforce_estimates",
    "optimal_constant_baseline",
    "exact_gradient_covariance",
    "exact_gradient_variance",
    "exact_estimate_variance",
    "unsampled_arm_push",
    "reward_to_go_variances",
    "total_variance",
    "total_variance_ratio",
    "z_scores",
    "train_bandit",
    "gaussian_kl",
    "gaussian_log_density",
    "sample_kl_estimates",
    "ratio_survival",
    "kl_estimator_table_exact",
    "kl_estimator_table_any_sigma",
    "k1_k3_spread_crossover",
    "k3_batch_mean_spread",
    "below_share_decay",
    "kl_estimator_table_monte_carlo",
    "expected_estimator_gradient",
    "per_sample_estimator_gradients",
    "estimator_gradient_variance",
    "reverse_kl",
    "forward_kl",
    "kl_gradient",
    "placement_gradient",
    "regularised_ascent",
    "reverse_kl_optimum",
    "forward_kl_optimum",
    "toy_policy",
    "optimum_at_kl",
    "best_of_n_efficiency",
    "verifier_frontier",
    "verifier_optimum_at_kl",
    "verifier_best_of_n_efficiency",
    "toy_margin_dynamics",
]

DTYPE = torch.float64
BASELINES = ("none", "value", "leave_one_out")
# The batch's mean reward with pull i included (GRPO's group mean without its σ): E ĝ = (1 − 1/N) ∇J,
# so it is biased; ``baseline_values`` and ``reinforce_estimates`` accept it, to give a bias test a failure.
BIASED_BASELINES = ("group_mean",)
KL_PLACEMENTS = ("k1_in_reward", "k1_in_loss", "k2_in_loss", "k3_in_loss", "k3+_in_loss")


# ----------------------------------------------------------------------------------------------
# The softmax bandit


@dataclass(frozen=True)
class GaussianBandit:
    """K arms; pulling arm k pays a reward drawn from N(means[k], noise²)."""

    means: tuple[float, ...]
    noise: float = 0.5

    def __post_init__(self):
        if len(self.means) < 2 or not all(math.isfinite(m) for m in self.means):
            raise ValueError(f"means must be at least two finite numbers, got {self.means!r}")
        check_positive("noise", self.noise, allow_zero=True)

    @property
    def num_arms(self) -> int:
        return len(self.means)

    @property
    def mean_tensor(self) -> torch.Tensor:
        return torch.tensor(self.means, dtype=DTYPE)

    def pull(self, arms: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One reward per entry of ``arms`` (any shape): μ_arm + noise · N(0, 1)."""
        noise = torch.randn(arms.shape, dtype=DTYPE, generator=generator)
        return self.mean_tensor[arms] + self.noise * noise


def _logits(bandit: GaussianBandit, logits) -> torch.Tensor:
    logits = torch.as_tensor(logits, dtype=DTYPE)
    if logits.shape[-1] != bandit.num_arms:
        raise ValueError(f"logits must end in a dimension of size {bandit.num_arms} (one per arm), "
                         f"got shape {tuple(logits.shape)}")
    return logits


def policy(logits) -> torch.Tensor:
    """π_θ = softmax(θ) over the last dimension."""
    return torch.softmax(torch.as_tensor(logits, dtype=DTYPE), dim=-1)


def expected_reward(bandit: GaussianBandit, logits) -> torch.Tensor:
    """J(θ) = Σ_k π_k μ_k (differentiable in ``logits``; batched over leading dimensions)."""
    return (policy(_logits(bandit, logits)) * bandit.mean_tensor).sum(-1)


def exact_gradient(bandit: GaussianBandit, logits) -> torch.Tensor:
    """∇_θ J = π ⊙ (μ − J): the exact policy gradient of the softmax bandit."""
    probs = policy(_logits(bandit, logits))
    value = (probs * bandit.mean_tensor).sum(-1, keepdim=True)
    return probs * (bandit.mean_tensor - value)


def score_function(logits, arms: torch.Tensor) -> torch.Tensor:
    """∇_θ log π_θ(a) = e_a − π for each arm in ``arms``; shape arms.shape + (K,)."""
    probs = policy(logits)
    one_hot = torch.nn.functional.one_hot(arms, probs.shape[-1]).to(DTYPE)
    return one_hot - probs


def sample_arms(logits, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Arms drawn from π_θ: ``shape`` = (num_estimates, batch_size) for one logits vector."""
    probs = policy(logits)
    count = math.prod(shape)
    return torch.multinomial(probs, count, replacement=True, generator=generator).reshape(shape)


def baseline_values(rewards: torch.Tensor, baseline: str, *, value: torch.Tensor | float = 0.0) -> torch.Tensor:
    """The baseline b_i of every pull; ``rewards`` is (..., N), one batch per row.

    - ``"none"``: b = 0;
    - ``"value"``: b = J(θ), the exact expected reward (pass it as ``value``), the same for all i;
    - ``"leave_one_out"``: b_i = mean of the other N − 1 rewards of the batch (independent of R_i,
      so the estimate stays unbiased; it is RLOO's baseline, lesson 09);
    - ``"group_mean"`` (biased, ``BIASED_BASELINES``): b_i = mean of all N rewards, R_i included. Then
      R_i − b_i = (N − 1)/N × the leave-one-out advantage, so E ĝ = (1 − 1/N) ∇J (lesson 01's
      exercise 3; lesson 09 measures it).
    """
    check_choice("baseline", baseline, BASELINES + BIASED_BASELINES)
    if baseline == "none":
        return torch.zeros_like(rewards)
    if baseline == "value":
        return torch.as_tensor(value, dtype=rewards.dtype).expand_as(rewards)
    if baseline == "group_mean":
        return rewards.mean(-1, keepdim=True).expand_as(rewards)
    n = rewards.shape[-1]
    if n < 2:
        raise ValueError("the leave_one_out baseline needs batch_size >= 2")
    return (rewards.sum(-1, keepdim=True) - rewards) / (n - 1)


def sample_batches(bandit: GaussianBandit, logits, *, batch_size: int, num_estimates: int,
                   seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The pulls behind ``reinforce_estimates`` with the same arguments: ``(arms, rewards)``, each
    (num_estimates, batch_size). The same ``seed`` gives the same batches, whatever the baseline."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    num_estimates = check_int("num_estimates", num_estimates, minimum=1)
    logits = _logits(bandit, logits)
    generator = torch.Generator().manual_seed(seed)
    arms = sample_arms(logits, (num_estimates, batch_size), generator)
    return arms, bandit.pull(arms, generator)


def reinforce_estimates(bandit: GaussianBandit, logits, *, batch_size: int, num_estimates: int,
                        baseline: str = "none", seed: int = 0) -> torch.Tensor:
    """``num_estimates`` independent REINFORCE estimates of ∇J, each from ``batch_size`` pulls.

    ĝ = (1/N) Σ_i (R_i − b_i)(e_{a_i} − π); returns (num_estimates, K). The pulls are those of
    ``sample_batches`` with the same seed, so the baselines compared at one seed see the same batches.
    """
    arms, rewards = sample_batches(bandit, logits, batch_size=batch_size, num_estimates=num_estimates, seed=seed)
    logits = _logits(bandit, logits)
    advantages = rewards - baseline_values(rewards, baseline, value=expected_reward(bandit, logits))
    return (advantages.unsqueeze(-1) * score_function(logits, arms)).mean(dim=1)


def total_variance(estimates: torch.Tensor) -> float:
    """E‖ĝ − E ĝ‖², the trace of the covariance of the rows of ``estimates`` (Bessel-corrected)."""
    return float(estimates.var(dim=0, unbiased=True).sum())


def z_scores(estimates: torch.Tensor, target) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, se)`` per coordinate: how many standard errors the mean of the (M, K) ``estimates`` lies
    from ``target`` (K,), z = (mean − target) / se with se = sd / √M (Bessel-corrected sd) — the
    lessons' test of unbiasedness asks |z| < 4 on every coordinate."""
    if estimates.dim() != 2 or estimates.shape[0] < 2:
        raise ValueError(f"estimates must be (M, K) with M >= 2 independent estimates, got shape "
                         f"{tuple(estimates.shape)}")
    target = torch.as_tensor(target, dtype=estimates.dtype)
    if target.shape != estimates.shape[1:]:
        raise ValueError(f"target must have shape {tuple(estimates.shape[1:])}, got {tuple(target.shape)}")
    se = estimates.std(0) / math.sqrt(estimates.shape[0])
    return (estimates.mean(0) - target) / se, se


def total_variance_ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> tuple[float, float]:
    """``(ratio, se)``: total_variance(numerator) / total_variance(denominator) and its standard error.

    The two are (M, K) sets of estimates whose m-th rows come from the same batch (e.g. two baselines
    of ``reinforce_estimates`` at one seed), so they are correlated; each row's squared distance
    from its set's mean, ‖ĝ_m − ḡ‖², is one paired draw, and ``rlbook.evidence.ratio_se`` gives the
    delta-method standard error of the ratio of their means (the Bessel factors cancel).
    """
    if numerator.dim() != 2 or numerator.shape != denominator.shape:
        raise ValueError(f"numerator and denominator must be paired (M, K) estimates, got shapes "
                         f"{tuple(numerator.shape)} and {tuple(denominator.shape)}")
    spread = [((e - e.mean(0)) ** 2).sum(1).numpy() for e in (numerator, denominator)]
    return ratio_se(*spread)


def exact_gradient_covariance(bandit: GaussianBandit, logits, baseline: float = 0.0) -> torch.Tensor:
    """The (K, K) covariance of a *one-pull* estimate ĝ = (R − b)(e_a − π) with a constant baseline b:

        Σ_a π_a ((μ_a − b)² + σ²) (e_a − π)(e_a − π)ᵀ  −  ∇J ∇Jᵀ

    (E[(R − b)² | a] = (μ_a − b)² + σ², and E ĝ = ∇J for every constant b). Divide by N for N pulls.
    """
    logits = _logits(bandit, logits)
    probs = policy(logits)
    scores = score_function(logits, torch.arange(bandit.num_arms))  # row a: e_a − π
    weights = probs * ((bandit.mean_tensor - baseline) ** 2 + bandit.noise**2)
    gradient = exact_gradient(bandit, logits)
    return torch.einsum("a,ai,aj->ij", weights, scores, scores) - torch.outer(gradient, gradient)


def exact_gradient_variance(bandit: GaussianBandit, logits, baseline: float = 0.0, *, per_arm: bool = False):
    """E‖ĝ − ∇J‖² of a *one-pull* estimate with a constant baseline b (divide by N for N pulls):

        Σ_a π_a ((μ_a − b)² + σ²) ‖e_a − π‖²  −  ‖∇J‖²,

    the trace of ``exact_gradient_covariance``. With ``per_arm=True``, the (K,) variances of the
    coordinates of ĝ instead (its diagonal; they sum to the above).
    """
    variances = torch.diagonal(exact_gradient_covariance(bandit, logits, baseline))
    return variances if per_arm else float(variances.sum())


def exact_estimate_variance(bandit: GaussianBandit, logits, *, batch_size: int, baseline: str) -> float:
    """E‖ĝ − ∇J‖² of the ``batch_size``-pull estimate of ``reinforce_estimates``, for any of ``BASELINES``.

    - ``"none"``, ``"value"``: a constant b (0, or J), N independent pulls: the one-pull variance / N.
    - ``"leave_one_out"``: b_i = mean of the other N − 1 rewards. The estimate is then the U-statistic
      ĝ = 1/(N(N − 1)) Σ_{i≠j} h(X_i, X_j) with the symmetric kernel h(x, y) = ½ (R_x − R_y)(e_{a_x} − e_{a_y})
      (Kool et al. 2019 write the same estimator as a pairwise average). Hoeffding's variance of a
      U-statistic of order 2 (Hoeffding 1948, "A class of statistics with asymptotically normal
      distribution", Ann. Math. Statist. 19(3), Theorem 5.2) gives

          Var ĝ = 4(N − 2)/(N(N − 1)) ζ₁ + 2/(N(N − 1)) ζ₂,

      with ζ₁ = Var E[h(X, Y) | X] = ¼ Var[(R − J)(e_a − π)] (a quarter of the value baseline's
      one-pull variance) and ζ₂ = Var h(X, Y) = ½ Σ_{a≠b} π_a π_b ((μ_a − μ_b)² + 2σ²) − ‖∇J‖²
      (‖e_a − e_b‖² = 2). At N = 2 it is ζ₂ (one other reward as the baseline); as N grows it
      approaches the value baseline's variance / N from above.
    """
    check_choice("baseline", baseline, BASELINES)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    logits = _logits(bandit, logits)
    value = float(expected_reward(bandit, logits))
    if baseline != "leave_one_out":
        return exact_gradient_variance(bandit, logits, 0.0 if baseline == "none" else value) / batch_size
    if batch_size < 2:
        raise ValueError("the leave_one_out baseline needs batch_size >= 2")
    n = batch_size
    probs, means = policy(logits), bandit.mean_tensor
    pair = torch.outer(probs, probs) * ((means[:, None] - means[None, :]) ** 2 + 2 * bandit.noise**2)
    zeta_2 = 0.5 * float(pair.sum() - torch.diagonal(pair).sum()) - float((exact_gradient(bandit, logits) ** 2).sum())
    zeta_1 = exact_gradient_variance(bandit, logits, value) / 4
    return 4 * (n - 2) / (n * (n - 1)) * zeta_1 + 2 / (n * (n - 1)) * zeta_2


def unsampled_arm_push(bandit: GaussianBandit, logits, arm: int, *, batch_size: int, baseline: str) -> dict[str, float]:
    """What a batch that never drew ``arm`` does to its logit θ_arm, exactly.

    In such a batch every score has (e_a − π)_arm = −π_arm, so the estimate's coordinate is
    ĝ_arm = −π_arm · (1/N) Σ_i (R_i − b_i): the arm is pushed *down* in proportion to the batch's
    mean advantage. Returns

    - ``probability``: P(the batch never drew the arm) = (1 − π_arm)^N;
    - ``mean_push``: E[ĝ_arm | never drawn] = −π_arm (E[R | a ≠ arm] − b) for a constant b
      (b = 0 for ``"none"``, J for ``"value"``), E[R | a ≠ arm] = (J − π_arm μ_arm) / (1 − π_arm);
      exactly 0, in every such batch, for ``"leave_one_out"`` (Σ_i b_i = Σ_i R_i).
    """
    check_choice("baseline", baseline, BASELINES)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    logits = _logits(bandit, logits)
    arm = check_int("arm", arm, minimum=0)
    if arm >= bandit.num_arms:
        raise ValueError(f"arm must be below the number of arms {bandit.num_arms}, got {arm}")
    if baseline == "leave_one_out" and batch_size < 2:
        raise ValueError("the leave_one_out baseline needs batch_size >= 2")
    probs = policy(logits)
    p, value = float(probs[arm]), float(expected_reward(bandit, logits))
    others_mean = (value - p * bandit.means[arm]) / (1 - p)
    push = {"none": -p * others_mean, "value": -p * (others_mean - value), "leave_one_out": 0.0}[baseline]
    return {"probability": (1 - p) ** batch_size, "mean_push": push}


def reward_to_go_variances(bandit: GaussianBandit, logits) -> dict[str, float]:
    """Exact total variances of three estimators from an episode of two independent pulls a₁, a₂
    paying r₁, r₂, with s_t = e_{a_t} − π:

    - ``"whole return"``: (r₁ + r₂)(s₁ + s₂), mean 2∇J;
    - ``"reward-to-go"``: (r₁ + r₂) s₁ + r₂ s₂, mean 2∇J (Sutton & Barto 2018, §13.3: each action
      weighted by the return that follows it);
    - ``"dropped term"``: r₁ s₂, mean 0.

    Each is E‖g‖² − ‖E g‖², the expectation a finite sum over the K² pairs of arms with the
    Gaussian moments E[r²] = μ² + σ², E[r₁ r₂] = μ₁ μ₂.
    """
    logits = _logits(bandit, logits)
    probs, mu, var = policy(logits), bandit.mean_tensor, bandit.noise**2
    scores = score_function(logits, torch.arange(bandit.num_arms))  # row a: s_a
    dot = scores @ scores.T                                          # s_a · s_b
    sq = torch.diagonal(dot)
    m1, m2 = mu[:, None], mu[None, :]                                # first pull a, second b
    total_sq = (m1 + m2) ** 2 + 2 * var                              # E[(r₁ + r₂)²]
    whole = total_sq * (sq[:, None] + 2 * dot + sq[None, :])
    to_go = total_sq * sq[:, None] + 2 * ((m1 + m2) * m2 + var) * dot + (m2**2 + var) * sq[None, :]
    dropped = (m1**2 + var) * sq[None, :].expand_as(dot)
    weight = torch.outer(probs, probs)
    mean_sq = 4 * float((exact_gradient(bandit, logits) ** 2).sum())  # ‖2∇J‖²
    return {"whole return": float((weight * whole).sum()) - mean_sq,
            "reward-to-go": float((weight * to_go).sum()) - mean_sq,
            "dropped term": float((weight * dropped).sum())}


def optimal_constant_baseline(bandit: GaussianBandit, logits) -> float:
    """The constant b that minimises the variance above: b* = E[R ‖∇log π‖²] / E[‖∇log π‖²].

    Close to, but not the same as, the value J(θ) = E[R]: pulls with a large score weigh more.
    """
    logits = _logits(bandit, logits)
    probs = policy(logits)
    squared_scores = (score_function(logits, torch.arange(bandit.num_arms)) ** 2).sum(-1)
    return float((probs * bandit.mean_tensor * squared_scores).sum() / (probs * squared_scores).sum())


def train_bandit(bandit: GaussianBandit, logits, *, steps: int, batch_size: int, lr: float,
                 baseline: str = "none", num_runs: int = 1, seed: int = 0, return_policy: bool = False):
    """REINFORCE by gradient ascent, θ ← θ + lr · ĝ, for ``num_runs`` independent runs at once.

    Returns the exact expected reward J(θ_t) of every run at every step, (num_runs, steps + 1);
    with ``return_policy=True``, also every run's final policy π_θ, (num_runs, K), as a pair.
    """
    steps = check_int("steps", steps, minimum=0)
    num_runs = check_int("num_runs", num_runs, minimum=1)
    lr = check_positive("lr", lr)
    generator = torch.Generator().manual_seed(seed)
    theta = _logits(bandit, logits).expand(num_runs, -1).clone()
    history = [expected_reward(bandit, theta)]
    for _ in range(steps):
        probs = policy(theta)
        arms = torch.multinomial(probs, batch_size, replacement=True, generator=generator)
        rewards = bandit.pull(arms, generator)
        advantages = rewards - baseline_values(rewards, baseline, value=history[-1].unsqueeze(-1))
        scores = torch.nn.functional.one_hot(arms, bandit.num_arms).to(DTYPE) - probs.unsqueeze(1)
        theta = theta + lr * (advantages.unsqueeze(-1) * scores).mean(dim=1)
        history.append(expected_reward(bandit, theta))
    history = torch.stack(history, dim=1)
    return (history, policy(theta)) if return_policy else history


# ----------------------------------------------------------------------------------------------
# Two Gaussians: KL estimators with known answers


def gaussian_log_density(x: torch.Tensor, mu: float, sigma: float) -> torch.Tensor:
    """log N(x; μ, σ²)."""
    return -0.5 * ((x - mu) / sigma) ** 2 - math.log(sigma) - 0.5 * math.log(2 * math.pi)


def gaussian_kl(mu_q: float, sigma_q: float, mu_p: float, sigma_p: float) -> float:
    """KL(N(μ_q, σ_q²) ‖ N(μ_p, σ_p²)) = log(σ_p/σ_q) + (σ_q² + (μ_q − μ_p)²) / (2σ_p²) − ½."""
    check_positive("sigma_q", sigma_q)
    check_positive("sigma_p", sigma_p)
    return math.log(sigma_p / sigma_q) + (sigma_q**2 + (mu_q - mu_p) ** 2) / (2 * sigma_p**2) - 0.5


def sample_kl_estimates(mu: float, sigma: float = 1.0, *, n_samples: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Per-sample k1, k2, k3 (``rlbook.kl``) of KL(π_θ ‖ π_ref), π_θ = N(0, 1), π_ref = N(μ, σ²).

    x ~ π_θ; ``logp`` = log π_θ(x) and ``ref_logp`` = log π_ref(x), exactly as for LM tokens.
    """
    n_samples = check_int("n_samples", n_samples, minimum=2)
    check_positive("sigma", sigma)
    x = torch.randn(n_samples, dtype=DTYPE, generator=torch.Generator().manual_seed(seed))
    logp, ref_logp = gaussian_log_density(x, 0.0, 1.0), gaussian_log_density(x, mu, sigma)
    return {name: kl_estimate(logp, ref_logp, name) for name in ("k1", "k2", "k3")}


def ratio_survival(mu: float, sigma: float, thresholds) -> torch.Tensor:
    """P(r > t) for r = π_ref(x)/π_θ(x), x ~ π_θ = N(0, 1), π_ref = N(μ, σ²), at each t in ``thresholds``.

    log r = a x² + b x + c with a = ½ − 1/(2σ²), b = μ/σ², c = −μ²/(2σ²) − log σ
    (``kl_estimator_table_any_sigma``), so r > t is a quadratic inequality in x, solved exactly with the
    normal CDF Φ. For σ > 1 (a > 0) it holds outside the two roots; for large t,
    P(r > t) ≈ t^{−α}·(slowly varying), α = 1/(2a) = σ²/(σ² − 1) (the tail index that makes k3's
    variance infinite for σ² ≥ 2, α ≤ 2). For σ = 1 (a = 0) log r is Gaussian and the tail is
    log-normal, lighter than any power. σ < 1 (r bounded above) is refused: it has no tail to show.
    """
    sigma = check_positive("sigma", sigma)
    if sigma < 1:
        raise ValueError(f"sigma must be at least 1 (a reference as wide as the policy or wider), got {sigma!r}")
    t = torch.as_tensor(thresholds, dtype=DTYPE)
    if t.ndim != 1 or not bool((t > 0).all()):
        raise ValueError("thresholds must be a 1-D sequence of positive numbers")
    a, b, c = 0.5 - 0.5 / sigma**2, mu / sigma**2, -(mu**2) / (2 * sigma**2) - math.log(sigma)
    cdf = lambda x: 0.5 * torch.special.erfc(-x / math.sqrt(2))  # noqa: E731 — Φ via erfc, accurate far into the lower tail
    level = c - t.log()  # r > t  ⇔  a x² + b x + level > 0
    if a == 0:
        if b == 0:
            raise ValueError("mu = 0 and sigma = 1 give r = 1 everywhere: no tail")
        edge = -level / b  # b x + level > 0
        return cdf(-edge) if b > 0 else cdf(edge)
    disc = b**2 - 4 * a * level
    root = disc.clamp(min=0).sqrt()
    low, high = (-b - root) / (2 * a), (-b + root) / (2 * a)
    outside = cdf(low) + cdf(-high)  # Φ(−x), not 1 − Φ(x): exact far in the tail
    return torch.where(disc > 0, outside, torch.ones_like(outside))


def kl_estimator_table_exact(mu: float) -> dict[str, dict[str, float]]:
    """Schulman's table in closed form, for π_θ = N(0, 1) and π_ref = N(μ, 1).

    With x ~ N(0, 1), log r = μx − μ²/2 is Gaussian, mean −μ²/2 and variance μ², so KL = μ²/2 and

    - k1 = −log r:        bias 0,                  stdev μ;
    - k2 = ½ (log r)²:    bias μ⁴/8,               stdev √(μ⁴/2 + μ⁶/4);
    - k3 = r − 1 − log r: bias 0 (E r = 1),        stdev √(e^{μ²} − 1 − μ²).

    Returns ``{"true_kl": {"value": KL}, name: {"bias/true": …, "stdev/true": …}}``.
    """
    if mu == 0:
        raise ValueError("mu must be non-zero: at mu = 0 the true KL is 0 and the ratios are undefined")
    true_kl = mu**2 / 2
    rows = {
        "k1": (0.0, abs(mu)),
        "k2": (mu**4 / 8, math.sqrt(mu**4 / 2 + mu**6 / 4)),
        "k3": (0.0, math.sqrt(math.expm1(mu**2) - mu**2)),
    }
    table = {"true_kl": {"value": true_kl}}
    for name, (bias, stdev) in rows.items():
        table[name] = {"bias/true": bias / true_kl, "stdev/true": stdev / true_kl}
    return table


def _standard_normal_moment(power: int) -> float:
    """E[x^power] for x ~ N(0, 1): 0 for odd powers, (power − 1)!! for even ones."""
    return 0.0 if power % 2 else float(math.prod(range(power - 1, 0, -2)))


def _polynomial_mean(coefficients: np.ndarray) -> float:
    """E[Σ_j c_j x^j] for x ~ N(0, 1), ``coefficients`` in increasing powers."""
    return float(sum(c * _standard_normal_moment(j) for j, c in enumerate(coefficients)))


def kl_estimator_table_any_sigma(mu: float, sigma: float = 1.0) -> dict[str, dict[str, float]]:
    """The table of ``kl_estimator_table_exact`` for π_θ = N(0, 1) and π_ref = N(μ, σ²), any σ.

    With x ~ N(0, 1) the log-ratio is a quadratic, L = log r = a x² + b x + c with
    a = ½ − 1/(2σ²), b = μ/σ², c = −μ²/(2σ²) − log σ, so KL = −E[L] and

    - k1 = −L and k2 = ½ L² have moments that are polynomial moments of a Gaussian (E x^{2j} = (2j − 1)!!);
    - k3 = e^L − 1 − L needs E[e^{2L}] and E[L e^L], from the moment generating function of L,
      log E[e^{tL}] = ψ(t) = t c + t² b² / (2(1 − 2ta)) − ½ log(1 − 2ta) (finite while 1 − 2ta > 0):
      E[e^{2L}] = e^{ψ(2)} = ∫ π_ref²/π_θ, finite only when 1 − 4a > 0, i.e. σ² < 2; and
      E[L e^L] = ψ'(1) (since E[e^L] = 1), ψ'(t) = c + t b² (1 − ta)/(1 − 2ta)² + a/(1 − 2ta).

    k3's "stdev/true" is ``inf`` for σ² ≥ 2: its variance diverges, so a sample's stdev is finite but
    meaningless and its batch mean is heavy-tailed. At σ = 1 this equals ``kl_estimator_table_exact``
    (Schulman, "Approximating KL Divergence", 2020). Same return shape as that function.
    """
    sigma = check_positive("sigma", sigma)
    true_kl = gaussian_kl(0.0, 1.0, mu, sigma)
    if true_kl <= 0:
        raise ValueError("mu and sigma give π_ref = π_θ (KL 0): the ratios to the true KL are undefined")
    a, b, c = 0.5 - 0.5 / sigma**2, mu / sigma**2, -(mu**2) / (2 * sigma**2) - math.log(sigma)
    log_ratio = np.array([c, b, a])  # L as a polynomial in x, increasing powers
    moment = {k: _polynomial_mean(np.polynomial.polynomial.polypow(log_ratio, k)) for k in (1, 2, 4)}
    mean_l_exp_l = c + b**2 * (1 - a) / (1 - 2 * a) ** 2 + a / (1 - 2 * a)  # ψ'(1) = E[L e^L]
    if 1 - 4 * a > 0:
        mean_r_squared = math.exp(2 * c + 2 * b**2 / (1 - 4 * a)) / math.sqrt(1 - 4 * a)  # e^{ψ(2)}
        # E[k3²] = E[(r − 1)²] − 2 E[(r − 1) L] + E[L²], with E[r] = 1
        k3_second_moment = mean_r_squared - 1 - 2 * (mean_l_exp_l - moment[1]) + moment[2]
        k3_stdev = math.sqrt(max(k3_second_moment - true_kl**2, 0.0))
    else:
        k3_stdev = math.inf
    rows = {
        "k1": (0.0, math.sqrt(moment[2] - moment[1] ** 2)),
        "k2": (moment[2] / 2 - true_kl, math.sqrt(moment[4] - moment[2] ** 2) / 2),
        "k3": (0.0, k3_stdev),
    }
    table = {"true_kl": {"value": true_kl}}
    for name, (bias, stdev) in rows.items():
        table[name] = {"bias/true": bias / true_kl, "stdev/true": stdev / true_kl}
    return table


def k1_k3_spread_crossover(iterations: int = 100, *, sigma: float = 1.0) -> float:
    """The μ beyond which k3 spreads more than k1, for π_θ = N(0, 1) and π_ref = N(μ, σ²).

    At σ = 1, from ``kl_estimator_table_exact``: Var(k3) = e^{μ²} − 1 − μ² and Var(k1) = μ², equal where
    e^{u} = 1 + 2u with u = μ² > 0; found by bisection (e^u − 1 − 2u is negative, then positive,
    on (0, 2)). About 1.12: below it k3 is the better estimator, above it k1 is.

    For any σ the two stdevs of ``kl_estimator_table_any_sigma`` are compared and the sign change of
    stdev(k3) − stdev(k1) in μ is found by bisection (one sign change for 0.5 ≤ σ ≤ 1.2, checked by a
    grid scan in the tests). What drives Var(k3) is E_q[r²] = ∫ π_ref²/π_θ: reference mass where the
    policy is thin. A wider reference (σ > 1) puts it in the policy's tails, so the crossover comes at a
    far smaller KL; once k3 already spreads more at μ → 0 (σ ≳ 1.25, and always for σ² ≥ 2, where its
    variance is infinite) the function returns 0.0.
    """
    iterations = check_int("iterations", iterations, minimum=1)
    sigma = check_positive("sigma", sigma)
    if sigma == 1.0:
        low, high = 0.5, 2.0
        for _ in range(iterations):
            middle = 0.5 * (low + high)
            if math.expm1(middle) < 2 * middle:
                low = middle
            else:
                high = middle
        return math.sqrt(0.5 * (low + high))

    def k3_spreads_more(mu: float) -> bool:
        table = kl_estimator_table_any_sigma(mu, sigma)
        return table["k3"]["stdev/true"] > table["k1"]["stdev/true"]

    low, high = 1e-6, 1.0
    if k3_spreads_more(low):
        return 0.0
    while not k3_spreads_more(high):  # k3's variance grows like e^{μ²}, k1's like μ²: this ends
        low, high = high, 2 * high
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if k3_spreads_more(middle):
            high = middle
        else:
            low = middle
    return 0.5 * (low + high)


def k3_batch_mean_spread(mu: float, sigma: float, *, batch_sizes, batches: int, seed: int = 0,
                         resamples: int = 400) -> dict[int, dict[str, dict[str, float]]]:
    """How the batch mean of k1 and k3 spreads around the true KL as the batch grows (π_ref = N(μ, σ²)).

    For each n in ``batch_sizes``, ``batches`` batch means of n draws (drawn in chunks of at most
    four million, new seeds from ``seed``). Per estimator: ``"below"``, the share of batch means under
    the true KL; ``"median/true"``, the median batch mean over the KL, minus 1; ``"iqr/true"``, the
    interquartile range of the batch means over the KL; and ``"log_iqr_se"``, the bootstrap standard
    error of log IQR (``resamples`` resamples of the batches, seeded); ``"means/true"``, every batch
    mean over the KL (a tuple, in batch order), for a figure of their distribution.

    Why the IQR: with a finite variance the batch mean is near-normal for large n and its spread
    shrinks like n^{-1/2}, 10× for 100× the draws. k3 carries r = π_ref/π_θ, and for x ~ N(0, 1)
    P(r > t) falls like t^{-α} with α = σ²/(σ² − 1): for σ² ≥ 2, α ≤ 2 and the variance is infinite.
    A mean of such draws falls in the domain of a stable law of index α (generalised central limit
    theorem; Gnedenko & Kolmogorov 1954), whose spread shrinks like n^{1/α − 1}: at σ = 2 (α = 4/3)
    only 100^{1/4} ≈ 3.2× for 100× the draws. The IQR exists where the standard deviation does not.
    """
    check_positive("sigma", sigma)
    batches = check_int("batches", batches, minimum=4)
    resamples = check_int("resamples", resamples, minimum=10)
    sizes = [check_int("batch_sizes", n, minimum=2) for n in batch_sizes]
    if not sizes:
        raise ValueError("batch_sizes must name at least one batch size")
    true_kl = gaussian_kl(0.0, 1.0, mu, sigma)
    quartiles = torch.tensor([0.25, 0.5, 0.75], dtype=DTYPE)
    generator = torch.Generator().manual_seed(seed)
    result, next_seed = {}, seed
    for n in sizes:
        means = {"k1": [], "k3": []}
        per_chunk, done = max(1, 4_000_000 // n), 0
        while done < batches:
            rows = min(per_chunk, batches - done)
            draws = sample_kl_estimates(mu, sigma, n_samples=rows * n, seed=next_seed)
            next_seed += 1
            for name in means:
                means[name].append(draws[name].view(rows, n).mean(1))
            done += rows
            del draws
        result[n] = {}
        for name, chunks in means.items():
            values = torch.cat(chunks)
            low, middle, high = torch.quantile(values, quartiles).tolist()
            picks = torch.randint(0, batches, (resamples, batches), generator=generator)
            boot = torch.quantile(values[picks], quartiles[[0, 2]], dim=1)
            result[n][name] = {
                "below": float((values < true_kl).double().mean()),
                "median/true": middle / true_kl - 1,
                "iqr/true": (high - low) / true_kl,
                "log_iqr_se": float((boot[1] - boot[0]).log().std()),
                "means/true": tuple((values / true_kl).tolist()),
            }
    return result


def below_share_decay(shares, batch_sizes, batches) -> dict[str, float]:
    """How fast a batch mean's skew fades: the power of n in the share of batch means below the mean.

    ``shares[i]`` is the share of ``batches[i]`` independent batch means of ``batch_sizes[i]`` draws
    that fall below the expectation (``k3_batch_mean_spread``'s ``"below"``); ``batches`` may be one
    int for every size. For a right-skewed draw the excess e(n) = share − ½ fades like a power of n:
    n^{−1/2} when the third moment is finite (the first Edgeworth term, γ / (6 √(2π n))), and more
    slowly, like n^{1 − α/2} up to a slowly varying factor, when the tail P(X > t) falls like t^{−α}
    with 2 < α < 3 (finite variance, infinite third moment: the truncated third moment grows like
    n^{(3 − α)/2}; P. Hall 1982, *Rates of Convergence in the Central Limit Theorem*).

    Fits log e(n) = a + b log n by weighted least squares, each point weighted by the inverse of its
    delta-method variance share(1 − share) / (batches · e²), and returns ``{"slope": b, "slope_se":
    its standard error, "excess": (e(n) per size)}``. Every share must exceed ½ and at least two
    sizes must differ.
    """
    sizes = [check_int("batch_sizes", n, minimum=1) for n in batch_sizes]
    counts = [batches] * len(sizes) if isinstance(batches, int) else list(batches)
    if len(shares) != len(sizes) or len(counts) != len(sizes):
        raise ValueError(f"shares, batch_sizes and batches must have one entry per size, got {len(shares)}, "
                         f"{len(sizes)} and {len(counts)}")
    if len(set(sizes)) < 2:
        raise ValueError("batch_sizes must hold at least two different sizes to fit a slope")
    counts = [check_int("batches", b, minimum=2) for b in counts]
    excess = [float(s) - 0.5 for s in shares]
    if not all(0 < e < 0.5 for e in excess):
        raise ValueError(f"every share must lie strictly between 1/2 and 1 to take the log of its excess, got {list(shares)}")
    x = np.log(np.asarray(sizes, dtype=float))
    y = np.log(np.asarray(excess))
    w = np.array([b * e**2 / ((0.5 + e) * (0.5 - e)) for b, e in zip(counts, excess)])
    x_bar = float((w * x).sum() / w.sum())
    sxx = float((w * (x - x_bar) ** 2).sum())
    slope = float((w * (x - x_bar) * y).sum() / sxx)
    return {"slope": slope, "slope_se": math.sqrt(1.0 / sxx), "excess": tuple(excess)}


def kl_estimator_table_monte_carlo(mu: float, sigma: float = 1.0, *, n_samples: int,
                                   seed: int = 0, stdev_batches: int = 100) -> dict[str, dict[str, float]]:
    """The same table measured from ``n_samples`` draws, with the standard errors of what it measures.

    - ``"bias_se/true"`` = stdev / √n / true, the standard error of the bias: a bias within a few of
      these is not distinguishable from zero at this sample size.
    - ``"stdev_se/true"``: the standard error of the sample stdev s, by the delta method,
      √((m₄ − s⁴)/n) / (2s) with m₄ the fourth central moment of the sample (it needs a finite
      fourth moment to mean anything: not for k3 when σ² ≥ 2, where even the variance diverges).
    - For k1 and k2, ``"bias_vs_k3/true"`` and ``"bias_vs_k3_se/true"``: the bias measured as the
      mean of k − k3 on the same draws. k3 is unbiased (E r = 1), so this estimates the same bias;
      for k2 the paired difference ½L² − (e^L − 1 − L) ≈ −L³/6 is tiny when L is, so its standard
      error is far smaller than k2's own (common random numbers).
    - ``"stdev_batch_se/true"``: the standard error of the sample stdev by batch means, free of the
      fourth-moment estimate: the draws are cut into ``stdev_batches`` equal consecutive batches, the
      stdev is measured in each, and the SE is their spread over √``stdev_batches`` (for the
      log-normal-like k3 the delta method's sample fourth moment is itself noisy, and usually low).
      Needs ``n_samples`` ≥ 2·``stdev_batches``; trailing draws that do not fill a batch are left out of it.
    """
    stdev_batches = check_int("stdev_batches", stdev_batches, minimum=2)
    if n_samples < 2 * stdev_batches:
        raise ValueError(f"n_samples must be at least 2 * stdev_batches = {2 * stdev_batches}, got {n_samples}")
    true_kl = gaussian_kl(0.0, 1.0, mu, sigma)
    table = {"true_kl": {"value": true_kl}}
    samples = sample_kl_estimates(mu, sigma, n_samples=n_samples, seed=seed)
    for name, values in samples.items():
        stdev = float(values.std())
        fourth = float(((values - values.mean()) ** 4).mean())
        table[name] = {
            "bias/true": (float(values.mean()) - true_kl) / true_kl,
            "stdev/true": stdev / true_kl,
            "bias_se/true": stdev / math.sqrt(n_samples) / true_kl,
            "stdev_se/true": math.sqrt(max(fourth - stdev**4, 0.0) / n_samples) / (2 * stdev) / true_kl,
        }
        per_batch = values[: n_samples - n_samples % stdev_batches].reshape(stdev_batches, -1).std(dim=1)
        table[name]["stdev_batch_se/true"] = float(per_batch.std()) / math.sqrt(stdev_batches) / true_kl
        if name != "k3":
            paired = values - samples["k3"]
            table[name]["bias_vs_k3/true"] = float(paired.mean()) / true_kl
            table[name]["bias_vs_k3_se/true"] = float(paired.std()) / math.sqrt(n_samples) / true_kl
    return table


# ----------------------------------------------------------------------------------------------
# A categorical policy: which divergence each gradient follows, by exact enumeration


def _categorical(values, ref_probs, *, name: str = "logits",
                 probs_name: str = "ref_probs") -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` (one number per outcome, called ``name``) and a distribution ``ref_probs`` (called
    ``probs_name`` in errors) as float64, checked."""
    values = torch.as_tensor(values, dtype=DTYPE)
    ref_probs = torch.as_tensor(ref_probs, dtype=DTYPE)
    if values.dim() != 1 or ref_probs.shape != values.shape:
        raise ValueError(f"{name} and {probs_name} must be 1-D of the same size, got {tuple(values.shape)} "
                         f"and {tuple(ref_probs.shape)}")
    if (ref_probs <= 0).any() or abs(float(ref_probs.sum()) - 1) > 1e-9:
        raise ValueError(f"{probs_name} must be positive and sum to 1")
    return values, ref_probs


def expected_estimator_gradient(logits, ref_probs, estimator: str, *, sampling_probs=None,
                                importance_weighted: bool = False, placement: str = "loss") -> torch.Tensor:
    """E_{x~π_θ}[∇_θ k(x)] = ∇_θ Σ_x sg[π_θ(x)] · k(x), computed exactly.

    The weights π_θ(x) are *not* differentiated: a sample carries no gradient through the fact
    that it was drawn, exactly as when k is averaged over sampled tokens in a loss.

    ``sampling_probs`` = π_old: the tokens were drawn from an older policy (PPO's and GRPO's later
    epochs on one batch), and the result is E_{x~π_old}[∇_θ k(x)]. On-policy identities then fail:
    for k1 it is Σ π_old ∇log π_θ = −∇ KL(π_old ‖ π_θ), not 0 (Liu et al. 2025, arXiv:2510.01555,
    on off-policy KL losses). ``importance_weighted=True`` multiplies k by the ratio π_θ/π_old
    (``rlbook.kl.kl_in_loss``'s ``ratio``, as DeepSeek-V3.2 and TRL's ``use_bias_correction_kl``
    do), which makes the sum Σ_x π_θ(x) k(x) = E_{π_θ}[k] with its weights differentiated: for k1
    and k3 the reverse-KL gradient, on fresh and on stale samples alike.

    ``placement="reward"``: k goes into the reward instead, detached, through ``kl_in_reward``, and the
    REINFORCE term sg[k(x)] · ∇log π_θ(x) is what is averaged (the sign is the penalty's, to descend).
    Only k1 gives ∇KL(π_θ ‖ π_ref) there, since the identity needs k = log(π_θ/π_ref) sample by sample;
    k3 gives ∇KL(π_θ ‖ π_ref) − ∇KL(π_ref ‖ π_θ) (Shah et al. 2025, arXiv:2512.21852, "K3 in reward").
    """
    check_choice("placement", placement, ("loss", "reward"))
    if placement == "reward" and importance_weighted:
        raise ValueError("importance_weighted applies to placement='loss' only")
    logits, ref_probs = _categorical(logits, ref_probs)
    theta = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=0)
    if sampling_probs is None:
        sampler = logp.exp().detach()
    else:
        _, sampler = _categorical(logits, sampling_probs, probs_name="sampling_probs")
    ratio = (logp - sampler.log()).exp() if importance_weighted else None
    if placement == "reward":  # one-token responses: the shaped reward −k is the whole return
        ones = torch.ones(len(logp), 1, dtype=logp.dtype)
        value = kl_estimate(logp, ref_probs.log(), estimator).detach()[:, None]
        returns = kl_in_reward(torch.zeros(len(logp), dtype=logp.dtype), value, beta=1.0, mask=ones)[:, 0]
        terms = -returns * logp
    else:
        terms = kl_in_loss(logp, ref_probs.log(), beta=1.0, estimator=estimator, ratio=ratio)
    (gradient,) = torch.autograd.grad((sampler * terms).sum(), theta)
    return gradient


def per_sample_estimator_gradients(logits, ref_probs, estimator: str) -> torch.Tensor:
    """∇_θ k(x) for every outcome x, as the rows of a (K, K) matrix (π_θ = softmax(logits)).

    Per sample, with ∇log r = −∇log π_θ(x) = −(e_x − π_θ) (Schulman 2020's estimators; K. Liu et al.
    2025, arXiv:2510.01555, write each as a coefficient times the score):

    - ∇k1 = ∇log π_θ(x), the score itself;
    - ∇k2 = (log π_θ − log π_ref)(x) ∇log π_θ(x) = k1(x) ∇log π_θ(x), the very term that k1 placed in
      the reward contributes (so for one token the two are the same gradient, sample by sample);
    - ∇k3 = (1 − r(x)) ∇log π_θ(x), r = π_ref/π_θ: unbounded where π_θ ≪ π_ref, while k1 grows only
      like log(π_ref/π_θ).
    """
    logits, ref_probs = _categorical(logits, ref_probs)
    theta = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=0)
    values = kl_estimate(logp, ref_probs.log(), estimator)
    rows = [torch.autograd.grad(values[x], theta, retain_graph=True)[0] for x in range(len(values))]
    return torch.stack(rows)


def estimator_gradient_variance(logits, ref_probs, estimator: str) -> float:
    """The variance of a one-sample KL-term gradient, E_x‖∇k(x)‖² − ‖E_x ∇k(x)‖² with x ~ π_θ (exact).

    The trace of the covariance of ``per_sample_estimator_gradients`` under π_θ: what one sampled token
    adds to the noise of a gradient step (β = 1; scale by β²). For k3 its coefficient (1 − r)² weighted
    by π_θ puts π_ref²/π_θ in the sum, the same E_q[r²] that makes k3's *value* heavy-tailed.
    """
    logits, ref_probs = _categorical(logits, ref_probs)
    gradients = per_sample_estimator_gradients(logits, ref_probs, estimator)
    probs = torch.softmax(logits, dim=0)
    mean = probs @ gradients
    return float((probs * (gradients**2).sum(1)).sum() - (mean**2).sum())


def reverse_kl(logits, ref_probs) -> torch.Tensor:
    """KL(π_θ ‖ π_ref) = Σ_x π_θ(x) log(π_θ(x) / π_ref(x)) (differentiable in ``logits``)."""
    logits, ref_probs = _categorical(logits, ref_probs)
    logp = torch.log_softmax(logits, dim=0)
    return (logp.exp() * (logp - ref_probs.log())).sum()


def forward_kl(logits, ref_probs) -> torch.Tensor:
    """KL(π_ref ‖ π_θ) = Σ_x π_ref(x) log(π_ref(x) / π_θ(x)) (differentiable in ``logits``)."""
    logits, ref_probs = _categorical(logits, ref_probs)
    return (ref_probs * (ref_probs.log() - torch.log_softmax(logits, dim=0))).sum()


def kl_gradient(logits, ref_probs, direction: str) -> torch.Tensor:
    """∇_θ of ``reverse_kl`` (direction "reverse") or ``forward_kl`` (direction "forward")."""
    check_choice("direction", direction, ("reverse", "forward"))
    theta = torch.as_tensor(logits, dtype=DTYPE).clone().requires_grad_(True)
    divergence = (reverse_kl if direction == "reverse" else forward_kl)(theta, ref_probs)
    (gradient,) = torch.autograd.grad(divergence, theta)
    return gradient


def placement_gradient(logits, ref_probs, rewards, *, beta: float, placement: str) -> torch.Tensor:
    """The expected gradient of "maximise reward, penalise KL" for one placement of the penalty.

    Every x is one response of one token (B = K rows, T = 1), weighted by sg[π_θ(x)]:

    - ``"k1_in_reward"``: the shaped reward R − β·sg[k1] (``rlbook.kl.kl_in_reward``) multiplies
      ∇log π, as in REINFORCE;
    - ``"kN_in_loss"``: REINFORCE on R alone, plus the loss term β·kN (``rlbook.kl.kl_in_loss``)
      differentiated directly; ``"k3+_in_loss"`` is verl's straight-through k3 (k3's value, k2's
      gradient: ``rlbook.kl.k3_straight_through``).

    Returns the ascent direction (the gradient of the objective, not of the loss).
    """
    check_choice("placement", placement, KL_PLACEMENTS)
    logits, ref_probs = _categorical(logits, ref_probs)
    rewards = torch.as_tensor(rewards, dtype=DTYPE)
    theta = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=0).unsqueeze(1)  # (K, 1): K one-token responses
    ref_logp = ref_probs.log().unsqueeze(1)
    weights = logp.exp().detach()
    estimator = placement.split("_")[0]
    if placement == "k1_in_reward":
        shaped = kl_in_reward(rewards, kl_estimate(logp, ref_logp, "k1"), beta, torch.ones_like(logp))
        objective = (weights * shaped * logp).sum()
    else:
        penalty = kl_in_loss(logp, ref_logp, beta=beta, estimator=estimator)
        objective = (weights * (rewards.unsqueeze(1) * logp - penalty)).sum()
    (gradient,) = torch.autograd.grad(objective, theta)
    return gradient


def regularised_ascent(logits, ref_probs, rewards, *, beta: float, placement: str, steps: int,
                       lr: float) -> torch.Tensor:
    """Exact gradient ascent θ ← θ + lr · ``placement_gradient``; returns the final π_θ."""
    steps = check_int("steps", steps, minimum=0)
    lr = check_positive("lr", lr)
    theta, _ = _categorical(logits, ref_probs)
    for _ in range(steps):
        theta = theta + lr * placement_gradient(theta, ref_probs, rewards, beta=beta, placement=placement)
    return torch.softmax(theta, dim=0)


def reverse_kl_optimum(ref_probs, rewards, *, beta: float) -> torch.Tensor:
    """The KL-regularised optimum: argmax_π E_π[R] − β KL(π ‖ π_ref) over distributions on a finite set,

        π*(x) = π_ref(x) exp(R(x)/β) / Z,    Z = Σ_x π_ref(x) exp(R(x)/β)

    (the RLHF closed form; Rafailov et al. 2023, "Direct Preference Optimization", arXiv:2305.18290,
    eq. 4). Computed as a softmax of log π_ref + R/β, so that a small β does not overflow.
    """
    rewards, ref_probs = _categorical(rewards, ref_probs, name="rewards")
    beta = check_positive("beta", beta)
    return torch.softmax(ref_probs.log() + rewards / beta, dim=0)


def forward_kl_optimum(ref_probs, rewards, *, beta: float, iterations: int = 200) -> torch.Tensor:
    """argmax_π E_π[R] − β KL(π_ref ‖ π): π(x) = β π_ref(x) / (λ − R(x)), λ > max R with Σ π = 1.

    Setting the derivative of the Lagrangian to zero, R(x) + β π_ref(x)/π(x) = λ; λ is found by
    bisection (Σ π decreases in λ from +∞ just above max R to 0).
    """
    rewards, ref_probs = _categorical(rewards, ref_probs, name="rewards")
    beta = check_positive("beta", beta)
    low, high = float(rewards.max()), float(rewards.max()) + beta + 1.0
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if float((beta * ref_probs / (middle - rewards)).sum()) > 1:
            low = middle
        else:
            high = middle
    probs = beta * ref_probs / (0.5 * (low + high) - rewards)
    return probs / probs.sum()


# ----------------------------------------------------------------------------------------------
# A policy with rewards it was never trained on: best-of-n by exact enumeration


def toy_policy(num_outcomes: int = 30, *, temperature: float = 1.0, reward_levels: int | None = None,
               seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A toy policy π = softmax(z / T) over ``num_outcomes`` outcomes, z ~ N(0, 1) fixed by ``seed``,
    and rewards 0, 1, …: distinct, or only ``reward_levels`` distinct values (ties) when given.

    Rewards are independent of π, like a reward the policy was never trained on."""
    num_outcomes = check_int("num_outcomes", num_outcomes, minimum=2)
    temperature = check_positive("temperature", temperature)
    generator = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(num_outcomes, dtype=DTYPE, generator=generator) / temperature, dim=0)
    rewards = torch.randperm(num_outcomes, generator=generator).double()
    if reward_levels is not None:
        rewards = torch.div(rewards * check_int("reward_levels", reward_levels, minimum=1), num_outcomes,
                            rounding_mode="floor")
    return probs, rewards


def _tilted_kl(ref_probs: torch.Tensor, rewards: torch.Tensor, inverse_beta: torch.Tensor) -> torch.Tensor:
    """KL(π*_β ‖ π_ref) for each λ = 1/β of ``inverse_beta`` (λ = 0: π_ref itself)."""
    log_ref = ref_probs.log()
    log_tilted = torch.log_softmax(log_ref + inverse_beta[:, None] * rewards, dim=1)
    return (log_tilted.exp() * (log_tilted - log_ref)).nan_to_num().sum(dim=1)


def _solve_increasing(function, targets: torch.Tensor, iterations: int) -> torch.Tensor:
    """The λ ≥ 0 with ``function(λ) = targets`` (elementwise), for a ``function`` that rises with λ from
    function(0) ≤ targets: double an upper end until it passes the target (or λ is effectively ∞, after
    200 doublings), then bisect ``iterations`` times; returns the midpoints."""
    low, high = torch.zeros_like(targets), torch.ones_like(targets)
    for _ in range(200):
        short = function(high) < targets
        if not short.any():
            break
        low, high = torch.where(short, high, low), torch.where(short, 2 * high, high)
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        above = function(middle) >= targets
        low, high = torch.where(above, low, middle), torch.where(above, middle, high)
    return 0.5 * (low + high)


def optimum_at_kl(ref_probs, rewards, kl, *, iterations: int = 100) -> torch.Tensor:
    """The KL-regularised optimum π*_β = ``reverse_kl_optimum(ref_probs, rewards, beta)`` whose
    KL(π*_β ‖ π_ref) equals ``kl`` (a number or a (K,) tensor of them; returns (V,) or (K, V)).

    With λ = 1/β, π*_λ ∝ π_ref e^(λ r) and KL(λ) = λ E_{π*_λ}[r] − log E_{π_ref}[e^(λ r)], whose
    derivative is λ Var_{π*_λ}(r) ≥ 0: the KL rises from 0 at λ = 0 (π_ref) to −log π_ref(top level)
    as λ → ∞ (π_ref conditioned on the highest reward; Rafailov et al. 2023, arXiv:2305.18290, eq. 4
    for the closed form). So λ is found by bisection, after doubling an upper end until it passes
    the target. A ``kl`` above that ceiling raises ``ValueError``; within 1e-9 of it, the last λ tried
    stands for λ = ∞.
    """
    rewards, ref_probs = _categorical(rewards, ref_probs, name="rewards")
    targets = torch.as_tensor(kl, dtype=DTYPE).reshape(-1)
    iterations = check_int("iterations", iterations, minimum=1)
    top = rewards == rewards.max()
    ceiling = -math.log(float(ref_probs[top].sum()))
    if not torch.isfinite(targets).all() or (targets < 0).any() or (targets > ceiling + 1e-9).any():
        raise ValueError(f"kl must be finite, non-negative and at most −log π_ref(top reward) = {ceiling:.6g}, "
                         f"got {targets.tolist()}")
    targets = targets.clamp(max=ceiling - 1e-12)
    inverse_beta = _solve_increasing(lambda lam: _tilted_kl(ref_probs, rewards, lam), targets, iterations)
    optima = torch.softmax(ref_probs.log() + inverse_beta[:, None] * rewards, dim=1)
    return optima[0] if torch.as_tensor(kl).dim() == 0 else optima


def best_of_n_efficiency(probs, rewards, ns) -> dict[str, np.ndarray]:
    """Best-of-n against the KL-regularised optimum at the same KL, for each n of ``ns``.

    Returns arrays over ``ns``: ``kl`` (best-of-n's exact KL from π), ``gain`` (its E[r] − E_π[r]),
    ``optimum_gain`` (the gain of ``optimum_at_kl`` at that KL: the most any policy can gain
    at that KL, since π*_β maximises E[r] − β KL) and ``ratio`` = gain / optimum_gain (NaN where
    the KL is 0, e.g. n = 1, where both gains are 0).
    """
    probs = torch.as_tensor(probs, dtype=DTYPE)
    rewards = torch.as_tensor(rewards, dtype=DTYPE)
    ns = [check_int("ns", n, minimum=1) for n in ns]
    if not ns:
        raise ValueError("ns must hold at least one n")
    base = float(probs @ rewards)
    kl = np.array([best_of_n_exact_kl(probs, rewards, n) for n in ns])
    gain = np.array([float(best_of_n_distribution(probs, rewards, n) @ rewards) - base for n in ns])
    optimum_gain = (optimum_at_kl(probs, rewards, torch.as_tensor(kl)) @ rewards).numpy() - base
    moved = kl > 1e-12
    ratio = np.full(len(ns), np.nan)
    ratio[moved] = gain[moved] / optimum_gain[moved]
    return {"n": np.array(ns), "kl": kl, "gain": gain, "optimum_gain": optimum_gain, "ratio": ratio}


def _pass_rates(pass_rates) -> torch.Tensor:
    rates = torch.as_tensor(pass_rates, dtype=DTYPE).reshape(-1)
    if rates.numel() == 0 or not torch.isfinite(rates).all() or (rates < 0).any() or (rates > 1).any():
        raise ValueError(f"pass_rates must be a non-empty list of numbers in [0, 1], got {pass_rates!r}")
    return rates


def _tilted_success(rates: torch.Tensor, inverse_beta: torch.Tensor) -> torch.Tensor:
    """(L, P): each prompt's success rate under π*_β ∝ π e^(r/β), r ∈ {0, 1}, for each λ = 1/β:
    p e^λ / (p e^λ + 1 − p), i.e. the logit of p shifted by λ (0 and 1 stay put)."""
    lam = inverse_beta.reshape(-1, 1)
    tilted = rates * lam.exp() / (rates * lam.exp() + 1 - rates)
    return torch.where((rates > 0) & (rates < 1), tilted, rates.expand_as(tilted))


def verifier_frontier(pass_rates, inverse_betas) -> dict[str, np.ndarray]:
    """The reward–KL frontier of a 0/1 verifier over a *set* of prompts: one β shared by every prompt.

    On prompt x with pass rate p_x, π*_β ∝ π e^(r/β) keeps π's shape within the right and the wrong
    answers and puts q_x(λ) = p_x e^λ / (p_x e^λ + 1 − p_x) on the right ones (λ = 1/β), at
    KL(Bernoulli(q_x) ‖ Bernoulli(p_x)) from π (Rafailov et al. 2023, arXiv:2305.18290, eq. 4, on two
    reward levels). The mean over prompts of E[r] − β KL is maximised prompt by prompt at one shared β,
    so sweeping β traces the most mean success any policy can have at each mean KL: the frontier a
    KL-regularised policy trained on the whole prompt set aims for. Returns arrays over
    ``inverse_betas``: ``inverse_beta``, ``kl`` (mean KL over prompts, nats) and ``success`` (mean q).
    A prompt with p = 0 or 1 cannot move: it adds 0 to the KL and its p to the success.
    """
    rates = _pass_rates(pass_rates)
    lam = torch.as_tensor(inverse_betas, dtype=DTYPE).reshape(-1)
    if lam.numel() == 0 or not torch.isfinite(lam).all() or (lam < 0).any():
        raise ValueError(f"inverse_betas must be finite numbers ≥ 0, got {inverse_betas!r}")
    success = _tilted_success(rates, lam)
    return {"inverse_beta": lam.numpy(), "kl": bernoulli_kl(success, rates.expand_as(success)).mean(dim=1).numpy(),
            "success": success.mean(dim=1).numpy()}


def verifier_optimum_at_kl(pass_rates, kl, *, iterations: int = 100) -> np.ndarray:
    """The most mean success a policy can have at mean KL ``kl`` (a number or a list) from π over the
    prompts of ``pass_rates``: ``verifier_frontier`` at the shared λ = 1/β whose mean KL is ``kl``.

    Each prompt's KL rises with λ (the derivative of KL(λ) is λ Var(r) ≥ 0, as in ``optimum_at_kl``), so
    the mean does too, from 0 to the mean of log(1/p) over the prompts with 0 < p (π conditioned on
    success); λ is found by bisection. A ``kl`` above that ceiling raises ``ValueError``.
    Returns an array of mean success rates, one per ``kl``."""
    rates = _pass_rates(pass_rates)
    targets = torch.as_tensor(kl, dtype=DTYPE).reshape(-1)
    iterations = check_int("iterations", iterations, minimum=1)
    ceiling = float(torch.where(rates > 0, -rates.clamp(min=1e-300).log(), torch.zeros_like(rates)).mean())
    if not torch.isfinite(targets).all() or (targets < 0).any() or (targets > ceiling + 1e-9).any():
        raise ValueError(f"kl must be finite, non-negative and at most the mean log(1/p) = {ceiling:.6g}, "
                         f"got {targets.tolist()}")

    def mean_kl(lam):
        success = _tilted_success(rates, lam)
        return bernoulli_kl(success, rates.expand_as(success)).mean(dim=1)

    return _tilted_success(rates, _solve_increasing(mean_kl, targets, iterations)).mean(dim=1).numpy()


def verifier_best_of_n_efficiency(pass_rates, ns) -> dict[str, np.ndarray]:
    """Best-of-n with one n for every prompt, against the shared-β frontier of ``verifier_frontier``.

    On one prompt, best-of-n under a 0/1 verifier *is* π*_β at 1/β = log[q(1 − p)/(p(1 − q))] with
    q = 1 − (1 − p)^n (lesson 05): on that prompt's frontier. That β depends on p, so over prompts of
    different pass rates one n is a different β on each, and the pair (mean KL, mean success) can fall
    short of the frontier that one shared β traces. Returns arrays over ``ns``: ``kl`` (mean exact KL,
    nats), ``gain`` (mean q − mean p), ``optimum_gain`` (the frontier's gain at that mean KL,
    ``verifier_optimum_at_kl``) and ``ratio`` = gain / optimum_gain (NaN where nothing moved, n = 1).
    """
    rates = _pass_rates(pass_rates)
    ns = [check_int("ns", n, minimum=1) for n in ns]
    if not ns:
        raise ValueError("ns must hold at least one n")
    success = torch.stack([1 - (1 - rates) ** n for n in ns])                  # (N, P)
    kl = bernoulli_kl(success, rates.expand_as(success)).mean(dim=1).numpy()
    gain = (success.mean(dim=1) - rates.mean()).numpy()
    optimum_gain = verifier_optimum_at_kl(rates, kl) - float(rates.mean())
    moved = kl > 1e-12
    ratio = np.full(len(ns), np.nan)
    ratio[moved] = gain[moved] / optimum_gain[moved]
    return {"n": np.array(ns), "kl": kl, "gain": gain, "optimum_gain": optimum_gain, "ratio": ratio}


# ----------------------------------------------------------------------------------------------
# One preference pair and a tabular policy: DPO's margin never stops, IPO's does


def toy_margin_dynamics(loss: str, *, steps: int = 2000, lr: float = 0.1, beta: float = 0.5, tau: float = 0.25,
                        n_responses: int = 4, optimizer: str = "gd") -> np.ndarray:
    """The log-ratio margin h at the start of each of ``steps`` gradient steps on one preference pair.

    The toy: one prompt, ``n_responses`` responses, a tabular policy π = softmax(θ) starting at
    π_ref (uniform), the pair (y_w = response 0, y_l = response 1), trained on
    ``rlbook.losses.dpo_loss`` (``loss="dpo"``, with ``beta``) or ``ipo_loss`` (``loss="ipo"``, with
    ``tau``). DPO's margin keeps growing (its gradient β σ(−β h) is never zero), IPO's converges to
    1/(2τ) (Azar et al. 2023, arXiv:2310.12036). Returns (steps,) margins; the first is 0 (π = π_ref).

    ``optimizer``: ``"gd"``, plain gradient descent with step ``lr`` (each step moves h by
    2·lr·(−∂L/∂h), so under DPO h ≈ (1/β) log t); or ``"adam"``, torch's Adam with step ``lr`` and
    its default betas (0.9, 0.999) (Kingma & Ba 2015, arXiv:1412.6980, Algorithm 1), the optimiser
    of the book's preference runs: Adam divides each step by a running root-mean-square of the
    gradient, so a step's size no longer follows the pull's size — the first steps move every
    logit by about ``lr`` whatever the loss, and a fading pull does not mean a fading step.
    """
    check_choice("loss", loss, ("dpo", "ipo"))
    check_choice("optimizer", optimizer, ("gd", "adam"))
    steps = check_int("steps", steps, minimum=1)
    lr = check_positive("lr", lr)
    n_responses = check_int("n_responses", n_responses, minimum=2)
    logits = torch.zeros(n_responses, dtype=DTYPE, requires_grad=True)
    adam = torch.optim.Adam([logits], lr=lr) if optimizer == "adam" else None
    ref = torch.log_softmax(torch.zeros(n_responses, dtype=DTYPE), 0)
    margins = np.empty(steps)
    for step in range(steps):
        logp = torch.log_softmax(logits, 0)
        pair = (logp[:1], logp[1:2], ref[:1], ref[1:2])
        value = dpo_loss(*pair, beta) if loss == "dpo" else ipo_loss(*pair, tau)
        (grad,) = torch.autograd.grad(value.sum(), logits)
        if adam is None:
            with torch.no_grad():
                logits -= lr * grad
        else:
            logits.grad = grad
            adam.step()
        margins[step] = float(((logp[0] - ref[0]) - (logp[1] - ref[1])).detach())
    return margins


# ----------------------------------------------------------------------------------------------
# The 1/|o| length bias in a two-decision policy: what each answer's length drifts to (lesson 10)


def _length_toy_policy(answer_logit, continue_logits, max_len: int):
    """Exact P(correct) and the expected length of a correct and of a wrong response (capped at max_len)."""
    lengths = torch.arange(2, max_len + 1, dtype=DTYPE)           # |o| = answer + k fillers + stop
    q = torch.sigmoid(continue_logits.detach())[:, None]          # P(one more filler), per answer
    k = lengths - 2
    pmf = q ** k * (1 - q)
    pmf[:, -1] = q[:, 0] ** (max_len - 2)                         # the cap takes the whole tail
    expected = (pmf * lengths).sum(1)
    return float(torch.sigmoid(answer_logit.detach())), float(expected[0]), float(expected[1])


def length_bias_toy(mode: str = "seq_mean_token_mean", advantage: str = "grpo", *, steps: int = 150,
                    prompts: int = 16, group_size: int = 8, lr: float = 0.05, max_len: int = 64,
                    p_correct: float = 0.3, start_length: float = 8.0, seed: int = 0,
                    optimizer: str = "adam") -> dict[str, np.ndarray]:
    """Train a two-decision policy with a GRPO-style loss and follow the length of right and wrong answers.

    The toy (lesson 10): one question, asked ``prompts`` times per step with ``group_size`` samples
    each. A response is an answer token (correct with probability σ(a)), then filler tokens, each
    followed by another with probability σ(u_c) (a separate logit for a correct and for a wrong
    answer, so the policy *can* make wrong answers longer than right ones), then a stop token;
    ``max_len`` caps |o|. The reward is 1 for a correct answer, whatever its length, so the policy
    gradient has no reason to change either length: E[∇ log π(length | answer)] = 0.

    Each step samples a batch, takes the advantages of ``rlbook.advantages.group_advantages(advantage)``
    and the token weights of ``rlbook.aggregation.token_weights(mode, max_len=max_len)``, and takes
    one Adam step (``lr``; ``optimizer="sgd"``: one plain gradient step instead, to see how much of the
    drift's speed is Adam's per-parameter scaling) on −Σ w · A · log π of every token, exactly as
    ``rlbook.losses`` does at ratio 1. Under 1/|o| (``seq_mean_token_mean``, GRPO) the length term is weighted by 1/|o|, and
    E[(1/|o|) ∇ log π(|o|)] = ∇ E[1/|o|] ≠ 0: with A < 0 a wrong answer is pushed toward length,
    with A > 0 a right one toward brevity — the length bias of Liu et al. (2025, arXiv:2503.20783,
    §3.1). Under a constant L (``seq_mean_token_sum_norm``, Dr.GRPO) the length terms average to zero.

    Returns arrays over ``steps + 1`` points (before each step, and after the last): ``p_correct``,
    the policy's exact expected length of a ``length_correct`` and a ``length_incorrect`` response,
    and ``capped_correct`` / ``capped_incorrect``: the exact probability that such a response runs
    to the cap, |o| = ``max_len`` (q^(max_len − 2), q the continue probability), i.e. that the
    budget, not the policy's stop token, ends it. The same arguments give the same numbers.
    """
    from rlbook.advantages import group_advantages
    from rlbook.aggregation import AGGREGATION_MODES, token_weights

    check_choice("mode", mode, AGGREGATION_MODES)
    check_choice("advantage", advantage, ("grpo", "dr_grpo", "rloo"))
    steps = check_int("steps", steps, minimum=1)
    prompts = check_int("prompts", prompts, minimum=1)
    group_size = check_int("group_size", group_size, minimum=2)
    lr = check_positive("lr", lr)
    max_len = check_int("max_len", max_len, minimum=3)
    if not 0 < p_correct < 1:
        raise ValueError(f"p_correct must be in (0, 1), got {p_correct!r}")
    if not 2 < start_length < max_len:
        raise ValueError(f"start_length must be in (2, max_len={max_len}), got {start_length!r}")
    check_int("seed", seed, minimum=0)
    check_choice("optimizer", optimizer, ("adam", "sgd"))

    generator = torch.Generator().manual_seed(seed)
    q0 = (start_length - 2) / (start_length - 1)                  # mean of 2 + Geometric(k) is start_length
    answer_logit = torch.tensor(math.log(p_correct / (1 - p_correct)), dtype=DTYPE, requires_grad=True)
    continue_logits = torch.full((2,), math.log(q0 / (1 - q0)), dtype=DTYPE, requires_grad=True)  # [correct, wrong]
    optimizer = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)([answer_logit, continue_logits], lr=lr)
    batch = prompts * group_size
    positions = torch.arange(max_len)
    curves = {"p_correct": [], "length_correct": [], "length_incorrect": [], "capped_correct": [],
              "capped_incorrect": []}
    for step in range(steps + 1):
        p, correct_length, wrong_length = _length_toy_policy(answer_logit, continue_logits, max_len)
        capped = torch.sigmoid(continue_logits.detach()) ** (max_len - 2)   # P(|o| = max_len), per answer
        for key, value in zip(curves, (p, correct_length, wrong_length, float(capped[0]), float(capped[1]))):
            curves[key].append(value)
        if step == steps:
            break
        with torch.no_grad():
            correct = torch.rand(batch, generator=generator, dtype=DTYPE) < torch.sigmoid(answer_logit)
            q = torch.sigmoid(continue_logits)[(~correct).long()]
            # decision j stops the response when its uniform is >= q: fillers = the first such j
            draws = torch.rand(batch, max_len - 1, generator=generator, dtype=DTYPE) >= q[:, None]
            stopped = draws.any(1)                                # otherwise truncated at max_len
            fillers = torch.where(stopped, draws.float().argmax(1).long(), torch.tensor(max_len - 1))
            lengths = torch.where(stopped, fillers + 2, torch.tensor(max_len))
        rewards = correct.double()
        advantages = group_advantages(rewards, group_size, advantage)
        mask = (positions[None, :] < lengths[:, None]).double()
        u = continue_logits[(~correct).long()]
        answer_logp = torch.where(correct, torch.nn.functional.logsigmoid(answer_logit),
                                  torch.nn.functional.logsigmoid(-answer_logit))
        token_logp = torch.where(positions[None, :] == 0, answer_logp[:, None],
                                 torch.where(positions[None, :] <= fillers[:, None],
                                             torch.nn.functional.logsigmoid(u)[:, None],
                                             torch.nn.functional.logsigmoid(-u)[:, None]))
        weights = token_weights(mask, mode, max_len=max_len)
        loss = -(weights * advantages[:, None] * token_logp * mask).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {key: np.array(values) for key, values in curves.items()}


__all__ += ["length_bias_toy"]


# ----------------------------------------------------------------------------------------------
# A bandit with many right answers, most of them rare: what clip-higher's ε_high does to entropy


def clip_higher_bandit(eps_high: float, *, eps_low: float = 0.2, seeds: int = 128, steps: int = 40,
                       group_size: int = 64, updates: int = 8, lr: float = 0.1, common_prob: float = 0.5,
                       rare_arms: int = 10, rare_prob: float = 0.02, wrong_arms: int = 9, seed: int = 0) -> dict:
    """Train a softmax bandit with the clipped surrogate, once per seed, and log its entropy.

    The toy for DAPO's clip-higher (Yu et al. 2025, arXiv:2503.14476, §3.1, "Clip-Higher"). Arm 0 is a
    *common* right answer (π = ``common_prob``), the next ``rare_arms`` arms are *rare* right
    answers (π = ``rare_prob`` each) and the last ``wrong_arms`` share the rest; right pays 1,
    wrong 0. Each step samples ``group_size`` arms from π_old, gives them GRPO's group advantages
    (``rlbook.advantages.group_advantages``) and makes ``updates`` full-batch Adam steps on the mean
    of ``rlbook.losses.clipped_surrogate`` with the ratio r = π_θ(a)/π_old(a). Adam moves a rare
    arm's logit about as fast as the common arm's, so its ratio runs past 1 + ε_high within one
    batch and the upper clip is what limits it. A step whose group holds no wrong arm is flat and
    changes nothing, but the split among the right arms does not freeze: while the wrong arms keep
    a little mass, a group of 64 still draws one on a good share of the steps, and each such step
    moves the split again. The entropy at the end therefore measures how much the rare right answers
    grew early on plus a slow drift after, not a frozen state.

    ``seeds`` independent runs are done at once (one row of logits each). Returns float64 arrays:
    ``entropy`` (seeds, steps + 1) of π before each step and after the last, ``rare_mass`` (same
    shape: π summed over the rare right arms), ``wrong_mass``, and ``max_ratio`` (seeds, steps):
    the largest π_θ/π_old of a sampled arm with A > 0 after each step's updates.
    """
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    eps_low = check_positive("eps_low", eps_low, allow_zero=True)
    if eps_low >= 1:
        raise ValueError(f"eps_low must be < 1, got {eps_low}")
    seeds = check_int("seeds", seeds, minimum=1)
    steps = check_int("steps", steps, minimum=1)
    group_size = check_int("group_size", group_size, minimum=2)
    updates = check_int("updates", updates, minimum=1)
    lr = check_positive("lr", lr)
    rare_arms = check_int("rare_arms", rare_arms, minimum=1)
    wrong_arms = check_int("wrong_arms", wrong_arms, minimum=1)
    common_prob = check_positive("common_prob", common_prob)
    rare_prob = check_positive("rare_prob", rare_prob)
    wrong_total = 1.0 - common_prob - rare_arms * rare_prob
    if wrong_total <= 0:
        raise ValueError(f"common_prob + rare_arms * rare_prob must be < 1, got {1 - wrong_total:g}")
    from rlbook.advantages import group_advantages
    from rlbook.losses import clipped_surrogate

    start = torch.cat([torch.tensor([common_prob]), torch.full((rare_arms,), rare_prob),
                       torch.full((wrong_arms,), wrong_total / wrong_arms)]).to(DTYPE)
    reward = torch.cat([torch.ones(1 + rare_arms), torch.zeros(wrong_arms)]).to(DTYPE)
    rare = slice(1, 1 + rare_arms)
    logits = start.log().repeat(seeds, 1).requires_grad_(True)
    optimizer = torch.optim.Adam([logits], lr=lr)
    generator = torch.Generator().manual_seed(seed)
    entropy, rare_mass, wrong_mass = np.empty((seeds, steps + 1)), np.empty((seeds, steps + 1)), np.empty((seeds, steps + 1))
    max_ratio = np.empty((seeds, steps))

    def record(column):
        with torch.no_grad():
            probs = torch.softmax(logits, dim=1)
            entropy[:, column] = (-(probs * probs.clamp_min(1e-300).log()).sum(1)).numpy()
            rare_mass[:, column] = probs[:, rare].sum(1).numpy()
            wrong_mass[:, column] = probs[:, 1 + rare_arms:].sum(1).numpy()

    for step in range(steps):
        record(step)
        with torch.no_grad():
            old_logp = torch.log_softmax(logits, dim=1)
            arms = torch.multinomial(old_logp.exp(), group_size, replacement=True, generator=generator)
            old = old_logp.gather(1, arms)
            advantages = group_advantages(reward[arms].flatten(), group_size).view(seeds, group_size)
        for _ in range(updates):
            ratio = (torch.log_softmax(logits, dim=1).gather(1, arms) - old).exp()
            loss = clipped_surrogate(ratio, advantages, eps_low=eps_low, eps_high=eps_high).mean(1).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            ratio = (torch.log_softmax(logits, dim=1).gather(1, arms) - old).exp()
            max_ratio[:, step] = torch.where(advantages > 0, ratio, torch.zeros_like(ratio)).max(1).values.numpy()
    record(steps)
    return {"entropy": entropy, "rare_mass": rare_mass, "wrong_mass": wrong_mass, "max_ratio": max_ratio}


__all__ += ["clip_higher_bandit"]
