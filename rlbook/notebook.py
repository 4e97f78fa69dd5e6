"""Small helpers every lesson uses: show the library's own source, and check a claim out loud.

A lesson never pastes a second copy of a method: it calls ``show_source(rlbook.losses.dpo_loss)``
so the reader sees the code that actually runs. A lesson's claim about its own run is checked by
``check_claim``, which prints the claim with the measured evidence and fails the notebook (and so
``make test``) when the run does not show it. A claim is something the run could have shown
otherwise; an identity, or a fact true by construction (AM ≥ GM, a gate equal to 1 at r = 1, a
filter leaving no flat group), is shown with ``worked_check`` instead: it is checked just as
hard, but printed as what it is, so it is never read as evidence about the run.
"""

from __future__ import annotations

import inspect

from rlbook.runtime import is_ci, size


def show_source(obj, *, excerpt: tuple[str, str] | None = None) -> None:
    """Display the source of a library function or class, syntax-highlighted in Jupyter.

    ``excerpt=(first, last)`` shows only the lines from the first that contains ``first`` to the first
    line after it that contains ``last``, under a comment naming the function and the lines shown: the
    few lines of a long function that a lesson is about. A marker not found is a ``ValueError`` (the
    function changed, and the lesson should say what it shows now).
    """
    source = inspect.getsource(obj)
    if excerpt is not None:
        source = _excerpt(source, obj, *excerpt)
    try:
        from IPython.display import Code, display
    except ImportError:  # outside Jupyter: plain text
        print(source)
        return
    display(Code(source, language="python"))


def _excerpt(source: str, obj, first: str, last: str) -> str:
    """The lines of ``source`` from the first containing ``first`` through the next containing ``last``."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if first in line), None)
    end = None if start is None else next((i for i in range(start, len(lines)) if last in lines[i]), None)
    if start is None or end is None:
        missing = first if start is None else last
        raise ValueError(f"excerpt marker {missing!r} not found in the source of {obj.__qualname__}")
    name = f"{obj.__module__}.{obj.__qualname__}"
    header = f"# {name}, lines {start + 1}–{end + 1} of {len(lines)}\n"
    return header + "\n".join(lines[start:end + 1]) + "\n"


def check_claim(condition: bool, claim: str, evidence: str = "", *, n: str | None = None,
                uncertainty: str | None = None, threshold: str | None = None) -> None:
    """Assert ``claim`` about this run; print it with ``evidence`` when it holds.

    Raises ``AssertionError`` naming the claim and the evidence when it does not. The design's claim
    standard asks every claim for its support, given as keywords and printed in brackets after it:

    - n: what backs it, e.g. ``"3 seeds"``, ``"512 samples of 64 prompts"``;
    - uncertainty: e.g. ``"seed sd 0.03"``, ``"SE 0.02, clustered by prompt"`` (``rlbook.evidence``);
    - threshold: where the bar comes from: ``"theory"``, ``"the paper"``, ``"fixed before the run"``.

    A comparison between methods over seeds is claimed only when ``rlbook.evidence.compare_seeds``
    says ``separated``; a "no difference" only beside ``minimum_detectable_difference``.
    """
    text = _claim_text(claim, evidence, n=n, uncertainty=uncertainty, threshold=threshold)
    if not condition:
        raise AssertionError(f"claim not shown by this run: {text}")
    print(f"✓ {text}")


def _claim_text(claim: str, evidence: str, *, required: bool = False, **support) -> str:
    """``claim (evidence) [n; uncertainty; threshold: …]``, each support checked to be a non-empty string
    (``required``: all three must be given)."""
    parts = []
    for name in ("n", "uncertainty", "threshold"):
        value = support[name]
        if value is None and not required:
            continue
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string saying what supports the claim, got {value!r}")
        parts.append(value.strip() if name != "threshold" else f"threshold: {value.strip()}")
    detail = f" ({evidence})" if evidence else ""
    brackets = f" [{'; '.join(parts)}]" if parts else ""
    return f"{claim}{detail}{brackets}"


def check_prediction(condition: bool, claim: str, evidence: str, *, n: str, uncertainty: str, threshold: str) -> bool:
    """A prediction fixed before the run, and this run's verdict on it, whichever way it came out.

    When it holds, it prints as ``check_claim``'s ✓. When it does not, it prints ``✗ fixed before this
    run, and NOT shown by it (kept as the result)`` with the same evidence and support, and does not raise:
    a pre-set prediction the run did not bear out is the lesson's result, not a reason to re-run or to
    quietly demote it to a report. So a lesson with several pre-set tests calls this for every one of
    them, and a reader sees each verdict. All three supports are required; ``threshold`` should say the
    bar was fixed before the run. Returns ``condition``.
    """
    text = _claim_text(claim, evidence, required=True, n=n, uncertainty=uncertainty, threshold=threshold)
    if not (isinstance(condition, bool) or str(getattr(condition, "dtype", "")) in ("bool", "torch.bool")):
        raise ValueError(f"condition must be a bool (the test's outcome), got {type(condition).__name__}")
    print(f"✓ {text}" if condition else f"✗ fixed before this run, and NOT shown by it (kept as the result): {text}")
    return bool(condition)


def claim_at_full_size(condition: bool, claim: str, evidence: str, why_not_at_ci: str, **support) -> None:
    """``check_claim`` at the full size; at the CI size (``RLBOOK_SIZE=ci``) the same numbers, printed as a report.

    For a claim whose effect needs the full run (more steps, more held-out problems) to show: ``make
    test`` still executes the cell and prints whether it ``holds`` or is ``not shown`` at the small size,
    with ``why_not_at_ci`` saying why it is not asserted there; ``make execute`` (full size) asserts it,
    so the stored lesson carries the ✓. ``support`` is ``check_claim``'s n / uncertainty / threshold.
    """
    if not isinstance(why_not_at_ci, str) or not why_not_at_ci.strip():
        raise ValueError(f"why_not_at_ci must say why the claim is not asserted at the CI size, got {why_not_at_ci!r}")
    if is_ci():
        print(f"report at the CI size ({why_not_at_ci}): {claim} — {'holds' if condition else 'not shown'} "
              f"({evidence})")
    else:
        check_claim(condition, claim, evidence, **support)


def worked_check(condition: bool, statement: str, detail: str = "", *, basis: str = "true by construction") -> None:
    """Check a fact that holds by construction or by a theorem, on this run's numbers, and print it
    as a worked check (``=``), not as a claim (``✓``); ``AssertionError`` if it fails (a bug).

    ``basis`` says why it must hold, printed in the brackets: "true by construction" (an identity, the
    default), or e.g. "a check of the sampler against a theorem" for a sampled number tested against
    a theorem's value within a few standard errors (which a correct sampler fails only by rare chance).
    """
    if not isinstance(basis, str) or not basis.strip():
        raise ValueError(f"basis must be a non-empty string saying why the check must hold, got {basis!r}")
    shown = f" ({detail})" if detail else ""
    if not condition:
        raise AssertionError(f"worked check failed, which means a bug: {statement}{shown}")
    print(f"= {statement}{shown} [{basis.strip()}, shown as a worked check]")


def gap(value: float, *, floor: float = 1e-12) -> str:
    """A difference that an identity makes zero, as text: ``"< 1e-12"`` when it is rounding, else ``f"{value:.1e}"``.

    The last bits of a float64 sum depend on the CPU's order of operations, so a stored output that
    printed ``5.6e-17`` on one machine prints ``6.2e-17`` on another; below ``floor`` the digits carry
    no information and a lesson whose outputs are compared (nbval) prints the bound instead.
    """
    value = abs(float(value))
    if floor <= 0:
        raise ValueError(f"floor must be positive, got {floor!r}")
    return f"< {floor:.0e}" if value < floor else f"{value:.1e}"


def size_banner() -> None:
    """Print the run size this notebook runs at and how to change it."""
    print(f"RLBOOK_SIZE={size()} — set RLBOOK_SIZE=full (default) or ci before starting Jupyter to change it.")
