"""Losses: the online policy-gradient surrogate (``policy``), its open registry of variants (``registry``) and
the preference family (``preference``).

``policy_loss(..., variant=...)`` is the single entry point for the online methods; each variant is an
entry of the registry (``register_policy_loss`` adds one, ``explain`` prints one). The preference
losses are per-example functions of sequence log-probabilities.
"""

from rlbook.losses.policy import *  # noqa: F401,F403
from rlbook.losses.policy import __all__ as _policy_all
from rlbook.losses.preference import *  # noqa: F401,F403
from rlbook.losses.preference import __all__ as _preference_all
from rlbook.losses.registry import *  # noqa: F401,F403
from rlbook.losses.registry import __all__ as _registry_all

__all__ = list(_policy_all) + list(_registry_all) + list(_preference_all)
