"""The peg task's CPU checks give ManiSkill's answers on real simulated states."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import rpent_envs
from rpent_envs.maniskill.expert import PegInsertionExpert
from rpent_envs.maniskill.task import MANISKILL_TASK_ID

pytestmark = pytest.mark.sim


def checks_both_ways(task):
    """evaluate() and privileged_state() with the CPU checks, then with ManiSkill's code."""
    fast = task.evaluate(), task.privileged_state()
    task.fast_cpu_checks = False
    try:
        stock = task.evaluate(), task.privileged_state()
    finally:
        task.fast_cpu_checks = True
    return fast, stock


def assert_same_expert_view(fast, stock):
    assert fast.keys() == stock.keys()
    for name, value in stock.items():
        assert fast[name].dtype == value.dtype and fast[name].shape == value.shape, name
        np.testing.assert_allclose(fast[name], value, rtol=0, atol=1e-6, err_msg=name)


def test_success_grasp_head_position_and_expert_view_match_maniskills_own_code():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state")
    task = env.unwrapped.maniskill_env.unwrapped
    rng = np.random.default_rng(0)
    seen = {"success": set(), "is_grasped": set()}
    try:
        for seed in range(3):
            expert = PegInsertionExpert(env)
            env.reset(seed=seed)
            for _ in range(90):
                action = expert.act()
                if rng.uniform() < 0.3:  # knocks: contacts at odd angles, lost grasps
                    action += rng.normal(0.0, 0.4, action.shape).astype(np.float32)
                env.step(np.clip(action, -1.0, 1.0))
                (fast, fast_expert_view), (stock, stock_expert_view) = checks_both_ways(task)
                assert_same_expert_view(fast_expert_view, stock_expert_view)
                assert fast.keys() == stock.keys()
                for key in ("success", "is_grasped"):
                    assert fast[key].dtype == stock[key].dtype == torch.bool
                    assert torch.equal(fast[key], stock[key]), key
                    seen[key].add(bool(stock[key]))
                torch.testing.assert_close(
                    fast["peg_head_pos_at_hole"], stock["peg_head_pos_at_hole"], rtol=0, atol=1e-6
                )
    finally:
        env.close()
    assert seen == {"success": {False, True}, "is_grasped": {False, True}}


@pytest.mark.parametrize("agent_obs_only", [False, True])
def test_the_task_extras_are_left_out_only_when_asked(agent_obs_only):
    # ManiSkill's own users get the task's poses; the RPent env reads the joints alone
    task = gym.make(MANISKILL_TASK_ID, obs_mode="state_dict", agent_obs_only=agent_obs_only)
    try:
        obs, _ = task.reset(seed=0)
        assert "qpos" in obs["agent"]
        assert ("peg_pose" in obs["extra"]) is not agent_obs_only
    finally:
        task.close()
