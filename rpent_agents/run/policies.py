"""The policies `rpent-run` drives an env with: one decision per action chunk.

Before each chunk a policy reads the raw observation (DESIGN.md §2) and the env's instruction
and answers with a `ChunkDecision`: the chunk, who drove it (`driver`: "vla", "actor" or
"expert"; "human" is a person at a teleop device, which no policy here is) and who predicted
it (`model`). `rpent_agents.run.episodes` logs each decision as a
prediction inside a tool call named after its provenance source, then executes the chunk.

- `VLAPolicy`: the built-in feature model of a Stage 1 checkpoint; the first H actions of its
  reference chunk, clipped to the action bounds (as `wrappers.RLTObservation` does).
- `ActorPolicy`: a Stage 2 actor on the peg RLT stack (`PegRLTConfig`; the embedded default
  actor unless another is given): the actor's chunk while the stack's `AutoGate` is open (the
  critical phase), the VLA reference outside it.
- `ExpertPolicy`: a scripted expert (peg, LIBERO) as the VLA stand-in, as in the flywheel
  examples: its chunks are logged as VLA predictions of model `scripted-expert-as-vla:<class>`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

import gymnasium as gym
import numpy as np

from recorders.provenance import ActionSource
from rpent_agents.common.devices import resolve_device
from rpent_agents.features.builtin import CAMERA_KEYS, STATE_KEY
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, load_featurizer, read_config
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.stage2 import DEFAULT_ACTOR_DIR, RLTDims, TrainedActor, load_actor
from rpent_envs import LIBERO_ID, PEG_INSERTION_ID
from wrappers.chunking import ChunkResult, StepPolicy, state_step_policy
from wrappers.rlt import rlt_observation_space, rlt_observations
from wrappers.triggers import SwitchTrigger

Driver = Literal["vla", "actor", "expert", "human"]
"""Who drove a chunk: the VLA's reference, the Stage 2 actor, a scripted expert, or a person
at a teleop device (`wrappers.teleop.HumanTakeover`)."""
DRIVERS: tuple[Driver, ...] = get_args(Driver)

EXPERTS = {
    PEG_INSERTION_ID: "rpent_envs.maniskill.expert:PegInsertionExpert",
    LIBERO_ID: "rpent_envs.libero.expert:LiberoExpert",
}
"""Env id -> the scripted expert of `--policy expert` (imported when used)."""


@dataclass
class ChunkDecision:
    """What a policy decided for the next chunk.

    Attributes:
        driver: Who drove it ("vla", "actor", "expert", "human").
        model: Who predicted it (the prediction's `model`).
        chunk: Actions (>= H, A) in env units, or a closed-loop step policy.
    """

    driver: Driver
    model: str
    chunk: np.ndarray | StepPolicy

    @property
    def source(self) -> ActionSource:
        """The provenance source its actions are recorded with.

        An expert's chunks are recorded as VLA predictions (the expert stands in for the VLA),
        the others under their driver (a human's chunk is no prediction: it is labelled alone).
        """
        return "vla" if self.driver == "expert" else self.driver


class ChunkPolicy(Protocol):
    """What `rpent-run` asks of a policy."""

    def reset(self) -> None:
        """Start an episode (after the env's reset)."""
        ...

    def decide(self, observation: Mapping[str, Any], instruction: str) -> ChunkDecision:
        """The next chunk for the raw `observation`."""
        ...

    def observe(self, result: ChunkResult) -> None:
        """See what the chunk did (every step's info)."""
        ...


def check_env_fits_checkpoint(env: gym.Env, checkpoint_dir: Path) -> None:
    """Refuse an env whose observation or action does not fit the checkpoint's VLA.

    Raises:
        ValueError: Naming what differs (camera keys, state or action dimension) and the fix.
    """
    vla = read_config(checkpoint_dir)["vla"]
    spaces = getattr(env.observation_space, "spaces", {})
    missing = [key for key in (*CAMERA_KEYS, STATE_KEY) if key not in spaces]
    if missing:
        raise ValueError(
            f"the VLA of {checkpoint_dir} reads {[*CAMERA_KEYS, STATE_KEY]}; the env's"
            f" observation lacks {missing} (it has {sorted(spaces)}): make the env with both"
            " cameras (obs_mode='rgb'; Franka: camera= and wrist_camera=)"
        )
    for name, space in (("state_dim", spaces[STATE_KEY]), ("action_dim", env.action_space)):
        if space.shape != (vla[name],):
            raise ValueError(
                f"checkpoint {checkpoint_dir} was trained with {name}={vla[name]}, the env's"
                f" {'state' if name == 'state_dim' else 'action'} has shape {space.shape}:"
                " use a checkpoint trained on this env"
            )


class VLAPolicy:
    """The reference chunks of a Stage 1 checkpoint's built-in VLA."""

    def __init__(
        self, env: gym.Env, checkpoint: Path | None, chunk_len: int, device: str = "auto"
    ) -> None:
        """Load the checkpoint (None: the embedded default) and check it fits `env`.

        Raises:
            ValueError: When the env does not fit the checkpoint, or `chunk_len` is longer
                than its reference chunk.
        """
        self.checkpoint_dir = Path(checkpoint or DEFAULT_CHECKPOINT_DIR)
        check_env_fits_checkpoint(env, self.checkpoint_dir)
        self.featurizer = load_featurizer(self.checkpoint_dir, resolve_device(device))
        if not 1 <= chunk_len <= self.featurizer.chunk_len:
            raise ValueError(
                f"chunk_len={chunk_len}: use 1 to the checkpoint's reference chunk length"
                f" {self.featurizer.chunk_len}"
            )
        self.chunk_len = chunk_len
        state_space = env.observation_space[STATE_KEY]
        self.space = rlt_observation_space(self.featurizer, state_space, env.action_space)
        self.model = f"rpent-builtin-vla:{self.checkpoint_dir}"

    def reset(self) -> None:  # noqa: D102
        return None

    def features(self, observation: Mapping[str, Any], instruction: str) -> dict[str, np.ndarray]:
        """The RLT observation (`z_rl`, `proprio`, `ref_chunk`) of one raw observation, batched."""
        return rlt_observations(self.featurizer, [observation], [instruction], self.space)

    def reference(self, features: Mapping[str, np.ndarray]) -> ChunkDecision:
        """The VLA's decision: the first H actions of the reference chunk."""
        return ChunkDecision("vla", self.model, features["ref_chunk"][0, : self.chunk_len])

    def decide(self, observation: Mapping[str, Any], instruction: str) -> ChunkDecision:  # noqa: D102
        return self.reference(self.features(observation, instruction))

    def observe(self, result: ChunkResult) -> None:  # noqa: D102
        return None


class ActorPolicy:
    """A Stage 2 actor in the critical phase, the VLA reference outside it (evaluation mode)."""

    def __init__(
        self, vla: VLAPolicy, actor: TrainedActor, gate: SwitchTrigger, model: str
    ) -> None:
        """Drive with the mean chunks of `actor` while `gate` is open.

        Args:
            vla: The feature model (the actor reads its features) and the reference.
            actor: A Stage 2 actor (as `load_actor` gives it, with its Q filter if any).
            gate: The critical-phase trigger (the peg stack's `AutoGate`).
            model: The actor's name in its predictions.
        """
        self.vla, self.actor, self.gate, self.model = vla, actor, gate, model
        self.critical = False

    @classmethod
    def on_peg_stack(
        cls,
        env: gym.Env,
        config: PegRLTConfig,
        stage2_run: Path | None = None,
        actor_gate: bool = True,
    ) -> ActorPolicy:
        """The actor of a Stage 2 run folder or weights.pt on the peg stack of `config`.

        Args:
            env: The raw peg env.
            config: The stack (checkpoint, chunk length, device, gate).
            stage2_run: The actor's run folder or weights file; None: the embedded default
                actor (`rpent_agents.stage2.DEFAULT_ACTOR_DIR`).
            actor_gate: Open the gate as the actor was trained (`TrainedActor.gate`, in
                place of the gate fields of `config`); False: the gate of `config`.
        """
        vla = VLAPolicy(env, config.checkpoint, config.chunk_len, config.feature_device)
        dims = RLTDims.from_observation_space(vla.space)
        device = resolve_device(config.feature_device)
        actor = load_actor(stage2_run, dims, config.chunk_len, device)
        if actor_gate:
            config = config.with_gate_settings(actor.gate)
        model = f"rpent-stage2-actor:{stage2_run or DEFAULT_ACTOR_DIR}"
        return cls(vla, actor, config.make_gate(), model=model)

    def reset(self) -> None:
        """Close the gate (or open it at once with `trigger_mode="always_on"`)."""
        self.critical = self.gate.reset().active

    def decide(self, observation: Mapping[str, Any], instruction: str) -> ChunkDecision:
        """The actor's chunk in the critical phase, else the VLA's reference chunk."""
        features = self.vla.features(observation, instruction)
        if not self.critical:
            return self.vla.reference(features)
        flat_chunk = self.actor.act(features)[0]
        return ChunkDecision("actor", self.model, flat_chunk.reshape(self.vla.chunk_len, -1))

    def observe(self, result: ChunkResult) -> None:
        """Update the gate with the infos of the chunk's steps."""
        self.critical = self.gate.update(result.step_infos).active


class ExpertPolicy:
    """A scripted expert, logged as the VLA stand-in (one prediction per chunk)."""

    def __init__(self, expert: Any) -> None:
        """Drive with `expert.act()` (reads simulator state, one action per step)."""
        self.expert = expert
        self.model = f"scripted-expert-as-vla:{type(expert).__name__}"

    @classmethod
    def for_env(cls, env: gym.Env, env_id: str) -> ExpertPolicy:
        """The scripted expert of `env_id` attached to `env`.

        Raises:
            ValueError: When the env has no scripted expert.
        """
        if env_id not in EXPERTS:
            raise ValueError(
                f"--policy expert: env {env_id} has no scripted expert; experts exist for"
                f" {sorted(EXPERTS)}"
            )
        module_name, class_name = EXPERTS[env_id].split(":")
        return cls(getattr(importlib.import_module(module_name), class_name)(env))

    def reset(self) -> None:  # noqa: D102
        return None

    def decide(self, observation: Mapping[str, Any], instruction: str) -> ChunkDecision:  # noqa: D102
        return ChunkDecision("expert", self.model, state_step_policy(self.expert.act))

    def observe(self, result: ChunkResult) -> None:  # noqa: D102
        return None
