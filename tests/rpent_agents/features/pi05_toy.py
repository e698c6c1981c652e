"""The toy pi0.5 of the pi0.5 tests: a tiny random `PI05Policy`, saved and loaded like a real one.

PI05 fixes its VLM to gemma_2b and the SigLIP So400m tower, so `inject_tiny_configs` swaps in
small Gemma and vision configs while a model is built or loaded; the tokenizer is a tiny
word-level one built here and saved to a local folder (nothing comes from a hub). Shared by
`test_pi05.py` and the processes `pi05_cache_child.py` starts.
"""

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.pi05 import modeling_pi05, processor_pi05
from lerobot.policies.pi05.configuration_pi05 import PI05Config
from lerobot.processor.tokenizer_processor import TokenizerProcessorStep
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rpent_agents.features.pi05 import PI05FeatureModel

WIDTH, IMAGE_SIZE, PATCH, PROMPT_SLOTS = 32, 32, 16, 24
INSTRUCTION = "insert the peg in the hole"


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    words = ["<pad>", "<bos>", "<eos>", "<unk>", *INSTRUCTION.split(), "Task:", "State:", "Action:"]
    words += [str(value) for value in range(256)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<bos>", unk_token="<unk>"
    )


def inject_tiny_configs(monkeypatch: pytest.MonkeyPatch) -> None:
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


def quantile_stats(dim: int) -> dict[str, torch.Tensor]:
    ones = torch.ones(dim)
    return {"q01": -ones, "q99": ones * 2, "mean": 0 * ones, "std": ones, "min": -ones, "max": ones}


def write_toy_folders(root: Path) -> Path:
    """Save the toy checkpoint (`root/checkpoint`) and its tokenizer (`root/tokenizer`)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        inject_tiny_configs(monkeypatch)
        tokenizer = tiny_tokenizer()
        tokenizer.save_pretrained(root / "tokenizer")
        visual = PolicyFeature(FeatureType.VISUAL, (3, IMAGE_SIZE, IMAGE_SIZE))
        config = PI05Config(
            device="cpu",
            chunk_size=10,
            n_action_steps=10,
            image_resolution=(IMAGE_SIZE, IMAGE_SIZE),
            tokenizer_max_length=PROMPT_SLOTS,
            num_inference_steps=3,
            input_features={
                "observation.images.base": visual,
                "observation.images.wrist": visual,
                "observation.state": PolicyFeature(FeatureType.STATE, (9,)),
            },
            output_features={"action": PolicyFeature(FeatureType.ACTION, (8,))},
        )
        torch.manual_seed(0)
        policy = modeling_pi05.PI05Policy(config)
        with torch.no_grad():  # LeRobot starts the adaRMS dense layers at zero: make them count
            for name, parameter in policy.named_parameters():
                if "layernorm.dense" in name or "norm.dense" in name:
                    parameter.normal_(0.0, 0.05)
        policy.save_pretrained(root / "checkpoint")
        # The stock factory names the hub tokenizer; hand it the local one instead.
        monkeypatch.setattr(
            processor_pi05,
            "TokenizerProcessorStep",
            functools.partial(TokenizerProcessorStep, tokenizer=tokenizer),
        )
        stats = {"observation.state": quantile_stats(9), "action": quantile_stats(8)}
        for pipeline in processor_pi05.make_pi05_pre_post_processors(config, stats):
            pipeline.save_pretrained(root / "checkpoint")
    return root


def load_toy_model(root: Path) -> PI05FeatureModel:
    """The toy of `write_toy_folders(root)` as a `PI05FeatureModel` (every option's default)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        inject_tiny_configs(monkeypatch)
        return PI05FeatureModel.from_checkpoint(root / "checkpoint", root / "tokenizer")


def observations(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8),
            "state": rng.uniform(-1, 1, 9).astype(np.float32),
        }
        for _ in range(count)
    ]
