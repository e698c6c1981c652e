"""The Franka RLT stack's one config and its composite env, `RPent/FrankaPegInsertion-RLT-v0`.

Franka env -> `RLTObservation` (a Stage 1 checkpoint trained on Franka demonstrations, or a
feature server; reference chunk 20, actor chunk 10; the knobs of this stack are
`FrankaRLTConfig`'s) -> `PolicySwitch` with the operator's `KeyboardTrigger` in drop-in mode:
the VLA reference drives until the operator presses `b`. The id also takes the stack keywords
of every composite RLT env (`rpent_agents.rollout.stack_options.StackOptions`; see
`rpent_agents.rollout.rlt_stack`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from rpent_agents.common.devices import resolve_device
from rpent_agents.features.checkpoint import load_featurizer, read_config
from rpent_agents.rollout.rlt_stack import RLTStackEnv
from rpent_agents.rollout.stack_options import StackOptions, pop_fields
from rpent_envs import FRANKA_ID
from rpent_envs.franka.env import ACTION_DIM as FRANKA_ACTION_DIM
from rpent_envs.franka.env import STATE_DIM as FRANKA_STATE_DIM
from wrappers.rlt import RLTObservation
from wrappers.triggers import KeyboardTrigger, SwitchTrigger


@dataclass
class FrankaRLTConfig:
    """The Franka RLT stack: Franka env -> feature model -> policy switch (KeyboardTrigger).

    The feature source is required, exactly one of `checkpoint` and `feature_server`; the
    Franka env's own arguments (`host`, `backend`, cameras, `FrankaConfig` fields) are passed
    beside it to `make_franka_rlt`.
    """

    checkpoint: Path | None = None
    """Stage 1 checkpoint folder trained on Franka data (state 19, action 7; the reference
    trains it with `--vla.chunk-len 20`); needs both cameras."""
    feature_server: str | None = None
    """"host:port" of an `rpent-feature-server` instead of a checkpoint."""
    chunk_len: int = 10
    """Actor chunk length H (the reference chunk may be longer)."""
    feature_device: str = "auto"
    """Where the checkpoint's feature model runs ("auto", "cpu", "cuda")."""
    feature_cuda_graphs: bool = True
    """On a CUDA `feature_device`, the checkpoint's CUDA-graph fast path (as
    `PegRLTConfig.feature_cuda_graphs`); False keeps the eager model. Ignored on the CPU."""

    def __post_init__(self) -> None:
        """Accept a checkpoint given as a string (gym.make kwargs, JSON)."""
        if self.checkpoint is not None:
            self.checkpoint = Path(self.checkpoint)
        if self.chunk_len < 1:
            raise ValueError(f"FrankaRLTConfig.chunk_len must be >= 1, got {self.chunk_len}")

    def make_feature_model(self, franka_kwargs: dict[str, Any]) -> Any:
        """The feature model, checked against the Franka observation of `franka_kwargs`.

        Raises:
            ValueError: Without exactly one feature source, for a malformed `host:port`, a
                checkpoint of other sizes or a missing camera of the built-in model.
        """
        if (self.checkpoint is None) == (self.feature_server is None):
            raise ValueError(
                "RPent/FrankaPegInsertion-RLT-v0 needs exactly one feature source: "
                "checkpoint=<Stage 1 folder trained on Franka demonstrations> or "
                "feature_server='host:port' (a GPU box running rpent-feature-server)"
            )
        if self.feature_server is not None:
            from rpent_agents.features.remote import RemoteFeatureModel

            host, _, port = self.feature_server.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"feature_server={self.feature_server!r}: give 'host:port'")
            return RemoteFeatureModel(host, int(port))
        self._check_checkpoint_fits(franka_kwargs)
        device = resolve_device(self.feature_device)
        return load_featurizer(self.checkpoint, device, self.feature_cuda_graphs)

    def _check_checkpoint_fits(self, franka_kwargs: dict[str, Any]) -> None:
        vla_config = read_config(self.checkpoint)["vla"]
        for name, franka_value in (
            ("state_dim", FRANKA_STATE_DIM),
            ("action_dim", FRANKA_ACTION_DIM),
        ):
            if vla_config[name] != franka_value:
                raise ValueError(
                    f"checkpoint {self.checkpoint} was trained with {name}={vla_config[name]}, "
                    f"the Franka env has {name}={franka_value}: train Stage 1 on Franka "
                    "demonstrations"
                )
        for camera in ("camera", "wrist_camera"):
            if franka_kwargs.get(camera, "none") == "none":
                raise ValueError(
                    f"the built-in feature model reads image and wrist_image: pass {camera}= "
                    "('realsense' or a camera object)"
                )


def make_franka_rlt(
    config: FrankaRLTConfig | None = None,
    *,
    trigger: SwitchTrigger | None = None,
    **kwargs: Any,
) -> gym.Env:
    """Build `RPent/FrankaPegInsertion-RLT-v0` (see the module docstring).

    Args:
        config: The stack's knobs (the feature source is required).
        trigger: Who hands control to the actor; default: `KeyboardTrigger()` (key `b`).
        **kwargs: Fields of `StackOptions` (`skip_inactive`, `max_skipped_episodes`: in
            drop-in mode, episodes one `reset()` may run without a press, `raw_wrappers`,
            `human_takeover`, `log_predictions`), and the arguments of `RPent/Franka-v0`
            (`host`, `backend`, `camera`, `wrist_camera`, `success_fn`, any `FrankaConfig`
            field).

    Returns:
        The composite env; `step` takes a flat (H*7,) chunk in [-1, 1].
    """
    config = config or FrankaRLTConfig()
    options = StackOptions(**pop_fields(StackOptions, kwargs))
    feature_model = config.make_feature_model(kwargs)
    franka_env = options.wrap_raw(gym.make(FRANKA_ID, **kwargs))
    featurized = RLTObservation(franka_env, feature_model, config.chunk_len)
    return options.switch(featurized, trigger if trigger is not None else KeyboardTrigger())


class FrankaPegInsertionRLTEnv(RLTStackEnv):
    """`RPent/FrankaPegInsertion-RLT-v0`, built by `make_franka_rlt`.

    Keyword arguments: the fields of `FrankaRLTConfig` and of `StackOptions`, `trigger` and
    those of `RPent/Franka-v0`.

    Example:
        >>> env = gym.make("RPent/FrankaPegInsertion-RLT-v0", checkpoint="ckpt/franka",
        ...                host="172.16.0.2", camera="realsense", wrist_camera="realsense")
        >>> obs, info = env.reset()  # the reference drives until the operator presses b
    """

    def build_stack(self, **kwargs: Any) -> gym.Env:
        """Franka env -> `RLTObservation` -> `PolicySwitch` with `KeyboardTrigger`."""
        return make_franka_rlt(FrankaRLTConfig(**pop_fields(FrankaRLTConfig, kwargs)), **kwargs)
