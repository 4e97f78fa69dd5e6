"""Self-checking exercises of lessons 06 (DPO) and 07 (the preference zoo).

Each checker calls the reader's function on fixed cases, compares it with the library's
reference, and, when they differ, tries the classic wrong answers to name the likely mistake.
A function that raises ``NotImplementedError`` counts as not attempted yet. Checkers return
True (all cases match) or False.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlbook.losses import dpo_loss, ipo_loss
from rlbook.viz.preference import kl_regularised_optimum

__all__ = ["check_optimal_policy", "check_dpo_loss", "check_ipo_loss"]

# Sequence log-probs of 6 pairs: chosen, rejected, and the reference's of each.
_PAIRS = (
    torch.tensor([-12.0, -30.5, -8.2, -20.0, -15.0, -40.0], dtype=torch.float64),
    torch.tensor([-14.0, -28.0, -9.9, -26.0, -15.0, -35.0], dtype=torch.float64),
    torch.tensor([-13.0, -29.0, -8.0, -22.5, -16.0, -41.0], dtype=torch.float64),
    torch.tensor([-13.5, -29.5, -9.0, -23.0, -14.0, -34.0], dtype=torch.float64),
)
_REF_PROBS = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
_REWARDS = torch.tensor([0.0, 1.5, -1.0, 3.0], dtype=torch.float64)


def _call(fn, *args):
    """The reader's answer as a float64 tensor, or None when not attempted (message printed)."""
    if not callable(fn):
        raise ValueError(f"fn must be a function, got {type(fn).__name__}")
    try:
        answer = fn(*args)
    except NotImplementedError:
        print("Not attempted yet: replace the `raise NotImplementedError` with your answer.")
        return None
    return torch.as_tensor(answer, dtype=torch.float64).detach()


def _close(a, b) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-6, rtol=1e-6)


def _diagnose(got, mistakes: list[tuple[str, torch.Tensor]], fallback: str) -> str:
    for hint, wrong in mistakes:
        if _close(got, wrong):
            return hint
    return fallback


def check_optimal_policy(fn) -> bool:
    """Check ``fn(ref_probs, rewards, beta)`` → π* ∝ π_ref exp(r/β) against ``kl_regularised_optimum``."""
    for beta in (0.5, 1.0, 2.0):
        got = _call(fn, _REF_PROBS.clone(), _REWARDS.clone(), beta)
        if got is None:
            return False
        want = kl_regularised_optimum(_REF_PROBS, _REWARDS, beta)
        if _close(got, want):
            continue
        unnormalised = _REF_PROBS * torch.exp(_REWARDS / beta)
        mistakes = [
            ("not normalised: divide by Z = Σ_y π_ref(y) exp(r(y)/β) so the probabilities sum to 1", unnormalised),
            ("β multiplies the reward instead of dividing it: the optimum is π_ref · exp(r/β) — a small β "
             "(weak KL penalty) must make π* greedier, not flatter", torch.softmax(_REF_PROBS.log() + beta * _REWARDS, 0)),
            ("π_ref is missing: the KL penalty pulls π* toward π_ref, so π* ∝ π_ref(y) exp(r(y)/β), not "
             "softmax(r/β)", torch.softmax(_REWARDS / beta, 0)),
            ("exp(−r/β) prefers the worst responses: maximising reward gives exp(+r/β)",
             torch.softmax(_REF_PROBS.log() - _REWARDS / beta, 0)),
        ]
        hint = _diagnose(got, mistakes, "compare with π_ref(y) exp(r(y)/β) / Σ_y' π_ref(y') exp(r(y')/β)")
        print(f"β = {beta}: expected {[round(v, 4) for v in want.tolist()]}, got "
              f"{[round(v, 4) for v in got.flatten().tolist()]}: {hint}")
        return False
    print("Correct: π* = π_ref · exp(r/β) / Z at β = 0.5, 1 and 2.")
    return True


def check_dpo_loss(fn) -> bool:
    """Check ``fn(chosen, rejected, ref_chosen, ref_rejected, beta)`` → per-pair DPO loss against
    ``rlbook.losses.dpo_loss``."""
    chosen, rejected, ref_chosen, ref_rejected = _PAIRS
    for beta in (0.1, 0.5):
        got = _call(fn, chosen.clone(), rejected.clone(), ref_chosen.clone(), ref_rejected.clone(), beta)
        if got is None:
            return False
        want = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)
        if _close(got, want):
            continue
        h = (chosen - ref_chosen) - (rejected - ref_rejected)
        mistakes = [
            ("the reference is missing: the implicit reward is β log π/π_ref, so h subtracts the reference's "
             "log-probs of each response", -F.logsigmoid(beta * (chosen - rejected))),
            ("the sign is flipped: −log σ(−β h) rewards the rejected response; chosen minus rejected goes "
             "inside σ", -F.logsigmoid(-beta * h)),
            ("β is missing: the margin is β·h, not h", -F.logsigmoid(h)),
            ("the minus sign is missing: the loss is −log σ(β h), which is ≥ 0", F.logsigmoid(beta * h)),
            ("this is σ(−β h), the gradient's weight, not the loss; the loss is −log σ(β h)",
             torch.sigmoid(-beta * h)),
        ]
        if got.dim() == 0:
            hint = "a scalar where one loss per pair was asked: return the per-pair losses (B,), without .mean()"
        else:
            hint = _diagnose(got, mistakes, "compare with −log σ(β [(log π_w − log π_ref,w) − "
                                                "(log π_l − log π_ref,l)])")
        print(f"β = {beta}: expected {[round(v, 4) for v in want.tolist()]}, got "
              f"{[round(v, 4) for v in got.flatten().tolist()]}: {hint}")
        return False
    print("Correct on 6 pairs at β = 0.1 and 0.5 (note the pair with h = 0: its loss is ln 2).")
    return True


def check_ipo_loss(fn) -> bool:
    """Check ``fn(chosen, rejected, ref_chosen, ref_rejected, tau)`` → per-pair IPO loss against
    ``rlbook.losses.ipo_loss`` (sequence log-probs, no length normalisation)."""
    chosen, rejected, ref_chosen, ref_rejected = _PAIRS
    for tau in (0.1, 0.5):
        got = _call(fn, chosen.clone(), rejected.clone(), ref_chosen.clone(), ref_rejected.clone(), tau)
        if got is None:
            return False
        want = ipo_loss(chosen, rejected, ref_chosen, ref_rejected, tau)
        if _close(got, want):
            continue
        h = (chosen - ref_chosen) - (rejected - ref_rejected)
        mistakes = [
            ("the target is 1/τ; IPO's is 1/(2τ) (Azar et al. 2023, eq. 17)", (h - 1 / tau) ** 2),
            ("the target is τ itself; it is 1/(2τ): a weaker regulariser (small τ) means a larger margin",
             (h - tau) ** 2),
            ("the square is missing: IPO regresses the margin onto its target, (h − 1/(2τ))²", h - 1 / (2 * tau)),
            ("the reference is missing: h is a difference of log-ratios log π/π_ref",
             (chosen - rejected - 1 / (2 * tau)) ** 2),
            ("this is the DPO loss −log σ(τ h), not IPO's squared loss", -F.logsigmoid(tau * h)),
        ]
        hint = _diagnose(got, mistakes, "compare with (h − 1/(2τ))², h the difference of the log-ratios")
        print(f"τ = {tau}: expected {[round(v, 4) for v in want.tolist()]}, got "
              f"{[round(v, 4) for v in got.flatten().tolist()]}: {hint}")
        return False
    print("Correct on 6 pairs at τ = 0.1 and 0.5.")
    return True
