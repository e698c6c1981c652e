"""Where each executed action came from: the provenance channel between deciders and recorder.

Code that decides actions (a planner loop, a VLA tool, the policy-switch wrapper, a teleop
script) reports to a `ProvenanceLog` and never needs to know whether anything records: it asks
`provenance_of(env)`, which returns the log of the `RecordTrajectory` wrapper in the env's stack,
or a `NullProvenance` that drops everything when no recorder is there.

The log labels actions *before* they execute: `set_action_source` says who drives from now on;
each executed action is recorded with the current label and, for VLA actions, its index within
the prediction advances by one per executed action. Predicted actions that never execute are
never written, because only executed actions are recorded.

A prediction is made by a VLA (`vla_prediction`) or, in the actor-data flywheel, by the RL actor
(`prediction(..., source="actor")`, logged inside its own `actor` tool call): the actions that
execute it are labelled with the same source, call id and prediction id.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import gymnasium as gym

ActionSource = Literal["vla", "scripted", "actor", "expert", "human"]
ACTION_SOURCES: tuple[str, ...] = ("vla", "scripted", "actor", "expert", "human")
PredictionSource = Literal["vla", "actor"]
PREDICTION_SOURCES: tuple[str, ...] = ("vla", "actor")
"""Sources whose actions execute a logged prediction (a record without a source is "vla")."""
PROVENANCE_ATTR = "provenance"


@runtime_checkable
class ProvenanceLog(Protocol):
    """What a recorder offers to code that decides actions."""

    def model_request(self, model: str, messages: Any) -> str:
        """Log a request to a planner model; returns its request id."""
        ...

    def model_reply(self, request_id: str, content: Any) -> None:
        """Log the model's reply to `request_id`."""
        ...

    def tool_call(self, name: str, arguments: dict[str, Any], request_id: str | None = None) -> str:
        """Log a tool call (optionally made by reply `request_id`); returns its call id."""
        ...

    def tool_result(self, call_id: str, result: Any) -> None:
        """Log what tool call `call_id` returned."""
        ...

    def vla_prediction(self, call_id: str | None, instruction: str, model: str) -> str:
        """Log a VLA prediction made inside tool call `call_id`; returns its prediction id."""
        ...

    def prediction(
        self,
        call_id: str | None,
        instruction: str,
        model: str,
        source: PredictionSource = "vla",
    ) -> str:
        """Log a prediction of `model` (a VLA or the RL actor); returns its prediction id."""
        ...

    def set_action_source(
        self,
        source: ActionSource,
        call_id: str | None = None,
        prediction_id: str | None = None,
        start_index: int = 0,
    ) -> None:
        """Label the actions executed from now on (until the next call)."""
        ...


class NullProvenance:
    """A `ProvenanceLog` that records nothing (no recorder in the stack)."""

    def model_request(self, model: str, messages: Any) -> str:  # noqa: D102
        return ""

    def model_reply(self, request_id: str, content: Any) -> None:  # noqa: D102
        return None

    def tool_call(  # noqa: D102
        self, name: str, arguments: dict[str, Any], request_id: str | None = None
    ) -> str:
        return ""

    def tool_result(self, call_id: str, result: Any) -> None:  # noqa: D102
        return None

    def vla_prediction(self, call_id: str | None, instruction: str, model: str) -> str:  # noqa: D102
        return ""

    def prediction(  # noqa: D102
        self,
        call_id: str | None,
        instruction: str,
        model: str,
        source: PredictionSource = "vla",
    ) -> str:
        return ""

    def set_action_source(  # noqa: D102
        self,
        source: ActionSource,
        call_id: str | None = None,
        prediction_id: str | None = None,
        start_index: int = 0,
    ) -> None:
        return None


def provenance_of(env: gym.Env) -> ProvenanceLog:
    """The provenance log of the recorder in `env`'s wrapper stack, or a no-op log.

    Args:
        env: Any env or wrapper stack.

    Returns:
        The `provenance` attribute of the nearest wrapper that has one, else `NullProvenance()`.
    """
    try:
        return env.get_wrapper_attr(PROVENANCE_ATTR)
    except AttributeError:
        return NullProvenance()


def label_chunk(
    log: ProvenanceLog, source: ActionSource, instruction: str, model: str
) -> str | None:
    """Label the actions of the chunk about to execute; log a prediction's chunk as one.

    A chunk of a prediction source ("vla", "actor") is logged as `rpent-run` and the policy
    switch log it: a tool call named after the source with the instruction as argument, a
    prediction of `model` inside it, and the label (source, call id, prediction id), so the
    flywheel can export its actions. Other sources ("expert", "human", ...) get the label
    alone.

    Args:
        log: The provenance log (`provenance_of(env)`).
        source: Who drives the chunk.
        instruction: The env's instruction (a prediction without one is not exported).
        model: Who predicted the chunk (the prediction's `model`).

    Returns:
        The tool call's id, for its result (`log.tool_result`); None without a prediction.
    """
    if source not in PREDICTION_SOURCES:
        log.set_action_source(source)
        return None
    call_id = log.tool_call(source, {"instruction": instruction})
    prediction_id = log.prediction(call_id, instruction, model, source)
    log.set_action_source(source, call_id=call_id, prediction_id=prediction_id)
    return call_id


def instruction_of(env: gym.Env, info: dict[str, Any]) -> str:
    """The env's language instruction (`info["task"]` or `task_description`).

    Raises:
        ValueError: When the env gives none (a prediction needs one to be exported).
    """
    instruction = info.get("task") or getattr(env.unwrapped, "task_description", None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(
            f"env {env.spec.id if env.spec else env} gives no instruction (info['task'] or"
            " task_description); a prediction needs one"
        )
    return instruction
