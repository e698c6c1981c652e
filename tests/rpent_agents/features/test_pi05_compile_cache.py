"""The fast path's compile cache across real process starts (`features.compile_cache`).

Two processes run `pi05_cache_child.py` one after the other on the same cache folder: the first
compiles bucket 1 of the toy pi0.5, the second must be served from the cache, in well under
half the time, and both must equal eager. (Damaged caches: test_compile_cache.py.)
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pi05_toy import write_toy_folders

from rpent_agents.features.compile_cache import cached_models

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

CHILD = Path(__file__).with_name("pi05_cache_child.py")


def start_process(toy_root, cache_dir, out):
    """One child process start; returns its report."""
    command = [sys.executable, str(CHILD), str(toy_root), str(cache_dir), str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out)


def assert_equals_eager(report):
    eager, fast = report["outputs"]["eager"], report["outputs"]["fast"]
    for name in ("prefix_tokens", "ref_chunk"):
        torch.testing.assert_close(fast[name], eager[name], rtol=1e-4, atol=1e-5)
    # The prefix pass and the Euler step, each compiled once: the warm-up's blank batch
    # compiled what real ones replay, and the step's ten calls share one graph.
    assert report["graphs"] == 2


def test_second_start_is_served_from_the_compile_cache(tmp_path):
    toy, cache = write_toy_folders(tmp_path / "toy"), tmp_path / "cache"
    first, second = (start_process(toy, cache, tmp_path / f"start{i}.pt") for i in (1, 2))
    assert first["warmup"]["source"] == "compiled"
    assert first["warmup"]["first_compile_s"] == first["warmup"]["seconds"]
    assert second["warmup"]["source"] == "cache"
    assert second["warmup"]["first_compile_s"] == pytest.approx(first["warmup"]["seconds"], 1e-3)
    assert second["warmup"]["seconds"] < 0.5 * first["warmup"]["seconds"]
    assert_equals_eager(first)
    assert_equals_eager(second)
    assert len(cached_models(cache)) == 1
