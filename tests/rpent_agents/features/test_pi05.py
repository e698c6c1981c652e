"""pi0.5 through LeRobot's PI05Policy: a tiny random model, saved and loaded like a real one
(`pi05_toy.py`: small Gemma and vision configs, a local word-level tokenizer)."""

import copy
import http.client
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from pi05_toy import (
    IMAGE_SIZE,
    INSTRUCTION,
    PATCH,
    PROMPT_SLOTS,
    WIDTH,
    inject_tiny_configs,
    load_toy_model,
    observations,
    write_toy_folders,
)
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config

from rpent_agents.features.buckets import BATCH_BUCKETS, bucket_size
from rpent_agents.features.pi05 import PI05FeatureModel
from rpent_agents.features.pi05_options import PI05Options
from rpent_agents.features.precomputed import (
    Bf16CopyLinear,
    PrecomputedLinear,
    TabulatedLinear,
    fast_routes,
)
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.remote import RemoteFeatureModel, stack_observations
from rpent_agents.features.rl_token import RLToken, RLTokenConfig
from rpent_agents.features.server import FeatureServerPolicy, ServeArgs, pi05_featurizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pi05_folders(tmp_path_factory):
    return write_toy_folders(tmp_path_factory.mktemp("pi05"))


@pytest.fixture(scope="module")
def pi05_model(pi05_folders):
    return load_toy_model(pi05_folders)


def test_prefix_and_chunk_shapes(pi05_model):
    features = pi05_model.featurize(observations(2), [INSTRUCTION] * 2)
    image_tokens = 2 * (IMAGE_SIZE // PATCH) ** 2
    assert features.image_token_count == image_tokens
    assert features.prefix_tokens.shape == (2, image_tokens + 24, WIDTH)
    assert features.pad_mask.dtype == torch.bool and features.pad_mask[:, :image_tokens].all()
    assert 0 < features.pad_mask[:, image_tokens:].sum() < 2 * 24  # the prompt is right-padded
    assert features.ref_chunk.shape == (2, 10, 8)
    assert (pi05_model.prefix_dim, pi05_model.chunk_len, pi05_model.action_dim) == (WIDTH, 10, 8)


def test_one_pass_chunk_equals_stock_sampling(pi05_model):
    obs = observations(1)
    torch.manual_seed(7)
    features = pi05_model.featurize(obs, [INSTRUCTION])
    batch = pi05_model._policy_batch(obs, [INSTRUCTION])
    torch.manual_seed(7)
    stock = pi05_model.postprocessor(pi05_model.policy.predict_action_chunk(batch))
    torch.testing.assert_close(features.ref_chunk, stock.float(), rtol=1e-4, atol=1e-5)


def test_prefix_tokens_are_the_language_model_states(pi05_model):
    obs = observations(1)
    features = pi05_model.featurize(obs, [INSTRUCTION])
    other = pi05_model.featurize(obs, ["insert the hole in the peg"])
    image_tokens = features.image_token_count
    assert not torch.allclose(
        features.prefix_tokens[:, image_tokens:], other.prefix_tokens[:, image_tokens:]
    )


def test_rl_token_on_pi05_prefix(pi05_model):
    rl_token = RLToken(RLTokenConfig(dim=WIDTH, prefix_seq_len=64))
    features = RLTFeaturizer(pi05_model, rl_token).rlt_features(observations(2), [INSTRUCTION] * 2)
    assert features.z_rl.shape == (2, WIDTH) and features.ref_chunk.shape == (2, 10, 8)


def test_rl_token_in_bf16_is_close_to_fp32(pi05_model):
    rl_token = RLToken(RLTokenConfig(dim=WIDTH, prefix_seq_len=64))
    obs, instructions = observations(2), [INSTRUCTION] * 2
    z_rl = {}
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(3)
        featurizer = RLTFeaturizer(pi05_model, rl_token, rl_token_dtype=dtype)
        z_rl[dtype] = torch.from_numpy(featurizer.rlt_features(obs, instructions).z_rl)
    assert z_rl[torch.bfloat16].dtype == torch.float32
    assert not torch.allclose(z_rl[torch.bfloat16], z_rl[torch.float32], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(z_rl[torch.bfloat16], z_rl[torch.float32], rtol=5e-2, atol=5e-2)


def test_bf16_vision_changes_only_the_precision(pi05_model):
    """The vision tower under bf16 autocast: close to LeRobot's fp32 vision path, not equal;
    the stock path stays the default off the fast path, and the fast path of a bf16 policy
    turns it on."""
    assert pi05_model.options.bf16_vision is False
    policy, pre, post = pi05_model.policy, pi05_model.preprocessor, pi05_model.postprocessor
    bf16_vision = PI05FeatureModel(policy, pre, post, PI05Options(bf16_vision=True))
    obs = observations(2)
    features = []
    for model in (pi05_model, bf16_vision):
        torch.manual_seed(9)
        features.append(model.featurize(obs, [INSTRUCTION] * 2))
    stock, reduced = (prefix.prefix_tokens for prefix in features)
    images = features[0].image_token_count
    assert not torch.allclose(reduced[:, :images], stock[:, :images], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(reduced, stock, rtol=5e-2, atol=5e-2)
    bf16_policy = copy.deepcopy(policy)  # a cast back would leave the shared one rounded
    bf16_policy.model.paligemma_with_expert.paligemma.model.language_model.to(torch.bfloat16)
    fast_path = PI05Options(fast_path=True)
    assert PI05FeatureModel(bf16_policy, pre, post, fast_path).options.bf16_vision is True
    assert PI05FeatureModel(policy, pre, post, fast_path).options.bf16_vision is False


def poisoned_routes(policy: torch.nn.Module, kind: type) -> list[PrecomputedLinear]:
    """The policy's `kind` layers, their stock weights and biases set to NaN."""
    layers = [module for module in policy.modules() if isinstance(module, kind)]
    with torch.no_grad():
        for layer in layers:
            layer.weight.fill_(float("nan"))
            layer.bias.fill_(float("nan"))
    return layers


def test_modulation_tables_stand_in_for_the_adarms_dense_layers(pi05_model):
    """A fast model tabulates the action expert's adaRMS dense layers at the Euler times: with
    its routes on, the Euler loop no longer reads their weights (poisoned with NaN, the chunk
    is still the stock one); off them, the stock layers run (the poison shows). The policy's
    state dict keeps its keys."""
    policy, pre, post = (
        copy.deepcopy(pi05_model.policy),
        pi05_model.preprocessor,
        pi05_model.postprocessor,
    )
    keys = list(policy.state_dict())
    fast_path = PI05Options(fast_path=True)
    assert PI05FeatureModel(policy, pre, post, fast_path).options.precompute is True
    assert list(policy.state_dict()) == keys
    tables = poisoned_routes(policy, TabulatedLinear)
    assert len(tables) == 3  # one Gemma layer's two norms, and the final norm
    eager_view = PI05FeatureModel(policy, pre, post)
    obs, instructions = observations(2), [INSTRUCTION] * 2
    chunks = []
    for model, layers in ((pi05_model, []), (eager_view, tables), (eager_view, [])):
        torch.manual_seed(5)
        with fast_routes(layers):
            chunks.append(model.featurize(obs, instructions).ref_chunk)
    stock, tabulated, poisoned = chunks
    torch.testing.assert_close(tabulated, stock, rtol=1e-5, atol=1e-6)
    assert poisoned.isnan().all()


def test_bf16_copies_of_the_vision_weights_are_what_autocast_computes(pi05_model):
    """Under bf16 autocast (`bf16_vision`), the SigLIP tower's and projector's Linear layers
    read their bf16 copies: with the fp32 weights poisoned, the prefix is the stock bf16-vision
    one, bit for bit; the routes are not taken without autocast."""
    policy, pre, post = (
        copy.deepcopy(pi05_model.policy),
        pi05_model.preprocessor,
        pi05_model.postprocessor,
    )
    reference = PI05FeatureModel(pi05_model.policy, pre, post, PI05Options(bf16_vision=True))
    fast = PI05FeatureModel(policy, pre, post, PI05Options(fast_path=True, bf16_vision=True))
    assert fast.options.precompute is True
    copies = poisoned_routes(policy, Bf16CopyLinear)
    assert len(copies) == 7  # q, k, v, out, fc1, fc2 of one SigLIP layer, and the projector
    obs, instructions = observations(2), [INSTRUCTION] * 2
    prefixes = []
    for model, bf16_vision in ((reference, True), (fast, True), (fast, False)):
        options = PI05Options(bf16_vision=bf16_vision)
        eager_view = PI05FeatureModel(model.policy, pre, post, options)
        torch.manual_seed(6)
        with fast_routes(copies if model is fast else []):
            prefixes.append(eager_view.featurize(obs, instructions).prefix_tokens)
    stock, copied, without_autocast = prefixes
    assert torch.equal(copied, stock)
    images = (IMAGE_SIZE // PATCH) ** 2 * 2
    assert without_autocast[:, :images].isnan().all()


def test_grouped_query_attention_reads_the_key_value_head_in_place(pi05_model, monkeypatch):
    """On the fast route the Gemma attention of the prefix pass and the action expert never
    copies its key/value head to the query heads (transformers' `repeat_kv`, made to raise
    here) and gives the stock features; off the route the stock attention runs."""
    from transformers.models.gemma import modeling_gemma

    policy, pre, post = (
        copy.deepcopy(pi05_model.policy),
        pi05_model.preprocessor,
        pi05_model.postprocessor,
    )
    keys = list(policy.state_dict())
    fast = PI05FeatureModel(policy, pre, post, PI05Options(fast_path=True, precompute=False))
    assert fast.options.grouped_attention is True and list(policy.state_dict()) == keys
    attentions = [module for module in policy.modules() if hasattr(module, "num_key_value_groups")]
    assert len(attentions) == 2  # the toy's one Gemma layer, in the prefix and in the expert
    obs, instructions = observations(2), [INSTRUCTION] * 2
    torch.manual_seed(8)
    stock = pi05_model.featurize(obs, instructions)

    def copies_heads(*args):
        raise AssertionError("repeat_kv called")

    monkeypatch.setattr(modeling_gemma, "repeat_kv", copies_heads)
    eager_view = PI05FeatureModel(policy, pre, post)
    torch.manual_seed(8)
    with fast_routes(attentions):
        grouped = eager_view.featurize(obs, instructions)
    torch.testing.assert_close(grouped.prefix_tokens, stock.prefix_tokens, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grouped.ref_chunk, stock.ref_chunk, rtol=1e-5, atol=1e-6)
    with pytest.raises(AssertionError, match="repeat_kv called"):
        eager_view.featurize(obs, instructions)


def test_fast_routes_are_refused_off_the_fast_path(pi05_model):
    for option in ("precompute", "grouped_attention"):
        with pytest.raises(ValueError, match=f"{option}=True serves the fast path only"):
            options = PI05Options(fast_path=False, **{option: True})
            PI05FeatureModel(pi05_model.policy, None, None, options)


def test_prompt_slots_cut_only_padding(pi05_model):
    """The toy's prompts fill 18 of 24 slots: keeping 20 gives the same features from a
    prefix 4 tokens shorter; keeping 16 would cut a prompt, and is refused."""
    policy, pre, post = pi05_model.policy, pi05_model.preprocessor, pi05_model.postprocessor
    obs, instructions = observations(2), [INSTRUCTION, "insert the hole in the peg"]
    features = []
    for model in (pi05_model, PI05FeatureModel(policy, pre, post, PI05Options(prompt_slots=20))):
        torch.manual_seed(4)
        features.append(model.featurize(obs, instructions))
    full, short = features
    assert short.prefix_tokens.shape[1] == full.prefix_tokens.shape[1] - 4
    kept = full.pad_mask[:, : short.pad_mask.shape[1]]
    assert torch.equal(short.pad_mask, kept) and not full.pad_mask[:, -4:].any()
    real = short.pad_mask[..., None]
    torch.testing.assert_close(
        short.prefix_tokens * real, full.prefix_tokens[:, : short.pad_mask.shape[1]] * real
    )
    torch.testing.assert_close(short.ref_chunk, full.ref_chunk, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="prompt_slots=16"):
        sixteen_slots = PI05FeatureModel(policy, pre, post, PI05Options(prompt_slots=16))
        sixteen_slots.featurize(obs, instructions)
    with pytest.raises(ValueError, match="prompt_slots=25"):
        PI05FeatureModel(policy, pre, post, PI05Options(prompt_slots=PROMPT_SLOTS + 1))


def test_missing_local_tokenizer_is_named(pi05_folders, tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer_config.json"):
        PI05FeatureModel.from_checkpoint(pi05_folders / "checkpoint", tmp_path)


def test_batch_buckets():
    sizes = {count: bucket_size(count, BATCH_BUCKETS) for count in (1, 3, 64, 65, 129)}
    assert sizes == {1: 1, 3: 4, 64: 64, 65: 128, 129: 192}


def test_fast_path_is_off_on_the_cpu_unless_asked(pi05_model):
    assert pi05_model.options.fast_path is False and pi05_model.warmup_s == {}


def test_batch_buckets_are_checked(pi05_model):
    with pytest.raises(ValueError, match="batch_buckets"):
        PI05FeatureModel(pi05_model.policy, None, None, PI05Options(batch_buckets=(0, 8)))


def test_one_cuda_graph_per_bucket_is_refused_where_it_cannot_run(pi05_model):
    policy = pi05_model.policy
    fast_path = PI05Options(fast_path=True)
    assert PI05FeatureModel(policy, None, None, fast_path).options.cuda_graph is False  # the CPU
    with pytest.raises(ValueError, match="cuda_graph=True needs the fast path on CUDA"):
        PI05FeatureModel(policy, None, None, PI05Options(fast_path=True, cuda_graph=True))


@pytest.mark.subprocess
def test_fast_path_matches_eager_and_buckets_above_one_share_its_compile(pi05_model, tmp_path):
    """Compiled (inductor on the CPU), with an RL token fused into its calls, against eager,
    same noise, a batch padded 3 -> 4; then batches of 2 and 6 (buckets 2 and 8) run bucket 4's
    dynamic-batch graphs, compiling nothing.

    Kept cheap for 2 CPU cores: the C++ kernels compile without vector ISA (~35% faster to
    build). The Euler loop keeps its 10 steps: the step compiles once for all of them.
    """
    fast = PI05FeatureModel(
        pi05_model.policy,
        pi05_model.preprocessor,
        pi05_model.postprocessor,
        PI05Options(fast_path=True, compile_cache_dir=tmp_path, dynamic_batch=True),
    )
    obs, instructions = observations(3), [INSTRUCTION, "insert the hole in the peg", INSTRUCTION]
    rl_token = RLToken(RLTokenConfig(dim=WIDTH, prefix_seq_len=64))
    RLTFeaturizer(fast, rl_token)  # fuses the RL token into fast's calls: featurize gives z_rl
    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        torch.manual_seed(11)
        eager = pi05_model.featurize(obs, instructions)
        torch.manual_seed(11)
        compiled = fast.featurize(obs, instructions)
        torch.manual_seed(11)
        replayed = fast.featurize(obs, instructions)
    with torch.no_grad():
        eager_z = rl_token.encode(eager.prefix_tokens, eager.pad_mask, eager.image_token_count)
    assert eager.z_rl is None and compiled.z_rl.shape == eager_z.shape
    assert list(fast.warmup_s) == [4] and fast.warmup_s[4] > 0  # one compile for both calls
    assert fast.warmup[4].source == "compiled"
    assert compiled.image_token_count == eager.image_token_count
    assert torch.equal(compiled.pad_mask, eager.pad_mask)
    torch.testing.assert_close(compiled.prefix_tokens, eager.prefix_tokens, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled.z_rl, eager_z, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled.ref_chunk, eager.ref_chunk, rtol=1e-4, atol=1e-5)
    assert torch.equal(replayed.ref_chunk, compiled.ref_chunk)
    graphs = counters["stats"]["unique_graphs"]
    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        for rows in (2, 6):
            outputs = []
            for model in (pi05_model, fast):
                torch.manual_seed(12)
                outputs.append(model.featurize(observations(rows), [INSTRUCTION] * rows))
            torch.testing.assert_close(outputs[1].prefix_tokens, outputs[0].prefix_tokens)
            torch.testing.assert_close(outputs[1].ref_chunk, outputs[0].ref_chunk)
    assert counters["stats"]["unique_graphs"] == graphs  # nothing compiled past bucket 4
    assert [fast.warmup[bucket].source for bucket in (2, 8)] == ["shared", "shared"]
    assert fast.warmup[8].first_compile_s == pytest.approx(fast.warmup[4].seconds, abs=1e-3)


def test_feature_server_serves_pi05_prefix_features(pi05_folders):
    args = ServeArgs(
        device="cpu",
        pi05_checkpoint=pi05_folders / "checkpoint",
        tokenizer_dir=pi05_folders / "tokenizer",
        pi05=PI05Options(batch_buckets=(1, 4), prompt_slots=20),
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        inject_tiny_configs(monkeypatch)
        server_policy = FeatureServerPolicy(pi05_featurizer(args))
    assert server_policy.featurizer.feature_model.options.batch_buckets == (1, 4)
    request = {"observations": stack_observations(observations(2)), "instructions": ["a", "b"]}
    reply = server_policy.infer(request | {"want": "prefix"})
    assert reply["prefix_tokens"].shape == (2, 8 + 20, WIDTH)  # 20 of the 24 prompt slots
    assert "no RL token" in server_policy.infer(request | {"want": "z_rl"})["error"]
    too_long = request | {"instructions": [INSTRUCTION * 2] * 2, "want": "prefix"}
    assert "prompt_slots=20" in server_policy.infer(too_long)["error"]
    with pytest.raises(ValueError, match="--tokenizer-dir"):
        pi05_featurizer(ServeArgs(pi05_checkpoint=pi05_folders / "checkpoint"))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    finally:
        connection.close()


@pytest.mark.subprocess
def test_server_listens_after_its_first_bucket_and_answers_while_another_compiles(
    pi05_folders, pi05_model, tmp_path
):
    port = free_port()
    script = Path(__file__).with_name("pi05_toy_server.py")
    options = ["--device", "cpu", "--fast-path", "True", "--batch-buckets", "1", "4"]
    options += ["--compile-cache-dir", str(tmp_path / "cache"), "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, str(script), str(pi05_folders), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        client = RemoteFeatureModel("127.0.0.1", port, connect_timeout_s=600)
        client.featurize(observations(1), [INSTRUCTION])
        replies = []
        request = threading.Thread(  # batch 3: bucket 4, compiled inside this request
            target=lambda: replies.append(client.featurize(observations(3), [INSTRUCTION] * 3))
        )
        request.start()
        answered_meanwhile = 0
        while request.is_alive():
            answered_meanwhile += healthy(port)
            request.join(timeout=0.5)
        client.close()
    finally:
        process.terminate()
        log = process.communicate(timeout=30)[0]
    lines = log.splitlines()
    events = ("bucket 1 ready", "listening on ws://", "bucket 4 ready")
    order = [next(i for i, line in enumerate(lines) if event in line) for event in events]
    assert order == sorted(order), log  # bucket 4 compiled after it listened, in the request
    assert answered_meanwhile >= 3  # the loop answered while the model thread compiled
    expected = pi05_model.featurize(observations(3), [INSTRUCTION] * 3)
    torch.testing.assert_close(
        replies[0].prefix_tokens, expected.prefix_tokens, rtol=1e-4, atol=1e-5
    )
    assert replies[0].ref_chunk.shape == expected.ref_chunk.shape
