"""Feature server and client on loopback: real server processes, real websockets."""

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.checkpoint import load_featurizer, save_checkpoint
from rpent_agents.features.norm import NormStats
from rpent_agents.features.remote import FeatureServerError, RemoteFeatureModel, stack_observations
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.features.server import FeatureServerPolicy

pytestmark = pytest.mark.subprocess

INSTRUCTION = "insert the peg in the hole"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command):
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    config = BuiltinVLAConfig(image_size=32, patch_size=16, dim=32, num_layers=1, num_head_layers=1)
    vla = BuiltinVLA(config, NormStats([0.0] * 9, [2.0] * 9, [0.1] * 8, [0.5] * 8))
    folder = tmp_path_factory.mktemp("remote") / "checkpoint"
    save_checkpoint(folder, vla, RLToken(RLTokenConfig(dim=32, prefix_seq_len=64)))
    return folder


@pytest.fixture(scope="module")
def feature_server(checkpoint):
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "rpent_agents.features.server",
        "--checkpoint",
        str(checkpoint),
    ]
    process = start([*command, "--port", str(port), "--device", "cpu"])
    client = RemoteFeatureModel("127.0.0.1", port, connect_timeout_s=120)
    yield client
    client.close()
    stop(process)


@pytest.fixture(scope="module")
def stock_server():
    port = free_port()
    script = Path(__file__).with_name("stock_openpi_server.py")
    process = start([sys.executable, str(script), str(port)])
    client = RemoteFeatureModel("127.0.0.1", port, connect_timeout_s=60)
    yield client
    client.close()
    stop(process)


def observations(count):
    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
            "state": rng.normal(size=9).astype(np.float32),
        }
        for _ in range(count)
    ]


def test_metadata_describes_the_served_model(feature_server):
    assert feature_server.is_feature_server
    assert (feature_server.z_dim, feature_server.prefix_dim) == (32, 32)
    assert (feature_server.chunk_len, feature_server.action_dim) == (10, 8)


def test_remote_features_equal_local_ones(feature_server, checkpoint):
    obs = observations(3)
    local = load_featurizer(checkpoint)
    remote = feature_server.rlt_features(obs, [INSTRUCTION] * 3)
    assert feature_server.last_server_infer_ms > 0  # the server's share of the call
    expected = local.rlt_features(obs, [INSTRUCTION] * 3)
    np.testing.assert_allclose(remote.z_rl, expected.z_rl, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(remote.ref_chunk, expected.ref_chunk, rtol=1e-5, atol=1e-6)
    prefix = feature_server.featurize(obs, [INSTRUCTION] * 3)
    expected_prefix = local.feature_model.featurize(obs, [INSTRUCTION] * 3)
    torch.testing.assert_close(prefix.prefix_tokens, expected_prefix.prefix_tokens.detach())
    assert prefix.pad_mask.tolist() == expected_prefix.pad_mask.tolist()
    assert prefix.image_token_count == expected_prefix.image_token_count == 8
    chunk = feature_server.reference_chunk(obs[0], INSTRUCTION)
    np.testing.assert_allclose(chunk, expected.ref_chunk[0], rtol=1e-5, atol=1e-6)


def test_a_non_finite_request_is_refused_and_the_server_serves_on(feature_server):
    obs = observations(2)
    obs[1]["state"][3] = np.nan
    refused = r"refused the request: observation 1: 'state' holds nan at \[3\]"
    with pytest.raises(FeatureServerError, match=refused):
        feature_server.rlt_features(obs, [INSTRUCTION] * 2)
    with pytest.raises(FeatureServerError, match=refused):
        feature_server.featurize(obs, [INSTRUCTION] * 2)
    obs[1]["state"][3] = 0.0
    features = feature_server.rlt_features(obs, [INSTRUCTION] * 2)  # the same connection
    assert np.isfinite(features.z_rl).all() and np.isfinite(features.ref_chunk).all()


def test_a_request_that_breaks_the_server_gets_the_traceback_and_others_are_served(
    feature_server,
):
    host, port = feature_server.address.removeprefix("ws://").split(":")
    other = RemoteFeatureModel(host, int(port))
    with pytest.raises(RuntimeError, match="KeyError: 'observations'"):
        other._client.infer({"want": "z_rl"})  # no observations: a bug on the server's side
    features = feature_server.rlt_features(observations(1), [INSTRUCTION])  # its own connection
    assert features.z_rl.shape == (1, 32)


def test_the_server_refuses_to_answer_with_a_broken_models_output(checkpoint):
    featurizer = load_featurizer(checkpoint)
    with torch.no_grad():
        featurizer.feature_model.norm.weight.fill_(np.inf)  # e.g. an overflow in the last layer
    policy = FeatureServerPolicy(featurizer)
    request = {"observations": stack_observations(observations(2)), "instructions": ["a", "b"]}
    for want in ("z_rl", "prefix"):
        reply = policy.infer({**request, "want": want})
        assert set(reply) == {"error"}
        assert "BuiltinVLA output 'prefix' of observation 0 holds" in reply["error"]


def test_stock_openpi_server_gives_reference_chunks_only(stock_server):
    assert not stock_server.is_feature_server
    obs = observations(1)[0]
    chunk = stock_server.reference_chunk(obs, INSTRUCTION)
    assert chunk.shape == (10, 8)
    np.testing.assert_allclose(chunk[0], obs["state"][:8])
    with pytest.raises(FeatureServerError, match="stock OpenPI policy server.*z_rl"):
        stock_server.rlt_features([obs], [INSTRUCTION])
    with pytest.raises(FeatureServerError, match="prefix tokens"):
        stock_server.featurize([obs], [INSTRUCTION])


def test_no_server_is_a_connection_error():
    with pytest.raises(ConnectionError, match="no server at ws://127.0.0.1"):
        RemoteFeatureModel("127.0.0.1", free_port(), connect_timeout_s=0.5)
