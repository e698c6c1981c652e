"""Stage 2 rollouts on Ray (`rpent-stage2 --rollout ray`): where the workers run, what they get.

`RayRolloutConfig` holds the `--rollout ray` flags (cluster address, workers, envs per worker,
the CPUs and GPU share Ray reserves for each worker, restarts); `make_ray_vector_env` joins the
cluster and builds `RayVectorEnv` of peg `RLTWorker`s (`RLTWorkerFactory`: CPU physics,
rendering on the worker's node's GPU when it has a GPU share) under `FeaturizedVectorEnv`: the
learner and the batched featurizer stay in this process. docs/ray.md shows how to run a cluster.

Example:
    >>> ray.init(num_cpus=2, include_dashboard=False)
    >>> rollout = RayRolloutConfig(num_workers=2, envs_per_worker=1)
    >>> config = PegRLTConfig(render_backend="cpu")
    >>> envs = make_ray_vector_env(config, rollout)
    >>> obs, infos = envs.reset(seed=[100_000, 100_001])
    >>> envs.set_worker_mode(WorkerMode.training(actor_ready=False, config=config))
    >>> obs, rewards, terminated, truncated, infos = envs.step(np.zeros((2, 80), np.float32))
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from rpent_agents.rollout.ray_vector_env import RayVectorEnv, import_ray
from rpent_agents.rollout.rlt_stack import PegRLTConfig, RenderBackend
from rpent_agents.rollout.vector import FeaturizedVectorEnv
from rpent_agents.rollout.worker import RLTWorkerFactory

logger = logging.getLogger(__name__)


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


def make_ray_vector_env(
    config: PegRLTConfig, rollout: RayRolloutConfig, worker_torch_threads: int = 1
) -> FeaturizedVectorEnv:
    """Peg RLT workers on Ray actors, featurized here (see the module doc).

    Joins (or starts) Ray unless it is initialized already. The feature model runs in this
    process, on `config.feature_device`; the actors only simulate.
    """
    ray = import_ray()
    if not ray.is_initialized():
        if rollout.ray_address is None:
            ray.init(include_dashboard=False)
        else:
            ray.init(address=rollout.ray_address)
    _warn_if_short_of_resources(ray.cluster_resources(), rollout)
    worker_config = dataclasses.replace(
        config, render_backend=rollout.render_backend(config.render_backend)
    )
    workers = RayVectorEnv(
        RLTWorkerFactory(worker_config, worker_torch_threads),
        rollout.num_workers,
        rollout.envs_per_worker,
        rollout.actor_options(),
    )
    for index, info in enumerate(workers.worker_info()):
        logger.info("rollout worker %d: pid %d on %s", index, info["pid"], info["node_ip"])
    return FeaturizedVectorEnv(workers, config.make_featurizer())


def _warn_if_short_of_resources(available: dict[str, float], rollout: RayRolloutConfig) -> None:
    """Say so when the cluster cannot place every worker now (the others wait for nodes)."""
    for resource, per_worker, flag in (
        ("CPU", rollout.cpus_per_worker, "--cpus-per-worker"),
        ("GPU", rollout.gpus_per_worker, "--gpus-per-worker"),
    ):
        needed = per_worker * rollout.num_workers
        if needed > available.get(resource, 0.0):
            logger.warning(
                "the %d workers ask for %g %s, the Ray cluster has %g: the rest wait until nodes "
                "join (or lower %s or --num-workers)",
                rollout.num_workers, needed, resource, available.get(resource, 0.0), flag,
            )  # fmt: skip
