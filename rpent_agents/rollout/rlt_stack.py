"""The peg RLT stack's one config, its composite env, and what every composite RLT env is.

`PegRLTConfig` holds every knob of the peg RLT stack (checkpoint, chunk length, devices,
render backend, gate mode, expert takeover, chunk limit). The composite env, the training
workers (`rpent_agents.rollout.vector`), training (`rpent-stage2`), evaluation (`rpent-eval-rlt`)
and the SB3 example all read it, so each knob has one name.

`RPent/PegInsertion-RLT-v0` = peg env (cameras at the checkpoint's image size) ->
`RLTObservation` (embedded default checkpoint) -> `PolicySwitch` with `AutoGate` in drop-in mode
(`skip_inactive=True`, whose rules `PolicySwitch` states): the VLA reference drives until the
gate opens near the hole, then every `step` is the agent's chunk. Its keyword arguments are the
fields of `PegRLTConfig` plus `skip_inactive`, `max_skipped_episodes` and the stack keywords
below.

`RLTStackEnv` is what both composite ids are: `RPent/FrankaPegInsertion-RLT-v0`'s stack lives
in `rpent_agents.rollout.franka_stack`.

Both ids also take the stack keywords (`rpent_agents.rollout.stack_options.StackOptions`):
`raw_wrappers`, callables env -> env applied to the raw env, bottom first (a robot run puts
`wrappers.OperatorOutcome` and `RecordTrajectory` there), `human_takeover` (a
`wrappers.HumanTakeover`: the operator's teleop) and `log_predictions` (the switch logs the
VLA's and the actor's chunks as predictions, so the records export with `rpent-flywheel`).

`rpent_envs` registers both ids with string entry points into these modules, which are not
imports, so `rpent_envs` never imports `rpent_agents`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rpent_agents.common.devices import resolve_device
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, load_featurizer, read_config
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.rollout.stack_options import StackOptions, pop_fields
from rpent_envs import PEG_INSERTION_ID
from wrappers.rlt import RLTObservation
from wrappers.takeover import ExpertTakeover
from wrappers.triggers import AutoGate, TriggerMode

logger = logging.getLogger(__name__)
RenderBackend = Literal["auto", "cpu", "gpu"]
GATE_FIELDS = ("trigger_mode", "missed_grasp_chunks")
"""The `PegRLTConfig` fields of its `AutoGate`: when the agent drives."""


@dataclass
class PegRLTConfig:
    """The peg RLT stack: peg env -> feature model -> policy switch (AutoGate)."""

    checkpoint: Path | None = None
    """Stage 1 checkpoint folder of the feature model; None: the embedded default."""
    chunk_len: int = 10
    """Actor chunk length H: steps executed per chunk (at most the checkpoint's chunk)."""
    feature_device: str = "auto"
    """Torch device of the feature model ("auto": cuda when available, else cpu)."""
    feature_cuda_graphs: bool = True
    """On a CUDA `feature_device`, run the built-in feature model as one captured CUDA graph
    per batch-size bucket (`rpent_agents.features.graphed`: the same outputs up to float
    rounding, a few launches instead of hundreds per call); False keeps the eager model.
    Ignored on the CPU."""
    render_backend: RenderBackend = "auto"
    """SAPIEN render device of the peg env ("auto": gpu with CUDA, else cpu); physics: CPU."""
    trigger_mode: TriggerMode = "auto"
    """AutoGate mode: "auto", the critical phase near the hole (the RLT recipe); "always_on"
    hands every chunk to the agent, so it also drives the grasp."""
    missed_grasp_chunks: int | None = None
    """With trigger_mode "auto": also hand control to the agent after this many chunks in a
    row without the peg held (a missed or lost grasp: the reference keeps every approach that
    works); None: the critical phase near the hole alone (the RLT recipe)."""
    expert_takeover: bool = False
    """Let the scripted expert take over stalled critical phases (training only)."""
    end_on_lost_grasp: bool = False
    """Training only (Stage 2 workers): end the episode as failed when a chunk the agent drove
    loses the peg (held before it, not after it; the task not solved), instead of letting the
    episode, and an expert takeover, grasp it again; evaluations never end episodes so."""
    takeover_window: Literal["critical-phase", "reference"] = "critical-phase"
    """Which stalls the expert takes over: any in the critical phase, or only those inside
    the reference's window (x >= -0.10 m, |y|, |z| <= 2 hole radii, grasped), which misses
    most stalls of this task (bench/RESULTS.md, issue 13 diagnosis)."""
    reconfiguration_freq: int = 1
    """Resets per scene of the peg env: 1 builds a new scene (new peg and box sizes) at every
    reset; k > 1 keeps it for k resets, which makes resets several times cheaper (sizes still
    vary every k episodes; seeded evaluations rebuild every scene: `reset_envs`)."""
    ungrasped_chunks_before_takeover: int = 3
    """With takeover_window "critical-phase": chunks in a row ending with the peg not held
    (dropped, or not yet grasped when the agent drives from the start) after which the expert
    takes over."""
    max_episode_chunks: int | None = None
    """Truncate episodes after this many chunks (steps of the composite env); None: the peg
    env's 500-step limit alone."""

    def __post_init__(self) -> None:
        """Accept a checkpoint given as a string (gym.make kwargs, JSON)."""
        if self.checkpoint is not None:
            self.checkpoint = Path(self.checkpoint)
        if self.chunk_len < 1:
            raise ValueError(f"PegRLTConfig.chunk_len must be >= 1, got {self.chunk_len}")

    @classmethod
    def sample_efficient(cls, **overrides: Any) -> PegRLTConfig:
        """`rpent-stage2 sample-efficient`'s stack, with `overrides` applied.

        Scenes kept for 8 resets (cheaper resets), the expert taking over stalls, and a second
        gated phase after 4 chunks without the peg held, where many of the base's failures lie
        (docs/agents/training.md#presets-and-options).
        """
        preset = {"reconfiguration_freq": 8, "expert_takeover": True, "missed_grasp_chunks": 4}
        return cls(**(preset | overrides))

    @property
    def checkpoint_dir(self) -> Path:
        """The checkpoint folder in use (the embedded default when none is given)."""
        return self.checkpoint or DEFAULT_CHECKPOINT_DIR

    def vla_config(self) -> dict[str, Any]:
        """The checkpoint's VLA config (image size, reference chunk length, dims)."""
        return read_config(self.checkpoint_dir)["vla"]

    def make_featurizer(self) -> RLTFeaturizer:
        """The checkpoint's featurizer on `feature_device` (`feature_cuda_graphs` applied)."""
        device = resolve_device(self.feature_device)
        return load_featurizer(self.checkpoint_dir, device, self.feature_cuda_graphs)

    def make_peg_env(self, **kwargs: Any) -> gym.Env:
        """The raw peg env with cameras at the checkpoint's image size."""
        return gym.make(
            PEG_INSERTION_ID,
            obs_mode="rgb",
            image_size=self.vla_config()["image_size"],
            render_backend=self.render_backend,
            reconfiguration_freq=self.reconfiguration_freq,
            **kwargs,
        )

    def gate_settings(self) -> dict[str, Any]:
        """The fields that decide when the agent drives (`GATE_FIELDS`), as plain values.

        A Stage 2 run stores them with its actor (`save_weights`), so whoever acts with the
        actor later opens the gate as in training (`with_gate_settings`).
        """
        return {name: getattr(self, name) for name in GATE_FIELDS}

    def with_gate_settings(self, settings: Mapping[str, Any]) -> PegRLTConfig:
        """This config with the gate fields of `settings` (others are kept).

        Raises:
            ValueError: When `settings` names a field that is not a gate field.
        """
        unknown = sorted(set(settings) - set(GATE_FIELDS))
        if unknown:
            raise ValueError(f"gate settings {unknown} are not among {list(GATE_FIELDS)}")
        return dataclasses.replace(self, **settings)

    def make_gate(self) -> AutoGate:
        """The critical-phase gate of the stack."""
        return AutoGate(
            trigger_mode=self.trigger_mode, missed_grasp_chunks=self.missed_grasp_chunks
        )

    def make_takeover(self, peg_env: gym.Env) -> ExpertTakeover | None:
        """The stalled-progress expert takeover on `peg_env`, or None when switched off."""
        if not self.expert_takeover:
            return None
        from rpent_envs.maniskill.expert import PegInsertionExpert  # imports the simulator

        expert = PegInsertionExpert(peg_env)
        if self.takeover_window == "reference":
            return ExpertTakeover(expert)
        return ExpertTakeover.whole_critical_phase(
            expert, ungrasped_chunks_before_takeover=self.ungrasped_chunks_before_takeover
        )

    def limit_chunks(self, env: gym.Env) -> gym.Env:
        """`env` under the chunk limit (unchanged when there is none)."""
        if self.max_episode_chunks is None:
            return env
        return gym.wrappers.TimeLimit(env, self.max_episode_chunks)


def make_peg_rlt(config: PegRLTConfig | None = None, **options: Any) -> gym.Env:
    """Build `RPent/PegInsertion-RLT-v0` (see the module doc).

    Args:
        config: The stack's knobs; default `PegRLTConfig()`.
        **options: Fields of `StackOptions`: `skip_inactive` (drop-in mode),
            `max_skipped_episodes`, `raw_wrappers`, `human_takeover`, `log_predictions`.

    Returns:
        The composite env; `step` takes a flat (H*A,) chunk in [-1, 1].
    """
    config = config or PegRLTConfig()
    options = StackOptions(**options)
    peg_env = config.make_peg_env()
    featurized = RLTObservation(
        options.wrap_raw(peg_env), config.make_featurizer(), chunk_len=config.chunk_len
    )
    switch = options.switch(featurized, config.make_gate(), config.make_takeover(peg_env))
    return config.limit_chunks(switch)


class RLTStackEnv(gym.Env):
    """A composite RLT env as one env object that owns its wrapper stack.

    The stack (raw env -> `RLTObservation` -> `PolicySwitch`) holds live objects (the feature
    model, the trigger) that a Gymnasium spec cannot describe, so the registered entry points
    are subclasses of this class, which build the stack from keyword arguments alone:
    `gym.make(env.spec)` rebuilds it. Attributes of the inner wrappers stay reachable through
    `get_wrapper_attr` and `set_wrapper_attr` (e.g. `actor_ready`, `raw_observation`); `stack`
    is the stack itself.
    """

    metadata = {"render_modes": []}

    def __init__(self, **kwargs: Any) -> None:
        """Build the stack from the keyword arguments of `build_stack`."""
        self.stack = self.build_stack(**kwargs)
        self.observation_space = self.stack.observation_space
        self.action_space = self.stack.action_space

    def build_stack(self, **kwargs: Any) -> gym.Env:
        """The wrapper stack of this env."""
        raise NotImplementedError

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the stack (drop-in mode: up to the first chunk the agent drives)."""
        super().reset(seed=seed)
        return self.stack.reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """Execute one chunk; see `PolicySwitch.step` for the info keys."""
        return self.stack.step(action)

    def close(self) -> None:
        """Close the stack and the robot or simulator below it."""
        self.stack.close()

    def get_wrapper_attr(self, name: str) -> Any:
        """An attribute of this env, else of the first inner wrapper that has it."""
        if name in self.__dict__ or hasattr(type(self), name):
            return getattr(self, name)
        return self.stack.get_wrapper_attr(name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        """Set an attribute of this env, else of the first inner wrapper that has it.

        `env.set_wrapper_attr("actor_ready", False)` reaches the stack's `PolicySwitch`. A
        name nobody has is set on this env when `force` is True.
        """
        if name in self.__dict__ or hasattr(type(self), name):
            setattr(self, name, value)
            return True
        if self.stack.set_wrapper_attr(name, value, force=False):
            return True
        if force:
            setattr(self, name, value)
        return force


class PegInsertionRLTEnv(RLTStackEnv):
    """`RPent/PegInsertion-RLT-v0`, built by `make_peg_rlt`.

    Keyword arguments: the fields of `PegRLTConfig` and of `StackOptions` (`skip_inactive`,
    `max_skipped_episodes`, `raw_wrappers`, `human_takeover`, `log_predictions`).

    Example:
        >>> env = gym.make("RPent/PegInsertion-RLT-v0")
        >>> obs, info = env.reset(seed=0)  # runs the VLA reference until the gate opens
        >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    """

    def build_stack(self, **kwargs: Any) -> gym.Env:
        """Peg env -> `RLTObservation` -> `PolicySwitch` with `AutoGate`."""
        options = pop_fields(StackOptions, kwargs)
        return make_peg_rlt(PegRLTConfig(**kwargs), **options)

    @property
    def peg_env(self) -> gym.Env:
        """The raw peg env at the bottom of the stack (task, privileged state)."""
        return self.stack.unwrapped
