"""The flywheel export on real records and a real LeRobot dataset, one task per malformed input."""

import json

import numpy as np
import pytest
from conftest import INSTRUCTION, Recorder, action, observation, record_good_task, tree_digest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from recorders.flywheel import REPORT_FILE, export_flywheel
from recorders.trajectory import TrajectoryWriter


def edit_lines(path, edit):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(edit(lines)))


def edit_json_line(path, index, edit):
    def apply(lines):
        record = json.loads(lines[index])
        edit(record)
        lines[index] = json.dumps(record) + "\n"
        return lines

    edit_lines(path, apply)


def edit_task_json(task_dir, edit):
    task = json.loads((task_dir / "task.json").read_text())
    edit(task)
    (task_dir / "task.json").write_text(json.dumps(task))


def nan_at_step_1(step):
    return np.full(4, np.nan, np.float32) if step == 1 else action(step)


def build_tasks(writer):
    """Each task breaks one rule; returns task id -> expected outcome."""
    expected = {}

    def expect(task_id, reason=None, frames=0, episodes=0, **excluded_actions):
        expected[task_id] = dict(
            reason=reason, frames=frames, episodes=episodes, **excluded_actions
        )

    record_good_task(writer, "good")
    expect("good", frames=7, episodes=2, source_scripted=1)

    task_dir = record_good_task(writer, "truncated_last_line")
    with open(task_dir / "actions.jsonl", "ab") as handle:
        handle.write(b'{"step": 8, "act')
    expect("truncated_last_line", frames=7, episodes=2, source_scripted=1, truncated_last_line=1)

    recorder = Recorder(writer, "invalid_json")
    recorder.vla(5)
    task_dir = recorder.finish()
    edit_lines(task_dir / "actions.jsonl", lambda lines: lines[:2] + ["garbage{\n"] + lines[3:])
    expect("invalid_json", frames=4, episodes=2, invalid_json=1)

    recorder = Recorder(writer, "missing_field")
    recorder.vla(3)
    task_dir = recorder.finish()
    edit_json_line(task_dir / "actions.jsonl", 1, lambda record: record.pop("action"))
    expect("missing_field", frames=2, episodes=2, missing_field=1)

    recorder = Recorder(writer, "wrong_type")
    recorder.vla(3)
    task_dir = recorder.finish()
    edit_json_line(task_dir / "actions.jsonl", 2, lambda record: record.update(step="2"))
    expect("wrong_type", frames=2, episodes=1, wrong_type=1)

    recorder = Recorder(writer, "dangling_prediction")
    recorder.vla(3)
    task_dir = recorder.finish()
    edit_json_line(task_dir / "actions.jsonl", 0, lambda r: r.update(prediction_id="pred-999"))
    expect("dangling_prediction", frames=2, episodes=1, prediction_unknown=1)

    recorder = Recorder(writer, "other_tool_call")
    vla_call = writer.tool_call("vla", {}, recorder.request_id)
    prediction_id = writer.vla_prediction(vla_call, INSTRUCTION, "tiny-vla")
    other_call = writer.tool_call("grasp", {}, recorder.request_id)
    writer.set_action_source("vla", call_id=other_call, prediction_id=prediction_id)
    recorder.act(2)
    recorder.vla(2)
    recorder.finish()
    expect("other_tool_call", frames=2, episodes=1, prediction_in_other_tool_call=2)

    recorder = Recorder(writer, "two_predictions")
    recorder.vla(3)
    recorder.vla(2)
    task_dir = recorder.finish()
    edit_lines(task_dir / "predictions.jsonl", lambda lines: [lines[0], *lines])
    expect("two_predictions", frames=2, episodes=1, prediction_duplicate_id=3)

    recorder = Recorder(writer, "claimed_twice")
    call_id, prediction_id = recorder.vla(2)
    writer.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
    recorder.act(2)
    recorder.finish()
    expect("claimed_twice", reason="no_exportable_actions", prediction_index_claimed_twice=4)

    recorder = Recorder(writer, "empty_instruction")
    recorder.vla(2, instruction="  ")
    recorder.finish()
    expect("empty_instruction", reason="no_exportable_actions", prediction_empty_instruction=2)

    recorder = Recorder(writer, "missing_image")
    recorder.vla(4)
    task_dir = recorder.finish()
    (task_dir / "artifacts" / "step000001_image.png").unlink()
    expect("missing_image", frames=3, episodes=2, image_missing=1)

    recorder = Recorder(writer, "nan_action")
    call_id = writer.tool_call("vla", {}, recorder.request_id)
    prediction_id = writer.vla_prediction(call_id, INSTRUCTION, "tiny-vla")
    writer.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
    recorder.act(3, action_fn=nan_at_step_1)
    recorder.finish()
    expect("nan_action", frames=2, episodes=2, action_not_finite=1)

    recorder = Recorder(writer, "unlabeled")
    recorder.act(2)
    recorder.vla(1)
    recorder.finish()
    expect("unlabeled", frames=1, episodes=1, source_unlabeled=2)

    recorder = Recorder(writer, "no_predictions_file")
    recorder.vla(2)
    (recorder.finish() / "predictions.jsonl").unlink()
    expect("no_predictions_file", reason="no_exportable_actions", prediction_unknown=2)

    recorder = Recorder(writer, "unknown_tool_call")
    recorder.vla(2)
    task_dir = recorder.finish()
    edit_lines(task_dir / "planners.jsonl", lambda lines: [lines[0], *lines[2:]])
    expect("unknown_tool_call", reason="no_exportable_actions", prediction_tool_call_unknown=2)

    recorder = Recorder(writer, "prediction_after_action")
    recorder.vla(2)
    task_dir = recorder.finish()
    edit_json_line(task_dir / "predictions.jsonl", 0, lambda record: record.update(step=1))
    expect("prediction_after_action", frames=1, episodes=1, prediction_after_action=1)

    for task_id, success, reason in [
        ("failed", False, "environment_success_false"),
        ("no_verdict", None, "environment_success_null"),
    ]:
        recorder = Recorder(writer, task_id)
        recorder.vla(2)
        recorder.finish(success)
        expect(task_id, reason=reason)

    for task_id, edit, reason in [
        ("unfinished", lambda task: task.update(finished_at=None), "run_unfinished"),
        ("verdict_not_bool", lambda task: task["result"].update(environment_success="true"),
         "environment_success_not_bool"),
        ("task_missing_field", lambda task: task.pop("result"), "task_json_missing_field"),
        ("task_wrong_type", lambda task: task.update(fps="10"), "task_json_wrong_type"),
    ]:  # fmt: skip
        edit_task_json(record_good_task(writer, task_id), edit)
        expect(task_id, reason=reason)

    (record_good_task(writer, "task_json_invalid") / "task.json").write_text("{not json")
    expect("task_json_invalid", reason="task_json_invalid")
    (writer.trajectories_dir / "no_task_json").mkdir()
    expect("no_task_json", reason="no_task_json")
    return expected


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("flywheel") / "run"
    writer = TrajectoryWriter(run_dir, image_writer_threads=2)
    expected = build_tasks(writer)
    writer.close()
    digest_before = tree_digest(run_dir)
    output_dir = run_dir.parent / "export"
    report = export_flywheel(run_dir, output_dir, use_videos=False)
    return run_dir, output_dir, report, expected, digest_before


def test_every_malformed_input_lands_under_its_own_reason(exported):
    _, output_dir, report, expected, _ = exported
    saved = json.loads((output_dir / REPORT_FILE).read_text())
    assert saved == json.loads(json.dumps(report.to_json()))
    outcomes = {task["path"].split("/")[-1]: task for task in saved["tasks"]}
    assert set(outcomes) == set(expected)
    for task_id, want in expected.items():
        outcome = outcomes[task_id]
        got = dict(
            reason=outcome["reason"],
            frames=outcome["frames"],
            episodes=outcome["episodes"],
            **outcome["excluded_actions"],
        )
        assert got == want, task_id
    assert saved["excluded"]["predictions"] == {
        "duplicate_id": 2,
        "empty_instruction": 1,
        "file_missing": 1,
        "tool_call_unknown": 1,
    }
    counts = saved["counts"]
    assert counts["tasks_seen"] == len(expected)
    assert counts["tasks_exported"] == sum(want["reason"] is None for want in expected.values())
    assert counts["frames"] == sum(want["frames"] for want in expected.values())
    assert counts["episodes"] == sum(want["episodes"] for want in expected.values())
    assert saved["excluded"]["tasks"]["environment_success_false"] == 1


def test_dataset_frames_are_the_recorded_ones(exported):
    _, output_dir, report, _, _ = exported
    dataset = LeRobotDataset("local/export", root=output_dir / "train")
    assert dataset.meta.info.codebase_version == "v3.0" and dataset.fps == 10
    assert dataset.meta.robot_type == "panda"
    assert dataset.num_episodes == report.episodes and len(dataset) == report.frames
    for index in range(len(dataset)):
        frame = dataset[index]
        step = int(frame["state"][0])
        np.testing.assert_array_equal(frame["state"].numpy(), observation(step)["state"])
        np.testing.assert_array_equal(frame["actions"].numpy(), action(step))
        image = np.round(frame["image"].permute(1, 2, 0).numpy() * 255).astype(np.uint8)
        np.testing.assert_array_equal(image, observation(step)["image"])
        assert frame["task"] == INSTRUCTION


def test_raw_records_are_byte_identical_after_export(exported):
    run_dir, output_dir, _, _, digest_before = exported
    assert tree_digest(run_dir) == digest_before
    assert sorted(p.name for p in output_dir.iterdir()) == ["report.json", "train"]
    assert not list(output_dir.parent.glob(".export.partial-*"))


def test_existing_or_nested_output_is_refused(exported):
    run_dir, output_dir, _, _, _ = exported
    before = tree_digest(output_dir)
    with pytest.raises(FileExistsError, match="already exists"):
        export_flywheel(run_dir, output_dir)
    assert tree_digest(output_dir) == before
    with pytest.raises(ValueError, match="inside input root"):
        export_flywheel(run_dir, run_dir / "export")


def test_one_task_folder_as_input(exported, tmp_path):
    run_dir, _, _, _, _ = exported
    task_dir = run_dir / "trajectories" / "missing_image"
    report = export_flywheel(task_dir, tmp_path / "one", use_videos=False)
    counts = report.to_json()["counts"]
    assert counts == {
        "tasks_seen": 1,
        "tasks_exported": 1,
        "episodes": 2,
        "frames": 3,
        "actions_seen": 4,
    }
    assert report.tasks[0].path == "."


def test_images_too_small_for_video_fail_before_writing(exported, tmp_path):
    run_dir, _, _, _, _ = exported
    with pytest.raises(ValueError, match="too small to encode as video"):
        export_flywheel(run_dir / "trajectories" / "good", tmp_path / "video", use_videos=True)
    assert list(tmp_path.iterdir()) == []  # neither the output nor its staging folder


def test_nothing_eligible_writes_only_the_report(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run")
    recorder = Recorder(writer, "scripted_only")
    recorder.scripted(3)
    recorder.finish(True)
    writer.close()
    report = export_flywheel(tmp_path / "run", tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["report.json"]
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["dataset_dir"] is None and report.frames == 0
    assert saved["excluded"]["tasks"] == {"no_exportable_actions": 1}
    assert saved["excluded"]["actions"] == {"source_scripted": 3}
