"""rlbook: the library behind the interactive textbook of LLM post-training RL.

The math lives in small pure modules (``kl``, ``advantages``, ``ratios``, ``aggregation``,
``losses``, ``shaping``, ``metrics``); the models, tasks, rollouts and zoo build on them.

Two names are at the top for a reader's notebook cell: ``rlbook.explain(variant)`` prints what a
policy-loss variant computes, and ``rlbook.register_policy_loss`` adds one (``rlbook.losses.registry``).
They are imported on first use (PEP 562), so ``import rlbook`` alone stays light (no torch).
"""

__version__ = "0.1.0"

_FRONT_DOOR = ("explain", "register_policy_loss")


def __getattr__(name: str):
    if name in _FRONT_DOOR:
        from rlbook.losses import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'rlbook' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_FRONT_DOOR])
