"""The Stage 2 learner: the algorithm's updates on replayed batches, on the device's schedule.

`Stage2Learner` adds to `stage2.algorithm`'s networks and update (checked against
docs/design.md §4) the replay buffer, the `UpdateSchedule` that says how many updates the data
collected so far has earned (`train_step` runs them) with each update's actor-loss weights,
and the device choreography below; no loss and no step of the update.

The update loop keeps every value on the device, so a GPU is not stalled by per-update host
reads: `run_updates` and `train_step` synchronise once, when they return their scalars, and
`start_train_step` not at all (its `TrainStepScalars` wait for the updates when read; the
training loop reads them after the workers' chunks, so the CPU waits for the workers while the
GPU runs the updates). A train step draws its batches `BATCHES_PER_DRAW` at once. On a CUDA
device each update is replayed as a captured CUDA graph (`Stage2Config.cuda_graphs`): one graph
per update kind (with or without the actor step and the target update), fed through a static
batch and static loss weights, captured in a thread that ran the kind eagerly before (a
thread's first matrix product creates its cuBLAS handle, which a capture cannot). With
`Stage2Config.update_stream` the updates are queued on a CUDA stream of their own, so the
process's other GPU work (featurizing the workers' observations) need not queue behind them
(within `ahead_of_updates` that work also runs at a higher stream priority); every method that
reads or writes what the updates use (acting, storing, scalars, saving) first makes the current
stream wait for them (`wait_for_updates`).
With `Stage2Config.act_during_updates` training acts on copies of the actor and critic taken
before each train step's updates, and stored transitions are written on the update stream
after them, so the training loop's acting and storing wait for no update.

Optimizer steps skipped for a non-finite loss or gradient are read back as the scalars
`train/rlt/skipped_critic_steps` and `train/rlt/skipped_actor_steps`; the replay buffer refuses
non-finite transitions (`train/replay_buffer/refused_non_finite`).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch

from rpent_agents.common.devices import resolve_device
from rpent_agents.stage2.acting import act_chunks
from rpent_agents.stage2.algorithm import (
    ACTOR_SCALARS,
    Stage2Algorithm,
    UpdateKind,
    actor_updates_between,
    first_head_q_values,
)
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.replay import ReplayBuffer, RLTBatch, RLTTransition
from rpent_agents.stage2.schedules import UpdateSchedule, actor_loss_weights

# CUDA stream priorities: lower is higher; the default stream's is 0, the lowest.
ROLLOUT_STREAM_PRIORITY = -1
# Batches drawn from the replay at once (one gather per field): a train step's updates, up to
# this many (bounds the drawn memory: ~0.3 GB at pi0.5's RL token size and batch 512).
BATCHES_PER_DRAW = 32


class TrainStepScalars(NamedTuple):
    """A train step's scalars: device tensors, read (which waits for its updates) on demand.

    Attributes:
        device_values: Scalar tensors on the learner's device, by name.
        host_values: Scalars already on the host, by name.
        updates_done: Recorded on the update stream after the step's updates
            (`Stage2Config.update_stream`); None when they ran on the current stream.
    """

    device_values: dict[str, torch.Tensor]
    host_values: dict[str, float]
    updates_done: torch.cuda.Event | None = None

    def read(self) -> dict[str, float]:
        """All scalars as floats (one device read)."""
        if self.updates_done is not None:
            self.updates_done.wait()  # the current stream reads after the updates
        return read_scalars(self.device_values) | self.host_values


def read_scalars(values: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Scalar tensors as floats, by name, with one device read."""
    if not values:
        return {}
    return dict(zip(values, torch.stack(list(values.values())).tolist(), strict=True))


class CapturedUpdate(NamedTuple):
    """A CUDA graph of one update kind and the device tensors its scalars land in."""

    graph: torch.cuda.CUDAGraph
    scalars: dict[str, torch.Tensor]


def _update_and_rollout_streams(
    config: Stage2Config, device: torch.device
) -> tuple[torch.cuda.Stream | None, torch.cuda.Stream | None]:
    """The updates' stream (`Stage2Config.update_stream`, on CUDA) and the rollout stream.

    The rollout stream runs the loop's featurizing and acting beside the updates
    (`ahead_of_updates`): one stream for the learner's life, so the memory its work allocates
    stays cached for it. Both are None without an update stream.
    """
    if not (config.update_stream and device.type == "cuda"):
        return None, None
    return torch.cuda.Stream(device), torch.cuda.Stream(device, priority=ROLLOUT_STREAM_PRIORITY)


class Stage2Learner(Stage2Algorithm):
    """The algorithm's networks and update, with the replay buffer, schedule and device streams.

    Example:
        >>> learner = Stage2Learner(Stage2Config(device="cpu"), RLTDims(16, 9, 10, 8))
        >>> obs = {"z_rl": np.zeros((2, 16)), "proprio": np.zeros((2, 9)),
        ...        "ref_chunk": np.zeros((2, 10, 8))}
        >>> learner.act(obs, deterministic=True).shape
        (2, 80)
    """

    def __init__(
        self, config: Stage2Config, dims: RLTDims, device: str | torch.device | None = None
    ) -> None:
        device = resolve_device(device if device is not None else config.device)
        self.use_cuda_graphs = config.cuda_graphs and device.type == "cuda"
        super().__init__(config, dims, device, capturable=self.use_cuda_graphs)
        # Training's acting copies (`act_during_updates`), refreshed before each train step's
        # updates; `behaviour_copied` marks the refresh on the update stream.
        self.behaviour_actor, self.behaviour_critic = (
            (
                copy.deepcopy(self.actor).requires_grad_(False),
                copy.deepcopy(self.critic).requires_grad_(False),
            )
            if config.act_during_updates
            else (None, None)
        )
        self.behaviour_copied: torch.cuda.Event | None = None
        self.update_stream, self.rollout_stream = _update_and_rollout_streams(config, self.device)
        replay_device = self.device if config.replay_on_device else torch.device("cpu")
        self.replay = ReplayBuffer(
            dims, config.chunk_len, config.replay_capacity, config.sample_window, replay_device
        )
        self.sample_generator = torch.Generator(device=replay_device).manual_seed(config.seed)
        self.schedule = UpdateSchedule(config)
        self.update_step = 0
        self.captured_updates: dict[UpdateKind, CapturedUpdate] = {}
        # (thread ident, kind) of the update kinds each thread has run eagerly.
        self.eager_in_thread: set[tuple[int, UpdateKind]] = set()
        self.static_batch: RLTBatch | None = None
        # (bc_weight, q_weight) of the update being replayed, read by the captured actor step.
        self.static_loss_weights = torch.zeros(2, device=self.device)

    @property
    def ready_for_online(self) -> bool:
        """Whether the actor may drive the robot (rlt_schedule warmup done)."""
        return self.schedule.ready_for_online(self.update_step)

    @torch.no_grad()
    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        """Flat action chunks (B, H*A) for batched observations (the RLT env's action space).

        Args:
            obs: Batched RLT observations (`z_rl` (B, D), `proprio` (B, P), `ref_chunk`).
            deterministic: Use the mean (evaluation) instead of adding the fixed noise.
        """
        if not deterministic and self.behaviour_actor is not None:
            self._wait_for_behaviour_copy()
            ranking = self.q_ranking(self.behaviour_critic, deterministic=False)
            return act_chunks(self.behaviour_actor, obs, False, self.noise_generator, ranking)
        self.wait_for_updates()
        return super().act(obs, deterministic)

    @torch.no_grad()
    def q_values(self, transitions: Sequence[RLTTransition | None]) -> list[float | None]:
        """Q (first head) of each transition's observation and executed chunk (diagnostics).

        One critic call and one device read for all of them; None where a transition is None
        (not stored). With `act_during_updates` the critic is the copy taken before the latest
        train step's updates.
        """
        stored = [transition for transition in transitions if transition is not None]
        if not stored:
            return [None] * len(transitions)
        critic = self.critic
        if self.behaviour_critic is None:
            self.wait_for_updates()
        else:
            self._wait_for_behaviour_copy()
            critic = self.behaviour_critic
        q_first_head = iter(first_head_q_values(critic, stored, self.device))
        return [None if transition is None else next(q_first_head) for transition in transitions]

    def replay_scalars(self) -> dict[str, float]:
        """Transitions refused as non-finite, and the share of stored ones with a reward."""
        refused = {"train/replay_buffer/refused_non_finite": float(self.replay.refused_non_finite)}
        if len(self.replay) == 0:
            return refused
        self.wait_for_updates()
        return refused | {"diag/replay_rewarded_share": self.replay.rewarded_share()}

    def skipped_step_scalars(self) -> dict[str, float]:
        """Optimizer steps skipped so far for a non-finite loss or gradient, per network."""
        self.wait_for_updates()
        return read_scalars(self._skipped_step_counts())

    def add_transitions(self, transitions: Iterable[RLTTransition | None]) -> int:
        """Store the given transitions (None and non-finite ones are not); returns how many.

        The queued updates draw their batches from the slots first: the current stream waits
        for them, or with `act_during_updates` the slots are written on the update stream.
        """
        stored = [item for item in transitions if item is not None]
        if not self.config.act_during_updates:
            self.wait_for_updates()
            return self.replay.add_many(stored)
        rows = self.replay.rows_to_write(stored)  # copied to the device on the current stream
        with self._on_update_stream():
            if self.update_stream is not None:
                rows.record_stream(self.update_stream)
            self.replay.write_rows(rows)
        return rows.count

    def _wait_for_behaviour_copy(self) -> None:
        """Make the current stream wait for the latest refresh of the acting copies."""
        if self.behaviour_copied is not None:
            torch.cuda.current_stream(self.device).wait_event(self.behaviour_copied)

    @torch.no_grad()
    def refresh_behaviour_networks(self) -> None:
        """Copy the actor and critic into training's acting copies (`act_during_updates`).

        Runs before each train step's updates, on their stream; call it after loading weights
        into the actor or critic yourself (`load_weights` does).
        """
        if self.behaviour_actor is None or self.behaviour_critic is None:
            return
        for behaviour, online in ((self.behaviour_actor, self.actor),
                                  (self.behaviour_critic, self.critic)):  # fmt: skip
            torch._foreach_copy_(list(behaviour.parameters()), list(online.parameters()))
        if self.update_stream is not None:
            self.behaviour_copied = torch.cuda.Event()
            self.behaviour_copied.record()

    def wait_for_updates(self) -> None:
        """Make the current stream's later work wait for the updates queued so far.

        Only the device waits; the host goes on. A no-op unless the updates have a stream of
        their own (`Stage2Config.update_stream`).
        """
        if self.update_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.update_stream)

    @contextlib.contextmanager
    def ahead_of_updates(self) -> Iterator[None]:
        """Run the enclosed GPU work on a stream of higher priority than the update stream.

        The training loop's featurizing and acting then go before queued updates wherever the
        GPU has to choose. A no-op unless the updates have a stream of their own
        (`Stage2Config.update_stream`); the work before and after the block is ordered with
        the enclosed work as on one stream.
        """
        if self.rollout_stream is None:
            yield
            return
        outer = torch.cuda.current_stream(self.device)
        self.rollout_stream.wait_stream(outer)
        with torch.cuda.stream(self.rollout_stream):
            yield
        outer.wait_stream(self.rollout_stream)

    @contextlib.contextmanager
    def _on_update_stream(self) -> Iterator[torch.cuda.Event | None]:
        """Queue the enclosed work on the update stream, after the current stream's work.

        Yields:
            None without an update stream; else an event recorded once the enclosed work is
            queued, on exit (it completes when that work has run).
        """
        if self.update_stream is None:
            yield None
            return
        done = torch.cuda.Event()
        self.update_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.update_stream):
            yield done
            done.record()

    def train_step(self) -> dict[str, float]:
        """Run the updates the schedule allows now; returns the train-step scalars."""
        return self.start_train_step().read()

    def start_train_step(self) -> TrainStepScalars:
        """Queue the updates the schedule allows now, reading nothing back from the device.

        On a GPU the call returns once the updates are launched; reading the returned scalars
        waits for them, as acting does (and featurizing, unless the updates have a stream of
        their own: `Stage2Config.update_stream`).
        """
        planned = self.schedule.plan(self.update_step, self.replay.total_added)
        first_update = self.update_step
        with self._on_update_stream() as updates_done:
            device_values = self._update_means(planned) | self._skipped_step_counts()
        self.schedule.record_updates(planned)
        ratio = self.config.critic_actor_ratio
        host_values = {
            "train/replay_buffer/size": float(len(self.replay)),
            "train/rlt/ready_for_online": float(self.ready_for_online),
            "train/rlt/critic_updates_run": float(planned),
            "train/rlt/actor_updates_run": float(
                actor_updates_between(first_update, self.update_step, ratio)
            ),
            "train/rlt/pending_update_budget": float(self.schedule.pending_update_budget),
        }
        return TrainStepScalars(device_values, host_values, updates_done)

    def run_updates(self, num_updates: int) -> dict[str, float]:
        """Run `num_updates` updates on batches from the replay buffer.

        Returns:
            The mean of each critic scalar over all updates and of each actor scalar over the
            updates that stepped the actor (names as in the reference guide); empty when no
            update ran.
        """
        with self._on_update_stream():
            means = self._update_means(num_updates)
        self.wait_for_updates()
        return read_scalars(means)

    def _update_means(self, num_updates: int) -> dict[str, torch.Tensor]:
        """Run `num_updates` updates; the means of `run_updates`, still on the device."""
        self.refresh_behaviour_networks()
        sums: dict[str, torch.Tensor] = {}
        first_update = self.update_step
        for first in range(0, num_updates, BATCHES_PER_DRAW):
            batches = self.replay.sample_batches(
                min(BATCHES_PER_DRAW, num_updates - first),
                self.config.batch_size,
                self.sample_generator,
                intervention_share=self.config.intervention_batch_share,
            )
            for batch in batches:
                scalars = self.update(batch.to(self.device))
                for name, value in scalars.items():
                    if name not in sums:
                        sums[name] = torch.zeros_like(value)
                # In place: a captured update overwrites its scalars at its next replay.
                torch._foreach_add_([sums[name] for name in scalars], list(scalars.values()))
        ratio = self.config.critic_actor_ratio
        actor_updates = actor_updates_between(first_update, self.update_step, ratio)
        return {
            name: total / (actor_updates if name in ACTOR_SCALARS else num_updates)
            for name, total in sums.items()
        }

    def update(self, batch: RLTBatch) -> dict[str, torch.Tensor]:
        """One update on `batch`, on the current stream; returns its scalars as device tensors.

        With CUDA graphs the tensors are the graph's outputs, overwritten by the next update of
        the same kind: copy (or sum, as `run_updates` does) what you keep.
        """
        kind = UpdateKind.at(self.update_step, self.config)
        loss_weights = actor_loss_weights(self.update_step, self.config)
        if self._graph_ready(kind):
            scalars = self._replay_update(kind, batch, loss_weights)
        else:
            scalars = self.update_networks(kind, batch, loss_weights)
            self.eager_in_thread.add((threading.get_ident(), kind))
        self.update_step += 1
        return scalars

    def _graph_ready(self, kind: UpdateKind) -> bool:
        """Whether `kind` replays its CUDA graph (capturing it first where it is not yet).

        Capturing needs both Adams' state (allocated at their first step) and an eager `kind`
        in this thread (a resumed run's Adams have state at once; the robot learner updates in
        a thread of its own).
        """
        if not self.use_cuda_graphs:
            return False
        if kind in self.captured_updates:
            return True
        adams_have_state = bool(self.actor_optimizer.state and self.critic_optimizer.state)
        return adams_have_state and (threading.get_ident(), kind) in self.eager_in_thread

    def _replay_update(
        self, kind: UpdateKind, batch: RLTBatch, loss_weights: tuple[float, float]
    ) -> dict[str, torch.Tensor]:
        """Run one update by replaying the CUDA graph of its kind (captured at first use)."""
        if self.static_batch is None:
            self.static_batch = copy.deepcopy(batch)
        self.static_batch.copy_(batch)
        if kind.actor_step:
            for static_weight, weight in zip(self.static_loss_weights, loss_weights, strict=True):
                static_weight.fill_(weight)
        if kind not in self.captured_updates:
            self.captured_updates[kind] = self._capture_update(kind)
        captured = self.captured_updates[kind]
        captured.graph.replay()
        return captured.scalars

    def _capture_update(self, kind: UpdateKind) -> CapturedUpdate:
        """Record (without running) one update of `kind` on the static batch and weights."""
        graph = torch.cuda.CUDAGraph()
        # The noise and dropout draws advance the generator at every replay.
        graph.register_generator_state(self.noise_generator)
        bc_weight, q_weight = self.static_loss_weights.unbind()
        with torch.cuda.graph(graph):
            scalars = self.update_networks(kind, self.static_batch, (bc_weight, q_weight))
        return CapturedUpdate(graph, scalars)
