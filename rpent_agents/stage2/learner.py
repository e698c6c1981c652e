"""The Stage 2 learner: networks, optimizers, replay buffer and the update loop.

One update (reference order): a critic step on the chunked TD target; every
`critic_actor_ratio`-th update an actor step on -q_weight Q_1 + bc_weight BC with reference
dropout; a soft target update (tau) every `target_update_every` updates. `train_step` asks the
`UpdateSchedule` how many updates the data collected so far has earned and runs them.

The update loop keeps every value on the device, so a GPU is not stalled by per-update host
reads: `run_updates` and `train_step` synchronise once, when they return their scalars, and
`start_train_step` not at all (its `TrainStepScalars` wait for the updates when read; the
training loop reads them after the workers' chunks, so the CPU waits for the workers while the
GPU runs the updates). On a CUDA device each update is replayed as a
captured CUDA graph (`Stage2Config.cuda_graphs`): one graph per update kind (with or without
the actor step and the target update), fed through a static batch and static loss weights.
With `Stage2Config.update_stream` the updates are queued on a CUDA stream of their own, so the
process's other GPU work (featurizing the workers' observations) need not queue behind them
(within `ahead_of_updates` that work also runs at a higher stream priority); every method that
reads or writes what the updates use (acting, storing, scalars, saving) first makes the current
stream wait for them (`wait_for_updates`). With `Stage2Config.act_during_updates` training acts
on copies of the actor and critic taken before each train step's updates, and stored
transitions are written on the update stream after them, so the training loop's acting and
storing wait for no update.

An optimizer step whose loss or gradient norm is NaN or inf is skipped, on the device, and
counted (`stage2.step_guard`; scalars `train/rlt/skipped_critic_steps` and
`train/rlt/skipped_actor_steps`); the replay buffer refuses non-finite transitions
(`train/replay_buffer/refused_non_finite`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch

from rpent_agents.common.devices import resolve_device
from rpent_agents.stage2 import losses
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.networks import Actor, RLTDims, RLTObs, TwinQCritic
from rpent_agents.stage2.replay import ReplayBuffer, RLTBatch, RLTTransition
from rpent_agents.stage2.schedules import UpdateSchedule, actor_loss_weights
from rpent_agents.stage2.step_guard import step_unless_non_finite

NETWORKS = ("critic", "actor")
# CUDA stream priorities: lower is higher; the default stream's is 0, the lowest.
ROLLOUT_STREAM_PRIORITY = -1
# Batches drawn from the replay at once (one gather per field): a train step's updates, up to
# this many (bounds the drawn memory: ~0.3 GB at pi0.5's RL token size and batch 512).
BATCHES_PER_DRAW = 32
ACTOR_SCALARS = (
    "actor/actor_loss",
    "q_pi",
    "actor/bc_loss",
    "actor/bc_ref_loss",
    "actor/bc_human_loss",
    "actor/human_mask_ratio",
)


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


def _adam(module: torch.nn.Module, lr: float, capturable: bool) -> torch.optim.Adam:
    # The fused kernel updates all parameters at once (CPU and CUDA); the default per-parameter
    # loop dominates the update time of networks this small. It also skips non-finite steps.
    return torch.optim.Adam(module.parameters(), lr=lr, fused=True, capturable=capturable)


class UpdateKind(NamedTuple):
    """What one update runs besides its critic step."""

    actor_step: bool
    target_update: bool


class CapturedUpdate(NamedTuple):
    """A CUDA graph of one update kind and the device tensors its scalars land in."""

    graph: torch.cuda.CUDAGraph
    scalars: dict[str, torch.Tensor]


def obs_to_tensors(obs: Mapping[str, np.ndarray], device: torch.device) -> RLTObs:
    """A batched RLT Dict observation (numpy or tensors) as an `RLTObs` on `device`."""

    def tensor(key: str) -> torch.Tensor:
        return torch.as_tensor(obs[key], dtype=torch.float32, device=device)

    return RLTObs(tensor("z_rl"), tensor("proprio"), tensor("ref_chunk"))


@torch.no_grad()
def act_chunks(
    actor: Actor,
    obs: Mapping[str, np.ndarray],
    deterministic: bool = True,
    generator: torch.Generator | None = None,
    q_filter: TwinQCritic | None = None,
) -> np.ndarray:
    """Flat action chunks (B, H*A) of `actor` for batched RLT observations (numpy).

    Args:
        actor: The actor (on any device).
        obs: Batched RLT observations (`z_rl` (B, D), `proprio` (B, P), `ref_chunk`).
        deterministic: Use the mean (evaluation) instead of adding the fixed noise.
        generator: Random source of the noise (the default generator when None).
        q_filter: A critic that replaces the actor's chunk by the reference's wherever it
            values the reference's higher (`q_filtered`); None: the actor's chunks.
    """
    device = next(actor.parameters()).device
    rlt_obs = obs_to_tensors(obs, device)
    chunk = actor(rlt_obs, deterministic=deterministic, generator=generator)
    if q_filter is not None:
        chunk = q_filtered(q_filter, rlt_obs, chunk)
    return chunk.flatten(1).cpu().numpy()


@torch.no_grad()
def q_filtered(critic: TwinQCritic, obs: RLTObs, actor_chunk: torch.Tensor) -> torch.Tensor:
    """Per sample, the actor's chunk (B, H, A) or the reference's, whichever is valued higher.

    The critic's minimum over its heads values both; ties keep the actor's chunk
    (`Stage2Config.eval_q_filter`): the actor changes only what the critic expects it to
    improve.
    """
    ref_chunk = obs.ref_chunk[:, : actor_chunk.shape[1]].clamp(-1.0, 1.0)
    q_actor = critic(obs, actor_chunk).min(dim=-1).values
    q_ref = critic(obs, ref_chunk).min(dim=-1).values
    return torch.where((q_actor >= q_ref)[:, None, None], actor_chunk, ref_chunk)


class Stage2Learner:
    """Actor, twin-Q critic, target critic, optimizers, replay buffer and update counters.

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
        self.config = config
        self.dims = dims
        self.device = resolve_device(device if device is not None else config.device)
        # Seeded initialisation that leaves the caller's global random state alone.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.actor = Actor(
                dims, config.chunk_len, config.hidden_dim, config.actor_layers,
                config.actor_noise_std,
            ).to(self.device)  # fmt: skip
            self.critic = TwinQCritic(
                dims, config.chunk_len, config.hidden_dim, config.critic_layers,
                config.num_q_heads,
            ).to(self.device)  # fmt: skip
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        # The Polyak-averaged actor that acts deterministically (`acting_actor_tau`).
        self.acting_actor = (
            self.actor
            if config.acting_actor_tau is None
            else copy.deepcopy(self.actor).requires_grad_(False)
        )
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
        self.use_cuda_graphs = config.cuda_graphs and self.device.type == "cuda"
        self.update_stream = (
            torch.cuda.Stream(self.device)
            if config.update_stream and self.device.type == "cuda"
            else None
        )
        # The loop's featurizing and acting beside the updates (`ahead_of_updates`): one stream
        # for the learner's life, so the memory its work allocates stays cached for it.
        self.rollout_stream = (
            torch.cuda.Stream(self.device, priority=ROLLOUT_STREAM_PRIORITY)
            if self.update_stream is not None
            else None
        )
        self.actor_optimizer = _adam(self.actor, config.actor_lr, self.use_cuda_graphs)
        self.critic_optimizer = _adam(self.critic, config.critic_lr, self.use_cuda_graphs)
        replay_device = self.device if config.replay_on_device else torch.device("cpu")
        self.replay = ReplayBuffer(
            dims, config.chunk_len, config.replay_capacity, config.sample_window, replay_device
        )
        self.sample_generator = torch.Generator(device=replay_device).manual_seed(config.seed)
        self.noise_generator = torch.Generator(device=self.device).manual_seed(config.seed + 1)
        self.schedule = UpdateSchedule(config)
        self.update_step = 0
        # Optimizer steps skipped for a non-finite loss or gradient, counted on the device.
        self.skipped_steps = {name: torch.zeros((), device=self.device) for name in NETWORKS}
        self.captured_updates: dict[UpdateKind, CapturedUpdate] = {}
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
            return act_chunks(self.behaviour_actor, obs, False, self.noise_generator)
        self.wait_for_updates()
        q_filter = self.critic if deterministic and self.config.eval_q_filter else None
        actor = self.acting_actor if deterministic else self.actor
        return act_chunks(actor, obs, deterministic, self.noise_generator, q_filter)

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
        obs = obs_to_tensors(
            {key: np.stack([getattr(transition, key) for transition in stored])
             for key in ("z_rl", "proprio", "ref_chunk")},
            self.device,
        )  # fmt: skip
        actions = np.stack([transition.action for transition in stored])
        action = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        q_first_head = iter(critic(obs, action)[:, 0].tolist())
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

    def _skipped_step_counts(self) -> dict[str, torch.Tensor]:
        """Copies of the skip counters as they stand after the updates queued so far."""
        return {
            f"train/rlt/skipped_{name}_steps": self.skipped_steps[name].clone() for name in NETWORKS
        }

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
        host_values = {
            "train/replay_buffer/size": float(len(self.replay)),
            "train/rlt/ready_for_online": float(self.ready_for_online),
            "train/rlt/critic_updates_run": float(planned),
            "train/rlt/actor_updates_run": float(
                self._actor_updates_between(first_update, self.update_step)
            ),
            "train/rlt/pending_update_budget": float(self.schedule.pending_update_budget),
        }
        return TrainStepScalars(device_values, host_values, updates_done)

    def _actor_updates_between(self, first_update: int, end_update: int) -> int:
        """Actor steps among updates first_update..end_update-1 (those divisible by the ratio)."""
        ratio = self.config.critic_actor_ratio
        return -(-end_update // ratio) - -(-first_update // ratio)

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
        actor_updates = self._actor_updates_between(first_update, self.update_step)
        return {
            name: total / (actor_updates if name in ACTOR_SCALARS else num_updates)
            for name, total in sums.items()
        }

    def update(self, batch: RLTBatch) -> dict[str, torch.Tensor]:
        """One update on `batch`, on the current stream; returns its scalars as device tensors.

        With CUDA graphs the tensors are the graph's outputs, overwritten by the next update of
        the same kind: copy (or sum, as `run_updates` does) what you keep.
        """
        kind = UpdateKind(
            actor_step=self.update_step % self.config.critic_actor_ratio == 0,
            target_update=self.update_step % self.config.target_update_every == 0,
        )
        loss_weights = actor_loss_weights(self.update_step, self.config)
        if self.use_cuda_graphs and self._optimizers_have_state():
            scalars = self._replay_update(kind, batch, loss_weights)
        else:
            scalars = self._update_steps(kind, batch, loss_weights)
        self.update_step += 1
        return scalars

    def _optimizers_have_state(self) -> bool:
        """Whether both Adams have stepped once (they allocate their state at the first step)."""
        return bool(self.actor_optimizer.state) and bool(self.critic_optimizer.state)

    def _update_steps(
        self,
        kind: UpdateKind,
        batch: RLTBatch,
        loss_weights: tuple[float, float] | tuple[torch.Tensor, torch.Tensor],
    ) -> dict[str, torch.Tensor]:
        scalars = {"critic/critic_loss": self._critic_step(batch)}
        if kind.actor_step:
            scalars |= self._actor_step(batch, *loss_weights)
        if kind.target_update:
            self._soft_update_target()
        return scalars

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
            scalars = self._update_steps(kind, self.static_batch, (bc_weight, q_weight))
        return CapturedUpdate(graph, scalars)

    def _critic_step(self, batch: RLTBatch) -> torch.Tensor:
        config = self.config
        with torch.no_grad():
            next_action = self.actor(batch.next_obs, generator=self.noise_generator)
            next_q = self._target_heads(self.target_critic(batch.next_obs, next_action))
            next_q_min = next_q.min(dim=-1).values
            target = losses.td_target(
                batch.rewards, batch.done, next_q_min, config.gamma, config.bootstrap_type
            )
        loss = losses.critic_loss(self.critic(batch.obs, batch.action), target)
        self._step(self.critic_optimizer, self.critic, loss, self.skipped_steps["critic"])
        return loss.detach()

    def _target_heads(self, q_values: torch.Tensor) -> torch.Tensor:
        """The (B, Q) heads the TD target uses: all, or `target_q_heads` drawn at random.

        One draw per update for the whole batch, from the noise generator (a captured update
        draws anew at every replay).
        """
        count, heads = self.config.target_q_heads, q_values.shape[-1]
        if count is None or count == heads:
            return q_values
        draw = torch.rand(heads, generator=self.noise_generator, device=q_values.device)
        return q_values.index_select(-1, draw.argsort()[:count])

    def _actor_step(
        self,
        batch: RLTBatch,
        bc_weight: float | torch.Tensor,
        q_weight: float | torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        config = self.config
        actor_chunk = self.actor(
            batch.obs,
            ref_dropout_prob=config.reference_dropout_prob,
            generator=self.noise_generator,
        )
        q_heads = self.critic(batch.obs, actor_chunk)
        q_pi = q_heads[:, 0] if config.actor_q == "first" else q_heads.mean(dim=-1)
        bc = losses.bc_terms(actor_chunk, batch.obs.ref_chunk, batch.action, batch.intervened)
        floor = config.q_scale_floor if config.normalize_q else None
        loss = losses.actor_loss(q_pi, bc.loss, q_weight, bc_weight, losses.q_scale(q_pi, floor))
        self._step(self.actor_optimizer, self.actor, loss, self.skipped_steps["actor"])
        if self.acting_actor is not self.actor:
            self._polyak_update(self.acting_actor, self.actor, config.acting_actor_tau)
        return {
            "actor/actor_loss": loss.detach(),
            "q_pi": q_pi.detach().mean(),
            "actor/bc_loss": bc.loss.detach(),
            "actor/bc_ref_loss": bc.ref_loss.detach(),
            "actor/bc_human_loss": bc.human_loss.detach(),
            "actor/human_mask_ratio": bc.human_mask_ratio,
        }

    def _step(
        self,
        optimizer: torch.optim.Optimizer,
        module: torch.nn.Module,
        loss: torch.Tensor,
        skipped_steps: torch.Tensor,
    ) -> None:
        """Backpropagate `loss` into `module` only, clip its gradient norm, step `optimizer`.

        A non-finite loss or gradient skips the step and counts it in `skipped_steps`.
        """
        optimizer.zero_grad(set_to_none=True)
        params = list(module.parameters())
        # inputs= keeps the actor loss from filling the critic's gradients.
        loss.backward(inputs=params)
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip_norm, foreach=True)
        step_unless_non_finite(optimizer, loss, norm, skipped_steps)

    def _soft_update_target(self) -> None:
        self._polyak_update(self.target_critic, self.critic, self.config.tau)

    @staticmethod
    @torch.no_grad()
    def _polyak_update(average: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
        """Move `average` by tau towards `online` (one fused launch for all parameters)."""
        torch._foreach_lerp_(list(average.parameters()), list(online.parameters()), tau)
