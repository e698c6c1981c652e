"""The built-in VLA's fast path: its whole device computation as one CUDA graph per batch bucket.

`GraphedRLTFeaturizer` is the `RLTFeaturizer` of a `BuiltinVLA` and its RL token whose
`rlt_features` runs everything after the host's stacking as one function of static buffers
(`packed_features`): both cameras' uint8 images, the state and the instruction's token ids and
mask -> prefix -> reference chunk and `z_rl`, with per row and output whether it holds NaN or
inf. A batch is padded to its bucket (the smallest of `batch_buckets` holding it; a batch above
the largest runs in pieces of the largest), so each bucket has fixed shapes; on CUDA the
function is captured as a CUDA graph at the bucket's first call and replayed from then on, and
its outputs come back in one device-to-host copy. The eager call launches hundreds of small
kernels and reads back several times: it is bound by launches and host syncs, not by arithmetic
(bench/RESULTS.md, issue 5); a replay is one launch and one read.

Rows never mix: the VLA and the RL token normalise per token (LayerNorm) or per sample
(GroupNorm), attend within a sample and run in eval mode, so the padding rows (zeros, or what
an earlier call left in the buffers) change no real row; they are cut off. The flow head draws
its noise inside the graph (torch's default CUDA generator advances at every replay), so each
call samples afresh, as the eager head does. On the CPU the same padded function runs eagerly
(what CI checks); `load_featurizer` builds this class on CUDA only (its `cuda_graphs`).

NaN and inf are refused as `RLTFeaturizer` refuses them, with the same messages: the
observations on the host before they are stacked, the outputs (`prefix` on real tokens,
`ref_chunk`, `z_rl`, in that order) from the flags and first non-finite entries that come back
with them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from rpent_agents.common.finite_checks import require_finite_observations
from rpent_agents.features.buckets import (
    BATCH_BUCKETS,
    batch_pieces,
    bucket_size,
    checked_buckets,
)
from rpent_agents.features.builtin import CAMERA_KEYS, STATE_KEY, BuiltinVLA
from rpent_agents.features.cuda_graphs import CapturedGraph, capture
from rpent_agents.features.protocol import (
    Observation,
    RLTFeatures,
    RLTFeaturizer,
    packed_rlt_outputs,
    unpacked_rlt_features,
)
from rpent_agents.features.rl_token import RLToken

INPUT_KEYS = (*CAMERA_KEYS, STATE_KEY)

InputLayout = tuple[tuple[str, tuple[int, ...], str], ...]
"""Per input key: the shape of one observation's array and its numpy dtype string."""


def input_layout(observation: Observation) -> InputLayout:
    """The layout of the arrays the built-in VLA reads from `observation`."""
    arrays = {key: np.asarray(observation[key]) for key in INPUT_KEYS}
    return tuple((key, array.shape, array.dtype.str) for key, array in arrays.items())


class BatchInputs(NamedTuple):
    """The input buffers of one bucket (rows first).

    Attributes:
        observations: `image`, `wrist_image` (B, H, W, 3) and `state` (B, S), in the
            observations' dtypes.
        text_ids: Instruction token ids (B, L) int64.
        text_mask: Their validity (B, L) bool.
    """

    observations: dict[str, torch.Tensor]
    text_ids: torch.Tensor
    text_mask: torch.Tensor

    @classmethod
    def zeros(cls, rows: int, layout: InputLayout, text_len: int) -> BatchInputs:
        """Zero-filled buffers on the CPU for `rows` observations of `layout`."""
        observations = {
            key: torch.from_numpy(np.zeros((rows, *shape), np.dtype(dtype)))
            for key, shape, dtype in layout
        }
        text_ids = torch.zeros(rows, text_len, dtype=torch.long)
        return cls(observations, text_ids, torch.zeros(rows, text_len, dtype=torch.bool))

    def map(self, function: Callable[[torch.Tensor], torch.Tensor]) -> BatchInputs:
        """The buffers with `function` applied to each (a move, pinning)."""
        observations = {key: function(values) for key, values in self.observations.items()}
        return BatchInputs(observations, function(self.text_ids), function(self.text_mask))

    def fill_rows(
        self, observations: Sequence[Observation], text_ids: torch.Tensor, text_mask: torch.Tensor
    ) -> None:
        """Stack the observations and their instruction tokens into the first rows."""
        count = len(observations)
        for key, buffer in self.observations.items():
            np.stack([np.asarray(obs[key]) for obs in observations], out=buffer[:count].numpy())
        self.text_ids[:count] = text_ids
        self.text_mask[:count] = text_mask

    def copy_rows_(self, source: BatchInputs, count: int) -> None:
        """Copy the first `count` rows of `source` in (asynchronous from pinned memory)."""
        for target, values in zip(self.tensors(), source.tensors(), strict=True):
            target[:count].copy_(values[:count], non_blocking=True)

    def tensors(self) -> list[torch.Tensor]:
        """Every buffer, in a fixed order."""
        return [*self.observations.values(), self.text_ids, self.text_mask]


class BucketKey(NamedTuple):
    """What fixes the shapes of one captured computation: its rows and the input layout."""

    rows: int
    layout: InputLayout


@dataclass
class Bucket:
    """One bucket's buffers and, on CUDA, its captured computation.

    Attributes:
        host_inputs: Where a call stacks its rows (pinned memory on CUDA).
        device_inputs: The static inputs the computation reads.
        captured: The graph and its output; None on the CPU (the computation runs eagerly).
    """

    host_inputs: BatchInputs
    device_inputs: BatchInputs
    captured: CapturedGraph[torch.Tensor] | None


class GraphedRLTFeaturizer(RLTFeaturizer):
    """`RLTFeaturizer` of the built-in VLA, padded to batch buckets and replayed as CUDA graphs.

    Same outputs as `RLTFeaturizer.rlt_features` (up to float rounding on CUDA) and the same
    NaN/inf refusals (see the module doc); `prefix_features` is the eager one.

    Attributes:
        batch_buckets: The batch sizes a call pads to, sorted.
        use_cuda_graphs: Whether buckets are captured (on a CUDA device) or run eagerly.
        buckets: The buckets built so far, by rows and input layout (one capture each).

    Example:
        >>> vla, rl_token, _ = load_checkpoint(DEFAULT_CHECKPOINT_DIR, "cuda")
        >>> featurizer = GraphedRLTFeaturizer(vla.eval(), rl_token, batch_buckets=(1, 8))
        >>> featurizer.rlt_features([obs] * 3, [task] * 3).z_rl.shape  # pads to 8
        (3, 256)
    """

    def __init__(
        self,
        feature_model: BuiltinVLA,
        rl_token: RLToken,
        batch_buckets: Sequence[int] = BATCH_BUCKETS,
    ) -> None:
        """Pair the built-in VLA with its RL token; nothing is captured before the first call.

        Raises:
            TypeError: When `feature_model` is not a `BuiltinVLA`.
            ValueError: Without an RL token, or for empty or non-positive `batch_buckets`.
        """
        if not isinstance(feature_model, BuiltinVLA):
            raise TypeError(
                f"GraphedRLTFeaturizer runs the built-in VLA only, got "
                f"{type(feature_model).__name__}: use RLTFeaturizer (pi0.5 has its own fast "
                "path, PI05FeatureModel(fast_path=True))"
            )
        if rl_token is None:
            raise ValueError("GraphedRLTFeaturizer needs the RL token trained on the VLA's prefix")
        super().__init__(feature_model, rl_token)
        self.batch_buckets = checked_buckets(batch_buckets)
        self.use_cuda_graphs = feature_model.device.type == "cuda"
        self.buckets: dict[BucketKey, Bucket] = {}

    @torch.no_grad()
    def rlt_features(
        self, observations: Sequence[Observation], instructions: Sequence[str]
    ) -> RLTFeatures:
        """`z_rl` (B, D) float32 and the reference chunk (B, H, A) float32, as numpy.

        Raises:
            ValueError: When an input or an output holds NaN or inf (as `RLTFeaturizer`), or
                the instructions are not one per observation.
        """
        if len(instructions) != len(observations):
            raise ValueError(
                f"{len(observations)} observations but {len(instructions)} instructions: "
                "pass one instruction per observation"
            )
        require_finite_observations(observations)
        text_ids, text_mask = self.feature_model.tokenizer(instructions)
        pieces = batch_pieces(len(observations), self.batch_buckets)
        packed = np.concatenate(
            [
                self._packed_rows(observations[piece], text_ids[piece], text_mask[piece])
                for piece in pieces
            ]
        )
        return unpacked_rlt_features(packed, self.chunk_len, self.action_dim, self.output_sources)

    def packed_features(self, inputs: BatchInputs) -> torch.Tensor:
        """What a bucket computes: (B, D + H*A + 6) float32 rows.

        Each row holds `z_rl`, the flat reference chunk, then for `prefix` (real tokens),
        `ref_chunk` and `z_rl` 1.0 where the row holds NaN or inf (else 0.0), then the row's
        first such entry of each (`non_finite_columns`).
        """
        vla = self.feature_model
        prefix, pad_mask = vla.encode_prefix(inputs.observations, inputs.text_ids, inputs.text_mask)
        ref_chunk = vla.sample_chunk(prefix, pad_mask)
        z_rl = self.encode_rl_token(prefix, pad_mask, vla.image_token_count)
        return packed_rlt_outputs(prefix, pad_mask, ref_chunk, z_rl)

    def _packed_rows(
        self, observations: Sequence[Observation], text_ids: torch.Tensor, text_mask: torch.Tensor
    ) -> np.ndarray:
        """The packed rows (numpy) of at most the largest bucket's observations."""
        count = len(observations)
        rows = bucket_size(count, self.batch_buckets)
        bucket = self._bucket(BucketKey(rows, input_layout(observations[0])))
        bucket.host_inputs.fill_rows(observations, text_ids, text_mask)
        bucket.device_inputs.copy_rows_(bucket.host_inputs, count)
        if bucket.captured is None:
            packed = self.packed_features(bucket.device_inputs)
        else:
            packed = bucket.captured.replay()
        return packed[:count].to("cpu", copy=True).numpy()  # the one device-to-host copy

    def _bucket(self, key: BucketKey) -> Bucket:
        if key not in self.buckets:
            self.buckets[key] = self._new_bucket(key)
        return self.buckets[key]

    def _new_bucket(self, key: BucketKey) -> Bucket:
        """Buffers for `key` and, on CUDA, the computation captured on them."""
        blank = BatchInputs.zeros(key.rows, key.layout, self.feature_model.config.max_text_tokens)
        device = self.feature_model.device
        device_inputs = blank.map(lambda buffer: buffer.to(device, copy=True))
        if not self.use_cuda_graphs:
            return Bucket(blank, device_inputs, None)
        captured = capture(lambda: self.packed_features(device_inputs), device)
        return Bucket(blank.map(torch.Tensor.pin_memory), device_inputs, captured)
