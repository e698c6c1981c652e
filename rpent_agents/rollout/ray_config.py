"""Where the Stage 2 workers run with `--rollout ray`: the flags, a config and nothing more.

`RayRolloutConfig` holds the `--rollout ray` flags (cluster address, workers, envs per worker,
the CPUs and GPU share Ray reserves for each worker, restarts). `rpent-stage2`'s arguments
read it without importing the rollout machinery; `rpent_agents.rollout.ray_rollout` builds the
workers from it.

Example:
    >>> rollout = RayRolloutConfig(num_workers=2, envs_per_worker=4)
    >>> rollout.num_envs, rollout.render_backend("auto")
    (8, 'cpu')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rpent_agents.rollout.rlt_stack import RenderBackend


@dataclass
class RayRolloutConfig:
    """Where the Stage 2 workers run with `--rollout ray`, and what Ray reserves for them."""

    ray_address: str | None = None
    """Ray cluster to join: "auto" (the one `ray start` runs on this machine), "host:6379", or
    None: start a Ray of this machine's cores in this process (or join $RAY_ADDRESS)."""
    num_workers: int = 2
    """Ray actors, each one process stepping its envs one after another."""
    envs_per_worker: int = 1
    """Envs of each actor (more envs per actor: fewer messages, no more cores)."""
    cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each actor (physics runs on one core)."""
    gpus_per_worker: float = 0.0
    """GPU share Ray reserves for each actor: > 0 places the actors on GPU nodes and renders
    there ("auto" render backend); 0 renders on CPU, on any node."""
    max_worker_restarts: int = 10
    """How often Ray restarts each actor that dies before the run fails."""

    def __post_init__(self) -> None:
        """Check the counts and shares."""
        for name in ("num_workers", "envs_per_worker"):
            if getattr(self, name) < 1:
                flag = name.replace("_", "-")
                raise ValueError(f"--{flag} must be >= 1, got {getattr(self, name)}")
        if self.cpus_per_worker <= 0 or self.gpus_per_worker < 0:
            raise ValueError(
                f"--cpus-per-worker must be > 0 and --gpus-per-worker >= 0, got "
                f"{self.cpus_per_worker} and {self.gpus_per_worker}"
            )

    @property
    def num_envs(self) -> int:
        """Envs over all workers."""
        return self.num_workers * self.envs_per_worker

    def actor_options(self) -> dict[str, Any]:
        """Ray options of each worker actor (resources, restarts)."""
        return {
            "num_cpus": self.cpus_per_worker,
            "num_gpus": self.gpus_per_worker,
            "max_restarts": self.max_worker_restarts,
        }

    def render_backend(self, requested: RenderBackend) -> RenderBackend:
        """The workers' render backend: "auto" renders where the actors have a GPU share.

        Raises:
            ValueError: GPU rendering without a GPU share (Ray would hide the GPU).
        """
        if requested == "gpu" and self.gpus_per_worker == 0:
            raise ValueError(
                "--env.render-backend gpu with --rollout ray needs --gpus-per-worker > 0 "
                "(e.g. 0.1) so that Ray places the workers on GPU nodes and lets them see a GPU"
            )
        if requested == "auto":
            return "gpu" if self.gpus_per_worker > 0 else "cpu"
        return requested
