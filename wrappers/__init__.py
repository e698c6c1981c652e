"""Gymnasium wrappers of RPent: policy switching, RLT featurization, trajectory recording.

Every module here is light (gymnasium and numpy; no torch, no simulator), so the public names
are imported eagerly: `from wrappers import PolicySwitch, RecordTrajectory`.
"""

from wrappers.chunking import ChunkResult, StepPolicy, execute_chunk, state_step_policy
from wrappers.key_source import KeyboardUnavailableError, KeyPressQueue
from wrappers.policy_switch import ChunkSource, PolicySwitch
from wrappers.record import RecordTrajectory
from wrappers.rlt import RLTFeatureSource, RLTObservation
from wrappers.takeover import ExpertTakeover, as_step_policy
from wrappers.triggers import AutoGate, KeyboardTrigger, SwitchTrigger, SwitchUpdate

__all__ = [
    "AutoGate",
    "ChunkResult",
    "ChunkSource",
    "ExpertTakeover",
    "KeyPressQueue",
    "KeyboardTrigger",
    "KeyboardUnavailableError",
    "PolicySwitch",
    "RLTFeatureSource",
    "RLTObservation",
    "RecordTrajectory",
    "StepPolicy",
    "SwitchTrigger",
    "SwitchUpdate",
    "as_step_policy",
    "execute_chunk",
    "state_step_policy",
]
