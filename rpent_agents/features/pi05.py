"""pi0.5 as a feature model, in process, through LeRobot's `PI05Policy` (`rpent[pi]` extra).

One prefix pass gives both outputs: `embed_prefix` embeds the cameras (SigLIP) and the tokenized
prompt, the PaliGemma language model runs over them once with a KV cache, its last hidden states
are the prefix tokens (B, T, 2048), and the action expert samples the chunk from the same cache
(flow matching, Euler steps from noise). No forward hooks are used.

The checkpoint folder is what `lerobot-train` writes for pi0.5 (`config.json`,
`model.safetensors`, `policy_preprocessor.json`, `policy_postprocessor.json` and their
normaliser states). The stock pre-processor names the PaliGemma tokenizer on the hub; here the
tokenizer always comes from a local folder (`tokenizer_dir`), so nothing is downloaded.

The fast path (on by default on CUDA) runs the same prefix pass and Euler loop compiled, per
batch bucket, each bucket's whole call one CUDA graph on CUDA (`features.pi05_fast_path`); its
speed options are one `PI05Options` (`features.pi05_options`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpent_agents.features.buckets import bucket_size
from rpent_agents.features.compile_cache import BucketWarmup
from rpent_agents.features.pi05_fast_path import (
    CompiledParts,
    PI05FastPath,
    cache_tensors,
    mark_batch_dynamic,
)
from rpent_agents.features.pi05_options import PI05Options
from rpent_agents.features.protocol import PrefixEncoder, PrefixFeatures

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

    Attributes:
        options: How it runs (fast path, CUDA graph, buckets, ...), every None of the given
            `PI05Options` decided for this policy (`PI05Options.resolved`).

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
        options: PI05Options | None = None,
        camera_keys: Mapping[str, str] | None = None,
    ) -> None:
        """Wrap a loaded policy and its processor pipelines (see `from_checkpoint`).

        Args:
            policy: A LeRobot `PI05Policy`, already on its device and dtype.
            preprocessor: Its pre-processor pipeline (raw batch -> policy inputs).
            postprocessor: Its post-processor pipeline (normalised chunk -> env units).
            options: Its speed options (`PI05Options`); None: every default.
            camera_keys: Raw camera key -> policy image feature.

        Raises:
            ValueError: When `camera_keys` names a feature the policy lacks, or `options`
                cannot run on this policy (`PI05Options.resolved`).
        """
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
        bf16_policy = _language_model_dtype(policy) == torch.bfloat16
        self.options = (options or PI05Options()).resolved(
            self.device, bf16_policy, policy.config.tokenizer_max_length
        )
        self._rl_token_encoder: PrefixEncoder | None = None
        self._compiled: CompiledParts | None = None
        self._fast: PI05FastPath | None = None
        if self.options.fast_path:
            self._compiled = CompiledParts.compiled(
                self._prefix_pass, self._euler_step, self.options
            )
            self._fast = PI05FastPath(policy, self.options, self._bucket_outputs, self._euler_times)

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_dir: Path,
        tokenizer_dir: Path,
        device: str = "cpu",
        options: PI05Options | None = None,
        camera_keys: Mapping[str, str] | None = None,
    ) -> PI05FeatureModel:
        """Load a pi0.5 checkpoint folder and its processors, tokenizer from `tokenizer_dir`.

        `options` (None: every default, so compiled on CUDA, eager elsewhere) and
        `camera_keys` as in the constructor.

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
        return cls(policy.to(device), preprocessor, postprocessor, options, camera_keys)

    @property
    def device(self) -> torch.device:  # noqa: D102
        return next(self.policy.parameters()).device

    @property
    def warmup(self) -> dict[int, BucketWarmup]:
        """Per batch bucket warmed up in this process, its `BucketWarmup`.

        Its seconds, their source ("compiled", "cache" or "shared") and the first-ever
        compile's seconds; empty off the fast path.
        """
        return {} if self._fast is None else self._fast.warmup

    @property
    def warmup_s(self) -> dict[int, float]:
        """Seconds of each bucket's warm-up in this process (compile or cache load, capture)."""
        return {bucket: warmup.seconds for bucket, warmup in self.warmup.items()}

    def fuse_rl_token(self, encode: PrefixEncoder) -> None:
        """Run `encode` (`RLTFeaturizer.encode_rl_token`) inside each fast call, after the chunk.

        `featurize` then returns its `z_rl` (`PrefixFeatures.z_rl`), computed on the padded
        bucket within the same CUDA graph; buckets recorded before are recorded again at their
        next call (their compiles stay). Off the fast path nothing changes: `z_rl` stays None
        and the featurizer encodes the prefix itself.
        """
        self._rl_token_encoder = encode
        if self._fast is not None:
            self._fast.forget_graphs()

    def warm_up(self, batch_sizes: Sequence[int] | None = None) -> dict[int, BucketWarmup]:
        """Compile (or load from the cache) the buckets of `batch_sizes` now, on blank inputs.

        Args:
            batch_sizes: Default: every bucket of `options.batch_buckets`.

        Returns:
            `warmup` (bucket -> `BucketWarmup`); nothing runs without the fast path.
        """
        if not self.options.fast_path:
            return self.warmup
        buckets = self.options.batch_buckets
        for size in batch_sizes or buckets:
            if bucket_size(size, buckets) not in self.warmup:
                self.featurize([self._blank_observation()] * size, [""] * size)
        return self.warmup

    def _blank_observation(self) -> dict[str, np.ndarray]:
        features = self.policy.config.input_features
        observation = {
            raw_key: np.zeros((*features[policy_key].shape[1:], 3), np.uint8)
            for raw_key, policy_key in self.camera_keys.items()
        }
        observation["state"] = np.zeros(features["observation.state"].shape, np.float32)
        return observation

    def _policy_batch(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> dict[str, Any]:
        batch: dict[str, Any] = {"task": list(instructions)}
        for raw_key, policy_key in self.camera_keys.items():
            images = np.stack([np.asarray(obs[raw_key]) for obs in observations])
            # uint8 to the model's device, floats made there: a quarter of the bytes cross to a
            # GPU, and the host makes no pass over every pixel (~45 ms per camera at batch 64
            # on a 2-core CPU)
            pixels = torch.from_numpy(images)
            if self.device.type == "cuda":  # pinned: the copy runs without holding the host
                pixels = pixels.pin_memory()
            pixels = pixels.to(self.device, non_blocking=True)
            batch[policy_key] = pixels.permute(0, 3, 1, 2).float() / 255.0
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
        from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

        images, image_masks = self.policy._preprocess_images(batch)
        tokens, token_mask = self._kept_prompt_slots(
            batch[OBS_LANGUAGE_TOKENS], batch[OBS_LANGUAGE_ATTENTION_MASK]
        )
        config = self.policy.config
        noise = self.policy.model.sample_noise(
            (tokens.shape[0], config.chunk_size, config.max_action_dim), self.device
        )
        inputs = (*images, *image_masks, tokens, token_mask, noise)
        run = self._prefix_pass_and_chunk if self._fast is None else self._fast
        prefix_tokens, pad_mask, chunk, *fused_z_rl = run(*inputs)
        ref_chunk = self.postprocessor(chunk[:, :, : self.action_dim])
        return PrefixFeatures(
            prefix_tokens=prefix_tokens,
            pad_mask=pad_mask.bool(),
            ref_chunk=ref_chunk.float(),
            image_token_count=prefix_tokens.shape[1] - tokens.shape[1],
            z_rl=fused_z_rl[0] if fused_z_rl else None,
        )

    def _kept_prompt_slots(
        self, tokens: torch.Tensor, token_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt tokens and mask (B, L) cut to `prompt_slots` columns.

        Raises:
            ValueError: When a prompt holds a token past `prompt_slots`.
        """
        slots = self.options.prompt_slots
        if slots is None or slots >= tokens.shape[1]:
            return tokens, token_mask
        if token_mask[:, slots:].any():
            longest = int(token_mask.sum(dim=1).max())
            raise ValueError(
                f"a prompt fills {longest} token slots but prompt_slots={slots}: raise "
                f"prompt_slots (up to {tokens.shape[1]}) or shorten the instruction"
            )
        return tokens[:, :slots], token_mask[:, :slots]

    def _prefix_pass_and_chunk(
        self, *inputs: torch.Tensor, parts: CompiledParts | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The prefix pass with KV cache, then the Euler loop of the action expert from it.

        Args:
            *inputs: The camera images, their masks (one per camera each), the prompt tokens,
                their mask and the initial noise (B, H, max_action_dim).
            parts: The compiled prefix pass and Euler step (the fast path); None: eager.

        Returns:
            Prefix hidden states (B, T, D), prefix pad mask (B, T) and the chunk (B, H,
            max_action_dim), normalised.
        """
        prefix_pass, euler_step = parts or (self._prefix_pass, self._euler_step)
        # the buckets above 1 share the dynamic-batch graphs (`dynamic_batch`)
        dynamic = parts is not None and self.options.dynamic_batch and inputs[0].shape[0] > 1
        if dynamic:
            mark_batch_dynamic(inputs)
        prefix_tokens, pad_mask, cache = prefix_pass(*inputs[:-1])
        if dynamic:
            mark_batch_dynamic([pad_mask, *cache_tensors(cache)])
        chunk = noise = inputs[-1]
        for step_time in self._euler_times:
            # A fill, not torch.tensor(): a host-to-device copy would wait for the device.
            time = torch.full((noise.shape[0],), step_time, device=noise.device)
            if dynamic:
                mark_batch_dynamic([time])
            chunk = euler_step(pad_mask, cache, chunk, time)
        return prefix_tokens, pad_mask, chunk

    def _prefix_pass(self, *inputs: torch.Tensor) -> tuple[Any, ...]:
        """Prefix hidden states (B, T, D), pad mask (B, T) and the language model's KV cache.

        Args:
            *inputs: The camera images, their masks (one per camera each), the prompt tokens
                and their mask.
        """
        from lerobot.policies.common.vla_utils import make_att_2d_masks, prepare_attention_masks_4d

        cameras = (len(inputs) - 2) // 2
        images, image_masks = list(inputs[:cameras]), list(inputs[cameras : 2 * cameras])
        tokens, token_mask = inputs[2 * cameras :]
        model = self.policy.model
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.options.bf16_vision):
            embeddings, pad_mask, attention = model.embed_prefix(
                images, image_masks, tokens, token_mask
            )
        language_model = model.paligemma_with_expert.paligemma.model.language_model
        language_model.config._attn_implementation = "eager"
        (prefix_tokens, _), cache = model.paligemma_with_expert.forward(
            attention_mask=prepare_attention_masks_4d(make_att_2d_masks(pad_mask, attention)),
            position_ids=torch.cumsum(pad_mask, dim=1) - 1,
            inputs_embeds=[embeddings, None],
            use_cache=True,
        )
        return prefix_tokens, pad_mask, cache

    def _euler_step(
        self, pad_mask: torch.Tensor, cache: Any, chunk: torch.Tensor, time: torch.Tensor
    ) -> torch.Tensor:
        """One Euler step of the flow from `time` (B,) towards 0: `chunk + dt * velocity`.

        The step of LeRobot's `euler_integrate` (openpi's sampling loop).
        """
        velocity = self.policy.model.denoise_step(pad_mask, cache, chunk, time)
        return chunk + self._euler_dt * velocity

    @property
    def _euler_dt(self) -> float:
        """The Euler loop's time step, `-1 / num_inference_steps` (from 1 at noise to 0)."""
        return -1.0 / self.policy.config.num_inference_steps

    @property
    def _euler_times(self) -> list[float]:
        """The time of each Euler step, from 1 (noise) down to `-_euler_dt`."""
        steps = range(self.policy.config.num_inference_steps)
        return [1.0 + step * self._euler_dt for step in steps]

    def _bucket_outputs(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The compiled `_prefix_pass_and_chunk`, then the fused RL token's `z_rl` if any."""
        outputs = self._prefix_pass_and_chunk(*inputs, parts=self._compiled)
        if self._rl_token_encoder is None:
            return outputs
        prefix_tokens, pad_mask, _ = outputs
        image_token_count = prefix_tokens.shape[1] - inputs[-3].shape[1]  # -3: prompt tokens
        return (*outputs, self._rl_token_encoder(prefix_tokens, pad_mask, image_token_count))


def _language_model_dtype(policy: Any) -> torch.dtype:
    """The dtype of the PaliGemma language model's weights (bf16 or fp32 by `config.dtype`)."""
    language_model = policy.model.paligemma_with_expert.paligemma.model.language_model
    return language_model.embed_tokens.weight.dtype


def _prefix_width(policy: Any) -> int:
    return policy.model.paligemma_with_expert.paligemma.config.text_config.hidden_size
