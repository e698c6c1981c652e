"""Small RLT observations and transitions for the Stage 2 tests."""

import numpy as np
import torch

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config, Stage2Learner

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


def random_transitions(count: int, seed: int = 0) -> list[RLTTransition]:
    """`count` transitions of random values (rewards and interventions on ~30% of steps)."""
    rng = np.random.default_rng(seed)

    def uniform(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(np.float32)

    ref_shape = (DIMS.ref_chunk_len, DIMS.action_dim)
    return [
        RLTTransition(
            z_rl=uniform(DIMS.z_dim),
            proprio=uniform(DIMS.proprio_dim),
            ref_chunk=uniform(*ref_shape),
            action=uniform(CHUNK_LEN, DIMS.action_dim),
            rewards=(rng.uniform(size=CHUNK_LEN) < 0.3).astype(np.float32),
            next_z_rl=uniform(DIMS.z_dim),
            next_proprio=uniform(DIMS.proprio_dim),
            next_ref_chunk=uniform(*ref_shape),
            done=bool(rng.uniform() < 0.2),
            intervened=rng.uniform(size=CHUNK_LEN) < 0.3,
        )
        for _ in range(count)
    ]


def filled_learner(cuda_graphs: bool, **overrides) -> Stage2Learner:
    """A CUDA learner holding 200 random transitions (`cuda_graphs` on or off)."""
    config = Stage2Config(
        chunk_len=CHUNK_LEN,
        batch_size=32,
        replay_capacity=256,
        sample_window=256,
        weight_warmup_updates=3,
        weight_ramp_updates=6,
        cuda_graphs=cuda_graphs,
        device="cuda",
        **overrides,
    )
    learner = Stage2Learner(config, DIMS)
    learner.add_transitions(random_transitions(200))
    return learner


def stored_observations(learner: Stage2Learner, count: int) -> dict[str, np.ndarray]:
    """The observations of `count` stored transitions drawn at random, as the env gives them."""
    obs = learner.replay.sample(count).obs
    return {
        "z_rl": obs.z_rl.cpu().numpy(),
        "proprio": obs.proprio.cpu().numpy(),
        "ref_chunk": obs.ref_chunk.cpu().numpy(),
    }


def network_tensors(learner: Stage2Learner) -> list[torch.Tensor]:
    """Every tensor of the learner's four networks, in a fixed order."""
    modules = (learner.actor, learner.acting_actor, learner.critic, learner.target_critic)
    return [tensor for module in modules for tensor in module.state_dict().values()]


def assert_same_learning(expected: Stage2Learner, learner: Stage2Learner) -> None:
    """The two learners' networks hold the same weights (to float rounding)."""
    for expected_tensor, tensor in zip(
        network_tensors(expected), network_tensors(learner), strict=True
    ):
        torch.testing.assert_close(tensor, expected_tensor, rtol=1e-4, atol=1e-5)


def tiny_featurizer(state_dim: int = 9, action_dim: int = 8) -> RLTFeaturizer:
    """An untrained built-in VLA and RL token of the peg's sizes, on 32-pixel images."""
    vla = BuiltinVLA(
        BuiltinVLAConfig(image_size=32, dim=32, num_heads=2, num_layers=1),
        NormStats.identity(state_dim, action_dim),
    )
    token = RLToken(RLTokenConfig(dim=32, num_heads=2, num_encoder_layers=1, prefix_seq_len=128))
    return RLTFeaturizer(vla, token)
