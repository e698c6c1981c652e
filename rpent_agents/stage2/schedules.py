"""When Stage 2 updates, when the actor may act, and how the actor-loss weights move.

`UpdateSchedule` is the reference `rlt_schedule`: nothing happens until `learning_starts`
transitions are stored; from then on the total update budget is
`warmup_updates + floor(new transitions / train_every_transitions) * update_epoch`, where new
transitions are those stored after learning started; one train step runs at most
`max_updates_per_train_step` of the updates still owed; the actor may drive the robot
(`ready_for_online`) once `warmup_updates` updates have run. With `update_schedule=False` (real
robot) every train step runs `update_epoch` updates and the actor may act at once.

`actor_loss_weights` is the reference `actor_weight_schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rpent_agents.stage2.config import Stage2Config


@dataclass
class UpdateSchedule:
    """The update budget of a run (state that a checkpoint saves).

    Attributes:
        config: The run's hyperparameters.
        transitions_at_start: Transitions stored when learning started (None: not yet).
        pending_update_budget: Updates owed after the last train step.

    Example:
        >>> schedule = UpdateSchedule(Stage2Config())
        >>> schedule.plan(update_step=0, total_transitions=10000)
        400
        >>> schedule.pending_update_budget, schedule.ready_for_online(29999)
        (30000, False)
    """

    config: Stage2Config
    transitions_at_start: int | None = None
    pending_update_budget: int = 0

    def plan(self, update_step: int, total_transitions: int) -> int:
        """Updates to run in this train step.

        Args:
            update_step: Updates run so far.
            total_transitions: Transitions ever stored in the replay buffer.
        """
        config = self.config
        if total_transitions < config.learning_starts:
            self.pending_update_budget = 0
            return 0
        if not config.update_schedule:
            self.pending_update_budget = config.update_epoch
            return config.update_epoch
        if self.transitions_at_start is None:
            self.transitions_at_start = total_transitions
        new_transitions = total_transitions - self.transitions_at_start
        cycles = new_transitions // max(config.train_every_transitions, 1)
        desired_total = config.warmup_updates + cycles * config.update_epoch
        self.pending_update_budget = max(desired_total - update_step, 0)
        if config.max_updates_per_train_step > 0:
            return min(self.pending_update_budget, config.max_updates_per_train_step)
        return self.pending_update_budget

    def record_updates(self, updates_run: int) -> None:
        """Take `updates_run` updates off the pending budget."""
        self.pending_update_budget = max(self.pending_update_budget - updates_run, 0)

    def ready_for_online(self, update_step: int) -> bool:
        """Whether the actor may drive the robot after `update_step` updates."""
        return not self.config.update_schedule or update_step >= self.config.warmup_updates

    def state_dict(self) -> dict[str, int | None]:
        """The mutable state (for checkpoints)."""
        return {
            "transitions_at_start": self.transitions_at_start,
            "pending_update_budget": self.pending_update_budget,
        }

    def load_state_dict(self, state: dict[str, int | None]) -> None:
        """Restore the state written by `state_dict`."""
        self.transitions_at_start = state["transitions_at_start"]
        self.pending_update_budget = int(state["pending_update_budget"] or 0)


def actor_loss_weights(update_step: int, config: Stage2Config) -> tuple[float, float]:
    """(bc_weight, q_weight) of the actor loss at update `update_step`.

    Warmup weights for `weight_warmup_updates` updates, then a linear ramp whose progress at
    update t is (t - warmup + 1) / ramp, then the online weights; fixed `bc_weight`/`q_weight`
    when `weight_schedule` is off.
    """
    if not config.weight_schedule:
        return config.bc_weight, config.q_weight
    if update_step < config.weight_warmup_updates:
        return config.warmup_bc_weight, config.warmup_q_weight
    if config.weight_ramp_updates <= 0:
        return config.online_bc_weight, config.online_q_weight
    progress = (update_step - config.weight_warmup_updates + 1) / config.weight_ramp_updates
    progress = min(max(progress, 0.0), 1.0)
    bc_weight = config.warmup_bc_weight + progress * (
        config.online_bc_weight - config.warmup_bc_weight
    )
    q_weight = config.warmup_q_weight + progress * (config.online_q_weight - config.warmup_q_weight)
    return bc_weight, q_weight
