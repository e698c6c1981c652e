"""Every Stage 2 hyperparameter in one dataclass, with the reference's simulation defaults.

`Stage2Config()` is the ManiSkill (simulation) setting of the reference RLT implementation;
`Stage2Config.real_robot()` is its Franka setting and `Stage2Config.sample_efficient()` the
learner of `rpent-stage2 sample-efficient` (the peg task in 300k env steps). The dataclass is
flat and has a docstring per field so that `tyro.cli(Stage2Config)` turns it into a command
line.

Example:
    >>> config = Stage2Config.real_robot()
    >>> config.gamma, config.batch_size, config.weight_schedule
    (0.96, 256, False)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

BootstrapType = Literal["standard", "always"]


@dataclass
class Stage2Config:
    """Hyperparameters of the Stage 2 actor-critic (defaults: reference, simulation)."""

    chunk_len: int = 10
    """H: actions per chunk the actor outputs and the env executes."""
    hidden_dim: int = 256
    """Width of every hidden layer of the actor and of each Q head."""
    actor_layers: int = 3
    """Hidden Linear+Tanh layers of the actor."""
    critic_layers: int = 3
    """Hidden Linear+LayerNorm+Tanh layers of each Q head."""
    num_q_heads: int = 2
    """Q heads of the critic (twin Q: the TD target takes their minimum)."""
    target_q_heads: int | None = None
    """Heads the TD target takes its minimum over, drawn at random for every update (REDQ;
    RLPD's ensemble: 2 of 10); None: every head (twin Q, reference)."""
    actor_q: Literal["first", "mean"] = "first"
    """The Q value the actor's loss maximises: the first head's (TD3, reference) or the mean
    over the heads (RLPD's ensemble)."""
    actor_noise_std: float = 0.002
    """Fixed std of the Gaussian noise added to the actor mean before tanh while training."""
    reference_dropout_prob: float = 0.5
    """Probability that a sample's whole reference chunk is zeroed in the actor loss."""

    gamma: float = 0.99
    """Per-step discount; a chunk of H steps bootstraps with gamma**H."""
    bootstrap_type: BootstrapType = "standard"
    """"standard": no bootstrap after a done chunk; "always": bootstrap every chunk."""
    reference_on_interventions: Literal["executed", "observed"] = "executed"
    """What a stored transition keeps as the actor's reference input on steps a human or
    expert drove: "executed" (reference) replaces it with the executed action; "observed"
    keeps the VLA's reference chunk, the input the actor has when it acts itself. The executed
    action is the BC target of those steps either way."""
    truncation_ends_bootstrap: bool = True
    """Store done=True for truncated episodes too (reference simulation); False: only for
    terminated ones (reference real robot)."""
    tau: float = 0.005
    """Soft target update rate: target <- (1 - tau) target + tau online."""
    target_update_every: int = 1
    """Soft-update the target critic every this many updates."""
    critic_actor_ratio: int = 4
    """Critic updates per actor update (the actor updates when update_step % ratio == 0)."""

    actor_lr: float = 1e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-4
    """Adam learning rate of the critic."""
    grad_clip_norm: float = 10.0
    """Global gradient-norm clip of each optimizer step."""
    batch_size: int = 512
    """Transitions per update."""

    bc_weight: float = 1.0
    """BC weight of the actor loss when weight_schedule is off."""
    q_weight: float = 1.0
    """Q weight of the actor loss when weight_schedule is off."""
    weight_schedule: bool = True
    """Schedule the actor-loss weights (actor_weight_schedule) instead of fixed ones."""
    weight_warmup_updates: int = 20000
    """Updates that use the warmup weights."""
    weight_ramp_updates: int = 50000
    """Updates over which the weights move linearly from warmup to online values."""
    warmup_bc_weight: float = 7.0
    """BC weight during the weight warmup."""
    warmup_q_weight: float = 0.05
    """Q weight during the weight warmup."""
    online_bc_weight: float = 2.5
    """BC weight after the ramp."""
    online_q_weight: float = 0.45
    """Q weight after the ramp."""
    normalize_q: bool = False
    """Divide the actor's Q term by the batch's mean |Q| (as TD3+BC does), so the Q weight
    means the same whatever the scale of the returns; off in the reference."""
    q_scale_floor: float = 0.1
    """With normalize_q, the smallest mean |Q| divided by (keeps a critic that has not yet
    seen a reward from amplifying noise)."""

    update_schedule: bool = True
    """Use rlt_schedule (budgeted updates, actor gated by ready_for_online); off: update_epoch
    updates per train step and the actor may act at once (the real robot's keyboard decides)."""
    learning_starts: int = 10000
    """Stored transitions before any update."""
    warmup_updates: int = 30000
    """Updates before ready_for_online (the actor may act) and the base of the update budget."""
    train_every_transitions: int = 5
    """New transitions (after learning starts) that earn update_epoch more updates."""
    update_epoch: int = 5
    """Updates earned per train_every_transitions (per train step without update_schedule)."""
    max_updates_per_train_step: int = 400
    """Most updates one train step runs (0: no limit)."""

    intervention_batch_share: float = 0.0
    """Share of every batch drawn from the transitions with an intervened step (a human or
    expert drove), as RLPD and HIL-SERL sample demonstration data; the rest, and all of it
    while no such transition is stored, uniformly from the window. 0: uniform (reference)."""
    eval_q_filter: bool = False
    """When acting deterministically (evaluation, deployment), run the reference chunk instead
    of the actor's wherever the critic (min over heads) values the reference's higher: the
    actor then changes only what the critic expects it to improve. Off in the reference."""
    acting_samples: int = 0
    """Q-ranked acting (EXPO, PA-RL): besides the actor's chunk, this many perturbations of
    its mean (`acting_sample_std` before the tanh) and the reference chunk are valued by the
    critic (minimum over its heads) and the best one runs, when exploring and when acting
    deterministically (fixed perturbations: an evaluated episode depends on its seed only);
    no robot time is spent on the candidates. 0: the actor's chunk (`eval_q_filter` still
    chooses between it and the reference's at evaluation). Off in the reference."""
    acting_sample_std: float = 0.2
    """Std of the perturbations `acting_samples` adds to the actor's mean, before the tanh."""
    eval_consensus: bool = False
    """When acting deterministically (evaluation, deployment), a chunk other than the
    reference's runs only where every head of the critic values it above the reference's
    (`stage2.acting.QRanking.consensus`): where the heads disagree, early in training or
    away from the data, the reference runs, so the critic's noise cannot take the policy
    below the reference it starts from. Needs `eval_q_filter` or `acting_samples`. Off in
    the reference."""
    acting_actor_tau: float | None = None
    """Keep a Polyak average of the actor for acting deterministically (evaluation,
    deployment, the run's weights file): after every actor step it moves this fraction of
    the way to the trained actor (0.005: an average over the last ~200 actor steps), so a
    late unlucky step does not decide the evaluated policy; training explores with the
    trained actor. None: the trained actor acts everywhere (reference)."""

    replay_capacity: int = 50000
    """Transitions the replay buffer keeps (oldest overwritten)."""
    sample_window: int = 50000
    """Batches are drawn from the most recent this many transitions."""
    replay_on_device: bool = True
    """Keep the replay buffer on the learner's device (sampling without host transfers)."""

    cuda_graphs: bool = True
    """On a CUDA device, replay each update as a captured CUDA graph (the same maths in one
    launch instead of hundreds; the first update runs eagerly). Ignored on the CPU."""
    update_stream: bool = False
    """On a CUDA device, queue the updates on a CUDA stream of their own (the lowest
    priority) instead of the process's current one, so the work queued after them there (the
    training loop's featurizing, on a stream of higher priority) runs beside them instead of
    waiting for them; acting, storing transitions, reading scalars and saving wait for the
    updates queued before, so the learning is the same. Ignored on the CPU."""
    act_during_updates: bool = False
    """Training acts (with noise) on a copy of the actor taken before each train step's
    updates, and the diagnostics' Q values come from such a copy of the critic; storing
    transitions is queued after the updates. With `update_stream` the training loop then never
    waits for the updates it queued (the host reads a step's scalars one step later), at the
    cost of acting with an actor one train step behind (the updates of that step). Evaluation
    and saving still wait for the updates. Off: acting waits for them."""

    demo_transitions: Path | None = None
    """Transitions file of Stage 1 demonstrations (`rpent-demo-transitions` makes one from
    `rpent-collect --npz-cache`'s frames.npz) preloaded into a fresh run's replay before its
    first episode, every step intervened (`stage2.demo_replay`); read where the learner runs.
    None: the replay starts empty (reference)."""
    demo_pretrain_updates: int = 0
    """Updates (critic and actor, as every update) run on the preloaded demonstrations before
    the first episode, counted against what the schedule owes: no robot or env time. Needs
    demo_transitions; 0: none."""

    seed: int = 1234
    """Seed of network initialisation, sampling and noise."""
    device: str = "auto"
    """Torch device of the learner ("auto": cuda when available, else cpu)."""

    def __post_init__(self) -> None:
        """Reject values the algorithm cannot run with; read a path given as a string (JSON)."""
        if self.demo_transitions is not None:
            self.demo_transitions = Path(self.demo_transitions)
        positive = ("chunk_len", "hidden_dim", "actor_layers", "critic_layers", "batch_size")
        for name in positive + ("critic_actor_ratio", "target_update_every", "replay_capacity"):
            if getattr(self, name) < 1:
                raise ValueError(f"Stage2Config.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_q_heads < 2:
            raise ValueError(f"Stage2Config.num_q_heads must be >= 2, got {self.num_q_heads}")
        if self.target_q_heads is not None and not 1 <= self.target_q_heads <= self.num_q_heads:
            raise ValueError(
                f"Stage2Config.target_q_heads must lie in 1..num_q_heads ({self.num_q_heads}) "
                f"or be None (every head), got {self.target_q_heads}"
            )
        if self.actor_q not in ("first", "mean"):
            raise ValueError(
                f"Stage2Config.actor_q must be 'first' or 'mean', got {self.actor_q!r}"
            )
        if self.bootstrap_type not in ("standard", "always"):
            raise ValueError(
                f"Stage2Config.bootstrap_type must be 'standard' or 'always', "
                f"got {self.bootstrap_type!r}"
            )
        if not 0.0 <= self.reference_dropout_prob <= 1.0:
            raise ValueError(
                "Stage2Config.reference_dropout_prob must lie in [0, 1], "
                f"got {self.reference_dropout_prob}"
            )
        if self.reference_on_interventions not in ("executed", "observed"):
            raise ValueError(
                "Stage2Config.reference_on_interventions must be 'executed' or 'observed', "
                f"got {self.reference_on_interventions!r}"
            )
        if self.q_scale_floor <= 0:
            raise ValueError(f"Stage2Config.q_scale_floor must be > 0, got {self.q_scale_floor}")
        if not 0.0 <= self.intervention_batch_share < 1.0:
            raise ValueError(
                "Stage2Config.intervention_batch_share must lie in [0, 1), "
                f"got {self.intervention_batch_share}"
            )
        if self.acting_actor_tau is not None and not 0.0 < self.acting_actor_tau <= 1.0:
            raise ValueError(
                "Stage2Config.acting_actor_tau must lie in (0, 1] or be None (the trained "
                f"actor acts), got {self.acting_actor_tau}"
            )
        if self.acting_samples < 0 or self.acting_sample_std < 0:
            raise ValueError(
                "Stage2Config.acting_samples and acting_sample_std must be >= 0, got "
                f"{self.acting_samples} and {self.acting_sample_std}"
            )
        if self.sample_window < 1:
            raise ValueError(f"Stage2Config.sample_window must be >= 1, got {self.sample_window}")
        if self.demo_pretrain_updates < 0 or (
            self.demo_pretrain_updates > 0 and self.demo_transitions is None
        ):
            raise ValueError(
                f"Stage2Config.demo_pretrain_updates={self.demo_pretrain_updates} needs "
                "demo_transitions (a file of rpent-demo-transitions) and must be >= 0"
            )

    @classmethod
    def sim(cls, **overrides: Any) -> Stage2Config:
        """The reference's ManiSkill setting (the defaults), with `overrides` applied."""
        return cls(**overrides)

    @classmethod
    def sample_efficient(cls, **overrides: Any) -> Stage2Config:
        """`rpent-stage2 sample-efficient`'s learner, with `overrides` applied.

        The reference's schedule assumes ~1M env steps; the peg task yields a few thousand
        critical-phase transitions per 100k, so this one is scaled to 300k and its actor
        pulled further from the reference (docs/agents/training.md#presets-and-options).
        """
        preset = {
            "num_q_heads": 10,
            "target_q_heads": 2,
            "actor_q": "mean",
            "gamma": 0.97,
            "learning_starts": 1000,
            "warmup_updates": 3000,
            "weight_warmup_updates": 2000,
            "weight_ramp_updates": 5000,
            "update_epoch": 20,
            "normalize_q": True,
            "actor_noise_std": 0.05,
            "reference_on_interventions": "observed",
            "intervention_batch_share": 0.5,
            "eval_q_filter": True,
            "update_stream": True,
            "act_during_updates": True,
        }
        return cls(**(preset | overrides))

    @classmethod
    def robot_hour(cls, **overrides: Any) -> Stage2Config:
        """`rpent-stage2 robot-hour`'s learner, with `overrides` applied.

        `sample_efficient()` rescheduled for 30k env steps, about an hour of a 10 Hz arm:
        learning from the first few hundred transitions, more updates per transition, the
        actor ready after a short warm-up, and at evaluation the actor's chunk only where
        every head of the critic prefers it to the reference's; Q-ranked acting among
        perturbations (`acting_samples`) stays off: it learned less within 30k env steps
        (docs/agents/training.md#presets-and-options).
        """
        preset = {
            "learning_starts": 200,
            "warmup_updates": 1500,
            "weight_warmup_updates": 1000,
            "weight_ramp_updates": 3000,
            "update_epoch": 40,
            "eval_consensus": True,
        }
        return cls.sample_efficient(**(preset | overrides))

    @classmethod
    def real_robot(cls, **overrides: Any) -> Stage2Config:
        """The reference's real-robot (Franka) setting, with `overrides` applied."""
        real = {
            "gamma": 0.96,
            "truncation_ends_bootstrap": False,
            "actor_lr": 3e-4,
            "critic_lr": 3e-4,
            "batch_size": 256,
            "weight_schedule": False,
            "bc_weight": 5.0,
            "q_weight": 0.1,
            "update_schedule": False,
            "learning_starts": 2,
            "update_epoch": 8,
            "sample_window": 200,
        }
        return cls(**(real | overrides))

    def to_json(self, path: Path) -> None:
        """Write the config as JSON to `path`."""
        values = dataclasses.asdict(self)
        if self.demo_transitions is not None:
            values["demo_transitions"] = str(self.demo_transitions)
        path.write_text(json.dumps(values, indent=2) + "\n")

    @classmethod
    def from_json(cls, path: Path) -> Stage2Config:
        """Read a config written by `to_json`.

        Raises:
            ValueError: When the file has keys this version does not know.
        """
        values = json.loads(Path(path).read_text())
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{path}: unknown Stage2Config fields {unknown}; remove them")
        return cls(**values)
