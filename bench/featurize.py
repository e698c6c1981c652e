"""Featurization speed: built-in VLA + RL token, and a pi0.5-size PI05 with random weights.

For each model: batch-1 latency (ms per call) and batch-64 throughput (observations/s) of one
featurization call (prefix pass + reference chunk [+ z_rl for the built-in model]).

    # CUDA, bf16, real sizes (pi0.5: gemma_2b + SigLIP So400m at 224 px, 2 cameras, 200 tokens)
    python bench/featurize.py --device cuda --dtype bfloat16 --size full
    # CPU, small sizes (a smoke run; pi0.5 shrunk to a 1-layer toy)
    python bench/featurize.py --device cpu --dtype float32 --size small --batch-sizes 1 8

The built-in part needs torch only; the pi0.5 part needs the `pi` extra (lerobot + transformers)
and is skipped with a message when it is missing.
"""

import argparse
import json
import logging
import time
from contextlib import nullcontext

import numpy as np
import torch

from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.norm import NormStats
from rpent_agents.rlt_token import RLToken, RLTokenConfig

INSTRUCTION = "insert the peg in the hole"


def timed(call, device, iterations):
    call()  # warm-up (kernels, allocator)
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iterations


def autocast(device, dtype):
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def builtin_call(size, device, dtype, batch_size):
    config = BuiltinVLAConfig() if size == "full" else BuiltinVLAConfig(dim=128, patch_size=16)
    vla = BuiltinVLA(config, NormStats.identity(9, 8)).to(device).eval()
    rl_token = RLToken(RLTokenConfig(dim=config.dim, prefix_seq_len=256)).to(device).eval()
    rng = np.random.default_rng(0)
    size_px = config.image_size
    observations = [
        {
            "image": rng.integers(0, 256, (size_px, size_px, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 256, (size_px, size_px, 3), dtype=np.uint8),
            "state": rng.normal(size=9).astype(np.float32),
        }
        for _ in range(batch_size)
    ]

    @torch.no_grad()
    def call():
        with autocast(device, dtype):
            prefix = vla.featurize(observations, [INSTRUCTION] * batch_size)
            z_rl = rl_token.encode(prefix.prefix_tokens, prefix.pad_mask)
        return z_rl.float().cpu().numpy(), prefix.ref_chunk.float().cpu().numpy()

    return call


def pi05_policy(size, device, dtype):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.pi05 import modeling_pi05
    from lerobot.policies.pi05.configuration_pi05 import PI05Config

    resolution = 224 if size == "full" else 32
    if size == "small":
        tiny = modeling_pi05.GemmaConfig(64, 1, 128, 2, 1, 32)
        modeling_pi05.get_gemma_config = lambda variant: tiny
        build = modeling_pi05.PaliGemmaForConditionalGenerationWithPiGemma

        def small_paligemma(config):
            vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1)
            vision.update(num_attention_heads=2, patch_size=16, projection_dim=64)
            config.vision_config.update(vision)
            return build(config=config)

        modeling_pi05.PaliGemmaForConditionalGenerationWithPiGemma = small_paligemma
    visual = PolicyFeature(FeatureType.VISUAL, (3, resolution, resolution))
    config = PI05Config(
        device=str(device),
        dtype="bfloat16" if dtype == torch.bfloat16 else "float32",
        image_resolution=(resolution, resolution),
        input_features={
            "observation.images.base": visual,
            "observation.images.wrist": visual,
            "observation.state": PolicyFeature(FeatureType.STATE, (9,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (8,))},
    )
    with torch.device(device):
        return modeling_pi05.PI05Policy(config), resolution


def pi05_call(policy, resolution, device, batch_size):
    from rpent_agents.features.pi05 import PI05FeatureModel

    model = PI05FeatureModel(policy, preprocessor=None, postprocessor=lambda chunk: chunk)
    token_count = policy.config.tokenizer_max_length
    batch = {
        key: torch.rand(batch_size, 3, resolution, resolution, device=device)
        for key in policy.config.image_features
    }
    batch["observation.language.tokens"] = torch.randint(
        0, 1000, (batch_size, token_count), device=device
    )
    mask = torch.zeros(batch_size, token_count, dtype=torch.bool, device=device)
    mask[:, : token_count // 4] = True  # a typical prompt fills a quarter of the 200 slots
    batch["observation.language.attention_mask"] = mask

    def call():
        features = model.features_from_policy_batch(batch)
        return features.prefix_tokens.float().cpu(), features.ref_chunk.cpu()

    return call


def report(name, batch_sizes, make_call, device, iterations):
    rows = []
    for batch_size in batch_sizes:
        seconds = timed(make_call(batch_size), device, iterations)
        rows.append(
            {
                "model": name,
                "batch": batch_size,
                "latency_ms": round(1000 * seconds, 2),
                "obs_per_s": round(batch_size / seconds, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--size", default="full", choices=["full", "small"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--models", nargs="+", default=["builtin", "pi05"])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    header = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    header.update(dtype=args.dtype, size=args.size, torch=torch.__version__)
    print(json.dumps(header))
    rows = []
    if "builtin" in args.models:
        make = lambda batch: builtin_call(args.size, device, dtype, batch)  # noqa: E731
        rows += report("builtin VLA + RL token", args.batch_sizes, make, device, args.iterations)
    if "pi05" in args.models:
        try:
            policy, resolution = pi05_policy(args.size, device, dtype)
        except ImportError as error:
            print(json.dumps({"model": "pi05", "skipped": f"needs the pi extra: {error}"}))
        else:
            params = sum(parameter.numel() for parameter in policy.parameters())
            print(json.dumps({"model": "pi05", "parameters": params}))
            make = lambda batch: pi05_call(policy, resolution, device, batch)  # noqa: E731
            rows += report("pi0.5 (PI05Policy)", args.batch_sizes, make, device, args.iterations)
    print("| model | batch | latency ms | obs/s |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['model']} | {row['batch']} | {row['latency_ms']} | {row['obs_per_s']} |")


if __name__ == "__main__":
    main()
