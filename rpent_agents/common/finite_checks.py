"""Refusing NaN and inf where values enter the RL-token stack.

One NaN in a replay batch turns the actor and critic into NaN, and every later chunk and
checkpoint with them, so each boundary refuses them with a `ValueError` that names where the
value sat: the key and index of an observation (`require_finite_observations`), an output of a
feature model (`require_finite_outputs`; `non_finite_output_error` for a path that finds the
entry itself), a tensor of a checkpoint (`require_finite_tensors`).
Only numpy and torch are imported (Stage 1 runs without gymnasium).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch


def first_non_finite(values: Any) -> tuple[int, ...] | None:
    """Index of the first NaN or inf entry of a float array or tensor; None when there is none.

    A tensor is checked where it lives (one small read back from its device).

    Example:
        >>> first_non_finite(np.array([[0.0, 1.0], [np.inf, 2.0]]))
        (1, 0)
    """
    if isinstance(values, torch.Tensor):
        if not values.is_floating_point():
            return None
        bad = torch.nonzero(~torch.isfinite(values.detach()))
        return tuple(bad[0].tolist()) if len(bad) else None
    array = np.asarray(values)
    if array.dtype.kind != "f":
        return None
    finite = np.isfinite(array)
    if finite.all():
        return None
    return tuple(int(axis) for axis in np.unravel_index(np.argmin(finite), array.shape))


def first_non_finite_entry(named_values: Mapping[str, Any]) -> tuple[str, list[int], float] | None:
    """The first NaN or inf among named arrays or tensors: (name, index, value), or None.

    Example:
        >>> first_non_finite_entry({"a": np.zeros(2), "b": np.array([1.0, np.nan])})
        ('b', [1], nan)
    """
    for name, values in named_values.items():
        index = first_non_finite(values)
        if index is not None:
            entry = values[index] if isinstance(values, torch.Tensor) else np.asarray(values)[index]
            return name, list(index), float(entry)
    return None


def require_finite_observations(observations: Sequence[Mapping[str, Any]]) -> None:
    """Refuse observations whose float entries (`state`, ...) hold NaN or inf.

    Raises:
        ValueError: Naming the observation's index in the batch, the key and the entry.
    """
    for index, observation in enumerate(observations):
        found = first_non_finite_entry(observation)
        if found is not None:
            key, entry, value = found
            raise ValueError(
                f"observation {index}: {key!r} holds {value} at {entry}; refused: a feature "
                "model featurizes finite values only (check the env's or the robot's readings)"
            )


def require_finite_outputs(outputs: Mapping[str, Any], source: str) -> None:
    """Refuse a feature model's batched outputs (first axis: the observation) holding NaN or inf.

    Args:
        outputs: The outputs by name (`z_rl`, `ref_chunk`, `prefix`), arrays or tensors.
        source: What computed them (e.g. the feature model's class), named in the message.

    Raises:
        ValueError: Naming the output and the observation's index.
    """
    found = first_non_finite_entry(outputs)
    if found is not None:
        name, entry, value = found
        raise non_finite_output_error(source, name, entry[0], value)


def non_finite_output_error(source: str, output: str, observation: int, value: float) -> ValueError:
    """The refusal of a feature model's output holding NaN or inf (`require_finite_outputs`).

    Args:
        source: What computed the output (e.g. the feature model's class).
        output: The output's name (`z_rl`, `ref_chunk`, `prefix`).
        observation: The index in the batch of the first observation whose output holds one.
        value: That observation's first non-finite entry.

    Example:
        >>> non_finite_output_error("the RL token", "z_rl", 2, float("nan")).args[0][:40]
        "the RL token output 'z_rl' of observatio"
    """
    return ValueError(
        f"{source} output {output!r} of observation {observation} holds {value}; refused: the "
        "feature model is broken (a damaged checkpoint, fp16 overflow): check its "
        "checkpoint and precision"
    )


def require_finite_tensors(
    tensors: Mapping[str, torch.Tensor],
    where: str,
    fix: str,
    error: type[ValueError] = ValueError,
) -> None:
    """Refuse a set of named tensors (a checkpoint's weights) when one holds NaN or inf.

    Args:
        tensors: The tensors by name (e.g. `actor.trunk.0.weight`).
        where: What holds them, named first in the message (a file, "saving ...").
        fix: What to do about it, ending the message.
        error: The exception class to raise.

    Raises:
        ValueError: (or `error`) Naming the tensor and its first non-finite entry.
    """
    found = first_non_finite_entry(tensors)
    if found is not None:
        name, entry, value = found
        raise error(f"{where}: tensor {name!r} holds {value} at {entry}; refused: {fix}")
