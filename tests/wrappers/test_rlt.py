"""RLTObservation on the real peg env with a real (tiny, untrained) built-in feature model."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from non_finite_states import NaNStateAt
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import rpent_envs
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.rlt import RLTObservation

pytestmark = pytest.mark.sim

H_REF, H, DIM = 6, 4, 32


class CountingFeaturizer(RLTFeaturizer):
    """The real featurizer, counting its calls."""

    calls = 0

    def rlt_features(self, observations, instructions):
        self.calls += 1
        self.last_instructions = list(instructions)
        return super().rlt_features(observations, instructions)


def tiny_featurizer():
    torch.manual_seed(0)
    config = BuiltinVLAConfig(
        image_size=32, patch_size=16, dim=DIM, num_layers=1, num_head_layers=1, chunk_len=H_REF
    )
    vla = BuiltinVLA(config, NormStats.identity(9, 8))
    return CountingFeaturizer(vla.eval(), RLToken(RLTokenConfig(dim=DIM, prefix_seq_len=64)))


@pytest.fixture(scope="module")
def rlt_env():
    raw = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="rgb", image_size=32)
    env = RLTObservation(raw, tiny_featurizer(), chunk_len=H)
    yield env
    env.close()


def test_spaces(rlt_env):
    space = rlt_env.observation_space
    assert set(space.spaces) == {"z_rl", "proprio", "ref_chunk"}
    assert space["z_rl"].shape == (DIM,) and space["proprio"].shape == (9,)
    assert space["ref_chunk"].shape == (H_REF, 8)
    assert np.all(space["ref_chunk"].low == -1) and np.all(space["ref_chunk"].high == 1)
    assert rlt_env.action_space == gym.spaces.Box(-1, 1, (H * 8,), np.float32)


def test_step_runs_the_chunk_and_featurizes_once(rlt_env):
    obs, info = rlt_env.reset(seed=3)
    assert obs in rlt_env.observation_space
    np.testing.assert_array_equal(obs["proprio"], rlt_env.raw_observation["state"])
    featurizer = rlt_env.feature_model
    calls = featurizer.calls
    assert featurizer.last_instructions == ["insert the peg in the hole"]
    action = np.linspace(-0.5, 0.5, H * 8).astype(np.float32)
    obs, reward, terminated, truncated, info = rlt_env.step(action)
    assert featurizer.calls == calls + 1
    assert info["chunk_len"] == H and info["chunk_rewards"].shape == (H,)
    assert reward == pytest.approx(float(np.sum(info["chunk_rewards"])))
    np.testing.assert_array_equal(info["executed_action"], action.reshape(H, 8))
    assert len(info["step_infos"]) == H
    for key in ("success", "is_grasped", "peg_head_pos_at_hole", "hole_radius", "task"):
        assert key in info
    np.testing.assert_array_equal(obs["proprio"], rlt_env.raw_observation["state"])
    # The joint deltas moved the arm.
    assert not np.allclose(obs["proprio"][:7], rlt_env.reset(seed=3)[0]["proprio"][:7])


def test_reference_chunk_is_executable_as_is(rlt_env):
    obs, _ = rlt_env.reset(seed=4)
    obs, _, _, _, info = rlt_env.step_chunk(obs["ref_chunk"])
    assert info["chunk_len"] == H  # the first H rows of the (H_ref, A) chunk
    assert info["executed_action"].shape == (H, 8)


def test_step_policy_is_closed_loop_and_stops_at_success(rlt_env):
    expert = PegInsertionExpert(rlt_env)
    seen_states = []

    def step_policy(raw_observation):
        seen_states.append(raw_observation["state"].copy())
        return expert.act()

    rlt_env.reset(seed=0)
    lengths, terminated = [], False
    while not terminated and len(lengths) < 40:
        _, _, terminated, _, info = rlt_env.step_chunk(step_policy)
        lengths.append(info["chunk_len"])
    assert terminated and info["success"]
    assert sum(lengths) == len(seen_states)
    assert all(length == H for length in lengths[:-1]) and 1 <= lengths[-1] <= H
    assert info["chunk_rewards"][-1] == 1.0


def assert_finite_observation(env, obs):
    assert obs in env.observation_space
    assert all(np.isfinite(values).all() for values in obs.values())


def test_a_simulator_blow_up_truncates_with_the_last_finite_state(rlt_env):
    obs, _ = rlt_env.reset(seed=3)
    sim = rlt_env.unwrapped.maniskill_env
    qpos = sim.agent.robot.get_qpos().clone()
    qpos[0, 1] = float("nan")  # the physics step spreads it to every joint
    sim.agent.robot.set_qpos(qpos)
    next_obs, reward, terminated, truncated, info = rlt_env.step(np.zeros(H * 8, np.float32))
    assert truncated and not terminated and reward == 0.0
    assert info["chunk_len"] == 1 and info["invalid_state"].startswith("state[0]=nan")
    assert_finite_observation(rlt_env, next_obs)
    np.testing.assert_array_equal(next_obs["proprio"], obs["proprio"])  # the reset's state
    obs, _ = rlt_env.reset(seed=3)  # the simulator is whole again
    assert_finite_observation(rlt_env, obs)


def test_a_non_finite_state_from_an_unchecked_env_ends_the_chunk(rlt_env):
    nan_below = NaNStateAt(rlt_env.env, nan_steps=(3,))
    env = RLTObservation(nan_below, rlt_env.feature_model, chunk_len=H)
    env.reset(seed=3)
    obs, _, terminated, truncated, info = env.step(np.full(H * 8, 0.3, np.float32))
    assert truncated and not terminated
    assert (
        info["chunk_len"] == 3 and info["step_infos"][-1]["invalid_state"] == info["invalid_state"]
    )
    named = "state[0]=nan, state[1]=nan, state[2]=nan, state[3]=nan"
    assert info["invalid_state"] == f"{named} (9 non-finite entries in all)"
    assert_finite_observation(env, obs)
    np.testing.assert_array_equal(obs["proprio"], env.raw_observation["state"])  # after step 2


def test_a_feature_source_returning_nan_is_refused(rlt_env):
    class BrokenSource:
        z_dim, chunk_len, action_dim = DIM, H_REF, 8

        def rlt_features(self, observations, instructions):
            features = rlt_env.feature_model.rlt_features(observations, instructions)
            features.z_rl[0, 5] = np.nan
            return features

    env = RLTObservation(rlt_env.env, BrokenSource(), chunk_len=H)
    with pytest.raises(ValueError, match=r"would hold NaN or inf \(z_rl\[0, 5\]=nan"):
        env.reset(seed=3)


def test_checkers_pass(rlt_env):
    gym_check_env(rlt_env, skip_render_check=True)
    sb3_check_env(rlt_env, warn=False)


def test_bad_configurations_are_refused(rlt_env):
    raw = rlt_env.env
    with pytest.raises(ValueError, match="chunk_len=7"):
        RLTObservation(raw, rlt_env.feature_model, chunk_len=H_REF + 1)
    with pytest.raises(ValueError, match="expected"):
        rlt_env.step(np.zeros(3, np.float32))
    state_only = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state")
    wide = gym.wrappers.RescaleAction(state_only, np.float32(-2.0), np.float32(2.0))
    with pytest.raises(ValueError, match="Box\\(-1, 1"):
        RLTObservation(wide, rlt_env.feature_model, chunk_len=H)
    state_only.close()
