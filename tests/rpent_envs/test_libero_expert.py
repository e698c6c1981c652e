"""The scripted LIBERO expert on real LIBERO and LIBERO-PRO tasks (state observations)."""

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from rpent_envs.libero.backend import load_task
from rpent_envs.libero.expert import LiberoExpert, pick_place_goal

pytestmark = pytest.mark.sim

LIBERO_ID = rpent_envs.LIBERO_ID


@pytest.fixture(scope="module")
def bowl_on_plate():
    env = gym.make(LIBERO_ID, suite="libero_goal", task_id=8, obs_mode="state")
    yield env
    env.close()


def run_expert(env, expert, max_steps=300):
    infos = []
    for _ in range(max_steps):
        _, reward, terminated, truncated, info = env.step(expert.act())
        infos.append(info)
        if terminated or truncated:
            break
    return infos, reward, terminated


def test_expert_puts_the_bowl_on_the_plate(bowl_on_plate):
    expert = LiberoExpert(bowl_on_plate)
    assert (expert.goal.obj, expert.goal.target) == ("akita_black_bowl_1", "plate_1")
    bowl_on_plate.reset(seed=0, options={"init_state_id": 0})
    start = expert.scene.body_pos("akita_black_bowl_1")
    lifted = []
    for _ in range(300):
        _, reward, terminated, truncated, info = bowl_on_plate.step(expert.act())
        lifted.append(expert.is_lifted())
        if terminated or truncated:
            break
    assert terminated and reward == 1.0 and info["success"] and info["is_success"]
    assert any(lifted) and not lifted[0]
    end, plate = (expert.scene.body_pos(name) for name in ("akita_black_bowl_1", "plate_1"))
    assert np.linalg.norm(end[:2] - plate[:2]) < 0.03 < np.linalg.norm(start[:2] - plate[:2])


def test_expert_recovers_after_the_bowl_is_dropped(bowl_on_plate):
    expert = LiberoExpert(bowl_on_plate)
    bowl_on_plate.reset(seed=1, options={"init_state_id": 1})
    lifted_steps = 0
    for _ in range(150):  # the expert grasps and lifts the bowl
        bowl_on_plate.step(expert.act())
        lifted_steps += expert.is_lifted()
        if lifted_steps == 5:
            break
    assert lifted_steps == 5
    for _ in range(10):  # an operator opens the gripper: the bowl falls back
        bowl_on_plate.step(np.array([0, 0, 0, 0, 0, 0, -1], np.float32))
    assert not expert.is_holding()
    _, reward, terminated = run_expert(bowl_on_plate, expert)
    assert terminated and reward == 1.0


def test_pro_task_suite_changes_instruction_and_goal_and_expert_follows():
    # LIBERO-PRO's task perturbation: same scene as libero_goal task 8, another goal.
    env = gym.make(LIBERO_ID, suite="libero_goal_task", task_id=8, obs_mode="state")
    try:
        base = env.unwrapped
        assert base.task.benchmark_language == "put the bowl on the plate"
        assert base.task_description == "put the wine bottle on the plate"
        _, info = env.reset(seed=0, options={"init_state_id": 0})
        assert info["task"] == "put the wine bottle on the plate"
        expert = LiberoExpert(env)
        assert (expert.goal.obj, expert.goal.target) == ("wine_bottle_1", "plate_1")
        infos, reward, terminated = run_expert(env, expert)
        assert terminated and reward == 1.0 and infos[-1]["success"]
    finally:
        env.close()


def test_instruction_source_benchmark_gives_the_registry_instruction():
    env = gym.make(
        LIBERO_ID, suite="libero_goal_task", task_id=8, obs_mode="state",
        instruction_source="benchmark",
    )  # fmt: skip
    try:
        _, info = env.reset(seed=0)
        assert env.unwrapped.task_description == info["task"] == "put the bowl on the plate"
    finally:
        env.close()


def test_expert_refuses_tasks_that_are_not_pick_and_place():
    from libero.libero.envs.bddl_utils import robosuite_parse_problem

    drawer_task = load_task("libero_goal", 0)  # open the middle drawer of the cabinet
    problem = robosuite_parse_problem(str(drawer_task.bddl_path))
    movable = [name for names in problem["objects"].values() for name in names]
    with pytest.raises(ValueError, match="one On/In predicate"):
        pick_place_goal(problem["goal_state"], movable)
    with pytest.raises(ValueError, match="not a movable object"):
        pick_place_goal([["on", "wooden_cabinet_1", "plate_1"]], ["plate_1"])
    with pytest.raises(TypeError, match="RPent LIBERO env"):
        LiberoExpert(gym.make("CartPole-v1"))
