"""`CompileCache` on CUDA: a process that loads its Triton kernels from the cache starts no
compile-worker processes (inductor's pool, one process per core, whose start-up competed with
a restarted feature server's first calls).

Each start is a new process (`python -c`): inductor's worker pool lives as long as the process.
Needs CUDA (`python -m pytest tests/rpent_agents/features/test_compile_cache_cuda.py`).
"""

import json
import subprocess
import sys

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.subprocess,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

# One process start: a two-kernel function on CUDA warmed up through the cache folder argv[1];
# prints the warm-up's source and how many child processes this process has right after it.
START = """
import json, os, sys
from pathlib import Path
import torch
from rpent_agents.features.compile_cache import CompileCache

def children():
    own, count = str(os.getpid()), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            count += stat.read_text().rsplit(")", 1)[1].split()[1] == own
        except OSError:  # a process that ended meanwhile
            pass
    return count

compiled = torch.compile(lambda x: (torch.sin(x) * 2 + 1).cumsum(0), dynamic=False)
inputs = torch.arange(4096.0, device="cuda")
warmup = CompileCache(Path(sys.argv[1]), {"model": "toy-cuda"}).warm_up(1, lambda: compiled(inputs))
torch.cuda.synchronize()
print(json.dumps({"source": warmup.source, "children": children()}))
"""


def start(cache_dir):
    result = subprocess.run(
        [sys.executable, "-c", START, str(cache_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_start_served_by_the_cache_starts_no_compile_workers(tmp_path):
    first = start(tmp_path)
    second = start(tmp_path)
    assert first["source"] == "compiled"
    assert first["children"] > 0  # a compile starts the workers: what the count would see
    assert second == {"source": "cache", "children": 0}
