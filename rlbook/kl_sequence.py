"""A two-token response by exact enumeration: where each placement of a per-token KL penalty leads.

A response is two tokens, y = (y₁, y₂): the first from π_θ(y₁), the second from π_θ(y₂ | y₁), both
tabular softmaxes; the reference factorises the same way and the reward R(y₁, y₂) arrives on the
last token. Every expectation is a sum over the K₁·K₂ responses, so each placement's expected
gradient is exact, ascent on it converges to a fixed point, and each fixed point has a closed form.
The objective the penalty is meant to serve is the *sequence* one,

    J(θ) = E_{y~π_θ}[R(y)] − β KL(π_θ ‖ π_ref),    KL over whole responses = KL₁ + E_{y₁}[KL₂(y₁)],

whose maximiser is the sequence tilt π*(y) ∝ π_ref(y) e^{R(y)/β}: per prefix π*(y₂|y₁) ∝
π_ref(y₂|y₁) e^{R/β}, and π*(y₁) ∝ π_ref(y₁) Z(y₁) with Z(y₁) = Σ_{y₂} π_ref(y₂|y₁) e^{R/β}
(``sequence_tilt``; Rafailov et al. 2023, arXiv:2305.18290, eq. 4, applied to whole responses).

The placements (``SEQUENCE_PLACEMENTS``), and the gradient each one's expectation follows:

- ``"k1_in_reward"``: every token's reward is −β·k1_t (the last one also gets R,
  ``rlbook.kl.kl_in_reward``), and each token is credited its reward-to-go Σ_{t'≥t} r_t' (GAE with
  γ = λ = 1 and no critic, ``rlbook.advantages.gae``). On fresh samples this is exactly ∇J (Ziegler et
  al. 2019, arXiv:1909.08593; Tang & Munos 2025, "On a few pitfalls in KL divergence gradient
  estimation for RL", arXiv:2506.09477, who give the KL gradient with the sum of the *future*
  log-ratios on each token). The whole return on every token has the same expectation (the past
  rewards' terms average to zero); reward-to-go only drops their noise.
- ``"k1_own_token"``: each token's advantage carries R and only its *own* −β·k1_t, as when a per-token
  KL is subtracted from a broadcast advantage without summing it forward. Its expectation is the
  *partial* gradient Σ_t E[∇_{θ_t} KL_t(y_<t)] (Tang & Munos 2025: token-level KL losses give a
  partial gradient at best), the same as the next three.
- ``"k2_in_loss"``: β·k2_t added to each token's loss. Per sample ∇k2 = (log π − log π_ref)∇log π =
  k1·∇log π, so for one token it *is* k1 in the reward (K. Liu et al. 2025, "Rethinking KL
  Regularization in RLHF", arXiv:2510.01555: k2 as loss is gradient-equivalent to k1 in reward
  on-policy). Over a sequence it credits each token its own KL only: the partial gradient.
- ``"k3+_in_loss"``: verl's straight-through k3 (k3's value, k2's gradient, ``rlbook.kl.k3_straight_through``):
  k2's partial gradient.
- ``"k3_ratio_in_loss"``: β·ρ_t·k3_t with ρ_t = π_θ(y_t|·)/sg[π_θ(y_t|·)] (value 1; DeepSeek-V3.2's
  KL term, TRL's ``use_bias_correction_kl``; K. Liu et al. 2025's importance-sampling correction).
  Its expectation per token is ∇_{θ_t} E_{y_t}[k3_t] = ∇_{θ_t} KL_t(y_<t): the same partial gradient.
- ``"k3_in_loss"``: GRPO's β·k3_t (Shao et al. 2024, arXiv:2402.03300, §4.1). Per token its expected
  gradient is ∇_{θ_t} KL(π_ref(·|y_<t) ‖ π_θ(·|y_<t)), the *forward* KL at each prefix (Schulman 2020's
  k3; K. Liu et al. 2025: a first-order, biased approximation of the principled loss).

Setting each expected gradient to zero gives the closed forms the ascent is checked against:

- the four partial-gradient placements stop where every prefix's conditional is its own tilt
  π(y₂|y₁) ∝ π_ref(y₂|y₁) e^{R/β}, and the first token is tilted by the *expected reward* of the
  continuation, π(y₁) ∝ π_ref(y₁) e^{V(y₁)/β} with V(y₁) = E_{π(y₂|y₁)}[R] (``per_token_tilt``). The
  sequence tilt uses the soft value β log Z(y₁) = V(y₁) − β KL₂(y₁) instead: the partial gradient
  never charges the first token for the KL its continuation will cost.
- k3 in the loss stops at the forward-KL optimum of every prefix, with rewards R(y₁, ·) for the
  second token and V(y₁) for the first (``per_token_forward_optimum``).

Simplified on purpose: two tokens, tabular logits, float64, the full sum instead of samples.

**The variance price of crediting forward** (``chain_gradient_moments``). The two-token toy shows what
a per-token penalty *misses* in expectation; a T-token chain shows what crediting each token with the
future log-ratios *costs* in noise. Every token of the chain is drawn from the same π_θ = softmax(θ)
(one shared logit vector, no dependence on the prefix) against the same π_ref, so the sequence KL is
T·KL(π_θ ‖ π_ref) and the partial gradient equals the full one: all the reverse-KL credits have the
same expected gradient, and only their noise differs. One response's KL gradient is
g = Σ_t C_t ∇log π_θ(y_t), with C_t = k1_t (k2 or k3+ in the loss), 1 − r_t (k3 in the loss),
Σ_{t'≥t} k1_t' (k1 in the reward, reward-to-go; Tang & Munos 2025, arXiv:2506.09477, the future
log-ratios), or that sum minus its exact expectation (T − t + 1)·KL (a perfect critic). Writing a = k1(y),
s = ∇log π_θ(y) = e_y − π_θ, m = E[a], u = E[a s] and n_t = T − t later tokens, independence of the tokens gives

    Var(g) = T(E[c² ‖s‖²] − ‖E[c s]‖²)                     for a per-token coefficient c,
    Var(g) = T(E[a² ‖s‖²] − ‖u‖²) + Σ_t [2 n_t m E[a ‖s‖²] + (n_t Var(a) + n_t² m²) E‖s‖²]    (reward-to-go),
    Var(g) = T(E[(a − m)² ‖s‖²] − ‖u‖²) + Var(a) E‖s‖² Σ_t n_t                            (with the critic),

(the cross terms of two tokens t < u reduce to E[a_t s_t]·E[C_u s_u] = ‖u‖², the same for every credit): a
per-token loss's noise grows like T, reward-to-go's like T³ (T² with the critic). The module's
``chain_gradient_moments_enumerated`` computes the same by enumerating all K^T responses through the
trainers' ``kl_in_reward`` / ``rlbook.advantages.gae`` / ``kl_in_loss``, for the tests and the lesson.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlbook._checks import check_choice, check_int, check_positive
from rlbook.advantages import gae
from rlbook.kl import kl_estimate, kl_in_loss, kl_in_reward
from rlbook.toys import forward_kl_optimum

__all__ = [
    "SEQUENCE_PLACEMENTS",
    "TwoTokenToy",
    "sequence_log_probs",
    "sequence_kl",
    "sequence_reward",
    "sequence_objective",
    "sequence_placement_gradient",
    "sequence_ascent",
    "sequence_tilt",
    "per_token_tilt",
    "per_token_forward_optimum",
    "CHAIN_CREDITS",
    "chain_gradient_moments",
    "chain_gradient_moments_enumerated",
]

DTYPE = torch.float64
SEQUENCE_PLACEMENTS = ("k1_in_reward", "k1_own_token", "k2_in_loss", "k3+_in_loss", "k3_ratio_in_loss",
                       "k3_in_loss")
CHAIN_CREDITS = ("reward_to_go", "reward_to_go_critic", "sequence_return", "own_token", "k3_in_loss")


def _distribution(name: str, value, dim: int) -> torch.Tensor:
    probs = torch.as_tensor(value, dtype=DTYPE)
    if (probs <= 0).any() or not torch.allclose(probs.sum(dim), torch.ones((), dtype=DTYPE), atol=1e-9):
        raise ValueError(f"{name} must be positive and sum to 1 over its last axis")
    return probs


@dataclass(frozen=True)
class TwoTokenToy:
    """π_ref(y₁) = ``ref_first`` (K₁,), π_ref(y₂ | y₁) = ``ref_second[y₁]`` (K₁, K₂), reward R = ``rewards`` (K₁, K₂)."""

    ref_first: torch.Tensor
    ref_second: torch.Tensor
    rewards: torch.Tensor

    def __post_init__(self):
        ref_first = _distribution("ref_first", self.ref_first, 0)
        ref_second = _distribution("ref_second", self.ref_second, -1)
        rewards = torch.as_tensor(self.rewards, dtype=DTYPE)
        if ref_first.dim() != 1 or ref_second.dim() != 2 or ref_second.shape[0] != ref_first.shape[0]:
            raise ValueError(f"ref_first must be (K1,) and ref_second (K1, K2), got {tuple(ref_first.shape)} "
                             f"and {tuple(ref_second.shape)}")
        if rewards.shape != ref_second.shape or not torch.isfinite(rewards).all():
            raise ValueError(f"rewards must be finite with the shape of ref_second {tuple(ref_second.shape)}, "
                             f"got {tuple(rewards.shape)}")
        for name, value in (("ref_first", ref_first), ("ref_second", ref_second), ("rewards", rewards)):
            object.__setattr__(self, name, value)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.ref_second.shape)


def _check_policy(toy: TwoTokenToy, first_probs, second_probs) -> tuple[torch.Tensor, torch.Tensor]:
    first = _distribution("first_probs", first_probs, 0)
    second = _distribution("second_probs", second_probs, -1)
    if first.shape != toy.ref_first.shape or second.shape != toy.ref_second.shape:
        raise ValueError(f"first_probs and second_probs must have shapes {tuple(toy.ref_first.shape)} and "
                         f"{toy.shape}, got {tuple(first.shape)} and {tuple(second.shape)}")
    return first, second


def sequence_log_probs(first_logits, second_logits) -> torch.Tensor:
    """log π(y₁, y₂) = log π(y₁) + log π(y₂ | y₁), a (K₁, K₂) table (differentiable in the logits)."""
    return torch.log_softmax(first_logits, dim=0).unsqueeze(1) + torch.log_softmax(second_logits, dim=1)


def sequence_kl(toy: TwoTokenToy, first_probs, second_probs) -> float:
    """KL(π ‖ π_ref) over whole responses: KL₁ + Σ_{y₁} π(y₁) KL(π(·|y₁) ‖ π_ref(·|y₁)) (the chain rule)."""
    first, second = _check_policy(toy, first_probs, second_probs)
    per_prefix = (second * (second.log() - toy.ref_second.log())).sum(1)
    return float((first * (first.log() - toy.ref_first.log())).sum() + (first * per_prefix).sum())


def sequence_reward(toy: TwoTokenToy, first_probs, second_probs) -> float:
    """E_π[R] = Σ_{y₁, y₂} π(y₁) π(y₂ | y₁) R(y₁, y₂)."""
    first, second = _check_policy(toy, first_probs, second_probs)
    return float((first.unsqueeze(1) * second * toy.rewards).sum())


def sequence_objective(toy: TwoTokenToy, first_probs, second_probs, *, beta: float) -> float:
    """J = E_π[R] − β KL(π ‖ π_ref) over whole responses, the objective every placement is meant to serve."""
    beta = check_positive("beta", beta)
    return sequence_reward(toy, first_probs, second_probs) - beta * sequence_kl(toy, first_probs, second_probs)


def sequence_placement_gradient(toy: TwoTokenToy, first_logits, second_logits, *, beta: float,
                                placement: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact expected ascent direction of one placement, with respect to (first_logits, second_logits).

    The K₁·K₂ responses form one batch of two-token rows, each weighted by sg[π_θ(y)] (fresh samples,
    the weights not differentiated, as in a loss averaged over sampled responses). The penalty is
    built with ``rlbook.kl``'s own ``kl_in_reward`` / ``kl_in_loss``; the reward's REINFORCE term is
    R · Σ_t ∇log π(y_t | y_<t). See the module docstring for what each placement's expectation is.
    """
    check_choice("placement", placement, SEQUENCE_PLACEMENTS)
    beta = check_positive("beta", beta, allow_zero=True)
    k1_count, k2_count = toy.shape
    first_logits = torch.as_tensor(first_logits, dtype=DTYPE).clone().requires_grad_(True)
    second_logits = torch.as_tensor(second_logits, dtype=DTYPE).clone().requires_grad_(True)
    if first_logits.shape != toy.ref_first.shape or second_logits.shape != toy.ref_second.shape:
        raise ValueError(f"first_logits and second_logits must have shapes {tuple(toy.ref_first.shape)} and "
                         f"{toy.shape}, got {tuple(first_logits.shape)} and {tuple(second_logits.shape)}")
    first_token = torch.arange(k1_count).repeat_interleave(k2_count)   # row b = (y₁, y₂), y₁-major
    second_token = torch.arange(k2_count).repeat(k1_count)
    logp = torch.stack([torch.log_softmax(first_logits, 0)[first_token],
                        torch.log_softmax(second_logits, 1)[first_token, second_token]], dim=1)  # (B, 2)
    ref_logp = torch.stack([toy.ref_first.log()[first_token],
                            toy.ref_second.log()[first_token, second_token]], dim=1)
    rewards = toy.rewards[first_token, second_token]
    weights = logp.sum(1).exp().detach().unsqueeze(1)                  # sg[π_θ(y)], (B, 1)
    ones = torch.ones_like(logp)
    if placement == "k1_in_reward":
        per_token = kl_in_reward(rewards, kl_estimate(logp, ref_logp, "k1"), beta, ones)
        credit, _ = gae(per_token, torch.zeros_like(per_token), 1.0, 1.0)  # reward-to-go Σ_{t'≥t} r_t'
        objective = (weights * credit * logp).sum()
    elif placement == "k1_own_token":
        credit = rewards.unsqueeze(1) - beta * kl_estimate(logp, ref_logp, "k1").detach()
        objective = (weights * credit * logp).sum()
    else:
        estimator = placement.removesuffix("_in_loss")
        ratio = None
        if estimator == "k3_ratio":
            estimator, ratio = "k3", torch.exp(logp - logp.detach())   # ρ_t: value 1, gradient ∇log π
        penalty = kl_in_loss(logp, ref_logp, beta=beta, estimator=estimator, ratio=ratio)
        objective = (weights * (rewards.unsqueeze(1) * logp - penalty)).sum()
    first_gradient, second_gradient = torch.autograd.grad(objective, (first_logits, second_logits))
    return first_gradient, second_gradient


def sequence_ascent(toy: TwoTokenToy, *, beta: float, placement: str, steps: int,
                    lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact gradient ascent from π_θ = π_ref along ``sequence_placement_gradient``; returns
    (π(y₁), π(y₂ | y₁)) after ``steps`` steps of size ``lr``."""
    steps = check_int("steps", steps, minimum=0)
    lr = check_positive("lr", lr)
    first, second = toy.ref_first.log().clone(), toy.ref_second.log().clone()
    for _ in range(steps):
        first_step, second_step = sequence_placement_gradient(toy, first, second, beta=beta, placement=placement)
        first, second = first + lr * first_step, second + lr * second_step
    return torch.softmax(first, 0), torch.softmax(second, 1)


def sequence_tilt(toy: TwoTokenToy, *, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """argmax_π E[R] − β KL(π ‖ π_ref) over whole responses: π*(y) ∝ π_ref(y) e^{R(y)/β}, factorised as
    π*(y₂|y₁) ∝ π_ref(y₂|y₁) e^{R/β} and π*(y₁) ∝ π_ref(y₁) Z(y₁), Z(y₁) = Σ_{y₂} π_ref(y₂|y₁) e^{R/β}."""
    beta = check_positive("beta", beta)
    tilted = toy.ref_second.log() + toy.rewards / beta
    log_z = torch.logsumexp(tilted, dim=1)
    return torch.softmax(toy.ref_first.log() + log_z, 0), torch.softmax(tilted, 1)


def per_token_tilt(toy: TwoTokenToy, *, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the partial (per-token) reverse-KL gradient stops: each prefix's own tilt for the second token,
    and π(y₁) ∝ π_ref(y₁) e^{V(y₁)/β} with V(y₁) = E_{π(y₂|y₁)}[R], the continuation's expected reward
    without its KL cost (module docstring; Tang & Munos 2025, arXiv:2506.09477, the partial gradient)."""
    beta = check_positive("beta", beta)
    second = torch.softmax(toy.ref_second.log() + toy.rewards / beta, 1)
    value = (second * toy.rewards).sum(1)
    return torch.softmax(toy.ref_first.log() + value / beta, 0), second


def per_token_forward_optimum(toy: TwoTokenToy, *, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Where per-token k3 in the loss stops: at every prefix the forward-KL optimum
    argmax E[R] − β KL(π_ref(·|y₁) ‖ π(·|y₁)) (``rlbook.toys.forward_kl_optimum``), and for the first
    token the same with rewards V(y₁) = E_{π(y₂|y₁)}[R] under those conditionals."""
    beta = check_positive("beta", beta)
    second = torch.stack([forward_kl_optimum(toy.ref_second[i], toy.rewards[i], beta=beta)
                          for i in range(toy.shape[0])])
    value = (second * toy.rewards).sum(1)
    return forward_kl_optimum(toy.ref_first, value, beta=beta), second


def _chain_token_tables(logits, ref_probs):
    """π_θ, the per-outcome score rows s(y) = e_y − π_θ (K, K), k1(y) = log π_θ/π_ref and r(y) = π_ref/π_θ."""
    logits = torch.as_tensor(logits, dtype=DTYPE)
    ref_probs = _distribution("ref_probs", ref_probs, 0)
    if logits.dim() != 1 or logits.shape != ref_probs.shape or not torch.isfinite(logits).all():
        raise ValueError(f"logits must be finite and 1-D with the shape of ref_probs {tuple(ref_probs.shape)}, "
                         f"got {tuple(logits.shape)}")
    probs = torch.softmax(logits, 0)
    scores = torch.eye(len(probs), dtype=DTYPE) - probs
    k1 = probs.log() - ref_probs.log()
    return probs, scores, k1, ref_probs / probs


def chain_gradient_moments(logits, ref_probs, *, length: int, credit: str) -> dict:
    """The mean and variance of one T-token response's KL-penalty gradient, in closed form (β = 1).

    Each token is drawn from π_θ = softmax(``logits``) against π_ref = ``ref_probs``, independently of
    the prefix (module docstring, "The variance price of crediting forward"). ``credit`` (``CHAIN_CREDITS``):
    "own_token" (k2 or k3+ in the loss: coefficient k1_t), "k3_in_loss" (1 − r_t), "reward_to_go" (k1 in the
    reward credited forward, Σ_{t'≥t} k1_t'), "reward_to_go_critic" (the same minus its expectation,
    (T − t + 1)·KL: the exact value of the KL still to come) or "sequence_return" (every token credited with
    the whole response's Σ_t' k1_t', as a KL-shaped sequence reward without reward-to-go gives: the earlier
    tokens' terms have zero-mean scores, so the mean is unchanged and only the noise grows). Returns ``{"mean": ∇ to descend (K,),
    "variance": E‖g‖² − ‖E g‖²}``; the variance is one response's, so a batch of B responses divides it by B.
    """
    length = check_int("length", length, minimum=1)
    check_choice("credit", credit, CHAIN_CREDITS)
    probs, scores, k1, ratio = _chain_token_tables(logits, ref_probs)
    norm2 = (scores**2).sum(1)                                       # ‖s(y)‖²
    expect = lambda values: float((probs * values).sum())            # noqa: E731  E_y[·] under π_θ
    if credit in ("own_token", "k3_in_loss"):
        coefficient = k1 if credit == "own_token" else 1 - ratio
        mean = probs @ (coefficient.unsqueeze(1) * scores)
        variance = length * (expect(coefficient**2 * norm2) - float(mean @ mean))
        return {"mean": length * mean, "variance": variance}
    m = expect(k1)
    u = probs @ (k1.unsqueeze(1) * scores)                           # E[a s] = ∇KL(π_θ ‖ π_ref) per token
    later = torch.arange(length - 1, -1, -1, dtype=DTYPE)            # n_t = T − t, t = 1 … T
    var_a, s2 = expect((k1 - m) ** 2), expect(norm2)
    if credit == "sequence_return":
        # g = A·S with A = Σ a_t, S = Σ s_t: E‖g‖² = T·E[A²‖s‖² | one token's s] + T(T − 1)·2‖u‖² (the pairs k ≠ l)
        t, uu = length, float(u @ u)
        variance = (t * (expect(k1**2 * norm2) + 2 * (t - 1) * m * expect(k1 * norm2) + (t - 1) * var_a * s2
                         + (t - 1) ** 2 * m**2 * s2) + 2 * t * (t - 1) * uu - t**2 * uu)
    elif credit == "reward_to_go":
        variance = (length * (expect(k1**2 * norm2) - float(u @ u)) + 2 * m * expect(k1 * norm2) * float(later.sum())
                    + s2 * float((later * var_a + later**2 * m**2).sum()))
    else:
        variance = length * (expect((k1 - m) ** 2 * norm2) - float(u @ u)) + var_a * s2 * float(later.sum())
    return {"mean": length * u, "variance": variance}


def chain_gradient_moments_enumerated(logits, ref_probs, *, length: int, credit: str) -> dict:
    """``chain_gradient_moments`` by brute force: all K^T responses, each weighted by π_θ(y), each one's
    gradient taken by autograd through the trainers' own functions (``kl_in_reward`` and
    ``rlbook.advantages.gae`` with γ = λ = 1 for the reward credits, the critic's values V_t = −(T − t + 1)·KL;
    ``kl_in_loss`` with k2 or k3 for the loss credits). Exponential in T: keep K^T to a few thousand."""
    length = check_int("length", length, minimum=1)
    check_choice("credit", credit, CHAIN_CREDITS)
    probs, _, k1_table, _ = _chain_token_tables(logits, ref_probs)
    count = len(probs)
    if count**length > 20_000:
        raise ValueError(f"length {length} enumerates {count}**{length} responses; keep it under 20,000")
    tokens = torch.cartesian_prod(*[torch.arange(count)] * length).reshape(-1, length)   # (K^T, T)
    ref_logp = torch.as_tensor(ref_probs, dtype=DTYPE).log()[tokens]
    weights = probs[tokens].prod(1)

    def penalty(theta):
        logp = torch.log_softmax(theta, 0)[tokens]
        if credit in ("own_token", "k3_in_loss"):
            estimator = "k2" if credit == "own_token" else "k3"
            return kl_in_loss(logp, ref_logp, beta=1.0, estimator=estimator).sum(1)
        ones = torch.ones_like(logp)
        per_token = kl_in_reward(torch.zeros(len(tokens), dtype=DTYPE), kl_estimate(logp, ref_logp, "k1"), 1.0, ones)
        if credit == "sequence_return":
            return -(per_token.sum(1, keepdim=True) * logp).sum(1)      # the whole response's return on every token
        values = torch.zeros_like(per_token)
        if credit == "reward_to_go_critic":
            kl_per_token = float((probs * k1_table).sum())
            values = -kl_per_token * torch.arange(length, 0, -1, dtype=DTYPE).expand_as(per_token)
        advantages, _ = gae(per_token, values, 1.0, 1.0)
        return -(advantages * logp).sum(1)                           # the loss whose descent is the ascent on −β KL

    theta = torch.as_tensor(logits, dtype=DTYPE)
    gradients = torch.autograd.functional.jacobian(penalty, theta, vectorize=True)        # (K^T, K)
    mean = weights @ gradients
    return {"mean": mean, "variance": float(weights @ (gradients**2).sum(1) - mean @ mean)}
