"""Shared fixtures: real simulators, small images, a small real disk."""

import os
import subprocess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from a model hub in tests


@pytest.fixture
def small_disk(tmp_path):
    """Mount a tmpfs of `size_kb` KiB (needs root, as CI has); unmounted at the end of the test."""
    mounted = []

    def mount(size_kb):
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        command = ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(point)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.fail(f"this test mounts a tmpfs and needs root: {result.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "--lazy", str(point)], check=True)
