"""Gymnasium wrappers of RPent: policy switching, RLT featurization, recording, the operator.

The operator's modules are the human in the loop: keys, outcome, teleop takeover, console.

Every module here is light (gymnasium and numpy; no torch, no simulator), so the public names
are imported eagerly: `from wrappers import PolicySwitch, RecordTrajectory`.
"""

from wrappers.chunking import ChunkResult, StepPolicy, execute_chunk, state_step_policy
from wrappers.console import OperatorConsole
from wrappers.key_source import KeyboardUnavailableError, KeyPressQueue, PynputKeySource
from wrappers.operator import OperatorKeys, OperatorOutcome
from wrappers.policy_switch import ChunkSource, PolicySwitch
from wrappers.record import RecordTrajectory
from wrappers.rlt import RLTFeatureSource, RLTObservation
from wrappers.takeover import ExpertTakeover, as_step_policy
from wrappers.teleop import (
    HumanTakeover,
    KeyboardTeleop,
    SpaceMouseTeleop,
    TeleopDevice,
    TeleopUnavailableError,
)
from wrappers.triggers import AutoGate, KeyboardTrigger, SwitchTrigger, SwitchUpdate

__all__ = [
    "AutoGate",
    "ChunkResult",
    "ChunkSource",
    "ExpertTakeover",
    "HumanTakeover",
    "KeyPressQueue",
    "KeyboardTeleop",
    "KeyboardTrigger",
    "KeyboardUnavailableError",
    "OperatorConsole",
    "OperatorKeys",
    "OperatorOutcome",
    "PolicySwitch",
    "PynputKeySource",
    "RLTFeatureSource",
    "RLTObservation",
    "RecordTrajectory",
    "SpaceMouseTeleop",
    "StepPolicy",
    "SwitchTrigger",
    "SwitchUpdate",
    "TeleopDevice",
    "TeleopUnavailableError",
    "as_step_policy",
    "execute_chunk",
    "state_step_policy",
]
