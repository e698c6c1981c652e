"""Long recordings and exports keep resident memory flat (CI-sized; bench/long_run_memory.py
runs them at 10^6 recorded steps and 1000 exported tasks).

The resident set size (Linux /proc) is read at two checkpoints after a warm-up; keeping a
record per step (a few hundred bytes) would grow it by megabytes between them.
"""

import os
import threading
from pathlib import Path

import pytest
from conftest import Recorder

from recorders.flywheel import export_flywheel
from recorders.trajectory import TrajectoryWriter

pytestmark = pytest.mark.slow

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MIB = 2**20


def resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_BYTES


def record_tasks(writer, first, count, steps):
    for index in range(first, first + count):
        recorder = Recorder(writer, f"task-{index:04d}")
        recorder.vla(steps)
        recorder.finish(True)


def test_recording_keeps_memory_flat(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run", image_writer_threads=1)
    record_tasks(writer, 0, count=10, steps=50)  # warm-up
    before = resident_bytes()
    record_tasks(writer, 10, count=160, steps=50)  # 8000 steps
    grown = resident_bytes() - before
    writer.close()
    assert grown < 1 * MIB, f"RSS grew {grown / MIB:.2f} MiB over 8000 recorded steps"


class ResidentSampler(threading.Thread):
    """RSS every 50 ms until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stopped = [], threading.Event()

    def run(self):
        while not self.stopped.wait(0.05):
            self.samples.append(resident_bytes())

    def peak_in(self, start, stop):
        count = len(self.samples)
        return max(self.samples[int(start * count) : max(int(stop * count), 1)])


def test_exporting_many_tasks_keeps_memory_flat(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run", image_writer_threads=1)
    record_tasks(writer, 0, count=40, steps=30)
    writer.close()
    warm_up = tmp_path / "run" / "trajectories" / "task-0000"
    export_flywheel(warm_up, tmp_path / "warm_up", use_videos=False)  # LeRobot's first-use cost
    sampler = ResidentSampler()
    sampler.start()
    report = export_flywheel(tmp_path / "run", tmp_path / "export", use_videos=False)
    sampler.stopped.set()
    sampler.join()
    assert report.frames == 40 * 30 and len(sampler.samples) >= 10
    grown = sampler.peak_in(0.7, 1.0) - sampler.peak_in(0.1, 0.4)
    assert grown < 3 * MIB, f"RSS grew {grown / MIB:.2f} MiB from the first to the last tasks"
