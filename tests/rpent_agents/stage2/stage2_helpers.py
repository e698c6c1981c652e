"""Small RLT observations and transitions for the Stage 2 tests."""

import numpy as np

from rpent_agents.stage2 import RLTDims, RLTTransition

DIMS = RLTDims(z_dim=4, proprio_dim=2, ref_chunk_len=3, action_dim=2)
CHUNK_LEN = 2


def rlt_obs(value: float, dims: RLTDims = DIMS) -> dict[str, np.ndarray]:
    return {
        "z_rl": np.full(dims.z_dim, value, np.float32),
        "proprio": np.full(dims.proprio_dim, value, np.float32),
        "ref_chunk": np.full((dims.ref_chunk_len, dims.action_dim), value, np.float32),
    }


def transition(value: float, dims: RLTDims = DIMS, chunk_len: int = CHUNK_LEN) -> RLTTransition:
    obs, next_obs = rlt_obs(value, dims), rlt_obs(value + 0.5, dims)
    return RLTTransition(
        z_rl=obs["z_rl"],
        proprio=obs["proprio"],
        ref_chunk=obs["ref_chunk"],
        action=np.full((chunk_len, dims.action_dim), value, np.float32),
        rewards=np.full(chunk_len, value, np.float32),
        next_z_rl=next_obs["z_rl"],
        next_proprio=next_obs["proprio"],
        next_ref_chunk=next_obs["ref_chunk"],
        done=False,
        intervened=np.zeros(chunk_len, bool),
    )
