"""The provenance half of `TrajectoryWriter`: what deciders log while a task is recorded.

`ProvenanceRecords` implements `recorders.provenance.ProvenanceLog` for a writer: planner
records (model requests and replies, tool calls and results) go to the open task's
`planners.jsonl`, predictions to `predictions.jsonl`, and `set_action_source` sets the
`ActionLabel` that each executed action is recorded with (`take_action_label`). Ids (`req-N`,
`call-N`, `pred-N`) are unique over the writer's whole life. The writer supplies the open task
(`_require_task`) and the lock shared with its own records.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from recorders import record_format as fmt
from recorders.provenance import ACTION_SOURCES, PREDICTION_SOURCES, ActionSource, PredictionSource


@dataclass
class ActionLabel:
    """Where the next executed actions come from (see `ProvenanceLog.set_action_source`)."""

    source: ActionSource | None
    call_id: str | None = None
    prediction_id: str | None = None
    next_index: int = 0


class TaskRecordFiles(Protocol):
    """What the provenance records need of the open task: its two record files and its step."""

    planners: fmt.JsonlAppender
    predictions: fmt.JsonlAppender
    step: int


class ProvenanceRecords:
    """Planner records, predictions and action labels of the open task (see the module doc)."""

    def __init__(self, default_source: ActionSource | None) -> None:
        """Start without labels; unlabelled actions are recorded with `default_source`.

        Raises:
            ValueError: For an unknown source.
        """
        _check_source(default_source, allow_none=True)
        self.default_source = default_source
        self._lock = threading.RLock()
        self._label = ActionLabel(default_source)
        self._id_counts = {"req": 0, "call": 0, "pred": 0}

    def _require_task(self) -> TaskRecordFiles:
        """The open task; the writer raises when there is none."""
        raise NotImplementedError

    def take_action_label(self) -> dict[str, Any]:
        """The label fields of the next executed action; advances the prediction index."""
        with self._lock:
            label = self._label
            fields = {
                "source": label.source,
                "call_id": label.call_id,
                "prediction_id": label.prediction_id,
                "index": label.next_index if label.prediction_id is not None else None,
            }
            if label.prediction_id is not None:
                label.next_index += 1
            return fields

    def reset_action_label(self) -> None:
        """Back to the default source (a task ends)."""
        with self._lock:
            self._label = ActionLabel(self.default_source)

    def model_request(self, model: str, messages: Any) -> str:
        """Log a request to a planner model; returns its request id."""
        request_id = self._next_id("req")
        self._log_planner("model_request", request_id=request_id, model=model, messages=messages)
        return request_id

    def model_reply(self, request_id: str, content: Any) -> None:
        """Log the model's reply to `request_id`."""
        self._log_planner("model_reply", request_id=request_id, content=content)

    def tool_call(self, name: str, arguments: dict[str, Any], request_id: str | None = None) -> str:
        """Log a tool call (optionally made by reply `request_id`); returns its call id."""
        call_id = self._next_id("call")
        self._log_planner(
            "tool_call", call_id=call_id, name=name, arguments=arguments, request_id=request_id
        )
        return call_id

    def tool_result(self, call_id: str, result: Any) -> None:
        """Log what tool call `call_id` returned."""
        self._log_planner("tool_result", call_id=call_id, result=result)

    def vla_prediction(self, call_id: str | None, instruction: str, model: str) -> str:
        """Log a VLA prediction made inside tool call `call_id` from the current observation.

        Returns:
            The prediction id, to pass to `set_action_source("vla", call_id, prediction_id)`.
        """
        return self.prediction(call_id, instruction, model, source="vla")

    def prediction(
        self,
        call_id: str | None,
        instruction: str,
        model: str,
        source: PredictionSource = "vla",
    ) -> str:
        """Log a prediction of `model` (a VLA, or the RL actor in its `actor` tool call).

        Returns:
            The prediction id, to pass to `set_action_source(source, call_id, prediction_id)`.

        Raises:
            ValueError: For a source other than "vla" and "actor".
        """
        if source not in PREDICTION_SOURCES:
            raise ValueError(f"prediction source {source!r}: use one of {PREDICTION_SOURCES}")
        with self._lock:
            task = self._require_task()
            prediction_id = self._next_id("pred")
            record = {
                "prediction_id": prediction_id,
                "call_id": call_id,
                "instruction": instruction,
                "model": model,
                "source": source,
                "step": task.step,
                "time": time.time(),
            }
            task.predictions.append(record)
            return prediction_id

    def set_action_source(
        self,
        source: ActionSource,
        call_id: str | None = None,
        prediction_id: str | None = None,
        start_index: int = 0,
    ) -> None:
        """Label the actions executed from now on (until the next call or the task's end).

        Args:
            source: "vla", "scripted", "actor", "expert" or "human".
            call_id: Tool call the actions execute.
            prediction_id: Prediction the actions come from; their index starts at
                `start_index` and advances by one per executed action.
            start_index: Index within the prediction of the next executed action.

        Raises:
            ValueError: For an unknown source or a negative `start_index`.
        """
        _check_source(source, allow_none=False)
        if isinstance(start_index, bool) or not isinstance(start_index, int) or start_index < 0:
            raise ValueError(f"start_index={start_index!r}: use an int >= 0")
        with self._lock:
            self._label = ActionLabel(source, call_id, prediction_id, start_index)

    def _next_id(self, kind: str) -> str:
        with self._lock:
            identifier = f"{kind}-{self._id_counts[kind]}"
            self._id_counts[kind] += 1
            return identifier

    def _log_planner(self, record_type: str, **fields: Any) -> None:
        with self._lock:
            task = self._require_task()
            task.planners.append(
                {"type": record_type, **fields, "step": task.step, "time": time.time()}
            )


def _check_source(source: Any, allow_none: bool) -> None:
    if source is None and allow_none:
        return
    if source not in ACTION_SOURCES:
        raise ValueError(f"action source {source!r}: use one of {ACTION_SOURCES}")
