"""pi0.5 fast path on CUDA: the full-size PI05 (gemma_2b + gemma_300m, SigLIP So400m at 224 px)
with random weights in bf16, compiled and recorded as one CUDA graph per bucket with the RL
token fused in, against eager, same noise.

A file of its own: test_pi05.py shrinks the Gemma configs for its whole module.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.pi05.configuration_pi05 import PI05Config
from lerobot.policies.pi05.modeling_pi05 import PI05Policy
from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

from rpent_agents.features.pi05 import PI05FeatureModel
from rpent_agents.features.pi05_options import PI05Options
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
BF16_RELATIVE_ERROR = 5e-2


def full_size_policy():
    visual = PolicyFeature(FeatureType.VISUAL, (3, 224, 224))
    config = PI05Config(
        device="cuda",
        dtype="bfloat16",
        input_features={
            "observation.images.base": visual,
            "observation.images.wrist": visual,
            "observation.state": PolicyFeature(FeatureType.STATE, (9,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (8,))},
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        return PI05Policy(config)


def policy_batch(policy, batch_size):
    generator = torch.Generator("cuda").manual_seed(1)
    batch = {
        key: torch.rand(batch_size, 3, 224, 224, device="cuda", generator=generator)
        for key in policy.config.image_features
    }
    slots = policy.config.tokenizer_max_length
    batch[OBS_LANGUAGE_TOKENS] = torch.randint(
        0, 1000, (batch_size, slots), device="cuda", generator=generator
    )
    mask = torch.zeros(batch_size, slots, dtype=torch.bool, device="cuda")
    mask[:, : slots // 4] = True
    batch[OBS_LANGUAGE_ATTENTION_MASK] = mask
    return batch


def relative_error(actual, expected):
    return ((actual.float() - expected.float()).norm() / expected.float().norm()).item()


def test_full_size_fast_path_matches_eager_in_bf16():
    policy = full_size_policy()
    identity = lambda chunk: chunk  # noqa: E731
    eager = PI05FeatureModel(policy, None, identity, PI05Options(fast_path=False))
    fast = PI05FeatureModel(policy, None, identity)
    options = fast.options
    assert options.fast_path and options.cuda_graph and options.compile_mode == "default"
    rl_token = RLToken(RLTokenConfig(dim=fast.prefix_dim)).cuda().eval()
    eager_featurizer = RLTFeaturizer(eager, rl_token, torch.bfloat16)
    RLTFeaturizer(fast, rl_token, torch.bfloat16)  # fuses the RL token into fast's graphs
    batch = policy_batch(policy, 3)  # padded to bucket 4
    results = []
    for model in (eager, fast, fast):
        torch.manual_seed(5)
        prefix = model.features_from_policy_batch(batch)
        results.append(prefix)
    reference, compiled, replayed = results
    assert reference.z_rl is None and compiled.z_rl is not None
    with torch.no_grad():
        reference_z = eager_featurizer.encode_rl_token(
            reference.prefix_tokens, reference.pad_mask, reference.image_token_count
        )
    assert list(fast.warmup_s) == [4]
    assert torch.equal(compiled.pad_mask, reference.pad_mask)
    assert relative_error(compiled.prefix_tokens, reference.prefix_tokens) < BF16_RELATIVE_ERROR
    assert relative_error(compiled.z_rl, reference_z) < BF16_RELATIVE_ERROR
    assert relative_error(compiled.ref_chunk, reference.ref_chunk) < BF16_RELATIVE_ERROR
    # a replay of the recorded graph on the same inputs gives the first call's outputs
    torch.testing.assert_close(replayed.ref_chunk, compiled.ref_chunk, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(replayed.z_rl, compiled.z_rl, rtol=1e-3, atol=1e-3)
    # the graph replays from a thread other than the one that recorded it
    with ThreadPoolExecutor(1) as worker:
        torch.manual_seed(5)
        threaded = worker.submit(fast.features_from_policy_batch, batch).result()
    torch.testing.assert_close(threaded.z_rl, compiled.z_rl, rtol=1e-3, atol=1e-3)
