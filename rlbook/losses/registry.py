"""The open registry of online policy-loss variants: the book's built-ins and a reader's take one path.

A variant of ``policy_loss`` is one entry here, holding everything that makes it that variant:

- its **per-token surrogate**, a function ``fn(logp, old_logp, advantages, mask, **knobs)`` of (B, T)
  tensors (``advantages`` already broadcast to (B, T), ``mask`` 0/1 floats) that returns the (B, T) loss
  to minimise, or a ``Surrogate`` that also says which tokens the variant clipped;
- the **defaults** of its knobs (clip bounds, temperatures...), passed to ``fn`` as keywords;
- its **aggregation**: how the (B, T) grid becomes one number (``rlbook.aggregation``);
- where its paper puts the **KL** to π_ref: in the reward, in the loss, or nowhere;
- the one-line **formula**, the **paper** and equation it follows, and a short **doc**.

``register_policy_loss(name, fn, aggregation=..., ...)`` adds one (it is also a decorator);
``policy_loss(..., variant=name)``, ``OnlineConfig(variant=name)`` and so ``OnlineTrainer`` then use it
like a built-in, and ``explain(name)`` prints its entry. The built-ins are registered the same way, each
beside its function in ``rlbook.losses.policy``. The pattern is verl's ``register_policy_loss``
(``verl.trainer.ppo.core_algos``); the entry, its checks and ``explain`` are this book's.

Knob names are those of ``policy_loss``'s own keywords where they exist (``eps_low``, ``eps_high``,
``dual_clip``, ``tau_pos``, ``tau_neg``: ``OnlineConfig`` has a field for each) or new ones, which
``OnlineConfig(loss_knobs={...})`` sets. A name ``policy_loss`` uses for something else is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import torch

from rlbook._checks import check_choice, check_knob
from rlbook.aggregation import AGGREGATION_MODES, AGGREGATION_RULES

__all__ = [
    "KL_SITES",
    "Surrogate",
    "PolicyLossVariant",
    "register_policy_loss",
    "unregister_policy_loss",
    "policy_loss_variant",
    "variant_names",
    "explain",
]

# Where a method's paper puts the KL penalty to the reference policy (``OnlineConfig.kl_placement``).
KL_SITES = {
    "reward": "in the reward: −β·k_t per token is added to the reward before the advantages "
              "(OnlineConfig(kl_placement='reward'), InstructGPT's choice)",
    "loss": "in the loss: β·k_t is added to each token's loss before the aggregation "
            "(OnlineConfig(kl_placement='loss'); policy_loss(ref_logp=..., beta=...))",
    "none": "none: the method trains without a KL term (OnlineConfig(kl_beta=0))",
}
# The arguments every surrogate takes first, in this order.
TENSOR_ARGUMENTS = ("logp", "old_logp", "advantages", "mask")
# policy_loss's own keywords: a knob may not take one of these names (it would never reach the surrogate).
RESERVED_NAMES = frozenset({
    *TENSOR_ARGUMENTS, "variant", "aggregation", "max_len", "ref_logp", "beta", "kl_estimator",
    "kl_importance_weighted", "entropy", "entropy_coef", "behaviour_logp", "behaviour_weight_cap", "cov_control",
    "cov_fraction", "cov_bounds", "kl_cov_coef", "cov_generator", "token_weights_fn",
})


class Surrogate(NamedTuple):
    """What a surrogate may return instead of a bare (B, T) loss.

    ``loss``: the (B, T) per-token loss (with gradient). ``clipped_low`` / ``clipped_high``: (B, T)
    bools, the tokens whose gradient the variant clipped below / above (reported as ``clip_frac_low`` /
    ``clip_frac_high``; None: none). ``metrics``: extra numbers to log (e.g. a sequence ratio's mean).
    """

    loss: torch.Tensor
    clipped_low: torch.Tensor | None = None
    clipped_high: torch.Tensor | None = None
    metrics: dict | None = None


@dataclass(frozen=True)
class PolicyLossVariant:
    """One registered variant: its surrogate ``fn`` and what ``explain`` prints about it."""

    name: str
    fn: Callable
    aggregation: str
    defaults: Mapping[str, float | None] = field(default_factory=dict)
    kl: str = "none"
    formula: str = ""
    paper: str = ""
    doc: str = ""
    sequence_advantages: bool = False


_REGISTRY: dict[str, PolicyLossVariant] = {}


def register_policy_loss(name: str, fn: Callable | None = None, *, aggregation: str, defaults: Mapping | None = None,
                         kl: str = "none", formula: str = "", paper: str = "", doc: str = "",
                         sequence_advantages: bool = False, overwrite: bool = False):
    """Register the per-token surrogate ``fn`` as the policy-loss variant ``name``; returns ``fn``.

    Args:
        - name: the variant's name, as ``policy_loss(variant=name)`` and ``OnlineConfig(variant=name)`` use it.
        - fn: ``fn(logp, old_logp, advantages, mask, **knobs)`` → the (B, T) loss to minimise, or a
          ``Surrogate``. Leave it out to use ``register_policy_loss(name, aggregation=...)`` as a decorator.
        - aggregation: one of ``rlbook.aggregation.AGGREGATION_MODES`` (overridable per call).
        - defaults: ``{knob: value}``, each knob a keyword ``fn`` accepts; values are numbers, bools or None.
        - kl: where the method's paper puts the KL to π_ref, a key of ``KL_SITES`` ("reward", "loss", "none").
        - formula, paper, doc: the one-line per-token loss, the paper and equation it follows, and what is
          distinctive about it, as ``explain`` prints them (doc defaults to the first line of fn's docstring).
        - sequence_advantages: True when the loss needs one advantage per response, (B,), not per token.
        - overwrite: replace an entry already registered under ``name`` (a notebook cell run twice).

    Raises ``ValueError`` naming what is wrong: a name already registered, an unknown aggregation or KL
    site, a knob that is not a number, or an ``fn`` whose signature lacks one of ``logp, old_logp,
    advantages, mask`` (first, in that order) or a knob of ``defaults``.
    """
    if fn is None:
        def decorator(function: Callable) -> Callable:
            return register_policy_loss(name, function, aggregation=aggregation, defaults=defaults, kl=kl,
                                        formula=formula, paper=paper, doc=doc,
                                        sequence_advantages=sequence_advantages, overwrite=overwrite)
        return decorator
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a name like 'my_variant' (letters, digits, _), got {name!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"name {name!r} is already a registered variant: pass overwrite=True to replace it "
                         f"(registered: {', '.join(_REGISTRY)})")
    defaults = _checked_defaults(name, defaults)
    _check_signature(name, fn, defaults)
    check_choice("aggregation", aggregation, AGGREGATION_MODES)
    check_choice("kl", kl, tuple(KL_SITES))
    for label, text in (("formula", formula), ("paper", paper), ("doc", doc)):
        if not isinstance(text, str):
            raise ValueError(f"{label} must be a string, got {type(text).__name__}")
    if not isinstance(sequence_advantages, bool):
        raise ValueError(f"sequence_advantages must be True or False, got {sequence_advantages!r}")
    doc = doc or (inspect.getdoc(fn) or "").split("\n")[0]
    _REGISTRY[name] = PolicyLossVariant(name, fn, aggregation, defaults, kl, formula, paper, doc, sequence_advantages)
    return fn


def unregister_policy_loss(name: str) -> None:
    """Remove the variant ``name`` from the registry (a test's or a notebook's own variant)."""
    policy_loss_variant(name)
    del _REGISTRY[name]


def policy_loss_variant(name: str) -> PolicyLossVariant:
    """The registry entry of ``name``; a ``ValueError`` listing the registered names when there is none."""
    if name not in _REGISTRY:
        raise ValueError(f"variant must be one of the registered policy-loss variants ({', '.join(_REGISTRY)}), "
                         f"got {name!r}: register a new one with rlbook.losses.register_policy_loss")
    return _REGISTRY[name]


def variant_names() -> tuple[str, ...]:
    """The registered variants' names, in the order they were registered (the built-ins first)."""
    return tuple(_REGISTRY)


def explain(variant: str) -> dict:
    """Print what the variant ``variant`` computes, and return the same as a dict.

    The per-token loss, the defaults of its knobs, how the (B, T) grid is aggregated, where the KL to
    π_ref goes, the paper and equation it follows, and the function that computes it.
    """
    entry = policy_loss_variant(variant)
    info = {
        "name": entry.name,
        "formula": entry.formula,
        "defaults": dict(entry.defaults),
        "aggregation": entry.aggregation,
        "aggregation_rule": AGGREGATION_RULES[entry.aggregation],
        "kl": entry.kl,
        "kl_rule": KL_SITES[entry.kl],
        "paper": entry.paper,
        "doc": entry.doc,
        "advantages": "one per response, (B,)" if entry.sequence_advantages else "per response (B,) or per token (B, T)",
        "function": f"{entry.fn.__module__}.{entry.fn.__qualname__}",
    }
    knobs = ", ".join(f"{knob} = {value}" for knob, value in info["defaults"].items()) or "none"
    lines = [f"{entry.name}: {entry.doc}" if entry.doc else entry.name,
             f"  per-token loss  {entry.formula or '(not given: pass formula= to register_policy_loss)'}",
             f"  defaults        {knobs}",
             f"  aggregation     {entry.aggregation}: {info['aggregation_rule']}",
             f"  KL to π_ref     {info['kl_rule']}",
             f"  advantages      {info['advantages']}",
             f"  paper           {entry.paper or '(not given)'}",
             f"  function        {info['function']}"]
    print("\n".join(lines))
    return info


class _VariantDefaults(Mapping):
    """``VARIANT_DEFAULTS[name]``: the variant's knob defaults and its aggregation, read from the registry."""

    def __getitem__(self, name: str) -> dict:
        if name not in _REGISTRY:
            raise KeyError(name)
        entry = _REGISTRY[name]
        return {**entry.defaults, "aggregation": entry.aggregation}

    def __iter__(self):
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return repr(dict(self))


VARIANT_DEFAULTS = _VariantDefaults()


def _checked_defaults(name: str, defaults: Mapping | None) -> dict:
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        raise ValueError(f"defaults must be a dict of knob -> value, got {type(defaults).__name__}")
    for knob, value in defaults.items():
        if not isinstance(knob, str) or not knob.isidentifier():
            raise ValueError(f"defaults of {name!r}: a knob must be a name like 'eps_low', got {knob!r}")
        if knob in RESERVED_NAMES:
            raise ValueError(f"defaults of {name!r}: {knob!r} is one of policy_loss's own arguments, not a knob "
                             f"of the surrogate; choose another name")
        check_knob(f"defaults of {name!r}: {knob}", value)
    return dict(defaults)


def _check_signature(name: str, fn, defaults: dict) -> None:
    """Check that ``fn(logp, old_logp, advantages, mask, **knobs)`` can be called as policy_loss will call it."""
    if not callable(fn):
        raise ValueError(f"fn of {name!r} must be a function (logp, old_logp, advantages, mask, **knobs) -> "
                         f"per-token loss, got {type(fn).__name__}")
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise ValueError(f"fn of {name!r}: its signature cannot be read; pass a Python function") from None
    label = getattr(fn, "__name__", repr(fn))
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if tuple(positional[:4]) != TENSOR_ARGUMENTS:
        missing = [arg for arg in TENSOR_ARGUMENTS if arg not in positional[:4]]
        raise ValueError(f"fn {label} of {name!r} must take ({', '.join(TENSOR_ARGUMENTS)}) as its first four "
                         f"parameters, in that order; it takes ({', '.join(positional[:4])})"
                         + (f": missing {', '.join(map(repr, missing))}" if missing else ""))
    rest = [p for p in parameters if p.name not in TENSOR_ARGUMENTS]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in rest)
    accepted = {p.name for p in rest if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unaccepted = sorted(set(defaults) - accepted) if not takes_any else []
    if unaccepted:
        raise ValueError(f"fn {label} of {name!r} does not accept the knob(s) {unaccepted} that defaults names: "
                         f"add them as keyword parameters")
    required = sorted(p.name for p in rest if p.default is p.empty and p.name not in defaults
                      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    if required:
        raise ValueError(f"fn {label} of {name!r} requires {required}, which defaults does not give: add "
                         f"{'them' if len(required) > 1 else 'it'} to defaults= (the knobs policy_loss passes)")
