"""Tests of rlbook.trainers.live: the live plot draws in place, within its time budget, ends on the last
step, and draws nothing when off or outside a kernel; each trainer draws only when live."""

import matplotlib.pyplot as plt
import pytest

from rlbook.trainers.history import History
from rlbook.trainers import live

PNG_MAGIC = b"\x89PNG"


class FakeDisplay:
    """Stands in for IPython.display.display: records the first display and every in-place update."""

    def __init__(self):
        self.shown, self.updates = [], []

    def __call__(self, image, display_id=None):
        assert display_id is True, "the live plot must be displayed with a display_id, to update it in place"
        self.shown.append(image)
        return self

    def update(self, image):
        self.updates.append(image)

    @property
    def images(self):
        return self.shown + self.updates


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def online_row(step):
    return {"step": step, "reward": step / 10, "entropy": 2.0 - step / 100, "kl_ref": step / 1000,
            "approx_kl": 1e-4, "clip_frac": 0.1, "length_mean": 20.0}


def run(plot, history, clock, steps, seconds_per_step, draw_cost=0.0):
    """``steps`` steps of a fake run: a row, then ``update()``, each step taking ``seconds_per_step``
    and each draw ``draw_cost`` (the fake display moves the clock)."""
    plot._display.cost = draw_cost
    for step in range(1, steps + 1):
        clock.now += seconds_per_step
        history.append(online_row(step))
        plot.update()
    plot.finish()


class CostlyDisplay(FakeDisplay):
    """A display whose first show and every update take ``cost`` seconds of the fake clock."""

    cost, clock = 0.0, None

    def __call__(self, image, display_id=None):
        self.clock.now += self.cost
        return super().__call__(image, display_id)

    def update(self, image):
        self.clock.now += self.cost
        super().update(image)


def make_plot(history, clock):
    display = CostlyDisplay()
    display.clock = clock
    return live.LivePlot(history.rows, live.ONLINE_PANELS, title="grpo", display=display, clock=clock)


def test_updates_in_place_at_most_once_per_interval_and_draws_the_last_step():
    history, clock = History(), FakeClock()
    plot = make_plot(history, clock)
    run(plot, history, clock, steps=200, seconds_per_step=0.1)  # a 20 s run, draws free
    display = plot._display
    first = live.FIRST_DRAW_GUESS_S / live.MAX_DRAW_SHARE
    assert len(display.shown) == 1, "one display, then updates in place"
    assert 20 - first - 1 <= plot.draws <= 20 - first + 2, f"one draw a second after the first, got {plot.draws}"
    assert plot.draws == len(display.images)
    assert all(image.data[:4] == PNG_MAGIC for image in display.images)
    assert plot._drawn_rows == 200, "the last step is drawn"


def test_a_short_run_draws_nothing():
    history, clock = History(), FakeClock()
    plot = make_plot(history, clock)
    run(plot, history, clock, steps=40, seconds_per_step=0.1)  # 4 s: under the first draw's budget
    assert plot._display.images == []


def test_drawing_stays_within_its_share_of_the_run():
    history, clock = History(), FakeClock()
    plot = make_plot(history, clock)
    draw_cost = 0.2  # a slow draw: one every 10 s at most
    run(plot, history, clock, steps=600, seconds_per_step=0.1, draw_cost=draw_cost)
    drawing = draw_cost * plot.draws
    share = drawing / clock.now
    assert plot.draws >= 4, "a long run is still drawn during the run"
    assert share < 0.03, f"drawing took {share:.1%} of the run (the target: under 3 %)"


def test_finish_draws_only_steps_not_yet_drawn():
    history, clock = History(), FakeClock()
    plot = make_plot(history, clock)
    history.append(online_row(1))
    clock.now = 10.0
    assert plot.update()
    plot.finish()
    assert plot.draws == 1, "nothing new since the last draw: finish does not redraw"


def test_panels_the_run_does_not_log_are_left_out_and_pyplot_is_untouched():
    plt.close("all")
    history, clock = History(), FakeClock()
    plot = make_plot(history, clock)
    history.append({"step": 1, "reward": 0.5, "kl_ref": float("nan")})
    clock.now = 10.0
    plot.update()
    titles = [axes.get_title() for axes in plot._figure.axes]
    assert titles == ["reward"], titles
    assert plt.get_fignums() == [], "the live plot must not create pyplot figures"


def test_live_enabled_follows_the_argument_the_progress_bar_and_the_environment(monkeypatch):
    monkeypatch.delenv(live.ENV_VAR, raising=False)
    monkeypatch.setattr(live, "in_kernel", lambda: True)
    assert live.live_enabled(None, progress=True)
    assert not live.live_enabled(None, progress=False)
    assert live.live_enabled(True, progress=False)
    assert not live.live_enabled(False, progress=True)
    monkeypatch.setenv(live.ENV_VAR, "0")
    assert not live.live_enabled(None, progress=True)
    assert not live.live_enabled(True, progress=True)
    monkeypatch.setenv(live.ENV_VAR, "maybe")
    with pytest.raises(ValueError, match=live.ENV_VAR):
        live.live_enabled(None, progress=True)


def test_outside_a_kernel_nothing_is_drawn(monkeypatch):
    monkeypatch.delenv(live.ENV_VAR, raising=False)
    assert not live.in_kernel()  # pytest is not a Jupyter kernel
    assert not live.live_enabled(True, progress=True)


@pytest.mark.parametrize("bad", ["yes", 1, 0.5])
def test_a_bad_live_value_raises(bad):
    with pytest.raises(ValueError, match="live"):
        live.live_enabled(bad, progress=True)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="panels"):
        live.LivePlot([], {})
    with pytest.raises(ValueError, match="panels"):
        live.LivePlot([], {"loss": ("loss",)})
    with pytest.raises(ValueError, match="max_draw_share"):
        live.LivePlot([], live.SFT_PANELS, max_draw_share=0)
    with pytest.raises(ValueError, match="rows"):
        live.LivePlot(History(), live.SFT_PANELS)


def drawing_trainer(monkeypatch):
    """Make every live plot a trainer opens record into one FakeDisplay, unthrottled: a clock that
    moves 1 s a call, no interval, no budget."""
    display, init, ticks = FakeDisplay(), live.LivePlot.__init__, iter(range(10**6))

    def unthrottled(self, rows, panels, **kwargs):
        init(self, rows, panels, **{**kwargs, "display": display, "clock": lambda: float(next(ticks)),
                                    "min_interval_s": 0, "max_draw_share": 1.0})

    monkeypatch.delenv(live.ENV_VAR, raising=False)
    monkeypatch.setattr(live, "in_kernel", lambda: True)
    monkeypatch.setattr(live.LivePlot, "__init__", unthrottled)
    return display


STEPS = 3


def reward_model_run(live_setting):
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.trainers.reward_model import RewardModel, train_reward_model

    tokenizer = build_char_tokenizer()
    pairs = {"prompt": ["1+1="] * 4, "chosen": ["2"] * 4, "rejected": ["3"] * 4}
    reward_model = RewardModel.from_causal_lm(build_tiny_model(tokenizer, shape="test"), tokenizer)
    return train_reward_model(reward_model, pairs, steps=STEPS, batch_size=2, live=live_setting)


def online_run(live_setting):
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.tasks import get_task
    from rlbook.trainers import OnlineTrainer, preset

    tokenizer = build_char_tokenizer()
    config = preset("grpo", group_size=2, prompts_per_step=2, max_new_tokens=4)
    trainer = OnlineTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, lambda text, example: 1.0,
                            config, train_dataset=get_task("arithmetic", digits=1).dataset(4, seed=0))
    return trainer.train(STEPS, live=live_setting)


def preference_run(live_setting):
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.trainers import PreferenceTrainer

    tokenizer = build_char_tokenizer()
    pairs = {"prompt": ["Review Dune."] * 4, "chosen": ["great."] * 4, "rejected": ["dull."] * 4}
    trainer = PreferenceTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, pairs, steps=STEPS, batch_size=2)
    return trainer.train(live=live_setting)


RUNS = {"reward model": reward_model_run, "online": online_run, "preference": preference_run}


@pytest.mark.parametrize("live_setting, drawn", [(None, True), (True, True), (False, False)])
@pytest.mark.parametrize("trainer", sorted(RUNS))
def test_each_trainer_draws_only_when_live(monkeypatch, trainer, live_setting, drawn):
    plt.close("all")
    display = drawing_trainer(monkeypatch)
    history = RUNS[trainer](live_setting)
    assert len(history) == STEPS
    assert len(display.images) == (STEPS if drawn else 0), "unthrottled: a draw per step"
    assert len(display.shown) == int(drawn), "one display, then updates in place"
    assert plt.get_fignums() == []


@pytest.mark.parametrize("trainer", sorted(RUNS))
def test_each_trainer_refuses_a_bad_live_value(trainer):
    with pytest.raises(ValueError, match="live"):
        RUNS[trainer]("on")


@pytest.mark.parametrize("live_setting, drawn", [(None, True), (False, False)])
def test_sft_draws_its_loss_only_when_live(monkeypatch, live_setting, drawn):
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.trainers.sft import sft

    display = drawing_trainer(monkeypatch)
    tokenizer = build_char_tokenizer()
    history = sft(build_tiny_model(tokenizer, shape="test"), tokenizer, [("1+1=", "2")] * 4, steps=STEPS,
                  batch_size=2, live=live_setting)
    assert len(history) == STEPS
    assert len(display.images) == (STEPS if drawn else 0)
