"""What every test shares: figures are drawn off-screen (matplotlib's Agg backend, chosen here before
any test module imports pyplot), and the figures a test leaves open are closed after it."""

import sys

import matplotlib
import pytest

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")  # only when some test drew: importing pyplot here would cost every test
    if pyplot is not None:
        pyplot.close("all")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A freshly built tiny zoo-shaped model (shape "test") and its tokenizer, saved in a folder."""
    from rlbook.models import build_char_tokenizer, build_tiny_model

    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = build_char_tokenizer()
    build_tiny_model(tokenizer, shape="test").save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
