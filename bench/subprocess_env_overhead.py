"""Per-step cost of running an env out of process (SubprocessEnv) against the same env in process.

The env is tests/rpent_envs/subprocess_backend.py's CountingEnv (a seeded image and a 2-D
state, almost no work per step), so the difference is the transport: one request, one reply
with the image as raw bytes. Run:

    .venv/bin/python bench/subprocess_env_overhead.py --steps 300 [--python PATH]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from rpent_envs.subprocess_env import SubprocessEnv

BACKEND_FILE = (
    Path(__file__).resolve().parents[1] / "tests" / "rpent_envs" / "subprocess_backend.py"
)
SIZES = ((64, 64), (224, 224), (480, 640))


def step_times_ms(env, steps: int) -> list[float]:
    env.reset(seed=0)
    action = np.zeros(2, np.float32)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        env.step(action)
        times.append((time.perf_counter() - started) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--python", default=sys.executable, help="worker interpreter")
    args = parser.parse_args()
    sys.path.insert(0, str(BACKEND_FILE.parent))
    from subprocess_backend import CountingEnv

    for height, width in SIZES:
        local = step_times_ms(CountingEnv(height=height, width=width), args.steps)
        remote_env = SubprocessEnv(
            f"{BACKEND_FILE}:CountingEnv", {"height": height, "width": width}, python=args.python
        )
        try:
            remote = step_times_ms(remote_env, args.steps)
            runtime = remote_env.worker_runtime["python"]
        finally:
            remote_env.close()
        overhead = statistics.median(remote) - statistics.median(local)
        megabytes = height * width * 3 / 1e6
        print(
            f"{height}x{width}: in-process median {statistics.median(local):.3f} ms, "
            f"subprocess (Python {runtime}) median {statistics.median(remote):.3f} ms "
            f"p95 {np.percentile(remote, 95):.3f} ms, overhead {overhead:.3f} ms/step "
            f"({megabytes:.2f} MB image per step)"
        )


if __name__ == "__main__":
    main()
