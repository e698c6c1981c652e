"""rlt_schedule and actor_weight_schedule at the reference's numbers."""

import pytest

from rpent_agents.stage2 import Stage2Config, UpdateSchedule, actor_loss_weights


def test_no_update_before_learning_starts_then_warmup_budget_capped_per_train_step():
    schedule = UpdateSchedule(Stage2Config())
    assert schedule.plan(update_step=0, total_transitions=9999) == 0
    assert schedule.plan(update_step=0, total_transitions=10000) == 400
    assert schedule.pending_update_budget == 30000
    schedule.record_updates(400)
    assert schedule.pending_update_budget == 29600
    # four new transitions do not earn a cycle yet (one per 5)
    assert schedule.plan(update_step=400, total_transitions=10004) == 400


def test_after_warmup_every_five_new_transitions_earn_five_updates():
    schedule = UpdateSchedule(Stage2Config())
    schedule.plan(update_step=0, total_transitions=12000)
    assert schedule.transitions_at_start == 12000
    assert schedule.plan(update_step=30000, total_transitions=12000) == 0
    assert schedule.plan(update_step=30000, total_transitions=12014) == 10
    assert schedule.pending_update_budget == 10


def test_ready_for_online_after_warmup_updates():
    schedule = UpdateSchedule(Stage2Config())
    assert not schedule.ready_for_online(29999)
    assert schedule.ready_for_online(30000)


def test_without_a_cap_one_train_step_runs_the_whole_budget():
    schedule = UpdateSchedule(Stage2Config(max_updates_per_train_step=0))
    assert schedule.plan(update_step=0, total_transitions=10000) == 30000


def test_real_robot_runs_update_epoch_updates_per_train_step_and_the_actor_may_act():
    schedule = UpdateSchedule(Stage2Config.real_robot())
    assert schedule.plan(update_step=0, total_transitions=1) == 0
    assert schedule.plan(update_step=0, total_transitions=2) == 8
    assert schedule.plan(update_step=8, total_transitions=2) == 8
    assert schedule.ready_for_online(0)


def test_schedule_state_round_trips():
    schedule = UpdateSchedule(Stage2Config())
    schedule.plan(update_step=0, total_transitions=10000)
    restored = UpdateSchedule(Stage2Config())
    restored.load_state_dict(schedule.state_dict())
    assert restored.state_dict() == {"transitions_at_start": 10000, "pending_update_budget": 30000}


@pytest.mark.parametrize(
    ("update_step", "expected"),
    [
        (0, (7.0, 0.05)),
        (19999, (7.0, 0.05)),
        (20000, (7.0 + (2.5 - 7.0) / 50000, 0.05 + (0.45 - 0.05) / 50000)),
        (44999, (4.75, 0.25)),
        (69999, (2.5, 0.45)),
        (10**6, (2.5, 0.45)),
    ],
)
def test_actor_weights_warm_up_then_ramp_linearly(update_step, expected):
    assert actor_loss_weights(update_step, Stage2Config()) == pytest.approx(expected)


def test_real_robot_actor_weights_are_fixed():
    assert actor_loss_weights(0, Stage2Config.real_robot()) == (5.0, 0.1)
    assert actor_loss_weights(10**6, Stage2Config.real_robot()) == (5.0, 0.1)
