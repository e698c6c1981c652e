"""`RPent/PegInsertionSideWideClearance-v1` on real ManiSkill (CPU physics, lavapipe rendering)."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import rpent_envs
from rpent_envs.maniskill.expert import PegInsertionExpert

pytestmark = pytest.mark.sim

PEG_ID = rpent_envs.PEG_INSERTION_ID
IMAGE_SIZE = 32


@pytest.fixture(scope="module")
def rgb_env():
    env = gym.make(PEG_ID, obs_mode="rgb", image_size=IMAGE_SIZE)
    yield env
    env.close()


@pytest.fixture(scope="module")
def state_env():
    env = gym.make(PEG_ID, obs_mode="state")
    yield env
    env.close()


def run_expert(env, seed, max_steps=200):
    expert = PegInsertionExpert(env)
    obs, info = env.reset(seed=seed)
    infos = [info]
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(expert.act())
        infos.append(info)
        if terminated or truncated:
            break
    return infos, reward, terminated


def test_spaces_and_observation_convention(rgb_env):
    obs, info = rgb_env.reset(seed=0)
    space = rgb_env.observation_space
    assert set(space.spaces) == {"image", "wrist_image", "state"}
    assert space["image"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and space["image"].dtype == np.uint8
    assert space["state"].shape == (9,) and space["state"].dtype == np.float32
    assert rgb_env.action_space == gym.spaces.Box(-1, 1, (8,), np.float32)
    assert obs in space
    assert obs["image"].std() > 0 and obs["wrist_image"].std() > 0
    assert rgb_env.unwrapped.task_description == "insert the peg in the hole"
    assert info["task"] == "insert the peg in the hole"
    assert info["success"] is False and info["is_success"] is False
    assert info["peg_head_pos_at_hole"].shape == (3,)
    assert 0.035 <= info["hole_radius"] <= 0.045  # peg radius 0.015-0.025 + clearance 0.02
    assert rgb_env.spec.max_episode_steps == 500


def test_state_mode_has_no_cameras(state_env):
    obs, _ = state_env.reset(seed=0)
    assert set(obs) == {"state"}
    np.testing.assert_allclose(obs["state"][7:], 0.04, atol=1e-6)  # fingers open at reset


def test_seeded_resets_are_reproducible(rgb_env):
    first, first_info = rgb_env.reset(seed=7)
    second, second_info = rgb_env.reset(seed=7)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    np.testing.assert_array_equal(
        first_info["peg_head_pos_at_hole"], second_info["peg_head_pos_at_hole"]
    )
    other, _ = rgb_env.reset(seed=8)
    assert not np.array_equal(first["state"], other["state"])


def test_unseeded_resets_follow_the_first_seed(state_env):
    def episode_seeds():
        state_env.reset(seed=11)
        return [state_env.reset()[1]["episode_seed"] for _ in range(3)]

    assert episode_seeds() == episode_seeds()


def test_expert_succeeds_and_gate_signals_evolve(state_env):
    infos, reward, terminated = run_expert(state_env, seed=3)
    assert terminated and reward == 1.0 and infos[-1]["success"]
    head_x = np.array([info["peg_head_pos_at_hole"][0] for info in infos])
    grasped = np.array([info["is_grasped"] for info in infos])
    assert not grasped[0] and grasped[-1]
    first_grasp = int(np.argmax(grasped))
    # carried towards the hole: the head's distance to the box centre shrinks while grasped
    assert head_x[-1] >= -0.015 and head_x[first_grasp] < -0.2
    yz = np.array([np.abs(info["peg_head_pos_at_hole"][1:]).max() for info in infos])
    assert yz[-1] <= infos[-1]["hole_radius"] < yz[0]


def test_expert_recovers_from_a_disturbed_mid_episode_state(state_env):
    expert = PegInsertionExpert(state_env)
    state_env.reset(seed=5)
    grasped_steps = 0
    for _ in range(80):  # expert grasps and lifts the peg
        _, _, _, _, info = state_env.step(expert.act())
        grasped_steps += info["is_grasped"]
        if grasped_steps == 5:
            break
    assert grasped_steps == 5
    rng = np.random.default_rng(0)
    for _ in range(8):  # an operator opens the gripper and jerks the arm around
        disturbance = rng.uniform(-1, 1, 8).astype(np.float32)
        disturbance[-1] = 1.0
        state_env.step(disturbance)
    assert not state_env.unwrapped.privileged_state()["is_grasped"]
    for _ in range(300):
        _, _, terminated, _, info = state_env.step(expert.act())
        if terminated:
            break
    assert info["success"]


def test_bad_actions_and_arguments_are_refused(state_env):
    state_env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        state_env.step(np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        state_env.step(np.full(8, np.nan, np.float32))
    with pytest.raises(ValueError, match="obs_mode"):
        gym.make(PEG_ID, obs_mode="depth")


def test_a_non_finite_simulator_state_truncates_the_episode(state_env):
    obs, _ = state_env.reset(seed=0)
    obs, _, _, _, _ = state_env.step(np.zeros(8, np.float32))
    sim = state_env.unwrapped.maniskill_env
    qpos = sim.agent.robot.get_qpos().clone()
    qpos[0, 2] = float("inf")  # a contact blow-up: the physics step turns every joint NaN
    sim.agent.robot.set_qpos(qpos)
    next_obs, reward, terminated, truncated, info = state_env.step(np.zeros(8, np.float32))
    assert truncated and not terminated and reward == 0.0
    assert info["invalid_state"].startswith("state[0]=nan, state[1]=nan")
    np.testing.assert_array_equal(next_obs["state"], obs["state"])  # the last finite state
    assert np.isfinite(state_env.unwrapped.current_observation()["state"]).all()
    obs, _ = state_env.reset(seed=0)
    assert np.isfinite(obs["state"]).all()


def test_gymnasium_and_sb3_checkers_pass(rgb_env):
    gym_check_env(rgb_env.unwrapped, skip_render_check=True)
    sb3_check_env(rgb_env.unwrapped, warn=True)


def wrist_mount_visibility(env):
    import sapien

    link = env.unwrapped.maniskill_env.agent.robot.links_map["camera_link"]
    bodies = [
        component
        for obj in link._objs
        for component in obj.entity.components
        if isinstance(component, sapien.render.RenderBodyComponent)
    ]
    return {body.visibility for body in bodies}


def test_wrist_mount_hidden_by_default_and_shown_on_request(rgb_env):
    hidden, _ = rgb_env.reset(seed=2)
    assert wrist_mount_visibility(rgb_env) == {0.0}
    rgb_env.reset(seed=3)  # the scene is rebuilt on reset: still hidden
    assert wrist_mount_visibility(rgb_env) == {0.0}
    shown_env = gym.make(PEG_ID, obs_mode="rgb", image_size=IMAGE_SIZE, show_wrist_mount=True)
    shown, _ = shown_env.reset(seed=2)
    assert wrist_mount_visibility(shown_env) == {1.0}
    shown_env.close()
    # the mount sits behind both cameras: hiding it changes cost, not the images
    np.testing.assert_array_equal(hidden["wrist_image"], shown["wrist_image"])


def test_rgb_array_render():
    env = gym.make(PEG_ID, obs_mode="state", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    env.close()
    assert frame.shape == (512, 512, 3) and frame.dtype == np.uint8 and frame.std() > 0


@pytest.mark.subprocess
def test_make_by_module_prefix_without_import():
    code = (
        "import gymnasium as gym; env = gym.make('rpent_envs:" + PEG_ID + "', obs_mode='state');"
        " obs, info = env.reset(seed=0); print(obs['state'].shape)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("(9,)")


@pytest.mark.subprocess
def test_vector_env_with_worker_processes():
    envs = gym.make_vec(
        PEG_ID,
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"context": "forkserver"},
        obs_mode="rgb",
        image_size=IMAGE_SIZE,
    )
    try:
        obs, _ = envs.reset(seed=[0, 1])
        assert obs["image"].shape == (2, IMAGE_SIZE, IMAGE_SIZE, 3)
        assert not np.array_equal(obs["state"][0], obs["state"][1])
        obs, rewards, terminated, truncated, infos = envs.step(np.zeros((2, 8), np.float32))
        assert rewards.shape == (2,) and infos["is_grasped"].shape == (2,)
    finally:
        envs.close()


def test_the_base_camera_view_is_a_choice_and_bad_views_are_refused():
    images = {}
    for view in ("side", "stock"):
        env = gym.make(rpent_envs.PEG_INSERTION_ID, image_size=32, base_camera_view=view)
        obs, _ = env.reset(seed=0)
        images[view] = obs["image"]
        env.close()
    assert np.abs(images["side"].astype(int) - images["stock"].astype(int)).mean() > 10
    with pytest.raises(ValueError, match="base_camera_view='top'"):
        gym.make(rpent_envs.PEG_INSERTION_ID, base_camera_view="top")


def peg_half_size(env):
    return env.unwrapped.privileged_state()["peg_half_size"]


def test_kept_scene_still_varies_peg_sizes_over_a_run():
    env = gym.make(PEG_ID, obs_mode="state", reconfiguration_freq=3)
    try:
        sizes, scene_seeds = [], []
        for seed in range(100, 106):
            _, info = env.reset(seed=seed)
            sizes.append(tuple(peg_half_size(env)))
            scene_seeds.append(info["scene_seed"])
        assert scene_seeds == [100, 100, 100, 103, 103, 103]  # rebuilt every 3rd reset
        assert sizes[0] == sizes[1] == sizes[2] and sizes[3] == sizes[4] == sizes[5]
        assert sizes[0] != sizes[3]  # a new scene draws new sizes
        # A forced rebuild gives the seed's own episode, as a fresh env at every reset does.
        obs, info = env.reset(seed=104, options={"reconfigure": True})
        stock = gym.make(PEG_ID, obs_mode="state")
        stock_obs, stock_info = stock.reset(seed=104)
        assert info["scene_seed"] == stock_info["scene_seed"] == 104
        assert tuple(peg_half_size(env)) == tuple(peg_half_size(stock))
        np.testing.assert_array_equal(obs["state"], stock_obs["state"])
        np.testing.assert_array_equal(
            info["peg_head_pos_at_hole"], stock_info["peg_head_pos_at_hole"]
        )
        stock.close()
    finally:
        env.close()


def test_kept_scene_episode_replays_from_its_two_seeds():
    env = gym.make(PEG_ID, obs_mode="state", reconfiguration_freq=2)
    try:
        env.reset(seed=200)
        _, kept = env.reset(seed=201)  # poses of seed 201 on the scene of seed 200
        replay = gym.make(PEG_ID, obs_mode="state", reconfiguration_freq=2)
        replay.reset(seed=kept["scene_seed"], options={"reconfigure": True})
        _, replayed = replay.reset(seed=kept["episode_seed"])
        assert kept["scene_seed"] == 200 and kept["episode_seed"] == 201
        assert tuple(peg_half_size(env)) == tuple(peg_half_size(replay))
        np.testing.assert_array_equal(
            kept["peg_head_pos_at_hole"], replayed["peg_head_pos_at_hole"]
        )
        replay.close()
    finally:
        env.close()


def test_reconfiguration_freq_must_be_positive():
    with pytest.raises(ValueError, match="reconfiguration_freq=0"):
        gym.make(PEG_ID, obs_mode="state", reconfiguration_freq=0)
