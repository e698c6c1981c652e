"""Acting with Stage 2's networks: the actor's chunk, or the one a critic ranks highest.

`act_chunks` turns batched RLT observations into flat chunks: the actor's (its mean, or with
its fixed noise when exploring), or, given a `QRanking`, the candidate the critic values
highest among the actor's chunk, perturbations of its mean and the reference's (`q_ranked`;
docs/design.md §4, acting). `acting_ranking` reads `Stage2Config`'s acting options into a
`QRanking`; everyone who acts with the networks uses it: the learner (`Stage2Algorithm.act`),
evaluation and the tools that load a run's weights (`stage2.checkpoint`), and the robot
loop's local copies (`robot.local_policy`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from rpent_agents.stage2.networks import Actor, RLTObs, TwinQCritic

PERTURBATION_SEED = 20261207
"""Seed of the fixed perturbations deterministic Q-ranked acting values (`QRanking`)."""


def obs_to_tensors(obs: Mapping[str, np.ndarray], device: torch.device) -> RLTObs:
    """A batched RLT Dict observation (numpy or tensors) as an `RLTObs` on `device`."""

    def tensor(key: str) -> torch.Tensor:
        return torch.as_tensor(obs[key], dtype=torch.float32, device=device)

    return RLTObs(tensor("z_rl"), tensor("proprio"), tensor("ref_chunk"))


@dataclass(frozen=True)
class QRanking:
    """How acting lets a critic choose among candidate chunks (docs/design.md §4, acting).

    The candidates are the actor's chunk, `samples` perturbations of its mean (noise of std
    `sample_std` before the tanh: drawn anew when exploring, fixed perturbations when acting
    deterministically, so an evaluated episode depends only on its seed) and the reference
    chunk; the critic's minimum over its heads values each and the best runs, ties keeping
    the actor's (`q_ranked`). With no samples this is `Stage2Config.eval_q_filter`'s choice
    between the actor's and the reference's chunk.

    With `consensus`, a candidate other than the reference may run only where every head of
    the critic values it above the reference: where the heads disagree (early in training,
    away from the data) the reference runs, so the critic's noise cannot make the policy
    worse than the reference it starts from.

    Attributes:
        critic: The critic that values the candidates.
        samples: Perturbations of the actor's mean among the candidates.
        sample_std: Std of the perturbations, before the tanh.
        consensus: Let a candidate beat the reference only by every head's value.
    """

    critic: TwinQCritic
    samples: int = 0
    sample_std: float = 0.0
    consensus: bool = False


def acting_ranking(
    critic: TwinQCritic,
    deterministic: bool,
    samples: int,
    sample_std: float,
    q_filter: bool = False,
    consensus: bool = False,
) -> QRanking | None:
    """How `critic` chooses the chunk that acts (`QRanking`); None: the actor's chunk.

    `Stage2Config`'s `acting_samples`, `acting_sample_std`, `eval_q_filter` and
    `eval_consensus` (`samples` .. `consensus`) for whoever acts with the networks
    (`Stage2Algorithm.q_ranking`, the robot loop's local copies): exploring ranks with the
    samples; acting deterministically ranks with them too, or between the actor's and the
    reference's chunk alone with `q_filter`, and with `consensus` only by every head's value.
    """
    consensus = deterministic and consensus
    if samples > 0:
        return QRanking(critic, samples, sample_std, consensus)
    if deterministic and q_filter:
        return QRanking(critic, consensus=consensus)
    return None


@torch.no_grad()
def act_chunks(
    actor: Actor,
    obs: Mapping[str, np.ndarray],
    deterministic: bool = True,
    generator: torch.Generator | None = None,
    ranking: QRanking | None = None,
) -> np.ndarray:
    """Flat action chunks (B, H*A) of `actor` for batched RLT observations (numpy).

    Args:
        actor: The actor (on any device).
        obs: Batched RLT observations (`z_rl` (B, D), `proprio` (B, P), `ref_chunk`).
        deterministic: Use the mean (evaluation) instead of adding the fixed noise.
        generator: Random source of the noise (the default generator when None).
        ranking: A critic that chooses among the actor's chunk, perturbations of it and the
            reference's (`QRanking`); None: the actor's chunks.
    """
    device = next(actor.parameters()).device
    rlt_obs = obs_to_tensors(obs, device)
    if ranking is None:
        chunk = actor(rlt_obs, deterministic=deterministic, generator=generator)
    else:
        candidates = candidate_chunks(actor, rlt_obs, ranking, deterministic, generator)
        chunk = q_ranked(ranking.critic, rlt_obs, candidates, ranking.consensus)
    return chunk.flatten(1).cpu().numpy()


def candidate_chunks(
    actor: Actor,
    obs: RLTObs,
    ranking: QRanking,
    deterministic: bool,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """(B, K, H, A): the actor's chunk, `ranking.samples` perturbations, the reference's."""
    mean = actor.pre_tanh_mean(obs)
    own = mean if deterministic else mean + actor.noise_std * _normal(mean.shape, generator, mean)
    perturbations = (
        fixed_perturbations(ranking.samples, mean.shape[-1]).to(mean.device)[None]
        if deterministic
        else _normal((ranking.samples, *mean.shape), generator, mean).transpose(0, 1)
    )
    sampled = mean[:, None] + ranking.sample_std * perturbations.expand(mean.shape[0], -1, -1)
    reference = obs.ref_chunk[:, None, : actor.chunk_len].clamp(-1.0, 1.0)
    return torch.cat([actor.squash(own)[:, None], actor.squash(sampled), reference], dim=1)


def _normal(
    shape: tuple[int, ...], generator: torch.Generator | None, like: torch.Tensor
) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)


@functools.cache
def fixed_perturbations(count: int, size: int) -> torch.Tensor:
    """(count, size) standard normal draws, the same at every call: deterministic acting."""
    return torch.randn((count, size), generator=torch.Generator().manual_seed(PERTURBATION_SEED))


@torch.no_grad()
def q_ranked(
    critic: TwinQCritic, obs: RLTObs, candidates: torch.Tensor, consensus: bool = False
) -> torch.Tensor:
    """Per sample, the candidate chunk (of (B, K, H, A)) the critic values highest.

    The critic values each candidate by the minimum over its heads, one call per candidate
    (the batch of an evaluation stays the workers' batch: its float rounding does not depend
    on how many candidates there are); ties keep the earlier candidate (the actor's comes
    first: another runs only where the critic expects it to do better). With `consensus` the
    last candidate is the reference, and another may run only where every head values it
    above the reference (`QRanking.consensus`).
    """
    count = candidates.shape[1]
    heads = torch.stack([critic(obs, candidates[:, index]) for index in range(count)], dim=1)
    q_values = heads.min(dim=-1).values
    if consensus:
        beats_reference = (heads > heads[:, -1:]).all(dim=-1)
        beats_reference[:, -1] = True
        q_values = q_values.masked_fill(~beats_reference, -torch.inf)
    best = q_values.argmax(dim=1)
    return candidates[torch.arange(candidates.shape[0], device=candidates.device), best]
