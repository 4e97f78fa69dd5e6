"""Input checks shared by the public functions.

Every check raises ``ValueError`` whose message names the argument and what was expected, so a
reader who passes the wrong thing learns which argument and why.
"""

from __future__ import annotations

import math

import torch


def as_float_tensor(name: str, value, *, ndim: tuple[int, ...] | None = None) -> torch.Tensor:
    """Return ``value`` as a floating tensor, checking its dimensionality and finiteness."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be a tensor of numbers, got {type(value).__name__}") from err
    if not (value.is_floating_point()):
        if value.dtype == torch.bool or value.is_complex():
            raise ValueError(f"{name} must be a real floating tensor, got dtype {value.dtype}")
        value = value.float()
    if ndim is not None and value.dim() not in ndim:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dimensions, got shape {tuple(value.shape)}")
    check_finite(name, value)
    return value


def check_finite(name: str, value: torch.Tensor) -> None:
    """Raise if ``value`` holds NaN or infinity."""
    if value.is_floating_point() and not torch.isfinite(value).all():
        raise ValueError(f"{name} must be finite, but it contains NaN or inf")


def check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise unless every named tensor has the same shape: ``check_same_shape(logp=a, mask=m)``."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, tensor in items[1:]:
        if tuple(tensor.shape) != tuple(first.shape):
            raise ValueError(
                f"{name} must have the same shape as {first_name} {tuple(first.shape)}, got {tuple(tensor.shape)}"
            )


def as_mask(name: str, mask, like: torch.Tensor, *, allow_empty: bool = False) -> torch.Tensor:
    """Return a 0/1 float mask shaped like ``like``; refuse other values and (by default) all-zero masks."""
    if not isinstance(mask, torch.Tensor):
        mask = torch.as_tensor(mask)
    if tuple(mask.shape) != tuple(like.shape):
        raise ValueError(f"{name} must have shape {tuple(like.shape)}, got {tuple(mask.shape)}")
    if mask.is_complex():
        raise ValueError(f"{name} must be a 0/1 mask, got dtype {mask.dtype}")
    mask = mask.to(like.dtype if like.is_floating_point() else torch.float32)
    if not torch.all((mask == 0) | (mask == 1)):
        raise ValueError(f"{name} must contain only 0 and 1")
    if not allow_empty and mask.sum() == 0:
        raise ValueError(f"{name} selects no tokens: every entry is 0")
    return mask


def check_positive(name: str, value, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, checking it is a finite positive (or non-negative) number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        expected = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a finite {expected} number, got {value}")
    return value


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    """Return ``value`` as an int, checking its type and lower bound."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_optional_int(name: str, value, *, minimum: int | None = None) -> int | None:
    """Return ``value``: None, or an int checked by ``check_int``."""
    return None if value is None else check_int(name, value, minimum=minimum)


def check_choice(name: str, value, choices) -> str:
    """Raise unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_knob(name: str, value):
    """Return a loss knob's value after checking it is a finite number, a bool or None (it must fit JSON)."""
    number = isinstance(value, (int, float)) and (isinstance(value, bool) or math.isfinite(value))
    if value is not None and not number:
        raise ValueError(f"{name} must be a finite number, a bool or None, got {value!r}")
    return value


def check_bool(name: str, value) -> bool:
    """Raise unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_settings(owner: str, checks: dict, settings: dict) -> None:
    """Check each of ``settings`` (name → value) with its ``checks[name](name, value)``.

    A name ``checks`` lacks is refused, the known ones listed: a trainer checks its arguments with
    its table, and the command line checks ``--set`` values with the same table before any work.
    """
    unknown = sorted(set(settings) - set(checks))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} {'is not a setting' if len(unknown) == 1 else 'are not settings'} "
                         f"of {owner}; its settings are {', '.join(sorted(checks))}")
    for name, value in settings.items():
        checks[name](name, value)


def check_group_size(name: str, batch: int, group_size) -> int:
    """Check that ``group_size`` is an int >= 1 that divides the batch ``batch``."""
    group_size = check_int(name, group_size, minimum=1)
    if batch % group_size != 0:
        raise ValueError(f"{name}={group_size} must divide the batch size {batch}")
    return group_size


def check_all_positive(name: str, value: torch.Tensor) -> None:
    """Raise unless every entry of ``value`` is > 0 (lengths, counts, temperatures)."""
    if value.numel() and not (value > 0).all():
        raise ValueError(f"{name} must be positive everywhere, got a minimum of {value.min().item():.4g}")


def check_columns(name: str, dataset, columns: tuple[str, ...]) -> None:
    """Raise unless ``dataset`` (a ``datasets.Dataset`` or dict of lists) is non-empty and has ``columns``."""
    present = getattr(dataset, "column_names", None)
    if present is None:
        present = list(dataset.keys()) if isinstance(dataset, dict) else None
    if present is None:
        raise ValueError(f"{name} must be a datasets.Dataset or a dict of lists, got {type(dataset).__name__}")
    missing = [c for c in columns if c not in present]
    if missing:
        raise ValueError(f"{name} must have the columns {list(columns)}; missing {missing}")
    if len(dataset[columns[0]]) == 0:
        raise ValueError(f"{name} is empty: it must hold at least one row")
