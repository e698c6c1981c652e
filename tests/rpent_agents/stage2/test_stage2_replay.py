"""Replay transitions from chunk infos, the ring buffer, its recent window and its file."""

import os

import numpy as np
import pytest
import torch
from stage2_helpers import CHUNK_LEN, DIMS, rlt_obs, transition

from rpent_agents.stage2 import (
    ReplayBuffer,
    RLTDims,
    Stage2Config,
    Stage2Learner,
    build_transition,
    vector_step_items,
)
from rpent_envs.state_checks import INVALID_STATE_KEY


def _info(**overrides):
    info = {
        "record_transition": True,
        "executed_action": np.array([[0.1, 0.2]], np.float32),
        "chunk_rewards": np.array([1.0], np.float32),
        "chunk_len": 1,
        "intervene_flag": False,
    }
    return info | overrides


def test_only_chunks_flagged_record_transition_are_stored():
    obs, next_obs = rlt_obs(0.0), rlt_obs(1.0)
    for info in (_info(record_transition=False), {"chunk_rewards": [0.0]}):
        assert build_transition(obs, next_obs, info, False, False, CHUNK_LEN) is None


def test_short_chunk_is_padded_with_zero_reward_and_the_last_action():
    item = build_transition(rlt_obs(0.0), rlt_obs(1.0), _info(), True, False, CHUNK_LEN)
    np.testing.assert_allclose(item.action, [[0.1, 0.2], [0.1, 0.2]])
    np.testing.assert_array_equal(item.rewards, [1.0, 0.0])
    np.testing.assert_array_equal(item.next_z_rl, np.ones(4))
    assert item.done
    np.testing.assert_array_equal(item.ref_chunk, np.zeros((3, 2)))


def test_a_workers_padded_chunk_gives_the_transition_of_the_chunk_that_ran():
    padded = _info(
        executed_action=np.array([[0.1, 0.2], [0.0, 0.0]], np.float32),
        chunk_rewards=np.array([1.0, 0.0], np.float32),
    )  # chunk_len 1 of H = 2, padded with zeros as RLTWorker does
    item = build_transition(rlt_obs(0.0), rlt_obs(1.0), padded, True, False, CHUNK_LEN)
    unpadded = build_transition(rlt_obs(0.0), rlt_obs(1.0), _info(), True, False, CHUNK_LEN)
    np.testing.assert_allclose(item.action, [[0.1, 0.2], [0.1, 0.2]])
    for name in ("action", "rewards", "intervened", "ref_chunk"):
        np.testing.assert_array_equal(getattr(item, name), getattr(unpadded, name))


def test_intervened_steps_store_the_executed_action_as_reference():
    info = _info(
        executed_action=np.array([[0.3, 0.4], [0.5, 0.6]], np.float32),
        chunk_rewards=np.zeros(2, np.float32),
        chunk_len=2,
        intervene_flag=True,
    )
    obs = rlt_obs(9.0)
    item = build_transition(obs, rlt_obs(1.0), info, False, False, CHUNK_LEN)
    np.testing.assert_allclose(item.ref_chunk, [[0.3, 0.4], [0.5, 0.6], [9.0, 9.0]])
    np.testing.assert_array_equal(item.intervened, [True, True])
    np.testing.assert_array_equal(obs["ref_chunk"], np.full((3, 2), 9.0))  # input untouched
    assert not item.done


@pytest.mark.parametrize(
    ("terminated", "truncated", "truncation_ends_bootstrap", "done"),
    [(False, True, True, True), (False, True, False, False), (True, False, False, True)],
)
def test_done_follows_termination_and_optionally_truncation(
    terminated, truncated, truncation_ends_bootstrap, done
):
    item = build_transition(
        rlt_obs(0.0), rlt_obs(1.0), _info(), terminated, truncated, 2, truncation_ends_bootstrap
    )
    assert item.done is done


def test_a_chunk_ended_by_a_non_finite_state_is_done_even_when_truncation_bootstraps():
    info = _info(**{INVALID_STATE_KEY: "state[0]=nan"})
    item = build_transition(rlt_obs(0.0), rlt_obs(1.0), info, False, True, 2, False)
    assert item.done


def test_missing_or_inconsistent_chunk_info_is_reported():
    obs = rlt_obs(0.0)
    with pytest.raises(KeyError, match="executed_action.*PegInsertion-RLT-v0"):
        build_transition(obs, obs, {"record_transition": True, "chunk_rewards": [0]}, 0, 0, 2)
    with pytest.raises(ValueError, match="chunk_len 3"):
        build_transition(obs, obs, _info(chunk_len=3), False, False, CHUNK_LEN)


def test_vector_step_items_split_batched_infos_and_skip_autoreset_steps():
    obs = {key: np.stack([value, value + 1]) for key, value in rlt_obs(0.0).items()}
    infos = {
        "record_transition": np.array([True, False]),
        "_record_transition": np.array([True, True]),
        "success": np.array([False, True]),
        "_success": np.array([False, True]),
    }
    items = list(vector_step_items(obs, obs, infos, np.array([0, 1]), np.array([0, 0])))
    assert [item[2] for item in items] == [
        {"record_transition": True},
        {"record_transition": False, "success": True},
    ]
    np.testing.assert_array_equal(items[1][0]["z_rl"], np.ones(4))
    assert items[1][3] is True
    skipped = vector_step_items(obs, obs, infos, np.zeros(2), np.zeros(2), np.array([1, 0]))
    assert len(list(skipped)) == 1


def test_ring_buffer_keeps_the_newest_and_samples_only_the_recent_window():
    buffer = ReplayBuffer(DIMS, CHUNK_LEN, capacity=4, sample_window=2)
    for value in range(6):
        buffer.add(transition(float(value)))
    assert (len(buffer), buffer.total_added) == (4, 6)
    batch = buffer.sample(200, torch.Generator().manual_seed(0))
    assert set(batch.obs.z_rl[:, 0].tolist()) == {4.0, 5.0}
    assert torch.equal(batch.next_obs.z_rl[:, 0], batch.obs.z_rl[:, 0] + 0.5)
    assert batch.action.shape == (200, CHUNK_LEN, 2)
    assert batch.intervened.dtype == torch.bool


def test_adding_many_at_once_stores_what_adding_one_by_one_does():
    items = [transition(float(value)) for value in range(7)]
    items[2].z_rl[0] = np.nan  # refused and counted either way
    for item in items[::3]:
        item.intervened[:] = True
    one_by_one, at_once = (ReplayBuffer(DIMS, CHUNK_LEN, capacity=4) for _ in range(2))
    one_by_one.add(items[0])
    at_once.add_many(items[:1])
    for item in items[1:]:  # wraps around the ring, then more than it holds in one call
        one_by_one.add(item)
    assert at_once.add_many(items[1:]) == 5
    for buffer in (one_by_one, at_once):
        assert (buffer.next_index, len(buffer), buffer.total_added) == (2, 4, 6)
        assert buffer.refused_non_finite == 1
    for name, stored in one_by_one.storage.items():
        assert torch.equal(at_once.storage[name], stored), name
    np.testing.assert_array_equal(at_once.intervened_host, one_by_one.intervened_host)
    assert at_once.add_many([]) == 0


def test_a_share_of_each_batch_comes_from_intervened_transitions(tmp_path):
    buffer = ReplayBuffer(DIMS, CHUNK_LEN, capacity=40, sample_window=30)
    for value in range(50):  # every 10th intervened; 0 and 10 fall out of the window
        item = transition(float(value))
        item.intervened[:] = value % 10 == 0
        buffer.add(item)
    generator = torch.Generator().manual_seed(0)
    uniform = buffer.sample(1000, generator)
    assert 0.0 < uniform.intervened.any(dim=-1).float().mean() < 0.1
    batch = buffer.sample(1000, generator, intervention_share=0.5)
    intervened = batch.intervened.any(dim=-1)
    assert 0.5 <= intervened.float().mean() < 0.6  # half by design, plus the uniform draws
    assert set(batch.obs.z_rl[intervened, 0].tolist()) == {20.0, 30.0, 40.0}
    buffer.save(tmp_path / "replay.npz")  # the share survives a resume
    restored = ReplayBuffer(DIMS, CHUNK_LEN, capacity=40, sample_window=30)
    restored.load(tmp_path / "replay.npz")
    again = restored.sample(1000, generator, intervention_share=0.5).intervened.any(dim=-1)
    assert 0.5 <= again.float().mean() < 0.6
    nothing_intervened = ReplayBuffer(DIMS, CHUNK_LEN, capacity=4)
    nothing_intervened.add(transition(1.0))
    assert nothing_intervened.sample(8, intervention_share=0.5).obs.z_rl.shape == (8, 4)


def test_batches_drawn_at_once_are_independent_and_each_has_the_intervention_share():
    buffer = ReplayBuffer(DIMS, CHUNK_LEN, capacity=40, sample_window=30)
    for value in range(50):  # every 10th intervened; 0 and 10 fall out of the window
        item = transition(float(value))
        item.intervened[:] = value % 10 == 0
        buffer.add(item)
    batches = buffer.sample_batches(3, 400, torch.Generator().manual_seed(0), 0.25)
    assert len(batches) == 3
    for batch in batches:
        assert batch.obs.z_rl.shape == (400, 4) and batch.action.shape == (400, CHUNK_LEN, 2)
        assert batch.intervened[:100].all()  # the share leads each batch
        assert set(batch.obs.z_rl[:, 0].tolist()) == {float(value) for value in range(20, 50)}
        assert torch.equal(batch.next_obs.z_rl[:, 0], batch.obs.z_rl[:, 0] + 0.5)
    assert not torch.equal(batches[0].obs.z_rl, batches[1].obs.z_rl)


def test_a_transition_of_the_wrong_shape_is_refused_and_nothing_is_stored():
    buffer = ReplayBuffer(DIMS, CHUNK_LEN, capacity=4)
    with pytest.raises(ValueError, match=r"RLTTransition.z_rl has shape \(5,\)"):
        buffer.add(transition(0.0, dims=RLTDims(5, 2, 3, 2)))
    assert len(buffer) == 0
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample(1)


@pytest.mark.parametrize(
    ("field", "bad_value"), [("z_rl", np.nan), ("rewards", np.inf), ("next_ref_chunk", -np.inf)]
)
def test_a_non_finite_transition_is_refused_counted_and_the_buffer_goes_on(
    field, bad_value, tmp_path
):
    learner = Stage2Learner(Stage2Config(chunk_len=CHUNK_LEN, device="cpu"), DIMS)
    broken = transition(1.0)
    getattr(broken, field).flat[-1] = bad_value
    assert learner.add_transitions([transition(0.0), broken, None, transition(2.0)]) == 2
    replay = learner.replay
    assert (len(replay), replay.total_added, replay.refused_non_finite) == (2, 2, 1)
    assert learner.replay_scalars()["train/replay_buffer/refused_non_finite"] == 1.0
    assert set(replay.sample(50).obs.z_rl[:, 0].tolist()) == {0.0, 2.0}
    replay.save(tmp_path / "replay.npz")
    restored = ReplayBuffer(DIMS, CHUNK_LEN, capacity=10)
    restored.load(tmp_path / "replay.npz")
    assert restored.refused_non_finite == 1


def test_save_and_load_round_trip_in_order(tmp_path):
    buffer = ReplayBuffer(DIMS, CHUNK_LEN, capacity=3)
    for value in range(5):
        buffer.add(transition(float(value)))
    buffer.save(tmp_path / "replay.npz")
    restored = ReplayBuffer(DIMS, CHUNK_LEN, capacity=10)
    restored.load(tmp_path / "replay.npz")
    assert (len(restored), restored.total_added) == (3, 5)
    assert restored.storage["z_rl"][:3, 0].tolist() == [2.0, 3.0, 4.0]
    smaller = ReplayBuffer(DIMS, CHUNK_LEN, capacity=2)
    smaller.load(tmp_path / "replay.npz")
    assert smaller.storage["z_rl"][:, 0].tolist() == [3.0, 4.0]
    assert smaller.sample(50).obs.z_rl[:, 0].max().item() == 4.0
    with pytest.raises(ValueError, match="differ from this learner"):
        ReplayBuffer(DIMS, 3, capacity=2).load(tmp_path / "replay.npz")
    assert not list(tmp_path.glob("*.partial*"))


def test_observed_reference_keeps_the_vla_chunk_on_intervened_steps():
    info = _info(
        executed_action=np.array([[0.3, 0.4], [0.5, 0.6]], np.float32),
        chunk_rewards=np.zeros(2, np.float32),
        chunk_len=2,
        intervene_flag=True,
    )
    item = build_transition(
        rlt_obs(9.0), rlt_obs(1.0), info, False, False, CHUNK_LEN,
        reference_on_interventions="observed",
    )  # fmt: skip
    np.testing.assert_array_equal(item.ref_chunk, np.full((3, 2), 9.0))
    np.testing.assert_allclose(item.action[:2], [[0.3, 0.4], [0.5, 0.6]])  # the BC target
    np.testing.assert_array_equal(item.intervened, [True, True])


@pytest.mark.slow
def test_a_full_buffer_keeps_memory_flat_while_it_turns_over():
    # CI-sized; bench/long_run_memory.py replay measures the default capacity (50000).
    def resident_bytes():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    dims, capacity = RLTDims(256, 9, 10, 8), 2000
    buffer = ReplayBuffer(dims, chunk_len=10, capacity=capacity)
    generator = torch.Generator().manual_seed(0)

    def add(count):
        for index in range(count):
            buffer.add(transition(float(index), dims, chunk_len=10))
            if index % 10 == 0:
                buffer.sample(64, generator)

    add(capacity)  # every page of the preallocated storage is touched
    at_capacity = resident_bytes()
    add(3 * capacity)
    grown = resident_bytes() - at_capacity
    assert len(buffer) == capacity and buffer.total_added == 4 * capacity
    assert grown < 2**20, f"RSS grew {grown / 2**20:.2f} MiB while the full buffer turned over"
