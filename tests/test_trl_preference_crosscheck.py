"""rlbook's preference losses against TRL 1.16's, on identical tensors, loss and gradient.

How TRL is reached. No loss here is a free function in TRL 1.16: DPO, IPO and KTO live inside
``DPOTrainer._compute_loss`` / ``KTOTrainer._compute_loss`` (model forward included), CPO/SimPO and
ORPO in ``trl.experimental``'s ``CPOTrainer`` / ``ORPOTrainer``. So each test builds the *real*
trainer, offline, on a tiny Qwen2 model and a word-level ``PreTrainedTokenizerFast`` made in this
file, with a 2- or 4-row ``datasets.Dataset``. TRL computes its loss from its own collated batch;
rlbook's loss is computed from per-token log-probs of the same model on the same batch, summed with
``sequence_logps``. Then both the loss values and the gradients on every model parameter must agree.

Conventions mapped (TRL name → rlbook):
- DPO, ``loss_type="sigmoid"``: ``beta`` → ``dpo_loss(beta)``. TRL 1.16's "sigmoid" has no label
  smoothing, so cDPO's ``label_smoothing`` is checked through CPO's "sigmoid" below instead.
- IPO, ``DPOTrainer(loss_type="ipo")``: TRL's ``beta`` is the paper's τ, and TRL divides each
  log-ratio by its completion length → ``ipo_loss(tau=beta, chosen_lens=..., rejected_lens=...)``.
- KTO: ``beta``, ``desirable_weight``, ``undesirable_weight`` are the same; TRL's "KL" completions
  (responses cycled within the batch) → ``kto_reference_point``; TRL orders losses desirable-first
  and averages, which equals the mean of ``kto_loss``'s per-example values.
- SimPO is ``CPOTrainer(loss_type="simpo", cpo_alpha=0)``: ``simpo_gamma`` → γ, same ``beta``.
- CPO is ``CPOTrainer(loss_type="sigmoid")``: ``cpo_alpha`` → ``nll_weight``. TRL's NLL is a token
  mean pooled over the batch; it equals rlbook's per-example token means averaged only when the
  chosen responses have equal lengths, which the data here are built to have (and the test asserts).
- ORPO: ``ORPOTrainer``'s ``beta`` is the paper's λ. The odds-ratio term and the length-averaged
  chosen log-prob (rlbook's SFT term) are checked; TRL's NLL term is *not* the same quantity (a
  token mean pooled over the batch and over prompt and response tokens), so the full ORPO loss is not
  compared.
"""

import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import datasets  # noqa: E402
import pytest  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer  # noqa: E402
from trl.experimental.cpo import CPOConfig, CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # noqa: E402

from rlbook.losses import (  # noqa: E402
    cpo_loss,
    dpo_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_loss,
    sequence_logps,
    simpo_loss,
)

# TRL and transformers warn about their own deprecations (gradient_checkpointing naming); not ours.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

WORDS = ["<pad>", "<eos>", "?", "q", "a", "b", "c", "d", "e", "f", "g", "h"]

# Chosen responses have equal lengths (3 words + EOS) so TRL's pooled CPO NLL is comparable;
# rejected ones differ so that IPO's and SimPO's per-token averaging matters.
PAIRS = {
    "prompt": ["q a b", "q c"],
    "chosen": [" c d e", " f g h"],
    "rejected": [" g", " h a b g"],
}
UNPAIRED = {
    "prompt": ["q a b", "q c", "q d", "q e f"],
    "completion": [" c d e", " f", " g h", " a"],
    "label": [True, False, True, False],
}


def tiny_tokenizer() -> transformers.PreTrainedTokenizerFast:
    vocab = {word: index for index, word in enumerate(WORDS)}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="?"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="?"
    )


def tiny_qwen2(seed: int) -> transformers.Qwen2ForCausalLM:
    """A 1-layer, 16-wide Qwen2 with weights wide enough (init std 0.5) that log-probs differ visibly."""
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        initializer_range=0.5,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
    )
    return transformers.Qwen2ForCausalLM(config).float()


def trainer_args(config_class, tmp_path, **overrides):
    return config_class(
        output_dir=str(tmp_path),
        report_to=[],
        use_cpu=True,
        bf16=False,
        logging_strategy="no",
        save_strategy="no",
        **overrides,
    )


def collated(trainer, rows: int) -> dict:
    return trainer.data_collator([trainer.train_dataset[i] for i in range(rows)])


def response_logps(model, input_ids, attention_mask, response_mask, *, grad: bool = True) -> torch.Tensor:
    """Sequence log-probs Σ_t log π(token_t | tokens_<t) over the positions where response_mask is 1."""
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        token_logps = torch.log_softmax(logits.float(), -1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
        return sequence_logps(token_logps, response_mask[:, 1:])


def loss_and_grads(model, compute_loss) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = compute_loss()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def assert_same(trl_result, rlbook_result):
    (trl_loss, trl_grads), (our_loss, our_grads) = trl_result, rlbook_result
    torch.testing.assert_close(our_loss, trl_loss, rtol=1e-5, atol=1e-6)
    assert our_grads.keys() == trl_grads.keys() and our_grads
    for name in trl_grads:
        torch.testing.assert_close(our_grads[name], trl_grads[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


# ----------------------------------------------------------------------------- DPOTrainer: sigmoid and ipo


def dpo_trainer(tokenizer, tmp_path, loss_type: str, beta: float) -> DPOTrainer:
    args = trainer_args(DPOConfig, tmp_path, beta=beta, loss_type=[loss_type], max_length=None)
    dataset = datasets.Dataset.from_dict(PAIRS)
    return DPOTrainer(
        model=tiny_qwen2(0), ref_model=tiny_qwen2(1), args=args, train_dataset=dataset, processing_class=tokenizer
    )


def dpo_inputs(trainer, batch, *, grad: bool):
    """(chosen, rejected) sequence log-probs of trainer.model (grad) or trainer.ref_model (no grad)."""
    model = trainer.model if grad else trainer.ref_model
    logps = response_logps(model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"], grad=grad)
    return logps.chunk(2)  # TRL's batch is [chosen rows, rejected rows]


def test_dpo_sigmoid_matches_trl(tokenizer, tmp_path):
    beta = 0.5
    trainer = dpo_trainer(tokenizer, tmp_path, "sigmoid", beta)
    batch = collated(trainer, 2)

    def rlbook_loss():
        chosen, rejected = dpo_inputs(trainer, batch, grad=True)
        ref_chosen, ref_rejected = dpo_inputs(trainer, batch, grad=False)
        return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta).mean()

    ours = loss_and_grads(trainer.model, rlbook_loss)
    assert abs(ours[0].item() - math.log(2)) > 1e-3  # policy ≠ reference, so not the trivial ln 2
    assert_same(loss_and_grads(trainer.model, lambda: trainer.compute_loss(trainer.model, batch)), ours)


def test_ipo_matches_trl_with_tau_as_beta_and_per_token_log_ratios(tokenizer, tmp_path):
    tau = 0.25  # TRL: DPOConfig(beta=τ, loss_type=["ipo"])
    trainer = dpo_trainer(tokenizer, tmp_path, "ipo", tau)
    batch = collated(trainer, 2)
    chosen_lens, rejected_lens = batch["completion_mask"].sum(-1).chunk(2)
    assert not torch.equal(chosen_lens, rejected_lens)

    def rlbook_loss():
        chosen, rejected = dpo_inputs(trainer, batch, grad=True)
        ref_chosen, ref_rejected = dpo_inputs(trainer, batch, grad=False)
        losses = ipo_loss(
            chosen, rejected, ref_chosen, ref_rejected, tau, chosen_lens=chosen_lens, rejected_lens=rejected_lens
        )
        return losses.mean()

    trl_result = loss_and_grads(trainer.model, lambda: trainer.compute_loss(trainer.model, batch))
    assert_same(trl_result, loss_and_grads(trainer.model, rlbook_loss))


# ----------------------------------------------------------------------------- KTOTrainer


def test_kto_matches_trl_including_the_reference_point(tokenizer, tmp_path):
    beta, desirable_weight, undesirable_weight = 0.5, 1.3, 0.7
    args = trainer_args(
        KTOConfig,
        tmp_path,
        beta=beta,
        desirable_weight=desirable_weight,
        undesirable_weight=undesirable_weight,
        max_length=None,
    )
    trainer = KTOTrainer(
        model=tiny_qwen2(0),
        ref_model=tiny_qwen2(3),
        args=args,
        train_dataset=datasets.Dataset.from_dict(UNPAIRED),
        processing_class=tokenizer,
    )
    batch = collated(trainer, 4)

    def mismatched_logps(model):
        return response_logps(
            model, batch["KL_input_ids"], batch["KL_attention_mask"], batch["KL_completion_mask"], grad=False
        )

    reference_point = kto_reference_point(mismatched_logps(trainer.model), mismatched_logps(trainer.ref_model))
    # The seeds give a positive KL estimate, so z0 is exercised, not only its clamp at 0.
    assert reference_point.item() > 1e-3

    def rlbook_loss():
        inputs = (batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
        logps = response_logps(trainer.model, *inputs)
        ref_logps = response_logps(trainer.ref_model, *inputs, grad=False)
        losses = kto_loss(
            logps,
            ref_logps,
            batch["label"],
            reference_point,
            beta,
            desirable_weight=desirable_weight,
            undesirable_weight=undesirable_weight,
        )
        return losses.mean()

    trl_result = loss_and_grads(trainer.model, lambda: trainer.compute_loss(trainer.model, batch))
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx(reference_point.item(), rel=1e-5)
    assert_same(trl_result, loss_and_grads(trainer.model, rlbook_loss))


# ----------------------------------------------------------------------------- CPOTrainer: simpo and sigmoid


def paired_trainer(trainer_class, config_class, tokenizer, tmp_path, **config):
    args = trainer_args(config_class, tmp_path, max_length=64, **config)
    dataset = datasets.Dataset.from_dict(PAIRS)
    return trainer_class(model=tiny_qwen2(0), args=args, train_dataset=dataset, processing_class=tokenizer)


def pair_logps_and_lens(trainer, batch):
    """Policy sequence log-probs and lengths of the chosen and rejected responses in a CPO/ORPO batch."""
    result = []
    for side in ("chosen", "rejected"):
        response_mask = (batch[f"{side}_labels"] != -100).long()  # prompt and padding are labelled -100
        inputs = (batch[f"{side}_input_ids"], batch[f"{side}_attention_mask"], response_mask)
        logps = response_logps(trainer.model, *inputs)
        result.append((logps, response_mask[:, 1:].sum(-1)))
    return result


def test_simpo_matches_trl_cpo_trainer_with_loss_type_simpo(tokenizer, tmp_path):
    beta, gamma = 2.0, 0.5
    trainer = paired_trainer(
        CPOTrainer, CPOConfig, tokenizer, tmp_path, beta=beta, loss_type="simpo", simpo_gamma=gamma, cpo_alpha=0.0
    )
    batch = collated(trainer, 2)

    def rlbook_loss():
        (chosen, chosen_lens), (rejected, rejected_lens) = pair_logps_and_lens(trainer, batch)
        assert not torch.equal(chosen_lens, rejected_lens)
        return simpo_loss(chosen, rejected, chosen_lens, rejected_lens, beta, gamma).mean()

    trl_result = loss_and_grads(trainer.model, lambda: trainer.get_batch_loss_metrics(trainer.model, batch)[0])
    assert_same(trl_result, loss_and_grads(trainer.model, rlbook_loss))


def test_cpo_with_label_smoothing_matches_trl_cpo_trainer_with_loss_type_sigmoid(tokenizer, tmp_path):
    beta, nll_weight, label_smoothing = 0.5, 1.0, 0.1
    trainer = paired_trainer(
        CPOTrainer,
        CPOConfig,
        tokenizer,
        tmp_path,
        beta=beta,
        loss_type="sigmoid",
        cpo_alpha=nll_weight,
        label_smoothing=label_smoothing,
    )
    batch = collated(trainer, 2)

    def rlbook_loss():
        (chosen, chosen_lens), (rejected, _) = pair_logps_and_lens(trainer, batch)
        assert torch.all(chosen_lens == chosen_lens[0])  # TRL's pooled NLL = mean of per-example means
        losses = cpo_loss(
            chosen, rejected, chosen_lens, beta, nll_weight=nll_weight, label_smoothing=label_smoothing
        )
        return losses.mean()

    trl_result = loss_and_grads(trainer.model, lambda: trainer.get_batch_loss_metrics(trainer.model, batch)[0])
    assert_same(trl_result, loss_and_grads(trainer.model, rlbook_loss))


# ----------------------------------------------------------------------------- ORPOTrainer


def test_orpo_odds_ratio_term_and_average_log_probs_match_trl(tokenizer, tmp_path):
    lam = 0.25  # TRL: ORPOConfig(beta=λ)
    trainer = paired_trainer(ORPOTrainer, ORPOConfig, tokenizer, tmp_path, beta=lam)
    batch = collated(trainer, 2)
    trl_chosen_avg = trainer.concatenated_forward(trainer.model, batch)[0]

    def trl_odds_ratio_term():
        chosen_avg, rejected_avg = trainer.concatenated_forward(trainer.model, batch)[:2]
        trl_losses = trainer.odds_ratio_loss(chosen_avg, rejected_avg)[0]  # λ log σ(log OR), per example
        return -trl_losses.mean()

    def rlbook_odds_ratio_term():
        (chosen, chosen_lens), (rejected, rejected_lens) = pair_logps_and_lens(trainer, batch)
        full = orpo_loss(chosen, rejected, chosen_lens, rejected_lens, lam=lam)
        sft_only = orpo_loss(chosen, rejected, chosen_lens, rejected_lens, lam=0.0)
        torch.testing.assert_close(sft_only, -trl_chosen_avg.detach(), rtol=1e-5, atol=1e-6)
        return (full - sft_only).mean()  # λ · L_OR, the loss being linear in λ

    trl_result = loss_and_grads(trainer.model, trl_odds_ratio_term)
    assert_same(trl_result, loss_and_grads(trainer.model, rlbook_odds_ratio_term))
