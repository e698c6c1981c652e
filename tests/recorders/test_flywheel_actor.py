"""The actor-data flywheel: actor records under the default rules and with the actor included."""

import json

import pytest
from conftest import INSTRUCTION, Recorder
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from test_flywheel import build_tasks, edit_json_line, edit_lines

from recorders.flywheel import REPORT_FILE, export_flywheel
from recorders.trajectory import TrajectoryWriter


def build_actor_tasks(writer):
    """Each task holds actor records, well formed or breaking one rule.

    Returns task id -> (outcome under the default rules, outcome with the actor included), an
    outcome being dict(reason, frames, episodes, **excluded_actions).
    """
    expected = {}

    def expect(task_id, default, with_actor):
        expected[task_id] = (default, with_actor)

    def outcome(reason=None, frames=0, episodes=0, **excluded_actions):
        return dict(reason=reason, frames=frames, episodes=episodes, **excluded_actions)

    recorder = Recorder(writer, "actor_good")
    recorder.vla(3)
    recorder.actor(4)
    recorder.vla(2)
    recorder.finish()
    expect(
        "actor_good", outcome(frames=5, episodes=2, source_actor=4), outcome(frames=9, episodes=1)
    )

    recorder = Recorder(writer, "actor_only")
    recorder.actor(3)
    recorder.finish()
    expect(
        "actor_only",
        outcome("no_exportable_actions", source_actor=3),
        outcome(frames=3, episodes=1),
    )

    recorder = Recorder(writer, "actor_no_prediction")
    recorder.vla(2)
    writer.set_action_source("actor", call_id=writer.tool_call("actor", {}, recorder.request_id))
    recorder.act(2)
    recorder.finish()
    expect(
        "actor_no_prediction",
        outcome(frames=2, episodes=1, source_actor=2),
        outcome(frames=2, episodes=1, prediction_id_missing=2),
    )

    recorder = Recorder(writer, "actor_other_tool_call")
    actor_call = writer.tool_call("actor", {}, recorder.request_id)
    prediction_id = writer.prediction(actor_call, INSTRUCTION, "tiny-actor", "actor")
    other_call = writer.tool_call("actor", {}, recorder.request_id)
    writer.set_action_source("actor", call_id=other_call, prediction_id=prediction_id)
    recorder.act(2)
    recorder.actor(1)
    recorder.finish()
    expect(
        "actor_other_tool_call",
        outcome("no_exportable_actions", source_actor=3),
        outcome(frames=1, episodes=1, prediction_in_other_tool_call=2),
    )

    recorder = Recorder(writer, "actor_claims_vla_prediction")
    call_id, prediction_id = recorder.vla(2)
    writer.set_action_source("actor", call_id=call_id, prediction_id=prediction_id, start_index=2)
    recorder.act(2)
    recorder.finish()
    expect(
        "actor_claims_vla_prediction",
        outcome(frames=2, episodes=1, source_actor=2),
        outcome(frames=2, episodes=1, prediction_of_other_source=2),
    )

    recorder = Recorder(writer, "vla_claims_actor_prediction")
    call_id, prediction_id = recorder.actor(1)
    writer.set_action_source("vla", call_id=call_id, prediction_id=prediction_id, start_index=1)
    recorder.act(2)
    recorder.finish()
    expect(
        "vla_claims_actor_prediction",
        outcome("no_exportable_actions", source_actor=1, prediction_of_other_source=2),
        outcome(frames=1, episodes=1, prediction_of_other_source=2),
    )

    recorder = Recorder(writer, "actor_duplicate_prediction")
    recorder.actor(2)
    recorder.vla(2)
    task_dir = recorder.finish()
    edit_lines(task_dir / "predictions.jsonl", lambda lines: [lines[0], *lines])
    expect(
        "actor_duplicate_prediction",
        outcome(frames=2, episodes=1, source_actor=2),
        outcome(frames=2, episodes=1, prediction_duplicate_id=2),
    )

    recorder = Recorder(writer, "actor_unknown_prediction_source")
    recorder.actor(2)
    task_dir = recorder.finish()
    edit_json_line(task_dir / "predictions.jsonl", 0, lambda record: record.update(source="rl"))
    expect(
        "actor_unknown_prediction_source",
        outcome("no_exportable_actions", source_actor=2),
        outcome("no_exportable_actions", prediction_source_unknown=2),
    )

    recorder = Recorder(writer, "actor_dangling_prediction")
    recorder.actor(2)
    task_dir = recorder.finish()
    edit_json_line(task_dir / "actions.jsonl", 1, lambda r: r.update(prediction_id="pred-999"))
    expect(
        "actor_dangling_prediction",
        outcome("no_exportable_actions", source_actor=2),
        outcome(frames=1, episodes=1, prediction_unknown=1),
    )

    recorder = Recorder(writer, "actor_unknown_tool_call")
    recorder.actor(2)
    task_dir = recorder.finish()
    edit_lines(task_dir / "planners.jsonl", lambda lines: [lines[0], *lines[2:]])
    expect(
        "actor_unknown_tool_call",
        outcome("no_exportable_actions", source_actor=2),
        outcome("no_exportable_actions", prediction_tool_call_unknown=2),
    )

    recorder = Recorder(writer, "actor_claimed_twice")
    call_id, prediction_id = recorder.actor(2)
    writer.set_action_source("actor", call_id=call_id, prediction_id=prediction_id)
    recorder.act(2)
    recorder.finish()
    expect(
        "actor_claimed_twice",
        outcome("no_exportable_actions", source_actor=4),
        outcome("no_exportable_actions", prediction_index_claimed_twice=4),
    )

    recorder = Recorder(writer, "actor_empty_instruction")
    recorder.actor(2, instruction=" ")
    recorder.finish()
    expect(
        "actor_empty_instruction",
        outcome("no_exportable_actions", source_actor=2),
        outcome("no_exportable_actions", prediction_empty_instruction=2),
    )

    recorder = Recorder(writer, "actor_failed")
    recorder.actor(2)
    recorder.finish(False)
    expect(
        "actor_failed", outcome("environment_success_false"), outcome("environment_success_false")
    )
    return expected


def outcomes_of(report):
    return {
        task["path"].split("/")[-1]: dict(
            reason=task["reason"],
            frames=task["frames"],
            episodes=task["episodes"],
            **task["excluded_actions"],
        )
        for task in report["tasks"]
    }


@pytest.fixture(scope="module")
def actor_exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("actor_flywheel")
    writer = TrajectoryWriter(root / "run", image_writer_threads=2)
    expected = build_actor_tasks(writer)
    writer.close()
    default = export_flywheel(root / "run", root / "default", use_videos=False).to_json()
    with_actor = export_flywheel(
        root / "run", root / "with_actor", use_videos=False, include_sources=("actor",)
    ).to_json()
    return root, expected, default, with_actor


def test_actor_records_under_the_default_rules_are_excluded_by_name(actor_exports):
    _, expected, default, _ = actor_exports
    assert default["sources"] == ["vla"]
    got = outcomes_of(default)
    assert got == {task_id: want for task_id, (want, _) in expected.items()}


def test_included_actor_records_follow_the_prediction_rules(actor_exports):
    root, expected, _, with_actor = actor_exports
    assert with_actor["sources"] == ["vla", "actor"]
    assert outcomes_of(with_actor) == {task_id: want for task_id, (_, want) in expected.items()}
    assert with_actor["excluded"]["predictions"] == {
        "duplicate_id": 2,
        "empty_instruction": 1,
        "source_unknown": 1,
        "tool_call_unknown": 1,
    }
    dataset = LeRobotDataset("local/with_actor", root=root / "with_actor" / "train")
    assert len(dataset) == with_actor["counts"]["frames"]
    assert {dataset[index]["task"] for index in range(len(dataset))} == {INSTRUCTION}


@pytest.mark.slow
def test_including_the_actor_changes_nothing_for_records_without_actor_data(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run", image_writer_threads=2)
    build_tasks(writer)  # the malformed-record suite of the default rules
    writer.close()
    default = export_flywheel(tmp_path / "run", tmp_path / "default", use_videos=False)
    with_actor = export_flywheel(
        tmp_path / "run", tmp_path / "with_actor", use_videos=False, include_sources=("actor",)
    )
    default, with_actor = default.to_json(), with_actor.to_json()
    for report in (default, with_actor):
        for name in ("output_dir", "dataset_dir", "sources"):
            report.pop(name)
    assert with_actor == default
    saved = json.loads((tmp_path / "default" / REPORT_FILE).read_text())
    assert saved["sources"] == ["vla"]


def test_only_sources_linked_to_predictions_can_be_included(tmp_path):
    with pytest.raises(ValueError, match=r"\['expert'\] cannot be exported; only \['actor'\]"):
        export_flywheel(tmp_path, tmp_path.parent / "out", include_sources=("expert",))
