"""Many peg RLT stacks in worker processes, featurized in one batch per step, for Stage 2.

Each worker runs peg env (CPU physics; intermediate steps of a chunk render nothing) ->
`PolicySwitch` with `AutoGate` -> `RLTWorker` (`rpent_agents.rollout.worker`), with
`skip_inactive=False`: one vector step
executes one chunk in every env, the VLA reference driving outside the critical phase and the
actor (or the reference during warm-up, or an expert takeover) inside it. Workers return the
raw observation at each chunk boundary; `FeaturizedVectorEnv` in the learner's process turns
all of them into RLT observations with one feature-model call (on the GPU when there is one)
and sends each worker its reference chunk with the actor's chunk. Seen from the trainer, the
vector env steps RLT observations and flat actor chunks, as the composite env
`RPent/PegInsertion-RLT-v0` does one env at a time. The learner sets the workers' mode
(`WorkerMode`: training or evaluation, whether the actor drives) with `envs.set_worker_mode`.

Workers are reset explicitly (Gymnasium's `AutoresetMode.DISABLED`), so the trainer gives every
episode its seed: training episodes count up from a seed of their own, evaluation episodes use
fixed held-out seeds.

Example:
    >>> config = PegRLTConfig(render_backend="cpu")
    >>> envs = make_rlt_vector_env(config, num_envs=2)
    >>> obs, infos = envs.reset(seed=[100_000, 100_001])
    >>> envs.set_worker_mode(WorkerMode.training(actor_ready=False, config=config))
    >>> obs, rewards, terminated, truncated, infos = envs.step(np.zeros((2, 80), np.float32))
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from rpent_agents.rollout.ready_steps import ReadySteps
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.worker import (
    DISCARDED_KEY,
    FINAL_OBS_KEY,
    INSTRUCTION_KEY,
    NO_RESET_SEED,
    RLTWorkerFactory,
    WorkerMode,
)
from wrappers.rlt import RLTFeatureSource, rlt_observation_space, rlt_observations


class FeaturizedVectorEnv(VectorWrapper):
    """RLT observations of a vector env of `RLTWorker`s, featurized in one batch per step.

    The wrapped env steps Dict actions (`actor`, `ref_chunk`, `reset_seed`) and returns raw
    observations; this wrapper steps flat actor chunks (N, H*A) and returns batched RLT
    observations (`z_rl`, `proprio`, `ref_chunk`), and sends each worker the reference chunk it
    featurized from that worker's current observation. `step_async(actions, reset_seeds)` with
    one seed per env lets each worker start its next episode itself when the chunk ends it:
    the returned observation is then the new episode's first, and `infos["final_obs"]` (with
    its mask `infos["_final_obs"]`) holds the featurized last observation of the episode that
    ended. `step_async`/`step_wait` let the caller work (learner updates) while the workers
    simulate; `set_worker_mode`, `set_attr`, `get_attr` and `call` reach the workers.

    Asynchronous stepping (worker processes only, `can_step_ready_envs`;
    `rpent_agents.rollout.ready_steps`):
    `step_async(..., env_indices=idx)` sends chunks to those workers alone, and
    `step_wait(min_ready=k)` returns once k busy workers have answered, with only their rows
    updated (`last_ready` says which; the others keep simulating, `busy`). `reset`, `set_attr`
    and `call` need no worker busy.
    """

    def __init__(self, env: VectorEnv, feature_model: RLTFeatureSource) -> None:
        """Wrap `env` (workers of `RLTWorkerFactory`) with the learner-side feature model."""
        super().__init__(env)
        self.feature_model = feature_model
        raw_space = env.single_observation_space
        ref_space = env.single_action_space["ref_chunk"]
        step_space = gym.spaces.Box(ref_space.low[0], ref_space.high[0], dtype=np.float32)
        self.single_observation_space = rlt_observation_space(
            feature_model, raw_space["state"], step_space
        )
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)
        self.single_action_space = env.single_action_space["actor"]
        self.action_space = batch_space(self.single_action_space, env.num_envs)
        self.instructions = [""] * env.num_envs
        self.last_featurize_s = 0.0
        """Seconds the last `step_wait` spent featurizing (after the workers answered)."""
        self.last_ready = np.zeros(env.num_envs, bool)
        """The envs whose chunk the last `step_wait` returned."""
        self.ready_steps: ReadySteps | None = None
        self.stepping_all = False
        """Whether a `step_async` to every env awaits its `step_wait` (synchronous stepping)."""
        self.pads_batches = False
        """Whether featurizer batches are padded to `num_envs` observations (`full_batches`)."""
        self.observations: dict[str, np.ndarray] = {
            key: np.zeros((env.num_envs, *space.shape), np.float32)
            for key, space in self.single_observation_space.spaces.items()
        }

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every env, or those of `options["reset_mask"]`, and featurize them."""
        options = dict(options or {})
        mask = np.asarray(options.get("reset_mask", np.ones(self.num_envs, bool)), bool)
        raw, infos = self.env.reset(seed=seed, options=options or None)
        self._featurize(raw, infos, np.flatnonzero(mask | discarded_envs(infos, self.num_envs)))
        return self._copy_observations(), infos

    @property
    def can_step_ready_envs(self) -> bool:
        """Whether this env steps asynchronously (`env_indices`, `min_ready`): worker processes.

        False over Ray actors, which step every env together.
        """
        return ReadySteps.can_step(self.env)

    @property
    def busy(self) -> np.ndarray:
        """(N,) bool: the envs simulating a chunk whose answer `step_wait` has not returned."""
        if self.stepping_all:
            return np.ones(self.num_envs, bool)
        if self.ready_steps is None:
            return np.zeros(self.num_envs, bool)
        return self.ready_steps.busy.copy()

    def step_async(
        self,
        actions: np.ndarray,
        reset_seeds: Sequence[int] | None = None,
        env_indices: np.ndarray | None = None,
    ) -> None:
        """Send the actor's chunks (N, H*A), the reference chunks and the reset seeds.

        Args:
            actions: The actor's flat chunks, one per env.
            reset_seeds: The seed each env starts its next episode with if this chunk ends
                the current one; None: no env resets itself (the caller resets).
            env_indices: Send to these envs only (asynchronous stepping; `step_wait` with
                `min_ready`); None: every env.
        """
        if reset_seeds is None:
            reset_seeds = [NO_RESET_SEED] * self.num_envs
        batched = {
            "actor": actions,
            "ref_chunk": self.observations["ref_chunk"],
            "reset_seed": np.asarray(reset_seeds, dtype=np.int64),
        }
        if env_indices is None:
            self.env.step_async(batched)
            self.stepping_all = True
            return
        if self.ready_steps is None:
            self.ready_steps = ReadySteps(self.env)
        self.ready_steps.send(batched, env_indices)

    def step_wait(
        self, min_ready: int | None = None
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict]:
        """Wait for the workers' chunks; featurize every new and every final observation.

        Args:
            min_ready: Return once this many busy envs answered (asynchronous stepping: the
                rows of the others are unchanged and their flags false); None: every env.
        """
        if min_ready is None:
            raw, rewards, terminated, truncated, infos = self.env.step_wait()
            self.stepping_all = False
            self.last_ready = np.ones(self.num_envs, bool)
        else:
            self.last_ready, rewards, terminated, truncated, infos = self.ready_steps.receive(
                min_ready
            )
            raw = self.env.observations  # the workers' shared memory, their rows updated
        featurize_started_s = time.perf_counter()
        final_mask = np.asarray(infos.get(f"_{FINAL_OBS_KEY}", np.zeros(self.num_envs, bool)), bool)
        final_raw = infos.get(FINAL_OBS_KEY)
        if final_mask.any():
            ended = np.flatnonzero(final_mask)
            finals = self.featurize_observations(  # the info holds one raw Dict per env
                [final_raw[i] for i in ended], [self.instructions[i] for i in ended]
            )
            infos[FINAL_OBS_KEY] = {
                key: np.zeros((self.num_envs, *values.shape[1:]), values.dtype)
                for key, values in finals.items()
            }
            for key, values in finals.items():
                infos[FINAL_OBS_KEY][key][final_mask] = values
        self._featurize(raw, infos, np.flatnonzero(self.last_ready))
        self.last_featurize_s = time.perf_counter() - featurize_started_s
        return self._copy_observations(), rewards, terminated, truncated, infos

    def step(
        self, actions: np.ndarray, reset_seeds: Sequence[int] | None = None
    ) -> tuple[dict[str, np.ndarray], Any, Any, Any, dict]:
        """`step_async` then `step_wait`."""
        self.step_async(actions, reset_seeds)
        return self.step_wait()

    def featurize_observations(
        self, raw_observations: list[dict[str, np.ndarray]], instructions: list[str]
    ) -> dict[str, np.ndarray]:
        """Batched RLT observations of raw observations (one feature-model call).

        Under `full_batches` the call featurizes `num_envs` observations, those given and
        then copies of the first, and returns the rows of those given.
        """
        count = len(raw_observations)
        padding = self.num_envs - count if self.pads_batches and count else 0
        batch = rlt_observations(
            self.feature_model,
            raw_observations + raw_observations[:1] * padding,
            instructions + instructions[:1] * padding,
            self.single_observation_space,
        )
        return {key: values[:count] for key, values in batch.items()}

    @contextmanager
    def full_batches(self) -> Iterator[None]:
        """Featurize batches of `num_envs` observations meanwhile, however many are new.

        The feature model's float rounding depends on its batch size (not on the other rows'
        values): so an observation's features are those a synchronous step gives, however
        many workers answered with it (asynchronous evaluation).
        """
        self.pads_batches = True
        try:
            yield
        finally:
            self.pads_batches = False

    def set_worker_mode(self, mode: WorkerMode) -> None:
        """Set every worker's mode: one `set_attr` per `WorkerMode` field (training, evaluation)."""
        for field in dataclasses.fields(mode):
            self.env.set_attr(field.name, getattr(mode, field.name))

    def set_attr(self, name: str, values: Any) -> None:
        """Set an attribute of every worker env (see `VectorEnv.set_attr`)."""
        self.env.set_attr(name, values)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """An attribute of every worker env."""
        return self.env.get_attr(name)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call a method of every worker env."""
        return self.env.call(name, *args, **kwargs)

    def _featurize(self, raw: dict[str, np.ndarray], infos: dict, env_indices: np.ndarray) -> None:
        task_mask = infos.get(f"_{INSTRUCTION_KEY}")
        for env_index in env_indices:
            if task_mask is not None and task_mask[env_index]:
                self.instructions[env_index] = str(infos[INSTRUCTION_KEY][env_index])
        raw_observations = [{key: raw[key][i] for key in raw} for i in env_indices]
        batch = self.featurize_observations(
            raw_observations, [self.instructions[i] for i in env_indices]
        )
        for key, values in batch.items():
            self.observations[key][env_indices] = values

    def _copy_observations(self) -> dict[str, np.ndarray]:
        return {key: values.copy() for key, values in self.observations.items()}


def make_rlt_vector_env(
    config: PegRLTConfig, num_envs: int, worker_torch_threads: int = 1
) -> FeaturizedVectorEnv:
    """`num_envs` peg RLT workers (forkserver processes, no autoreset: see the module doc).

    The feature model runs here, on `config.feature_device`; the workers only simulate.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    feature_model = config.make_featurizer()
    workers = AsyncVectorEnv(
        [RLTWorkerFactory(config, worker_torch_threads)] * num_envs,
        context="forkserver",
        autoreset_mode=AutoresetMode.DISABLED,
    )
    return FeaturizedVectorEnv(workers, feature_model)


def discarded_envs(infos: dict[str, Any], num_envs: int) -> np.ndarray:
    """(N,) bool: the envs whose episode was lost with its worker (`DISCARDED_KEY`)."""
    return np.asarray(infos.get(f"_{DISCARDED_KEY}", np.zeros(num_envs, bool)), bool)


def reset_envs(
    envs: gym.vector.VectorEnv,
    mask: np.ndarray,
    seeds: Sequence[int | None],
    rebuild_scenes: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Reset the envs where `mask` is True with `seeds` (one per reset env, in env order).

    Args:
        envs: The vector env.
        mask: (N,) bool, the envs to reset.
        seeds: One reset seed per env of `mask`.
        rebuild_scenes: Rebuild each reset env's scene from its seed (ManiSkill's
            `reconfigure`), so that the seed alone defines the episode even where the env
            keeps its scene across resets (`PegRLTConfig.reconfiguration_freq`).

    Returns:
        The batched observations (the new first observations where reset, the current ones
        elsewhere) and the batched infos (`discarded_envs` lists the envs not in `mask` whose
        episode started over because their worker was lost).
    """
    mask = np.asarray(mask, bool)
    if len(seeds) != int(mask.sum()):
        raise ValueError(f"{int(mask.sum())} envs to reset but {len(seeds)} seeds given")
    seed_of_env: list[int | None] = [None] * envs.num_envs
    for env_index, seed in zip(np.flatnonzero(mask), seeds, strict=True):
        seed_of_env[env_index] = seed
    options: dict[str, Any] = {"reset_mask": mask}
    if rebuild_scenes:
        options["reconfigure"] = True
    return envs.reset(seed=seed_of_env, options=options)
