"""Losses: the online policy-gradient surrogate (``policy``) and the preference family (``preference``).

``policy_loss(..., variant=...)`` is the single entry point for the online methods; the preference
losses are per-example functions of sequence log-probabilities.
"""

from rlbook.losses.policy import *  # noqa: F401,F403
from rlbook.losses.policy import __all__ as _policy_all
from rlbook.losses.preference import *  # noqa: F401,F403
from rlbook.losses.preference import __all__ as _preference_all

__all__ = list(_policy_all) + list(_preference_all)
