"""PolicySwitch above RLTObservation (a tiny untrained built-in VLA) on the real peg env."""

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.policy_switch import PolicySwitch
from wrappers.rlt import RLTObservation
from wrappers.takeover import ExpertTakeover, as_step_policy
from wrappers.triggers import AutoGate

pytestmark = pytest.mark.sim

HORIZON = 10
ACTION_DIM = 8


class SourceLog(gym.Wrapper):
    """Below the RLT wrapper: the provenance label of every executed step."""

    def __init__(self, env):
        super().__init__(env)
        self.provenance = self
        self.current_source = None
        self.sources = []

    def set_action_source(self, source, call_id=None, prediction_id=None, start_index=0):
        self.current_source = source

    def step(self, action):
        self.sources.append(self.current_source)
        return self.env.step(action)


def tiny_featurizer():
    vla_config = BuiltinVLAConfig(image_size=32, dim=32, num_heads=2, num_layers=1)
    vla = BuiltinVLA(vla_config, NormStats.identity(9, ACTION_DIM))
    token = RLToken(RLTokenConfig(dim=32, num_heads=2, num_encoder_layers=1, prefix_seq_len=128))
    return RLTFeaturizer(vla, token)


@pytest.fixture(scope="module")
def log():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="rgb", image_size=32)
    yield SourceLog(env)
    env.close()


@pytest.fixture(scope="module")
def featurized(log):
    return RLTObservation(log, tiny_featurizer(), chunk_len=HORIZON)


def hold_chunk():
    chunk = np.zeros((HORIZON, ACTION_DIM), np.float32)
    chunk[:, -1] = -1.0  # gripper closed
    return chunk.reshape(-1)


def test_reference_chunk_comes_from_the_observation(log, featurized):
    switch = PolicySwitch(featurized, AutoGate())
    assert switch.horizon == HORIZON and switch.action_space == featurized.action_space
    obs, info = switch.reset(seed=0)
    assert info["next_action_source"] == "vla"
    log.sources.clear()
    _, _, _, _, info = switch.step(hold_chunk())
    assert info["action_source"] == "vla" and log.sources == ["vla"] * HORIZON
    np.testing.assert_array_equal(info["executed_action"], obs["ref_chunk"][:HORIZON])
    assert len(info["step_infos"]) == info["chunk_len"] == HORIZON


def test_gate_actor_and_expert_chunks_run_through_step_chunk(log, featurized):
    expert = PegInsertionExpert(log)
    switch = PolicySwitch(
        featurized,
        AutoGate(near_hole_x_min=-0.10),
        reference=lambda observation: as_step_policy(expert),  # scripted stand-in for a VLA
        expert_takeover=ExpertTakeover(expert),
    )
    switch.reset(seed=0)
    log.sources.clear()
    infos = []
    for _ in range(20):
        _, reward, terminated, truncated, info = switch.step(hold_chunk())
        infos.append(info)
        if terminated or truncated:
            break
    sources = [info["action_source"] for info in infos]
    opened = next(index for index, info in enumerate(infos) if info["rlt_switch_flags"])
    expert_chunks = len(infos) - opened - 4
    assert sources == ["vla"] * (opened + 1) + ["actor"] * 3 + ["expert"] * expert_chunks
    actor_info = infos[opened + 1]
    np.testing.assert_array_equal(
        actor_info["executed_action"], hold_chunk().reshape(HORIZON, ACTION_DIM)
    )
    assert actor_info["record_transition"] and infos[-1]["intervene_flag"]
    assert terminated and reward == 1.0
    recorded = [source for info in infos for source in [info["action_source"]] * info["chunk_len"]]
    assert log.sources == recorded
