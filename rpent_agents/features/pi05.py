"""pi0.5 as a feature model, in process, through LeRobot's `PI05Policy` (`rpent[pi]` extra).

One prefix pass gives both outputs: `embed_prefix` embeds the cameras (SigLIP) and the tokenized
prompt, the PaliGemma language model runs over them once with a KV cache, its last hidden states
are the prefix tokens (B, T, 2048), and the action expert samples the chunk from the same cache
(flow matching, Euler steps from noise). No forward hooks are used.

The checkpoint folder is what `lerobot-train` writes for pi0.5 (`config.json`,
`model.safetensors`, `policy_preprocessor.json`, `policy_postprocessor.json` and their
normaliser states). The stock pre-processor names the PaliGemma tokenizer on the hub; here the
tokenizer always comes from a local folder (`tokenizer_dir`), so nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpent_agents.features.protocol import PrefixFeatures

PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
RAW_CAMERA_KEYS = ("image", "wrist_image")


def _require_lerobot_pi() -> None:
    try:
        import transformers  # noqa: F401
        from lerobot.policies.pi05.modeling_pi05 import PI05Policy  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"pi0.5 feature model needs the pi extra ({error}); install: pip install 'rpent[pi]'"
        ) from error


class PI05FeatureModel:
    """pi0.5 (LeRobot `PI05Policy`) seen as a `FeatureModel`.

    Raw observations map to the policy's inputs by `camera_keys` (raw key -> policy image
    feature, default: `image` and `wrist_image` to the policy's image features in order) and
    `state` -> `observation.state`; the instruction is the task prompt.

    Example:
        >>> model = PI05FeatureModel.from_checkpoint("ckpt/pi05_peg", "tokenizers/paligemma")
        >>> features = model.featurize([obs], ["insert the peg in the hole"])
        >>> features.prefix_tokens.shape  # (1, T, 2048) for the real model
    """

    def __init__(
        self,
        policy: Any,
        preprocessor: Any,
        postprocessor: Any,
        camera_keys: Mapping[str, str] | None = None,
    ) -> None:
        """Wrap a loaded policy and its processor pipelines (see `from_checkpoint`)."""
        self.policy = policy.eval()
        self.preprocessor = preprocessor
        self.postprocessor = postprocessor
        image_features = list(policy.config.image_features)
        self.camera_keys = dict(camera_keys or zip(RAW_CAMERA_KEYS, image_features, strict=False))
        unknown = set(self.camera_keys.values()) - set(image_features)
        if unknown:
            raise ValueError(
                f"camera_keys name {sorted(unknown)}, which the policy does not take; its image"
                f" features are {image_features}"
            )
        self.prefix_dim = _prefix_width(policy)
        self.chunk_len = policy.config.chunk_size
        self.action_dim = policy.config.output_features["action"].shape[0]

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_dir: Path,
        tokenizer_dir: Path,
        device: str = "cpu",
        camera_keys: Mapping[str, str] | None = None,
    ) -> PI05FeatureModel:
        """Load a pi0.5 checkpoint folder and its processors, tokenizer from `tokenizer_dir`.

        Raises:
            FileNotFoundError: When a checkpoint or tokenizer file is missing.
            ImportError: Without the `pi` extra.
        """
        _require_lerobot_pi()
        from lerobot.policies.pi05.modeling_pi05 import PI05Policy
        from lerobot.processor import PolicyProcessorPipeline
        from lerobot.processor.converters import (
            policy_action_to_transition,
            transition_to_policy_action,
        )

        checkpoint_dir, tokenizer_dir = Path(checkpoint_dir), Path(tokenizer_dir)
        for path in (checkpoint_dir / PREPROCESSOR_FILE, checkpoint_dir / "config.json"):
            if not path.is_file():
                raise FileNotFoundError(f"{path} is missing; pass a pi0.5 checkpoint folder")
        if not (tokenizer_dir / "tokenizer_config.json").is_file():
            raise FileNotFoundError(
                f"{tokenizer_dir}/tokenizer_config.json is missing; pass a local tokenizer folder"
            )
        policy = PI05Policy.from_pretrained(checkpoint_dir, local_files_only=True)
        policy.config.device = device
        overrides = {
            "tokenizer_processor": {"tokenizer_name": str(tokenizer_dir)},
            "device_processor": {"device": device},
        }
        preprocessor = PolicyProcessorPipeline.from_pretrained(
            checkpoint_dir, PREPROCESSOR_FILE, local_files_only=True, overrides=overrides
        )
        postprocessor = PolicyProcessorPipeline.from_pretrained(
            checkpoint_dir,
            POSTPROCESSOR_FILE,
            local_files_only=True,
            to_transition=policy_action_to_transition,
            to_output=transition_to_policy_action,
        )
        return cls(policy.to(device), preprocessor, postprocessor, camera_keys)

    @property
    def device(self) -> torch.device:  # noqa: D102
        return next(self.policy.parameters()).device

    def _policy_batch(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> dict[str, Any]:
        batch: dict[str, Any] = {"task": list(instructions)}
        for raw_key, policy_key in self.camera_keys.items():
            images = np.stack([np.asarray(obs[raw_key]) for obs in observations])
            batch[policy_key] = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        states = np.stack([np.asarray(obs["state"], dtype=np.float32) for obs in observations])
        batch["observation.state"] = torch.from_numpy(states)
        return self.preprocessor(batch)

    @torch.no_grad()
    def featurize(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> PrefixFeatures:
        """Prefix hidden states, pad mask and reference chunk (env units), one prefix pass."""
        return self.features_from_policy_batch(self._policy_batch(observations, instructions))

    @torch.no_grad()
    def features_from_policy_batch(self, batch: Mapping[str, Any]) -> PrefixFeatures:
        """`featurize` after the pre-processor: images, prompt tokens and mask are in `batch`."""
        from lerobot.policies.common.flow_matching import euler_integrate
        from lerobot.policies.common.vla_utils import make_att_2d_masks, prepare_attention_masks_4d
        from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

        model = self.policy.model
        images, image_masks = self.policy._preprocess_images(batch)
        tokens = batch[OBS_LANGUAGE_TOKENS]
        embeddings, pad_mask, attention = model.embed_prefix(
            images, image_masks, tokens, batch[OBS_LANGUAGE_ATTENTION_MASK]
        )
        language_model = model.paligemma_with_expert.paligemma.model.language_model
        language_model.config._attn_implementation = "eager"
        (prefix_tokens, _), cache = model.paligemma_with_expert.forward(
            attention_mask=prepare_attention_masks_4d(make_att_2d_masks(pad_mask, attention)),
            position_ids=torch.cumsum(pad_mask, dim=1) - 1,
            inputs_embeds=[embeddings, None],
            use_cache=True,
        )
        config = self.policy.config
        noise = model.sample_noise(
            (tokens.shape[0], config.chunk_size, config.max_action_dim), self.device
        )
        chunk = euler_integrate(
            lambda noisy, time: model.denoise_step(pad_mask, cache, noisy, time),
            noise,
            config.num_inference_steps,
        )
        ref_chunk = self.postprocessor(chunk[:, :, : self.action_dim])
        return PrefixFeatures(
            prefix_tokens=prefix_tokens,
            pad_mask=pad_mask.bool(),
            ref_chunk=ref_chunk.float(),
            image_token_count=embeddings.shape[1] - tokens.shape[1],
        )


def _prefix_width(policy: Any) -> int:
    return policy.model.paligemma_with_expert.paligemma.config.text_config.hidden_size
