"""RecordTrajectory on the real peg env and on a tiny generic env with pluggable behaviour."""

import json

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from recorders.provenance import provenance_of
from recorders.trajectory import TrajectoryReader
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.record import RecordTrajectory

TINY_ID = "RPentTest/TinyRecord-v0"
TINY_STEPS = 4


class TinyEnv(gym.Env):
    """Image + state; succeeds at step `success_at`; reuses its image buffer like real envs."""

    metadata = {"render_modes": [], "render_fps": 5}

    def __init__(self, success_at=3, reports_success=True, reuse_buffer=False):
        self.success_at = success_at
        self.reports_success = reports_success
        self.reuse_buffer = reuse_buffer
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
                "state": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.task_description = "push the cube"
        self._image = np.zeros((16, 16, 3), np.uint8)

    def _observation(self):
        image = self._image if self.reuse_buffer else np.empty_like(self._image)
        image[:] = self.t
        return {"image": image, "state": np.array([self.t, -self.t], np.float32)}

    def _info(self, success):
        info = {"task": self.task_description}
        if self.reports_success:
            info["success"] = success
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), self._info(False)

    def step(self, action):
        self.t += 1
        success = self.t >= self.success_at
        return self._observation(), float(success), success, False, self._info(success)


gym.register(TINY_ID, entry_point=TinyEnv, max_episode_steps=TINY_STEPS)


def actions_of(task_dir):
    contents = TrajectoryReader(task_dir).read_records("actions.jsonl")
    return [record for _, record in contents.records]


def task_of(task_dir):
    return TrajectoryReader(task_dir).read_task()


@pytest.fixture(scope="module")
def peg_episode(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("record") / "run"
    inner = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="rgb", image_size=32)
    env = gym.wrappers.RecordEpisodeStatistics(RecordTrajectory(inner, run_dir, robot="panda"))
    log = provenance_of(env)  # found below the outer wrapper
    observation, info = env.reset(seed=0)
    expert = PegInsertionExpert(env)
    call_id = log.tool_call("vla", {"instruction": info["task"]})
    prediction_id = log.vla_prediction(call_id, info["task"], "expert")
    log.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
    observations, terminated, truncated = [], False, False
    while not (terminated or truncated):
        observations.append(observation)
        observation, _, terminated, truncated, info = env.step(expert.act())
    task_dir = env.get_wrapper_attr("task_dir")
    replayed = replay(inner, task_of(task_dir), actions_of(task_dir))
    env.close()
    return task_dir, observations, info, replayed


def replay(env, task, actions):
    """States seen when the recorded actions are replayed from the recorded seed."""
    replay_env = gym.make(task["env_id"], **task["env_kwargs"]) if env is None else env
    observation, _ = replay_env.reset(seed=task["seed"], options=task["reset_options"])
    states = []
    for record in actions:
        states.append(observation["state"])
        observation, *_ = replay_env.step(np.float32(record["action"]))
    return states


@pytest.mark.sim
def test_peg_episode_is_recorded_for_replay(peg_episode):
    task_dir, observations, info, replayed = peg_episode
    task = task_of(task_dir)
    assert task["env_id"] == rpent_envs.PEG_INSERTION_ID
    assert task["env_kwargs"] == {"obs_mode": "rgb", "image_size": 32}
    assert task["seed"] == 0 and task["episode_seed"] == 0 and task["fps"] == 10
    assert task["robot"] == "panda" and task["instruction"] == "insert the peg in the hole"
    assert info["success"] is True
    assert task["result"]["environment_success"] is True
    assert task["result"]["end_reason"] == "terminated"
    actions = actions_of(task_dir)
    assert task["result"]["steps"] == len(actions) == len(observations)
    assert [record["index"] for record in actions] == list(range(len(actions)))
    reader = TrajectoryReader(task_dir)
    for record, observation, replayed_state in zip(actions, observations, replayed, strict=True):
        recorded = record["observation"]
        np.testing.assert_array_equal(np.float32(recorded["state"]), observation["state"])
        np.testing.assert_array_equal(replayed_state, observation["state"])
        for key in ("image", "wrist_image"):
            np.testing.assert_array_equal(reader.load_image(recorded[key]), observation[key])


def test_reset_and_close_mid_episode_leave_no_verdict(tmp_path):
    env = RecordTrajectory(gym.make(TINY_ID), tmp_path)
    env.reset(seed=1)
    env.step(env.action_space.sample())
    first = env.task_dir
    env.reset(seed=2)
    env.step(env.action_space.sample())
    second = env.task_dir
    env.close()
    assert task_of(first)["result"] == {
        "environment_success": None,
        "end_reason": "reset",
        "steps": 1,
        "image_write_failures": 0,
        "image_write_error": None,
        "record_write_error": None,
    }
    assert task_of(second)["result"]["end_reason"] == "closed"
    assert task_of(second)["result"]["environment_success"] is None


@pytest.mark.parametrize(
    ("env_kwargs", "verdict", "end_reason"),
    [
        ({"success_at": 2}, True, "terminated"),
        ({"success_at": 99}, False, "truncated"),
        ({"success_at": 2, "reports_success": False}, None, "terminated"),
    ],
)
def test_verdict_is_the_env_own(tmp_path, env_kwargs, verdict, end_reason):
    env = RecordTrajectory(gym.make(TINY_ID, **env_kwargs), tmp_path, default_source="scripted")
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.zeros(2, np.float32))
        done = terminated or truncated
    task_dir = env.task_dir
    env.close()
    result = task_of(task_dir)["result"]
    assert (result["environment_success"], result["end_reason"]) == (verdict, end_reason)
    assert {record["source"] for record in actions_of(task_dir)} == {"scripted"}


@pytest.mark.filterwarnings("ignore:.*share an object")
def test_images_survive_buffer_reuse(tmp_path):
    inner = gym.make(TINY_ID, success_at=99, reuse_buffer=True)
    env = RecordTrajectory(inner, tmp_path, image_writer_threads=2)
    env.reset(seed=0)
    for _ in range(TINY_STEPS):
        env.step(np.zeros(2, np.float32))
    task_dir = env.task_dir
    env.close()
    reader = TrajectoryReader(task_dir)
    for record in actions_of(task_dir):
        image = reader.load_image(record["observation"]["image"])
        assert np.all(image == record["step"]), record["step"]
        assert record["source"] is None  # unlabelled, no default_source


def test_task_ids_named_derived_and_never_overwritten(tmp_path):
    env = RecordTrajectory(gym.make(TINY_ID), tmp_path, task_id="first")
    env.reset(seed=5)
    env.set_next_task_id("second")
    env.reset(seed=6)
    env.reset(seed=7)
    names = sorted(p.name for p in (tmp_path / "trajectories").iterdir())
    assert names == ["RPentTest_TinyRecord-v0-seed7-ep0002", "first", "second"]
    env.set_next_task_id("first")
    with pytest.raises(FileExistsError, match="never overwritten"):
        env.reset(seed=8)
    env.close()
    assert json.loads((tmp_path / "trajectories" / "first" / "task.json").read_text())["seed"] == 5


def test_misuse_is_refused(tmp_path):
    env = RecordTrajectory(gym.make(TINY_ID), tmp_path)
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match="reset"):
        provenance_of(env).vla_prediction("call-0", "push", "vla")
    env.close()
    with pytest.raises(ValueError, match="fps"):
        RecordTrajectory(TinyEnv.__new__(type("NoFps", (TinyEnv,), {"metadata": {}})), tmp_path)
