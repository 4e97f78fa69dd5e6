"""The ablation harness: several online-RL configurations, the same model, task, seeds and budget.

The book's thesis is that GRPO, Dr.GRPO, DAPO and the rest differ in a few knobs of one loop. To
see what one knob does, everything else must be held fixed: the starting weights (a fresh copy of
the same checkpoint for every run), the task and its training prompts, the seeds, and the number
of steps. ``run_ablation`` does exactly that and returns one table and one figure::

    result = run_ablation({"grpo": preset("grpo"), "dr_grpo": preset("dr_grpo")},
                          model="arith-base", steps=30, seeds=(0, 1))
    result.table()                       # one row per configuration
    result.plot(("reward", "entropy"))   # one panel per metric, mean over seeds with a min-max band

With ``eval_dataset`` and ``eval_every``, each run is also evaluated on the held-out rows at step 0,
every ``eval_every`` steps and at the end (``result.eval_frame``, ``result.plot_evaluations()``):
the training batch's reward is measured on the prompts being trained on, the held-out pass@1 on
prompts the run never sees. The evaluations sample with their own seeded generator, so they do not
change the training run; it is derived from the run's seed, so runs of the same seed are scored on
the same prompts with the same sampling seed. ``result.held_out_table()`` gives each run's final
held-out pass@1 with its standard error clustered by prompt (``rlbook.evidence``).

The runs are independent, so they go side by side, one process per core and one thread each
(``rlbook.parallel``); the numbers are the same as one after another. A seed replaces
``config.seed``, which seeds the training prompts' order, the sampling and the initialisation of
anything new (a critic's head, LoRA adapters).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from rlbook._figures import panel_grid
from rlbook.parallel import default_workers, run_parallel
from rlbook.runtime import seed_everything

__all__ = ["AblationResult", "AsyncRun", "TABLE_METRICS", "held_out_samples", "run_ablation", "run_async_arms",
           "train_async_run", "knob_effects"]

# The purpose number in the seed of ``train_async_run``'s held-out evaluations (any fixed number).
ASYNC_EVAL_PURPOSE = 15

# The columns ``AblationResult.table`` summarises (those a run logged), in this order.
TABLE_METRICS = ("reward", "pass@1", "entropy", "kl_ref", "length_correct", "length_incorrect",
                 "truncation_rate", "frac_zero_adv_groups", "clip_frac", "step_time", "extra_samples")


@dataclass
class AblationResult:
    """What ``run_ablation`` measured: one ``History`` per (label, seed), and held-out results."""

    histories: dict = field(default_factory=dict)   # label -> [History, one per seed]
    evaluations: dict = field(default_factory=dict)  # label -> [dict from trainer.evaluate, one per seed]
    seeds: tuple = ()
    steps: int = 0
    configs: dict = field(default_factory=dict, repr=False)  # label -> OnlineConfig
    eval_curves: dict = field(default_factory=dict)  # label -> [[{"step", **evaluate()}, ...], one per seed]
    held_out_correct: dict = field(default_factory=dict, repr=False)  # label -> [(prompts, samples) 0/1 lists]
    after: dict = field(default_factory=dict, repr=False)  # label -> [what run_ablation's ``after`` returned, one per seed]

    @property
    def labels(self) -> list[str]:
        return list(self.histories)

    @property
    def frame(self):
        """A tidy ``pandas.DataFrame``: one row per (label, seed, step), every logged column."""
        import pandas as pd

        rows = [{"label": label, "seed": seed, **row}
                for label, runs in self.histories.items()
                for seed, history in zip(self.seeds, runs)
                for row in history]
        return pd.DataFrame(rows)

    @property
    def eval_frame(self):
        """A tidy ``pandas.DataFrame`` of the held-out evaluations during training (``eval_every``):
        one row per (label, seed, step), with ``pass@1`` and the other keys of ``trainer.evaluate``."""
        import pandas as pd

        rows = [{"label": label, "seed": seed, **point}
                for label, runs in self.eval_curves.items()
                for seed, curve in zip(self.seeds, runs)
                for point in curve]
        return pd.DataFrame(rows)

    def plot_evaluations(self, metric: str = "pass@1", *, ax=None):
        """The held-out ``metric`` against the step for every label: the mean over seeds as a line
        with markers at the evaluated steps, the min-max over seeds as a band."""
        import matplotlib.pyplot as plt

        frame = self.eval_frame
        if frame.empty:
            raise ValueError("no evaluations during training: run_ablation(..., eval_dataset=..., eval_every=...)")
        if metric not in frame:
            raise ValueError(f"metric {metric!r} was not evaluated; evaluated: {sorted(frame.columns)}")
        if ax is None:
            _, ax = plt.subplots(figsize=(4.6, 3.2))
        for label in self.labels:
            runs = frame[frame["label"] == label]
            by_step = runs.groupby("step")[metric]
            steps = np.array(sorted(runs["step"].unique()))
            line, = ax.plot(steps, by_step.mean().to_numpy(), "o-", label=label)
            if runs["seed"].nunique() > 1:
                ax.fill_between(steps, by_step.min().to_numpy(), by_step.max().to_numpy(),
                                color=line.get_color(), alpha=0.2)
        ax.set(xlabel="step", title=f"held-out {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return ax.figure

    def held_out_table(self, clusters=None):
        """Each run's final held-out pass@1 and its standard error clustered by prompt: a
        ``pandas.DataFrame`` indexed by (label, seed) with columns ``pass@1`` and ``se``.

        ``clusters``: one label per held-out prompt (e.g. the question text, so that a prompt drawn
        twice counts once); default: each prompt its own (``rlbook.evidence.pass_at_k_with_se``).
        """
        import pandas as pd

        from rlbook.evidence import pass_at_k_with_se

        if not self.held_out_correct:
            raise ValueError("no held-out evaluation: run_ablation(..., eval_dataset=...)")
        rows = {}
        for label, tables in self.held_out_correct.items():
            for seed, correct in zip(self.seeds, tables):
                mean, se = pass_at_k_with_se(correct, 1, clusters=clusters)
                rows[(label, seed)] = {"pass@1": mean, "se": se}
        table = pd.DataFrame.from_dict(rows, orient="index")
        table.index = pd.MultiIndex.from_tuples(table.index, names=["label", "seed"])
        return table

    def paired_differences(self, baseline: str, *, clusters=None, pairs=None):
        """Final held-out pass@1 of one configuration minus another's, seed by seed: a ``pandas.DataFrame``.

        Runs of the same seed are scored on the same prompts with the same sampling seed, so they are
        paired. ``pairs``: (a, b) label pairs, one row "a − b" each; default every other label against
        ``baseline``. Columns: the per-seed differences ``seed s``; their ``mean`` and ``sd over seeds``;
        a 95 % confidence interval ``CI low`` / ``CI high`` (Student's t with n − 1 degrees of freedom
        over the n per-seed differences: the seeds are the unit of replication); ``eval SE``, the mean
        over seeds of ``paired_pass_at_k_difference``'s SE clustered by prompt (``clusters``: one label
        per held-out prompt), the part of the spread that evaluating on finitely many prompts adds;
        ``separated``, ``compare_seeds``' verdict (≥ 3 seeds each, every seed of the higher above every
        seed of the lower); and ``detectable``, ``paired_minimum_detectable_difference`` of the per-seed
        differences: the gap a paired t-test on these seeds would detect with 80 % probability, the same
        paired, t-based footing as the interval (an unpaired, normal-quantile figure would claim about twice
        the power at 3 seeds). Needs at least 2 seeds.
        """
        import pandas as pd

        from rlbook.evidence import (
            _t_quantile, compare_seeds, paired_minimum_detectable_difference, paired_pass_at_k_difference)

        if not self.held_out_correct:
            raise ValueError("no held-out evaluation: run_ablation(..., eval_dataset=...)")
        if len(self.seeds) < 2:
            raise ValueError(f"paired_differences needs at least 2 seeds, the result has {len(self.seeds)}")
        if baseline not in self.held_out_correct:
            raise ValueError(f"baseline must be one of {list(self.held_out_correct)}, got {baseline!r}")
        pairs = [(label, baseline) for label in self.held_out_correct if label != baseline] if pairs is None else pairs
        passes = self.held_out_table(clusters=clusters)["pass@1"]
        n = len(self.seeds)
        rows = {}
        for a, b in pairs:
            for label in (a, b):
                if label not in self.held_out_correct:
                    raise ValueError(f"pairs name {label!r}, not one of {list(self.held_out_correct)}")
            pass_a, pass_b = passes.loc[a].to_numpy(), passes.loc[b].to_numpy()
            differences = pass_a - pass_b
            sd = float(differences.std(ddof=1))
            half_width = _t_quantile(0.975, n - 1) * sd / np.sqrt(n)
            higher, lower = (pass_a, pass_b) if differences.mean() > 0 else (pass_b, pass_a)
            comparison = compare_seeds(higher, lower)
            eval_se = [paired_pass_at_k_difference(x, y, 1, clusters=clusters)[1]
                       for x, y in zip(self.held_out_correct[a], self.held_out_correct[b])]
            rows[f"{a} − {b}"] = {**{f"seed {seed}": d for seed, d in zip(self.seeds, differences)},
                                  "mean": differences.mean(), "sd over seeds": sd,
                                  "CI low": differences.mean() - half_width, "CI high": differences.mean() + half_width,
                                  "eval SE": float(np.mean(eval_se)), "separated": comparison.separated,
                                  "detectable": paired_minimum_detectable_difference(differences)}
        return pd.DataFrame.from_dict(rows, orient="index")

    def per_run(self, metric: str, *, last: int = 5):
        """Each run's mean of ``metric`` over its last ``last`` steps: a ``pandas.Series`` indexed by
        (label, seed), the input ``knob_effects`` compares configurations with."""
        if not isinstance(last, int) or last < 1:
            raise ValueError(f"last must be a positive int, got {last!r}")
        frame = self.frame
        if metric not in frame:
            raise ValueError(f"metric {metric!r} was not logged; logged: {sorted(frame.columns)}")
        return frame.groupby(["label", "seed"], sort=False).tail(last).groupby(["label", "seed"], sort=False)[metric].mean()

    def table(self, last: int = 5, metrics=TABLE_METRICS):
        """One row per label: each metric's mean over the last ``last`` steps, averaged over seeds.

        Adds ``samples_per_step`` (sampled completions, dynamic-sampling rounds included), the
        total ``seconds`` of training per run, and ``eval_pass@1`` (and the other ``eval_`` keys)
        when a held-out set was evaluated.
        """
        import pandas as pd

        if not isinstance(last, int) or last < 1:
            raise ValueError(f"last must be a positive int, got {last!r}")
        frame = self.frame
        summary = {}
        for label in self.labels:
            runs = frame[frame["label"] == label]
            tails = runs.groupby("seed", sort=False).tail(last)
            row = {}
            for metric in metrics:
                if metric in tails and tails[metric].notna().any():
                    row[metric] = tails.groupby("seed")[metric].mean().mean()
            if "extra_samples" in runs:
                row["samples_per_step"] = self.configs[label].batch_size + runs["extra_samples"].mean()
            row["seconds"] = runs.groupby("seed")["step_time"].sum().mean()
            for key in sorted({k for result in self.evaluations.get(label, []) for k in result}):
                values = [result[key] for result in self.evaluations[label] if key in result]
                row[f"eval_{key}"] = float(np.mean(values))
            summary[label] = row
        return pd.DataFrame.from_dict(summary, orient="index")

    def plot(self, metrics=("reward", "entropy"), *, x: str = "step", smooth: int = 1, axes=None):
        """One panel per metric against ``x`` ("step" or "wall_time"): the mean over seeds as a line,
        the min-max over seeds as a band (the first panel's legend says so); ``smooth`` > 1 applies a
        trailing moving average."""
        metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        if x not in ("step", "wall_time"):
            raise ValueError(f"x must be 'step' or 'wall_time', got {x!r}")
        if not isinstance(smooth, int) or smooth < 1:
            raise ValueError(f"smooth must be a positive int, got {smooth!r}")
        frame = self.frame
        missing = [m for m in metrics if m not in frame]
        if missing:
            raise ValueError(f"metrics {missing} were not logged; logged: {sorted(frame.columns)}")
        if axes is None:  # rows that fit the book's column: four metrics are two by two
            fig, axes = panel_grid(len(metrics), panel=(4.2, 3.2), min_width=3.4)
        else:
            axes = np.atleast_1d(axes).ravel()
            fig = axes[0].figure
        for ax, metric in zip(axes, metrics):
            for label in self.labels:
                runs = frame[frame["label"] == label]
                curves = [group[metric].rolling(smooth, min_periods=1).mean().to_numpy()
                          for _, group in runs.groupby("seed", sort=False)]
                xs = [group[x].to_numpy() for _, group in runs.groupby("seed", sort=False)]
                length = min(len(c) for c in curves)
                stacked = np.stack([c[:length] for c in curves])
                xaxis = np.mean([v[:length] for v in xs], axis=0)
                line, = ax.plot(xaxis, np.nanmean(stacked, axis=0), label=label)
                if len(curves) > 1:
                    ax.fill_between(xaxis, np.nanmin(stacked, axis=0), np.nanmax(stacked, axis=0),
                                    color=line.get_color(), alpha=0.2)
            ax.set(xlabel="wall time (s)" if x == "wall_time" else "step", title=metric)
            ax.grid(alpha=0.3)
        seeds = len(self.seeds)
        smoothed = f", trailing mean over {smooth} steps" if smooth > 1 else ""
        title = (f"line: mean of {seeds} seeds{smoothed}\nband: lowest to highest seed" if seeds > 1
                 else f"trailing mean over {smooth} steps" if smooth > 1 else None)
        axes[0].legend(fontsize=8, title=title, title_fontsize=7)
        fig.tight_layout()
        return fig


def run_ablation(configs: dict, *, model: str = "arith-base", task=None, steps: int = 30, seeds=(0,),
                 eval_dataset=None, eval_samples: int = 4, progress: bool = True, live: bool | None = False,
                 trainer_kwargs: dict | None = None, eval_every: int | None = None,
                 workers: int | None = None, config_kwargs: dict | None = None, after=None) -> AblationResult:
    """Train every configuration in ``configs`` (label → ``OnlineConfig``) once per seed.

    Args:
        - configs: label → ``OnlineConfig`` (``rlbook.trainers.preset(...)``).
        - model: a zoo name, a folder or a hub id; each run starts from a fresh copy of it.
        - task: the task that rewards the runs; default: the task on the zoo model's card.
        - steps: training steps per run.
        - seeds: each run's ``config.seed`` (and the global seed) is set to each of these in turn.
        - eval_dataset: held-out rows; when given, each run ends with ``trainer.evaluate`` on it
          (``eval_samples`` completions per prompt), the table shows ``eval_pass@1`` and
          ``held_out_table()`` each run's pass@1 with its clustered standard error.
        - progress: show each run's progress bar.
        - live: each run's live plot (``OnlineTrainer.train``'s ``live``); off by default, since an
          ablation's many runs would each leave a figure (the lesson plots them together).
        - eval_every: with ``eval_dataset``, also evaluate at step 0, every ``eval_every`` steps and at
          the end (``result.eval_curves`` / ``eval_frame``); None (default): only at the end.
        - trainer_kwargs: extra keyword arguments of ``OnlineTrainer`` (``train_dataset``, ...).
        - config_kwargs: label → extra ``OnlineTrainer`` keyword arguments for that configuration's
          runs only, merged over ``trainer_kwargs`` (e.g. ``{"filter, divisor B": {"token_weights_fn":
          sampled_divisor_weights(B)}}``, a hook that is no ``OnlineConfig`` field).
        - workers: processes to run the (configuration, seed) runs in, one thread each
          (``rlbook.parallel.run_parallel``); None: one per core (or ``$RLBOOK_WORKERS``). Each run's
          own progress bar and live plot are shown only when the runs go one at a time; in parallel,
          one bar counts the finished runs. Same seed, same numbers, either way.
        - after: None, or a function called with each run's trained ``OnlineTrainer`` at the end of the
          run (after its held-out evaluation), in the run's own process; what it returns (picklable:
          numbers, dicts, tensors) is kept in ``result.after[label]``, one per seed. It measures what
          only the trained models hold (a critic's values, say) without training them again.
    """
    from rlbook.trainers import OnlineConfig

    if not isinstance(configs, dict) or not configs:
        raise ValueError("configs must be a non-empty dict of label -> OnlineConfig")
    for label, config in configs.items():
        if not isinstance(config, OnlineConfig):
            raise ValueError(f"configs[{label!r}] must be an OnlineConfig (rlbook.trainers.preset), "
                             f"got {type(config).__name__}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of non-negative ints, got {seeds!r}")
    if not isinstance(eval_samples, int) or eval_samples < 1:
        raise ValueError(f"eval_samples must be a positive int, got {eval_samples!r}")
    if eval_every is not None:
        if not isinstance(eval_every, int) or isinstance(eval_every, bool) or eval_every < 1:
            raise ValueError(f"eval_every must be a positive int or None, got {eval_every!r}")
        if eval_dataset is None:
            raise ValueError("eval_every needs eval_dataset: the held-out rows to evaluate on")
    config_kwargs = {} if config_kwargs is None else config_kwargs
    if not isinstance(config_kwargs, dict) or not all(isinstance(v, dict) for v in config_kwargs.values()):
        raise ValueError("config_kwargs must be a dict of label -> dict of OnlineTrainer keyword arguments")
    unknown = sorted(set(config_kwargs) - set(configs), key=str)
    if unknown:
        raise ValueError(f"config_kwargs has labels that are not in configs: {unknown}")
    if after is not None and not callable(after):
        raise ValueError(f"after must be a function of the trained OnlineTrainer or None, got {type(after).__name__}")
    task = _task_for(model) if task is None else task

    result = AblationResult(seeds=seeds, steps=steps, configs=dict(configs))
    runs = [(label, seed) for label in configs for seed in seeds]
    workers = default_workers(len(runs)) if workers is None else workers
    one_at_a_time = workers == 1 or len(runs) == 1
    jobs = [(model, task, configs[label], label, seed, steps, eval_dataset, eval_samples, eval_every,
             {**(trainer_kwargs or {}), **config_kwargs.get(label, {})}, progress and one_at_a_time, live if one_at_a_time else False,
             after)
            for label, seed in runs]
    outcomes = run_parallel(_train_one, jobs, workers=workers, progress=progress and not one_at_a_time,
                            desc=f"{len(runs)} runs")
    for label in configs:
        result.histories[label], result.evaluations[label] = [], []
        if eval_every is not None:
            result.eval_curves[label] = []
        if eval_dataset is not None:
            result.held_out_correct[label] = []
        if after is not None:
            result.after[label] = []
    for (label, _), (history, final, curve, correct, measured) in zip(runs, outcomes):
        result.histories[label].append(history)
        if after is not None:
            result.after[label].append(measured)
        if eval_every is not None:
            result.eval_curves[label].append(curve)
        if final is not None:
            result.evaluations[label].append(final)
            result.held_out_correct[label].append(correct)
    return result


def _train_one(model, task, config, label, seed, steps, eval_dataset, eval_samples, eval_every, trainer_kwargs,
               progress, live, after=None):
    """One run of ``run_ablation``: a fresh copy of ``model`` trained with ``config`` under ``seed``.
    Returns (history, final held-out evaluation or None, evaluation curve or None, the final
    evaluation's (prompts, samples) 0/1 table or None, ``after(trainer)`` or None)."""
    from rlbook.models import load_model
    from rlbook.trainers import OnlineTrainer

    seed_everything(seed)
    policy, tokenizer = load_model(model)
    run_config = dataclasses.replace(config, seed=seed, name=f"{label} (seed {seed})")
    trainer = OnlineTrainer(policy, tokenizer, task, run_config, **trainer_kwargs)
    def evaluate():
        result = trainer.evaluate(eval_dataset, n_samples=eval_samples, return_correct=True)
        return result, result.pop("correct")

    curve, correct = None, None
    if eval_every is None:
        history = trainer.train(steps, progress=progress, live=live)
    else:
        evaluation, correct = evaluate()
        curve = [{"step": 0, **evaluation}]
        while trainer.step < steps:
            history = trainer.train(min(eval_every, steps - trainer.step), progress=progress, live=live)
            evaluation, correct = evaluate()
            curve.append({"step": trainer.step, **evaluation})
    final = None
    if eval_dataset is not None:
        if curve is None:
            final, correct = evaluate()
        else:
            final = {k: v for k, v in curve[-1].items() if k != "step"}
    return history, final, curve, correct, (after(trainer) if after is not None else None)


@dataclass
class AsyncRun:
    """One ``train_async_run``: what the lesson reads of an ``AsyncTrainer`` run, picklable.

    ``history`` (one row per step), ``timeline`` (every generation round and update) and
    ``trained_timeline`` (without the rounds never trained on, ``AsyncTrainer.trained_timeline``);
    ``evaluations``: one ``held_out_samples`` dict per evaluated step, with its ``step``.
    """

    label: str
    seed: int
    history: object
    timeline: list
    trained_timeline: list
    evaluations: list = field(default_factory=list)


def held_out_samples(policy, tokenizer, dataset, verifier, *, n_samples: int = 8, max_new_tokens: int = 64,
                     temperature: float = 1.0, seed: int = 0) -> dict:
    """The current policy on held-out prompts, sample by sample: what a paired, clustered comparison needs.

    ``n_samples`` completions per row of ``dataset`` (``rlbook.evaluation.sample_and_verify``). Returns
    the means ``pass@1``, ``length_mean``, ``scratchpad_rate`` (share of completions that are a
    well-formed ``<think>`` scratchpad, ``rlbook.reasoning.completion_kind``) and
    ``accuracy_with_scratchpad`` / ``accuracy_without_scratchpad`` (NaN when there is none), as on a
    zoo card (``rlbook.zoo.evaluate``), and the (prompts, n_samples) tables ``correct`` (0/1),
    ``length`` (tokens) and ``scratchpad`` (0/1) as nested lists. Two policies evaluated with the same
    ``seed`` get the same random draws (common random numbers), so their difference is paired.
    """
    from rlbook.evaluation import sample_and_verify
    from rlbook.reasoning import completion_kind

    rollout, rewards = sample_and_verify(policy, tokenizer, dataset, verifier, n_samples=n_samples,
                                         max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    shape = tuple(rewards.shape)
    correct = (rewards == 1.0).numpy().astype(int)
    length = rollout.completion_lengths.reshape(shape).numpy().astype(int)
    scratchpad = np.array([completion_kind(text) == "scratchpad" for text in rollout.texts], dtype=int).reshape(shape)

    def share(values) -> float:
        return float(values.mean()) if values.size else float("nan")

    return {"pass@1": share(correct), "length_mean": share(length), "scratchpad_rate": share(scratchpad),
            "accuracy_with_scratchpad": share(correct[scratchpad == 1]),
            "accuracy_without_scratchpad": share(correct[scratchpad == 0]),
            "correct": correct.tolist(), "length": length.tolist(), "scratchpad": scratchpad.tolist()}


def train_async_run(config, async_config, *, model: str = "arith-base", task=None, label: str = "", seed: int = 0,
                    steps: int = 16, eval_dataset=None, evaluate_at=(), eval_samples: int = 8,
                    progress: bool = True) -> AsyncRun:
    """A fresh copy of ``model`` trained ``steps`` steps by ``AsyncTrainer(config, async_config)`` under ``seed``.

    After each step in ``evaluate_at`` the learner's *current* policy is evaluated on ``eval_dataset``
    (``held_out_samples``, ``eval_samples`` per prompt, at the config's length and temperature); the
    evaluation seed depends on ``seed`` only, so runs of one seed are scored on the same draws. Without
    a live plot (a lesson plots the runs together). Returns an ``AsyncRun``.
    """
    from rlbook.models import load_model
    from rlbook.trainers import AsyncTrainer

    evaluate_at = tuple(evaluate_at)
    if evaluate_at and eval_dataset is None:
        raise ValueError("evaluate_at needs eval_dataset: the held-out rows to evaluate on")
    if any(not isinstance(s, int) or not 1 <= s <= steps for s in evaluate_at) or list(evaluate_at) != sorted(set(evaluate_at)):
        raise ValueError(f"evaluate_at must be increasing steps in 1..{steps}, got {evaluate_at}")
    task = _task_for(model) if task is None else task
    seed_everything(seed)
    policy, tokenizer = load_model(model)
    run_config = dataclasses.replace(config, seed=seed, name=f"{label} (seed {seed})" if label else f"seed {seed}")
    trainer = AsyncTrainer(policy, tokenizer, task, run_config, async_config)
    eval_seed = int(np.random.SeedSequence([seed, ASYNC_EVAL_PURPOSE]).generate_state(1)[0])
    evaluations, done = [], 0
    for point in sorted({*evaluate_at, steps}):
        trainer.train(point - done, progress=progress, live=False)
        done = point
        if point in evaluate_at:
            evaluations.append({"step": point, **held_out_samples(
                trainer.policy, tokenizer, eval_dataset, trainer.verifier, n_samples=eval_samples,
                max_new_tokens=run_config.max_new_tokens, temperature=run_config.temperature, seed=eval_seed)})
    return AsyncRun(label=label, seed=seed, history=trainer.history, timeline=list(trainer.timeline),
                    trained_timeline=trainer.trained_timeline(), evaluations=evaluations)


def run_async_arms(arms: dict, config, *, model: str = "arith-base", task=None, seeds=(0,), steps: int = 16,
                   eval_dataset=None, evaluate_at=(), eval_samples: int = 8, workers: int | None = None,
                   progress: bool = True) -> dict:
    """``train_async_run`` for every (arm, seed), side by side (``rlbook.parallel.run_parallel``).

    ``arms``: label → ``(AsyncConfig, overrides)``, ``overrides`` a dict of ``config`` fields for that
    arm (e.g. ``{"lr": 2.5e-4}``). Every run starts from a fresh copy of ``model``; runs of one seed
    see the same training prompts and sampling seeds and are evaluated on the same draws. Returns
    label → [``AsyncRun``, one per seed]; same seed, same numbers, in parallel or not.
    """
    if not isinstance(arms, dict) or not arms:
        raise ValueError("arms must be a non-empty dict of label -> (AsyncConfig, overrides dict)")
    for label, arm in arms.items():
        if not (isinstance(arm, tuple) and len(arm) == 2 and isinstance(arm[1], dict)):
            raise ValueError(f"arms[{label!r}] must be (AsyncConfig, dict of config overrides), got {arm!r}")
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of non-negative ints, got {seeds!r}")
    task = _task_for(model) if task is None else task
    runs = [(label, seed) for label in arms for seed in seeds]
    jobs = [(dataclasses.replace(config, **arms[label][1]), arms[label][0]) for label, _ in runs]
    outcomes = run_parallel(
        lambda index: train_async_run(*jobs[index], model=model, task=task, label=runs[index][0],
                                      seed=runs[index][1], steps=steps, eval_dataset=eval_dataset,
                                      evaluate_at=evaluate_at, eval_samples=eval_samples, progress=False),
        [(index,) for index in range(len(runs))], workers=workers, progress=progress, desc=f"{len(runs)} runs")
    result = {label: [] for label in arms}
    for (label, _), outcome in zip(runs, outcomes):
        result[label].append(outcome)
    return result


def _task_for(model: str):
    """The task a zoo model was built for (its card's recipe)."""
    from rlbook.tasks import get_task
    from rlbook.zoo import read_card

    try:
        recipe = read_card(model)["recipe"]
    except ValueError:
        raise ValueError(f"task is required for model={model!r} (it has no zoo card naming its task)") from None
    if recipe.get("task") is None:
        raise ValueError(f"task is required: the card of model={model!r} names no task")
    return get_task(recipe["task"], **recipe.get("task_settings", {}))


def knob_effects(values, knobs: dict) -> "pandas.DataFrame":
    """What each knob of a factorial ablation changes in a per-run number, against the seeds' noise.

    ``values``: a ``pandas.Series`` indexed by (label, seed), one number per run (``per_run``, or a
    held-out metric); ``knobs``: knob name → the labels that have it (the other labels lack it).
    For each knob, ``with`` and ``without`` are the means over the runs with and without it,
    ``gap`` their difference; ``seed_sd`` is the pooled standard deviation of a run around its
    configuration's mean (the seed-to-seed noise: within-label variances pooled over labels, each
    with n − 1 degrees of freedom), ``se`` the standard error of the gap it implies,
    seed_sd · √(1/n_with + 1/n_without), and ``z`` = gap / se. Needs at least one label with two
    or more seeds. The usual analysis of a two-level factorial design with replicates (Box, Hunter
    & Hunter, *Statistics for Experimenters*, 2005, ch. 5). ``se`` treats the runs as independent.
    Runs of the same seed share their prompt order, but after the first update they sample different
    completions, so their results need not be positively correlated: the gaps can be more or less
    noisy than ``se`` says.
    """
    import pandas as pd

    if not isinstance(values, pd.Series) or values.index.nlevels != 2:
        raise ValueError("values must be a pandas Series indexed by (label, seed)")
    labels = list(dict.fromkeys(values.index.get_level_values(0)))
    if not isinstance(knobs, dict) or not knobs:
        raise ValueError("knobs must be a non-empty dict: knob name -> the labels that have it")
    by_label = values.groupby(level=0, sort=False)
    counts = by_label.count()
    dof = int((counts - 1).clip(lower=0).sum())
    if dof < 1:
        raise ValueError("values needs at least one label with two or more seeds to measure the seed noise")
    seed_sd = float(np.sqrt(sum(by_label.var(ddof=1).fillna(0.0)[label] * (counts[label] - 1)
                                for label in labels) / dof))
    rows = {}
    for knob, having in knobs.items():
        having = list(having)
        unknown = [label for label in having if label not in labels]
        if unknown:
            raise ValueError(f"knobs[{knob!r}] names labels not in values: {unknown}")
        inside = values.index.get_level_values(0).isin(having)
        if inside.all() or not inside.any():
            raise ValueError(f"knobs[{knob!r}] must split the labels into two non-empty sets")
        with_, without = values[inside], values[~inside]
        gap = float(with_.mean() - without.mean())
        se = seed_sd * float(np.sqrt(1 / len(with_) + 1 / len(without)))
        rows[knob] = {"with": float(with_.mean()), "without": float(without.mean()), "gap": gap,
                      "seed_sd": seed_sd, "se": se, "z": gap / se if se > 0 else float("nan")}
    return pd.DataFrame.from_dict(rows, orient="index")
