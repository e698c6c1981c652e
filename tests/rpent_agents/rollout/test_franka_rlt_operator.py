"""The operator on RPent/FrankaPegInsertion-RLT-v0 (in-memory arm, tiny Stage 1 checkpoint).

The human takeover through the stack's switch, and records of the stack (with the operator's
verdict below the recorder) that export with the flywheel's rules by source.
"""

import gymnasium as gym
import numpy as np
import pytest
from agent_helpers import memory_franka_kwargs, tiny_checkpoint

import rpent_envs
from recorders.flywheel import export_flywheel
from wrappers.key_source import KeyPressQueue
from wrappers.operator import OperatorOutcome
from wrappers.record import RecordTrajectory
from wrappers.teleop import HumanTakeover, KeyboardTeleop
from wrappers.triggers import KeyboardTrigger

pytestmark = pytest.mark.slow

REFERENCE_LEN, ACTOR_LEN, ACTION_DIM, STATE_DIM = 20, 10, 7, 19


@pytest.fixture(scope="module")
def franka_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("franka_checkpoint")
    return tiny_checkpoint(folder, STATE_DIM, ACTION_DIM, REFERENCE_LEN)


def make_env(checkpoint, presses, **overrides):
    """The stack with the operator's trigger (b) and keyboard teleop (space, arrows, g)."""
    takeover = HumanTakeover(KeyboardTeleop(presses.subscribe()), presses.subscribe(["space"]))
    kwargs = dict(
        checkpoint=str(checkpoint),
        feature_device="cpu",
        trigger=KeyboardTrigger(key_source=presses.subscribe(["b"])),
        human_takeover=takeover,
        skip_inactive=False,
        **memory_franka_kwargs(),
    )
    return gym.make(rpent_envs.FRANKA_RLT_ID, **(kwargs | overrides))


def actor_chunk():
    return np.full(ACTOR_LEN * ACTION_DIM, 0.25, np.float32)


def test_the_human_drives_the_stack_over_a_not_ready_actor_until_toggled_back(franka_checkpoint):
    presses = KeyPressQueue()
    env = make_env(franka_checkpoint, presses)
    env.set_wrapper_attr("actor_ready", False)  # warm-up: the reference drives the actor's turn
    assert env.get_wrapper_attr("actor_ready") is False
    env.reset(seed=0)
    presses.press("b", 1.0)
    presses.press("space", 1.0)
    _, _, _, _, vla_info = env.step(actor_chunk())
    assert vla_info["action_source"] == "vla" and vla_info["next_action_source"] == "human"

    presses.press("up")
    _, _, _, _, info = env.step(actor_chunk())
    assert info["action_source"] == "human" and info["intervene_flag"]
    assert info["record_transition"] and not info["actor_switch"]
    commanded = np.zeros(ACTION_DIM, np.float32)
    commanded[0] = 1.0  # +x while up is held
    commanded[-1] = -1.0 if vla_info["executed_action"][-1, -1] < 0 else 1.0  # gripper kept
    np.testing.assert_array_equal(info["executed_action"], np.tile(commanded, (ACTOR_LEN, 1)))

    presses.release("up")
    presses.press("space", 2.0)
    _, _, _, _, info = env.step(actor_chunk())
    assert info["action_source"] == "human" and info["next_action_source"] == "vla"
    _, _, _, _, info = env.step(actor_chunk())
    assert info["action_source"] == "vla" and not info["intervene_flag"]
    env.set_wrapper_attr("actor_ready", True)
    _, _, _, _, info = env.step(actor_chunk())
    assert info["action_source"] == "actor"
    env.close()


def record_episode(env, presses, seed):
    """VLA 10 steps, actor 10, human 10, then the actor's first step, where c lands."""
    env.reset(seed=seed)
    sources = []
    for key in ("b", "space", "space", "c"):
        presses.press(key, float(len(sources) + 10 * seed))
        _, _, terminated, _, info = env.step(np.zeros(ACTOR_LEN * ACTION_DIM, np.float32))
        sources.append((info["action_source"], info["chunk_len"]))
    assert terminated and info["operator_outcome"] == "success"
    return sources


def test_records_export_the_vla_chunks_and_never_the_humans(franka_checkpoint, tmp_path):
    presses = KeyPressQueue()
    outcome_keys = presses.subscribe(["a", "c"])
    raw_wrappers = [
        lambda env: OperatorOutcome(env, key_source=outcome_keys),
        lambda env: RecordTrajectory(env, tmp_path / "run", robot="franka"),
    ]
    env = make_env(franka_checkpoint, presses, raw_wrappers=raw_wrappers, log_predictions=True)
    for seed in (0, 1):
        sources = record_episode(env, presses, seed)
        assert sources == [("vla", 10), ("actor", 10), ("human", 10), ("actor", 1)]
    env.close()

    report = export_flywheel(tmp_path / "run", tmp_path / "vla", use_videos=False).to_json()
    assert report["counts"]["tasks_exported"] == 2
    assert (report["counts"]["frames"], report["counts"]["episodes"]) == (20, 2)
    assert report["excluded"]["actions"] == {"source_actor": 22, "source_human": 20}
    assert report["excluded"]["predictions"] == {}

    with_actor = export_flywheel(
        tmp_path / "run", tmp_path / "actor", use_videos=False, include_sources=("actor",)
    ).to_json()
    # per episode: VLA and actor steps 0-19 in one run, the human's 20-29 out, the actor's 30
    assert (with_actor["counts"]["frames"], with_actor["counts"]["episodes"]) == (42, 4)
    assert with_actor["excluded"]["actions"] == {"source_human": 20}
