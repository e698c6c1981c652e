"""Every key the RLT stack writes into a chunk's info is read by `ChunkInfo` or knowingly not.

The writers run for real (the chunk loop, `RLTObservation`, `PolicySwitch` with its gate and
takeover, a training worker, the operator's `OperatorOutcome`) over a small env that reports the
peg task's info signals, as the peg env does, without a simulator.
"""

from collections.abc import Mapping
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rpent_agents.rollout.worker import RLTWorker, SuppliedReference
from rpent_agents.stage2.chunk_info import KEYS_NOT_READ, ChunkInfo
from rpent_envs.episode import success_info
from wrappers import (
    AutoGate,
    ExpertTakeover,
    KeyPressQueue,
    OperatorOutcome,
    PolicySwitch,
    RLTObservation,
)

HORIZON, REF_CHUNK_LEN, ACTION_DIM, Z_DIM = 4, 6, 2, 3
SOLVED_AT_STEP = 30
PEG_SIGNAL_KEYS = {"success", "is_grasped", "peg_head_pos_at_hole", "hole_radius", "hole_entry_x"}


class PegSignalsEnv(gym.Env):
    """The peg env's step info without a simulator: the peg head advances 1 cm a step.

    The head starts at x = -0.30 m in the hole frame, the peg is held from the third step and
    the task is solved at x = 0 (step 30). At `nan_state_at` the state is all NaN, as from an
    env that does not check itself.
    """

    observation_space = gym.spaces.Dict(
        {"state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)}
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
    task_description = "insert the peg"

    def __init__(self, nan_state_at=None):
        self.nan_state_at = nan_state_at
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observation(), self._info()

    def step(self, action):
        self.steps += 1
        observation, info = self._observation(), self._info()
        if self.steps == self.nan_state_at:
            observation = {"state": np.full(3, np.nan, np.float32)}
        return observation, float(info["success"]), info["success"], False, info

    def _head_x_m(self):
        return 0.01 * (self.steps - SOLVED_AT_STEP)

    def _observation(self):
        return {"state": np.array([self._head_x_m(), 0.0, 0.0], np.float32)}

    def _info(self):
        return success_info(
            self.steps >= SOLVED_AT_STEP,
            self.task_description,
            is_grasped=self.steps >= 3,
            peg_head_pos_at_hole=np.array([self._head_x_m(), 0.0, 0.0], np.float32),
            hole_radius=0.02,
            hole_entry_x=-0.05,
            episode_seed=0,
        )


ENV_KEYS = set(PegSignalsEnv().reset(seed=0)[1])


class ZeroFeatures:
    """A feature source of zeros: what `RLTObservation` needs, without a network."""

    z_dim, chunk_len, action_dim = Z_DIM, REF_CHUNK_LEN, ACTION_DIM

    def rlt_features(self, observations, instructions):
        rows = len(observations)
        return SimpleNamespace(
            z_rl=np.zeros((rows, Z_DIM), np.float32),
            ref_chunk=np.zeros((rows, REF_CHUNK_LEN, ACTION_DIM), np.float32),
        )


def still_expert(observation):
    return np.zeros(ACTION_DIM, np.float32)


def worker_infos(env, chunks):
    """A training worker's chunk infos: per-step env -> switch -> worker (it resets itself)."""
    reference = SuppliedReference(HORIZON)
    switch = PolicySwitch(env, AutoGate(), reference=reference, horizon=HORIZON)
    takeover = ExpertTakeover.whole_critical_phase(still_expert)
    worker = RLTWorker(switch, reference, REF_CHUNK_LEN, takeover)
    worker.end_lost_grasps = True
    worker.reset(seed=0)
    action = {
        "actor": np.zeros(HORIZON * ACTION_DIM, np.float32),
        "ref_chunk": np.zeros((REF_CHUNK_LEN, ACTION_DIM), np.float32),
        "reset_seed": np.int64(1),
    }
    return [worker.step(action)[4] for _ in range(chunks)]


def composite_infos(env, chunks):
    """The composite env's chunk infos: per-step env -> RLTObservation -> switch."""
    featurized = RLTObservation(env, ZeroFeatures(), chunk_len=HORIZON)
    switch = PolicySwitch(
        featurized, AutoGate(), expert_takeover=ExpertTakeover.whole_critical_phase(still_expert)
    )
    switch.reset(seed=0)
    infos = []
    for _ in range(chunks):
        _, _, terminated, truncated, info = switch.step(np.zeros(HORIZON * ACTION_DIM))
        infos.append(info)
        if terminated or truncated:
            switch.reset(seed=1)
    return infos


class ReadLog(Mapping):
    """An info that remembers which keys were looked up (`get`, `in` and `[]` alike)."""

    def __init__(self, info):
        self.info, self.read = info, set()

    def __getitem__(self, key):
        self.read.add(key)
        return self.info[key]

    def __iter__(self):
        return iter(self.info)

    def __len__(self):
        return len(self.info)


@pytest.fixture(scope="module")
def chunk_infos():
    chunks = SOLVED_AT_STEP // HORIZON + 3  # past the first episode's end
    return [
        *worker_infos(PegSignalsEnv(), chunks),
        *worker_infos(PegSignalsEnv(nan_state_at=6), chunks),
        *composite_infos(PegSignalsEnv(), chunks),
        *composite_infos(PegSignalsEnv(nan_state_at=6), chunks),
        *composite_infos(OperatorOutcome(PegSignalsEnv(), key_source=KeyPressQueue()), chunks),
    ]


def keys_read(infos):
    read = set()
    for info in infos:
        log = ReadLog(info)
        ChunkInfo.from_info(log)
        read |= log.read
    return read


def test_every_key_written_is_read_or_knowingly_not(chunk_infos):
    written = set().union(*(set(info) - ENV_KEYS for info in chunk_infos))
    assert written - keys_read(chunk_infos) == set(KEYS_NOT_READ)


def test_chunk_info_reads_only_what_the_stack_or_the_peg_env_writes(chunk_infos):
    written = set().union(*(set(info) - ENV_KEYS for info in chunk_infos))
    assert keys_read(chunk_infos) - written == PEG_SIGNAL_KEYS


def test_the_runs_cover_the_switch_the_gate_and_the_episode_ends(chunk_infos):
    chunks = [ChunkInfo.from_info(info) for info in chunk_infos]
    assert {chunk.action_source for chunk in chunks} == {"vla", "actor"}
    assert any(chunk.critical_phase for chunk in chunks)
    assert any(chunk.invalid_state for chunk in chunks)
    assert any(chunk.success for chunk in chunks)
