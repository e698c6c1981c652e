"""TrajectoryWriter / TrajectoryReader on real files: layout, provenance, NaN safety, failures."""

import json
import shutil

import numpy as np
import pytest
from conftest import INSTRUCTION, Recorder, action, observation
from PIL import Image

from recorders.image_writer import BackgroundImageWriter, ImageWriteError, encode_png
from recorders.provenance import ProvenanceLog, provenance_of
from recorders.record_format import read_jsonl
from recorders.trajectory import RecordError, TaskMetadata, TrajectoryReader, TrajectoryWriter


def strict_json(text):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_layout_labels_and_images_round_trip(writer):
    assert isinstance(writer, ProvenanceLog)
    recorder = Recorder(writer, "task-a")
    call_id, prediction_id = recorder.vla(3)
    recorder.scripted(1)
    task_dir = recorder.finish(True)

    assert sorted(p.name for p in task_dir.iterdir()) == [
        "actions.jsonl",
        "artifacts",
        "planners.jsonl",
        "predictions.jsonl",
        "task.json",
    ]
    reader = TrajectoryReader(task_dir)
    task = reader.read_task()
    assert task["schema_version"] == 1 and task["task_id"] == "task-a"
    assert task["env_id"] == "RPentTest/Synthetic-v0" and task["robot"] == "panda"
    assert task["instruction"] == INSTRUCTION and task["seed"] == 0 and task["fps"] == 10
    assert task["finished_at"] is not None
    assert task["result"]["environment_success"] is True
    assert task["result"]["end_reason"] == "terminated" and task["result"]["steps"] == 4

    actions = [record for _, record in reader.read_records("actions.jsonl").records]
    assert [a["step"] for a in actions] == [0, 1, 2, 3]
    assert [a["source"] for a in actions] == ["vla", "vla", "vla", "scripted"]
    assert [a["index"] for a in actions] == [0, 1, 2, None]
    assert {a["prediction_id"] for a in actions[:3]} == {prediction_id}
    assert actions[3]["prediction_id"] is None and actions[3]["call_id"] != call_id
    for record in actions:
        step = record["step"]
        np.testing.assert_array_equal(np.float32(record["action"]), action(step))
        np.testing.assert_array_equal(np.float32(record["observation"]["state"]), step)
        image = reader.load_image(record["observation"]["image"])
        np.testing.assert_array_equal(image, observation(step)["image"])

    (prediction,) = [r for _, r in reader.read_records("predictions.jsonl").records]
    assert prediction == {**prediction, "call_id": call_id, "instruction": INSTRUCTION, "step": 0}
    planners = [r for _, r in reader.read_records("planners.jsonl").records]
    assert [r["type"] for r in planners] == [
        "model_request",
        "tool_call",
        "tool_result",
        "tool_call",
    ]
    assert planners[1]["call_id"] == call_id and planners[1]["request_id"] == "req-0"


def test_non_finite_values_stay_valid_json(writer):
    recorder = Recorder(writer, "nan-task")
    recorder.act(1, action_fn=lambda step: np.array([np.nan, np.inf, -np.inf, 1.0], np.float32))
    task_dir = recorder.finish(True)
    line = (task_dir / "actions.jsonl").read_text().splitlines()[0]
    record = strict_json(line)
    assert record["action"] == ["NaN", "Infinity", "-Infinity", 1.0]
    strict_json((task_dir / "task.json").read_text())


def test_task_ids_are_never_reused(writer):
    metadata = TaskMetadata(env_id="RPent/Peg-v1", fps=10, seed=3)
    first = writer.start_task(metadata)
    call_in_first = writer.tool_call("vla", {})
    second = writer.start_task(metadata)
    assert first == "RPent_Peg-v1-seed3-ep0000" and second == "RPent_Peg-v1-seed3-ep0001"
    assert writer.tool_call("vla", {}) != call_in_first  # ids never repeat across tasks
    writer.close_task()
    (writer.trajectories_dir / "RPent_Peg-v1-seed3-ep0002").mkdir()
    fresh = TrajectoryWriter(writer.output_dir)
    fresh._tasks_started = 2
    assert fresh.start_task(metadata) == "RPent_Peg-v1-seed3-ep0002-1"
    with pytest.raises(FileExistsError, match="never overwritten"):
        fresh.start_task(metadata, task_id=first)
    with pytest.raises(ValueError, match="plain folder name"):
        fresh.start_task(metadata, task_id="../escape")
    fresh.close()


def test_label_lasts_until_the_task_closes(tmp_path):
    writer = TrajectoryWriter(tmp_path, default_source="scripted", image_writer_threads=0)
    writer.set_action_source("human")  # set before the first task: applies to it
    recorder = Recorder(writer, "one")
    recorder.act(1)
    recorder.finish(True)
    recorder = Recorder(writer, "two")
    recorder.act(1)
    recorder.finish(True)
    writer.close()
    sources = [
        strict_json((tmp_path / "trajectories" / name / "actions.jsonl").read_text())["source"]
        for name in ("one", "two")
    ]
    assert sources == ["human", "scripted"]


def test_bad_provenance_calls_are_refused(tmp_path):
    writer = TrajectoryWriter(tmp_path)
    with pytest.raises(RuntimeError, match="reset"):
        writer.tool_call("vla", {})
    with pytest.raises(ValueError, match="action source 'policy'"):
        writer.set_action_source("policy")
    with pytest.raises(ValueError, match="start_index"):
        writer.set_action_source("vla", start_index=-1)
    writer.close()


def test_close_mid_task_leaves_a_null_verdict(tmp_path):
    writer = TrajectoryWriter(tmp_path)
    recorder = Recorder(writer, "cut")
    recorder.vla(2)
    writer.close()
    task = TrajectoryReader(tmp_path / "trajectories" / "cut").read_task()
    assert task["result"]["environment_success"] is None
    assert task["result"]["end_reason"] == "closed" and task["finished_at"]
    assert not list((tmp_path / "trajectories" / "cut").glob(".task.json.tmp*"))


def test_lost_image_surfaces_and_is_named_in_task_json(tmp_path):
    writer = TrajectoryWriter(tmp_path, image_writer_threads=0)
    recorder = Recorder(writer, "lost")
    shutil.rmtree(writer.task_dir / "artifacts")  # the disk loses the folder mid-episode
    with pytest.raises(ImageWriteError, match="step000000_image.png"):
        recorder.act(1)
    writer.finish_task(True, "terminated")
    reader = TrajectoryReader(writer.task_dir)
    assert len(reader.read_records("actions.jsonl").records) == 1  # the action is not lost
    result = reader.read_task()["result"]
    assert result["image_write_failures"] == 1 and result["environment_success"] is True
    writer.close()


def test_lost_image_in_a_writer_thread_is_raised_by_a_later_call(writer):
    recorder = Recorder(writer, "lost-async")
    shutil.rmtree(writer.task_dir / "artifacts")
    raised = []
    for call in (lambda: recorder.act(1), lambda: writer.finish_task(True, "terminated")):
        try:
            call()
        except ImageWriteError as error:
            raised.append(error)
    assert len(raised) == 1 and "step000000_image.png" in str(raised[0])
    result = TrajectoryReader(writer.task_dir).read_task()["result"]
    assert result["image_write_failures"] == 1


@pytest.mark.parametrize("compression", [0, 1, 9])
@pytest.mark.parametrize("shape", [(1, 1, 3), (5, 7, 3), (128, 128, 3)])
def test_png_encoder_round_trips_through_a_stock_png_reader(tmp_path, shape, compression):
    image = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    (tmp_path / "frame.png").write_bytes(encode_png(image, compression))
    with Image.open(tmp_path / "frame.png") as decoded:
        assert decoded.format == "PNG" and decoded.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(decoded), image)


def test_png_encoder_refuses_what_is_not_a_uint8_rgb_image():
    with pytest.raises(ValueError, match="expected a uint8 HxWx3 image, got float32"):
        encode_png(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"got uint8 \(4, 4\)"):
        encode_png(np.zeros((4, 4), np.uint8))


def test_png_compression_trades_disk_for_time_and_is_checked(tmp_path):
    smooth = np.tile(np.arange(128, dtype=np.uint8)[:, None, None], (1, 128, 3))
    sizes = {}
    for level in (0, 9):
        writer = BackgroundImageWriter(num_threads=1, png_compression=level)
        writer.submit(tmp_path / f"level{level}.png", smooth)
        writer.close()
        sizes[level] = (tmp_path / f"level{level}.png").stat().st_size
        with Image.open(tmp_path / f"level{level}.png") as decoded:
            np.testing.assert_array_equal(np.asarray(decoded), smooth)
    assert sizes[0] > smooth.nbytes > 10 * sizes[9]
    with pytest.raises(ValueError, match="png_compression=10: use a zlib level 0..9"):
        BackgroundImageWriter(png_compression=10)


def test_background_writer_flush_and_close(tmp_path):
    images = BackgroundImageWriter(num_threads=2, queue_size=2)
    frames = [observation(step)["image"] for step in range(6)]
    for step, frame in enumerate(frames):
        images.submit(tmp_path / f"{step}.png", frame)
    images.flush()
    reader = TrajectoryReader(tmp_path)
    for step, frame in enumerate(frames):
        np.testing.assert_array_equal(reader.load_image(f"{step}.png"), frame)
    images.submit(tmp_path / "missing-dir" / "x.png", frames[0])
    with pytest.raises(ImageWriteError, match="x.png"):
        images.close()
    with pytest.raises(RuntimeError, match="closed"):
        images.submit(tmp_path / "late.png", frames[0])


def test_reader_names_every_unreadable_line_and_image(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'{"a": 1}\nnot json\n[1, 2]\n\xff\xfe\n{"b": NaN}\n{"c": [1,')
    contents = read_jsonl(path)
    assert [line for line, _ in contents.records] == [1, 5]
    assert contents.records[1][1] == {"b": "NaN"}
    assert contents.problems == [
        (2, "invalid_json"),
        (3, "not_an_object"),
        (4, "invalid_json"),
        (6, "truncated_last_line"),
    ]
    reader = TrajectoryReader(tmp_path)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    for path_value, reason in [
        ("../records.jsonl", "image_path_invalid"),
        (3, "image_path_invalid"),
        ("nothing.png", "image_missing"),
        ("broken.png", "image_unreadable"),
    ]:
        with pytest.raises(RecordError) as error:
            reader.load_image(path_value)
        assert error.value.reason == reason
    with pytest.raises(RecordError) as error:
        reader.read_task()
    assert error.value.reason == "task_json_missing"


def test_provenance_of_without_recorder_is_a_no_op():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    log = provenance_of(env)
    assert log.vla_prediction("call", INSTRUCTION, "m") == ""
    env.close()
