"""The options both composite RLT envs take besides their config: `StackOptions`.

The policy switch's options (drop-in mode, the operator's teleop takeover, logging the
predictions) and the wrappers of the raw env below `RLTObservation` (`raw_wrappers`: a robot
run puts `wrappers.OperatorOutcome` and `RecordTrajectory` there), as gym.make keyword
arguments of `RPent/PegInsertion-RLT-v0` and `RPent/FrankaPegInsertion-RLT-v0`
(`rpent_agents.rollout.rlt_stack`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from wrappers.policy_switch import PolicySwitch
from wrappers.takeover import ExpertTakeover
from wrappers.teleop import HumanTakeover
from wrappers.triggers import SwitchTrigger

RawWrapper = Callable[[gym.Env], gym.Env]
"""Wraps the raw per-step env of a stack (e.g. `OperatorOutcome`, `RecordTrajectory`)."""


@dataclass
class StackOptions:
    """What both RLT stacks take besides their config (gym.make keyword arguments of both ids).

    The policy switch's options, and the wrappers of the raw env below `RLTObservation`.
    """

    skip_inactive: bool = True
    """Drop-in mode of the policy switch (the agent sees actor chunks only)."""
    max_skipped_episodes: int = 100
    """In drop-in mode, episodes one `reset()` may run before it gives up."""
    raw_wrappers: Sequence[RawWrapper] = field(default_factory=tuple)
    """Applied to the raw env, bottom first, below `RLTObservation`."""
    human_takeover: HumanTakeover | None = None
    """The operator's teleop takeover (`PolicySwitch(human_takeover=...)`); None: off."""
    log_predictions: bool = False
    """The switch logs the VLA's and the actor's chunks as predictions (flywheel export)."""

    def wrap_raw(self, env: gym.Env) -> gym.Env:
        """`env` under `raw_wrappers`, the first one innermost."""
        for wrap in self.raw_wrappers:
            env = wrap(env)
        return env

    def switch(
        self, env: gym.Env, trigger: SwitchTrigger, expert_takeover: ExpertTakeover | None = None
    ) -> PolicySwitch:
        """The stack's `PolicySwitch` over `env` with these options."""
        return PolicySwitch(
            env,
            trigger,
            expert_takeover=expert_takeover,
            human_takeover=self.human_takeover,
            skip_inactive=self.skip_inactive,
            max_skipped_episodes=self.max_skipped_episodes,
            log_predictions=self.log_predictions,
        )


def pop_fields(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The items of `kwargs` that are fields of dataclass `cls`, removed from `kwargs`."""
    names = {item.name for item in dataclasses.fields(cls)}
    return {key: kwargs.pop(key) for key in names & set(kwargs)}
