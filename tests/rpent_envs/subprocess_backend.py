"""A small deterministic env for SubprocessEnv tests, loaded by path inside a worker.

It must run under Python 3.11 with gymnasium 0.29 / numpy 1.26 as well as under RPent's own
interpreter, so it uses nothing newer. `reset(options={"fail": ...})` makes the worker fail on
purpose: "segfault" (SIGSEGV), "exit" (os._exit(3)), "hang" (sleeps), "raise" (a built-in
exception), "raise_custom" (an exception type only the worker knows).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import gymnasium as gym
import numpy as np


class BackendSpecificError(Exception):
    """An exception type that does not exist in the parent process."""


class CountingEnv(gym.Env):
    """Observation: a seeded image, a state that adds the actions; success after 3 steps."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, height=16, width=16, render_mode=None):
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (height, width, 3), np.uint8),
                "state": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.render_mode = render_mode
        self.task_description = "count to three"
        self.versions = {
            "python": sys.version.split()[0],
            "gymnasium": gym.__version__,
            "numpy": np.__version__,
        }
        self.unsendable = object()
        self._image = None
        self._state = np.zeros(2, np.float32)
        self._steps = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        fail = (options or {}).get("fail")
        print(f"reset seed={seed} fail={fail}", flush=True)
        if fail == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fail == "exit":
            os._exit(3)
        if fail == "hang":
            time.sleep(3600)
        if fail == "raise":
            raise FileNotFoundError("assets missing under /nowhere: download them first")
        if fail == "raise_custom":
            raise BackendSpecificError("only the worker knows this type")
        self._image = self.np_random.integers(0, 256, self.observation_space["image"].shape)
        self._image = self._image.astype(np.uint8)
        self._state = np.zeros(2, np.float32)
        self._steps = 0
        return self._obs(), {"task": self.task_description, "success": False, "is_success": False}

    def step(self, action):
        self._state = self._state + np.asarray(action, np.float32)
        self._steps += 1
        success = self._steps >= 3
        info = {
            "task": self.task_description,
            "success": success,
            "is_success": success,
            "action_received": np.asarray(action),
            "extras": {"count": self._steps, "flags": np.array([True, False]), "none": None},
        }
        return self._obs(), float(success), success, False, info

    def render(self):
        return self._image if self.render_mode == "rgb_array" else None

    def _obs(self):
        return {"image": self._image.copy(), "state": self._state.copy()}


def make_counting_env(**kwargs):
    """Factory by name, as `SubprocessEnv` gets it."""
    return CountingEnv(**kwargs)
