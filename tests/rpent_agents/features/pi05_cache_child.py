"""One process start of the compile-cache test: the toy pi0.5 on the fast path, bucket 1.

It warms the bucket up from `CACHE_DIR` (compiling when the cache cannot serve it), then
featurizes one observation eagerly and fast with the same noise, and saves the warm-up report,
the count of graphs dynamo compiled and both outputs to `OUT` (a torch file).

    python pi05_cache_child.py TOY_ROOT CACHE_DIR OUT
"""

import logging
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from pi05_toy import INSTRUCTION, load_toy_model, observations
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config

from rpent_agents.features.pi05 import PI05FeatureModel
from rpent_agents.features.pi05_options import PI05Options


def main() -> None:
    toy_root, cache_dir, out = map(Path, sys.argv[1:])
    logging.basicConfig(level=logging.WARNING)
    eager = load_toy_model(toy_root)
    eager.policy.config.num_inference_steps = 1  # fewer kernels to build (a constant per step)
    fast = PI05FeatureModel(
        eager.policy,
        eager.preprocessor,
        eager.postprocessor,
        PI05Options(fast_path=True, batch_buckets=(1,), compile_cache_dir=cache_dir),
    )
    outputs = {}
    # C++ kernels built without vector ISA: ~35% faster to build on the test machines
    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        warmup = fast.warm_up()[1]
        for name, model in (("eager", eager), ("fast", fast)):
            torch.manual_seed(3)
            prefix = model.featurize(observations(1), [INSTRUCTION])
            outputs[name] = {"prefix_tokens": prefix.prefix_tokens, "ref_chunk": prefix.ref_chunk}
    report = {"warmup": asdict(warmup), "graphs": counters["stats"]["unique_graphs"]}
    torch.save(report | {"outputs": outputs}, out)


if __name__ == "__main__":
    main()
