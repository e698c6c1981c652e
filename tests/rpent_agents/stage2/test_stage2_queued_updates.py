"""The training loop's queued updates on a GPU: launched with no host read, and on a stream of
their own (`Stage2Config.update_stream`) beside the process's other GPU work, which with
`Stage2Config.act_during_updates` includes acting and storing.

Needs a CUDA device, which CI never has; runs on the GPU machine
(`python -m pytest tests/rpent_agents/stage2/test_stage2_queued_updates.py`). Kept apart from
the CUDA-graph tests, whose failure turns the graphs off in the device jobs.
"""

import numpy as np
import pytest
import torch
from stage2_helpers import (
    assert_same_learning,
    filled_learner,
    random_transitions,
    stored_observations,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (CI machines have none)"
    ),
]
QUEUED = {"learning_starts": 0, "update_schedule": False, "intervention_batch_share": 0.25}


@pytest.mark.parametrize("update_stream", [False, True], ids=["current-stream", "own-stream"])
def test_a_queued_train_step_reads_nothing_back_from_the_device(update_stream):
    learner = filled_learner(cuda_graphs=True, update_stream=update_stream, **QUEUED)
    learner.run_updates(8)  # both update kinds captured
    learner.add_transitions(random_transitions(8, seed=1))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host sync raises
    try:
        scalars = learner.start_train_step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    read = scalars.read()
    assert read["train/rlt/critic_updates_run"] == learner.config.update_epoch
    assert np.isfinite(read["critic/critic_loss"])


@pytest.mark.parametrize("act_during_updates", [False, True], ids=["acting-waits", "acting-during"])
def test_updates_on_their_own_stream_learn_what_updates_on_the_current_stream_learn(
    act_during_updates,
):
    # The training loop's order: queue the updates, act, store, read the scalars.
    loop = QUEUED | {"act_during_updates": act_during_updates}
    same_stream = filled_learner(cuda_graphs=True, update_stream=False, **loop)
    own_stream = filled_learner(cuda_graphs=True, update_stream=True, **loop)
    obs = stored_observations(same_stream, 6)
    for step in range(6):
        trained = []
        for learner in (same_stream, own_stream):
            with learner.ahead_of_updates():  # as `rpent-stage2` runs
                scalars = learner.start_train_step()
                chunks = learner.act(obs)
                learner.add_transitions(random_transitions(8, seed=10 + step))
                q_values = learner.q_values(random_transitions(3, seed=20 + step))
                trained.append((scalars.read(), chunks, q_values))
        (same_scalars, same_chunks, same_q), (own_scalars, own_chunks, own_q) = trained
        assert own_scalars == pytest.approx(same_scalars, rel=1e-4, abs=1e-6)
        np.testing.assert_allclose(own_chunks, same_chunks, rtol=1e-4, atol=1e-5)
        assert own_q == pytest.approx(same_q, rel=1e-4, abs=1e-6)
    assert_same_learning(same_stream, own_stream)


def test_the_current_stream_runs_beside_the_queued_updates_and_acting_waits_for_them():
    learner = filled_learner(cuda_graphs=True, update_stream=True, **QUEUED)
    learner.run_updates(8)
    obs = stored_observations(learner, 4)
    with torch.cuda.stream(learner.update_stream):
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU clock ahead of the queued updates
    learner.start_train_step()

    featurized = torch.ones(64, device="cuda").sum()  # the loop's own work meanwhile
    done = torch.cuda.Event()
    done.record()
    done.synchronize()
    assert not learner.update_stream.query()  # it did not wait for the updates
    assert featurized.item() == 64

    learner.act(obs)
    assert learner.update_stream.query()  # acting came after them


def test_acting_during_updates_waits_for_none_of_them(monkeypatch):
    learner = filled_learner(
        cuda_graphs=True, update_stream=True, act_during_updates=True, **QUEUED
    )
    learner.run_updates(8)
    obs = stored_observations(learner, 4)

    def loop_step(seed):  # the training loop's order
        scalars = learner.start_train_step()
        with learner.ahead_of_updates():  # as `rpent-stage2` runs
            chunks = learner.act(obs)  # the host reads them back
            stored = learner.add_transitions(random_transitions(8, seed=seed))
            q_values = learner.q_values(random_transitions(2, seed=seed + 1))  # read back too
        return scalars, chunks, stored, q_values

    # A first step allocates the loop's device memory, and an allocation waits for the whole
    # device; the loop's later steps reuse it, as they do in a run.
    loop_step(seed=1)[0].read()
    refresh = learner.refresh_behaviour_networks

    def refresh_then_sleep():  # on the update stream, between the copies and the updates
        refresh()
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU clock ahead of the queued updates

    monkeypatch.setattr(learner, "refresh_behaviour_networks", refresh_then_sleep)
    scalars, chunks, stored, q_values = loop_step(seed=3)
    assert not learner.update_stream.query()  # none of it waited for the updates
    assert chunks.shape == (4, learner.config.chunk_len * 2) and np.isfinite(chunks).all()
    assert stored == 8 and all(np.isfinite(q_values))

    read = scalars.read()  # waits for them
    assert learner.update_stream.query()
    assert read["train/rlt/critic_updates_run"] == learner.config.update_epoch
    written = learner.replay.storage["rewards"][208:216].cpu().numpy()
    expected = np.stack([item.rewards for item in random_transitions(8, seed=3)])
    np.testing.assert_array_equal(written, expected)  # written after the updates, in order


def test_the_loop_s_own_work_runs_at_a_higher_priority_than_the_updates():
    learner = filled_learner(cuda_graphs=True, update_stream=True, **QUEUED)
    outer = torch.cuda.current_stream()
    with learner.ahead_of_updates():
        inner = torch.cuda.current_stream()
        assert inner != outer
        assert inner.priority < learner.update_stream.priority  # lower is higher
    assert torch.cuda.current_stream() == outer
    with learner.ahead_of_updates():
        assert torch.cuda.current_stream() == inner  # one stream, whose memory stays cached
