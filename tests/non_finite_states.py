"""Test fixture: an env whose `state` turns NaN at chosen steps and that does not check itself.

It stands for a simulator or a robot driver outside RPent (a blow-up, a sensor glitch) under
the RPent wrappers; the RPent envs check their own states (`rpent_envs.state_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rpent_agents.rollout.rlt_stack import PegRLTConfig


class NaNStateAt(gym.Wrapper):
    """Returns an all-NaN `state` at the given step numbers (counted over the env's life, from 1).

    Attributes:
        steps_taken: Steps taken so far.
        nan_steps_returned: How many NaN states it returned.
    """

    def __init__(self, env: gym.Env, nan_steps: tuple[int, ...]) -> None:
        super().__init__(env)
        self.nan_steps = set(nan_steps)
        self.steps_taken = 0
        self.nan_steps_returned = 0

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps_taken += 1
        if self.steps_taken in self.nan_steps:
            obs = {**obs, "state": np.full_like(obs["state"], np.nan)}
            self.nan_steps_returned += 1
        return obs, reward, terminated, truncated, info


@dataclass
class NaNStatePegConfig(PegRLTConfig):
    """The peg RLT stack whose peg env returns NaN states at `nan_steps` (a worker's config)."""

    nan_steps: tuple[int, ...] = ()

    def make_peg_env(self, **kwargs: Any) -> gym.Env:
        """The raw peg env under `NaNStateAt`."""
        return NaNStateAt(super().make_peg_env(**kwargs), self.nan_steps)
