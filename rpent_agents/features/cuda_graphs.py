"""A whole device computation recorded as one CUDA graph: what the fast paths replay.

`capture(run, device)` runs `run` once on a side stream (torch's advice: lazy initialisations,
cuBLAS workspaces, kernel choices and compiles must not happen during a capture), then records
it; `CapturedGraph.replay` runs the recording (one launch) and returns the tensors `run`
returned, which every replay overwrites. `run` reads static input buffers the caller fills
before each replay, and must not synchronise with the host (no `.item()`, no reads back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class CapturedGraph[Outputs]:
    """A recorded computation and the output tensors each replay writes.

    Attributes:
        graph: The CUDA graph.
        outputs: What the recorded function returned (tensors the graph owns).
        device: The CUDA device it runs on.
    """

    graph: torch.cuda.CUDAGraph
    outputs: Outputs
    device: torch.device

    def replay(self) -> Outputs:
        """Run the graph (on its own device, whichever is current) and return its outputs."""
        with torch.cuda.device(self.device):
            self.graph.replay()
        return self.outputs


def capture[Outputs](
    run: Callable[[], Outputs], device: torch.device, pool: Any = None
) -> CapturedGraph[Outputs]:
    """Record `run` (working on `device`) as a CUDA graph after one warm-up run on a side stream.

    Args:
        run: The computation, on static inputs.
        device: Its CUDA device.
        pool: A memory pool shared with other graphs (`torch.cuda.graph_pool_handle()`) that
            are never replayed at the same time; None gives the graph a private pool.
    """
    with torch.cuda.device(device):
        side_stream = torch.cuda.Stream()
        side_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side_stream):
            run()
        torch.cuda.current_stream().wait_stream(side_stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs = run()
    return CapturedGraph(graph, outputs, torch.device(device))
