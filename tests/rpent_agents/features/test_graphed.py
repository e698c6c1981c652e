"""The built-in VLA's bucketed fast path on the CPU (no CUDA graph): padding, pieces, refusals.

The same padded computation as on CUDA, run eagerly: it must give the eager featurizer's
`z_rl` and reference chunk for every batch size, and refuse NaN and inf with its messages.
The CUDA graphs themselves: `test_graphed_cuda.py`.
"""

import numpy as np
import pytest
import torch
from builtin_helpers import instructions, observations, small_models

from rpent_agents.features.buckets import batch_pieces
from rpent_agents.features.checkpoint import load_featurizer
from rpent_agents.features.graphed import GraphedRLTFeaturizer
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.rollout.rlt_stack import PegRLTConfig

BUCKETS = (1, 2, 4)


def featurizers(**overrides):
    vla, rl_token = small_models(**overrides)
    return RLTFeaturizer(vla, rl_token), GraphedRLTFeaturizer(vla, rl_token, BUCKETS)


def test_batch_pieces_cover_the_batch_in_order():
    assert batch_pieces(4, BUCKETS) == [slice(0, 4)]
    assert batch_pieces(9, BUCKETS) == [slice(0, 4), slice(4, 8), slice(8, 9)]


@pytest.mark.parametrize("count", [1, 3, 4, 7, 9])
@pytest.mark.slow
def test_padded_buckets_give_the_eager_features(count):
    eager, graphed = featurizers(binarize_gripper=True)
    graphed.rlt_features(observations(4, seed=1), instructions(4)[::-1])  # stale padding rows
    obs, texts = observations(count), instructions(count)

    expected, features = eager.rlt_features(obs, texts), graphed.rlt_features(obs, texts)

    assert not graphed.use_cuda_graphs
    np.testing.assert_allclose(features.z_rl, expected.z_rl, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(features.ref_chunk, expected.ref_chunk, rtol=1e-5, atol=1e-6)
    assert features.z_rl.dtype == features.ref_chunk.dtype == np.float32
    assert {key.rows for key in graphed.buckets} <= set(BUCKETS)


@pytest.mark.slow
def test_the_flow_head_gives_the_eager_z_rl_and_fresh_chunks():
    eager, graphed = featurizers(action_head="flow")
    obs, texts = observations(3), instructions(3)

    first, second = graphed.rlt_features(obs, texts), graphed.rlt_features(obs, texts)

    np.testing.assert_allclose(first.z_rl, eager.rlt_features(obs, texts).z_rl, atol=1e-6)
    assert first.ref_chunk.shape == (3, 4, 8) and np.isfinite(first.ref_chunk).all()
    assert not np.array_equal(first.ref_chunk, second.ref_chunk)  # new noise at each call


def refusal(featurizer, obs, texts):
    with pytest.raises(ValueError) as error:
        featurizer.rlt_features(obs, texts)
    return str(error.value)


def test_a_non_finite_state_is_refused_naming_the_observation():
    eager, graphed = featurizers()
    obs = observations(7)
    obs[5]["state"][2] = np.nan
    message = refusal(graphed, obs, instructions(7))
    assert message == refusal(eager, obs, instructions(7))
    assert message.startswith("observation 5: 'state' holds nan at [2]")


@pytest.mark.slow
def test_an_output_overflowing_in_one_row_is_refused_naming_that_row():
    eager, graphed = featurizers()
    obs = observations(7)  # pieces of 4 and 3: row 5 sits in the second
    obs[5]["state"][:] = np.finfo(np.float32).max  # finite, but not its state token
    message = refusal(graphed, obs, instructions(7))
    assert message == refusal(eager, obs, instructions(7))
    assert "output 'prefix' of observation 5 holds nan" in message


@pytest.mark.parametrize(
    ("broken_weight", "output"),
    [("norm.weight", "prefix"), ("action_head.out.bias", "ref_chunk"), (None, "z_rl")],
)
@pytest.mark.slow
def test_a_broken_model_output_is_refused_as_the_eager_featurizer_does(broken_weight, output):
    eager, graphed = featurizers()
    with torch.no_grad():
        module = graphed.feature_model if broken_weight else graphed.rl_token
        module.get_parameter(broken_weight or "encoder_norm.weight").fill_(-np.inf)
    obs, texts = observations(3), instructions(3)
    message = refusal(graphed, obs, texts)
    assert message == refusal(eager, obs, texts)
    assert f"output '{output}' of observation 0 holds" in message


def test_unsupported_inputs_are_refused():
    _, graphed = featurizers()
    with pytest.raises(ValueError, match="3 observations but 1 instructions"):
        graphed.rlt_features(observations(3), ["one"])
    with pytest.raises(TypeError, match="built-in VLA only, got RLToken"):
        GraphedRLTFeaturizer(graphed.rl_token, graphed.rl_token)


@pytest.mark.slow
def test_the_cpu_keeps_the_eager_featurizer():
    assert type(load_featurizer(device="cpu", cuda_graphs=True)) is RLTFeaturizer
    assert type(PegRLTConfig(feature_device="cpu").make_featurizer()) is RLTFeaturizer
