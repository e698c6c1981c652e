"""Stage 2 (the RLT actor-critic) on the peg task: the library's training loop, configured.

The loop is `rpent_agents.stage2.trainer` (behind the `rpent-stage2` command line); a script
of your own sets the arguments in code (`rpent_agents.stage2.train_args`) and calls `train`.
Results land in --output-dir: results.json, success_curve.png, tensorboard/ and run/ (what
--resume continues).

    python examples/train_rlt_peg.py --output-dir runs/rlt_peg --num-envs 2 --total-env-steps 20000
"""

from __future__ import annotations

import logging

import tyro

from rpent_agents.stage2.train_args import Stage2TrainArgs
from rpent_agents.stage2.trainer import train

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    preset = Stage2TrainArgs.sample_efficient(total_env_steps=20_000)
    # Start from the preset, take any flag from the command line (e.g. --env.render-backend cpu).
    args = tyro.cli(Stage2TrainArgs, default=preset)
    results = train(args)
    print(f"base {results.base_success_rate:.2f} -> actor {results.final_success_rate:.2f}")
