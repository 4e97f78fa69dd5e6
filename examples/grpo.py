"""GRPO in one file: group sampling, group-normalised advantages, a clipped token surrogate.

Group Relative Policy Optimization (Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300, §4.1) trains
a policy on a verifiable reward without a critic: sample G answers to each prompt, score them, and
use each answer's reward relative to its own group as the advantage of every one of its tokens.

    python examples/grpo.py --steps 20

trains the shipped zoo model ``arith-base`` (0.8 M parameters, 3-digit addition) on the CPU and
prints a learning curve: the mean reward of each step's fresh samples.

What is simplified, and why:
- One process, one model on the CPU, no vLLM, no LoRA, no gradient accumulation: the point is that
  the whole method fits on one screen. ``rlbook.trainers`` adds progress bars, checkpoints,
  resume, variants and metrics around the same math.
- Each batch is used for ``updates_per_batch`` optimizer steps on the whole batch (default 1, so
  exactly on-policy, where the ratio is 1 and the clip never binds; raise it to see the clip act).
- The KL to a frozen reference is optional (``kl_beta``, default 0, as DAPO and Dr.GRPO drop it).
- Only the model and the task come from rlbook (``rlbook.models.load_model``,
  ``rlbook.tasks.get_task``): every formula is written out here. The file repeats a few helpers of
  ``examples/ppo.py`` on purpose, so that each example reads alone.
- ``tests/test_examples.py`` checks ``group_advantages`` and ``grpo_loss`` equal the library's
  (``rlbook.advantages.group_advantages``, ``rlbook.losses.policy_loss(variant="grpo")``) in value
  and gradient on identical tensors, and that a few steps widen the log-prob gap between right and
  wrong answers on fixed held-out completions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import HfArgumentParser

from rlbook.models import load_model
from rlbook.tasks import get_task


@dataclass
class Args:
    model: str = "arith-base"  # a zoo model (or any causal-LM folder / hub id)
    digits: int = 3  # the arithmetic task's difficulty; arith-base was built for 3
    steps: int = 20  # sampling rounds (one batch each)
    prompts_per_step: int = 8  # distinct prompts per batch
    group_size: int = 8  # G: completions per prompt
    max_new_tokens: int = 64
    temperature: float = 1.0
    lr: float = 5e-4
    updates_per_batch: int = 1  # optimizer steps on each batch (1 = on-policy)
    clip_eps: float = 0.2  # ε of the clipped surrogate
    kl_beta: float = 0.0  # β of the k3 KL to the reference (0 = no reference model)
    adv_eps: float = 1e-6  # ε in (r − μ) / (σ + ε)
    seed: int = 0


def parse_args(argv=None) -> Args:
    """Every field of ``Args`` is a flag: ``--steps 5``, ``--kl_beta 0.04`` (or ``--kl-beta``)."""
    return HfArgumentParser(Args).parse_args_into_dataclasses(argv)[0]


# ---------------------------------------------------------------------------------------------- sampling


@torch.no_grad()
def sample(model, tokenizer, questions: list[str], args: Args):
    """Left-padded prompts and sampled completions, with a 0/1 mask over each completion up to its EOS."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    prompt = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    output = model.generate(**prompt, do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0,
                            max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    completion = output[:, prompt.input_ids.shape[1]:]
    is_eos = completion == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # tokens after the first EOS are padding
    return prompt.input_ids, prompt.attention_mask, completion, (~after_eos).float()


def token_logprobs(model, prompt_ids, prompt_mask, completion, completion_mask):
    """(B, T) log π(y_t | x, y_<t) of each completion token, from one forward pass over prompt + completion."""
    input_ids = torch.cat([prompt_ids, completion], dim=1)
    attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # as generate() numbered them under left padding
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, prompt_ids.shape[1] - 1:-1]  # the logits that predicted each completion token
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------------------------------------- the math


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i − mean(group)) / (std(group) + ε)   (GRPO, arXiv:2402.03300, §4.1.2, outcome supervision).

    Convention (rlbook's ``group_advantages`` default): the population std (divide by G, no Bessel
    correction; TRL divides by G − 1), and a group whose G rewards are all equal gets exactly 0.
    """
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    advantages = centred / (groups.std(dim=1, keepdim=True, correction=0) + eps)
    all_equal = groups.max(dim=1, keepdim=True).values == groups.min(dim=1, keepdim=True).values
    return torch.where(all_equal, torch.zeros_like(advantages), advantages).reshape(-1)


def grpo_loss(logp, old_logp, advantages, mask, *, clip_eps=0.2, ref_logp=None, kl_beta=0.0):
    """GRPO's objective (arXiv:2402.03300, eq. 3), negated so that we minimise it:

        L = −(1/B) Σ_i (1/|o_i|) Σ_t [ min(r_t A_i, clip(r_t, 1 − ε, 1 + ε) A_i) − β k3_t ]

    r_t = π_θ(y_t)/π_old(y_t) is PPO's ratio (Schulman et al. 2017, arXiv:1707.06347, eq. 7) and
    k3_t = π_ref/π_θ − log(π_ref/π_θ) − 1 is Schulman's (2020) unbiased KL estimator (eq. 4 of GRPO).
    Convention (rlbook's ``policy_loss(variant="grpo")``): each response's tokens are averaged, then
    the responses ("seq_mean_token_mean"); a response with no tokens still counts in B.
    """
    ratio = torch.exp(logp - old_logp.detach())
    advantages = advantages.detach().unsqueeze(1)  # every token of response i gets A_i
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    if kl_beta != 0.0:
        log_r = ref_logp.detach() - logp
        per_token = per_token + kl_beta * (torch.expm1(log_r) - log_r)
    lengths = mask.sum(dim=1).clamp(min=1.0)
    return ((per_token * mask).sum(dim=1) / lengths).mean()


# ---------------------------------------------------------------------------------------------- the loop


def main(args: Args | None = None):
    """Train; return the trained model and the learning curve (the mean reward of each step's samples)."""
    args = args or parse_args()
    torch.manual_seed(args.seed)
    model, tokenizer = load_model(args.model)
    reference = load_model(args.model)[0] if args.kl_beta > 0 else None  # frozen π_ref
    task = get_task("arithmetic", digits=args.digits)
    data = task.dataset(args.steps * args.prompts_per_step, seed=args.seed, split="train")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    curve, start = [], time.time()

    for step in range(args.steps):
        # 1. Sample G completions for each prompt (each prompt's group contiguous) and score them.
        rows = [data[step * args.prompts_per_step + i] for i in range(args.prompts_per_step)]
        rows = [row for row in rows for _ in range(args.group_size)]
        model.eval()
        prompt_ids, prompt_mask, completion, mask = sample(model, tokenizer, [r["question"] for r in rows], args)
        texts = tokenizer.batch_decode(completion * mask.long(), skip_special_tokens=True)
        rewards = torch.tensor([task.reward(text, row) for text, row in zip(texts, rows)])

        # 2. Advantages from the group, and the log-probs of the policy that sampled (and of π_ref).
        advantages = group_advantages(rewards, args.group_size, eps=args.adv_eps)
        with torch.no_grad():
            old_logp = token_logprobs(model, prompt_ids, prompt_mask, completion, mask)
            ref_logp = (token_logprobs(reference, prompt_ids, prompt_mask, completion, mask)
                        if reference is not None else None)

        # 3. A few optimizer steps on the clipped surrogate.
        model.train()
        for _ in range(args.updates_per_batch):
            logp = token_logprobs(model, prompt_ids, prompt_mask, completion, mask)
            loss = grpo_loss(logp, old_logp, advantages, mask, clip_eps=args.clip_eps,
                             ref_logp=ref_logp, kl_beta=args.kl_beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        curve.append(rewards.mean().item())
        # On-policy the loss's value is ~0 (ratio 1, advantages centred per group); its gradient is not.
        print(f"step {step:3d}  reward {curve[-1]:.3f}  loss {loss.item():+.4f}  "
              f"length {mask.sum(1).mean().item():5.1f}  ({time.time() - start:.0f} s)", flush=True)
    return model, curve


if __name__ == "__main__":
    main()
