"""The loop profile of results.json: parts and the workers' busy share."""

import numpy as np
import pytest

from rpent_agents.stage2.loop_profile import LoopProfile


def test_the_workers_that_did_not_answer_are_left_out_of_the_busy_share():
    # Asynchronous stepping: worker 1 is still simulating, its row of the info is empty.
    profile = LoopProfile()
    infos = {
        "worker_chunk_s": np.array([0.1, 0.0, 0.3]),
        "_worker_chunk_s": np.array([True, False, True]),
        "worker_reset_s": np.array([0.1, 0.0, 0.0]),
        "worker_render_s": np.array([0.04, 0.5, 0.02]),
    }
    profile.add_step({"wait_s": 0.2}, infos)
    summary = profile.summary()
    assert summary["worker_mean_busy_ms_per_step"] == pytest.approx(250.0)
    assert summary["worker_max_busy_ms_per_step"] == pytest.approx(300.0)
    assert summary["worker_reset_ms_per_step"] == pytest.approx(50.0)
    assert summary["worker_render_ms_per_step"] == pytest.approx(30.0)
    assert summary["worker_busy_share"] == pytest.approx(250.0 / 300.0)


def test_a_synchronous_step_counts_every_worker():
    profile = LoopProfile()
    profile.add_step({"act_s": 0.01}, {"worker_chunk_s": np.array([0.1, 0.3])})
    profile.add_step({"act_s": 0.03}, {"worker_chunk_s": np.array([0.2, 0.2])})
    summary = profile.summary()
    assert summary["act_ms_per_step"] == pytest.approx(20.0)
    assert summary["worker_busy_share"] == pytest.approx(0.4 / 0.5)
