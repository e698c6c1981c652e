"""What every feature model offers, and the RL-token featurizer built on top of one.

A `FeatureModel` maps a batch of raw observations (DESIGN.md §2: `image`, `wrist_image`,
`state`) and instructions to the VLA's prefix tokens (B, T, D), their pad mask (B, T) and a
reference action chunk (B, H, A) in env action units, all from one prefix pass.
`RLTFeaturizer` adds the trained RL token and returns what the RL stage sees: `z_rl` and the
reference chunk. `wrappers.RLTObservation` accepts any object with the same `rlt_features`
method (an `RLTFeaturizer`, or a remote client).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from rpent_agents.common.finite_checks import require_finite_observations, require_finite_outputs
from rpent_agents.features.rl_token import RLToken

Observation = Mapping[str, Any]


@dataclass
class PrefixFeatures:
    """One prefix pass of a VLA over a batch.

    Attributes:
        prefix_tokens: Hidden states of the prefix, (B, T, D).
        pad_mask: (B, T) bool, True for real tokens, False for padding.
        ref_chunk: Reference action chunk (B, H, A) in env action units.
        image_token_count: How many leading prefix tokens come from images.
    """

    prefix_tokens: torch.Tensor
    pad_mask: torch.Tensor
    ref_chunk: torch.Tensor
    image_token_count: int


@dataclass
class RLTFeatures:
    """What the RL stage reads per observation: `z_rl` (B, D) and `ref_chunk` (B, H, A)."""

    z_rl: np.ndarray
    ref_chunk: np.ndarray


def real_prefix_tokens(prefix_tokens: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
    """The prefix tokens (B, T, D) with the padding zeroed: the `prefix` the finite check reads."""
    return torch.where(pad_mask[..., None], prefix_tokens, 0.0)


@runtime_checkable
class FeatureModel(Protocol):
    """A VLA seen as a featurizer.

    Attributes:
        prefix_dim: Width D of the prefix tokens.
        chunk_len: Steps H of the reference chunk.
        action_dim: Width A of one action.
        device: Where the model runs.
    """

    prefix_dim: int
    chunk_len: int
    action_dim: int
    device: torch.device

    def featurize(
        self, observations: Sequence[Observation], instructions: Sequence[str]
    ) -> PrefixFeatures:
        """Prefix tokens, pad mask and reference chunk of a batch, from one prefix pass."""
        ...


class RLTFeaturizer:
    """A feature model plus its trained RL token: observations -> (`z_rl`, `ref_chunk`).

    Runs under `torch.no_grad()` in eval mode on the feature model's device. NaN and inf never
    pass: an observation holding one in a float input (`state`) is refused with ValueError
    naming its index and key, and so is an output holding one (`prefix`, `ref_chunk`, `z_rl`:
    a damaged checkpoint, an fp16 overflow), naming the output and the observation.

    Example:
        >>> featurizer = load_featurizer("path/to/stage1_checkpoint")  # or the default
        >>> features = featurizer.rlt_features([obs], ["insert the peg in the hole"])
        >>> features.z_rl.shape, features.ref_chunk.shape
        ((1, 256), (1, 10, 8))
    """

    def __init__(
        self,
        feature_model: FeatureModel,
        rl_token: RLToken | None,
        rl_token_dtype: torch.dtype = torch.float32,
    ) -> None:
        """Pair a feature model with the RL token trained on its prefix (same width D).

        `rl_token=None`: prefix features only (a model no RL token was trained on, e.g. pi0.5
        on the feature server); `rlt_features` then raises ValueError and `z_dim` is None.
        `rl_token_dtype=torch.bfloat16` runs the RL token under bf16 autocast (its weights
        stay fp32), as Stage 1 trains it on CUDA: on a long prefix (pi0.5's: 712 tokens of
        width 2048, ~0.2 TFLOP per observation) fp32 matmuls leave the tensor cores idle.
        """
        if rl_token is not None and rl_token.config.dim != feature_model.prefix_dim:
            raise ValueError(
                f"RL token dim {rl_token.config.dim} != feature model prefix_dim"
                f" {feature_model.prefix_dim}; load the RL token trained with this model"
            )
        self.feature_model = feature_model
        self.rl_token = None if rl_token is None else rl_token.to(feature_model.device).eval()
        self.z_dim = None if rl_token is None else rl_token.config.dim
        self.rl_token_dtype = rl_token_dtype
        self.chunk_len = feature_model.chunk_len
        self.action_dim = feature_model.action_dim

    @torch.no_grad()
    def prefix_features(
        self, observations: Sequence[Observation], instructions: Sequence[str]
    ) -> PrefixFeatures:
        """The feature model's prefix pass over finite inputs, with finite outputs.

        Raises:
            ValueError: When an input or an output (`prefix` on real tokens, `ref_chunk`)
                holds NaN or inf.
        """
        require_finite_observations(observations)
        prefix = self.feature_model.featurize(observations, instructions)
        real_tokens = real_prefix_tokens(prefix.prefix_tokens, prefix.pad_mask)
        outputs = {"prefix": real_tokens, "ref_chunk": prefix.ref_chunk}
        require_finite_outputs(outputs, type(self.feature_model).__name__)
        return prefix

    @torch.no_grad()
    def rlt_features(
        self, observations: Sequence[Observation], instructions: Sequence[str]
    ) -> RLTFeatures:
        """`z_rl` (B, D) float32 and the reference chunk (B, H, A) float32, as numpy.

        Raises:
            ValueError: When an input or an output holds NaN or inf (see the class doc), or
                the featurizer has no RL token.
        """
        if self.rl_token is None:
            raise ValueError(
                f"no RL token is paired with {type(self.feature_model).__name__}, so there is"
                " no z_rl: ask for prefix features, or pass the RL token trained on its prefix"
            )
        prefix = self.prefix_features(observations, instructions)
        z_rl = self.encode_rl_token(prefix.prefix_tokens, prefix.pad_mask, prefix.image_token_count)
        features = RLTFeatures(
            z_rl=z_rl.float().cpu().numpy(),
            ref_chunk=prefix.ref_chunk.float().cpu().numpy(),
        )
        require_finite_outputs({"z_rl": features.z_rl}, "the RL token")
        return features

    def encode_rl_token(
        self, prefix_tokens: torch.Tensor, pad_mask: torch.Tensor, image_token_count: int
    ) -> torch.Tensor:
        """`z_rl` (B, D) float32 of the prefix, computed in `rl_token_dtype`."""
        device_type = prefix_tokens.device.type
        reduced = self.rl_token_dtype != torch.float32
        with torch.autocast(device_type, self.rl_token_dtype, enabled=reduced):
            return self.rl_token.encode(prefix_tokens, pad_mask, image_token_count).float()
