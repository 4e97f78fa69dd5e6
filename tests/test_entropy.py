"""rlbook.entropy: the first-order entropy change of a softmax policy, and Clip-Cov / KL-Cov's token choice."""

import math

import numpy as np
import pytest
import torch

from rlbook.entropy import (
    clip_cov_band,
    clip_cov_mask, entropy_change, fit_entropy_frontier, frontier_prediction_se, kl_cov_mask, policy_gradient_logit_step,
    predicted_entropy_change, softmax_entropy, token_covariance,
)

LOGITS = torch.tensor([2.0, 0.5, -1.0, 0.0, 1.2], dtype=torch.float64)
ADVANTAGES = torch.tensor([1.0, -0.5, 2.0, -1.0, 0.3], dtype=torch.float64)


def test_the_entropy_gradient_is_minus_p_times_log_p_plus_h():
    z = LOGITS.clone().requires_grad_(True)
    log_p = torch.log_softmax(z, 0)
    (-(log_p.exp() * log_p).sum()).backward()
    p, h = log_p.exp().detach(), softmax_entropy(LOGITS)
    torch.testing.assert_close(z.grad, -p * (log_p.detach() + h))


@pytest.mark.parametrize("natural", [False, True])
def test_the_covariance_predicts_the_entropy_change_to_first_order(natural):
    errors = []
    for lr in (1e-1, 1e-2, 1e-3):
        delta = policy_gradient_logit_step(LOGITS, ADVANTAGES, lr, natural=natural)
        errors.append(abs(entropy_change(LOGITS, delta) - predicted_entropy_change(LOGITS, delta)))
    # the error of a first-order expansion shrinks like lr²: 100x per 10x smaller step
    assert errors[1] < errors[0] / 50 and errors[2] < errors[1] / 50


def test_the_vanilla_and_natural_steps_give_the_papers_covariances():
    p = torch.softmax(LOGITS, 0).numpy()
    log_p, a = np.log(p), ADVANTAGES.numpy() - (p * ADVANTAGES.numpy()).sum()

    def cov(x, y):
        return float((p * (x - (p * x).sum()) * (y - (p * y).sum())).sum())

    lr = 0.01
    vanilla = policy_gradient_logit_step(LOGITS, ADVANTAGES, lr)
    natural = policy_gradient_logit_step(LOGITS, ADVANTAGES, lr, natural=True)
    assert predicted_entropy_change(LOGITS, vanilla) == pytest.approx(-lr * cov(log_p, p * a))
    assert predicted_entropy_change(LOGITS, natural) == pytest.approx(-lr * cov(log_p, a))


def test_rewarding_the_likely_action_lowers_entropy_and_rewarding_a_rare_one_raises_it():
    likely, rare = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    likely[0], rare[2] = 1.0, 1.0  # action 0 has the largest logit, action 2 the smallest
    assert entropy_change(LOGITS, policy_gradient_logit_step(LOGITS, likely, 0.5)) < 0
    assert entropy_change(LOGITS, policy_gradient_logit_step(LOGITS, rare, 0.5)) > 0


def test_token_covariance_averages_to_the_batch_covariance_over_masked_tokens():
    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 6, generator=generator) * 3
    advantages = torch.tensor([1.0, -1.0, 0.5, 0.0])
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    cov = token_covariance(logp, advantages, mask)
    x = logp[mask > 0].numpy()
    y = advantages[:, None].expand(4, 6)[mask > 0].numpy()
    assert float(cov.sum() / mask.sum()) == pytest.approx(float(np.cov(x, y, bias=True)[0, 1]), rel=1e-5)
    assert (cov[mask == 0] == 0).all()


def test_clip_cov_drops_a_seeded_share_of_in_band_tokens_only():
    cov = torch.tensor([[0.5, 2.0, 3.0, 6.0], [1.5, 4.0, -2.0, 0.0]])
    mask = torch.ones(2, 4)
    mask[1, 3] = 0
    chosen = clip_cov_mask(cov, mask, fraction=0.5, low=1.0, high=5.0, generator=torch.Generator().manual_seed(0))
    assert int(chosen.sum()) == math.floor(0.5 * 7)  # the authors' int(r · N)
    assert ((cov[chosen] > 1.0) & (cov[chosen] < 5.0)).all()
    again = clip_cov_mask(cov, mask, fraction=0.5, low=1.0, high=5.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(chosen, again)
    assert not clip_cov_mask(cov, mask, fraction=0.0).any()


def test_clip_cov_skips_tokens_the_ppo_clip_already_stopped_and_the_band_edges():
    cov = torch.tensor([[2.0, 3.0, 1.0, 5.0]])
    mask = torch.ones(1, 4)
    stopped = torch.tensor([[True, False, False, False]])
    for seed in range(20):  # without the rule, the stopped token is drawn on about half of the seeds
        chosen = clip_cov_mask(cov, mask, fraction=0.25, generator=torch.Generator().manual_seed(seed),
                               already_clipped=stopped)
        assert chosen.tolist() == [[False, True, False, False]]
    everything = clip_cov_mask(cov, mask, fraction=1.0)
    assert everything.tolist() == [[True, True, False, False]]  # 1.0 and 5.0 lie outside the open band


def test_kl_cov_picks_the_top_tokens_by_covariance_among_masked_ones():
    cov = torch.tensor([[0.5, 9.0, 3.0], [8.0, 4.0, -2.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # the 9.0 is padding
    chosen = kl_cov_mask(cov, mask, fraction=0.4)
    assert chosen.tolist() == [[False, False, False], [True, True, False]]


def test_the_frontier_fit_recovers_known_coefficients():
    h = torch.linspace(0.05, 0.6, 12, dtype=torch.float64)
    fit = fit_entropy_frontier(h, -0.7 * h.exp() + 1.5)
    assert fit["a"] == pytest.approx(0.7) and fit["b"] == pytest.approx(1.5)
    assert fit["ceiling"] == pytest.approx(0.8) and fit["r2"] == pytest.approx(1.0)


def test_frontier_prediction_se_is_the_ols_prediction_interval_and_grows_outside_the_fitted_range():
    import pandas as pd
    h = pd.Series([0.08, 0.12, 0.20, 0.25])  # a pandas column: read-only array, no warning
    r = pd.Series([0.40, 0.50, 0.45, 0.62])
    x = np.stack([-np.exp(h), np.ones(4)], 1)
    beta, rss = np.linalg.lstsq(x, r, rcond=None)[:2]
    s2 = float(rss[0]) / 2
    x0 = np.array([-np.exp(0.05), 1.0])
    expected = np.sqrt(s2 * (1 + x0 @ np.linalg.inv(x.T @ x) @ x0))
    se = frontier_prediction_se(h, r, [0.05, 0.16])
    assert float(se[0]) == pytest.approx(expected, rel=1e-9)
    assert float(se[0]) > float(se[1])  # outside the fitted range the curve is less certain
    exact = frontier_prediction_se(h, -0.7 * np.exp(h) + 1.5, [0.05])
    assert float(exact[0]) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("call, name", [
    (lambda: softmax_entropy(torch.zeros(1)), "logits"),
    (lambda: entropy_change(LOGITS, torch.zeros(3)), "delta"),
    (lambda: policy_gradient_logit_step(LOGITS, ADVANTAGES, -1.0), "lr"),
    (lambda: policy_gradient_logit_step(LOGITS, ADVANTAGES, math.nan), "lr"),
    (lambda: token_covariance(torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3)), "advantages"),
    (lambda: token_covariance(torch.zeros(2, 3), torch.zeros(2), torch.zeros(2, 3)), "mask"),
    (lambda: clip_cov_mask(torch.zeros(2, 3), torch.ones(2, 3), fraction=2.0), "fraction"),
    (lambda: clip_cov_mask(torch.zeros(2, 3), torch.ones(2, 3), low=3.0, high=1.0), "low"),
    (lambda: kl_cov_mask(torch.zeros(2, 3), torch.ones(2, 2)), "mask"),
    (lambda: fit_entropy_frontier([0.1, 0.2], [1.0, 2.0]), "points"),
])
def test_bad_input_is_a_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# --- Clip-Cov and KL-Cov inside policy_loss, and in the online trainer --------------------------

def _loss_inputs():
    generator = torch.Generator().manual_seed(3)
    old = -torch.rand(4, 5, generator=generator, dtype=torch.float64) * 3
    logp = (old + 0.1 * torch.randn(4, 5, generator=generator, dtype=torch.float64)).requires_grad_(True)
    mask = torch.ones(4, 5, dtype=torch.float64)
    mask[2, 3:] = 0
    return logp, old, torch.tensor([1.5, -0.5, 2.0, -1.0], dtype=torch.float64), mask


def _gradient(**kwargs):
    from rlbook.losses import policy_loss

    logp, old, advantages, mask = _loss_inputs()
    loss, metrics = policy_loss(logp, old, advantages, mask, variant="grpo", **kwargs)
    loss.backward()
    return logp, old, advantages, mask, loss, metrics


def test_clip_cov_zeroes_exactly_the_chosen_tokens_gradient():
    from rlbook.losses import policy_loss

    plain_logp, old, advantages, mask, plain_loss, _ = _gradient()
    torch.manual_seed(0)
    logp, *_, loss, metrics = _gradient(cov_control="clip_cov", cov_fraction=0.2, cov_bounds=(0.0, 100.0))
    torch.manual_seed(0)
    ratio = (logp - old).exp()
    stopped = ((ratio > 1.2) & (advantages[:, None] > 0)) | ((ratio < 0.8) & (advantages[:, None] < 0))
    chosen = clip_cov_mask(token_covariance(logp, advantages, mask), mask, fraction=0.2, low=0.0, high=100.0,
                           already_clipped=stopped)
    assert chosen.any()
    assert (logp.grad[chosen] == 0).all() and (plain_logp.grad[chosen] != 0).all()
    torch.testing.assert_close(logp.grad[~chosen], plain_logp.grad[~chosen])
    assert loss.item() == pytest.approx(plain_loss.item())  # the value is kept, only the gradient goes
    assert metrics["cov_frac"] == pytest.approx(int(chosen.sum()) / float(mask.sum()))
    band = clip_cov_band(token_covariance(logp, advantages, mask), mask, low=0.0, high=100.0, already_clipped=stopped)
    assert metrics["cov_band_frac"] == pytest.approx(int(band.sum()) / float(mask.sum()))
    assert (chosen <= band).all() and metrics["cov_band_frac"] >= metrics["cov_frac"]  # drawn from the band
    assert metrics["token_cov"] == pytest.approx(float(token_covariance(logp, advantages, mask).sum() / mask.sum()))
    with pytest.raises(ValueError, match="cov_control"):
        policy_loss(logp, old, advantages, mask, cov_control="cov_clip")
    with pytest.raises(ValueError, match="cov_fraction"):
        policy_loss(logp, old, advantages, mask, cov_fraction=0.1)


def test_clip_cov_in_policy_loss_spends_its_drop_on_a_live_gradient():
    from rlbook.losses import policy_loss

    old = torch.tensor([[-0.6, -0.2], [-3.0, -3.0]], dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    for seed in range(12):
        logp = torch.tensor([[-0.1, -0.2], [-3.0, -3.0]], dtype=torch.float64, requires_grad=True)
        # token (0, 0): ratio e^0.5 > 1.2 with A > 0, so the PPO clip has already zeroed its gradient;
        # all four tokens' covariances lie in (1, 5), and ⌊0.25 · 4⌋ = 1 token is dropped
        loss, _ = policy_loss(logp, old, advantages, mask, variant="grpo", cov_control="clip_cov", cov_fraction=0.25,
                              cov_generator=torch.Generator().manual_seed(seed))
        loss.backward()
        assert logp.grad[0, 0] == 0
        assert int((logp.grad == 0).sum()) == 2, f"seed {seed}: the drop fell on the clipped token"


def test_kl_cov_adds_the_absolute_log_ratio_on_the_top_covariance_tokens():
    plain_logp, old, advantages, mask, plain_loss, _ = _gradient()
    logp, *_, loss, metrics = _gradient(cov_control="kl_cov", cov_fraction=0.1, kl_cov_coef=2.0)
    chosen = kl_cov_mask(token_covariance(logp, advantages, mask), mask, fraction=0.1)
    assert int(chosen.sum()) == max(1, int(0.1 * float(mask.sum())))  # floor, as the authors' code
    penalty = 2.0 * ((logp - old).abs() * chosen).detach()
    # grpo averages each response's tokens, then the responses
    expected = plain_loss.item() + float(((penalty * mask).sum(1) / mask.sum(1)).mean())
    assert loss.item() == pytest.approx(expected)
    torch.testing.assert_close(logp.grad[~chosen], plain_logp.grad[~chosen])
    assert not torch.allclose(logp.grad[chosen], plain_logp.grad[chosen])


@pytest.mark.parametrize("control", ["clip_cov", "kl_cov"])
def test_the_online_trainer_runs_each_control_and_logs_it(control):
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.tasks import get_task
    from rlbook.trainers import OnlineTrainer, preset

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test")
    config = preset("grpo", group_size=3, prompts_per_step=2, max_new_tokens=8, lr=1e-2, cov_control=control,
                    cov_bounds=(-100.0, 100.0))  # the paper's band (1, 5) may hold no token of so small a batch
    trainer = OnlineTrainer(model, tokenizer, lambda text, example: float(len(text) % 2), config,
                            train_dataset=get_task("arithmetic", digits=1).dataset(8, seed=0))
    history = trainer.train(2, progress=False).to_pandas()
    assert "cov_frac" in history and (history["cov_frac"].dropna() > 0).all()


def test_the_config_refuses_a_bad_control():
    from rlbook.trainers import OnlineConfig

    with pytest.raises(ValueError, match="cov_control"):
        OnlineConfig(cov_control="entropy")
    with pytest.raises(ValueError, match="cov_fraction"):
        OnlineConfig(cov_fraction=0.1)
    with pytest.raises(ValueError, match="cov_fraction"):
        OnlineConfig(cov_control="kl_cov", cov_fraction=0.0)
    with pytest.raises(ValueError, match="cov_bounds"):
        OnlineConfig(cov_control="clip_cov", cov_bounds=(5.0, 1.0))
    with pytest.raises(ValueError, match="kl_cov_coef"):
        OnlineConfig(cov_control="kl_cov", kl_cov_coef=-1.0)


def test_first_token_probabilities_and_sampled_entropies():
    from rlbook.probes import first_token_probabilities, sampled_token_entropies
    from rlbook.models import load_model

    model, tokenizer = load_model("arith-base")
    prompts = [[{"role": "user", "content": "What is 1+2?"}], "<|im_start|>user\nWhat is 3+4?<|im_end|>\n"]
    probs = first_token_probabilities(model, tokenizer, prompts)
    assert probs.shape == (2, model.config.vocab_size)
    assert torch.allclose(probs.sum(1), torch.ones(2, dtype=torch.float64))
    assert torch.equal(probs, first_token_probabilities(model, tokenizer, prompts))
    with pytest.raises(ValueError, match="prompts"):
        first_token_probabilities(model, tokenizer, [])
    with pytest.raises(ValueError, match="temperature"):
        first_token_probabilities(model, tokenizer, prompts, temperature=0.0)
    entropies = sampled_token_entropies(model, tokenizer, prompts[:1], num_samples=2, max_new_tokens=8, seed=1)
    assert entropies.dim() == 1 and len(entropies) > 0 and bool((entropies >= 0).all())
    assert torch.equal(entropies, sampled_token_entropies(model, tokenizer, prompts[:1], num_samples=2,
                                                          max_new_tokens=8, seed=1))
    flat, index = sampled_token_entropies(model, tokenizer, prompts, num_samples=2, max_new_tokens=8, seed=1,
                                          return_prompt_index=True)
    assert flat.shape == index.shape and set(index.tolist()) <= {0, 1} and bool((index[1:] >= index[:-1]).all())
    assert torch.equal(flat, sampled_token_entropies(model, tokenizer, prompts, num_samples=2, max_new_tokens=8, seed=1))


def test_answer_spread_counts_distinct_final_answers_per_prompt():
    from rlbook.probes import answer_spread

    texts = ["<answer>12</answer>", "<think>1+1</think><answer>12</answer>", "<answer> 12 </answer>", "no answer",
             "<answer>1</answer>", "<answer>2</answer>", "<answer>3</answer>", "<answer>4</answer>"]
    first, second = answer_spread(texts, 4)
    assert first == {"distinct": 2, "modal_share": 0.75, "answered": 3}
    assert second == {"distinct": 4, "modal_share": 0.25, "answered": 4}
    with pytest.raises(ValueError, match="texts"):
        answer_spread(texts[:3], 4)
    with pytest.raises(ValueError, match="num_samples"):
        answer_spread(texts, 0)


def test_clip_cov_draws_from_the_run_seed_not_the_global_generator():
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.tasks import get_task
    from rlbook.trainers import OnlineTrainer, preset

    tokenizer = build_char_tokenizer()
    histories = []
    for global_seed in (1, 2):
        torch.manual_seed(0)
        model = build_tiny_model(tokenizer, shape="test", seed=4)
        config = preset("grpo", group_size=3, prompts_per_step=2, max_new_tokens=8, lr=1e-2, epochs=2,
                        cov_control="clip_cov", cov_fraction=0.3, cov_bounds=(-100.0, 100.0))
        trainer = OnlineTrainer(model, tokenizer, lambda text, example: float(len(text) % 2), config,
                                train_dataset=get_task("arithmetic", digits=1).dataset(8, seed=0))
        torch.manual_seed(global_seed)  # whatever the global generator holds, the run is the same
        clock = ["tokens_per_s", "step_time", "wall_time"]  # measured time differs from run to run
        histories.append(trainer.train(2, progress=False).to_pandas().drop(columns=clock))
    assert (histories[0]["cov_frac"] > 0).all()
    assert histories[0].equals(histories[1])


def _tiny_rollout():
    from rlbook.models import build_char_tokenizer, build_tiny_model
    from rlbook.rollout import sample

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test", seed=3)
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=3, max_new_tokens=6, seed=0)
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.8, 0.2, -1.0])
    return model, rollout, advantages


def test_the_measured_entropy_change_goes_to_the_first_order_law_as_the_step_shrinks():
    import copy

    from rlbook.probes import entropy_step_change

    base, rollout, advantages = _tiny_rollout()
    errors, results = [], []
    for lr in (1e-2, 1e-3, 1e-4):
        model = copy.deepcopy(base)
        result = entropy_step_change(model, torch.optim.SGD(model.parameters(), lr=lr), rollout, advantages,
                                     variant="reinforce", max_grad_norm=None)
        errors.append(abs(result["measured"] - result["first_order"]))
        results.append(result)
    small = results[-1]
    assert small["measured"] == pytest.approx(small["first_order"], rel=0.1)
    assert small["entropy_after"] - small["entropy_before"] == pytest.approx(small["measured"])
    assert errors[2] < errors[1] / 20 < errors[0] / 400  # the error of a first-order law: ∝ η²
    # the batch covariances do not depend on the step
    assert results[0]["natural_cov"] == pytest.approx(small["natural_cov"])
    assert results[0]["vanilla_cov"] == pytest.approx(small["vanilla_cov"])


def test_the_step_covariances_are_the_token_covariances_of_the_sampled_tokens():
    import copy

    from rlbook.probes import entropy_step_change
    from rlbook.rollout import rollout_logprobs

    base, rollout, advantages = _tiny_rollout()
    model = copy.deepcopy(base)
    result = entropy_step_change(model, torch.optim.SGD(model.parameters(), lr=0.1), rollout, advantages,
                                 variant="reinforce")
    with torch.no_grad():
        logp, entropy = rollout_logprobs(base, rollout, return_entropy=True)
    mask = rollout.completion_mask.float()
    logp = logp.double()

    def batch_cov(x, y):
        x, y = x[mask > 0], y[mask > 0]
        return float(((x - x.mean()) * (y - y.mean())).mean())

    per_token = advantages.double()[:, None].expand_as(logp)
    assert result["natural_cov"] == pytest.approx(batch_cov(logp, per_token), rel=1e-4)
    assert result["vanilla_cov"] == pytest.approx(batch_cov(logp, logp.exp() * per_token), rel=1e-4)
    assert result["entropy_before"] == pytest.approx(float(entropy[mask > 0].mean()), rel=1e-4)
    assert not torch.equal(next(model.parameters()), next(base.parameters()))  # the model was stepped
    with pytest.raises(ValueError, match="advantages"):
        entropy_step_change(model, torch.optim.SGD(model.parameters(), lr=0.1), rollout, advantages[:3])
    with pytest.raises(ValueError, match="temperature"):
        entropy_step_change(model, torch.optim.SGD(model.parameters(), lr=0.1), rollout, advantages, temperature=0.0)


def test_the_per_state_covariance_estimate_is_unbiased_for_the_law_at_each_state():
    from rlbook.entropy import state_covariance

    generator = torch.Generator().manual_seed(0)
    z = torch.tensor([2.0, 0.5, 0.0, -1.0], dtype=torch.float64)
    q = torch.tensor([1.0, 0.0, 2.0, -0.5], dtype=torch.float64)  # the return of each action at this state
    log_p = torch.log_softmax(z, 0)
    p = log_p.exp()
    entropy = float(-(p * log_p).sum())
    exact = float((p * (log_p + entropy) * (q - (p * q).sum())).sum())  # Cov_{a∼π}(log π(a), Q(a))
    draws = torch.multinomial(p, 200_000, replacement=True, generator=generator)
    for baseline in (0.0, 0.7):  # any baseline: E_π[log π + H] = 0 makes it drop out
        estimate = state_covariance(log_p[draws][None], torch.full((1, draws.numel()), entropy),
                                    (q[draws] - baseline)[None], torch.ones(1, draws.numel()))
        assert float(estimate.mean()) == pytest.approx(exact, abs=0.01)
    assert float(state_covariance(torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, -1.0]),
                                  torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))[0, 2]) == 0.0  # padding 0
    for bad, match in (((torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 3)), "shape"),
                       ((torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3)), "advantages"),
                       ((torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.zeros(2, 3)), "mask")):
        with pytest.raises(ValueError, match=match):
            state_covariance(*bad)


def test_the_pooled_covariance_is_the_per_state_one_plus_a_between_state_term():
    import copy

    from rlbook.probes import entropy_step_change

    base, rollout, advantages = _tiny_rollout()
    model = copy.deepcopy(base)
    result = entropy_step_change(model, torch.optim.SGD(model.parameters(), lr=1e-3), rollout, advantages,
                                 variant="reinforce")
    assert result["natural_cov"] == pytest.approx(result["state_cov"] + result["between_states"] + result["centring"],
                                                  abs=1e-9)
    assert result["between_states"] != pytest.approx(0.0, abs=1e-6)  # the two estimators differ here


def test_kl_cov_counts_its_tokens_by_floor_as_the_authors_code():
    cov = torch.arange(17, dtype=torch.float32)[None, :]
    mask = torch.ones_like(cov)
    assert int(kl_cov_mask(cov, mask, fraction=0.1).sum()) == 1  # ⌊1.7⌋, where round would give 2
    assert int(kl_cov_mask(cov, mask, fraction=0.01).sum()) == 1  # at least one
    assert kl_cov_mask(cov, mask, fraction=0.1)[0, 16]


def test_the_fork_split_is_the_chain_rule_and_two_way_forks_obey_concavity():
    from rlbook.entropy import fork_entropy_split

    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(6, 9, dtype=torch.float64) * 2, dim=1)
    probs[0] = 0.0
    probs[0, 2], probs[0, 5] = 0.3, 0.7  # nothing outside the fork
    split = fork_entropy_split(probs, [2, 5])
    full = -(probs * probs.clamp_min(1e-300).log()).sum(1)
    torch.testing.assert_close(split["entropy"], full)
    rebuilt = split["which_side"] + (1 - split["outside"]) * split["within"] + split["outside"] * split["outside_entropy"]
    torch.testing.assert_close(rebuilt, full)
    assert split["outside"][0] == 0 and split["entropy"][0] == pytest.approx(
        -(0.3 * math.log(0.3) + 0.7 * math.log(0.7)))
    share = probs[:, 2] / (probs[:, 2] + probs[:, 5])
    mean_share = float(share.mean())
    binary = -(mean_share * math.log(mean_share) + (1 - mean_share) * math.log(1 - mean_share))
    assert float(split["within"].mean()) <= binary + 1e-12 <= math.log(2) + 1e-12
    for bad, name in ((probs[0], "probabilities"), (probs * 2, "probabilities"), ([2], "fork"), ([2, 2], "fork"),
                      ([2, 99], "fork")):
        with pytest.raises(ValueError, match=name):
            fork_entropy_split(probs if name == "fork" else bad, bad if name == "fork" else [2, 5])


def test_the_per_state_vanilla_estimate_is_the_first_order_change_of_a_one_sample_step_and_unbiased():
    from rlbook.entropy import state_vanilla_covariance

    z = torch.tensor([2.0, 0.5, 0.0, -1.0], dtype=torch.float64)
    q = torch.tensor([1.0, 0.0, 2.0, -0.5], dtype=torch.float64)
    log_p = torch.log_softmax(z, 0)
    p = log_p.exp()
    entropy = float(-(p * log_p).sum())
    self_cov = float((p ** 2 * (log_p + entropy)).sum())  # Cov_π(log π, π)
    for y, advantage in ((0, 1.0), (3, -0.6), (2, 2.0)):  # one sampled token: Δz = A·(e_y − π)
        delta = advantage * (torch.nn.functional.one_hot(torch.tensor(y), 4).double() - p)
        one = state_vanilla_covariance(*(torch.tensor([[v]], dtype=torch.float64) for v in (float(log_p[y]), entropy,
                                                                                             self_cov)),
                                       torch.tensor([advantage], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64))
        assert -float(one) == pytest.approx(predicted_entropy_change(z, delta), abs=1e-12)
    # its mean over y ∼ π is Cov_π(log π(a), π(a)·(Q(a) − E_π Q)), the vanilla-PG term, whatever the baseline
    exact = float((p * (log_p + entropy) * p * (q - (p * q).sum())).sum())
    for baseline in (0.0, 0.7):
        terms = state_vanilla_covariance(log_p[None], torch.full((1, 4), entropy, dtype=torch.float64),
                                         torch.full((1, 4), self_cov, dtype=torch.float64), (q - baseline)[None],
                                         torch.ones(1, 4, dtype=torch.float64))
        assert float((p * terms[0]).sum()) == pytest.approx(exact, abs=1e-12)
    assert exact != pytest.approx(float((p * (log_p + entropy) * (q - (p * q).sum())).sum()))  # ≠ the natural term
    with pytest.raises(ValueError, match="shape"):
        state_vanilla_covariance(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 3))


def test_the_step_report_carries_the_per_state_vanilla_estimate():
    import copy

    from rlbook.probes import entropy_step_change
    from rlbook.rollout import completion_forward

    base, rollout, advantages = _tiny_rollout()
    model = copy.deepcopy(base)
    result = entropy_step_change(model, torch.optim.SGD(model.parameters(), lr=0.1), rollout, advantages,
                                 variant="reinforce")  # read before the step, from the base model's distributions
    with torch.no_grad():
        logits = completion_forward(base, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                    rollout.completion_mask)
    log_policy = torch.log_softmax(logits.double(), -1)
    p = log_policy.exp()
    h = -(p * log_policy).sum(-1)
    y = log_policy.gather(-1, rollout.completion_ids[..., None]).squeeze(-1)
    mask = rollout.completion_mask.double()
    by_hand = (advantages.double()[:, None] * (y.exp() * (y + h) - (p ** 2 * (log_policy + h[..., None])).sum(-1)) * mask)
    assert result["state_vanilla_cov"] == pytest.approx(float(by_hand.sum() / mask.sum()), rel=1e-6)


def test_the_step_law_summary_reads_a_table_of_steps():
    import pandas as pd

    from rlbook.probes import step_law_summary

    steps = pd.DataFrame({"measured": [0.01, -0.02, -0.01, -0.03], "first_order": [0.02, -0.02, 0.0, -0.02],
                          "state_cov": [-0.1, 0.2, 0.1, 0.3], "natural_cov": [0.1, -0.2, -0.1, -0.3],
                          "entropy_before": [0.40, 0.50, 0.30, 0.20], "entropy_after": [0.41, 0.48, 0.29, 0.17]})
    summary = step_law_summary(steps, ends=2)
    assert summary["r state_cov"] == pytest.approx(1.0) and summary["r natural_cov"] == pytest.approx(-1.0)
    assert "r vanilla_cov" not in summary
    assert summary["remainder ratio"] == pytest.approx(math.sqrt((1e-4 + 0 + 1e-4 + 1e-4) / (1e-4 + 4e-4 + 1e-4 + 9e-4)))
    assert summary["sharpening"] == pytest.approx(-0.05)
    assert summary["batch change"] == pytest.approx((0.29 + 0.17) / 2 - (0.40 + 0.50) / 2)  # end means, not one batch
    assert summary["sharpening share"] == pytest.approx(-0.05 / -0.22)
    assert summary["slope"] == pytest.approx(float(np.polyfit(steps["first_order"], steps["measured"], 1)[0]))
    with pytest.raises(ValueError, match="ends"):
        step_law_summary(steps, ends=3)
    with pytest.raises(ValueError, match="entropy_after"):
        step_law_summary(steps.drop(columns="entropy_after"))
