"""Many `RPent/PegInsertion-RLT-v0` stacks in worker processes, for Stage 2 training.

Each worker runs the composite stack (peg env with CPU physics -> `RLTObservation` ->
`PolicySwitch` with `AutoGate`) with `skip_inactive=False`: one vector step executes one chunk
in every env, the VLA reference driving outside the critical phase and the actor (or the
reference during warm-up, or an expert takeover) inside it. The learner sets each worker's
`actor_ready` with `envs.set_attr`.

Workers are reset explicitly (Gymnasium's `AutoresetMode.DISABLED`), so the trainer gives every
episode its seed: training episodes count up from a seed of their own, evaluation episodes use
fixed held-out seeds.

Example:
    >>> spec = RLTWorkerSpec(render_backend="cpu")
    >>> envs = make_rlt_vector_env(spec, num_envs=2)
    >>> obs, infos = envs.reset(seed=[100_000, 100_001])
    >>> envs.set_attr("actor_ready", False)  # the reference drives the critical phase too
    >>> obs, rewards, terminated, truncated, infos = envs.step(np.zeros((2, 80), np.float32))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from rpent_agents.rlt_envs import make_peg_rlt
from wrappers.policy_switch import PolicySwitch
from wrappers.takeover import ExpertTakeover

# Per-step infos stay in the worker: the trainer needs the chunk-level keys only, and every
# step's info would be pickled through the pipe once per chunk.
_DROPPED_INFO_KEYS = ("step_infos",)


class RLTWorker(gym.Wrapper):
    """The composite RLT env as one worker of a training vector env.

    Gymnasium's vector API stacks each info key into one array, which needs the same shape in
    every env. A chunk that ends early executes fewer than H steps, so this wrapper pads
    `executed_action` to (H, A) and `chunk_rewards` to (H,) with zeros; `chunk_len` says how
    many rows are real (`unpad_chunk_info` cuts them back). `step_infos` is dropped.

    `expert_takeover_enabled` switches the stalled-progress expert on or off from the next
    reset (evaluation turns it off); `actor_ready` reaches the `PolicySwitch` below.

    Example:
        >>> worker = RLTWorkerSpec(render_backend="cpu", expert_takeover=True)()
        >>> worker.expert_takeover_enabled = False  # from the next reset on
        >>> obs, info = worker.reset(seed=0)
        >>> info["executed_action"].shape, info["chunk_len"]
        ((10, 8), 0)
    """

    def __init__(self, env: gym.Env, takeover: ExpertTakeover | None = None) -> None:
        """Wrap the switch stack `env`; `takeover` is the expert takeover it may switch on."""
        super().__init__(env)
        self.switch = _find_policy_switch(env)
        self.takeover = takeover
        self.expert_takeover_enabled = takeover is not None
        self.chunk_len, self.action_dim = self.switch.horizon, self.switch.action_dim

    @property
    def expert_takeover_enabled(self) -> bool:
        """Whether the expert takeover acts in the episodes started from now on."""
        return self._takeover_wanted

    @expert_takeover_enabled.setter
    def expert_takeover_enabled(self, enabled: bool) -> None:
        if enabled and self.takeover is None:
            raise ValueError(
                "expert_takeover_enabled=True on a worker built without an expert; "
                "build it with RLTWorkerSpec(expert_takeover=True)"
            )
        self._takeover_wanted = bool(enabled)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode (applying `expert_takeover_enabled`); infos padded."""
        self.switch.expert_takeover = self.takeover if self._takeover_wanted else None
        obs, info = self.env.reset(seed=seed, options=options or None)
        return obs, self._fixed_shape(info)

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """Execute one chunk; infos padded."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._fixed_shape(info)

    def _fixed_shape(self, info: dict[str, Any]) -> dict[str, Any]:
        info = {key: value for key, value in info.items() if key not in _DROPPED_INFO_KEYS}
        executed = np.asarray(info["executed_action"], np.float32).reshape(-1, self.action_dim)
        rewards = np.asarray(info.get("chunk_rewards", ()), np.float32)  # none after a reset
        info["chunk_len"] = len(executed)
        info["executed_action"] = _zero_padded(executed, self.chunk_len)
        info["chunk_rewards"] = _zero_padded(rewards, self.chunk_len)
        return info


def _zero_padded(values: np.ndarray, rows: int) -> np.ndarray:
    padded = np.zeros((rows, *values.shape[1:]), np.float32)
    padded[: len(values)] = values
    return padded


def _find_policy_switch(env: gym.Env) -> PolicySwitch:
    while not isinstance(env, PolicySwitch):
        if not isinstance(env, gym.Wrapper):
            raise ValueError(f"RLTWorker needs a PolicySwitch in its wrapper stack, got {env}")
        env = env.env
    return env


def unpad_chunk_info(info: dict[str, Any]) -> dict[str, Any]:
    """One env's `RLTWorker` info cut back to the `chunk_len` steps that ran.

    `executed_action` and `chunk_rewards` lose their padding, as `build_transition` expects.
    """
    steps = int(info["chunk_len"])
    return {
        **info,
        "executed_action": info["executed_action"][:steps],
        "chunk_rewards": info["chunk_rewards"][:steps],
    }


@dataclass
class RLTWorkerSpec:
    """How to build one worker's env; a picklable env factory for `AsyncVectorEnv`.

    Attributes:
        checkpoint: Stage 1 checkpoint folder; None: the embedded default.
        chunk_len: H, actions per chunk.
        feature_device: Torch device of each worker's feature model ("cpu", "cuda").
        render_backend: SAPIEN render device ("gpu" on a GPU machine, "cpu": lavapipe).
        trigger_mode: AutoGate mode; "always_on" makes every chunk critical (smoke tests).
        expert_takeover: Build the stalled-progress expert takeover (DESIGN.md §5).
        max_episode_chunks: Truncate episodes after this many chunks; None: the peg env's own
            500-step limit alone.
        torch_threads: CPU threads of each worker's torch (many workers share the cores).
    """

    checkpoint: Path | None = None
    chunk_len: int = 10
    feature_device: str = "cpu"
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"
    trigger_mode: Literal["auto", "always_on"] = "auto"
    expert_takeover: bool = False
    max_episode_chunks: int | None = None
    torch_threads: int = 1

    def __call__(self) -> RLTWorker:
        """Build the worker env (runs inside the worker process)."""
        # Imported here: the simulator loads in the workers, not in the trainer.
        from rpent_envs.maniskill.expert import PegInsertionExpert

        torch.set_num_threads(self.torch_threads)
        env = make_peg_rlt(
            checkpoint=str(self.checkpoint) if self.checkpoint else None,
            chunk_len=self.chunk_len,
            device=self.feature_device,
            render_backend=self.render_backend,
            skip_inactive=False,
            trigger_mode=self.trigger_mode,
        )
        takeover = ExpertTakeover(PegInsertionExpert(env)) if self.expert_takeover else None
        if self.max_episode_chunks is not None:
            env = gym.wrappers.TimeLimit(env, self.max_episode_chunks)
        return RLTWorker(env, takeover)


def make_rlt_vector_env(spec: RLTWorkerSpec, num_envs: int) -> AsyncVectorEnv:
    """`num_envs` workers of `spec` (forkserver processes, no autoreset: see the module doc)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return AsyncVectorEnv(
        [spec] * num_envs,
        context="forkserver",
        autoreset_mode=AutoresetMode.DISABLED,
    )


def reset_envs(
    envs: gym.vector.VectorEnv, mask: np.ndarray, seeds: Sequence[int | None]
) -> dict[str, np.ndarray]:
    """Reset the envs where `mask` is True with `seeds` (one per reset env, in env order).

    Returns:
        The batched observations: the new first observations where reset, the current ones
        elsewhere.
    """
    mask = np.asarray(mask, bool)
    if len(seeds) != int(mask.sum()):
        raise ValueError(f"{int(mask.sum())} envs to reset but {len(seeds)} seeds given")
    seed_of_env: list[int | None] = [None] * envs.num_envs
    for env_index, seed in zip(np.flatnonzero(mask), seeds, strict=True):
        seed_of_env[env_index] = seed
    obs, _ = envs.reset(seed=seed_of_env, options={"reset_mask": mask})
    return obs
