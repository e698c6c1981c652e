"""The robot command's parts that need no process: its arguments, the clock, the status line,
the reset tried again."""

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tyro
from agent_helpers import memory_franka_kwargs, tiny_checkpoint

import rpent_envs
from rpent_agents.robot import ControlPeriods, LearnerStatus, RobotRunState, RobotTrainArgs
from rpent_agents.robot.config import PRESETS
from rpent_agents.robot.control_loop import RESET_ATTEMPTS, reset_where_recovered
from rpent_agents.robot.status import status_text
from rpent_agents.robot.train import check_output_dir
from rpent_envs.franka.backend import FrankaControlError, FrankaResetAborted
from rpent_envs.franka.env import FrankaEnv
from rpent_envs.franka.memory_backend import MemoryFrankaBackend
from wrappers.key_source import KeyPressQueue
from wrappers.triggers import KeyboardTrigger


def test_env_kwargs_go_over_the_presets_and_the_chunk_length_is_the_learners():
    args = PRESETS["sim-stand-in"][1]
    preset = args.make_kwargs(chunk_len=10)
    assert preset["expert_takeover"] is True and preset["render_backend"] == "cpu"
    overridden = dataclasses.replace(args, env_kwargs='{"render_backend": "gpu", "chunk_len": 3}')
    kwargs = overridden.make_kwargs(chunk_len=5)
    assert kwargs["render_backend"] == "gpu" and kwargs["expert_takeover"] is True
    assert kwargs["chunk_len"] == 5
    # the gate the actor is saved with: the preset's second phase, the id's default trigger
    assert args.gate_settings() == {"missed_grasp_chunks": 4}
    always_on = dataclasses.replace(args, env_kwargs='{"trigger_mode": "always_on"}')
    assert always_on.gate_settings() == {"missed_grasp_chunks": 4, "trigger_mode": "always_on"}
    assert PRESETS["real-robot"][1].gate_settings() == {}  # the Franka's key b
    for text, message in (("{host: 1}", "--env-kwargs .* is not JSON"), ("[1]", "JSON object")):
        with pytest.raises(ValueError, match=message):
            RobotTrainArgs(env_kwargs=text).make_kwargs(chunk_len=10)


def test_the_presets_warm_up_before_the_actor_drives_and_update_4_times_per_transition():
    for _, args in PRESETS.values():
        stage2 = args.stage2
        assert stage2.update_schedule and stage2.learning_starts > 0 and stage2.warmup_updates > 0
        assert stage2.update_epoch / stage2.train_every_transitions >= 4
    real, stand_in = PRESETS["real-robot"][1], PRESETS["sim-stand-in"][1]
    assert real.env_id == rpent_envs.FRANKA_RLT_ID and real.operator.wait_for_reset_key
    assert stand_in.env_id == rpent_envs.PEG_RLT_ID and not stand_in.operator.uses_keys


def test_the_demonstration_flags_reach_the_learner_and_are_off_in_the_presets():
    assert all(
        (args.stage2.demo_transitions, args.stage2.demo_pretrain_updates) == (None, 0)
        for _, args in PRESETS.values()
    )
    flags = ["--stage2.demo-transitions", "demos.npz", "--stage2.demo-pretrain-updates", "500"]
    args = tyro.extras.overridable_config_cli(PRESETS, args=["sim-stand-in", *flags])
    assert args.stage2.demo_transitions == Path("demos.npz")
    assert args.stage2.demo_pretrain_updates == 500
    assert args.stage2.intervention_batch_share == 0.5  # the preset's learner otherwise


def test_a_fresh_run_into_a_run_folder_and_a_resume_without_one_are_refused(tmp_path):
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(FileExistsError, match="pass --resume"):
        check_output_dir(RobotTrainArgs(output_dir=tmp_path))
    with pytest.raises(FileNotFoundError, match="holds no run"):
        check_output_dir(RobotTrainArgs(output_dir=tmp_path / "empty", resume=True))


def test_the_clock_measures_step_to_step_periods_within_episodes():
    periods = ControlPeriods()
    env = periods.wrap(gym.make(rpent_envs.FRANKA_ID, backend="memory", period_s=0.02))
    for seed in range(2):
        env.reset(seed=seed)
        for _ in range(4):
            env.step(np.zeros(7, np.float32))
    env.close()
    summary = periods.summary()
    assert summary["control_period_s"] == 0.02 and summary["control_period_samples"] == 6
    assert summary["control_period_p50_s"] == pytest.approx(0.02, abs=0.005)  # the env keeps it
    assert ControlPeriods().summary()["control_period_p50_s"] is None


def test_the_clock_counts_the_periods_over_1_1_times_the_nominal_one_as_late():
    periods = ControlPeriods()
    periods.nominal_period_s, periods.periods_s = 0.1, [0.1] * 97 + [0.109, 0.12, 0.5]
    summary = periods.summary()
    assert summary["control_period_late_steps"] == 2 and summary["control_period_max_s"] == 0.5
    assert summary["control_period_p50_s"] == summary["control_period_p95_s"] == 0.1
    periods.nominal_period_s = None  # a simulator keeps no period: nothing is late
    assert periods.summary()["control_period_late_steps"] is None


def test_the_status_line_names_the_episode_the_driver_and_the_learners_counters():
    state = RobotRunState(episodes=2, successes=1, env_steps=240)
    learner = LearnerStatus(updates=80, replay_size=12, actor_ready=True)
    assert status_text("driver human", state, 1000, learner) == (
        "episode 3 | driver human | env steps 240/1000 | successes 1/2 | updates 80 | "
        "replay 12 | actor ready"
    )
    assert status_text("done", state, 1000, learner, running=False).startswith("episodes 2 | done")


class PlannerFailing(MemoryFrankaBackend):
    """The in-memory arm whose first `failures` motions fail as franky-sim's planner's can."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def wait_until_settled(self, timeout_s: float) -> bool:
        if self.failures > 0:
            self.failures -= 1
            raise FrankaControlError("Motion planner failed with error code -111")
        return super().wait_until_settled(timeout_s)


def test_a_reset_the_arm_stopped_and_recovered_from_is_tried_again(caplog, tmp_path):
    env, shown = FrankaEnv(backend=PlannerFailing(RESET_ATTEMPTS - 1)), []
    obs, _ = reset_where_recovered(env, 3, shown.append)
    assert obs in env.observation_space and env.backend.failures == 0
    assert len(shown) == RESET_ATTEMPTS - 1 and "error code -111" in shown[0]
    assert f"(try 1 of {RESET_ATTEMPTS})" in caplog.text
    # the robot loop's env, made by gym.make: its first reset failed, and it steps
    trigger = KeyboardTrigger(key_source=KeyPressQueue().subscribe(["b"]))
    kwargs = memory_franka_kwargs() | {"backend": PlannerFailing(1), "skip_inactive": False}
    checkpoint = tiny_checkpoint(tmp_path / "checkpoint", 19, 7, 20)
    stack = gym.make(
        rpent_envs.FRANKA_RLT_ID, checkpoint=str(checkpoint), trigger=trigger, **kwargs
    )
    obs, _ = reset_where_recovered(stack, 3, shown.append)
    assert stack.step(np.zeros(stack.action_space.shape, np.float32))[0] in stack.observation_space
    # one failure more than the tries: the last one ends the reset
    env = FrankaEnv(backend=PlannerFailing(RESET_ATTEMPTS))
    with pytest.raises(FrankaResetAborted, match="call reset\\(\\) again"):
        reset_where_recovered(env, 3, shown.append)
