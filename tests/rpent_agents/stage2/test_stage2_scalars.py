"""TensorBoard scalars: the exact names of the reference guide, in a real event file."""

import numpy as np
from stage2_helpers import CHUNK_LEN, DIMS, transition
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rpent_agents.stage2 import ChunkStats, EpisodeStats, ScalarLog, Stage2Config, Stage2Learner

REFERENCE_SCALARS = {
    "critic/critic_loss",
    "actor/actor_loss",
    "q_pi",
    "actor/bc_loss",
    "actor/bc_ref_loss",
    "actor/bc_human_loss",
    "actor/human_mask_ratio",
    "train/replay_buffer/size",
    "env/success_once",
    "env/episode_len",
    "eval/success_once",
    "train/replay/record_transition_rate",
    "train/replay/actor_switch_rate",
    "train/replay/intervention_requested_rate",
    "train/replay/intervention_rate",
    "train/replay/transition_count",
    "train/replay/reward_mean",
    "train/rlt/ready_for_online",
    "train/rlt/actor_updates_run",
    "train/rlt/critic_updates_run",
    "train/rlt/pending_update_budget",
}
NON_FINITE_SCALARS = {
    "train/rlt/skipped_critic_steps",
    "train/rlt/skipped_actor_steps",
    "train/replay/invalid_state_rate",
}


def test_chunk_stats_report_rates_over_chunks_and_rewards_over_stored_transitions():
    stats = ChunkStats()
    stats.record({"record_transition": True, "actor_switch": True}, stored=transition(0.5))
    stats.record({"record_transition": True, "intervene_flag": True}, stored=transition(1.0))
    stats.record({"intervention_requested": np.array(True)}, stored=None)
    stats.record({"invalid_state": "state[0]=nan"}, stored=None)
    assert stats.scalars() == {
        "train/replay/record_transition_rate": 0.5,
        "train/replay/actor_switch_rate": 0.25,
        "train/replay/intervention_requested_rate": 0.25,
        "train/replay/intervention_rate": 0.25,
        "train/replay/invalid_state_rate": 0.25,
        "train/replay/transition_count": 2.0,
        "train/replay/reward_mean": 1.5,  # chunks of 2 steps: 2 x 0.5 and 2 x 1.0
    }
    assert stats.scalars() == {}


def test_episode_stats_count_success_once_and_steps_per_finished_episode():
    stats = EpisodeStats(num_envs=2)
    stats.record(0, {"success": True, "chunk_len": 10}, done=False)
    stats.record(0, {"success": False, "chunk_len": 4}, done=True)
    stats.record(1, {"success": False, "chunk_len": 10}, done=False)
    stats.record(1, {"success": False, "chunk_len": 10}, done=True)
    assert stats.scalars() == {"env/success_once": 0.5, "env/episode_len": 17.0}
    assert stats.scalars() == {}


def test_a_run_logs_every_reference_scalar_by_its_exact_name(tmp_path):
    config = Stage2Config(
        chunk_len=CHUNK_LEN, hidden_dim=16, batch_size=8, learning_starts=4, warmup_updates=2,
        device="cpu",
    )  # fmt: skip
    learner = Stage2Learner(config, DIMS)
    chunk_stats, train_episodes = ChunkStats(), EpisodeStats(1)
    eval_episodes = EpisodeStats(1, prefix="eval")
    for step in range(4):
        info = {"record_transition": True, "success": step == 3, "chunk_len": CHUNK_LEN}
        stored = transition(float(step))
        learner.add_transitions([stored])
        chunk_stats.record(info, stored)
        train_episodes.record(0, info, done=step == 3)
    eval_episodes.record(0, {"success": True}, done=True)
    with ScalarLog(tmp_path) as log:
        log.write(learner.train_step(), step=40)
        log.write(chunk_stats.scalars() | train_episodes.scalars(), step=40)
        log.write(eval_episodes.scalars(), step=40)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    names = set(events.Tags()["scalars"])
    assert REFERENCE_SCALARS <= names
    assert names - REFERENCE_SCALARS == {"eval/episode_len"} | NON_FINITE_SCALARS
    assert events.Scalars("train/rlt/critic_updates_run")[0].value == 2.0
    assert events.Scalars("env/success_once")[0].step == 40
