"""What the scripted experts (peg, LIBERO) share: a motion step never longer than its limit."""

from __future__ import annotations

import numpy as np


def clip_norm(vector: np.ndarray, max_norm: float) -> np.ndarray:
    """`vector` scaled down to length `max_norm` when it is longer, else unchanged.

    Example:
        >>> clip_norm(np.array([3.0, 4.0]), 1.0)
        array([0.6, 0.8])
    """
    norm = float(np.linalg.norm(vector))
    return vector if norm <= max_norm else vector * (max_norm / norm)
