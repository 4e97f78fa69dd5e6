"""Timelines of generation and training (lesson 15): how busy each side was, and how much they overlapped.

A timeline is a list of entries ``{"phase": "generate" | "train", "start": s, "end": s, "version": v}``
— what ``AsyncTrainer.timeline`` records for a real run, and what ``pipeline_schedule`` computes
for an ideal one. ``busy_fraction``,
``overlap_seconds`` and ``timeline_durations`` read one; ``example_durations`` makes the uneven
rounds of an example run. ``rlbook.viz.timeline`` draws them as Gantt charts.
"""

from __future__ import annotations

import numpy as np

from rlbook._checks import check_int

__all__ = ["LANES", "busy_fraction", "check_timeline", "example_durations", "overlap_seconds", "pipeline_schedule",
           "timeline_durations", "train_end_times"]

LANES = ("generate", "train")


def check_timeline(timeline) -> None:
    """Raise unless ``timeline`` is a non-empty list of well-formed entries."""
    if not isinstance(timeline, (list, tuple)) or not timeline:
        raise ValueError("timeline must be a non-empty list of {'phase', 'start', 'end', 'version'} entries")
    for entry in timeline:
        if not isinstance(entry, dict) or entry.get("phase") not in LANES or entry["end"] < entry["start"]:
            raise ValueError(f"timeline entries must have phase in {LANES} and end >= start, got {entry!r}")


def busy_fraction(timeline: list[dict]) -> dict:
    """Fraction of the timeline's span each lane is busy, and the span itself (seconds)."""
    check_timeline(timeline)
    start, end = min(e["start"] for e in timeline), max(e["end"] for e in timeline)
    span = max(end - start, 1e-12)
    busy = {lane: sum(e["end"] - e["start"] for e in timeline if e["phase"] == lane) / span for lane in LANES}
    return {**busy, "span": end - start}


def overlap_seconds(timeline: list[dict]) -> float:
    """Seconds during which the generator and the learner were both busy (0 for a synchronous loop).

    The sum, over every pair of a generation entry and a training entry, of the length of their
    intersection; entries of one lane never overlap each other, so no second is counted twice.
    """
    check_timeline(timeline)
    generate = [e for e in timeline if e["phase"] == "generate"]
    train = [e for e in timeline if e["phase"] == "train"]
    return sum(max(0.0, min(g["end"], t["end"]) - max(g["start"], t["start"])) for g in generate for t in train)


def timeline_durations(timeline: list[dict]) -> tuple[list[float], list[float]]:
    """(generation seconds per round, training seconds per step), in order, of a measured timeline:
    the inputs ``pipeline_schedule`` needs to replay the same work under another staleness bound."""
    check_timeline(timeline)
    generate = [e["end"] - e["start"] for e in timeline if e["phase"] == "generate"]
    train = [e["end"] - e["start"] for e in timeline if e["phase"] == "train"]
    if len(generate) != len(train):
        raise ValueError(f"the timeline must hold one generation round per step, got {len(generate)} rounds "
                         f"and {len(train)} steps")
    return generate, train


def train_end_times(timeline: list[dict]) -> list[float]:
    """When each update finished, in seconds since the timeline began, in step order.

    Read off a ``pipeline_schedule`` replay, entry t is the ideal wall-clock time at which the learner
    holds the policy of step t under that staleness bound: the x-axis on which a stale run and a
    synchronous one are compared by time rather than by step.
    """
    check_timeline(timeline)
    origin = min(e["start"] for e in timeline)
    return sorted(e["end"] - origin for e in timeline if e["phase"] == "train")


def example_durations(steps: int = 8, *, spread: float = 0.5, train_seconds: float = 1.0, seed: int = 0):
    """Generation and training times of an example run with mixed lengths.

    A round's generation lasts as long as its longest completion: here 1 + spread × (the
    maximum of 16 exponential lengths, divided by its mean), so a larger ``spread`` gives more
    uneven rounds. Training takes ``train_seconds`` per step. Returns two lists of ``steps`` floats.
    """
    check_int("steps", steps, minimum=1)
    if spread < 0:
        raise ValueError(f"spread must be >= 0, got {spread}")
    rng = np.random.default_rng(seed)
    longest = rng.exponential(size=(steps, 16)).max(axis=1)
    generate = 1.0 + spread * (longest / longest.mean() - 1.0) if spread else np.ones(steps)
    return [float(g) for g in np.maximum(generate, 0.05)], [float(train_seconds)] * steps


def pipeline_schedule(generate_seconds, train_seconds, staleness: int) -> list[dict]:
    """The ideal timeline of one generator and one learner with staleness bound η (no overheads).

    Round i takes ``generate_seconds[i]`` to sample and step i ``train_seconds[i]`` to train on it.
    The generator starts round i as soon as it is free *and* the learner has reached version
    i − η (admission control, as in the threaded ``AsyncTrainer``), sampling with the newest
    weights; the learner starts step t once round t is sampled and step t − 1 is done:

        gen_start(i)   = max(gen_end(i − 1), train_end(i − η − 1))   (train_end(j < 0) = 0)
        train_start(t) = max(gen_end(t), train_end(t − 1))

    η = 0 gives the synchronous loop, whose span is Σ (gen + train); with η ≥ 1 the two overlap,
    and with steady times the span tends to n · max(gen, train). Returns entries like
    ``AsyncTrainer.timeline``'s (phase, start, end, version), sorted by start.
    """
    generate_seconds, train_seconds = list(generate_seconds), list(train_seconds)
    if not generate_seconds or len(generate_seconds) != len(train_seconds):
        raise ValueError(f"generate_seconds and train_seconds must be non-empty and of equal length, got "
                         f"{len(generate_seconds)} and {len(train_seconds)}")
    if min(generate_seconds + train_seconds) < 0:
        raise ValueError("generate_seconds and train_seconds must be non-negative")
    check_int("staleness", staleness, minimum=0)
    gen_end, train_end, entries = [], [], []
    for i, seconds in enumerate(generate_seconds):
        _train_until(i - 1, gen_end, train_end, train_seconds, entries)  # every step whose round exists
        admitted = train_end[i - staleness - 1] if i - staleness > 0 else 0.0
        start = max(gen_end[-1] if gen_end else 0.0, admitted)
        version = sum(end <= start for end in train_end)  # the newest weights when the round starts
        gen_end.append(start + seconds)
        entries.append({"phase": "generate", "start": start, "end": gen_end[i], "version": version})
    _train_until(len(train_seconds) - 1, gen_end, train_end, train_seconds, entries)
    return sorted(entries, key=lambda e: (e["start"], e["phase"] == "train"))


def _train_until(step: int, gen_end: list, train_end: list, train_seconds: list, entries: list) -> None:
    """Schedule learner steps up to ``step`` (each needs its round sampled and the previous step done)."""
    while len(train_end) <= step:
        t = len(train_end)
        start = max(gen_end[t], train_end[-1] if train_end else 0.0)
        train_end.append(start + train_seconds[t])
        entries.append({"phase": "train", "start": start, "end": train_end[t], "version": t + 1})
