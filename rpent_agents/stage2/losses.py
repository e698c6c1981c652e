"""Stage 2 losses, one short function per formula of DESIGN.md §4.

Shapes: B transitions, H steps per chunk, A action dims, Q heads.
- TD target: y = sum_{k<H} gamma^k r_k + (1 - done) gamma^H min_j Q'_j(s', a');
  `bootstrap_type="always"` drops the (1 - done) factor.
- Critic loss: mean over batch and heads of (Q_j(s, a) - y)^2.
- BC: per step, the mean squared error over A against the reference action, or against the
  executed action on intervened steps; averaged over B x H.
- Actor loss: -q_weight * mean Q_1(s, pi(s)) / q_scale + bc_weight * BC, where q_scale is 1
  (reference) or the batch's mean |Q_1| floored (`normalize_q`, as TD3+BC); Q_1 is the first
  head, or the heads' mean for an ensemble (`Stage2Config.actor_q`, chosen by the learner).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def discounted_chunk_return(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """sum_k gamma^k r_k of per-step chunk rewards (B, H) -> (B,)."""
    steps = torch.arange(rewards.shape[-1], device=rewards.device, dtype=rewards.dtype)
    return (rewards * gamma**steps).sum(dim=-1)


def td_target(
    rewards: torch.Tensor,
    done: torch.Tensor,
    next_q_min: torch.Tensor,
    gamma: float,
    bootstrap_type: str = "standard",
) -> torch.Tensor:
    """Chunked TD target (B,).

    Args:
        rewards: (B, H) per-step rewards of the executed chunk (zero after an early end).
        done: (B,) 1.0 where the episode ended inside the chunk.
        next_q_min: (B,) min over the target Q heads at (s', a'), a' from the online actor.
        gamma: Per-step discount; the bootstrap uses gamma**H.
        bootstrap_type: "standard" (no bootstrap after done) or "always".

    Raises:
        ValueError: For an unknown `bootstrap_type`.
    """
    bootstrap = gamma ** rewards.shape[-1] * next_q_min
    if bootstrap_type == "standard":
        bootstrap = (1.0 - done.to(bootstrap.dtype)) * bootstrap
    elif bootstrap_type != "always":
        raise ValueError(f"bootstrap_type must be 'standard' or 'always', got {bootstrap_type!r}")
    return discounted_chunk_return(rewards, gamma) + bootstrap


def critic_loss(q_values: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared TD error over the batch and every Q head; `q_values` (B, Q), `target` (B,)."""
    return torch.mean((q_values - target.unsqueeze(-1)) ** 2)


@dataclass
class BCTerms:
    """Behaviour-cloning terms of one actor batch.

    Attributes:
        loss: BC loss the actor minimises (reference or executed target per step).
        ref_loss: Error to the reference on non-intervened steps only (logged).
        human_loss: Error to the executed action on intervened steps only (logged).
        human_mask_ratio: Fraction of steps in the batch that were intervened.
    """

    loss: torch.Tensor
    ref_loss: torch.Tensor
    human_loss: torch.Tensor
    human_mask_ratio: torch.Tensor


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `mask` holds; 0 when it holds nowhere."""
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def bc_terms(
    actor_chunk: torch.Tensor,
    ref_chunk: torch.Tensor,
    executed_chunk: torch.Tensor,
    intervened: torch.Tensor,
) -> BCTerms:
    """BC of the actor's chunk to the reference, or to the executed action where intervened.

    Args:
        actor_chunk: (B, H, A) the actor's chunk.
        ref_chunk: (B, H_ref, A) reference chunks; the first H actions are the target.
        executed_chunk: (B, H, A) the chunk that was executed (human or expert on intervened
            steps).
        intervened: (B, H) bool, steps driven by a human or expert.
    """
    ref_target = ref_chunk[:, : actor_chunk.shape[1]]
    ref_error = torch.mean((actor_chunk - ref_target) ** 2, dim=-1)
    executed_error = torch.mean((actor_chunk - executed_chunk) ** 2, dim=-1)
    step_error = torch.where(intervened, executed_error, ref_error)
    return BCTerms(
        loss=step_error.mean(),
        ref_loss=_masked_mean(ref_error, ~intervened),
        human_loss=_masked_mean(executed_error, intervened),
        human_mask_ratio=intervened.to(actor_chunk.dtype).mean(),
    )


def q_scale(q1_of_actor: torch.Tensor, floor: float | None) -> torch.Tensor | float:
    """What the actor's Q term is divided by: 1 (floor None), else max(mean |Q_1|, floor).

    The scale is a constant of the step (no gradient flows through it).
    """
    if floor is None:
        return 1.0
    return q1_of_actor.detach().abs().mean().clamp(min=floor)


def actor_loss(
    q1_of_actor: torch.Tensor,
    bc_loss: torch.Tensor,
    q_weight: float | torch.Tensor,
    bc_weight: float | torch.Tensor,
    scale: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """-q_weight * mean Q_1(s, pi(s)) / scale + bc_weight * BC; `q1_of_actor` (B,).

    The weights may be 0-dim device tensors (a CUDA graph reads them at replay).
    """
    return -q_weight * q1_of_actor.mean() / scale + bc_weight * bc_loss
