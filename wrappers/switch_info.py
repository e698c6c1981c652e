"""What a `PolicySwitch` adds to each step's and reset's info: the keys and their values.

The keys are named in `wrappers.info_keys`; what each means is stated in `PolicySwitch`'s
docstring.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from wrappers.info_keys import (
    ACTION_SOURCE_KEY,
    ACTOR_SWITCH_KEY,
    EXECUTED_ACTION_KEY,
    INTERVENE_FLAG_KEY,
    INTERVENTION_REQUESTED_KEY,
    NEXT_ACTION_SOURCE_KEY,
    RECORD_TRANSITION_KEY,
    RLT_POLICY_SWITCH_EVENT_KEY,
    RLT_SWITCH_FLAGS_KEY,
)
from wrappers.triggers import SwitchEvent

DriverSource = Literal["vla", "actor", "expert", "human"]
"""Who drives a chunk: the VLA reference, the learning actor, the expert or a human."""
SWITCH_INFO_KEYS: tuple[str, ...] = (
    RLT_SWITCH_FLAGS_KEY,
    RLT_POLICY_SWITCH_EVENT_KEY,
    ACTOR_SWITCH_KEY,
    RECORD_TRANSITION_KEY,
    INTERVENTION_REQUESTED_KEY,
    INTERVENE_FLAG_KEY,
    EXECUTED_ACTION_KEY,
    ACTION_SOURCE_KEY,
    NEXT_ACTION_SOURCE_KEY,
)
"""The keys the switch adds to every step's and reset's info (`wrappers.info_keys`)."""


def switch_info(
    *,
    source: DriverSource | None,
    decided_in_critical_phase: bool,
    decided_takeover: bool,
    executed_actions: np.ndarray,
    event: SwitchEvent | None,
    switch_on: bool,
    next_source: DriverSource,
) -> dict[str, Any]:
    """The switch's info of the chunk just executed (or of a reset), keyed by `SWITCH_INFO_KEYS`.

    Args:
        source: Who drove the chunk; None at a reset.
        decided_in_critical_phase: The critical phase was on when the chunk was decided.
        decided_takeover: A takeover was latched or engaged when the chunk was decided.
        executed_actions: The chunk's executed actions, (chunk_len, A); (0, A) at a reset.
        event: The trigger's event after the chunk: None, "enter_actor", "actor_already_active".
        switch_on: The critical phase is on for what comes next.
        next_source: Who drives the next chunk.

    Returns:
        One value for each of `SWITCH_INFO_KEYS`.
    """
    return {
        RLT_SWITCH_FLAGS_KEY: switch_on,
        RLT_POLICY_SWITCH_EVENT_KEY: event,
        ACTOR_SWITCH_KEY: source == "actor",
        RECORD_TRANSITION_KEY: decided_in_critical_phase,
        INTERVENTION_REQUESTED_KEY: decided_takeover,
        INTERVENE_FLAG_KEY: source in ("expert", "human"),
        EXECUTED_ACTION_KEY: executed_actions,
        ACTION_SOURCE_KEY: source,
        NEXT_ACTION_SOURCE_KEY: next_source,
    }
