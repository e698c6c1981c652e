"""Validation every in-process RPent env applies to an action before it reaches a simulator.

The out-of-process backends (`robocasa/backend.py`, `robotwin/backend.py`) run in other
interpreters that do not have this package, so they carry the same two checks themselves.
"""

from __future__ import annotations

import numpy as np


def checked_action(action: np.ndarray, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """`action` as an array of `dtype`, refused before it moves anything when it is malformed.

    Args:
        action: The action the caller sent.
        shape: The action space's shape.
        dtype: The dtype the simulator takes.

    Raises:
        ValueError: When the shape differs from `shape` or a value is NaN or inf.
    """
    action = np.asarray(action, dtype=dtype)
    if action.shape != shape:
        raise ValueError(f"action has shape {action.shape}; expected {shape}")
    if not np.all(np.isfinite(action)):
        raise ValueError(f"action contains NaN or inf: {action}; send finite values")
    return action
