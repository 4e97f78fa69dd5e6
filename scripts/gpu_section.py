"""Lesson 21's GPU section, run as a reader would run it: the lesson's own code cells, with ``MODEL_ID`` and
``DEVICE`` the only lines changed, each cell timed.

    python scripts/gpu_section.py --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --out gpu-run
    python scripts/gpu_section.py --from-shape Qwen/Qwen2.5-0.5B --tokenizer FOLDER --device cuda --out gpu-run

The second form is for a machine that cannot reach the hub: it builds a model of the published
Qwen2.5-0.5B shape (``rlbook.scaling.HUB_SHAPES``, 494 M parameters) with *random* weights, seeded, and
gives it the tokenizer and chat template in FOLDER (e.g. SmolLM2-135M-Instruct's, from
``load_model("smollm2-135m-instruct")``'s cache). Such a model earns no reward, so its run measures the
code path and the time and GPU memory a 0.5 B model takes, not learning; the lesson's full-size claim that
pass@1 rises then fails, and is recorded as failed.

Cells run in order in one namespace, from the first code cell to the end of section 2 (the markdown cell
that opens section 3), then any later cell named by ``--extra-cell ID``. A cell that raises is recorded with its error and the run goes on, so one broken cell
shows every later one's fate too. Written to OUT: ``cells.json`` (per cell: index, first line, seconds, peak
GPU memory, error) and ``cells.md`` (the same as a table), the environment in ``environment.json``.
Jupyter's ``%`` lines are dropped; ``display`` prints.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "21_scaling_up.ipynb"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "generation_config.json")


def section_two_cells(notebook: Path, extra_ids=()) -> list[tuple[int, str]]:
    """(cell index, source) of every code cell before the markdown cell that opens section 3, then the code
    cells whose ids are in ``extra_ids`` (later cells that use section 2's model, e.g. the measured step memory)."""
    cells = json.loads(notebook.read_text())["cells"]
    end = next(i for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"
               and "".join(cell["source"]).lstrip().startswith("## 3"))
    missing = set(extra_ids) - {cell.get("id") for cell in cells[end:] if cell["cell_type"] == "code"}
    if missing:
        raise ValueError(f"extra_cell: no code cell after section 2 has the id(s) {sorted(missing)}")
    return [(i, "".join(cell["source"])) for i, cell in enumerate(cells)
            if cell["cell_type"] == "code" and (i < end or cell.get("id") in extra_ids)]


def retarget(source: str, model_id: str, device: str) -> str:
    """The reader's one change: the ``MODEL_ID = ...`` and ``DEVICE = ...`` lines of the model cell."""
    source = re.sub(r'^MODEL_ID = .*$', f"MODEL_ID = {model_id!r}", source, flags=re.M)
    source = re.sub(r'^DEVICE = .*$', f"DEVICE = {device!r}", source, flags=re.M)
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))


def build_from_shape(shape_name: str, tokenizer_folder: Path, out: Path, seed: int = 0) -> Path:
    """A causal LM of ``HUB_SHAPES[shape_name]``'s shape with random weights (seeded), saved with the
    tokenizer files of ``tokenizer_folder``; its special-token ids are the tokenizer's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlbook.scaling import HUB_SHAPES, _config_from_shape

    if shape_name not in HUB_SHAPES:
        raise ValueError(f"from_shape must be one of {sorted(HUB_SHAPES)}, got {shape_name!r}")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    config = _config_from_shape(HUB_SHAPES[shape_name])
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).exists():
            shutil.copy(tokenizer_folder / name, out / name)
    return out


def run_cells(cells, model_id: str, device: str, log) -> list[dict]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    cuda = device.startswith("cuda") and torch.cuda.is_available()
    namespace = {"__name__": "__main__", "display": lambda *objects: print(*objects)}
    plt.show = lambda *args, **kwargs: plt.close("all")
    rows = []
    for index, source in cells:
        code = retarget(source, model_id, device)
        first = next((line for line in code.splitlines() if line.strip()), "")[:70]
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        print(f"\n=== cell {index}: {first}", flush=True)
        start, error = time.perf_counter(), None
        try:
            exec(compile(code, f"<lesson 21 cell {index}>", "exec"), namespace)
        except Exception as caught:  # noqa: BLE001 - recorded, and the next cell runs (Ctrl-C still stops the script)
            error = f"{type(caught).__name__}: {str(caught).strip().splitlines()[0][:300] if str(caught).strip() else ''}"
            traceback.print_exc()
        if cuda:
            torch.cuda.synchronize()
        row = {"cell": index, "first line": first, "seconds": round(time.perf_counter() - start, 2),
               "peak GPU GiB": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
               "error": error}
        rows.append(row)
        print(json.dumps(row), file=log, flush=True)
    return rows


def environment(device: str) -> dict:
    import torch
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "RLBOOK_SIZE": os.environ.get("RLBOOK_SIZE", "full"), "device": device}
    for name in ("peft", "trl", "accelerate", "datasets"):
        with contextlib.suppress(ImportError):
            info[name] = __import__(name).__version__
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="hub id or folder (what MODEL_ID becomes)")
    parser.add_argument("--from-shape", help="build a random-weight model of this HUB_SHAPES name instead")
    parser.add_argument("--tokenizer", type=Path, help="folder with the tokenizer files, with --from-shape")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path("gpu-run"))
    parser.add_argument("--extra-cell", action="append", default=[],
                        help="id of a later code cell to run too (e.g. the step-memory measurement)")
    args = parser.parse_args(argv)
    if (args.model is None) == (args.from_shape is None):
        parser.error("give exactly one of --model and --from-shape")
    if args.from_shape and (args.tokenizer is None or not args.tokenizer.is_dir()):
        parser.error(f"--from-shape needs --tokenizer FOLDER, got {args.tokenizer}")
    args.out.mkdir(parents=True, exist_ok=True)
    model_id = args.model
    if args.from_shape:
        start = time.perf_counter()
        model_id = str(build_from_shape(args.from_shape, args.tokenizer, args.out / "model"))
        print(f"built {args.from_shape}'s shape with random weights in {time.perf_counter() - start:.0f} s: {model_id}")
    info = environment(args.device) | {"model": args.from_shape and f"{args.from_shape} shape, random weights" or model_id}
    (args.out / "environment.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info))
    with open(args.out / "cells.jsonl", "w") as log:
        rows = run_cells(section_two_cells(NOTEBOOK, args.extra_cell), model_id, args.device, log)
    (args.out / "cells.json").write_text(json.dumps(rows, indent=1))
    table = ["| cell | first line | seconds | peak GPU GiB | error |", "|---|---|---|---|---|"]
    table += [f"| {r['cell']} | `{r['first line']}` | {r['seconds']} | {r['peak GPU GiB']} | {r['error'] or ''} |"
              for r in rows]
    (args.out / "cells.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    if args.from_shape:
        shutil.rmtree(args.out / "model", ignore_errors=True)  # 2 GB of random weights: not worth keeping
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
