"""rlbook: the library behind the interactive textbook of LLM post-training RL.

The math lives in small pure modules (``kl``, ``advantages``, ``ratios``, ``aggregation``,
``losses``, ``shaping``, ``metrics``); the models, tasks, rollouts and zoo build on them.
"""

__version__ = "0.1.0"
