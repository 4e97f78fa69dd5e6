"""Atomic checkpoints that load without running anyone's code: tensors in safetensors, the rest in JSON.

A training run can stop at any moment and resume to the same numbers. Layout of a checkpoint
folder ``DIR``::

    DIR/step_00000002/tensors.safetensors   every tensor, under the keys below
    DIR/step_00000002/state.json            everything else: counters, config, history rows, RNG
                                            states, optimizers' hyper-parameters, and the names of
                                            the tensors each model and optimizer owns
    DIR/latest                              the name of the newest complete checkpoint

Why not ``torch.save``: it pickles, and unpickling runs whatever code the file names, so resuming
a checkpoint someone shared would run their code. A safetensors file is a header of names,
dtypes and shapes followed by raw numbers, and JSON is plain data: reading them runs nothing. The
loader opens these two files only (a ``.pt`` file planted beside them is never read), and refuses
a file whose tensors are not exactly those ``state.json`` lists.

Tensor keys: entry ``k`` of model ``name``'s state dict is ``name/k``; the per-parameter tensor
``field`` of parameter ``i`` in optimizer ``name`` (AdamW's ``step``, ``exp_avg``, ``exp_avg_sq``)
is ``name/state/i/field``. The optimizer's non-tensor parts (its param groups: learning rate,
betas, which parameters each group holds) go into ``state.json``; loading rebuilds the same
state dict.

Atomicity: a checkpoint is written into a temporary folder beside it and renamed into place with
``os.replace`` (atomic on one file system), and only then is ``latest`` replaced, itself through
a temporary file and ``os.replace``. A crash at any moment leaves ``latest`` naming a complete
checkpoint. Older checkpoints are removed after the new one is in place (the ``keep`` newest stay).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rlbook._checks import check_int
from rlbook.trainers.history import json_default

__all__ = ["Checkpoint", "check_fits", "load_checkpoint", "read_checkpoint_meta", "restore_model", "restore_optimizer",
           "rng_state", "save_checkpoint", "set_rng_state"]

LATEST = "latest"
STATE_FILE = "state.json"
TENSOR_FILE = "tensors.safetensors"
FORMAT = "rlbook-checkpoint/1"
CHECKPOINT_NAME = re.compile(r"step_\d{8}")


@dataclass
class Checkpoint:
    """What one checkpoint holds.

    ``models``: name → a model's ``state_dict()``; ``optimizers``: name → an optimizer's
    ``state_dict()``; ``meta``: name → any JSON value (step counters, config, history rows,
    ``rng_state()``, a scheduler's state dict).
    """

    models: dict = field(default_factory=dict)
    optimizers: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def require(self, *, models=(), optimizers=(), meta=()) -> None:
        """Raise ``ValueError`` naming every listed part this checkpoint lacks (it was written by
        another trainer, or its state.json was edited)."""
        missing = ([f"model {name!r}" for name in models if name not in self.models]
                   + [f"optimizer {name!r}" for name in optimizers if name not in self.optimizers]
                   + [f"{name!r}" for name in meta if name not in self.meta])
        if missing:
            raise ValueError(f"the checkpoint lacks {', '.join(missing)}: it was not written by this kind of trainer")


# --- writing ------------------------------------------------------------------------------
def save_checkpoint(directory, step: int, checkpoint: Checkpoint, *, keep: int = 1) -> Path:
    """Write ``checkpoint`` atomically as step ``step`` of ``directory``; returns its folder
    ``directory/step_<step>``. The ``keep`` newest checkpoints are kept (0: all)."""
    check_int("step", step, minimum=0)
    check_int("keep", keep, minimum=0)
    tensors, state = _split(checkpoint)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    staging = Path(tempfile.mkdtemp(prefix=".writing_", dir=root))
    try:
        save_file(tensors, staging / TENSOR_FILE)
        (staging / STATE_FILE).write_text(json.dumps(state, indent=1, default=json_default))
    except BaseException:
        shutil.rmtree(staging)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    _write_atomically(root / LATEST, final.name)
    _remove_old(root, keep)
    return final


def _split(checkpoint: Checkpoint) -> tuple[dict, dict]:
    """(tensors for the safetensors file, the JSON state): every tensor under its stable key."""
    names = list(checkpoint.models) + list(checkpoint.optimizers)
    if len(set(names)) != len(names) or any("/" in name for name in names):
        raise ValueError(f"model and optimizer names must be distinct and free of '/', got {names}")
    tensors, models = {}, {}
    for name, state_dict in checkpoint.models.items():
        not_tensors = [key for key, value in state_dict.items() if not isinstance(value, torch.Tensor)]
        if not_tensors:
            raise ValueError(f"model {name!r}'s state dict must hold only tensors, got other values at {not_tensors}")
        models[name] = list(state_dict)
        tensors.update({f"{name}/{key}": value for key, value in state_dict.items()})
    optimizers = {name: _split_optimizer(name, state_dict, tensors)
                  for name, state_dict in checkpoint.optimizers.items()}
    state = {"format": FORMAT, "models": models, "optimizers": optimizers, "meta": checkpoint.meta}
    # A private CPU copy of each tensor: safetensors refuses tensors that share memory (tied weights).
    return {key: value.detach().to("cpu", copy=True).contiguous() for key, value in tensors.items()}, state


def _split_optimizer(name: str, state_dict: dict, tensors: dict) -> dict:
    """An optimizer state dict's JSON part; its per-parameter tensors are added to ``tensors``."""
    per_parameter = {}
    for index, fields in state_dict["state"].items():
        tensor_fields = [f for f, value in fields.items() if isinstance(value, torch.Tensor)]
        tensors.update({f"{name}/state/{index}/{f}": fields[f] for f in tensor_fields})
        per_parameter[str(index)] = {"tensors": tensor_fields,
                                     "values": {f: value for f, value in fields.items() if f not in tensor_fields}}
    return {"param_groups": state_dict["param_groups"], "state": per_parameter}


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=".latest_", dir=path.parent)
    with os.fdopen(handle, "w") as file:
        file.write(text)
    os.replace(temporary, path)


def _remove_old(root: Path, keep: int) -> None:
    checkpoints = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in checkpoints[:-keep] if keep > 0 else []:
        shutil.rmtree(old)


# --- reading ------------------------------------------------------------------------------
def load_checkpoint(path) -> Checkpoint:
    """Read a checkpoint: ``path`` is a checkpoint folder or a root holding ``latest``.

    Returns the ``Checkpoint`` given to ``save_checkpoint``, with its tensors on the CPU (JSON has
    no tuples: a tuple in ``meta`` or in an optimizer's param groups comes back as a list;
    ``restore_optimizer`` turns the optimizer's back). A damaged or tampered checkpoint raises
    ``ValueError`` naming what is wrong.
    """
    folder = _checkpoint_folder(path)
    state = _read_state(folder / STATE_FILE)
    tensors = _read_tensors(folder / TENSOR_FILE, expected=_tensor_keys(state, folder / STATE_FILE))
    models = {name: {key: tensors[f"{name}/{key}"] for key in keys} for name, keys in state["models"].items()}
    optimizers = {name: _join_optimizer(name, saved, tensors) for name, saved in state["optimizers"].items()}
    return Checkpoint(models=models, optimizers=optimizers, meta=state["meta"])


def read_checkpoint_meta(path) -> dict:
    """The ``meta`` of a checkpoint (counters, config, history) without reading its tensors: enough
    to check, cheaply, that a run can resume from it."""
    return _read_state(_checkpoint_folder(path) / STATE_FILE)["meta"]


def _checkpoint_folder(path) -> Path:
    """The checkpoint folder ``path`` names, itself or through its ``latest`` file."""
    folder = Path(path)
    if (folder / LATEST).is_file():
        name = (folder / LATEST).read_text().strip()
        if not CHECKPOINT_NAME.fullmatch(name):
            raise ValueError(f"{folder / LATEST} must name a checkpoint folder such as 'step_00000002', got {name!r}")
        folder = folder / name
    if (folder / STATE_FILE).is_file() and (folder / TENSOR_FILE).is_file():
        return folder
    if folder.is_dir() and any(folder.glob("*.pt")):
        raise ValueError(f"path {str(path)!r} holds pickled .pt files, which rlbook does not load (unpickling can "
                         f"run arbitrary code); a checkpoint is {STATE_FILE} and {TENSOR_FILE}")
    raise ValueError(f"path must be a checkpoint folder ({STATE_FILE} and {TENSOR_FILE}) or a folder with a "
                     f"'{LATEST}' file, got {str(path)!r}")


def _read_state(file: Path) -> dict:
    """state.json, checked to be an rlbook checkpoint's."""
    try:
        state = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{file} is not valid JSON: {error}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{file} must be an object with \"format\": {FORMAT!r}: it is not an rlbook checkpoint "
                         "of this version")
    for part in ("models", "optimizers", "meta"):
        if not isinstance(state.get(part), dict):
            raise ValueError(f"{file}: {part!r} must be an object, got {type(state.get(part)).__name__}")
    return state


def _tensor_keys(state: dict, file: Path) -> set[str]:
    """Every tensor key state.json names, after checking the shape of its listings."""
    keys = set()
    for name, model_keys in state["models"].items():
        if not isinstance(model_keys, list) or not all(isinstance(key, str) for key in model_keys):
            raise ValueError(f"{file}: models[{name!r}] must be a list of state-dict keys")
        keys.update(f"{name}/{key}" for key in model_keys)
    for name, saved in state["optimizers"].items():
        groups, per_parameter = (saved.get("param_groups"), saved.get("state")) if isinstance(saved, dict) else (0, 0)
        if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                                   for g in groups):
            raise ValueError(f"{file}: optimizers[{name!r}] must have 'param_groups', a list of groups with 'params'")
        if not isinstance(per_parameter, dict):
            raise ValueError(f"{file}: optimizers[{name!r}]['state'] must be an object")
        for index, fields in per_parameter.items():
            if not index.isdigit() or not isinstance(fields, dict) or not isinstance(fields.get("tensors"), list) \
                    or not isinstance(fields.get("values"), dict):
                raise ValueError(f"{file}: optimizers[{name!r}]['state'][{index!r}] must be a parameter index with "
                                 "'tensors' and 'values'")
            keys.update(f"{name}/state/{index}/{f}" for f in fields["tensors"])
    return keys


def _read_tensors(file: Path, *, expected: set[str]) -> dict:
    """The tensors of ``file``, which must be exactly the ``expected`` keys."""
    try:
        tensors = load_file(file)
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{file} is not a readable safetensors file: {error}") from None
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or unexpected:
        raise ValueError(f"{file} does not hold the tensors {STATE_FILE} lists: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return tensors


def _join_optimizer(name: str, saved: dict, tensors: dict) -> dict:
    """The optimizer state dict ``_split_optimizer`` took apart (parameter indices back to ints)."""
    state = {int(index): {**fields["values"], **{f: tensors[f"{name}/state/{index}/{f}"] for f in fields["tensors"]}}
             for index, fields in saved["state"].items()}
    return {"state": state, "param_groups": saved["param_groups"]}


# --- restoring into live objects ------------------------------------------------------------
def restore_model(model: torch.nn.Module, state_dict: dict, *, name: str) -> None:
    """Load ``state_dict`` into ``model`` after ``check_fits``."""
    check_fits(model, state_dict, name=name)
    model.load_state_dict(state_dict)


def check_fits(model: torch.nn.Module, state_dict: dict, *, name: str) -> None:
    """Raise ``ValueError`` unless ``state_dict`` has exactly ``model``'s entries, each of its shape;
    ``name`` (the checkpoint's name for it) is in the message."""
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ValueError(f"the checkpoint's {name!r} does not fit this model: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    for key, tensor in own.items():
        if state_dict[key].shape != tensor.shape:
            raise ValueError(f"the checkpoint's {name!r} has {key} of shape {tuple(state_dict[key].shape)}, "
                             f"this model's is {tuple(tensor.shape)}")


def restore_optimizer(optimizer: torch.optim.Optimizer, state_dict: dict, *, name: str) -> None:
    """Load ``state_dict`` into ``optimizer`` after checking it fits the optimizer's parameters.

    Each group must hold as many parameters as the optimizer's, and each per-parameter tensor
    must be a scalar (AdamW's ``step``) or have its parameter's shape. JSON has no tuples, so a
    hyper-parameter the optimizer keeps as a tuple (AdamW's ``betas``) is made one again.
    """
    groups, saved_groups = optimizer.param_groups, state_dict["param_groups"]
    if [len(g["params"]) for g in saved_groups] != [len(g["params"]) for g in groups]:
        raise ValueError(f"the checkpoint's {name!r} has groups of {[len(g['params']) for g in saved_groups]} "
                         f"parameters, this optimizer's are {[len(g['params']) for g in groups]}")
    parameters = {index: parameter for saved, group in zip(saved_groups, groups)
                  for index, parameter in zip(saved["params"], group["params"])}
    for index, fields in state_dict["state"].items():
        if index not in parameters:
            raise ValueError(f"the checkpoint's {name!r} has state for parameter {index}, which no group holds")
        for field_name, value in fields.items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != parameters[index].shape:
                raise ValueError(f"the checkpoint's {name!r} has {field_name} of parameter {index} of shape "
                                 f"{tuple(value.shape)}, the parameter's is {tuple(parameters[index].shape)}")
    param_groups = [_with_tuples(saved, group) for saved, group in zip(saved_groups, groups)]
    optimizer.load_state_dict({"state": state_dict["state"], "param_groups": param_groups})


def _with_tuples(saved: dict, group: dict) -> dict:
    """``saved`` with each list made a tuple where the live ``group`` holds a tuple."""
    return {key: tuple(value) if isinstance(group.get(key), tuple) and isinstance(value, list) else value
            for key, value in saved.items()}


# --- random states --------------------------------------------------------------------------
def rng_state() -> dict:
    """The global random states of Python, NumPy and torch, as JSON values (lists and numbers)."""
    version, internal, gauss = random.getstate()
    generator, key, position, has_gauss, cached_gauss = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [generator, key.tolist(), position, has_gauss, cached_gauss],
            "torch": torch.get_rng_state().tolist()}


def set_rng_state(state: dict) -> None:
    """Restore what ``rng_state`` returned; ``ValueError`` if ``state`` is not such a value."""
    try:
        version, internal, gauss = state["python"]
        generator, key, position, has_gauss, cached_gauss = state["numpy"]
        torch_state = torch.tensor(state["torch"], dtype=torch.uint8)
        random.setstate((version, tuple(internal), gauss))
        np.random.set_state((generator, np.array(key, dtype=np.uint32), position, has_gauss, cached_gauss))
        torch.set_rng_state(torch_state)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, OverflowError) as error:
        raise ValueError(f"state must be what rng_state() returned; the checkpoint's is malformed ({error})") from None
