"""Which recorded actions become dataset frames: the export rules of DESIGN.md §7 as pure checks.

A task is exported only when `result.environment_success` is exactly true. An action is kept
only when it is a VLA action uniquely linked to a valid prediction (an existing tool call,
a non-empty instruction, the same call id as the action). Every record that is dropped gets one
named reason, the first rule it breaks; the reasons are the keys of the export report.

The actor-data flywheel is opt in: with "actor" among the exported sources, an action of the
RL actor is kept under the same rules, linked to a prediction whose `source` is "actor" (the
actor's prediction in its own tool call). A prediction's source must be its actions' source; a
prediction record without one is a VLA prediction, as every record written before the field.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recorders.provenance import ACTION_SOURCES, PREDICTION_SOURCES
from recorders.record_format import SCHEMA_VERSION, JsonlContents, float_from_json

VERDICT_REASONS = (
    "run_unfinished",
    "record_write_failed",
    "environment_success_null",
    "environment_success_false",
    "environment_success_not_bool",
)
"""Task reasons of a well-formed `task.json` that is not exported: the recorder did not finish
it, could not write all of its records (a full disk), or its env verdict is not exactly true."""
DEFAULT_SOURCES = ("vla",)
"""Sources exported by default: VLA actions only (DESIGN.md §7)."""


class Rejected(Exception):
    """A record broke the rule named by `reason`."""

    def __init__(self, reason: str) -> None:
        """Keep the reason (a report key)."""
        super().__init__(reason)
        self.reason = reason


@dataclass
class KeptAction:
    """An executed action of an exported source that passed every record rule (images unread)."""

    step: int
    action: np.ndarray
    observation: dict[str, Any]
    instruction: str
    starts_chunk: bool
    """Executed at the step its prediction was made (the chunk's first action): the only
    frame whose observation the prediction saw."""


@dataclass
class ActionSelection:
    """The kept actions of one task and every dropped record counted by reason."""

    kept: list[KeptAction] = field(default_factory=list)
    actions_seen: int = 0
    excluded_actions: Counter[str] = field(default_factory=Counter)
    excluded_predictions: Counter[str] = field(default_factory=Counter)
    excluded_planner_records: Counter[str] = field(default_factory=Counter)


def _require(record: dict[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    """`record[name]` when present and of `types` (bool is never an int here)."""
    if name not in record:
        raise Rejected("missing_field")
    value = record[name]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise Rejected("wrong_type")
    if not isinstance(value, types):
        raise Rejected("wrong_type")
    return value


def task_exclusion(task: dict[str, Any]) -> str | None:
    """Why a whole task is not exported; None when its env verdict is exactly true."""
    try:
        version = _require(task, "schema_version", int)
        if version != SCHEMA_VERSION:
            return "unsupported_schema_version"
        _require(task, "task_id", str)
        _require(task, "env_id", (str, type(None)))
        _require(task, "robot", (str, type(None)))
        if _require(task, "fps", int) <= 0:
            return "task_json_wrong_type"
        finished_at = _require(task, "finished_at", (str, type(None)))
        result = _require(task, "result", dict)
        verdict = result["environment_success"] if "environment_success" in result else None
    except Rejected as rejected:
        return f"task_json_{rejected.reason}"
    if finished_at is None:
        return "run_unfinished"  # the recorder never wrote the end: killed, crashed, disk full
    if result.get("record_write_error") is not None:
        return "record_write_failed"
    if verdict is None:
        return "environment_success_null"
    if verdict is False:
        return "environment_success_false"
    if verdict is not True:
        return "environment_success_not_bool"
    return None


def exported_sources(include_sources: tuple[str, ...]) -> tuple[str, ...]:
    """The exported action sources: the VLA's and the included ones.

    Raises:
        ValueError: For a source whose actions are not linked to predictions (only "actor"
            can be included).
    """
    extra = [source for source in PREDICTION_SOURCES if source not in DEFAULT_SOURCES]
    unknown = [source for source in include_sources if source not in extra]
    if unknown:
        raise ValueError(
            f"include_sources={list(include_sources)}: {unknown} cannot be exported; only"
            f" {extra} can be included (sources whose actions execute a logged prediction;"
            f" {list(DEFAULT_SOURCES)} is always exported)"
        )
    return (*DEFAULT_SOURCES, *(source for source in extra if source in include_sources))


def _count_lines(contents: JsonlContents, counter: Counter[str]) -> None:
    for _, reason in contents.problems:
        counter[reason] += 1


def valid_tool_calls(planners: JsonlContents, excluded: Counter[str]) -> set[str]:
    """Call ids logged exactly once by a well-formed tool_call record."""
    _count_lines(planners, excluded)
    call_counts: Counter[str] = Counter()
    for _, record in planners.records:
        if record.get("type") != "tool_call":
            continue
        try:
            call_id = _require(record, "call_id", str)
            _require(record, "name", str)
        except Rejected as rejected:
            excluded[f"tool_call_{rejected.reason}"] += 1
            continue
        call_counts[call_id] += 1
    duplicated = sum(count for count in call_counts.values() if count > 1)
    if duplicated:
        excluded["tool_call_duplicate_id"] += duplicated
    return {call_id for call_id, count in call_counts.items() if count == 1}


def _check_prediction(record: dict[str, Any], tool_calls: set[str]) -> str | None:
    """Why a prediction record is invalid, None when valid."""
    try:
        _require(record, "model", str)
        if _require(record, "step", int) < 0:
            return "wrong_type"
        call_id = _require(record, "call_id", (str, type(None)))
        instruction = _require(record, "instruction", str)
        source = _require(record, "source", str) if "source" in record else "vla"
    except Rejected as rejected:
        return rejected.reason
    if source not in PREDICTION_SOURCES:
        return "source_unknown"
    if call_id is None:
        return "no_tool_call"
    if call_id not in tool_calls:
        return "tool_call_unknown"
    if not instruction.strip():
        return "empty_instruction"
    return None


def index_predictions(
    predictions: JsonlContents, tool_calls: set[str], excluded: Counter[str]
) -> dict[str, dict[str, Any] | str]:
    """Prediction id -> its record when valid, else the reason it is invalid."""
    _count_lines(predictions, excluded)
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, record in predictions.records:
        prediction_id = record.get("prediction_id")
        if not isinstance(prediction_id, str) or not prediction_id:
            excluded["missing_field" if prediction_id is None else "wrong_type"] += 1
            continue
        by_id[prediction_id].append(record)
    index: dict[str, dict[str, Any] | str] = {}
    for prediction_id, records in by_id.items():
        reason = "duplicate_id" if len(records) > 1 else _check_prediction(records[0], tool_calls)
        if reason is not None:
            excluded[reason] += len(records)
        index[prediction_id] = records[0] if reason is None else reason
    return index


def _parse_action(record: dict[str, Any]) -> tuple[int, np.ndarray]:
    """Step and float32 action of an action record (any source)."""
    step = _require(record, "step", int)
    values = _require(record, "action", list)
    _require(record, "source", (str, type(None)))
    observation = _require(record, "observation", dict)
    if step < 0 or not values or not observation:
        raise Rejected("wrong_type")
    floats = [float_from_json(value) for value in values]
    if any(value is None for value in floats):
        raise Rejected("wrong_type")
    action = np.asarray(floats, dtype=np.float32)
    if not np.all(np.isfinite(action)):
        raise Rejected("action_not_finite")
    return step, action


def _link_prediction(
    record: dict[str, Any],
    step: int,
    predictions: dict[str, dict[str, Any] | str],
    sources: tuple[str, ...],
) -> tuple[str, int, dict[str, Any]]:
    """(prediction id, index, prediction record) of an action of an exported source, or Rejected."""
    source = record["source"]
    if source not in sources:
        if source is None:
            raise Rejected("source_unlabeled")
        raise Rejected(f"source_{source}" if source in ACTION_SOURCES else "source_unknown")
    prediction_id = record.get("prediction_id")
    if prediction_id is None:
        raise Rejected("prediction_id_missing")
    call_id = _require(record, "call_id", (str, type(None)))
    index = _require(record, "index", int)
    if not isinstance(prediction_id, str) or index < 0:
        raise Rejected("wrong_type")
    prediction = predictions.get(prediction_id)
    if prediction is None:
        raise Rejected("prediction_unknown")
    if isinstance(prediction, str):
        raise Rejected(f"prediction_{prediction}")
    if prediction.get("source", "vla") != source:
        raise Rejected("prediction_of_other_source")
    if prediction["call_id"] != call_id:
        raise Rejected("prediction_in_other_tool_call")
    if prediction["step"] > step:
        raise Rejected("prediction_after_action")
    return prediction_id, index, prediction


def select_actions(
    planners: JsonlContents,
    predictions: JsonlContents,
    actions: JsonlContents,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
) -> ActionSelection:
    """Apply the action rules to the records of one successful task.

    Args:
        planners: Lines of `planners.jsonl`.
        predictions: Lines of `predictions.jsonl`.
        actions: Lines of `actions.jsonl`.
        sources: Action sources to keep, each linked to a prediction of its own source
            (members of `PREDICTION_SOURCES`).

    Returns:
        Kept actions in step order and every dropped record counted by reason.
    """
    selection = ActionSelection()
    tool_calls = valid_tool_calls(planners, selection.excluded_planner_records)
    prediction_index = index_predictions(predictions, tool_calls, selection.excluded_predictions)
    _count_lines(actions, selection.excluded_actions)
    selection.actions_seen = len(actions.records) + len(actions.problems)
    parsed: list[tuple[int, np.ndarray, dict[str, Any]]] = []
    for _, record in actions.records:
        try:
            step, action = _parse_action(record)
        except Rejected as rejected:
            selection.excluded_actions[rejected.reason] += 1
            continue
        parsed.append((step, action, record))
    step_counts = Counter(step for step, _, _ in parsed)
    linked: list[tuple[KeptAction, tuple[str, int]]] = []
    for step, action, record in parsed:
        try:
            if step_counts[step] > 1:
                raise Rejected("duplicate_step")
            prediction_id, index, prediction = _link_prediction(
                record, step, prediction_index, sources
            )
        except Rejected as rejected:
            selection.excluded_actions[rejected.reason] += 1
            continue
        starts_chunk = prediction["step"] == step
        kept = KeptAction(
            step, action, record["observation"], prediction["instruction"], starts_chunk
        )
        linked.append((kept, (prediction_id, index)))
    claims = Counter(claim for _, claim in linked)
    for kept, claim in linked:
        if claims[claim] > 1:
            selection.excluded_actions["prediction_index_claimed_twice"] += 1
        else:
            selection.kept.append(kept)
    selection.kept.sort(key=lambda kept: kept.step)
    return selection


def contiguous_runs(kept: list[KeptAction]) -> list[list[KeptAction]]:
    """Split step-sorted kept actions into runs of consecutive steps (one episode each)."""
    runs: list[list[KeptAction]] = []
    for action in kept:
        if runs and runs[-1][-1].step + 1 == action.step:
            runs[-1].append(action)
        else:
            runs.append([action])
    return runs
