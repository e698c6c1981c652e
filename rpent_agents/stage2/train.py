"""`rpent-stage2`: Stage 2 training on the peg RLT stack, from a preset and any flag after it.

The arguments and their presets are `rpent_agents.stage2.train_args`'s (`PRESETS`), the run
and its loop `trainer`'s (`train`, `Stage2Run`), its folder `run_folder`'s.

    rpent-stage2 reference --output-dir runs/rlt_peg
    rpent-stage2 sample-efficient --output-dir runs/rlt_fast --env.render-backend gpu
    rpent-stage2 sample-efficient --output-dir runs/rlt_fast --resume --max-minutes 9
    rpent-stage2 sample-efficient --rollout ray --ray-address auto --num-workers 64

`--rollout vector` (default) runs `--num-envs` worker processes on this machine; `--rollout ray`
runs `--num-workers` Ray actors of `--envs-per-worker` envs each on a Ray cluster (docs/ray.md).

--output-dir gets results.json (base success, eval curve, env steps, wall time),
success_curve.png, tensorboard/ and run/ (the checkpoint `--resume` continues from); the
results, the plot and the checkpoint are rewritten after every evaluation. The results are
saved inside run/ too, with the learner as one set, so a run killed at any moment resumes
with results that match its learner (results.json next to run/ is the copy to read).
"""

from __future__ import annotations

import tyro

from rpent_agents.common.cli import command
from rpent_agents.stage2.train_args import PRESETS
from rpent_agents.stage2.trainer import train


def main() -> None:
    """Entry point of `rpent-stage2`: a preset, then any flag to override it."""
    with command("rpent-stage2"):
        results = train(tyro.extras.overridable_config_cli(PRESETS))
        print(
            f"base {results.base_success_rate:.3f} -> actor {results.final_success_rate:.3f} "
            f"({results.gain_points:+.1f} points) after {results.env_steps} env steps, "
            f"{results.wall_time_s / 60:.1f} min; {results.stop_reason}"
        )
        parts = ", ".join(f"{part} {s:.0f}" for part, s in results.wall_time_parts_s.items())
        print(f"wall time by part (s): {parts}")


if __name__ == "__main__":
    main()
