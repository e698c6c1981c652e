"""Composite RLT envs and the base-policy evaluation of a Stage 1 checkpoint.

`RPent/PegInsertion-RLT-v0` = peg env (cameras at the checkpoint's image size) ->
`RLTObservation` (embedded default checkpoint) -> `PolicySwitch` with `AutoGate` in drop-in mode
(`skip_inactive=True`): the VLA reference drives until the gate opens near the hole, then every
`step` is the agent's chunk.

`RPent/FrankaPegInsertion-RLT-v0` = Franka env -> `RLTObservation` (a Stage 1 checkpoint trained
on Franka demonstrations, or a feature server; reference chunk 20, actor chunk 10) ->
`PolicySwitch` with the operator's `KeyboardTrigger` in drop-in mode: the VLA reference drives
until the operator presses `b`.

`rpent_envs` registers both ids with string entry points into this module, which are not
imports, so `rpent_envs` never imports `rpent_agents`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import tyro
from tqdm import tqdm

from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, load_featurizer, read_config
from rpent_envs import FRANKA_ID, PEG_INSERTION_ID
from rpent_envs.franka.env import ACTION_DIM as FRANKA_ACTION_DIM
from rpent_envs.franka.env import STATE_DIM as FRANKA_STATE_DIM
from wrappers.policy_switch import PolicySwitch
from wrappers.rlt import RLTObservation
from wrappers.triggers import AutoGate, KeyboardTrigger, SwitchTrigger

logger = logging.getLogger(__name__)


def _peg_with_features(
    checkpoint: Path | None, chunk_len: int, device: str, render_backend: str
) -> RLTObservation:
    folder = Path(checkpoint) if checkpoint else DEFAULT_CHECKPOINT_DIR
    image_size = read_config(folder)["vla"]["image_size"]
    env = gym.make(
        PEG_INSERTION_ID, obs_mode="rgb", image_size=image_size, render_backend=render_backend
    )
    return RLTObservation(env, load_featurizer(folder, device), chunk_len=chunk_len)


def make_peg_rlt(
    checkpoint: str | None = None,
    chunk_len: int = 10,
    device: str = "cpu",
    render_backend: Literal["auto", "cpu", "gpu"] = "auto",
    skip_inactive: bool = True,
    trigger_mode: Literal["auto", "always_on"] = "auto",
    max_skipped_episodes: int = 100,
) -> gym.Env:
    """Build `RPent/PegInsertion-RLT-v0` (see the module doc).

    Args:
        checkpoint: Stage 1 checkpoint folder; None: the embedded default.
        chunk_len: Actor chunk length H.
        device: Where the feature model runs ("cpu", "cuda").
        render_backend: SAPIEN render device of the peg env.
        skip_inactive: Drop-in mode of the policy switch (the agent sees actor chunks only).
        trigger_mode: AutoGate mode; "always_on" hands every chunk to the agent.
        max_skipped_episodes: Episodes one drop-in `reset()` may run before it gives up.

    Returns:
        The composite env; `step` takes a flat (H*A,) chunk in [-1, 1].
    """
    featurized = _peg_with_features(checkpoint, chunk_len, device, render_backend)
    return PolicySwitch(
        featurized,
        AutoGate(trigger_mode=trigger_mode),
        skip_inactive=skip_inactive,
        max_skipped_episodes=max_skipped_episodes,
    )


def _franka_feature_model(
    checkpoint: str | None, feature_server: str | None, device: str, franka_kwargs: dict
) -> Any:
    """The feature model of the Franka RLT env, checked against the Franka observation."""
    if (checkpoint is None) == (feature_server is None):
        raise ValueError(
            "RPent/FrankaPegInsertion-RLT-v0 needs exactly one feature source: "
            "checkpoint=<Stage 1 folder trained on Franka demonstrations> or "
            "feature_server='host:port' (a GPU box running rpent-feature-server)"
        )
    if feature_server is not None:
        from rpent_agents.features.remote import RemoteFeatureModel

        host, _, port = feature_server.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"feature_server={feature_server!r}: give 'host:port'")
        return RemoteFeatureModel(host, int(port))
    vla_config = read_config(Path(checkpoint))["vla"]
    for name, franka_value in (("state_dim", FRANKA_STATE_DIM), ("action_dim", FRANKA_ACTION_DIM)):
        if vla_config[name] != franka_value:
            raise ValueError(
                f"checkpoint {checkpoint} was trained with {name}={vla_config[name]}, the Franka "
                f"env has {name}={franka_value}: train Stage 1 on Franka demonstrations"
            )
    for camera in ("camera", "wrist_camera"):
        if franka_kwargs.get(camera, "none") == "none":
            raise ValueError(
                f"the built-in feature model reads image and wrist_image: pass {camera}= "
                "('realsense' or a camera object)"
            )
    return load_featurizer(Path(checkpoint), device)


def make_franka_rlt(
    checkpoint: str | None = None,
    feature_server: str | None = None,
    chunk_len: int = 10,
    device: str = "cpu",
    trigger: SwitchTrigger | None = None,
    skip_inactive: bool = True,
    max_skipped_episodes: int = 100,
    **franka_kwargs: Any,
) -> gym.Env:
    """Build `RPent/FrankaPegInsertion-RLT-v0` (see the module doc).

    Args:
        checkpoint: Stage 1 checkpoint folder trained on Franka data (state 19, action 7; the
            reference trains it with `--vla.chunk-len 20`); needs both cameras.
        feature_server: "host:port" of an `rpent-feature-server` instead of a checkpoint.
        chunk_len: Actor chunk length H (10; the reference chunk may be longer).
        device: Where the checkpoint's feature model runs ("cpu", "cuda").
        trigger: Who hands control to the actor; default: `KeyboardTrigger()` (key `b`).
        skip_inactive: Drop-in mode of the policy switch (the agent sees actor chunks only).
        max_skipped_episodes: In drop-in mode, episodes one `reset()` may run without a press.
        **franka_kwargs: Arguments of `RPent/Franka-v0` (`host`, `backend`, `camera`,
            `wrist_camera`, `success_fn`, any `FrankaConfig` field).

    Returns:
        The composite env; `step` takes a flat (H*7,) chunk in [-1, 1].
    """
    feature_model = _franka_feature_model(checkpoint, feature_server, device, franka_kwargs)
    featurized = RLTObservation(gym.make(FRANKA_ID, **franka_kwargs), feature_model, chunk_len)
    return PolicySwitch(
        featurized,
        trigger if trigger is not None else KeyboardTrigger(),
        skip_inactive=skip_inactive,
        max_skipped_episodes=max_skipped_episodes,
    )


class RLTStackEnv(gym.Env):
    """A composite RLT env as one env object that owns its wrapper stack.

    The stack (raw env -> `RLTObservation` -> `PolicySwitch`) holds live objects (the feature
    model, the trigger) that a Gymnasium spec cannot describe, so the registered entry points
    are subclasses of this class, which build the stack from keyword arguments alone:
    `gym.make(env.spec)` rebuilds it. Attributes of the inner wrappers stay reachable through
    `get_wrapper_attr` (e.g. `actor_ready`, `raw_observation`); `stack` is the stack itself.
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


class PegInsertionRLTEnv(RLTStackEnv):
    """`RPent/PegInsertion-RLT-v0`; keyword arguments: those of `make_peg_rlt`.

    Example:
        >>> env = gym.make("RPent/PegInsertion-RLT-v0")
        >>> obs, info = env.reset(seed=0)  # runs the VLA reference until the gate opens
        >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    """

    def build_stack(self, **kwargs: Any) -> gym.Env:
        """Peg env -> `RLTObservation` -> `PolicySwitch` with `AutoGate`."""
        return make_peg_rlt(**kwargs)

    @property
    def peg_env(self) -> gym.Env:
        """The raw peg env at the bottom of the stack (task, privileged state)."""
        return self.stack.unwrapped


class FrankaPegInsertionRLTEnv(RLTStackEnv):
    """`RPent/FrankaPegInsertion-RLT-v0`; keyword arguments: those of `make_franka_rlt`.

    Example:
        >>> env = gym.make("RPent/FrankaPegInsertion-RLT-v0", checkpoint="ckpt/franka",
        ...                host="172.16.0.2", camera="realsense", wrist_camera="realsense")
        >>> obs, info = env.reset()  # the reference drives until the operator presses b
    """

    def build_stack(self, **kwargs: Any) -> gym.Env:
        """Franka env -> `RLTObservation` -> `PolicySwitch` with `KeyboardTrigger`."""
        return make_franka_rlt(**kwargs)


@dataclass
class EvalArgs:
    """Success rate of a Stage 1 checkpoint as a base policy (reference chunks only)."""

    checkpoint: Path | None = None
    """Checkpoint folder; default: the embedded one."""
    num_episodes: int = 50
    seed: int = 0
    """Episode i resets with seed + i (demonstrations from rpent-collect --seed 1000 stay apart)."""
    chunk_len: int = 10
    """Steps executed from each reference chunk before featurizing again."""
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"
    report_json: Path | None = None
    """Also write the report (success rate, successful seeds) to this JSON file."""


def run_base_policy_episode(env: RLTObservation, seed: int) -> bool:
    """Drive one episode with reference chunks only; True when it ends in success."""
    observation, info = env.reset(seed=seed)
    terminated = truncated = False
    while not (terminated or truncated):
        observation, _, terminated, truncated, info = env.step_chunk(observation["ref_chunk"])
    return bool(info["success"])


def evaluate_base_policy(args: EvalArgs) -> dict[str, Any]:
    """Run `args.num_episodes` seeded episodes; returns the success rate and the seeds."""
    env = _peg_with_features(args.checkpoint, args.chunk_len, args.device, args.render_backend)
    successes = []
    try:
        progress = tqdm(range(args.seed, args.seed + args.num_episodes), desc="base policy")
        for seed in progress:
            successes.append(run_base_policy_episode(env, seed))
            progress.set_postfix(success_rate=float(np.mean(successes)))
    finally:
        env.close()
    seeds = list(range(args.seed, args.seed + args.num_episodes))
    return {
        "success_rate": float(np.mean(successes)),
        "successful_seeds": [seed for seed, ok in zip(seeds, successes, strict=True) if ok],
        "seeds": seeds,
        "checkpoint": str(args.checkpoint or DEFAULT_CHECKPOINT_DIR),
    }


def main() -> None:
    """Entry point of `rpent-eval-base`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = tyro.cli(EvalArgs)
    report = evaluate_base_policy(args)
    if args.report_json is not None:
        args.report_json.write_text(json.dumps(report, indent=2))
    print(f"success rate {report['success_rate']:.2f} over {len(report['seeds'])} seeds")


if __name__ == "__main__":
    main()
