"""PPO in one file: a critic with a value per token, GAE, clipped policy and value losses, minibatch epochs.

Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347) as RLHF uses it (Ziegler et al.
2019, arXiv:1909.08593; Ouyang et al. 2022, arXiv:2203.02155): each completion is an episode whose
actions are its tokens; the verifier's reward arrives on the last token, a KL penalty to a frozen
reference on every token, and a learned critic V(s_t) turns those into per-token advantages by GAE.

    python examples/ppo.py --steps 20

trains the shipped zoo model ``arith-base`` (0.8 M parameters, 3-digit addition) on the CPU and
prints a learning curve: the mean verifier reward of each step's fresh samples.

What is simplified, and why:
- The critic is a copy of the policy's transformer with a linear value head, trained by its own
  optimizer; real RLHF often initialises it from a reward model. Here it starts knowing nothing, so
  the first steps' advantages are mostly the raw reward.
- One process on the CPU, no LoRA, no gradient accumulation, no early stop on approximate KL;
  ``rlbook.trainers`` adds those, checkpoints and metrics around the same math.
- The KL penalty is the plain k1 = log π_θ − log π_ref in the reward (set ``--kl-beta 0`` to drop it).
- Only the model and the task come from rlbook; every formula is written out here, and
  ``tests/test_examples.py`` checks ``gae``, ``ppo_policy_loss`` and ``ppo_value_loss`` equal
  ``rlbook.advantages.gae`` and ``rlbook.losses.policy_loss(variant="ppo")`` / ``value_loss``.
  The sampling and log-prob helpers repeat those of ``examples/grpo.py`` on purpose, so that each
  example reads alone.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from transformers import HfArgumentParser

from rlbook.models import load_model
from rlbook.tasks import get_task


@dataclass
class Args:
    model: str = "arith-base"
    digits: int = 3
    steps: int = 20  # sampling rounds
    batch_size: int = 32  # completions per round (one per prompt)
    minibatch_size: int = 8
    epochs: int = 2  # passes over each batch
    max_new_tokens: int = 64
    lr: float = 3e-4
    critic_lr: float = 1e-3
    clip_eps: float = 0.2  # ε of the policy clip
    value_clip_eps: float = 0.2  # ε of the value clip
    gamma: float = 1.0  # no discount within a completion, as in RLHF
    lam: float = 0.95  # GAE's λ
    kl_beta: float = 0.02  # β of the per-token KL penalty in the reward
    seed: int = 0


def parse_args(argv=None) -> Args:
    """Every field of ``Args`` is a flag: ``--steps 5``, ``--kl_beta 0.04`` (or ``--kl-beta``)."""
    return HfArgumentParser(Args).parse_args_into_dataclasses(argv)[0]


# ---------------------------------------------------------------------------------------------- sampling


@torch.no_grad()
def sample(model, tokenizer, questions: list[str], max_new_tokens: int):
    """Left-padded prompts and sampled completions, with a 0/1 mask over each completion up to its EOS."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    prompt = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    output = model.generate(**prompt, do_sample=True, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                            pad_token_id=tokenizer.pad_token_id)
    completion = output[:, prompt.input_ids.shape[1]:]
    is_eos = completion == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return prompt.input_ids, prompt.attention_mask, completion, (~after_eos).float()


def forward_inputs(prompt_ids, prompt_mask, completion, mask) -> dict:
    attention = torch.cat([prompt_mask, mask.long()], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # as generate() numbered them under left padding
    return {"input_ids": torch.cat([prompt_ids, completion], dim=1), "attention_mask": attention,
            "position_ids": positions}


def token_logprobs(model, prompt_ids, prompt_mask, completion, mask):
    """(B, T) log π(y_t | x, y_<t) of each completion token."""
    logits = model(**forward_inputs(prompt_ids, prompt_mask, completion, mask)).logits
    logits = logits[:, prompt_ids.shape[1] - 1:-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)


class Critic(torch.nn.Module):
    """V(s_t): a transformer and a linear head, read at the state each completion token is chosen in."""

    def __init__(self, policy):
        super().__init__()
        self.body = copy.deepcopy(policy.model)  # the policy's transformer without its LM head
        self.head = torch.nn.Linear(policy.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, prompt_ids, prompt_mask, completion, mask):
        hidden = self.body(**forward_inputs(prompt_ids, prompt_mask, completion, mask)).last_hidden_state
        return self.head(hidden[:, prompt_ids.shape[1] - 1:-1]).squeeze(-1)  # (B, T)


# ---------------------------------------------------------------------------------------------- the math


def gae(rewards, values, mask, gamma: float, lam: float):
    """Generalised advantage estimation (Schulman et al. 2015, arXiv:1506.02438, eq. 16), per row:

        δ_t = r_t + γ V_{t+1} − V_t,     A_t = δ_t + γλ A_{t+1},     returns_t = A_t + V_t.

    Convention (rlbook's ``gae(..., mask=mask)``): a completion ends at its last unmasked token, where
    V_{t+1} = 0; rewards and values on padding count as 0 and advantages and returns there are 0.
    """
    rewards, values = rewards.detach() * mask, values.detach() * mask
    advantages = torch.zeros_like(rewards)
    next_value, running = torch.zeros(rewards.shape[0]), torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * mask[:, t]
        advantages[:, t] = running
        next_value = values[:, t]
    return advantages, (advantages + values) * mask


def ppo_policy_loss(logp, old_logp, advantages, mask, clip_eps: float = 0.2):
    """PPO's clipped surrogate (arXiv:1707.06347, eq. 7), negated:  −min(r A, clip(r, 1 − ε, 1 + ε) A).

    Convention (rlbook's ``policy_loss(variant="ppo")``): the mean over every unmasked token of the
    batch ("token_mean"), as PPO averages over all timesteps.
    """
    ratio = torch.exp(logp - old_logp.detach())
    advantages = advantages.detach()
    per_token = -torch.minimum(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    return (per_token * mask).sum() / mask.sum()


def ppo_value_loss(values, old_values, returns, mask, clip_eps: float = 0.2):
    """The clipped value loss ½ max((V − R)², (V_old + clip(V − V_old, −ε, ε) − R)²), token mean.

    From OpenAI Baselines' PPO2 (Huang et al. 2022, "The 37 Implementation Details of PPO", detail 9);
    the same as rlbook's ``value_loss(..., clip_eps=ε)``.
    """
    old_values, returns = old_values.detach(), returns.detach()
    clipped = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
    per_token = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return 0.5 * (per_token * mask).sum() / mask.sum()


# ---------------------------------------------------------------------------------------------- the loop


def main(args: Args | None = None):
    """Train; return the trained model and the learning curve (the mean verifier reward of each step's samples)."""
    args = args or parse_args()
    torch.manual_seed(args.seed)
    model, tokenizer = load_model(args.model)
    reference = load_model(args.model)[0]  # frozen π_ref for the KL penalty
    critic = Critic(model)
    task = get_task("arithmetic", digits=args.digits)
    data = task.dataset(args.steps * args.batch_size, seed=args.seed, split="train")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=args.critic_lr)
    curve, start = [], time.time()

    for step in range(args.steps):
        # 1. Roll out: one completion per prompt, its verifier reward, and the old log-probs and values.
        rows = [data[step * args.batch_size + i] for i in range(args.batch_size)]
        model.eval()
        batch = sample(model, tokenizer, [row["question"] for row in rows], args.max_new_tokens)
        mask = batch[3]
        texts = tokenizer.batch_decode(batch[2] * mask.long(), skip_special_tokens=True)
        scores = torch.tensor([task.reward(text, row) for text, row in zip(texts, rows)])
        with torch.no_grad():
            old_logp, ref_logp = token_logprobs(model, *batch), token_logprobs(reference, *batch)
            old_values = critic(*batch)

        # 2. Per-token rewards: −β (log π_old − log π_ref) on every token, the score on the last one.
        rewards = -args.kl_beta * (old_logp - ref_logp) * mask
        last = mask.sum(dim=1).long() - 1
        rewards[torch.arange(len(rows)), last] += scores
        advantages, returns = gae(rewards, old_values, mask, args.gamma, args.lam)

        # 3. Several epochs of shuffled minibatches on the clipped policy and value losses.
        model.train()
        for _ in range(args.epochs):
            for index in torch.randperm(len(rows)).split(args.minibatch_size):
                part = [tensor[index] for tensor in batch]
                policy = ppo_policy_loss(token_logprobs(model, *part), old_logp[index], advantages[index],
                                         mask[index], args.clip_eps)
                value = ppo_value_loss(critic(*part), old_values[index], returns[index], mask[index],
                                       args.value_clip_eps)
                optimizer.zero_grad()
                critic_optimizer.zero_grad()
                (policy + value).backward()  # separate parameters: each loss trains its own network
                optimizer.step()
                critic_optimizer.step()

        curve.append(scores.mean().item())
        kl = ((old_logp - ref_logp) * mask).sum().item() / mask.sum().item()
        print(f"step {step:3d}  reward {curve[-1]:.3f}  policy {policy.item():+.4f}  value {value.item():.4f}  "
              f"kl {kl:.4f}  ({time.time() - start:.0f} s)", flush=True)
    return model, curve


if __name__ == "__main__":
    main()
