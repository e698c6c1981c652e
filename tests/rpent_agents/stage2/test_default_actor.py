"""The embedded default Stage 2 actor: its results name its weights and checkpoint; it acts."""

import hashlib
import json

import gymnasium as gym
import numpy as np
import pytest

import rpent_envs
from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.run.policies import ActorPolicy
from rpent_agents.stage2 import (
    DEFAULT_ACTOR_DIR,
    RLTDims,
    Stage2Config,
    Stage2Learner,
    load_actor,
    load_weights,
)

RESULTS = json.loads((DEFAULT_ACTOR_DIR / "results.json").read_text())


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_its_results_name_its_weights_the_embedded_checkpoint_and_the_held_out_seeds():
    assert RESULTS["weights_sha256"] == sha256(DEFAULT_ACTOR_DIR / "weights.pt")
    # trained on the embedded checkpoint's features: a new checkpoint needs a new actor
    checkpoint_model = DEFAULT_CHECKPOINT_DIR / "model.safetensors"
    assert RESULTS["checkpoint_model_sha256"] == sha256(checkpoint_model)
    assert RESULTS["eval_seeds"] == [0, 99]
    assert RESULTS["success_rate"] == len(RESULTS["successful_seeds"]) / 100
    assert RESULTS["success_rate"] > RESULTS["base_success_rate"]
    assert RESULTS["env_steps"] > 0 and "rpent-stage2" in RESULTS["command"]
    assert (DEFAULT_ACTOR_DIR / "weights.pt").stat().st_size < 12_000_000


@pytest.fixture(scope="module")
def peg_env():
    env = gym.make(rpent_envs.PEG_INSERTION_ID, image_size=32, render_backend="cpu")
    yield env
    env.close()


@pytest.mark.sim
def test_it_acts_on_the_embedded_checkpoints_features_as_its_learner_would(peg_env):
    config = PegRLTConfig(feature_device="cpu", trigger_mode="always_on")
    # no stage2_run: the embedded actor; the first chunk is its own under the options' gate
    policy = ActorPolicy.on_peg_stack(peg_env, config, actor_gate=False)
    observation, info = peg_env.reset(seed=8)
    policy.reset()
    decision = policy.decide(observation, info["task"])
    assert (decision.driver, decision.source) == ("actor", "actor")
    assert decision.model == f"rpent-stage2-actor:{DEFAULT_ACTOR_DIR}"
    assert decision.chunk.shape == (10, 8) and np.abs(decision.chunk).max() <= 1.0

    features = policy.vla.features(observation, info["task"])
    dims = RLTDims.from_observation_space(policy.vla.space)
    # the run evaluated through its critic (eval_q_filter): the default actor acts so too
    assert RESULTS["stage2_config"]["eval_q_filter"] and policy.actor.q_filter is not None
    # its run's config (the critic's heads, the Q filter), on the CPU
    learner = Stage2Learner(Stage2Config(**RESULTS["stage2_config"] | {"device": "cpu"}), dims)
    load_weights(learner, DEFAULT_ACTOR_DIR)
    np.testing.assert_allclose(
        decision.chunk.reshape(1, -1), learner.act(features, deterministic=True), atol=1e-6
    )
    networks = (policy.actor.actor, policy.actor.q_filter)
    assert not any(parameter.requires_grad for net in networks for parameter in net.parameters())
    np.testing.assert_array_equal(policy.actor.act(features), decision.chunk.reshape(1, -1))


@pytest.mark.sim
def test_it_opens_the_gate_it_was_trained_under(peg_env):
    # trained with the missed-grasp entry: whoever acts with it opens that gate by default
    assert RESULTS["gate"] == {"trigger_mode": "auto", "missed_grasp_chunks": 4}
    policy = ActorPolicy.on_peg_stack(peg_env, PegRLTConfig(feature_device="cpu"))
    assert policy.actor.gate == RESULTS["gate"]
    assert (policy.gate.trigger_mode, policy.gate.missed_grasp_chunks) == ("auto", 4)


def test_an_rlt_stack_of_other_sizes_is_refused():
    with pytest.raises(ValueError, match="chunk_len 10; the RLT stack has .* chunk_len 5"):
        load_actor(None, RLTDims(256, 9, 10, 8), chunk_len=5)
    with pytest.raises(FileNotFoundError, match="no Stage 2 weights file"):
        load_actor(DEFAULT_CHECKPOINT_DIR, RLTDims(256, 9, 10, 8), chunk_len=10)
