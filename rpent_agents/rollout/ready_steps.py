"""Step some workers of a Gymnasium `AsyncVectorEnv` and collect whichever finish first.

`AsyncVectorEnv.step_wait` waits for the slowest worker: with 16 peg workers a worker spends
~40% of a synchronous step waiting for the others (bench/RESULTS.md, issue 24's profile).
`ReadySteps` talks to the same worker processes through the same pipes and protocol, but per
worker: `send` hands chunks to the workers given, `receive` returns as soon as at least
`min_ready` of the busy workers have answered (and takes every other answer already there),
so the caller can give those workers their next chunk while the rest keep simulating.

The vector env must be idle (nothing sent through its own `step_async`) while workers are
busy here, and anything that talks to every worker (`reset`, `set_attr`, `call`) must wait
until `busy` is empty: `receive(min_ready=busy.sum())` drains them.

Example:
    >>> steps = ReadySteps(envs)  # an AsyncVectorEnv with AutoresetMode.DISABLED
    >>> steps.send(actions, np.arange(envs.num_envs))
    >>> ready, rewards, terminated, truncated, infos = steps.receive(min_ready=4)
"""

from __future__ import annotations

from multiprocessing.connection import wait
from typing import Any

import numpy as np
from gymnasium.vector import AsyncVectorEnv, VectorEnv
from gymnasium.vector.utils import iterate


class ReadySteps:
    """Per-worker stepping of an `AsyncVectorEnv` (see the module doc).

    Attributes:
        env: The vector env whose workers are stepped.
        busy: (N,) bool, the workers simulating a chunk sent by `send`.
    """

    def __init__(self, env: AsyncVectorEnv) -> None:
        """Step the workers of `env` (nothing may be in flight through its own API)."""
        if not self.can_step(env):
            raise ValueError(
                f"stepping workers as they are ready needs gymnasium's AsyncVectorEnv, got "
                f"{type(env).__name__}; use --rollout vector"
            )
        self.env = env
        self.busy = np.zeros(env.num_envs, bool)

    @staticmethod
    def can_step(env: VectorEnv) -> bool:
        """Whether the workers of `env` can be stepped one by one: gymnasium's processes.

        Other vector envs (Ray actors: `rpent_agents.rollout.ray_vector_env`) step all
        their envs together.
        """
        return isinstance(env, AsyncVectorEnv)

    def send(self, actions: Any, env_indices: np.ndarray) -> None:
        """Hand each worker of `env_indices` its row of the batched `actions`.

        Raises:
            ValueError: When one of them is still busy.
        """
        env_indices = np.asarray(env_indices, int)
        if self.busy[env_indices].any():
            raise ValueError(f"workers {env_indices[self.busy[env_indices]]} are still busy")
        rows = list(iterate(self.env.action_space, actions))
        for env_index in env_indices:
            self.env.parent_pipes[env_index].send(("step", rows[env_index]))
        self.busy[env_indices] = True

    def receive(
        self, min_ready: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait until `min_ready` busy workers answered; take every answer already there.

        Returns:
            `ready` (N,) bool, the workers that answered, and like `AsyncVectorEnv.step_wait`
            the rewards, terminated and truncated flags (N,; zero and false elsewhere) and
            the batched infos of the ready workers. Their observations are in
            `env.observations` (the shared memory the workers write).

        Raises:
            ValueError: When fewer than `min_ready` (or no) workers are busy.
        """
        busy = {self.env.parent_pipes[index]: index for index in np.flatnonzero(self.busy)}
        if not 1 <= min_ready <= len(busy):
            raise ValueError(f"min_ready={min_ready} with {len(busy)} busy workers")
        answered: list[int] = []
        while len(answered) < min_ready:
            answered += [busy.pop(pipe) for pipe in wait(list(busy))]
        answered += [busy.pop(pipe) for pipe in wait(list(busy), timeout=0)] if busy else []
        return self._collect(sorted(answered))

    def _collect(
        self, answered: list[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        num_envs = self.env.num_envs
        ready = np.zeros(num_envs, bool)
        rewards = np.zeros(num_envs, np.float64)
        terminated, truncated = np.zeros(num_envs, bool), np.zeros(num_envs, bool)
        infos: dict[str, Any] = {}
        successes = [True] * num_envs  # gymnasium counts the failed workers from the whole list
        for env_index in answered:
            step_return, success = self.env.parent_pipes[env_index].recv()
            successes[env_index] = success
            self.busy[env_index] = False
            if not success:
                continue
            ready[env_index] = True
            _, rewards[env_index], terminated[env_index], truncated[env_index], info = step_return
            infos = self.env._add_info(infos, info, env_index)
        self.env._raise_if_errors(successes)  # the worker's exception, re-raised here
        return ready, rewards, terminated, truncated, infos
