"""The training vector env: raw-observation workers, featurized in one batch per step.

The batched env must see what the composite env `RPent/PegInsertion-RLT-v0` sees one env at a
time: the same observations for the same seeds and the same chunks.
"""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from rpent_agents.rollout.rlt_stack import PegRLTConfig, make_peg_rlt
from rpent_agents.rollout.vector import FeaturizedVectorEnv, make_rlt_vector_env
from rpent_agents.rollout.worker import RLTWorker, SuppliedReference, WorkerMode
from rpent_agents.stage2.chunk_info import ChunkInfo
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.policy_switch import PolicySwitch
from wrappers.takeover import ExpertTakeover
from wrappers.triggers import AutoGate

pytestmark = pytest.mark.sim

CONFIG = PegRLTConfig(render_backend="cpu", feature_device="cpu")
SEEDS = [5, 6]


@pytest.fixture(scope="module")
def batched_run():
    envs = make_rlt_vector_env(CONFIG, num_envs=2)
    try:
        first, infos = envs.reset(seed=SEEDS)
        envs.set_attr("actor_ready", False)  # the reference drives every chunk
        after, _, _, _, step_infos = envs.step(np.zeros((2, 80), np.float32))
    finally:
        envs.close()
    return first, after, infos, step_infos


@pytest.mark.subprocess
def test_batched_and_per_env_featurization_give_the_same_observations(batched_run):
    first, after, _, step_infos = batched_run
    assert list(step_infos["action_source"]) == ["vla", "vla"]
    env = make_peg_rlt(CONFIG, skip_inactive=False)
    try:
        env.actor_ready = False
        for index, seed in enumerate(SEEDS):
            obs, _ = env.reset(seed=seed)
            for key in ("z_rl", "proprio", "ref_chunk"):
                np.testing.assert_allclose(obs[key], first[key][index], atol=1e-5)
            obs, *_ = env.step(np.zeros(80, np.float32))
            # one batched matmul against one per env: float rounding of the chunk only
            np.testing.assert_allclose(obs["proprio"], after["proprio"][index], atol=1e-5)
            np.testing.assert_allclose(obs["z_rl"], after["z_rl"][index], atol=2e-3)
            np.testing.assert_allclose(obs["ref_chunk"], after["ref_chunk"][index], atol=2e-3)
    finally:
        env.close()


@pytest.mark.subprocess
def test_the_vector_env_has_the_composite_envs_spaces(batched_run):
    first, _, infos, _ = batched_run
    env = make_peg_rlt(CONFIG)
    try:
        single = env.observation_space
    finally:
        env.close()
    for key, space in single.spaces.items():
        assert first[key].shape == (2, *space.shape) and first[key].dtype == space.dtype
    assert list(infos["task"]) == ["insert the peg in the hole"] * 2


@pytest.mark.subprocess
def test_a_worker_times_the_rendering_inside_its_chunk(batched_run):
    *_, step_infos = batched_run
    render_s, chunk_s = step_infos["worker_render_s"], step_infos["worker_chunk_s"]
    assert (render_s > 0).all() and (render_s < chunk_s).all()


@pytest.fixture(scope="module")
def state_worker():
    # A worker over a per-step switch on state observations (quick to build); the 15-step
    # limit ends the second chunk after 5 steps.
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state", max_episode_steps=15)
    reference = SuppliedReference(horizon=10)
    switch = PolicySwitch(env, AutoGate(), reference=reference, horizon=10)
    worker = RLTWorker(switch, reference, 10, ExpertTakeover(PegInsertionExpert(env)))
    yield worker, switch
    worker.close()


def test_worker_runs_the_supplied_reference_and_pads_short_chunks(state_worker):
    worker, switch = state_worker
    worker.expert_takeover_enabled = False
    _, info = worker.reset(seed=0)
    assert switch.expert_takeover is None and info["chunk_len"] == 0
    assert info["executed_action"].shape == (10, 8) and info["chunk_rewards"].shape == (10,)
    reference = np.tile(np.linspace(-0.5, 0.5, 8, dtype=np.float32), (10, 1))
    action = {"actor": np.zeros(80, np.float32), "ref_chunk": reference}
    _, _, _, truncated, info = worker.step(action)
    assert not truncated and info["chunk_len"] == 10 and "step_infos" not in info
    assert info["action_source"] == "vla"
    assert info["worker_render_s"] == 0.0 < info["worker_chunk_s"]  # state mode: no camera
    np.testing.assert_array_equal(info["executed_action"], reference)
    _, _, _, truncated, info = worker.step(action)
    assert truncated and info["chunk_len"] == 5
    assert info["executed_action"].shape == (10, 8) and info["chunk_rewards"].shape == (10,)
    assert not info["executed_action"][5:].any()
    short = ChunkInfo.from_info(info)
    assert short.executed_action.shape == (5, 8) and short.rewards.shape == (5,)


def test_worker_switches_the_expert_per_episode(state_worker):
    worker, switch = state_worker
    worker.expert_takeover_enabled = True
    worker.reset(seed=1)
    assert switch.expert_takeover is worker.takeover
    bare = RLTWorker(switch, SuppliedReference(10), 10)
    with pytest.raises(ValueError, match="built without an expert"):
        bare.expert_takeover_enabled = True


def test_a_peg_the_actor_drops_ends_the_training_episode_when_asked():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state")
    reference = SuppliedReference(horizon=10)
    switch = PolicySwitch(env, AutoGate(trigger_mode="always_on"), reference=reference)
    worker = RLTWorker(switch, reference, 10)
    expert = PegInsertionExpert(env)
    hold, drop = np.zeros((10, 8), np.float32), np.zeros((10, 8), np.float32)
    hold[:, -1], drop[:, -1] = -1.0, 1.0  # the gripper closed, then opened
    ended = {}
    try:
        for end_lost_grasps in (False, True):
            worker.end_lost_grasps = end_lost_grasps
            worker.reset(seed=0)
            grasped_steps = 0
            while grasped_steps < 10:  # the expert grasps the peg (steps below the worker)
                _, _, _, _, info = env.step(expert.act())
                grasped_steps = grasped_steps + 1 if info["is_grasped"] else 0
            chunks = []
            for chunk in (hold, drop):
                action = {"actor": chunk.ravel(), "ref_chunk": np.zeros((10, 8), np.float32)}
                _, _, terminated, _, info = worker.step(action)
                chunks.append((info["action_source"], terminated, info["lost_grasp_ended"]))
            ended[end_lost_grasps] = chunks
    finally:
        worker.close()
    # held through the first chunk; lost in the second: the episode ends only when asked
    assert ended[True] == [("actor", False, False), ("actor", True, True)]
    assert ended[False] == [("actor", False, False), ("actor", False, False)]


def test_worker_refuses_a_step_without_a_supplied_reference(state_worker):
    worker, _ = state_worker
    worker.reset(seed=2)
    with pytest.raises(RuntimeError, match="no reference chunk was supplied"):
        worker.env.step(np.zeros(80, np.float32))


@pytest.mark.subprocess
def test_a_worker_starts_its_next_episode_with_the_seed_sent_with_the_chunk():
    config = PegRLTConfig(render_backend="cpu", feature_device="cpu", max_episode_chunks=1)
    envs = make_rlt_vector_env(config, num_envs=1)
    try:
        envs.reset(seed=[3])
        envs.set_attr("actor_ready", False)
        obs, _, _, truncated, infos = envs.step(np.zeros((1, 80), np.float32), reset_seeds=[8])
        assert truncated[0] and infos["_final_obs"][0]
        ended_state = infos["final_obs"]["proprio"][0]
        fresh, _ = envs.reset(seed=[8])  # what the new episode must start from
    finally:
        envs.close()
    np.testing.assert_allclose(obs["proprio"][0], fresh["proprio"][0], atol=1e-6)
    np.testing.assert_allclose(obs["z_rl"][0], fresh["z_rl"][0], atol=1e-5)
    assert np.abs(ended_state - obs["proprio"][0]).max() > 1e-4  # the last state, not the new


@pytest.mark.subprocess
def test_stepping_the_ready_workers_gives_what_a_synchronous_step_gives():
    config = PegRLTConfig(render_backend="cpu", feature_device="cpu", max_episode_chunks=2)
    actions = np.zeros((2, 80), np.float32)
    envs = make_rlt_vector_env(config, num_envs=2)
    try:
        envs.reset(seed=[3, 4])
        envs.set_attr("actor_ready", False)
        synchronous, *_ = envs.step(actions)
        envs.reset(seed=[3, 4])
        envs.step_async(actions, env_indices=np.array([1]))  # worker 1 alone
        assert envs.busy.tolist() == [False, True]
        with pytest.raises(ValueError, match="still busy"):
            envs.step_async(actions, env_indices=np.array([1]))
        obs, rewards, terminated, truncated, infos = envs.step_wait(min_ready=1)
        assert envs.last_ready.tolist() == [False, True] and not envs.busy.any()
        assert infos["_chunk_len"].tolist() == [False, True] and infos["chunk_len"][1] == 10
        np.testing.assert_allclose(obs["proprio"][1], synchronous["proprio"][1], atol=1e-6)
        np.testing.assert_allclose(obs["z_rl"][1], synchronous["z_rl"][1], atol=1e-5)
        start, _ = envs.reset(seed=[3, 4])
        # worker 0 was never stepped: its row is still its reset observation
        np.testing.assert_allclose(obs["proprio"][0], start["proprio"][0], atol=1e-6)
        envs.step_async(actions, env_indices=np.array([0, 1]))
        envs.step_wait(min_ready=2)  # both answered: nothing left busy
        assert envs.last_ready.all() and not envs.busy.any()
    finally:
        envs.close()


def test_a_worker_mode_sets_the_worker_attributes_of_its_fields(state_worker):
    worker, switch = state_worker
    config = PegRLTConfig(expert_takeover=True, end_on_lost_grasp=True)
    assert WorkerMode.training(True, config) == WorkerMode(True, True, True, False)
    assert WorkerMode.evaluation(False) == WorkerMode(False, False, False, True)
    names = []

    class Workers:  # what the vector env does with each attribute: set it on every worker
        def set_attr(self, name, value):
            names.append(name)
            worker.set_wrapper_attr(name, value)

    for mode in (WorkerMode.training(True, config), WorkerMode.evaluation(False)):
        FeaturizedVectorEnv.set_worker_mode(SimpleNamespace(env=Workers()), mode)
        assert switch.actor_ready == mode.actor_ready
        assert worker.expert_takeover_enabled == mode.expert_takeover_enabled
        assert worker.end_lost_grasps == mode.end_lost_grasps
        assert worker.rebuild_scenes == mode.rebuild_scenes
    attributes = ["actor_ready", "expert_takeover_enabled", "end_lost_grasps", "rebuild_scenes"]
    assert names == 2 * attributes
