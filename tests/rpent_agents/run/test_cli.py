"""`rpent-run` on the real peg, LIBERO and in-memory Franka envs, with tiny checkpoints."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from agent_helpers import SolidColourCamera, tiny_checkpoint

import rpent_envs
from recorders.flywheel import export_flywheel
from recorders.trajectory import TrajectoryReader
from rpent_agents.features.checkpoint import load_featurizer
from rpent_agents.run.cli import SUMMARY_FILE, RunArgs, check_args, run_policy
from rpent_agents.stage2 import RLTDims, Stage2Config, Stage2Learner, save_weights

DIM, CHUNK = 32, 10
PEG_KWARGS = json.dumps({"image_size": 32, "render_backend": "cpu"})


@pytest.fixture(scope="module")
def peg_checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("peg") / "checkpoint", 9, 8, CHUNK)


@pytest.fixture(scope="module")
def actor_weights(tmp_path_factory):
    config = Stage2Config(device="cpu", chunk_len=CHUNK, replay_capacity=1, sample_window=1)
    learner = Stage2Learner(config, RLTDims(DIM, 9, CHUNK, 8))
    path = tmp_path_factory.mktemp("actor") / "weights.pt"
    save_weights(learner, path)
    return path, learner


def records(task_dir, name):
    return [record for _, record in TrajectoryReader(task_dir).read_records(name).records]


def recorded_observation(task_dir, action_record):
    reader = TrajectoryReader(task_dir)
    observation = action_record["observation"]
    return {
        "image": reader.load_image(observation["image"]),
        "wrist_image": reader.load_image(observation["wrist_image"]),
        "state": np.asarray(observation["state"], np.float32),
    }


def check_chunk_links(task_dir, source, model, tool):
    """Every chunk: one tool call `tool`, one prediction of `model`, H linked actions."""
    calls = [r for r in records(task_dir, "planners.jsonl") if r["type"] == "tool_call"]
    predictions = records(task_dir, "predictions.jsonl")
    actions = records(task_dir, "actions.jsonl")
    assert [call["name"] for call in calls] == [tool] * len(predictions)
    assert {call["arguments"]["instruction"] for call in calls} == {"insert the peg in the hole"}
    for chunk, prediction in enumerate(predictions):
        assert (prediction["model"], prediction["source"]) == (model, source)
        assert prediction["call_id"] == calls[chunk]["call_id"]
        assert prediction["step"] == chunk * CHUNK
        linked = actions[chunk * CHUNK : (chunk + 1) * CHUNK]
        assert [a["index"] for a in linked] == list(range(CHUNK))
        assert {(a["source"], a["prediction_id"], a["call_id"]) for a in linked} == {
            (source, prediction["prediction_id"], prediction["call_id"])
        }
    return actions


@pytest.mark.sim
def test_vla_runs_the_checkpoints_reference_chunks_as_vla_predictions(peg_checkpoint, tmp_path):
    args = RunArgs(
        seeds=[3], env_kwargs=PEG_KWARGS, policy="vla", checkpoint=peg_checkpoint,
        max_episode_steps=20, record_trajectory=True, output_dir=tmp_path / "run", device="cpu",
    )  # fmt: skip
    summary = run_policy(args)
    (episode,) = summary.episodes
    assert (episode.seed, episode.success, episode.steps, episode.chunks) == (
        3,
        False,
        20,
        {"vla": 2},
    )
    task_dir = tmp_path / "run" / "trajectories" / episode.task_dir.split("/")[-1]
    model = f"rpent-builtin-vla:{peg_checkpoint}"
    actions = check_chunk_links(task_dir, "vla", model, "vla")
    featurizer = load_featurizer(peg_checkpoint)
    for start in (0, CHUNK):
        observation = recorded_observation(task_dir, actions[start])
        ref_chunk = featurizer.rlt_features([observation], ["insert the peg in the hole"]).ref_chunk
        executed = np.asarray([a["action"] for a in actions[start : start + CHUNK]])
        np.testing.assert_allclose(executed, np.clip(ref_chunk[0, :CHUNK], -1, 1), atol=1e-5)
    saved = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert saved["successes"] == 0 and saved["failed_seeds"] == [3]
    assert saved["episode_outcomes"][0]["chunks"] == {"vla": 2}
    task = json.loads((task_dir / "task.json").read_text())
    assert task["robot"] == "panda" and task["planner"] == {"kind": "rpent-run", "policy": "vla"}


@pytest.mark.sim
def test_actor_chunks_are_linked_to_actor_predictions_and_export_on_request(
    peg_checkpoint, actor_weights, tmp_path
):
    weights_path, learner = actor_weights
    args = RunArgs(
        seeds=[4], env_kwargs=PEG_KWARGS, policy="actor", checkpoint=peg_checkpoint,
        stage2_run=weights_path, trigger_mode="always_on", max_episode_steps=20,
        record_trajectory=True, output_dir=tmp_path / "run", device="cpu",
    )  # fmt: skip
    (episode,) = run_policy(args).episodes
    assert episode.chunks == {"actor": 2}
    task_dir = tmp_path / "run" / "trajectories" / episode.task_dir.split("/")[-1]
    actions = check_chunk_links(task_dir, "actor", f"rpent-stage2-actor:{weights_path}", "actor")
    observation = recorded_observation(task_dir, actions[0])
    features = load_featurizer(peg_checkpoint).rlt_features(
        [observation], ["insert the peg in the hole"]
    )
    rlt = {"z_rl": features.z_rl, "proprio": observation["state"][None],
           "ref_chunk": np.clip(features.ref_chunk, -1, 1)}  # fmt: skip
    expected = learner.act(rlt, deterministic=True)[0].reshape(CHUNK, 8)
    executed = np.asarray([a["action"] for a in actions[:CHUNK]])
    np.testing.assert_allclose(executed, expected, atol=1e-5)

    # a random actor never succeeds: its episode stands in for a successful one
    task = json.loads((task_dir / "task.json").read_text())
    task["result"]["environment_success"] = True
    (task_dir / "task.json").write_text(json.dumps(task))
    default = export_flywheel(tmp_path / "run", tmp_path / "default", use_videos=False)
    assert default.to_json()["excluded"]["actions"] == {"source_actor": 20}
    with_actor = export_flywheel(
        tmp_path / "run", tmp_path / "with_actor", use_videos=False, include_sources=("actor",)
    )
    assert (with_actor.frames, with_actor.episodes) == (20, 1)


def franka_env(**overrides):
    kwargs = dict(
        backend="memory", camera=SolidColourCamera(32), wrist_camera=SolidColourCamera(32),
        image_size=32, period_s=0.0, max_episode_steps=20,
    )  # fmt: skip
    return gym.make(rpent_envs.FRANKA_ID, **(kwargs | overrides))


@pytest.mark.parametrize("actor_gate, chunks", [(True, {"actor": 2}), (False, {"vla": 2})])
@pytest.mark.sim
def test_the_actor_drives_under_the_gate_it_was_trained_with(
    peg_checkpoint, actor_weights, tmp_path, actor_gate, chunks
):
    # the weights store the whole-episode gate: the actor drives from the first chunk on,
    # unless --no-actor-gate asks for the gate of the options (the critical phase)
    _, learner = actor_weights
    weights_path = tmp_path / "always_on.pt"
    save_weights(learner, weights_path, gate={"trigger_mode": "always_on"})
    args = RunArgs(
        seeds=[4], env_kwargs=PEG_KWARGS, policy="actor", checkpoint=peg_checkpoint,
        stage2_run=weights_path, actor_gate=actor_gate, max_episode_steps=20, device="cpu",
    )  # fmt: skip
    (episode,) = run_policy(args).episodes
    assert episode.chunks == chunks


def test_vla_drives_the_in_memory_franka(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "franka", state_dim=19, action_dim=7, chunk_len=20)
    args = RunArgs(
        seeds=[0], env=rpent_envs.FRANKA_ID, policy="vla", checkpoint=checkpoint,
        record_trajectory=True, output_dir=tmp_path / "run", device="cpu",
    )  # fmt: skip
    (episode,) = run_policy(args, env=franka_env()).episodes
    assert (episode.steps, episode.chunks, episode.success) == (20, {"vla": 2}, False)
    task_dir = tmp_path / "run" / "trajectories" / episode.task_dir.split("/")[-1]
    actions = check_chunk_links(task_dir, "vla", f"rpent-builtin-vla:{checkpoint}", "vla")
    assert len(actions[0]["observation"]["state"]) == 19 and len(actions[0]["action"]) == 7
    task = json.loads((task_dir / "task.json").read_text())
    assert task["env_id"] == rpent_envs.FRANKA_ID and task["robot"] == "franka"


def test_an_env_that_does_not_fit_the_checkpoint_is_refused(peg_checkpoint, tmp_path):
    args = RunArgs(seeds=[0], env=rpent_envs.FRANKA_ID, device="cpu")  # the default checkpoint
    with pytest.raises(ValueError, match="state_dim=9, the env's state has shape \\(19,\\)"):
        run_policy(args, env=franka_env())
    with pytest.raises(ValueError, match="lacks \\['wrist_image'\\]"):
        run_policy(args, env=franka_env(wrist_camera="none"))
    with pytest.raises(ValueError, match="has no scripted expert"):
        run_policy(RunArgs(seeds=[0], env=rpent_envs.FRANKA_ID, policy="expert"), franka_env())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(record_trajectory=True), "--record-trajectory needs --output-dir"),
        (dict(stage2_run="w.pt"), "--stage2-run is read by --policy actor only"),
        (dict(video="v.mp4", num_workers=2), "--video is written by one process"),
        (dict(policy="actor", stage2_run="w.pt", env=rpent_envs.LIBERO_ID), "peg RLT stack"),
        (dict(policy="expert", checkpoint="c"), "--checkpoint is read by --policy vla"),
        (dict(seeds=[1, 1]), "give distinct seeds"),
        (dict(env_kwargs="[1]"), "give a JSON object"),
        (dict(num_workers=0), "--num-workers 0: use 1 or more"),
    ],
)
def test_options_that_do_not_fit_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        check_args(RunArgs(**{"seeds": [0], **overrides}))


def test_an_output_folder_with_a_summary_or_an_existing_video_is_refused(tmp_path):
    (tmp_path / SUMMARY_FILE).write_text("{}")
    with pytest.raises(FileExistsError, match="choose a new --output-dir"):
        check_args(RunArgs(seeds=[0], output_dir=tmp_path))
    with pytest.raises(FileExistsError, match="--video .* exists; choose a new path"):
        check_args(RunArgs(seeds=[0], video=tmp_path / SUMMARY_FILE))


@pytest.mark.sim
@pytest.mark.subprocess
def test_the_cli_runs_the_libero_expert_as_the_vla_stand_in(tmp_path):
    env_kwargs = json.dumps({"suite": "libero_goal", "task_id": 8, "image_size": 32})
    result = subprocess.run(
        [sys.executable, "-m", "rpent_agents.run.cli", "--env", rpent_envs.LIBERO_ID,
         "--env-kwargs", env_kwargs, "--policy", "expert", "--seeds", "1",
         "--record-trajectory", "--output-dir", str(tmp_path / "run")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert (summary["successes"], summary["policy"], summary["checkpoint"]) == (1, "expert", None)
    (task_dir,) = (tmp_path / "run" / "trajectories").iterdir()
    predictions = records(task_dir, "predictions.jsonl")
    assert {p["model"] for p in predictions} == {"scripted-expert-as-vla:LiberoExpert"}
    assert {p["instruction"] for p in predictions} == {"put the bowl on the plate"}
    actions = records(task_dir, "actions.jsonl")
    assert {a["source"] for a in actions} == {"vla"} and len(actions[0]["action"]) == 7


@pytest.mark.sim
@pytest.mark.subprocess
def test_recording_onto_a_full_disk_ends_in_one_line_naming_the_file(small_disk):
    disk = small_disk(128)
    result = subprocess.run(
        [sys.executable, "-m", "rpent_agents.run.cli", "--env-kwargs", PEG_KWARGS,
         "--policy", "expert", "--seeds", "0", "--record-trajectory",
         "--output-dir", str(disk / "run")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last_line = result.stderr.splitlines()[-1]
    assert last_line.startswith("rpent-run: ") and "No space left on device" in last_line
    assert str(disk / "run" / "trajectories") in last_line
