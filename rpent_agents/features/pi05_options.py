"""How the pi0.5 feature model runs: `PI05Options`, its speed options, written once.

`PI05FeatureModel` (`features.pi05`) takes them, as LeRobot's `configuration_*.py` sits beside
its `modeling_*.py`; `rpent-feature-server` and the featurization benches take them as their
command-line flags (`--fast-path`, `--batch-buckets`, ...: tyro reads each field's docstring
as its help). A None leaves the choice to the model, which decides it for the policy it runs
(`PI05Options.resolved`).

Example:
    >>> options = PI05Options(batch_buckets=(1, 8), prompt_slots=64)
    >>> model = PI05FeatureModel.from_checkpoint(checkpoint, tokenizer_dir, "cuda", options)
    >>> model.options.fast_path, model.options.cuda_graph  # decided: on CUDA
    (True, True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from rpent_agents.features.buckets import BATCH_BUCKETS, checked_buckets
from rpent_agents.features.compile_cache import default_cache_root


@dataclass(frozen=True)
class PI05Options:
    """The speed options of `PI05FeatureModel` (its fast path: `features.pi05_fast_path`)."""

    fast_path: bool | None = None
    """Compile the prefix pass and the Euler loop (None: on CUDA only); True compiles on the
    CPU too, False keeps the eager code on CUDA."""
    compile_mode: str | None = None
    """Fast path: the `torch.compile` mode (None: "default", the CUDA graphs being
    --cuda-graph's); "reduce-overhead" records torch's own graphs instead and needs
    --cuda-graph None or False."""
    batch_buckets: tuple[int, ...] = BATCH_BUCKETS
    """Fast path: the batch sizes padded to, each compiled once with CUDA graphs of its own (a
    larger batch pads to a multiple of the largest); fewer buckets compile faster."""
    compile_cache_dir: Path | None = None
    """Fast path: the compile cache's root (None: $RPENT_COMPILE_CACHE_DIR, else
    ~/.cache/rpent/compile; `features.compile_cache`)."""
    bf16_vision: bool | None = None
    """Run the SigLIP tower and its projector (fp32 weights in LeRobot) under bf16 autocast
    (None: on the fast path of a bf16 policy); False keeps the stock fp32 vision path."""
    prompt_slots: int | None = None
    """Prompt token slots kept of the tokenizer's `tokenizer_max_length` (200; None: all). The
    prompt is padded on the right and padding changes no real token's output, so a prefix cut
    to what prompts fill gives the same features for less compute; a longer prompt is
    refused."""
    dynamic_batch: bool = False
    """Fast path: one compile, with a symbolic batch dimension, for every bucket above 1
    (dynamo specialises a batch of 1 anyway): the default seven buckets compile twice, not
    seven times; each bucket still records CUDA graphs of its own. Off by default: on the CPU
    its kernels ran 9-19% slower than static ones."""
    cuda_graph: bool | None = None
    """Fast path: record each bucket's whole call (with a fused RL token) as one CUDA graph
    (None: on the fast path on CUDA, unless the compile mode is "reduce-overhead")."""
    precompute: bool | None = None
    """Fast path: compute once what each call recomputed from fixed weights
    (`features.precomputed`): the adaRMS modulations at the Euler times and, with bf16
    vision, bf16 copies of the SigLIP tower's Linear weights (+0.8 GB at full size). None: on
    the fast path; the eager path is unchanged."""
    grouped_attention: bool | None = None
    """Fast path: Gemma's attention (prefix pass and action expert) reads each key/value head
    in place for its query heads instead of copying it to each
    (`precomputed.grouped_query_attention`). None: on the fast path."""

    def resolved(
        self, device: torch.device, bf16_policy: bool, prompt_slot_count: int
    ) -> PI05Options:
        """These options with every None decided for one policy, and checked.

        Args:
            device: The policy's device.
            bf16_policy: Whether the policy's language model weights are bf16.
            prompt_slot_count: The policy's `tokenizer_max_length`.

        Raises:
            ValueError: When `cuda_graph` is asked for off the fast path, off CUDA or with
                "reduce-overhead", `prompt_slots` is not between 1 and `prompt_slot_count`,
                `precompute` or `grouped_attention` is asked for off the fast path, or
                `batch_buckets` is empty or holds a size below 1.
        """
        on_cuda = device.type == "cuda"
        fast_path = on_cuda if self.fast_path is None else self.fast_path
        compile_mode = self.compile_mode or "default"
        own_graphs = fast_path and on_cuda and compile_mode != "reduce-overhead"
        if self.cuda_graph and not own_graphs:
            raise ValueError(
                f"cuda_graph=True needs the fast path on CUDA and a compile_mode other than "
                f"'reduce-overhead' (fast_path={fast_path}, device {device}, "
                f"compile_mode={compile_mode!r}): pass cuda_graph=None or False"
            )
        self._check_prompt_slots(prompt_slot_count)
        self._check_fast_routes(fast_path)
        return dataclasses.replace(
            self,
            fast_path=fast_path,
            compile_mode=compile_mode,
            cuda_graph=_or_default(self.cuda_graph, own_graphs),
            bf16_vision=_or_default(self.bf16_vision, fast_path and bf16_policy),
            precompute=_or_default(self.precompute, fast_path),
            grouped_attention=_or_default(self.grouped_attention, fast_path),
            batch_buckets=checked_buckets(self.batch_buckets),
            compile_cache_dir=Path(self.compile_cache_dir or default_cache_root()),
        )

    def _check_prompt_slots(self, prompt_slot_count: int) -> None:
        slots = self.prompt_slots
        if slots is not None and not 1 <= slots <= prompt_slot_count:
            raise ValueError(
                f"prompt_slots={slots}: pass a number of prompt slots from 1 to the "
                f"policy's tokenizer_max_length ({prompt_slot_count}), or None for all of them"
            )

    def _check_fast_routes(self, fast_path: bool) -> None:
        for name in ("precompute", "grouped_attention"):
            if getattr(self, name) and not fast_path:
                raise ValueError(
                    f"{name}=True serves the fast path only (fast_path=False here): pass "
                    f"{name}=None or False, or fast_path=True"
                )


def _or_default(option: bool | None, default: bool) -> bool:
    """`option`, or `default` when it is None."""
    return default if option is None else option
