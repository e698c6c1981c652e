"""RPent/FrankaPegInsertion-RLT-v0 on the in-memory Franka arm with a tiny Stage 1 checkpoint."""

import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_helpers import memory_franka_kwargs
from gymnasium.utils.env_checker import check_env as gym_check_env

import rpent_envs
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, save_checkpoint
from rpent_agents.features.norm import NormStats
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.rollout.franka_stack import FrankaRLTConfig, make_franka_rlt
from wrappers.triggers import KeyboardTrigger, KeyPressQueue

REFERENCE_LEN, ACTOR_LEN, ACTION_DIM, STATE_DIM, DIM = 20, 10, 7, 19, 32


@pytest.fixture(scope="module")
def franka_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    config = BuiltinVLAConfig(
        state_dim=STATE_DIM,
        action_dim=ACTION_DIM,
        chunk_len=REFERENCE_LEN,
        image_size=32,
        patch_size=16,
        dim=DIM,
        num_heads=2,
        num_layers=1,
        num_head_layers=1,
    )
    vla = BuiltinVLA(config, NormStats.identity(STATE_DIM, ACTION_DIM))
    token = RLToken(RLTokenConfig(dim=DIM, num_heads=2, prefix_seq_len=64))
    folder = tmp_path_factory.mktemp("franka_checkpoint")
    save_checkpoint(folder, vla, token)
    return folder


def make_env(checkpoint, presses, **overrides):
    kwargs = dict(
        checkpoint=str(checkpoint),
        trigger=KeyboardTrigger(key_source=presses),
        **memory_franka_kwargs(),
    )
    return gym.make(rpent_envs.FRANKA_RLT_ID, **(kwargs | overrides))


def test_spaces_are_the_reference_chunk_20_and_the_actor_chunk_10(franka_checkpoint):
    env = make_env(franka_checkpoint, KeyPressQueue())
    assert gym.spec(rpent_envs.FRANKA_RLT_ID).nondeterministic is True
    space = env.observation_space
    assert space["z_rl"].shape == (DIM,) and space["proprio"].shape == (STATE_DIM,)
    assert space["ref_chunk"].shape == (REFERENCE_LEN, ACTION_DIM)
    assert env.action_space == gym.spaces.Box(-1, 1, (ACTOR_LEN * ACTION_DIM,), np.float32)
    env.close()


def test_passes_gymnasiums_checker_that_gym_make_leaves_out(franka_checkpoint):
    env = make_env(franka_checkpoint, KeyPressQueue(), skip_inactive=False)
    assert gym.spec(rpent_envs.FRANKA_RLT_ID).disable_env_checker is True
    # (its close check makes another env from the spec, whose kwargs hold a key queue)
    gym_check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
    env.close()


@pytest.mark.slow
def test_the_reference_drives_until_the_operator_presses_b(franka_checkpoint):
    presses = KeyPressQueue()
    env = make_env(franka_checkpoint, presses, skip_inactive=False)
    obs, _ = env.reset(seed=0)

    _, _, _, _, info = env.step(np.zeros(ACTOR_LEN * ACTION_DIM, np.float32))
    assert info["action_source"] == "vla" and not info["actor_switch"]
    np.testing.assert_allclose(
        info["executed_action"], np.clip(obs["ref_chunk"][:ACTOR_LEN], -1, 1), atol=1e-6
    )

    presses.press("b")
    _, _, _, _, info = env.step(np.zeros(ACTOR_LEN * ACTION_DIM, np.float32))
    assert info["rlt_policy_switch_event"] == "enter_actor"
    actor_chunk = np.full((ACTOR_LEN, ACTION_DIM), 0.25, np.float32)
    _, _, _, _, info = env.step(actor_chunk.ravel())
    assert info["action_source"] == "actor" and info["actor_switch"]
    assert info["record_transition"] and info["chunk_len"] == ACTOR_LEN
    np.testing.assert_allclose(info["executed_action"], actor_chunk)
    env.close()


@pytest.mark.slow
def test_drop_in_reset_returns_once_the_operator_has_pressed_b(franka_checkpoint):
    presses = KeyPressQueue()
    env = make_env(franka_checkpoint, presses)  # drop-in: skip_inactive=True by default
    # The operator presses b after a second, and again every 0.2 s while the reference still
    # drives: a press that lands while an episode restarts belongs to no episode and is
    # dropped (KeyboardTrigger.reset), as a real operator would see and press again.
    reset_returned = threading.Event()

    def operator() -> None:
        if not reset_returned.wait(1.0):
            presses.press("b")
        while not reset_returned.wait(0.2):
            presses.press("b")

    thread = threading.Thread(target=operator)
    thread.start()
    try:
        obs, _ = env.reset(seed=0)
    finally:
        reset_returned.set()
        thread.join()
    assert obs in env.observation_space
    _, _, _, _, info = env.step(np.zeros(ACTOR_LEN * ACTION_DIM, np.float32))
    assert info["action_source"] == "actor"
    env.close()


def test_feature_source_and_cameras_are_checked_with_the_fix_in_the_message(franka_checkpoint):
    with pytest.raises(ValueError, match="exactly one feature source"):
        gym.make(rpent_envs.FRANKA_RLT_ID, backend="memory")
    with pytest.raises(ValueError, match="state_dim=9, the Franka env has state_dim=19"):
        gym.make(rpent_envs.FRANKA_RLT_ID, checkpoint=str(DEFAULT_CHECKPOINT_DIR), backend="memory")
    with pytest.raises(ValueError, match="pass wrist_camera="):
        make_env(franka_checkpoint, KeyPressQueue(), wrist_camera="none")
    with pytest.raises(ValueError, match="feature_server='nohost': give 'host:port'"):
        gym.make(rpent_envs.FRANKA_RLT_ID, feature_server="nohost", backend="memory")


def test_the_stack_builds_from_its_config_as_from_the_registered_id(franka_checkpoint):
    config = FrankaRLTConfig(checkpoint=str(franka_checkpoint), chunk_len=5, feature_device="cpu")
    env = make_franka_rlt(
        config, trigger=KeyboardTrigger(key_source=KeyPressQueue()), **memory_franka_kwargs()
    )
    assert env.action_space.shape == (5 * ACTION_DIM,)
    env.close()
    with pytest.raises(ValueError, match="FrankaRLTConfig.chunk_len must be >= 1"):
        FrankaRLTConfig(checkpoint=str(franka_checkpoint), chunk_len=0)
