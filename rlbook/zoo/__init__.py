"""The zoo: small checkpoints shipped in the package, each built by a deterministic command.

    python -m rlbook.zoo list
    python -m rlbook.zoo build arith-base        # or: all
    python -m rlbook.zoo eval arith-base
    python -m rlbook.zoo eval arith-base --model runs/grpo/model --device cuda   # another model, same prompts

Load one with ``rlbook.models.load_model("arith-base")``; its card (how it was built, what it
measures) with ``rlbook.zoo.read_card("arith-base")``.
"""

from rlbook.zoo.build import build, read_card
from rlbook.zoo.recipes import RECIPES, Recipe

__all__ = ["RECIPES", "Recipe", "build", "read_card"]
