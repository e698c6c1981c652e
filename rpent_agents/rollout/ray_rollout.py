"""Stage 2 rollouts on Ray (`rpent-stage2 --rollout ray`): where the workers run, what they get.

`make_ray_vector_env` joins the cluster of a `RayRolloutConfig` (the `--rollout ray` flags,
`rpent_agents.rollout.ray_config`) and builds `RayVectorEnv` of peg `RLTWorker`s
(`RLTWorkerFactory`: CPU physics, rendering on the worker's node's GPU when it has a GPU
share) under `FeaturizedVectorEnv`: the learner and the batched featurizer stay in this
process. docs/ray.md shows how to run a cluster.

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

from rpent_agents.rollout.ray_config import RayRolloutConfig
from rpent_agents.rollout.ray_vector_env import RayVectorEnv, import_ray
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import FeaturizedVectorEnv
from rpent_agents.rollout.worker import RLTWorkerFactory

logger = logging.getLogger(__name__)


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
