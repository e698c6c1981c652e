"""Write a run's trained actor as a weights file (its weights.pt holds the acting actor).

With `--stage2.acting-actor-tau` a run evaluates and saves the Polyak average of its actor;
this writes the actor it trained beside it, so both can be evaluated on the same seeds
(`rpent-eval-rlt --stage2-run FILE`). Without averaging the two files hold the same actor.

    python3 bench/device/trained_actor_weights.py RUN_FOLDER/run OUT/trained_weights.pt
"""

import sys
from pathlib import Path

import torch

from rpent_agents.stage2.checkpoint import STATE_FILE, WEIGHTS_FILE


def main(run_folder: Path, output: Path) -> None:
    """Copy `run_folder`'s weights file with the trained actor in place of the acting one."""
    weights = torch.load(run_folder / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    state = torch.load(run_folder / STATE_FILE, map_location="cpu", weights_only=True)
    weights["actor"] = state["actor"]
    torch.save(weights, output)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
