"""A vector env of Ray actors, each holding a few envs: Stage 2 rollouts across machines.

`RayVectorEnv` is a `gymnasium.vector.VectorEnv` whose N workers are Ray actors
(`RolloutActor`), each holding M envs that it steps one after another in its process. It does
what the Stage 2 loop uses `AsyncVectorEnv` (`AutoresetMode.DISABLED`) for: `step_async` /
`step_wait` with Dict actions, where an env whose step ends its episode and that puts
`final_obs` in its info has started its next episode with the action's `reset_seed` (as
`RLTWorker` does); `reset` with seeds and `options["reset_mask"]`; `set_attr`, `get_attr`,
`call`; Gymnasium's batched infos (`_key` masks, dict values as nested dicts, `final_obs` as an
object array). So `FeaturizedVectorEnv` wraps it as it wraps `AsyncVectorEnv`
(`rpent_agents.rollout.ray_rollout` builds both).

Fault tolerance: Ray restarts an actor that dies (at most its `max_restarts` times). The call
that finds it gone, or finds a restarted actor without episodes, restores it: the attributes
set with `set_attr` so far are set again, and each of its envs restarts the episode it was in
with the seed that episode started with (an evaluation re-runs its held-out seed). The step or
reset that reports it lists those envs in `infos["episode_discarded"]` (mask
`infos["_episode_discarded"]`): reward 0, not terminated, not truncated, the observation the
first of the restarted episode, the info its reset info. The chunk that was lost produces
nothing, and the caller drops what it kept of the unfinished episode.

Example:
    >>> ray.init(num_cpus=2, include_dashboard=False)
    >>> envs = RayVectorEnv(RLTWorkerFactory(PegRLTConfig(render_backend="cpu")), 2, 1)
    >>> raw_obs, infos = envs.reset(seed=[0, 1])
    >>> [info["pid"] for info in envs.worker_info()]  # os.kill one: the next step restores it
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from rpent_agents.rollout.worker import DISCARDED_KEY, FINAL_OBS_KEY, NO_RESET_SEED

logger = logging.getLogger(__name__)
RESTART_TIMEOUT_S = 300.0
"""How long a call waits for Ray to bring a dead worker back (it rebuilds the worker's envs)."""
RETRY_PERIOD_S = 1.0
StepResult = tuple[list[Any], list[float], list[bool], list[bool], list[dict[str, Any]]]
ResetResult = tuple[list[Any], list[dict[str, Any]]]


def import_ray(needed_for: str = "Ray rollouts (--rollout ray)") -> ModuleType:
    """The `ray` module, or an ImportError that names the extra to install.

    Args:
        needed_for: What needs Ray, as the error names it.
    """
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            f"{needed_for} need Ray: pip install 'rpent[ray]' (on every node)"
        ) from error
    return ray


class RolloutActor:
    """One Ray worker: `num_envs` envs stepped one after another (runs as a Ray actor).

    A restarted actor has no episodes until its envs are all reset (`restore`); until then a
    step, a partial reset and (when `expect_episodes`) `get_attr`/`call` answer None, so the
    driver knows that the worker's episodes were lost.
    """

    def __init__(self, env_fn: Callable[[], gym.Env], num_envs: int) -> None:
        """Build the envs (in the actor's process)."""
        self.envs = [env_fn() for _ in range(num_envs)]
        self.observations: list[Any] = [None] * num_envs
        self.has_episodes = False

    def describe(self) -> dict[str, Any]:
        """Process id, node address and the file of this module the actor runs."""
        ray = import_ray()
        return {"pid": os.getpid(), "node_ip": ray.util.get_node_ip_address(), "code": __file__}

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """Observation and action space of one env."""
        return self.envs[0].observation_space, self.envs[0].action_space

    def reset(
        self, seeds: Sequence[int | None], mask: Sequence[bool], options: dict | None
    ) -> ResetResult | None:
        """Reset the envs of `mask`; the others keep their observation and get an empty info."""
        if not all(mask) and not self.has_episodes:
            return None
        infos = []
        for index, (env, seed, reset) in enumerate(zip(self.envs, seeds, mask, strict=True)):
            info = {}
            if reset:
                self.observations[index], info = env.reset(seed=seed, options=options)
            infos.append(info)
        self.has_episodes = True
        return list(self.observations), infos

    def restore(
        self, seeds: Sequence[int | None], attributes: dict[str, list[Any]]
    ) -> ResetResult | None:
        """Set `attributes` (values per env), then start every env's episode with `seeds`."""
        for name, values in attributes.items():
            self.set_attr(name, values)
        return self.reset(seeds, [True] * len(self.envs), None)

    def step(self, actions: Sequence[Any]) -> StepResult | None:
        """Step each env with its action."""
        if not self.has_episodes:
            return None
        actions = deepcopy(actions)  # Ray hands over read-only arrays; the envs may write
        results = [env.step(action) for env, action in zip(self.envs, actions, strict=True)]
        observations, rewards, terminated, truncated, infos = _columns(results)
        self.observations = observations
        return observations, rewards, terminated, truncated, infos

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set attribute `name` of each env (through its wrappers) to its value."""
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def call(self, name: str, args: tuple, kwargs: dict, expect_episodes: bool) -> list[Any] | None:
        """Call method `name` of each env, or read the attribute when it is not callable."""
        if expect_episodes and not self.has_episodes:
            return None
        attributes = [env.get_wrapper_attr(name) for env in self.envs]
        return [value(*args, **kwargs) if callable(value) else value for value in attributes]

    def close(self) -> None:
        """Close the envs."""
        for env in self.envs:
            env.close()


class RayVectorEnv(VectorEnv):
    """`num_workers` Ray actors of `envs_per_worker` envs each, as one vector env.

    Env i lives in worker i // envs_per_worker. See the module doc for the semantics (those of
    `AsyncVectorEnv` without autoreset, plus the self-reset of `RLTWorker` and the restart of
    lost workers).
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        num_workers: int,
        envs_per_worker: int,
        actor_options: dict[str, Any] | None = None,
        restart_timeout_s: float = RESTART_TIMEOUT_S,
    ) -> None:
        """Start the actors (Ray must be initialized); each builds its envs with `env_fn`.

        Args:
            env_fn: Builds one env; pickled to the actors.
            num_workers: Ray actors.
            envs_per_worker: Envs of each actor.
            actor_options: Ray actor options (`num_cpus`, `num_gpus`, `max_restarts`, ...).
            restart_timeout_s: How long a call waits for a lost worker to come back.
        """
        ray = import_ray()
        options = {"num_cpus": 1, **(actor_options or {}), "max_task_retries": 0}
        actor_class = ray.remote(RolloutActor).options(**options)
        self.workers = [actor_class.remote(env_fn, envs_per_worker) for _ in range(num_workers)]
        self.envs_per_worker, self.restart_timeout_s = envs_per_worker, restart_timeout_s
        self.num_envs = num_workers * envs_per_worker
        single_observation_space, single_action_space = self._get(self.workers[0].spaces.remote())
        self.single_observation_space = single_observation_space
        self.single_action_space = single_action_space
        self.observation_space = batch_space(single_observation_space, self.num_envs)
        self.action_space = batch_space(single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.DISABLED}
        self.observations = create_empty_array(single_observation_space, self.num_envs)
        self.episode_seeds: list[int | None] = [None] * self.num_envs
        self.attributes: dict[str, list[Any]] = {}
        self.restarts = 0
        self.started = [False] * num_workers
        self.restored: dict[int, ResetResult] = {}  # restored, not yet reported by a step
        self.pending: list[Any] | None = None
        self.reset_seeds: list[int] = []

    def worker_info(self) -> list[dict[str, Any]]:
        """Pid, node address and code file of each worker (`RolloutActor.describe`)."""
        return [self._get(worker.describe.remote()) for worker in self.workers]

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env, or those of `options["reset_mask"]` (the others keep their state)."""
        self._check_idle("reset")
        seeds = _seeds_of_envs(seed, self.num_envs)
        options = dict(options or {})
        mask = _reset_mask(options.pop("reset_mask", None), self.num_envs)
        for env_index in np.flatnonzero(mask):
            self.episode_seeds[env_index] = seeds[env_index]
        refs = [
            worker.reset.remote(seeds[part], mask[part].tolist(), options or None)
            for worker, part in zip(self.workers, self._parts(), strict=True)
        ]
        results, discarded = [], np.zeros(self.num_envs, bool)
        for worker_index, (ref, part) in enumerate(zip(refs, self._parts(), strict=True)):
            result = self._get(ref)
            lost = self.restored.pop(worker_index, None) is not None or result is None
            if result is None:
                result = self._restore(worker_index)
            if lost:  # its unmasked envs restarted their episodes
                discarded[part] = ~mask[part]
            self.started[worker_index] = True
            results.append(result)
        observations = [obs for worker_obs, _ in results for obs in worker_obs]
        infos = [info for _, worker_infos in results for info in worker_infos]
        return self._batch(observations, _mark_discarded(infos, discarded))

    def step_async(self, actions: Any) -> None:
        """Send each worker its envs' actions (a batch of the Dict action space)."""
        self._check_idle("step_async")
        env_actions = list(iterate(self.action_space, actions))
        self.reset_seeds = [int(action.get("reset_seed", NO_RESET_SEED)) for action in env_actions]
        self.pending = [
            None if worker_index in self.restored else worker.step.remote(env_actions[part])
            for worker_index, (worker, part) in enumerate(
                zip(self.workers, self._parts(), strict=True)
            )
        ]

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for every worker's step; restore the lost workers (see the module doc)."""
        if self.pending is None:
            raise gym.error.NoAsyncCallError("step_wait without step_async", "step")
        refs, self.pending = self.pending, None
        results: list[StepResult] = []
        for worker_index, ref in enumerate(refs):
            result = None if ref is None else self._get(ref)
            if result is None:
                restored = self.restored.pop(worker_index, None) or self._restore(worker_index)
                result = _discarded_step(*restored)
            results.append(result)
        observations, rewards, terminated, truncated, infos = (
            [value for worker_values in column for value in worker_values]
            for column in _columns(results)
        )
        for env_index, info in enumerate(infos):
            if FINAL_OBS_KEY in info:  # the env started its next episode with the action's seed
                self.episode_seeds[env_index] = self.reset_seeds[env_index]
        obs, batched_infos = self._batch(observations, infos)
        return (
            obs,
            np.asarray(rewards, np.float64),
            np.asarray(terminated, np.bool_),
            np.asarray(truncated, np.bool_),
            batched_infos,
        )

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """`step_async` then `step_wait`."""
        self.step_async(actions)
        return self.step_wait()

    def set_attr(self, name: str, values: Any) -> None:
        """Set an attribute of every env: one value for all, or a list of one per env.

        The values are kept: a restarted worker gets them again.
        """
        self._check_idle("set_attr")
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr({name!r}): {len(values)} values for {self.num_envs} envs")
        self.attributes[name] = list(values)
        refs = [
            worker.set_attr.remote(name, self.attributes[name][part])
            for worker, part in zip(self.workers, self._parts(), strict=True)
        ]
        for ref in refs:
            self._get(ref)  # a lost worker gets the values when it is restored

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """An attribute of every env."""
        return self.call(name)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call a method of every env (or read the attribute), one result per env."""
        self._check_idle("call")
        results = []
        for worker_index, worker in enumerate(self.workers):
            started = self.started[worker_index]
            result = self._get(worker.call.remote(name, args, kwargs, started))
            if result is None:  # lost: restore it (the next step reports it), then ask again
                self.restored[worker_index] = self._restore(worker_index)
                result = self._get(worker.call.remote(name, args, kwargs, started))
            results.extend(result)
        return tuple(results)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs and end the actors."""
        ray = import_ray()
        try:
            ray.get([worker.close.remote() for worker in self.workers], timeout=60)
        except (ray.exceptions.RayError, TimeoutError) as error:
            logger.warning("closing the rollout workers: %s", error)
        for worker in self.workers:
            ray.kill(worker, no_restart=True)

    def _restore(self, worker_index: int) -> ResetResult:
        """Bring a lost worker back with its attributes and its envs' episode seeds."""
        part = self._parts()[worker_index]
        attributes = {name: values[part] for name, values in self.attributes.items()}
        deadline = time.monotonic() + self.restart_timeout_s
        worker = self.workers[worker_index]
        while (
            result := self._get(worker.restore.remote(self.episode_seeds[part], attributes))
        ) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"rollout worker {worker_index} did not come back within "
                    f"{self.restart_timeout_s:.0f} s: Ray restarts each worker at most "
                    "--max-worker-restarts times; its logs (/tmp/ray/session_latest/logs) say "
                    "why it died"
                )
            time.sleep(RETRY_PERIOD_S)
        self.restarts += 1
        logger.warning(
            "rollout worker %d was lost: restarted, its %d episodes started over (restart %d)",
            worker_index, self.envs_per_worker, self.restarts,
        )  # fmt: skip
        return result

    def _get(self, ref: Any) -> Any:
        """The result of a call to a worker; None when the worker was lost meanwhile."""
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as error:
            logger.warning("rollout worker lost: %s", str(error).splitlines()[0])
            return None

    def _parts(self) -> list[slice]:
        size = self.envs_per_worker
        return [slice(index * size, (index + 1) * size) for index in range(len(self.workers))]

    def _batch(self, observations: list[Any], infos: list[dict]) -> tuple[Any, dict[str, Any]]:
        self.observations = concatenate(
            self.single_observation_space, observations, self.observations
        )
        batched: dict[str, Any] = {}
        for env_index, info in enumerate(infos):
            batched = self._add_info(batched, info, env_index)
        return deepcopy(self.observations), batched

    def _check_idle(self, call: str) -> None:
        if self.pending is not None:
            raise gym.error.AlreadyPendingCallError(
                f"{call} while a step is pending: call step_wait first", "step"
            )


def _columns(rows: Sequence[tuple]) -> list[list[Any]]:
    """The columns of equally long rows (one list per field of a step result)."""
    return [list(column) for column in zip(*rows, strict=True)]


def _seeds_of_envs(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """One seed per env, as `AsyncVectorEnv.reset` reads `seed`."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, int | np.integer):
        return [int(seed) + index for index in range(num_envs)]
    if len(seed) != num_envs:
        raise ValueError(f"reset: {len(seed)} seeds for {num_envs} envs")
    return list(seed)


def _reset_mask(mask: np.ndarray | None, num_envs: int) -> np.ndarray:
    """`options["reset_mask"]` checked as `AsyncVectorEnv` checks it (None: every env)."""
    if mask is None:
        return np.ones(num_envs, np.bool_)
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (num_envs,):
        raise ValueError(f"options['reset_mask'] must be a bool array of shape ({num_envs},)")
    if not mask.any():
        raise ValueError("options['reset_mask'] resets no env: set at least one True")
    return mask


def _mark_discarded(infos: list[dict[str, Any]], discarded: np.ndarray) -> list[dict[str, Any]]:
    return [
        {**info, DISCARDED_KEY: True} if lost else info
        for info, lost in zip(infos, discarded, strict=True)
    ]


def _discarded_step(observations: list[Any], infos: list[dict[str, Any]]) -> StepResult:
    """A lost worker's step: its restarted episodes' first observations, flagged discarded."""
    count = len(observations)
    discarded = _mark_discarded(infos, np.ones(count, bool))
    return observations, [0.0] * count, [False] * count, [False] * count, discarded
