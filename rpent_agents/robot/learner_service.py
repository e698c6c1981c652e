"""The learner of a robot run: stores transitions, updates as owed, publishes its actor, saves.

`LearnerService` owns a `Stage2Learner` (networks, optimizers, replay buffer, `UpdateSchedule`),
the run's counters (`RobotRunState`) and its run folder. The control loop reaches it through a
`LearnerLink` (`learner_link`: a child process, or a Ray actor), which calls:

- `add(transitions)`: store the chunks the arm executed;
- `update_some(max_updates)`: run at most `max_updates` of the updates the schedule owes now,
  and none when nothing is owed (the link's update thread then sleeps): with
  `update_schedule` the reference `rlt_schedule` (`warmup_updates`, then `update_epoch` per
  `train_every_transitions`), without it `update_epoch` per stored transition (one train step
  per chunk, as `rpent-stage2` runs one per vector step);
- `end_episode(state, extra_updates)`: save the learner, the replay, the optimizers and the
  counters as one set (`stage2.checkpoint.save_run`), after everything added before; after the
  run's last episode, first `extra_updates` updates whatever the schedule owes (the run's
  `--final-updates`: training that costs no robot time);
- `weights()`: the trained actor as numpy (`ActorWeights`), with the warm-up's verdict
  `actor_ready`, and with Q-ranked acting (`Stage2Config.acting_samples` > 0, and only then)
  the critic; `status()`: the counters a status line shows (`LearnerStatus`).

Which actor acts: while training, the control loop acts with the trained actor plus its fixed
noise (`ActingSpec.noise_std`), as `rpent-stage2` explores, and with Q-ranked acting its copy
of the critic picks the chunk among perturbations of the actor's and the reference's, with
`rpent-stage2`'s own code (`robot.local_policy.LocalPolicy`); the deterministic policy to deploy
is the run folder's `weights.pt`, the acting actor (its Polyak average when
`Stage2Config.acting_actor_tau` is set), loaded with `stage2.checkpoint.load_actor`.

Every method holds one lock, so the update thread and the message handler share the service;
`status()` reads a snapshot without it, so a heartbeat never waits for a save.

Example:
    >>> service = LearnerService.fresh(Stage2Config(device="cpu"), RLTDims(16, 9, 10, 8), run_dir)
    >>> service.add(transitions); service.update_some(max_updates=8)
    >>> weights = service.weights()  # send to the control loop: weights.load_into(actor)
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpent_agents.robot.run_state import RobotRunState
from rpent_agents.stage2.checkpoint import CONFIG_FILE, resume_run, save_run
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.demo_replay import start_from_demos
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.networks import Actor, RLTDims, TwinQCritic
from rpent_agents.stage2.replay import RLTTransition

RUN_STATE_KEY = "robot_run_state"
"""The save's `extra` entry holding the `RobotRunState`."""
SAVED_EPISODES_KEY = "saved_episodes"
"""The save's `extra` entry counting the episode-end saves of the run."""
GATE_KEY = "gate"
"""The save's `extra` entry holding `LearnerSetup.gate` (a resumed run saves it again)."""


@dataclass(frozen=True)
class ActingSpec:
    """How the control loop builds and drives its local copies of the networks (sent once).

    Attributes:
        dims: The RLT observation sizes.
        chunk_len: H, actions per chunk.
        hidden_dim: Width of the actor's and the critic's hidden layers.
        actor_layers: Hidden layers of the actor.
        noise_std: Std of the fixed noise training acts with (`act_chunks(...,
            deterministic=False)`).
        critic_layers: Hidden layers of each Q head.
        num_q_heads: Q heads of the critic.
        acting_samples: `Stage2Config.acting_samples`: > 0, the critic is published with
            the actor and ranks the candidate chunks (`stage2.acting.acting_ranking`).
        acting_sample_std: `Stage2Config.acting_sample_std`.
        eval_q_filter: `Stage2Config.eval_q_filter` (acting deterministically).
        eval_consensus: `Stage2Config.eval_consensus` (acting deterministically).
    """

    dims: RLTDims
    chunk_len: int
    hidden_dim: int
    actor_layers: int
    noise_std: float
    critic_layers: int = 3
    num_q_heads: int = 2
    acting_samples: int = 0
    acting_sample_std: float = 0.0
    eval_q_filter: bool = False
    eval_consensus: bool = False

    @classmethod
    def of_config(cls, config: Stage2Config, dims: RLTDims) -> ActingSpec:
        """The spec of the networks a learner with `config` and `dims` trains."""
        return cls(
            dims, config.chunk_len, config.hidden_dim, config.actor_layers,
            config.actor_noise_std, config.critic_layers, config.num_q_heads,
            config.acting_samples, config.acting_sample_std, config.eval_q_filter,
            config.eval_consensus,
        )  # fmt: skip

    @property
    def ranks_chunks(self) -> bool:
        """Whether acting is Q-ranked: the learner publishes its critic with the actor."""
        return self.acting_samples > 0

    def build_actor(self, device: str | torch.device = "cpu") -> Actor:
        """An actor of these sizes (initial weights: load an `ActorWeights` into it)."""
        actor = Actor(self.dims, self.chunk_len, self.hidden_dim, self.actor_layers,
                      self.noise_std)  # fmt: skip
        return actor.to(device).eval().requires_grad_(False)

    def build_critic(self, device: str | torch.device = "cpu") -> TwinQCritic | None:
        """A critic of these sizes with Q-ranked acting (load `ActorWeights` into it); else None."""
        if not self.ranks_chunks:
            return None
        critic = TwinQCritic(self.dims, self.chunk_len, self.hidden_dim, self.critic_layers,
                             self.num_q_heads)  # fmt: skip
        return critic.to(device).eval().requires_grad_(False)


@dataclass(frozen=True)
class ActorWeights:
    """The trained actor as the learner published it (picklable numpy arrays).

    Attributes:
        version: 1 for the first weights a service publishes, then one more each time the
            learner has updated since the last.
        update_step: The learner's updates when they were taken.
        actor_ready: Whether the actor may drive (`Stage2Learner.ready_for_online`: its
            warm-up is done); until then the VLA's reference drives.
        state_dict: The actor's parameters, by name, as copies.
        critic_state_dict: The critic's, with Q-ranked acting (`ActingSpec.ranks_chunks`);
            else None.
    """

    version: int
    update_step: int
    actor_ready: bool
    state_dict: dict[str, np.ndarray]
    critic_state_dict: dict[str, np.ndarray] | None = None

    def load_into(self, actor: Actor, critic: TwinQCritic | None = None) -> None:
        """Copy these weights into `actor` and `critic` (built by `ActingSpec`'s builders).

        Raises:
            ValueError: When a critic is given and these weights hold none.
        """
        actor.load_state_dict(_tensors(self.state_dict))
        if critic is None:
            return
        if self.critic_state_dict is None:
            raise ValueError("these weights hold no critic: the learner's acting_samples is 0")
        critic.load_state_dict(_tensors(self.critic_state_dict))


def _tensors(state_dict: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(values) for name, values in state_dict.items()}


def _numpy_copies(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {
        name: tensor.detach().to("cpu", copy=True).numpy()
        for name, tensor in module.state_dict().items()
    }


@dataclass(frozen=True)
class LearnerStatus:
    """The learner's counters, as the link last heard them.

    Attributes:
        updates: Updates run over the whole run (`Stage2Learner.update_step`).
        replay_size: Transitions in the replay buffer.
        transitions: Transitions ever stored, resumed parts included.
        saved_episodes: Episode-end saves over the whole run (the last one acknowledged).
        heartbeat_s: The learner's clock (`time.time()`) when it made this status.
        actor_ready: Whether the actor may drive (its warm-up is done).
        updates_owed: Updates the schedule owes now (0: the learner sleeps).
        scalars: The losses of the latest updates, by TensorBoard name (empty before any).
    """

    updates: int = 0
    replay_size: int = 0
    transitions: int = 0
    saved_episodes: int = 0
    heartbeat_s: float = 0.0
    actor_ready: bool = False
    updates_owed: int = 0
    scalars: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LearnerSetup:
    """How to build a run's `LearnerService` where it runs (picklable: sent to a child).

    Attributes:
        run_dir: The run folder (learner, replay, optimizers, counters: one set).
        config: The Stage 2 config of a fresh run; None: resume the run in `run_dir`.
        dims: The RLT observation sizes of a fresh run.
        device: The learner's torch device ("auto": cuda when available, else cpu).
        gate: When the actor drives in the env of a fresh run (its gate fields as plain
            values, `rlt_stack.GATE_FIELDS`), saved with the actor's weights so that whoever
            acts with them opens the same gate (`stage2.checkpoint.load_actor`).
    """

    run_dir: Path
    config: Stage2Config | None = None
    dims: RLTDims | None = None
    device: str = "auto"
    gate: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> LearnerService:
        """A fresh service (`config` given) or the run saved in `run_dir`."""
        if self.config is None:
            return LearnerService.resume(self.run_dir, self.device)
        if self.dims is None:
            raise ValueError("LearnerSetup.dims is needed with a config (a fresh run)")
        return LearnerService.fresh(self.config, self.dims, self.run_dir, self.device, self.gate)


class LearnerService:
    """A run's Stage 2 learner, its counters and its run folder (see the module docstring)."""

    def __init__(
        self,
        learner: Stage2Learner,
        run_dir: Path,
        run_state: RobotRunState,
        saved_episodes: int = 0,
        gate: Mapping[str, Any] | None = None,
    ) -> None:
        """Serve `learner`, saving into `run_dir` with `gate` (`LearnerSetup.gate`).

        Use `fresh` or `resume` to build one.
        """
        self.learner = learner
        self.run_dir = Path(run_dir)
        self.run_state = run_state
        self.saved_episodes = saved_episodes
        self.gate = dict(gate or {})
        self.acting_spec = ActingSpec.of_config(learner.config, learner.dims)
        self._lock = threading.Lock()
        self._weights: ActorWeights | None = None
        self._latest_scalars: dict[str, float] = {}
        self._snapshot = self._make_status()

    @classmethod
    def fresh(
        cls,
        config: Stage2Config,
        dims: RLTDims,
        run_dir: Path,
        device: str | None = None,
        gate: Mapping[str, Any] | None = None,
    ) -> LearnerService:
        """A new learner for a new run, saved at once into `run_dir` (zero robot counters).

        Its demonstrations, if the config names them, are preloaded and pretrained on first
        (`stage2.demo_replay`: before the arm moves). The first save makes `run_dir` a
        resumable run before the arm moves, and shows a folder that cannot be written before
        any robot time is spent.

        Raises:
            FileExistsError: When `run_dir` holds a run already (nothing is overwritten).
            FileNotFoundError, ValueError: For demonstrations that cannot be loaded.
        """
        if (Path(run_dir) / CONFIG_FILE).exists():
            raise FileExistsError(
                f"{run_dir} holds a run; resume it (LearnerSetup without a config, --resume) "
                "or choose another folder"
            )
        service = cls(Stage2Learner(config, dims, device), run_dir, RobotRunState(), gate=gate)
        with service._lock:
            service._latest_scalars = start_from_demos(service.learner)
            service._save(RobotRunState(), saved_episodes=0)
        return service

    @classmethod
    def resume(cls, run_dir: Path, device: str | None = None) -> LearnerService:
        """The run saved in `run_dir`: learner, replay, optimizers and counters as saved.

        Raises:
            FileNotFoundError: When `run_dir` holds no run.
            ValueError: When the run was not saved by a robot run (it lacks the counters).
        """
        learner, extra = resume_run(Path(run_dir), device)
        if RUN_STATE_KEY not in extra:
            raise ValueError(
                f"{run_dir} holds a Stage 2 run without robot counters (not saved by "
                "rpent-stage2-robot); resume it with the command that wrote it"
            )
        run_state = RobotRunState.from_dict(extra[RUN_STATE_KEY])
        saved_episodes = int(extra.get(SAVED_EPISODES_KEY, 0))
        return cls(learner, run_dir, run_state, saved_episodes, extra.get(GATE_KEY))

    def add(self, transitions: Iterable[RLTTransition]) -> int:
        """Store the transitions (non-finite ones are refused and counted); returns how many."""
        config, learner = self.learner.config, self.learner
        with self._lock:
            stored = learner.add_transitions(transitions)
            total = learner.replay.total_added
            if config.update_schedule:
                # Fixes the schedule's start at the transition that reached learning_starts.
                learner.schedule.plan(learner.update_step, total)
            else:
                earning = min(stored, max(total - config.learning_starts + 1, 0))
                learner.schedule.pending_update_budget += config.update_epoch * earning
            self._snapshot = self._make_status()
        return stored

    def update_some(self, max_updates: int) -> int:
        """Run up to `max_updates` of the updates owed now; returns how many ran (0: none owed)."""
        with self._lock:
            count = min(self._updates_owed(), max_updates)
            if count > 0:
                self._latest_scalars = self.learner.run_updates(count)
                self.learner.schedule.record_updates(count)
            self._snapshot = self._make_status()
        return count

    def end_episode(self, state: RobotRunState, extra_updates: int = 0) -> int:
        """Save the learner, replay, optimizers and `state` into the run folder as one set.

        Args:
            state: The run's counters after the episode.
            extra_updates: Updates to run before the save, whatever the schedule owes (they
                count against what it owes later).

        Returns:
            The episode-end saves of the run so far.

        Raises:
            ValueError: When a network holds NaN or inf (nothing is written).
        """
        with self._lock:
            if extra_updates > 0:
                self._latest_scalars = self.learner.run_updates(extra_updates)
                self.learner.schedule.record_updates(extra_updates)
            self._save(state, self.saved_episodes + 1)
        return self.saved_episodes

    def weights(self) -> ActorWeights:
        """The trained actor's (and critic's) weights; a new version after new updates."""
        with self._lock:
            learner, published = self.learner, self._weights
            if published is None or published.update_step != learner.update_step:
                learner.wait_for_updates()
                critic = _numpy_copies(learner.critic) if self.acting_spec.ranks_chunks else None
                version = 1 if published is None else published.version + 1
                self._weights = ActorWeights(
                    version, learner.update_step, learner.ready_for_online,
                    _numpy_copies(learner.actor), critic,
                )  # fmt: skip
            return self._weights

    def status(self) -> LearnerStatus:
        """The counters as of the last call that changed them, stamped now (takes no lock)."""
        return dataclasses.replace(self._snapshot, heartbeat_s=time.time())

    def _updates_owed(self) -> int:
        """Updates the schedule owes now (see the module docstring); call with the lock held."""
        learner = self.learner
        if learner.config.update_schedule:
            learner.schedule.plan(learner.update_step, learner.replay.total_added)
        return learner.schedule.pending_update_budget

    def _save(self, state: RobotRunState, saved_episodes: int) -> None:
        """Write the run folder's set with `state`; call with the lock held."""
        extra = {
            RUN_STATE_KEY: state.to_dict(),
            SAVED_EPISODES_KEY: saved_episodes,
            GATE_KEY: self.gate,
        }
        save_run(self.learner, self.run_dir, extra=extra, gate=self.gate)
        self.run_state, self.saved_episodes = dataclasses.replace(state), saved_episodes
        self._snapshot = self._make_status()

    def _make_status(self) -> LearnerStatus:
        learner = self.learner
        return LearnerStatus(
            updates=learner.update_step,
            replay_size=len(learner.replay),
            transitions=learner.replay.total_added,
            saved_episodes=self.saved_episodes,
            heartbeat_s=time.time(),
            actor_ready=learner.ready_for_online,
            updates_owed=learner.schedule.pending_update_budget,
            scalars=dict(self._latest_scalars),
        )
