"""Lessons 06 and 07's figures and toys: the closed-form optimum, the losses drawn from the library,
and the margin dynamics of DPO and IPO on one pair."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rlbook import losses  # noqa: E402
from rlbook.trainers.history import History  # noqa: E402
from rlbook.viz import preference as viz  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


REF = torch.tensor([0.35, 0.25, 0.2, 0.12, 0.08], dtype=torch.float64)
REWARDS = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5], dtype=torch.float64)


def objective(policy, beta):
    """E_π[r] − β KL(π ‖ π_ref)."""
    return float((policy * REWARDS).sum() - beta * (policy * (policy / REF).log()).sum())


@pytest.mark.parametrize("beta", [0.05, 0.5, 1.0, 20.0])
def test_the_optimum_is_normalised_and_beats_every_other_policy(beta):
    optimum = viz.kl_regularised_optimum(REF, REWARDS, beta)
    assert torch.isclose(optimum.sum(), torch.tensor(1.0, dtype=torch.float64))
    # Its value is β log Z, and random policies do no better.
    log_z = torch.logsumexp(REF.log() + REWARDS / beta, 0)
    assert objective(optimum, beta) == pytest.approx(beta * float(log_z), rel=1e-9, abs=1e-9)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        other = torch.softmax(torch.randn(5, dtype=torch.float64, generator=generator) * 2, 0)
        assert objective(other, beta) <= objective(optimum, beta) + 1e-12
    # Inverting it recovers the reward up to the constant β log Z.
    recovered = beta * (optimum / REF).log()
    torch.testing.assert_close(recovered - REWARDS, torch.full_like(REWARDS, -beta * float(log_z)))


def test_the_optimum_limits_and_bad_input():
    assert torch.allclose(viz.kl_regularised_optimum(REF, REWARDS, 1e4), REF, atol=1e-3)  # β → ∞: π_ref
    assert viz.kl_regularised_optimum(REF, REWARDS, 1e-3).argmax() == REWARDS.argmax()  # β → 0: the best response
    assert viz.kl_regularised_optimum(REF, REWARDS, 1e-3)[REWARDS.argmax()] > 0.999
    with pytest.raises(ValueError, match="ref_probs"):
        viz.kl_regularised_optimum([0.5, 0.6], [0.0, 1.0], 1.0)
    with pytest.raises(ValueError, match="rewards"):
        viz.kl_regularised_optimum([0.5, 0.5], [0.0, 1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="beta"):
        viz.kl_regularised_optimum([0.5, 0.5], [0.0, 1.0], 0.0)


def test_optimum_figure_shows_both_distributions():
    fig = viz.plot_kl_regularised_optimum(0.5)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 10
    np.testing.assert_allclose(heights[:5], REF.numpy())
    np.testing.assert_allclose(heights[5:], viz.kl_regularised_optimum(REF, REWARDS, 0.5).numpy())
    assert "KL" in ax.get_title()


def test_dpo_loss_and_weight_curves_come_from_the_library():
    h = torch.linspace(-30, 30, 61, dtype=torch.float64)
    loss, weight = viz._dpo_loss_and_weight(h, 0.1)
    np.testing.assert_allclose(loss, losses.dpo_loss(h, 0 * h, 0 * h, 0 * h, 0.1).numpy())
    np.testing.assert_allclose(weight, (0.1 * torch.sigmoid(-0.1 * h)).numpy(), rtol=1e-10)
    assert loss[30] == pytest.approx(math.log(2))  # h = 0
    fig = viz.plot_dpo_loss_and_weight(0.2)
    assert len(fig.axes) == 2
    bold = [line for line in fig.axes[0].lines if line.get_linewidth() > 2]
    assert len(bold) == 1 and bold[0].get_label() == "β = 0.2"
    with pytest.raises(ValueError, match="beta"):
        viz.plot_dpo_loss_and_weight(-1.0)


def fake_history(steps=12, eval_every=4):
    rows = []
    for step in range(steps):
        row = {"step": step, "loss": math.log(2) - 0.02 * step, "rewards/accuracies": 0.5 + 0.03 * step,
               "rewards/margins": 0.1 * step, "logps/chosen": -40.0 - 0.1 * step, "logps/rejected": -40.0 - step}
        if step % eval_every == 0 or step == steps - 1:
            row.update({"eval/rewards/accuracies": 0.5 + 0.02 * step, "eval/rewards/margins": 0.05 * step,
                        "eval/logps/chosen": -41.0, "eval/logps/rejected": -41.0 - step})
        rows.append(row)
    return History(rows)


def test_history_figure_has_four_panels_with_held_out_points():
    fig = viz.plot_preference_history(fake_history())
    assert len(fig.axes) == 4
    accuracy_lines = {line.get_label(): line for line in fig.axes[1].lines}
    assert len(accuracy_lines["held-out"].get_xdata()) == 4  # steps 0, 4, 8 and the last
    labels = [line.get_label() for line in fig.axes[3].lines]
    assert any("held-out" in label for label in labels)
    viz.plot_preference_history(fake_history().to_pandas())  # a DataFrame works too
    with pytest.raises(ValueError, match="missing"):
        viz.plot_preference_history(History([{"step": 0, "loss": 1.0}]))


def test_pair_losses_vs_margin_match_each_library_loss():
    h = torch.linspace(-5, 5, 11, dtype=torch.float64)
    curves = viz.pair_losses_vs_margin(h, beta=0.2, tau=0.25, gamma=0.5, simpo_beta=2.0)
    assert set(curves) == {"dpo", "ipo", "kto", "simpo", "orpo"}
    np.testing.assert_allclose(curves["dpo"], -torch.nn.functional.logsigmoid(0.2 * h).numpy())
    np.testing.assert_allclose(curves["ipo"], ((h - 2.0) ** 2).numpy())
    np.testing.assert_allclose(curves["simpo"], -torch.nn.functional.logsigmoid(2.0 * h - 0.5).numpy())
    np.testing.assert_allclose(curves["kto"], (2 * (1 - torch.sigmoid(0.1 * h))).numpy())
    assert curves["dpo"][5] == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="margins"):
        viz.pair_losses_vs_margin(torch.zeros(2, 2))


def test_losses_vs_margin_figure():
    fig = viz.plot_losses_vs_margin(0.1, 0.2, 1.0)
    loss_ax, pull_ax = fig.axes
    assert len(loss_ax.get_lines()) >= 5
    ipo = [line for line in pull_ax.get_lines() if line.get_label().startswith("IPO")][0]
    x, pull = ipo.get_xdata(), ipo.get_ydata()
    assert x[np.argmin(np.abs(pull))] == pytest.approx(1 / (2 * 0.2), abs=0.1)  # IPO's pull vanishes at 1/(2τ)
    dpo = [line for line in pull_ax.get_lines() if line.get_label().startswith("DPO")][0]
    assert (dpo.get_ydata() > 0).all()  # DPO's pull never does


def test_kto_value_figure_is_the_library_loss_and_its_pull():
    fig = viz.plot_kto_value(0.5, 2.0, undesirable_weight=1.5)
    loss_ax, pull_ax = fig.axes
    lines = {line.get_label().split(" ")[0]: line for line in loss_ax.get_lines() if line.get_label()[0] != "_"}
    r = torch.as_tensor(lines["desirable"].get_xdata())
    z0 = torch.tensor(2.0, dtype=torch.float64)
    for name, flag, weight in (("desirable", 1.0, 1.0), ("undesirable", 0.0, 1.5)):
        want = losses.kto_loss(r, torch.zeros_like(r), torch.full_like(r, flag), z0, 0.5,
                               undesirable_weight=1.5).numpy()
        np.testing.assert_allclose(lines[name].get_ydata(), want)
        assert want.max() <= weight + 1e-12  # the loss is bounded by λ
    pulls = {line.get_label().split(":")[0]: line for line in pull_ax.get_lines() if ":" in line.get_label()}
    x = pulls["desirable"].get_xdata()
    for name, weight in (("desirable", 1.0), ("undesirable", 1.5)):
        pull = np.abs(pulls[name].get_ydata())
        assert x[np.argmax(pull)] == pytest.approx(2.0, abs=0.06)  # largest at the reference point…
        assert pull.max() == pytest.approx(weight * 0.5 / 4, rel=1e-3)  # …where it is λβ/4
        assert pull[0] < 0.01 * pull.max() and pull[-1] < 0.01 * pull.max()  # and it fades on both sides
    assert (pulls["desirable"].get_ydata() > 0).all() and (pulls["undesirable"].get_ydata() < 0).all()
    with pytest.raises(ValueError, match="beta"):
        viz.plot_kto_value(0.0)


def test_toy_margin_dynamics_dpo_grows_and_ipo_settles():
    dpo = viz.toy_margin_dynamics("dpo", steps=800, beta=0.5)
    ipo = viz.toy_margin_dynamics("ipo", steps=800, tau=0.25)
    assert dpo[0] == 0 and ipo[0] == 0  # both start at π = π_ref
    assert np.all(np.diff(dpo) > 0)  # DPO's margin only grows…
    assert dpo[-1] > 3 * (1 / (2 * 0.25))  # …far past IPO's target
    assert ipo[-1] == pytest.approx(1 / (2 * 0.25), rel=1e-3)  # IPO's settles on 1/(2τ)
    with pytest.raises(ValueError, match="loss"):
        viz.toy_margin_dynamics("kto")


def test_margin_trajectories_figure():
    fig = viz.plot_margin_trajectories({"dpo": [0, 1, 2], "ipo": [0, 1, 1.5]}, target=2.0)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels[:2] == ["dpo", "ipo"] and any("1/(2τ)" in label for label in labels)
    with pytest.raises(ValueError, match="margins"):
        viz.plot_margin_trajectories({})


def test_pair_sequence_logps_score_pairs_as_the_trainer_does():
    from datasets import Dataset

    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.trainers import PreferenceTrainer

    tokenizer = build_char_tokenizer()
    pairs = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"Review {film}."}] for film in ("Dune", "Up", "Jaws")],
        "chosen": ["the plot was great.", "the cast was fun, the music was superb.", "the ending was moving."],
        "rejected": ["the plot was dull.", "the cast was weak.", "the music was bland, the pace was slow."],
    })
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    chosen, rejected = viz.pair_sequence_logps(model, tokenizer, pairs, batch_size=2)
    assert chosen.shape == rejected.shape == (3,)
    assert (chosen < 0).all() and (rejected < 0).all()
    means = PreferenceTrainer(model, tokenizer, pairs, steps=1, progress=False).evaluate(pairs)
    assert float(chosen.mean()) == pytest.approx(means["logps/chosen"], abs=1e-4)
    assert float(rejected.mean()) == pytest.approx(means["logps/rejected"], abs=1e-4)


def test_clause_credit_splits_the_implicit_reward_and_the_gold_reward_exactly():
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.tasks.reviews import gold_reward

    tokenizer = build_char_tokenizer()
    reference = build_tiny_model(tokenizer, shape="test", seed=0)
    model = build_tiny_model(tokenizer, shape="test", seed=1)
    texts = ["the plot was great, the plot was dull.", "not a review", " the cast was fun, the music was odd, "
             "the sets was weak, the pace was slow.", "the ending was moving."]
    prompts = [[{"role": "user", "content": "Review Up."}]] * len(texts)
    credit = viz.clause_credit(model, reference, tokenizer, prompts, texts, beta=0.5, batch_size=2)
    assert sorted(set(credit["text"])) == [0, 2, 3]  # the unparsable text is skipped
    # Each text's clause credits sum to its implicit reward β (log π − log π_ref), and its gold terms to its gold.
    pairs = {"prompt": prompts[:2], "chosen": [texts[0], texts[2]], "rejected": [texts[3], texts[3]]}
    chosen, rejected = viz.pair_sequence_logps(model, tokenizer, pairs)
    ref_chosen, ref_rejected = viz.pair_sequence_logps(reference, tokenizer, pairs)
    implicit = {0: chosen[0] - ref_chosen[0], 2: chosen[1] - ref_chosen[1], 3: rejected[0] - ref_rejected[0]}
    for i, frame in credit.groupby("text"):
        assert frame["credit"].sum() == pytest.approx(0.5 * float(implicit[i]), abs=1e-4)
        assert frame["gold"].sum() == pytest.approx(gold_reward(texts[i]))
    second = credit[credit["text"] == 0].iloc[1]
    assert bool(second["repeat"]) and second["gold"] == -1 - 1.5
    fourth = credit[credit["text"] == 2].iloc[3]
    assert bool(fourth["past_limit"]) and not fourth["repeat"] and fourth["gold"] == -1 - 1.0
    table = viz.clause_credit_table(credit)
    assert list(table.index) == ["positive", "neutral", "negative"]
    assert table.loc["negative", ("clauses", "repeat")] == 1
    assert table.loc["negative", ("gold", "past the limit")] == -2.0
    fig = viz.plot_clause_credit(credit)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="beta"):
        viz.clause_credit(model, reference, tokenizer, prompts, texts, beta=0)
    with pytest.raises(ValueError, match="texts"):
        viz.clause_credit(model, reference, tokenizer, prompts, texts[:2], beta=0.5)


def test_margin_histograms_figure():
    generator = np.random.default_rng(0)
    fig = viz.plot_margin_histograms({"DPO": generator.normal(5, 3, 200), "IPO": generator.normal(1, 1, 200)},
                                     target=2.0)
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert any(label.startswith("DPO: median") for label in labels) and any("1/(2τ)" in label for label in labels)
    with pytest.raises(ValueError, match="margins"):
        viz.plot_margin_histograms({})
