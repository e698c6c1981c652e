"""Normalisation statistics of `state` and `actions`, stored with every Stage 1 checkpoint.

Stage 1, Stage 2 and the feature model must normalise with the same numbers, so they travel
in the checkpoint folder as `norm_stats.json` (plain lists, readable and diffable).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

NORM_STATS_FILE = "norm_stats.json"
MIN_STD = 1e-3  # constant dimensions (e.g. an unused joint) would otherwise divide by zero


@dataclass
class NormStats:
    """Per-dimension mean and standard deviation of `state` and `actions`.

    Example:
        >>> stats = NormStats.from_arrays(np.zeros((5, 9)), np.ones((5, 8)))
        >>> stats.save(folder); NormStats.load(folder) == stats
        True
    """

    state_mean: list[float]
    state_std: list[float]
    action_mean: list[float]
    action_std: list[float]

    @classmethod
    def from_arrays(cls, states: np.ndarray, actions: np.ndarray) -> NormStats:
        """Statistics of (N, S) states and (N, A) actions; tiny deviations become MIN_STD."""
        return cls(
            state_mean=states.mean(0).tolist(),
            state_std=np.maximum(states.std(0), MIN_STD).tolist(),
            action_mean=actions.mean(0).tolist(),
            action_std=np.maximum(actions.std(0), MIN_STD).tolist(),
        )

    @classmethod
    def identity(cls, state_dim: int, action_dim: int) -> NormStats:
        """Mean 0, std 1: no normalisation (for tests and untrained models)."""
        return cls([0.0] * state_dim, [1.0] * state_dim, [0.0] * action_dim, [1.0] * action_dim)

    def check_dims(self, state_dim: int, action_dim: int) -> None:
        """Raise ValueError when the statistics do not match the model's dimensions."""
        if len(self.state_mean) != state_dim or len(self.action_mean) != action_dim:
            raise ValueError(
                f"norm stats have state dim {len(self.state_mean)} and action dim"
                f" {len(self.action_mean)}, the model expects {state_dim} and {action_dim}"
            )

    def tensors(self) -> dict[str, torch.Tensor]:
        """The four statistics as float32 tensors, keyed by field name."""
        return {
            key: torch.tensor(value, dtype=torch.float32) for key, value in asdict(self).items()
        }

    def save(self, folder: Path) -> None:
        """Write `norm_stats.json` into `folder`."""
        (Path(folder) / NORM_STATS_FILE).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, folder: Path) -> NormStats:
        """Read `norm_stats.json` from a checkpoint folder.

        Raises:
            FileNotFoundError: When the folder has no `norm_stats.json`.
        """
        path = Path(folder) / NORM_STATS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; a Stage 1 checkpoint folder has one")
        return cls(**json.loads(path.read_text()))
