"""The control loop's local copies of the learner's networks, and how it picks a chunk with them.

`LocalPolicy` holds a CPU copy of the trained actor and, with Q-ranked acting
(`Stage2Config.acting_samples` > 0: `ActingSpec.ranks_chunks`), of the critic; the learner's
`ActorWeights` are loaded into both. It picks a chunk with `rpent-stage2`'s own code
(`stage2.acting.act_chunks` with `acting_ranking`'s `QRanking`): for the same weights,
observation and random state it picks the chunk `Stage2Learner.act` picks, exploring (fresh
noise and perturbations) or deterministically (the mean and the fixed perturbations). Without
Q-ranked acting no critic is sent, so acting is the actor's chunk (`eval_q_filter` then plays
no part here; the run's `weights.pt` holds the critic for evaluation).

Example:
    >>> policy = LocalPolicy(link.acting_spec)
    >>> policy.load(weights)  # from link.poll()
    >>> chunk = policy.act(obs_batch, deterministic=False, generator=generator)[0]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from rpent_agents.robot.learner_service import ActingSpec, ActorWeights
from rpent_agents.stage2.acting import act_chunks, acting_ranking


class LocalPolicy:
    """The actor (and, ranking chunks, the critic) the control loop acts with.

    Attributes:
        spec: How the networks were built and how acting ranks chunks.
        actor: The local actor (evaluation mode, no gradients).
        critic: The local critic with Q-ranked acting; else None.
    """

    def __init__(self, spec: ActingSpec, device: str | torch.device = "cpu") -> None:
        """Networks of `spec`'s sizes on `device`, with initial weights (`load` the learner's)."""
        self.spec = spec
        self.actor = spec.build_actor(device)
        self.critic = spec.build_critic(device)

    def load(self, weights: ActorWeights) -> None:
        """Copy the learner's published weights into the local networks."""
        weights.load_into(self.actor, self.critic)

    def act(
        self,
        obs: Mapping[str, np.ndarray],
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> np.ndarray:
        """Flat chunks (B, H*A) for batched RLT observations, chosen as `rpent-stage2` does.

        Args:
            obs: Batched RLT observations (`z_rl`, `proprio`, `ref_chunk`).
            deterministic: The mean and fixed perturbations (evaluation) instead of exploring.
            generator: Random source of the exploration noise and perturbations.
        """
        spec, ranking = self.spec, None
        if self.critic is not None:
            ranking = acting_ranking(
                self.critic, deterministic, spec.acting_samples, spec.acting_sample_std,
                spec.eval_q_filter, spec.eval_consensus,
            )  # fmt: skip
        return act_chunks(self.actor, obs, deterministic, generator, ranking)
