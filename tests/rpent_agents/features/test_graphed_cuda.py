"""The built-in VLA's CUDA-graph fast path against the eager featurizer.

These need a CUDA device, which CI never has; they run on the GPU machine
(`python -m pytest tests/rpent_agents/features/test_graphed_cuda.py`). Tolerance: TF32 is off
here (cuDNN's convolutions use it by default, the rounding of one call then depending on the
algorithm picked for its batch shape), so both paths run float32 maths and agree to 1e-4
(relative and absolute; the kernels may still differ between a batch and its padded bucket).
"""

import numpy as np
import pytest
import torch
from builtin_helpers import instructions, observations, small_models

from rpent_agents.features import graphed as graphed_module
from rpent_agents.features.checkpoint import load_featurizer
from rpent_agents.features.graphed import GraphedRLTFeaturizer
from rpent_agents.features.protocol import RLTFeaturizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (CI machines have none)"
    ),
]
TOLERANCE = dict(rtol=1e-4, atol=1e-4)
BUCKETS = (1, 2, 4, 8)


@pytest.fixture(autouse=True)
def float32_maths():
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = False, False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def featurizers(**overrides):
    vla, rl_token = small_models("cuda", **overrides)
    return RLTFeaturizer(vla, rl_token), GraphedRLTFeaturizer(vla, rl_token, BUCKETS)


@pytest.mark.parametrize("count", [1, 3, 8, 11])  # 11: pieces of 8 and 3
def test_graphed_features_equal_eager_ones(count):
    eager, graphed = featurizers()
    graphed.rlt_features(observations(8, seed=1), instructions(8)[::-1])  # stale padding rows
    obs, texts = observations(count), instructions(count)
    expected, features = eager.rlt_features(obs, texts), graphed.rlt_features(obs, texts)
    np.testing.assert_allclose(features.z_rl, expected.z_rl, **TOLERANCE)
    np.testing.assert_allclose(features.ref_chunk, expected.ref_chunk, **TOLERANCE)
    assert graphed.use_cuda_graphs


def test_a_bucket_replayed_on_new_inputs_gives_their_features():
    eager, graphed = featurizers()
    first = graphed.rlt_features(observations(3, seed=1), instructions(3))
    obs = observations(3, seed=2)
    second = graphed.rlt_features(obs, instructions(3))
    expected = eager.rlt_features(obs, instructions(3))
    np.testing.assert_allclose(second.z_rl, expected.z_rl, **TOLERANCE)
    np.testing.assert_allclose(second.ref_chunk, expected.ref_chunk, **TOLERANCE)
    assert np.abs(second.z_rl - first.z_rl).max() > 1e-2


def test_each_bucket_is_captured_once(monkeypatch):
    captures, capture = [], graphed_module.capture

    def counted_capture(run, device):
        captures.append(capture(run, device))
        return captures[-1]

    _, graphed = featurizers()
    monkeypatch.setattr("rpent_agents.features.graphed.capture", counted_capture)
    for count in (1, 3, 2, 5, 4, 7, 1, 2, 19):  # 19: pieces of 8, 8 and 3
        graphed.rlt_features(observations(count, seed=count), instructions(count))
    assert sorted(key.rows for key in graphed.buckets) == [1, 2, 4, 8]
    assert len(captures) == 4
    graphs = {id(bucket.captured.graph) for bucket in graphed.buckets.values()}
    assert graphs == {id(captured.graph) for captured in captures}


def test_the_flow_head_samples_fresh_noise_inside_the_graph():
    eager, graphed = featurizers(action_head="flow")
    obs, texts = observations(3), instructions(3)
    first, second = graphed.rlt_features(obs, texts), graphed.rlt_features(obs, texts)
    third = graphed.rlt_features(obs, texts)
    np.testing.assert_allclose(first.z_rl, eager.rlt_features(obs, texts).z_rl, **TOLERANCE)
    assert np.isfinite(first.ref_chunk).all()
    assert not np.array_equal(second.ref_chunk, third.ref_chunk)  # replays, new noise each


def test_an_output_overflowing_in_one_row_is_refused_as_eager():
    eager, graphed = featurizers()
    obs = observations(11)  # pieces of 8 and 3: row 9 sits in the second
    obs[9]["state"][:] = np.finfo(np.float32).max
    messages = []
    for featurizer in (eager, graphed):
        with pytest.raises(ValueError) as error:
            featurizer.rlt_features(obs, instructions(11))
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert "of observation 9 holds" in messages[1]


def test_load_featurizer_takes_the_fast_path_on_cuda_unless_told_not_to():
    assert type(load_featurizer(device="cuda")) is GraphedRLTFeaturizer
    assert type(load_featurizer(device="cuda", cuda_graphs=False)) is RLTFeaturizer
