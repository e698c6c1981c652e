"""Stable-Baselines3 SAC on RPent/PegInsertion-RLT-v0: the drop-in claim.

`gym.make("RPent/PegInsertion-RLT-v0")` is a plain Gymnasium env in drop-in mode: the VLA
reference drives until the AutoGate opens near the hole, then every step is one action chunk
of the agent, until the episode ends. SAC sees only the Dict(`z_rl`, `proprio`, `ref_chunk`)
observation and the flat (H*A,) chunk action, so `MultiInputPolicy` needs no RPent code.

    python examples/sb3_sac_peg_rlt.py --output-dir runs/sb3_sac --total-timesteps 20000

--output-dir gets `sac_peg_rlt.zip` (the model), `summary.json` (agent steps, episodes,
success rate of the last 100 episodes, wall time) and `tensorboard/` (SB3's scalars,
`rollout/success_rate` among them).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro
from stable_baselines3 import SAC

import rpent_envs
from rpent_agents.rollout.rlt_stack import PegRLTConfig


@dataclass
class Args:
    """SAC on RPent/PegInsertion-RLT-v0 (drop-in mode)."""

    output_dir: Path = Path("runs/sb3_sac_peg_rlt")
    """Folder of sac_peg_rlt.zip, summary.json and tensorboard/."""
    total_timesteps: int = 20_000
    """Agent steps (each one chunk of H env steps the agent drives)."""
    learning_starts: int = 1000
    """Agent steps with uniform random chunks before SAC's updates start."""
    batch_size: int = 512
    """SAC batch (as Stage 2's, for a like-for-like comparison)."""
    buffer_size: int = 100_000
    """SAC replay capacity in agent steps."""
    hidden_dim: int = 256
    """Width of SAC's 3 hidden layers, actor and each Q head (as Stage 2's)."""
    env: PegRLTConfig = dataclasses.field(default_factory=PegRLTConfig)
    """The peg RLT stack; --env.max-episode-chunks counts SAC's steps (drop-in mode)."""
    seed: int = 0
    """Seed of SAC and of the env's first reset."""
    device: str = "auto"
    """Torch device of SAC."""


def make_env(args: Args) -> gym.Env:
    """The registered env with the script's stack options."""
    return gym.make(rpent_envs.PEG_RLT_ID, **dataclasses.asdict(args.env))


def main(args: Args) -> dict:
    """Train SAC, save the model and a summary; returns the summary."""
    started_s = time.monotonic()
    env = make_env(args)
    model = SAC(
        "MultiInputPolicy",
        env,
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        buffer_size=args.buffer_size,
        policy_kwargs={"net_arch": [args.hidden_dim] * 3},
        tensorboard_log=str(args.output_dir / "tensorboard"),
        seed=args.seed,
        device=args.device,
    )
    model.learn(total_timesteps=args.total_timesteps, progress_bar=True)
    model.save(args.output_dir / "sac_peg_rlt.zip")
    env.close()
    successes = list(model.ep_success_buffer)
    summary = {
        "env_id": rpent_envs.PEG_RLT_ID,
        "agent_steps": model.num_timesteps,
        "episodes": model._episode_num,
        "success_rate_last_100": float(np.mean(successes)) if successes else None,
        "wall_time_s": time.monotonic() - started_s,
        "args": asdict(args),
    }
    (args.output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


if __name__ == "__main__":
    summary = main(tyro.cli(Args))
    print(json.dumps({key: value for key, value in summary.items() if key != "args"}))
