"""The Stage 2 algorithm as docs/design.md §4 states it: the networks, one update, acting.

`Stage2Algorithm` holds the actor, the critic (`num_q_heads` Q heads), the target critic, the
acting actor, the actor's and the critic's Adam optimizers. One update (`update_networks`,
reference order):

1. a critic step on the chunked TD target (`losses.td_target`): the target critic's minimum
   over its heads (all, or `target_q_heads` drawn once per update) at the online actor's
   chunk for the next observation;
2. every `critic_actor_ratio`-th update (`UpdateKind`), an actor step on
   -q_weight Q + bc_weight BC with reference dropout (Q: the first head, or the heads' mean
   with `actor_q="mean"`; divided by the batch's mean |Q| with `normalize_q`), then the acting
   actor's Polyak step (`acting_actor_tau`);
3. every `target_update_every`-th update, a soft target update (tau).

An optimizer step whose loss or gradient norm is NaN or inf is skipped, on the device, and
counted in `skipped_steps` (`stage2.step_guard`). Acting is `stage2.acting`'s `act_chunks`:
the actor's chunk, or the candidate chunk the critic values highest (`QRanking`: the
reference's, perturbations of the actor's).

Every update runs on the current stream and reads nothing back from the device. This module
does not hold the replay buffer, the update schedule, the loss weights' schedule, the CUDA
streams and graphs or training's acting copies: those are `stage2.learner`'s
(`Stage2Learner` runs these updates on batches it draws, on the device's schedule).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch

from rpent_agents.stage2 import losses
from rpent_agents.stage2.acting import QRanking, act_chunks, acting_ranking, obs_to_tensors
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.networks import Actor, RLTDims, TwinQCritic
from rpent_agents.stage2.replay import RLTBatch, RLTTransition
from rpent_agents.stage2.step_guard import step_unless_non_finite

NETWORKS = ("critic", "actor")
ACTOR_SCALARS = (
    "actor/actor_loss",
    "q_pi",
    "actor/bc_loss",
    "actor/bc_ref_loss",
    "actor/bc_human_loss",
    "actor/human_mask_ratio",
)


class UpdateKind(NamedTuple):
    """What one update runs besides its critic step."""

    actor_step: bool
    target_update: bool

    @classmethod
    def at(cls, update_step: int, config: Stage2Config) -> UpdateKind:
        """The kind of update number `update_step` (counted from 0)."""
        return cls(
            actor_step=update_step % config.critic_actor_ratio == 0,
            target_update=update_step % config.target_update_every == 0,
        )


def actor_updates_between(first_update: int, end_update: int, critic_actor_ratio: int) -> int:
    """Actor steps among updates first_update..end_update-1 (those divisible by the ratio)."""

    def multiples_below(end: int) -> int:  # of the ratio in 0..end-1
        return (end + critic_actor_ratio - 1) // critic_actor_ratio

    return multiples_below(end_update) - multiples_below(first_update)


class Stage2Algorithm:
    """The networks and optimizers one Stage 2 update steps, and the update itself.

    Attributes:
        config: The run's hyperparameters.
        dims: The RLT observation and action sizes.
        device: Where the networks live.
        actor: The trained actor.
        critic: The critic, `num_q_heads` Q heads.
        target_critic: The soft-updated copy of the critic the TD target reads.
        acting_actor: The Polyak-averaged actor that acts deterministically
            (`acting_actor_tau`), or `actor` itself.
        actor_optimizer: The actor's fused Adam.
        critic_optimizer: The critic's fused Adam.
        noise_generator: Random source of the actor's noise, the reference dropout and the
            TD target's head draw.
        skipped_steps: Per network, optimizer steps skipped for a non-finite loss or
            gradient, counted on the device.
    """

    def __init__(
        self, config: Stage2Config, dims: RLTDims, device: torch.device, capturable: bool
    ) -> None:
        """Seeded networks on `device`; `capturable`: optimizers a CUDA graph can capture."""
        self.config = config
        self.dims = dims
        self.device = device
        # Seeded initialisation that leaves the caller's global random state alone.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.actor = Actor(
                dims, config.chunk_len, config.hidden_dim, config.actor_layers,
                config.actor_noise_std,
            ).to(self.device)  # fmt: skip
            self.critic = TwinQCritic(
                dims, config.chunk_len, config.hidden_dim, config.critic_layers,
                config.num_q_heads,
            ).to(self.device)  # fmt: skip
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.acting_actor = (
            self.actor
            if config.acting_actor_tau is None
            else copy.deepcopy(self.actor).requires_grad_(False)
        )
        self.actor_optimizer = _adam(self.actor, config.actor_lr, capturable)
        self.critic_optimizer = _adam(self.critic, config.critic_lr, capturable)
        self.noise_generator = torch.Generator(device=self.device).manual_seed(config.seed + 1)
        self.skipped_steps = {name: torch.zeros((), device=self.device) for name in NETWORKS}

    def update_networks(
        self,
        kind: UpdateKind,
        batch: RLTBatch,
        loss_weights: tuple[float, float] | tuple[torch.Tensor, torch.Tensor],
    ) -> dict[str, torch.Tensor]:
        """One update of `kind` on `batch` with (bc_weight, q_weight); its device scalars."""
        scalars = {"critic/critic_loss": self._critic_step(batch)}
        if kind.actor_step:
            scalars |= self._actor_step(batch, *loss_weights)
        if kind.target_update:
            self._soft_update_target()
        return scalars

    def _critic_step(self, batch: RLTBatch) -> torch.Tensor:
        config = self.config
        with torch.no_grad():
            next_action = self.actor(batch.next_obs, generator=self.noise_generator)
            next_q = self._target_heads(self.target_critic(batch.next_obs, next_action))
            next_q_min = next_q.min(dim=-1).values
            target = losses.td_target(
                batch.rewards, batch.done, next_q_min, config.gamma, config.bootstrap_type
            )
        loss = losses.critic_loss(self.critic(batch.obs, batch.action), target)
        self._step(self.critic_optimizer, self.critic, loss, self.skipped_steps["critic"])
        return loss.detach()

    def _target_heads(self, q_values: torch.Tensor) -> torch.Tensor:
        """The (B, Q) heads the TD target uses: all, or `target_q_heads` drawn at random.

        One draw per update for the whole batch, from the noise generator (a captured update
        draws anew at every replay).
        """
        count, heads = self.config.target_q_heads, q_values.shape[-1]
        if count is None or count == heads:
            return q_values
        draw = torch.rand(heads, generator=self.noise_generator, device=q_values.device)
        return q_values.index_select(-1, draw.argsort()[:count])

    def _actor_step(
        self,
        batch: RLTBatch,
        bc_weight: float | torch.Tensor,
        q_weight: float | torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        config = self.config
        actor_chunk = self.actor(
            batch.obs,
            ref_dropout_prob=config.reference_dropout_prob,
            generator=self.noise_generator,
        )
        q_heads = self.critic(batch.obs, actor_chunk)
        q_pi = q_heads[:, 0] if config.actor_q == "first" else q_heads.mean(dim=-1)
        bc = losses.bc_terms(actor_chunk, batch.obs.ref_chunk, batch.action, batch.intervened)
        floor = config.q_scale_floor if config.normalize_q else None
        loss = losses.actor_loss(q_pi, bc.loss, q_weight, bc_weight, losses.q_scale(q_pi, floor))
        self._step(self.actor_optimizer, self.actor, loss, self.skipped_steps["actor"])
        if self.acting_actor is not self.actor:
            self._polyak_update(self.acting_actor, self.actor, config.acting_actor_tau)
        return {
            "actor/actor_loss": loss.detach(),
            "q_pi": q_pi.detach().mean(),
            "actor/bc_loss": bc.loss.detach(),
            "actor/bc_ref_loss": bc.ref_loss.detach(),
            "actor/bc_human_loss": bc.human_loss.detach(),
            "actor/human_mask_ratio": bc.human_mask_ratio,
        }

    def _step(
        self,
        optimizer: torch.optim.Optimizer,
        module: torch.nn.Module,
        loss: torch.Tensor,
        skipped_steps: torch.Tensor,
    ) -> None:
        """Backpropagate `loss` into `module` only, clip its gradient norm, step `optimizer`.

        A non-finite loss or gradient skips the step and counts it in `skipped_steps`.
        """
        optimizer.zero_grad(set_to_none=True)
        params = list(module.parameters())
        # inputs= keeps the actor loss from filling the critic's gradients.
        loss.backward(inputs=params)
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip_norm, foreach=True)
        step_unless_non_finite(optimizer, loss, norm, skipped_steps)

    def _soft_update_target(self) -> None:
        self._polyak_update(self.target_critic, self.critic, self.config.tau)

    @staticmethod
    @torch.no_grad()
    def _polyak_update(average: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
        """Move `average` by tau towards `online` (one fused launch for all parameters)."""
        torch._foreach_lerp_(list(average.parameters()), list(online.parameters()), tau)

    @torch.no_grad()
    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        """Flat action chunks (B, H*A) of the trained actor, or at evaluation the acting one.

        Args:
            obs: Batched RLT observations (`z_rl` (B, D), `proprio` (B, P), `ref_chunk`).
            deterministic: Use the mean (evaluation) instead of adding the fixed noise; the
                critic chooses among candidate chunks as `q_ranking` says.
        """
        actor = self.acting_actor if deterministic else self.actor
        ranking = self.q_ranking(self.critic, deterministic)
        return act_chunks(actor, obs, deterministic, self.noise_generator, ranking)

    def q_ranking(self, critic: TwinQCritic, deterministic: bool) -> QRanking | None:
        """How `critic` chooses the chunk that acts: `acting_ranking` of this config."""
        config = self.config
        return acting_ranking(
            critic, deterministic, config.acting_samples, config.acting_sample_std,
            config.eval_q_filter, config.eval_consensus,
        )  # fmt: skip

    def _skipped_step_counts(self) -> dict[str, torch.Tensor]:
        """Copies of the skip counters as they stand after the updates queued so far."""
        return {
            f"train/rlt/skipped_{name}_steps": self.skipped_steps[name].clone() for name in NETWORKS
        }


def _adam(module: torch.nn.Module, lr: float, capturable: bool) -> torch.optim.Adam:
    # The fused kernel updates all parameters at once (CPU and CUDA); the default per-parameter
    # loop dominates the update time of networks this small. It also skips non-finite steps.
    return torch.optim.Adam(module.parameters(), lr=lr, fused=True, capturable=capturable)


@torch.no_grad()
def first_head_q_values(
    critic: TwinQCritic, transitions: Sequence[RLTTransition], device: torch.device
) -> list[float]:
    """Q (first head) of each transition's observation and executed chunk (diagnostics).

    One critic call (on `critic`'s `device`) and one device read for all of them.
    """
    obs = obs_to_tensors(
        {key: np.stack([getattr(transition, key) for transition in transitions])
         for key in ("z_rl", "proprio", "ref_chunk")},
        device,
    )  # fmt: skip
    actions = np.stack([transition.action for transition in transitions])
    action = torch.as_tensor(actions, dtype=torch.float32, device=device)
    return critic(obs, action)[:, 0].tolist()
