"""What every feature model offers, and the RL-token featurizer built on top of one.

A `FeatureModel` maps a batch of raw observations (DESIGN.md §2: `image`, `wrist_image`,
`state`) and instructions to the VLA's prefix tokens (B, T, D), their pad mask (B, T) and a
reference action chunk (B, H, A) in env action units, all from one prefix pass.
`RLTFeaturizer` adds the trained RL token and returns what the RL stage sees: `z_rl` and the
reference chunk. `wrappers.RLTObservation` accepts any object with the same `rlt_features`
method (an `RLTFeaturizer`, or a remote client).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from rpent_agents.common.finite_checks import (
    non_finite_output_error,
    require_finite_observations,
    require_finite_outputs,
)
from rpent_agents.features.rl_token import RLToken

Observation = Mapping[str, Any]
CHECKED_OUTPUTS = ("prefix", "ref_chunk", "z_rl")
"""The outputs refused when they hold NaN or inf, in the order `RLTFeaturizer` checks them."""


@dataclass
class PrefixFeatures:
    """One prefix pass of a VLA over a batch.

    Attributes:
        prefix_tokens: Hidden states of the prefix, (B, T, D).
        pad_mask: (B, T) bool, True for real tokens, False for padding.
        ref_chunk: Reference action chunk (B, H, A) in env action units.
        image_token_count: How many leading prefix tokens come from images.
        z_rl: (B, D) float32 from an RL token the model runs inside its own fast path
            (`fuse_rl_token`); None when the featurizer must encode the prefix itself.
    """

    prefix_tokens: torch.Tensor
    pad_mask: torch.Tensor
    ref_chunk: torch.Tensor
    image_token_count: int
    z_rl: torch.Tensor | None = None


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


PrefixEncoder = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
"""`(prefix_tokens, pad_mask, image_token_count) -> z_rl`: `RLTFeaturizer.encode_rl_token`."""


def packed_rlt_outputs(
    prefix_tokens: torch.Tensor, pad_mask: torch.Tensor, ref_chunk: torch.Tensor, z_rl: torch.Tensor
) -> torch.Tensor:
    """What the RL stage reads and the finite checks need, as (B, D + H*A + 6) float32 rows.

    Each row holds `z_rl`, the flat reference chunk, then for `prefix` (real tokens),
    `ref_chunk` and `z_rl` 1.0 where the row holds NaN or inf (else 0.0), then the row's
    first such entry of each (`non_finite_columns`). Computed where the inputs live, so one
    read back brings everything to the host (`unpacked_rlt_features`).
    """
    checked = (real_prefix_tokens(prefix_tokens, pad_mask), ref_chunk, z_rl)
    flat_outputs = [z_rl.float(), ref_chunk.float().flatten(1)]
    return torch.cat([*flat_outputs, non_finite_columns(checked)], dim=1)


def unpacked_rlt_features(
    packed: np.ndarray, chunk_len: int, action_dim: int, sources: Sequence[str]
) -> RLTFeatures:
    """The features of `packed_rlt_outputs` rows, refusing a row whose outputs hold NaN or inf.

    Args:
        packed: (B, D + H*A + 6) rows.
        chunk_len: H.
        action_dim: A.
        sources: What computed `prefix`, `ref_chunk` and `z_rl`, named in a refusal.

    Raises:
        ValueError: As `require_finite_outputs`, for the first output holding NaN or inf.
    """
    flags_start = packed.shape[1] - 2 * len(CHECKED_OUTPUTS)
    chunk_start = flags_start - chunk_len * action_dim
    values_start = flags_start + len(CHECKED_OUTPUTS)
    flags, values = packed[:, flags_start:values_start], packed[:, values_start:]
    refuse_non_finite(flags, values, sources)
    ref_chunk = packed[:, chunk_start:flags_start].reshape(-1, chunk_len, action_dim)
    return RLTFeatures(
        z_rl=np.ascontiguousarray(packed[:, :chunk_start]),
        ref_chunk=np.ascontiguousarray(ref_chunk),
    )


def non_finite_columns(outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """(B, 2K) float32 for K outputs (B, ...): where each row holds NaN or inf, and what.

    The first K columns are 1.0 where the output's row holds one (else 0.0), the last K the
    row's first such entry in C order (any entry of a finite row), as `first_non_finite`
    finds it; computed on the device, with no read back.
    """
    flat = [output.float().flatten(1) for output in outputs]
    non_finite = [~torch.isfinite(values) for values in flat]
    flags = [rows.any(dim=1, keepdim=True).float() for rows in non_finite]
    first = [
        values.gather(1, rows.to(torch.uint8).argmax(dim=1, keepdim=True))
        for values, rows in zip(flat, non_finite, strict=True)
    ]
    return torch.cat([*flags, *first], dim=1)


def refuse_non_finite(flags: np.ndarray, first_values: np.ndarray, sources: Sequence[str]) -> None:
    """Raise what `require_finite_outputs` raises over the batch, from `non_finite_columns`.

    Args:
        flags: (B, 3) non-zero where the row's output (`CHECKED_OUTPUTS` order) holds NaN/inf.
        first_values: (B, 3) the row's first such entry of each output.
        sources: What computed each output, named in the message.

    Raises:
        ValueError: Naming the first output (in order) holding one and its first observation.
    """
    for column, (output, source) in enumerate(zip(CHECKED_OUTPUTS, sources, strict=True)):
        rows = np.flatnonzero(flags[:, column])
        if len(rows):
            value = float(first_values[rows[0], column])
            raise non_finite_output_error(source, output, int(rows[0]), value)


class RLTFeaturizer:
    """A feature model plus its trained RL token: observations -> (`z_rl`, `ref_chunk`).

    Runs under `torch.no_grad()` in eval mode on the feature model's device. NaN and inf never
    pass: an observation holding one in a float input (`state`) is refused with ValueError
    naming its index and key, and so is an output holding one (`prefix`, `ref_chunk`, `z_rl`:
    a damaged checkpoint, an fp16 overflow), naming the output and the observation. The
    outputs and their finite checks come back to the host in one copy (`packed_rlt_outputs`),
    so a call waits for the device once.

    Attributes:
        output_sources: What computes `prefix`, `ref_chunk` and `z_rl` (named in refusals).

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
        A feature model with a `fuse_rl_token(encode)` method (pi0.5's fast path) is given
        `encode_rl_token`, runs it inside its own compiled call and returns `z_rl` with the
        prefix (`PrefixFeatures.z_rl`).
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
        model_name = type(feature_model).__name__
        self.output_sources = (model_name, model_name, "the RL token")
        fuse_rl_token = getattr(feature_model, "fuse_rl_token", None)
        if self.rl_token is not None and fuse_rl_token is not None:
            fuse_rl_token(self.encode_rl_token)

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
        require_finite_outputs(outputs, self.output_sources[0])
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
        require_finite_observations(observations)
        prefix = self.feature_model.featurize(observations, instructions)
        z_rl = prefix.z_rl
        if z_rl is None:
            z_rl = self.encode_rl_token(
                prefix.prefix_tokens, prefix.pad_mask, prefix.image_token_count
            )
        packed = packed_rlt_outputs(prefix.prefix_tokens, prefix.pad_mask, prefix.ref_chunk, z_rl)
        # the one read back: the host waits for the device once per call
        packed_rows = packed.cpu().numpy()
        return unpacked_rlt_features(
            packed_rows, self.chunk_len, self.action_dim, self.output_sources
        )

    def encode_rl_token(
        self, prefix_tokens: torch.Tensor, pad_mask: torch.Tensor, image_token_count: int
    ) -> torch.Tensor:
        """`z_rl` (B, D) float32 of the prefix, computed in `rl_token_dtype`."""
        device_type = prefix_tokens.device.type
        reduced = self.rl_token_dtype != torch.float32
        with torch.autocast(device_type, self.rl_token_dtype, enabled=reduced):
            return self.rl_token.encode(prefix_tokens, pad_mask, image_token_count).float()
