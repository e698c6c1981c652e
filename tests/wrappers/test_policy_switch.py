"""PolicySwitch on the real peg env (state observations), with the scripted expert as reference."""

import logging
import math

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from recorders.trajectory import TrajectoryReader
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers import policy_switch
from wrappers.policy_switch import PolicySwitch
from wrappers.record import RecordTrajectory
from wrappers.switch_info import SWITCH_INFO_KEYS
from wrappers.takeover import ExpertTakeover, as_step_policy
from wrappers.triggers import AutoGate

HORIZON = 10
ACTION_DIM = 8


class StepLog(gym.Wrapper):
    """Below the switch: sees every executed step and offers the provenance channel."""

    def __init__(self, env):
        super().__init__(env)
        self.provenance = self
        self.current_source = None
        self.prediction_ids = []  # the prediction id labelled for each executed step
        self.current_prediction = None
        self.steps = []  # (source label at the time, action, info) per executed step

    def set_action_source(self, source, call_id=None, prediction_id=None, start_index=0):
        self.current_source, self.current_prediction = source, prediction_id

    def step(self, action):
        outputs = self.env.step(action)
        self.steps.append((self.current_source, np.asarray(action), outputs[4]))
        self.prediction_ids.append(self.current_prediction)
        return outputs


@pytest.fixture(scope="module")
def base_env():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, obs_mode="state")
    yield env
    env.close()


@pytest.fixture
def log(base_env):
    return StepLog(base_env)


def expert_reference(env):
    expert = PegInsertionExpert(env)
    return lambda observation: as_step_policy(expert)


def actor_chunk(gripper):
    """The actor holds the arm still; gripper -1 keeps the peg, +1 lets it go."""
    chunk = np.zeros((HORIZON, ACTION_DIM), np.float32)
    chunk[:, -1] = gripper
    return chunk.reshape(-1)


def gate_conditions(infos, gate):
    """AutoGate's entry condition after each step, computed independently from the infos."""
    streak, conditions = 0, []
    for info in infos:
        streak = streak + 1 if info["is_grasped"] else 0
        x, y, z = info["peg_head_pos_at_hole"]
        limit = gate.window.hole.yz_margin * info["hole_radius"]
        near = x >= gate.window.hole.x_min_m and abs(y) <= limit and abs(z) <= limit
        conditions.append(streak >= gate.window.min_grasp_steps and not info["success"] and near)
    return conditions


def run_chunks(switch, log, seed, actor_action, chunks_after_gate, max_chunks=40):
    """Step until the gate has been open for `chunks_after_gate` chunks; per-chunk infos."""
    switch.reset(seed=seed)
    chunk_infos, chunk_ends = [], []
    opened_at = None
    for index in range(max_chunks):
        _, _, terminated, truncated, info = switch.step(actor_action)
        chunk_infos.append(info)
        chunk_ends.append(len(log.steps))
        if opened_at is None and info["rlt_switch_flags"]:
            opened_at = index
        if (
            terminated
            or truncated
            or (opened_at is not None and index - opened_at >= chunks_after_gate)
        ):
            break
    assert opened_at is not None, "the gate never opened"
    return chunk_infos, chunk_ends


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.sim
def test_latched_gate_opens_exactly_when_its_conditions_hold(log, seed):
    gate = AutoGate()
    switch = PolicySwitch(log, gate, reference=expert_reference(log))
    infos, ends = run_chunks(switch, log, seed, actor_chunk(gripper=1.0), chunks_after_gate=3)
    step_conditions = gate_conditions([info for _, _, info in log.steps], gate)
    chunk_conditions = [step_conditions[end - 1] for end in ends]
    first_open = chunk_conditions.index(True)
    assert first_open >= 1  # the reference drove (and grasped) before the gate opened
    for index, info in enumerate(infos):
        assert set(SWITCH_INFO_KEYS) <= set(info)
        assert info["rlt_switch_flags"] == (index >= first_open)
        assert info["rlt_policy_switch_event"] == ("enter_actor" if index == first_open else None)
        driver = "actor" if index > first_open else "vla"
        assert info["action_source"] == driver
        assert info["actor_switch"] == (driver == "actor")
        assert info["record_transition"] == (index > first_open)
        assert not info["intervene_flag"] and not info["intervention_requested"]
    # the actor opened the gripper: the conditions fail but the latched gate stays open
    assert not any(chunk_conditions[first_open + 2 :])
    assert infos[-1]["rlt_switch_flags"]


@pytest.mark.sim
def test_unlatched_gate_follows_its_conditions(log):
    gate = AutoGate(latch_until_done=False)
    switch = PolicySwitch(log, gate, reference=expert_reference(log))
    infos, ends = run_chunks(switch, log, 0, actor_chunk(gripper=1.0), chunks_after_gate=4)
    step_conditions = gate_conditions([info for _, _, info in log.steps], gate)
    chunk_conditions = [step_conditions[end - 1] for end in ends]
    assert [info["rlt_switch_flags"] for info in infos] == chunk_conditions
    closed_again = chunk_conditions.index(False, chunk_conditions.index(True))
    assert infos[closed_again]["action_source"] == "actor"  # the actor dropped the peg
    assert infos[closed_again + 1]["action_source"] == "vla"  # and the reference took it back


@pytest.mark.sim
def test_every_step_is_recorded_with_its_true_source(log):
    expert_chunks = expert_reference(log)

    def labelling_reference(observation):  # a VLA that logs its prediction labels it itself
        log.set_action_source("vla", call_id="c1", prediction_id="p1")
        return expert_chunks(observation)

    switch = PolicySwitch(log, AutoGate(), reference=labelling_reference)
    infos, ends = run_chunks(switch, log, 0, actor_chunk(gripper=-1.0), chunks_after_gate=2)
    starts = [0, *ends[:-1]]
    for info, start, end in zip(infos, starts, ends, strict=True):
        sources = {source for source, _, _ in log.steps[start:end]}
        assert sources == {info["action_source"]}
        vla_chunk = info["action_source"] == "vla"
        assert set(log.prediction_ids[start:end]) == {"p1" if vla_chunk else None}
        executed = np.stack([action for _, action, _ in log.steps[start:end]])
        np.testing.assert_array_equal(info["executed_action"], executed)
        assert info["chunk_len"] == end - start == len(info["chunk_rewards"])
    actor_chunks = [info for info in infos if info["action_source"] == "actor"]
    np.testing.assert_array_equal(
        actor_chunks[0]["executed_action"], actor_chunk(-1.0).reshape(HORIZON, ACTION_DIM)
    )


def no_progress(previous_best, info, takeover):
    x, y, z = (float(value) for value in info["peg_head_pos_at_hole"])
    yz = math.hypot(y, z)
    best_x, best_yz, best_score = previous_best
    return (
        x <= best_x + takeover.min_x_progress_m
        and yz >= best_yz - takeover.min_yz_progress_m
        and x - yz <= best_score + takeover.min_score_progress_m
    )


@pytest.mark.sim
def test_expert_takes_over_after_the_third_stalled_chunk_and_finishes(log):
    expert = PegInsertionExpert(log)
    takeover = ExpertTakeover(expert)
    gate = AutoGate(near_hole_x_min=-0.10)  # open inside the takeover's zone (x >= -0.10)
    switch = PolicySwitch(log, gate, reference=expert_reference(log), expert_takeover=takeover)
    switch.reset(seed=0)
    infos = []
    for _ in range(20):
        _, reward, terminated, truncated, info = switch.step(actor_chunk(gripper=-1.0))
        infos.append(info)
        if terminated or truncated:
            break
    sources = [info["action_source"] for info in infos]
    opened = next(index for index, info in enumerate(infos) if info["rlt_switch_flags"])
    assert sources[opened + 1 : opened + 4] == ["actor"] * 3
    assert sources[opened + 4 :] == ["expert"] * (len(sources) - opened - 4)
    # the three actor chunks made no progress over the gate-opening chunk, by info
    x, y, z = (float(value) for value in infos[opened]["peg_head_pos_at_hole"])
    best = (x, math.hypot(y, z), x - math.hypot(y, z))
    assert all(no_progress(best, info, takeover) for info in infos[opened + 1 : opened + 4])
    assert [info["intervention_requested"] for info in infos[opened + 1 :]] == [
        False,
        False,
        False,
    ] + [True] * (len(infos) - opened - 4)
    assert infos[opened + 3]["next_action_source"] == "expert"
    assert all(info["intervene_flag"] for info in infos[opened + 4 :])
    assert terminated and reward == 1.0 and infos[-1]["success"]  # latched until success
    # a reset releases the expert and closes the gate
    _, reset_info = switch.reset(seed=1)
    assert not reset_info["rlt_switch_flags"] and reset_info["next_action_source"] == "vla"
    assert not takeover.active and takeover.stalled_chunks == 0
    assert reset_info["action_source"] is None and reset_info["executed_action"].shape == (0, 8)


@pytest.mark.sim
def test_a_trajectory_recorder_below_records_each_action_with_its_source(base_env, tmp_path):
    recorder = RecordTrajectory(base_env, tmp_path, robot="panda")
    expert = PegInsertionExpert(recorder)
    switch = PolicySwitch(
        recorder,
        AutoGate(near_hole_x_min=-0.10),
        reference=expert_reference(recorder),
        expert_takeover=ExpertTakeover(expert),
    )
    switch.reset(seed=0)
    sources = []
    for _ in range(20):
        *_, terminated, truncated, info = switch.step(actor_chunk(gripper=-1.0))
        sources += [info["action_source"]] * info["chunk_len"]
        if terminated or truncated:
            break
    task_dir = recorder.task_dir
    recorder.provenance.close()  # flush; the shared env stays open
    reader = TrajectoryReader(task_dir)
    records = [record for _, record in reader.read_records("actions.jsonl").records]
    assert [record["source"] for record in records] == sources
    assert {"vla", "actor", "expert"} == set(sources)
    assert reader.read_task()["result"]["environment_success"] is True


@pytest.mark.sim
def test_warm_up_records_the_critical_phase_but_the_reference_drives(log):
    takeover = ExpertTakeover(PegInsertionExpert(log))
    gate = AutoGate(near_hole_x_min=-0.10)
    switch = PolicySwitch(log, gate, reference=expert_reference(log), expert_takeover=takeover)
    switch.actor_ready = False
    switch.reset(seed=0)
    infos = []
    for _ in range(20):
        *_, terminated, truncated, info = switch.step(actor_chunk(gripper=-1.0))
        infos.append(info)
        if terminated or truncated:
            break
    assert {info["action_source"] for info in infos} == {"vla"}
    opened = next(index for index, info in enumerate(infos) if info["rlt_switch_flags"])
    assert all(info["record_transition"] for info in infos[opened + 1 :])
    assert not any(info["intervene_flag"] or info["actor_switch"] for info in infos)
    assert terminated and infos[-1]["success"]


@pytest.mark.sim
def test_drop_in_mode_shows_the_library_actor_steps_only(log):
    takeover = ExpertTakeover(PegInsertionExpert(log))
    gate = AutoGate(near_hole_x_min=-0.10)
    switch = PolicySwitch(
        log,
        gate,
        reference=expert_reference(log),
        expert_takeover=takeover,
        skip_inactive=True,
    )
    obs, info = switch.reset(seed=0)
    first_episode = info["episode_seed"]
    assert info["next_action_source"] == "actor" and info["rlt_switch_flags"]
    assert info["skipped_chunks"] >= 1 and info["skipped_reward"] == 0.0
    assert {source for source, _, _ in log.steps} == {"vla"}
    outcomes = []
    for _ in range(6):
        obs, reward, terminated, truncated, info = switch.step(actor_chunk(gripper=-1.0))
        outcomes.append((info["action_source"], reward, terminated, truncated))
        if terminated or truncated:
            break
    # three stalled actor chunks; at the third the expert takes over: truncated for the library
    assert outcomes == [("actor", 0.0, False, False)] * 2 + [("actor", 0.0, False, True)]
    steps_before = len(log.steps)
    obs, info = switch.reset()  # the expert finishes that episode, then a new one starts
    skipped_sources = [source for source, _, _ in log.steps[steps_before:]]
    assert skipped_sources[0] == "expert" and "vla" in skipped_sources
    assert info["skipped_reward"] == 1.0  # the expert's success, never credited to the actor
    assert info["episode_seed"] != first_episode and info["next_action_source"] == "actor"
    with pytest.raises(ValueError, match="skip_inactive"):
        switch.actor_ready = False


@pytest.mark.sim
def test_drop_in_mode_is_reproducible_and_passes_the_sb3_checker(log):
    from stable_baselines3.common.env_checker import check_env

    switch = PolicySwitch(log, AutoGate(), reference=expert_reference(log), skip_inactive=True)
    first, first_info = switch.reset(seed=4)
    second, second_info = switch.reset(seed=4)
    np.testing.assert_array_equal(first["state"], second["state"])
    assert first_info["skipped_chunks"] == second_info["skipped_chunks"] >= 1
    # the API check itself needs no skipping: the actor drives from the start
    always_on = AutoGate(trigger_mode="always_on")
    check_env(PolicySwitch(log, always_on, reference=expert_reference(log), skip_inactive=True))


@pytest.mark.sim
def test_a_long_drop_in_reset_shows_its_progress(log, monkeypatch, capsys, caplog):
    monkeypatch.setattr(policy_switch, "RESET_PROGRESS_DELAY_S", 0.0)  # every reset is long
    switch = PolicySwitch(log, AutoGate(), reference=expert_reference(log), skip_inactive=True)
    with caplog.at_level(logging.INFO, logger="wrappers.policy_switch"):
        _, info = switch.reset(seed=4)
    assert "reset: other drivers run until the actor's turn" in capsys.readouterr().err
    assert f"reset ran {info['skipped_chunks']} chunks (0 episodes ended)" in caplog.text


@pytest.mark.sim
def test_bad_inputs_are_refused(log):
    with pytest.raises(ValueError, match="reference="):
        PolicySwitch(log, AutoGate())
    switch = PolicySwitch(log, AutoGate(trigger_mode="always_on"), reference=expert_reference(log))
    assert switch.action_space.shape == (HORIZON * ACTION_DIM,)
    switch.reset(seed=0)
    with pytest.raises(ValueError, match=r"\(80,\) or \(10, 8\)"):
        switch.step(np.zeros(8, np.float32))
    _, _, _, _, info = switch.step(np.zeros((HORIZON, ACTION_DIM), np.float32))
    assert info["action_source"] == "actor"


def test_auto_gate_names_missing_signals_on_other_envs():
    env = gym.make("Pendulum-v1")
    switch = PolicySwitch(env, AutoGate(), reference=lambda obs: np.zeros((2, 1)), horizon=2)
    switch.reset(seed=0)
    with pytest.raises(KeyError, match="is_grasped"):
        switch.step(np.zeros(2, np.float32))
