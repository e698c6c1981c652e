"""Replay buffer of RLT chunk transitions, sampled from a recent window, saved as `.npz`.

A transition is one executed chunk: the RLT observation it was decided from, the H actions that
ran, their per-step rewards, the next observation, whether the episode ended, and which steps a
human or expert drove. `rpent_agents.stage2.transitions` builds them from env infos. A
transition holding NaN or inf is refused (logged and counted in `refused_non_finite`): one in
a batch would turn the networks into NaN.

Memory: the storage is allocated at its capacity up front (its pages are touched as it fills)
and a full buffer turns over in place, so resident memory stops growing at capacity however
long the run (test_stage2_replay.py; bench/long_run_memory.py replay). `save` copies the
stored transitions once more for the file while it writes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from rpent_agents.common.finite_checks import first_non_finite_entry
from rpent_agents.stage2.networks import RLTDims, RLTObs

logger = logging.getLogger(__name__)


@dataclass
class RLTTransition:
    """One stored chunk (numpy arrays, one transition).

    Attributes:
        z_rl: (D,) RL token the chunk was decided from.
        proprio: (P,) proprioception then.
        ref_chunk: (H_ref, A) reference chunk then (see `reference_on_interventions`).
        action: (H, A) executed actions (the last one repeated after an early episode end).
        rewards: (H,) per-step rewards (zero after an early episode end).
        next_z_rl: (D,) RL token after the chunk.
        next_proprio: (P,) proprioception after the chunk.
        next_ref_chunk: (H_ref, A) reference chunk after the chunk.
        done: The episode ended inside the chunk (no bootstrap with bootstrap_type standard).
        intervened: (H,) bool, steps a human or expert drove.
    """

    z_rl: np.ndarray
    proprio: np.ndarray
    ref_chunk: np.ndarray
    action: np.ndarray
    rewards: np.ndarray
    next_z_rl: np.ndarray
    next_proprio: np.ndarray
    next_ref_chunk: np.ndarray
    done: bool
    intervened: np.ndarray


@dataclass
class RLTBatch:
    """A sampled batch of transitions as tensors (B leading)."""

    obs: RLTObs
    action: torch.Tensor
    rewards: torch.Tensor
    next_obs: RLTObs
    done: torch.Tensor
    intervened: torch.Tensor

    def to(self, device: torch.device) -> RLTBatch:
        """The same batch on `device` (no copy when it is there already)."""
        return RLTBatch(
            obs=self.obs.to(device),
            action=self.action.to(device),
            rewards=self.rewards.to(device),
            next_obs=self.next_obs.to(device),
            done=self.done.to(device),
            intervened=self.intervened.to(device),
        )

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the batch, in a fixed order."""
        observations = (self.obs, self.next_obs)
        obs_tensors = [t for obs in observations for t in (obs.z_rl, obs.proprio, obs.ref_chunk)]
        return obs_tensors + [self.action, self.rewards, self.done, self.intervened]

    def copy_(self, source: RLTBatch) -> None:
        """Overwrite this batch's tensors in place with `source`'s (same shapes)."""
        torch._foreach_copy_(self.tensors(), source.tensors())


TRANSITION_FIELDS = tuple(field.name for field in fields(RLTTransition))


@dataclass
class ReplayRows:
    """Transitions checked and copied to the buffer's device, to be written into their slots.

    Attributes:
        slots: (N,) the slot of each row.
        values: Each field's (N, ...) rows, by name (empty when nothing was accepted).
        count: Transitions accepted (more than N when more than the capacity came at once).
    """

    slots: torch.Tensor
    values: dict[str, torch.Tensor]
    count: int

    def record_stream(self, stream: torch.cuda.Stream) -> None:
        """Keep the rows' memory from reuse until `stream`'s work queued so far has run."""
        for tensor in (self.slots, *self.values.values()):
            tensor.record_stream(stream)


def _field_shapes(dims: RLTDims, chunk_len: int) -> dict[str, tuple[int, ...]]:
    ref_shape = (dims.ref_chunk_len, dims.action_dim)
    return {
        "z_rl": (dims.z_dim,),
        "proprio": (dims.proprio_dim,),
        "ref_chunk": ref_shape,
        "action": (chunk_len, dims.action_dim),
        "rewards": (chunk_len,),
        "next_z_rl": (dims.z_dim,),
        "next_proprio": (dims.proprio_dim,),
        "next_ref_chunk": ref_shape,
        "done": (),
        "intervened": (chunk_len,),
    }


def _field_dtype(name: str) -> torch.dtype:
    return {"done": torch.float32, "intervened": torch.bool}.get(name, torch.float32)


class ReplayBuffer:
    """Ring buffer of `RLTTransition`s; batches come from the most recent `sample_window`.

    Example:
        >>> buffer = ReplayBuffer(RLTDims(4, 2, 3, 2), chunk_len=3, capacity=100)
        >>> len(buffer), buffer.total_added
        (0, 0)
    """

    def __init__(
        self,
        dims: RLTDims,
        chunk_len: int,
        capacity: int,
        sample_window: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.dims = dims
        self.chunk_len = chunk_len
        self.capacity = capacity
        self.sample_window = sample_window or capacity
        self.device = torch.device(device)
        self.shapes = _field_shapes(dims, chunk_len)
        self.storage = {
            name: torch.zeros((capacity, *shape), dtype=_field_dtype(name), device=self.device)
            for name, shape in self.shapes.items()
        }
        self.next_index = 0
        self.size = 0
        self.total_added = 0
        self.refused_non_finite = 0
        self.intervened_host = np.zeros(capacity, bool)
        """Which slots hold a transition with an intervened step (host copy for sampling)."""
        self._intervened_cache: tuple[tuple[int, int], torch.Tensor] | None = None

    def __len__(self) -> int:
        return self.size

    def add(self, transition: RLTTransition) -> bool:
        """Store one transition, overwriting the oldest when full.

        Returns:
            Whether it was stored: one holding NaN or inf is refused and counted instead.

        Raises:
            ValueError: When a field's shape does not match the buffer's dims (nothing stored).
        """
        return self.add_many([transition]) == 1

    def add_many(self, transitions: Sequence[RLTTransition]) -> int:
        """Store transitions in order (as `add` one by one), with one copy per field.

        Returns:
            How many were stored: those holding NaN or inf are refused and counted instead.

        Raises:
            ValueError: When a field's shape does not match the buffer's dims (nothing stored).
        """
        rows = self.rows_to_write(transitions)
        self.write_rows(rows)
        return rows.count

    def rows_to_write(self, transitions: Sequence[RLTTransition]) -> ReplayRows:
        """Check transitions, claim their slots and copy them to the device; `write_rows` stores.

        The buffer counts them at once (its length, `total_added`, the slots' intervened flags),
        so batches sampled after this call may draw the slots: write the rows before any such
        batch is read (on its CUDA stream, or on one that it waits for).

        Raises:
            ValueError: When a field's shape does not match the buffer's dims (nothing claimed).
        """
        rows = [self._checked_values(transition) for transition in transitions]
        accepted = [values for values in rows if self._finite_or_counted(values)]
        if not accepted:
            return ReplayRows(torch.zeros(0, dtype=torch.long, device=self.device), {}, 0)
        slots = (self.next_index + np.arange(len(accepted))) % self.capacity
        kept = slice(-min(len(accepted), self.capacity), None)  # the newest, when more than fit
        values = {
            name: torch.as_tensor(
                np.stack([row[name] for row in accepted[kept]]), dtype=_field_dtype(name)
            ).to(self.device)
            for name in TRANSITION_FIELDS
        }
        self.intervened_host[slots[kept]] = [row["intervened"].any() for row in accepted[kept]]
        self.next_index = int(slots[-1] + 1) % self.capacity
        self.size = min(self.size + len(accepted), self.capacity)
        self.total_added += len(accepted)
        slot_index = torch.as_tensor(slots[kept], device=self.device)
        return ReplayRows(slot_index, values, len(accepted))

    def write_rows(self, rows: ReplayRows) -> None:
        """Write rows from `rows_to_write` into their slots (on the current CUDA stream)."""
        for name, value in rows.values.items():
            self.storage[name][rows.slots] = value

    def _checked_values(self, transition: RLTTransition) -> dict[str, np.ndarray]:
        values = {name: np.asarray(getattr(transition, name)) for name in TRANSITION_FIELDS}
        for name, value in values.items():
            if value.shape != self.shapes[name]:
                raise ValueError(
                    f"RLTTransition.{name} has shape {value.shape}; this buffer stores "
                    f"{self.shapes[name]} (dims {self.dims}, chunk_len {self.chunk_len})"
                )
        return values

    def _finite_or_counted(self, values: dict[str, np.ndarray]) -> bool:
        non_finite = first_non_finite_entry(values)
        if non_finite is None:
            return True
        self.refused_non_finite += 1
        logger.warning("replay: refused a transition whose %s holds %s at %s", *non_finite)
        return False

    def sample(
        self,
        batch_size: int,
        generator: torch.Generator | None = None,
        intervention_share: float = 0.0,
    ) -> RLTBatch:
        """Draw `batch_size` transitions from the most recent `sample_window` ones.

        Args:
            batch_size: Transitions in the batch.
            generator: Random source of the draw.
            intervention_share: Share of the batch drawn uniformly from the window's
                transitions with an intervened step (none stored: all uniform); the rest is
                drawn uniformly from the whole window.

        Raises:
            RuntimeError: When the buffer is empty.
        """
        return self.sample_batches(1, batch_size, generator, intervention_share)[0]

    def sample_batches(
        self,
        num_batches: int,
        batch_size: int,
        generator: torch.Generator | None = None,
        intervention_share: float = 0.0,
    ) -> list[RLTBatch]:
        """Draw `num_batches` independent batches as `sample` does, with one gather per field.

        A learner's train step draws all its batches at once: a few device launches for the
        step instead of a dozen per update. The batches are views of one gathered tensor per
        field. Args and errors as `sample`'s.
        """
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer; add transitions first")
        window = min(self.size, self.sample_window)
        shape = (num_batches, batch_size)
        age = torch.randint(window, shape, device=self.device, generator=generator)
        indices = (self.next_index - 1 - age) % self.capacity
        from_interventions = int(round(intervention_share * batch_size))
        if from_interventions > 0:
            indices = self._with_interventions(indices, window, from_interventions, generator)
        picked = {name: values[indices].unbind() for name, values in self.storage.items()}
        return [
            RLTBatch(
                obs=RLTObs(picked["z_rl"][i], picked["proprio"][i], picked["ref_chunk"][i]),
                action=picked["action"][i],
                rewards=picked["rewards"][i],
                next_obs=RLTObs(
                    picked["next_z_rl"][i], picked["next_proprio"][i], picked["next_ref_chunk"][i]
                ),
                done=picked["done"][i],
                intervened=picked["intervened"][i],
            )
            for i in range(num_batches)
        ]

    def _with_interventions(
        self,
        indices: torch.Tensor,
        window: int,
        count: int,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """(N, B) `indices` with the first `count` of each row drawn among intervened ones."""
        intervened = self._intervened_slots(window)
        if len(intervened) == 0:
            return indices
        picks = torch.randint(
            len(intervened), (len(indices), count), device=self.device, generator=generator
        )
        return torch.cat([intervened[picks], indices[:, count:]], dim=1)

    def _intervened_slots(self, window: int) -> torch.Tensor:
        """Slots of the window's intervened transitions, on the device.

        Built on the host once per change of the buffer (adds come between train steps), so
        drawing a batch reads nothing back from the device.
        """
        key = (self.total_added, window)
        if self._intervened_cache is None or self._intervened_cache[0] != key:
            window_slots = (self.next_index - 1 - np.arange(window)) % self.capacity
            slots = window_slots[self.intervened_host[window_slots]]
            # Non-blocking: pageable host memory is staged at once, with no wait for the GPU.
            slots_tensor = torch.as_tensor(slots).to(self.device, non_blocking=True)
            self._intervened_cache = (key, slots_tensor)
        return self._intervened_cache[1]

    def rewarded_share(self) -> float:
        """Share of the stored transitions whose chunk earned any reward."""
        rewards = self.storage["rewards"][: self.size]
        return float((rewards.sum(dim=-1) > 0).float().mean())

    def _chronological_indices(self) -> torch.Tensor:
        oldest = (self.next_index - self.size) % self.capacity
        return (oldest + torch.arange(self.size, device=self.device)) % self.capacity

    def save(self, path: Path) -> None:
        """Write the stored transitions (oldest first) and counters to an `.npz` file.

        The file is written next to `path` and renamed into place, so an interrupted save
        leaves any previous file intact.
        """
        path = Path(path)
        order = self._chronological_indices()
        arrays = {name: values[order].cpu().numpy() for name, values in self.storage.items()}
        dims = self.dims
        arrays["dims"] = np.array(
            [dims.z_dim, dims.proprio_dim, dims.ref_chunk_len, dims.action_dim, self.chunk_len]
        )
        arrays["total_added"] = np.array(self.total_added)
        arrays["refused_non_finite"] = np.array(self.refused_non_finite)
        partial = path.with_name(path.name + ".partial.npz")
        np.savez(partial, **arrays)
        os.replace(partial, path)

    def load(self, path: Path) -> None:
        """Replace the contents with a file written by `save` (the newest ones if it is larger).

        Raises:
            ValueError: When the file's dims or chunk length differ from this buffer's.
        """
        with np.load(Path(path)) as data:
            stored = tuple(int(value) for value in data["dims"])
            expected = (*(getattr(self.dims, f.name) for f in fields(RLTDims)), self.chunk_len)
            if stored != expected:
                raise ValueError(
                    f"{path}: replay dims (z, proprio, ref_len, action, chunk_len) {stored} "
                    f"differ from this learner's {expected}; load it into a matching learner"
                )
            count = min(len(data["done"]), self.capacity)
            for name in TRANSITION_FIELDS:
                newest = torch.as_tensor(data[name][len(data[name]) - count :])
                self.storage[name][:count] = newest.to(self.device, _field_dtype(name))
            self.size, self.next_index = count, count % self.capacity
            self.total_added = int(data["total_added"])
            self.refused_non_finite = int(data.get("refused_non_finite", 0))
            self.intervened_host[:] = False
            newest_intervened = data["intervened"][len(data["intervened"]) - count :]
            self.intervened_host[:count] = np.asarray(newest_intervened).any(axis=-1)
            self._intervened_cache = None
