"""scripts/gpu_section.py: the GPU reader's one change to lesson 21 is exactly two lines of section 2."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_section", ROOT / "scripts" / "gpu_section.py")
gpu_section = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_section)


def test_section_two_ends_before_section_three_and_holds_the_model_cell():
    cells = gpu_section.section_two_cells(gpu_section.NOTEBOOK)
    sources = [source for _, source in cells]
    model_cells = [s for s in sources if s.lstrip().startswith("MODEL_ID = ")]
    assert len(model_cells) == 1, "lesson 21 must have one cell that starts with MODEL_ID = ..."
    assert any("OnlineTrainer(" in s for s in sources), "section 2 trains with rlbook's OnlineTrainer"
    assert not any("training_memory" in s for s in sources), "section 3 (memory on paper) is not part of the GPU run"


def test_retarget_changes_only_the_model_and_device_lines_and_drops_magics():
    cells = dict(gpu_section.section_two_cells(gpu_section.NOTEBOOK))
    index, source = next((i, s) for i, s in cells.items() if s.lstrip().startswith("MODEL_ID = "))
    changed = gpu_section.retarget(source, "Qwen/Qwen2.5-0.5B-Instruct", "cuda")
    before, after = source.splitlines(), changed.splitlines()
    assert len(before) == len(after)
    differing = [(b, a) for b, a in zip(before, after) if b != a]
    assert [a for _, a in differing] == ["MODEL_ID = 'Qwen/Qwen2.5-0.5B-Instruct'", "DEVICE = 'cuda'"]
    assert "%config" not in gpu_section.retarget('%config X = 1\nprint(1)', "m", "cpu")


def test_an_extra_cell_is_taken_by_id_and_a_wrong_id_is_refused():
    import json

    import pytest

    cells = json.loads(gpu_section.NOTEBOOK.read_text())["cells"]
    memory = next(c["id"] for c in cells if c["cell_type"] == "code" and "measure_step_memory(" in "".join(c["source"]))
    plain = gpu_section.section_two_cells(gpu_section.NOTEBOOK)
    more = gpu_section.section_two_cells(gpu_section.NOTEBOOK, [memory])
    assert len(more) == len(plain) + 1 and "measure_step_memory(" in more[-1][1]
    with pytest.raises(ValueError, match="extra_cell"):
        gpu_section.section_two_cells(gpu_section.NOTEBOOK, ["no-such-id"])
