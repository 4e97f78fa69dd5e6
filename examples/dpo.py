"""DPO in one file: sequence log-probs of chosen and rejected answers, under the policy and a frozen copy.

Direct Preference Optimization (Rafailov et al. 2023, arXiv:2305.18290) fits a policy to pairwise
preferences with a logistic loss on its log-probability ratios to a reference model: no reward
model, no sampling during training.

    python examples/dpo.py --steps 30

samples two reviews for each of a set of prompts from the shipped zoo model ``review-base``, lets the
book's hidden gold labeller (``rlbook.tasks.preference_pairs``, Bradley–Terry on
``rlbook.tasks.gold_reward``) say which it prefers, then trains on those pairs and prints a learning
curve: the loss and the preference accuracy (how often the implicit reward β log π/π_ref ranks the
chosen answer above the rejected one) on the training pairs, and at the end the gold reward of fresh
samples before and after.

What is simplified, and why:
- The pairs are drawn once, from the starting model, and trained on for several epochs (the usual
  offline DPO setting); one fixed batch of pairs per step, no gradient accumulation.
- The policy and the reference are two copies of one tiny model on the CPU; on a real LLM the
  reference log-probs are usually computed once up front, as they are here.
- Only the model, the prompts and the gold labeller come from rlbook; the loss is written out here
  and ``tests/test_examples.py`` checks it equals ``rlbook.losses.dpo_loss`` in value and gradient.
  The file repeats a little of the other examples on purpose, so that each one reads alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import HfArgumentParser

from rlbook.models import load_model
from rlbook.tasks import ReviewTask, gold_reward, preference_pairs


@dataclass
class Args:
    model: str = "review-base"
    pairs: int = 32  # prompts to draw two samples for (pairs with equal gold reward are dropped)
    steps: int = 30  # optimizer steps, each on every pair
    max_new_tokens: int = 64
    lr: float = 1e-4  # larger rates drive both log-probs down until the reviews stop parsing
    beta: float = 0.1  # β: the strength of the pull back to π_ref
    eval_samples: int = 64  # fresh samples whose gold reward is reported before and after
    seed: int = 0


def parse_args(argv=None) -> Args:
    """Every field of ``Args`` is a flag: ``--steps 5``, ``--kl_beta 0.04`` (or ``--kl-beta``)."""
    return HfArgumentParser(Args).parse_args_into_dataclasses(argv)[0]


# ---------------------------------------------------------------------------------------------- data


def chat(tokenizer, question: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)


@torch.no_grad()
def sample_texts(model, tokenizer, questions: list[str], max_new_tokens: int) -> list[str]:
    """One sampled completion per question, as text (temperature 1, no top-k or top-p)."""
    prompt = tokenizer([chat(tokenizer, q) for q in questions], return_tensors="pt", padding=True,
                       add_special_tokens=False)
    output = model.generate(**prompt, do_sample=True, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                            pad_token_id=tokenizer.pad_token_id)
    return tokenizer.batch_decode(output[:, prompt.input_ids.shape[1]:], skip_special_tokens=True)


def encode(tokenizer, questions: list[str], completions: list[str]):
    """Right-padded prompt + completion + EOS ids, attention mask, and a 0/1 mask over the completion."""
    rows, completion_masks = [], []
    for question, completion in zip(questions, completions):
        prompt_ids = tokenizer(chat(tokenizer, question), add_special_tokens=False).input_ids
        answer_ids = tokenizer(completion, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        completion_masks.append([0] * len(prompt_ids) + [1] * len(answer_ids))
    width = max(len(row) for row in rows)
    pad = lambda row, value: row + [value] * (width - len(row))  # noqa: E731
    input_ids = torch.tensor([pad(row, tokenizer.pad_token_id) for row in rows])
    attention = torch.tensor([pad([1] * len(row), 0) for row in rows])
    return input_ids, attention, torch.tensor([pad(m, 0) for m in completion_masks], dtype=torch.float32)


def sequence_logps(model, input_ids, attention, completion_mask) -> torch.Tensor:
    """(B,) log π(y | x) = Σ_t log π(y_t | x, y_<t) over the completion tokens (a sum, not a mean)."""
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
    token_logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (token_logps * completion_mask[:, 1:]).sum(dim=1)


# ---------------------------------------------------------------------------------------------- the loss


def dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta: float) -> torch.Tensor:
    """Per-pair DPO loss (arXiv:2305.18290, eq. 7):

        L = −log σ(β [ (log π(y_w|x) − log π_ref(y_w|x)) − (log π(y_l|x) − log π_ref(y_l|x)) ])

    y_w is the chosen answer, y_l the rejected one; the log-probs are sums over the answer's tokens.
    At the start π = π_ref, so every pair's loss is log 2. Convention (rlbook's ``dpo_loss``): one
    value per pair, no label smoothing; the caller averages.
    """
    margin = (chosen_logps - ref_chosen_logps.detach()) - (rejected_logps - ref_rejected_logps.detach())
    return -F.logsigmoid(beta * margin)


# ---------------------------------------------------------------------------------------------- the loop


def mean_gold_reward(model, tokenizer, questions, max_new_tokens) -> float:
    texts = sample_texts(model, tokenizer, questions, max_new_tokens)
    return sum(gold_reward(text) for text in texts) / len(texts)


def main(args: Args | None = None) -> dict:
    """Train; return the learning curve (loss and accuracy per step) and the gold reward before and after."""
    args = args or parse_args()
    torch.manual_seed(args.seed)
    model, tokenizer = load_model(args.model)
    reference = load_model(args.model)[0]  # frozen π_ref: the starting model
    questions = ReviewTask().dataset(args.pairs, seed=args.seed)["question"]

    # 1. Two samples per prompt from the starting model; the gold labeller picks the preferred one.
    first = sample_texts(model, tokenizer, questions, args.max_new_tokens)
    second = sample_texts(model, tokenizer, questions, args.max_new_tokens)
    pairs = preference_pairs(questions, first, second, seed=args.seed)
    chosen = encode(tokenizer, pairs["prompt"], pairs["chosen"])
    rejected = encode(tokenizer, pairs["prompt"], pairs["rejected"])
    print(f"{len(pairs)} preference pairs from {args.pairs} prompts", flush=True)

    # 2. The reference's log-probs never change: compute them once.
    with torch.no_grad():
        ref_chosen, ref_rejected = sequence_logps(reference, *chosen), sequence_logps(reference, *rejected)
    eval_questions = ReviewTask().dataset(args.eval_samples, seed=args.seed + 1)["question"]
    gold_before = mean_gold_reward(model, tokenizer, eval_questions, args.max_new_tokens)

    # 3. Gradient steps on the mean DPO loss over all pairs.
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    curve, start = {"loss": [], "accuracy": []}, time.time()
    model.train()
    for step in range(args.steps):
        policy_chosen, policy_rejected = sequence_logps(model, *chosen), sequence_logps(model, *rejected)
        loss = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, args.beta).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # implicit reward β log π/π_ref ranks the pair correctly (measured before this step's update)
        accuracy = ((policy_chosen - ref_chosen) > (policy_rejected - ref_rejected)).float().mean().item()
        curve["loss"].append(loss.item())
        curve["accuracy"].append(accuracy)
        print(f"step {step:3d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}  "
              f"chosen Δlogp {(policy_chosen - ref_chosen).mean().item():+.2f}  ({time.time() - start:.0f} s)",
              flush=True)

    model.eval()
    curve["gold_before"] = gold_before
    curve["gold_after"] = mean_gold_reward(model, tokenizer, eval_questions, args.max_new_tokens)
    print(f"gold reward of fresh samples: {gold_before:+.3f} before, {curve['gold_after']:+.3f} after")
    return curve


if __name__ == "__main__":
    main()
