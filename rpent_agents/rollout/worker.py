"""One worker of the Stage 2 training vector env: the peg RLT stack without its feature model.

`RLTWorkerFactory` builds, inside each worker process, peg env (CPU physics; intermediate steps
of a chunk render nothing) -> `PolicySwitch` with `AutoGate` -> `RLTWorker`, with
`skip_inactive=False`: one step executes one chunk, the VLA reference driving outside the
critical phase and the actor (or the reference during warm-up, or an expert takeover) inside
it. The reference chunk is not computed here: the learner's process featurizes the worker's
observation (`rpent_agents.rollout.vector.FeaturizedVectorEnv`) and sends the chunk with the
actor's (`SuppliedReference`). A worker whose chunk ends its episode starts the next one with
the seed sent along, so no worker waits for a reset round trip.

Example:
    >>> worker = RLTWorkerFactory(PegRLTConfig(render_backend="cpu"))()
    >>> obs, info = worker.reset(seed=100_000)
    >>> sorted(obs)
    ['image', 'state', 'wrist_image']
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rpent_agents.rollout.rlt_stack import PegRLTConfig
from wrappers.info_keys import (
    ACTION_SOURCE_KEY,
    CHUNK_LEN_KEY,
    CHUNK_REWARDS_KEY,
    EXECUTED_ACTION_KEY,
    STEP_INFOS_KEY,
)
from wrappers.policy_switch import PolicySwitch
from wrappers.takeover import ExpertTakeover
from wrappers.triggers import AutoGate

# Per-step infos stay in the worker: the trainer needs the chunk-level keys only, and every
# step's info would be pickled through the pipe once per chunk.
_DROPPED_INFO_KEYS = (STEP_INFOS_KEY,)
NO_RESET_SEED = -1
MAX_SEED = 2**31 - 1
INSTRUCTION_KEY = "task"
"""Info key of the instruction (the env's own; the worker sets the next episode's at a reset)."""
DISCARDED_KEY = "episode_discarded"
"""Info key of the envs whose episode was lost with its worker and started over (Ray rollouts:
`rpent_agents.rollout.ray_vector_env`); their step produced no chunk."""
CRITICAL_PHASE_KEY = "critical_phase"
"""bool: the chunk was decided inside the critical phase of the reference `AutoGate`."""
LOST_GRASP_ENDED_KEY = "lost_grasp_ended"
"""bool: `end_lost_grasps` ended the episode at this chunk (the actor lost the peg)."""
FINAL_OBS_KEY = "final_obs"
"""The raw last observation of the episode the chunk ended, when the worker reset itself."""
WORKER_CHUNK_S_KEY = "worker_chunk_s"
"""float: seconds the worker spent simulating the chunk."""
WORKER_RENDER_S_KEY = "worker_render_s"
"""float: of `worker_chunk_s`, the seconds spent rendering and reading the cameras."""
WORKER_RESET_S_KEY = "worker_reset_s"
"""float: seconds the worker spent starting the next episode inside the step (0: none)."""


@dataclass(frozen=True)
class WorkerMode:
    """What the workers do, set on all of them at once (`FeaturizedVectorEnv.set_worker_mode`).

    Each field is the `RLTWorker` attribute of the same name (`actor_ready`: its
    `PolicySwitch`'s); `training` and `evaluation` give the two modes a Stage 2 run uses.

    Attributes:
        actor_ready: The actor drives the critical phase (False: the reference does).
        expert_takeover_enabled: The expert takes over stalls, from the next reset.
        end_lost_grasps: A peg the actor drops ends the episode, from the next reset.
        rebuild_scenes: The workers' own resets rebuild the scene from their seed.
    """

    actor_ready: bool
    expert_takeover_enabled: bool
    end_lost_grasps: bool
    rebuild_scenes: bool

    @classmethod
    def training(cls, actor_ready: bool, config: PegRLTConfig) -> WorkerMode:
        """Training: the stack's expert takeover and lost-grasp ends; scenes kept."""
        return cls(actor_ready, config.expert_takeover, config.end_on_lost_grasp, False)

    @classmethod
    def evaluation(cls, actor_ready: bool) -> WorkerMode:
        """Evaluation: no expert, no lost-grasp ends, every scene rebuilt from its seed."""
        return cls(actor_ready, False, False, True)


class SuppliedReference:
    """The reference chunk of the current observation, handed in from outside the worker.

    The policy switch asks it for the reference chunk (a `reference` callable); the worker
    stores the chunk that the learner featurized for the current observation before each step.
    """

    def __init__(self, horizon: int) -> None:
        """Answer with the first `horizon` actions of the supplied chunk."""
        self.horizon = horizon
        self.chunk: np.ndarray | None = None

    def __call__(self, observation: Any) -> np.ndarray:
        """The supplied chunk, (horizon, A)."""
        if self.chunk is None:
            raise RuntimeError("no reference chunk was supplied with this step's action")
        return self.chunk[: self.horizon]


class RLTWorker(gym.Wrapper):
    """The peg RLT stack without its feature model, as one worker of a training vector env.

    The action is a Dict: `actor`, the actor's flat chunk (H*A,), `ref_chunk`, the reference
    chunk (H_ref, A) that the learner featurized from this worker's current observation (the
    policy switch below picks the driver), and `reset_seed`: when the chunk ends the episode
    and `reset_seed` >= 0, the worker starts the next episode with that seed at once and
    returns its first observation, the last one going to `info["final_obs"]` (no reset
    round trip, so the other workers never wait for it); -1 leaves the reset to the caller.
    The observation is the raw one of the peg env (`image`, `wrist_image`, `state`) at the
    chunk boundary.

    Gymnasium's vector API stacks each info key into one array, which needs the same shape in
    every env. A chunk that ends early executes fewer than H steps, so this wrapper pads
    `executed_action` to (H, A) and `chunk_rewards` to (H,) with zeros; `chunk_len` says how
    many rows are real (`rpent_agents.stage2.chunk_info.ChunkInfo` reads only those).
    `step_infos` is dropped.

    The worker's mode (`WorkerMode`, set on every worker at once):
    `expert_takeover_enabled` switches the stalled-progress expert on or off from the next
    reset (evaluation turns it off); `actor_ready` reaches the `PolicySwitch` below;
    `rebuild_scenes` makes the worker's own resets rebuild the scene from their seed
    (evaluation turns it on, so a held-out seed alone defines its episode).
    `end_lost_grasps` (training only, from the next reset) ends the episode as failed
    (terminated, no reward) when a chunk the actor drove loses the peg: held at the end of
    the chunk before (for the gate window's `min_grasp_steps`), not at its end, the task not solved.
    The critic then values a dropped peg as the evaluation finds it, with no expert to grasp
    it again; `info["lost_grasp_ended"]` marks those chunks.

    Two more info keys measure the run: `critical_phase` (the chunk was decided inside the
    critical phase as the reference `AutoGate` defines it, whatever gate the switch uses, so
    runs with different gates count the same steps) and the worker's seconds,
    `worker_chunk_s` (simulating the chunk), `worker_render_s` (the part of it spent rendering
    the cameras and reading their images back, by the peg env's `rendering_s` clock; 0 for an
    env without one) and `worker_reset_s` (starting the next episode inside the step; 0 when
    none started).

    Example:
        >>> worker = RLTWorkerFactory(PegRLTConfig(render_backend="cpu", expert_takeover=True))()
        >>> worker.expert_takeover_enabled = False  # from the next reset on
        >>> obs, info = worker.reset(seed=0)
        >>> info["executed_action"].shape, info["chunk_len"]
        ((10, 8), 0)
    """

    def __init__(
        self,
        env: gym.Env,
        reference: SuppliedReference,
        ref_chunk_len: int,
        takeover: ExpertTakeover | None = None,
    ) -> None:
        """Wrap the switch stack `env`.

        Args:
            env: A stack with a `PolicySwitch` over a per-step env whose reference is
                `reference`.
            reference: The switch's reference source, fed from each action's `ref_chunk`.
            ref_chunk_len: H_ref, actions in each supplied reference chunk.
            takeover: The expert takeover the worker may switch on.
        """
        super().__init__(env)
        self.switch = _find_policy_switch(env)
        self.phase_gate = AutoGate()
        self.reference = reference
        self.takeover = takeover
        self.expert_takeover_enabled = takeover is not None
        self.rebuild_scenes = False
        self.end_lost_grasps = False
        self._ending_lost_grasps = False
        self.held = False
        self.chunk_len, self.action_dim = self.switch.horizon, self.switch.action_dim
        step_space = self.switch.env.action_space
        ref_shape = (ref_chunk_len, self.action_dim)
        ref_space = gym.spaces.Box(
            np.broadcast_to(step_space.low, ref_shape).astype(np.float32),
            np.broadcast_to(step_space.high, ref_shape).astype(np.float32),
            dtype=np.float32,
        )
        seed_space = gym.spaces.Box(NO_RESET_SEED, MAX_SEED, (), np.int64)
        self.action_space = gym.spaces.Dict(
            {"actor": env.action_space, "ref_chunk": ref_space, "reset_seed": seed_space}
        )

    @property
    def expert_takeover_enabled(self) -> bool:
        """Whether the expert takeover acts in the episodes started from now on."""
        return self._takeover_wanted

    @expert_takeover_enabled.setter
    def expert_takeover_enabled(self, enabled: bool) -> None:
        if enabled and self.takeover is None:
            raise ValueError(
                "expert_takeover_enabled=True on a worker built without an expert; "
                "build it with PegRLTConfig(expert_takeover=True)"
            )
        self._takeover_wanted = bool(enabled)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode (applying `expert_takeover_enabled` and `end_lost_grasps`)."""
        self.switch.expert_takeover = self.takeover if self._takeover_wanted else None
        self._ending_lost_grasps = self.end_lost_grasps
        self.reference.chunk = None
        self.phase_gate.reset()
        self.held = False
        obs, info = self.env.reset(seed=seed, options=options or None)
        return obs, self._fixed_shape(info, critical_phase=False)

    def step(
        self, action: dict[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """Execute one chunk (the driver's); infos padded."""
        self.reference.chunk = np.asarray(action["ref_chunk"], dtype=np.float32)
        started_s, rendering_started_s = time.perf_counter(), self._rendering_s()
        critical_phase = self.phase_gate.active
        obs, reward, terminated, truncated, info = self.env.step(action["actor"])
        self.phase_gate.update(info[STEP_INFOS_KEY])
        lost_grasp_ended = self._actor_lost_the_peg(info) and not (terminated or truncated)
        terminated = terminated or lost_grasp_ended
        info = self._fixed_shape(info, critical_phase)
        info[LOST_GRASP_ENDED_KEY] = lost_grasp_ended
        info[WORKER_CHUNK_S_KEY], info[WORKER_RESET_S_KEY] = time.perf_counter() - started_s, 0.0
        info[WORKER_RENDER_S_KEY] = self._rendering_s() - rendering_started_s
        reset_seed = int(action.get("reset_seed", NO_RESET_SEED))
        if (terminated or truncated) and reset_seed != NO_RESET_SEED:
            info[FINAL_OBS_KEY] = obs
            reset_started_s = time.perf_counter()
            options = {"reconfigure": True} if self.rebuild_scenes else None
            obs, reset_info = self.reset(seed=reset_seed, options=options)
            info[WORKER_RESET_S_KEY] = time.perf_counter() - reset_started_s
            info[INSTRUCTION_KEY] = reset_info.get(INSTRUCTION_KEY, info.get(INSTRUCTION_KEY))
        return obs, reward, terminated, truncated, info

    def _rendering_s(self) -> float:
        """The peg env's rendering clock (seconds since it was built; 0.0 without one)."""
        return float(getattr(self.unwrapped, "rendering_s", 0.0))

    def _actor_lost_the_peg(self, info: dict[str, Any]) -> bool:
        """Whether this chunk ends its episode under `end_lost_grasps` (tracks the grasp).

        Reads the grasp streak that `phase_gate` counted over the chunk's steps.
        """
        gate = self.phase_gate
        held = gate.window.held(gate.grasp_streak.steps)
        lost, self.held = self.held and not held, held
        if not (self._ending_lost_grasps and lost and info[ACTION_SOURCE_KEY] == "actor"):
            return False
        return not bool(info[STEP_INFOS_KEY][-1]["success"])

    def _fixed_shape(self, info: dict[str, Any], critical_phase: bool) -> dict[str, Any]:
        info = {key: value for key, value in info.items() if key not in _DROPPED_INFO_KEYS}
        info[CRITICAL_PHASE_KEY] = critical_phase
        executed = np.asarray(info[EXECUTED_ACTION_KEY], np.float32).reshape(-1, self.action_dim)
        rewards = np.asarray(info.get(CHUNK_REWARDS_KEY, ()), np.float32)  # none after a reset
        info[CHUNK_LEN_KEY] = len(executed)
        info[EXECUTED_ACTION_KEY] = _zero_padded(executed, self.chunk_len)
        info[CHUNK_REWARDS_KEY] = _zero_padded(rewards, self.chunk_len)
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


@dataclass
class RLTWorkerFactory:
    """Builds one worker's env from the stack config; a picklable env factory.

    Attributes:
        config: The peg RLT stack (its feature settings are used by the learner's process).
        torch_threads: CPU threads of each worker's torch (many workers share the cores).
    """

    config: PegRLTConfig
    torch_threads: int = 1

    def __call__(self) -> RLTWorker:
        """Build the worker env (runs inside the worker process)."""
        torch.set_num_threads(self.torch_threads)
        config = self.config
        peg_env = config.make_peg_env()
        reference = SuppliedReference(config.chunk_len)
        switch = PolicySwitch(
            peg_env,
            config.make_gate(),
            reference=reference,
            expert_takeover=None,  # the worker switches it per episode
            horizon=config.chunk_len,
        )
        ref_chunk_len = config.vla_config()["chunk_len"]
        takeover = config.make_takeover(peg_env)
        return RLTWorker(config.limit_chunks(switch), reference, ref_chunk_len, takeover)
