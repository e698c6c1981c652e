"""pi0.5's fast path: one feature call compiled, per batch bucket, as one CUDA graph on CUDA.

`PI05FeatureModel` (`features.pi05`) runs the same prefix pass and Euler loop as its eager
path through `torch.compile`: the batch is padded to a fixed bucket size (its first row
repeated); each bucket compiles once, or, with `dynamic_batch`, every bucket above 1 shares one
compile with a symbolic batch dimension. The prefix pass and one Euler step compile apart
(`CompiledParts`), so the step is traced and lowered once, not once per step. On CUDA each
bucket's whole call (the prefix pass, the ten Euler steps and, when an `RLTFeaturizer` fused
its RL token into the model, `fuse_rl_token`, the RL token over the prefix) is then recorded as
one CUDA graph on static input buffers (`cuda_graph`) and replayed in one launch: torch's
"reduce-overhead" mode recorded eleven graphs, checked their inputs in Python at each replay
and left the device idle 3.9 of 30 ms at batch 1, and the RL token after them ran eagerly. On
the fast path of a bf16 policy the SigLIP tower and its projector, which LeRobot keeps in fp32,
run under bf16 autocast, as openpi runs them (`bf16_vision`): in fp32 they took 41% of a
batch-64 call on the H200. The first call of each bucket pays the compile and capture; the
compile is kept in RPent's compile cache (`features.compile_cache`: `~/.cache/rpent/compile`
by default), so the next process on the same machine loads it instead. `warmup` tells, per
bucket, the seconds, whether they compiled, came from the cache or were shared with a bucket
warmed up before, and the first-ever compile's seconds.
With `compile_mode="reduce-overhead"` (and `cuda_graph=False`) torch records the graphs
itself; with torch 2.11 those replay only in the thread that compiled them
(pytorch/pytorch#123177). The graphs of `cuda_graph` replay from any thread, one call at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from rpent_agents.features.buckets import bucket_size
from rpent_agents.features.compile_cache import BucketWarmup, CompileCache, device_kind
from rpent_agents.features.cuda_graphs import CapturedGraph, capture
from rpent_agents.features.pi05_options import PI05Options
from rpent_agents.features.precomputed import (
    fast_routes,
    install_bf16_vision_copies,
    install_grouped_query_attention,
    install_modulation_tables,
)

logger = logging.getLogger(__name__)
# The PI05Config fields that shape the compiled graph (with the weights' names, shapes, dtypes)
COMPILED_CONFIG_FIELDS = (
    "chunk_size",
    "max_action_dim",
    "max_state_dim",
    "num_inference_steps",
    "tokenizer_max_length",
    "image_resolution",
    "input_features",
    "output_features",
    "empty_cameras",
    "min_period",
    "max_period",
)
# Without `cuda_graph`, a bucket's first call compiles (and, in "reduce-overhead", runs the
# CUDA-graph warm-up), its second records torch's graphs; later calls replay them.
WARMUP_CALLS = 2
# The compile cache's name of the graphs every bucket above 1 shares (`dynamic_batch`)
DYNAMIC_BATCH_GRAPHS = "dynamic-batch"


class CompiledParts(NamedTuple):
    """The fast path's two compiled functions: the prefix pass and one Euler step.

    Compiled apart, the Euler step is traced and lowered once and run `num_inference_steps`
    times, instead of ten unrolled copies in one graph: a third of the compile on the CPU.
    """

    prefix_pass: Callable[..., tuple[Any, ...]]
    euler_step: Callable[..., torch.Tensor]

    @classmethod
    def compiled(
        cls,
        prefix_pass: Callable[..., tuple[Any, ...]],
        euler_step: Callable[..., torch.Tensor],
        options: PI05Options,
    ) -> CompiledParts:
        """Both functions through `torch.compile` in the mode and batch shapes of `options`."""
        # None: static shapes but for the dims marked dynamic (`mark_batch_dynamic`)
        dynamic = None if options.dynamic_batch else False
        return cls(
            prefix_pass=torch.compile(prefix_pass, mode=options.compile_mode, dynamic=dynamic),
            euler_step=torch.compile(euler_step, mode=options.compile_mode, dynamic=dynamic),
        )


class CapturedBucket(NamedTuple):
    """One bucket's whole fast call as a CUDA graph (`cuda_graph`).

    Attributes:
        inputs: The static inputs the graph reads (the padded batch), filled before a replay.
        captured: The graph; its outputs are the prefix tokens, pad mask, chunk and, with a
            fused RL token, `z_rl`.
    """

    inputs: tuple[torch.Tensor, ...]
    captured: CapturedGraph[tuple[torch.Tensor, ...]]


class PI05FastPath:
    """A pi0.5 feature call run on its batch bucket: compiled, cached on disk, graphed on CUDA.

    Attributes:
        policy: The LeRobot `PI05Policy` the call runs (its weights key the compile cache).
        options: The model's options, every None decided (`PI05Options.resolved`).
        bucket_call: The compiled call of a padded batch (the model's prefix pass, Euler loop
            and fused RL token): prefix tokens, pad mask, chunk [, `z_rl`]. It runs on the
            fast routes (`features.precomputed`) the options install in the policy.
        warmup: Per batch bucket warmed up in this process, its `BucketWarmup` (seconds,
            "compiled", "cache" or "shared", the first-ever compile's seconds).
    """

    def __init__(
        self,
        policy: Any,
        options: PI05Options,
        bucket_call: Callable[..., tuple[torch.Tensor, ...]],
        euler_times: Sequence[float],
    ) -> None:
        """Run `bucket_call` per bucket of `options.batch_buckets`; nothing compiles yet.

        Installs the policy's fast routes now: their tables are made from the Euler loop's
        times (`euler_times`) and the weights as they are.
        """
        self.policy = policy
        self.options = options
        self.bucket_call = bucket_call
        self._fast_route_modules = _installed_fast_routes(policy, options, euler_times)
        self.warmup: dict[int, BucketWarmup] = {}
        self._graphs: dict[int, CapturedBucket] = {}
        self._graph_pool = torch.cuda.graph_pool_handle() if options.cuda_graph else None

    @property
    def device(self) -> torch.device:  # noqa: D102
        return next(self.policy.parameters()).device

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`bucket_call` on the batch padded to its bucket, cut back to the batch's rows."""
        count = inputs[0].shape[0]
        bucket = bucket_size(count, self.options.batch_buckets)
        padded = [_pad_rows(tensor, bucket) for tensor in inputs]
        if bucket not in self.warmup:
            self._warm_up(bucket, padded)
        if self.options.cuda_graph:
            outputs = self._replayed(bucket, padded)
        else:
            torch.compiler.cudagraph_mark_step_begin()
            outputs = self._routed_call(*padded)
        # Cloned: the next replay of the CUDA graphs overwrites their output buffers.
        return tuple(output[:count].clone() for output in outputs)

    def forget_graphs(self) -> None:
        """Record each bucket's graph again at its next call (its compile stays)."""
        self._graphs.clear()

    def _routed_call(self, *padded: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`bucket_call` on the fast routes."""
        with fast_routes(self._fast_route_modules):
            return self.bucket_call(*padded)

    def _replayed(self, bucket: int, padded: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The bucket's CUDA graph replayed on `padded`."""
        recorded = self._captured_bucket(bucket, padded)
        for buffer, values in zip(recorded.inputs, padded, strict=True):
            buffer.copy_(values)
        return recorded.captured.replay()

    def _captured_bucket(self, bucket: int, padded: Sequence[torch.Tensor]) -> CapturedBucket:
        """The bucket's whole call recorded on static copies of `padded` at its first call.

        The graphs of every bucket share one memory pool: they never replay at once, and
        each call clones what it returns.
        """
        if bucket not in self._graphs:
            inputs = tuple(values.clone() for values in padded)
            captured = capture(lambda: self._routed_call(*inputs), self.device, self._graph_pool)
            self._graphs[bucket] = CapturedBucket(inputs, captured)
        return self._graphs[bucket]

    def _warm_up(self, bucket: int, padded: Sequence[torch.Tensor]) -> None:
        def first_calls() -> None:
            if self.options.cuda_graph:  # the capture's warm-up run compiles
                self._captured_bucket(bucket, padded)
            else:
                for _ in range(WARMUP_CALLS):
                    torch.compiler.cudagraph_mark_step_begin()
                    self._routed_call(*padded)
            if self.device.type == "cuda":
                torch.cuda.synchronize()

        cache = CompileCache(self.options.compile_cache_dir, self._compile_facts())
        graphs = DYNAMIC_BATCH_GRAPHS if self.options.dynamic_batch and bucket > 1 else None
        warmup = self.warmup[bucket] = cache.warm_up(bucket, first_calls, graphs)
        logger.info(
            "pi0.5 fast path: batch bucket %d ready in %.1f s (%s, %s%s; first compile %s s; %s)",
            bucket,
            warmup.seconds,
            warmup.source,
            self.options.compile_mode,
            ", one CUDA graph" if self.options.cuda_graph else "",
            "unknown" if warmup.first_compile_s is None else f"{warmup.first_compile_s:.1f}",
            cache.folder,
        )

    def _compile_facts(self) -> dict[str, Any]:
        """What shapes the compiled code: the compile cache's key (`features.compile_cache`)."""
        tensors = [*self.policy.named_parameters(), *self.policy.named_buffers()]
        layout = [(name, tuple(value.shape), str(value.dtype)) for name, value in tensors]
        config, options = self.policy.config, self.options
        return {
            "model": "pi05",
            "torch": torch.__version__,
            "device": device_kind(self.device),
            "compile_mode": options.compile_mode,
            "bf16_vision": options.bf16_vision,
            "prompt_slots": options.prompt_slots,
            "dynamic_batch": options.dynamic_batch,
            "precompute": options.precompute,
            "grouped_attention": options.grouped_attention,
            "dtypes": sorted({dtype for _, _, dtype in layout}),
            "parameters": sum(int(np.prod(shape)) for _, shape, _ in layout),
            "layout_sha256": hashlib.sha256(json.dumps(layout).encode()).hexdigest(),
            "config": {name: str(getattr(config, name)) for name in COMPILED_CONFIG_FIELDS},
        }


def _installed_fast_routes(
    policy: Any, options: PI05Options, euler_times: Sequence[float]
) -> list[torch.nn.Module]:
    """The policy's modules given fast routes (`features.precomputed`) by `options`."""
    modules: list[torch.nn.Module] = []
    if options.precompute:
        modules += install_modulation_tables(policy, euler_times)
        if options.bf16_vision:
            modules += install_bf16_vision_copies(policy)
    if options.grouped_attention:
        modules += install_grouped_query_attention(policy)
    return modules


def mark_batch_dynamic(tensors: Sequence[torch.Tensor]) -> None:
    """Mark dim 0 of `tensors` symbolic for `torch.compile` (where the code allows it)."""
    for tensor in tensors:
        torch._dynamo.maybe_mark_dynamic(tensor, 0)


def cache_tensors(cache: Any) -> list[torch.Tensor]:
    """The keys and values of a transformers `DynamicCache`, layer by layer."""
    return [tensor for layer in cache.layers for tensor in (layer.keys, layer.values)]


def _pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """`tensor`, contiguous, with its first row repeated up to `rows` rows.

    Repeated real rows keep the padding free of empty attention rows; contiguity keeps one
    compiled graph per bucket whatever layout the caller's images have.
    """
    extra = rows - tensor.shape[0]
    padded = torch.cat([tensor, tensor[:1].expand(extra, *tensor.shape[1:])]) if extra else tensor
    return padded.contiguous()
