"""pi0.5 through LeRobot's PI05Policy: a tiny random model, saved and loaded like a real one.

PI05 fixes its VLM to gemma_2b and the SigLIP So400m tower, so the test injects small Gemma and
vision configs while it builds and loads the model; the tokenizer is a tiny word-level one
built here and saved to a local folder (nothing comes from a hub).
"""

import functools

import numpy as np
import pytest
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.pi05 import modeling_pi05, processor_pi05
from lerobot.policies.pi05.configuration_pi05 import PI05Config
from lerobot.processor.tokenizer_processor import TokenizerProcessorStep
from tokenizers import Tokenizer, models, pre_tokenizers
from torch._inductor import config as inductor_config
from transformers import PreTrainedTokenizerFast

from rpent_agents.features.pi05 import BATCH_BUCKETS, PI05FeatureModel, _bucket_size
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig

WIDTH, IMAGE_SIZE, PATCH = 32, 32, 16
INSTRUCTION = "insert the peg in the hole"


def tiny_tokenizer():
    words = ["<pad>", "<bos>", "<eos>", "<unk>", *INSTRUCTION.split(), "Task:", "State:", "Action:"]
    words += [str(value) for value in range(256)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<bos>", unk_token="<unk>"
    )


def inject_tiny_configs(monkeypatch):
    tiny_gemma = modeling_pi05.GemmaConfig(
        width=WIDTH, depth=1, mlp_dim=64, num_heads=2, num_kv_heads=1, head_dim=16
    )
    monkeypatch.setattr(modeling_pi05, "get_gemma_config", lambda variant: tiny_gemma)
    build_paligemma = modeling_pi05.PaliGemmaForConditionalGenerationWithPiGemma

    def tiny_paligemma(config):
        config.vision_config.update(
            dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                patch_size=PATCH,
                projection_dim=config.text_config.hidden_size,
            )
        )
        return build_paligemma(config=config)

    monkeypatch.setattr(
        modeling_pi05, "PaliGemmaForConditionalGenerationWithPiGemma", tiny_paligemma
    )


def quantile_stats(dim):
    ones = torch.ones(dim)
    return {"q01": -ones, "q99": ones * 2, "mean": 0 * ones, "std": ones, "min": -ones, "max": ones}


@pytest.fixture(scope="module")
def pi05_folders(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    inject_tiny_configs(monkeypatch)
    root = tmp_path_factory.mktemp("pi05")
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(root / "tokenizer")
    visual = PolicyFeature(FeatureType.VISUAL, (3, IMAGE_SIZE, IMAGE_SIZE))
    config = PI05Config(
        device="cpu",
        chunk_size=10,
        n_action_steps=10,
        image_resolution=(IMAGE_SIZE, IMAGE_SIZE),
        tokenizer_max_length=24,
        num_inference_steps=3,
        input_features={
            "observation.images.base": visual,
            "observation.images.wrist": visual,
            "observation.state": PolicyFeature(FeatureType.STATE, (9,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (8,))},
    )
    torch.manual_seed(0)
    modeling_pi05.PI05Policy(config).save_pretrained(root / "checkpoint")
    # The stock factory names the hub tokenizer; hand it the local one instead.
    monkeypatch.setattr(
        processor_pi05,
        "TokenizerProcessorStep",
        functools.partial(TokenizerProcessorStep, tokenizer=tokenizer),
    )
    stats = {"observation.state": quantile_stats(9), "action": quantile_stats(8)}
    for pipeline in processor_pi05.make_pi05_pre_post_processors(config, stats):
        pipeline.save_pretrained(root / "checkpoint")
    yield root
    monkeypatch.undo()


@pytest.fixture(scope="module")
def pi05_model(pi05_folders):
    with pytest.MonkeyPatch.context() as monkeypatch:
        inject_tiny_configs(monkeypatch)
        return PI05FeatureModel.from_checkpoint(
            pi05_folders / "checkpoint", pi05_folders / "tokenizer"
        )


def observations(count):
    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
            "state": rng.uniform(-1, 1, 9).astype(np.float32),
        }
        for _ in range(count)
    ]


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


def test_missing_local_tokenizer_is_named(pi05_folders, tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer_config.json"):
        PI05FeatureModel.from_checkpoint(pi05_folders / "checkpoint", tmp_path)


def test_batch_buckets():
    sizes = {count: _bucket_size(count, BATCH_BUCKETS) for count in (1, 3, 64, 65, 129)}
    assert sizes == {1: 1, 3: 4, 64: 64, 65: 128, 129: 192}


def test_fast_path_is_off_on_the_cpu_unless_asked(pi05_model):
    assert pi05_model.fast_path is False and pi05_model.warmup_s == {}


def test_fast_path_matches_eager(pi05_model, monkeypatch):
    """Compiled (inductor on the CPU) against eager, same noise, a batch padded 3 -> 4.

    Kept cheap for 2 CPU cores: the C++ kernels compile without vector ISA (~35% faster to
    build) and the Euler loop takes 2 steps (each step adds kernels: its time is a constant).
    """
    monkeypatch.setattr(pi05_model.policy.config, "num_inference_steps", 2)
    fast = PI05FeatureModel(
        pi05_model.policy, pi05_model.preprocessor, pi05_model.postprocessor, fast_path=True
    )
    obs, instructions = observations(3), [INSTRUCTION, "insert the hole in the peg", INSTRUCTION]
    rl_token = RLToken(RLTokenConfig(dim=WIDTH, prefix_seq_len=64))
    results = []
    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        for model in (pi05_model, fast, fast):
            torch.manual_seed(11)
            prefix = model.featurize(obs, instructions)
            z_rl = rl_token.encode(prefix.prefix_tokens, prefix.pad_mask, prefix.image_token_count)
            results.append((prefix, z_rl))
    (eager, eager_z), (compiled, compiled_z), (replayed, _) = results
    assert list(fast.warmup_s) == [4] and fast.warmup_s[4] > 0  # one compile for both calls
    assert compiled.image_token_count == eager.image_token_count
    assert torch.equal(compiled.pad_mask, eager.pad_mask)
    torch.testing.assert_close(compiled.prefix_tokens, eager.prefix_tokens, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled_z, eager_z, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled.ref_chunk, eager.ref_chunk, rtol=1e-4, atol=1e-5)
    assert torch.equal(replayed.ref_chunk, compiled.ref_chunk)
