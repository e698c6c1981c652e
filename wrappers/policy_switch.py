"""PolicySwitch: once per action chunk, decide who drives: VLA reference, actor, expert, human.

The switch sits on top of either
- an RLT observation wrapper (its observation has `ref_chunk`, it executes chunks with
  `step_chunk`): the reference chunk is `observation["ref_chunk"][:H]`; or
- a raw per-step env, given a `reference` callable: the switch executes chunks itself.

Who drives is decided before each chunk from the trigger (`KeyboardTrigger`, `AutoGate`), an
optional `ExpertTakeover` and an optional `HumanTakeover` (a person at a teleop device), all
updated after each chunk with the infos of its steps. Each executed chunk is labelled with its
true source ("vla", "actor", "expert", "human") on the provenance channel, so a trajectory
recorder lower in the stack records every action with its source. The label is set before the
reference is asked for its chunk: a reference that logs its prediction (`vla_prediction`) may
relabel with `set_action_source("vla", call_id, prediction_id)`. With `log_predictions` the
switch logs the VLA's and the actor's chunks as predictions itself
(`recorders.provenance.label_chunk`), so the records export with `rpent-flywheel`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from recorders.provenance import instruction_of, label_chunk, provenance_of
from wrappers.chunking import ChunkResult, StepPolicy, execute_chunk
from wrappers.info_keys import SKIPPED_CHUNKS_KEY, SKIPPED_REWARD_KEY
from wrappers.rlt import rlt_chunk_shape
from wrappers.switch_info import DriverSource, switch_info
from wrappers.takeover import ExpertTakeover
from wrappers.teleop import HumanTakeover
from wrappers.triggers import SwitchEvent, SwitchTrigger

logger = logging.getLogger(__name__)

ChunkSource = Callable[[Any], np.ndarray | StepPolicy]
"""Reference policy: current observation -> an action chunk (H, A) or a closed-loop step policy."""
PREDICTION_MODELS: dict[str, str] = {"vla": "policy-switch:vla-reference", "actor": "rlt-actor"}
"""The `model` of the predictions the switch logs (`log_predictions`), by source."""
DEFAULT_HORIZON = 10
RESET_PROGRESS_DELAY_S = 5.0
"""A drop-in reset running longer than this shows a progress bar (chunks, episodes) on stderr."""


class PolicySwitch(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Per-chunk switch between the VLA reference, the learning actor and an expert.

    One `step(action)` executes one chunk. `action` is the actor's chunk, flat (H*A,) or
    (H, A); it is used only when the actor drives. Before each chunk the driver is chosen:
    the human while a `HumanTakeover` is engaged (a person's override always holds, whatever
    the trigger and `actor_ready` say), else the reference while the trigger is off (or while
    `actor_ready` is False), the expert while an `ExpertTakeover` has latched, else the actor.
    After the chunk, the trigger and the takeovers are updated with the infos of its steps.
    The reward is the sum of the chunk's per-step rewards (`info["chunk_rewards"]` has them
    one by one, `info["step_infos"]` has every step's info).

    Info keys of each step (the chunk just executed): `action_source` ("vla", "actor",
    "expert", "human"), `executed_action` ((chunk_len, A)), `actor_switch` (the actor drove
    it), `intervene_flag` (the expert or the human drove it), `intervention_requested` (a
    takeover was latched or engaged when it was decided, executed or not), `record_transition`
    (it was decided inside the critical phase: a replay transition, whoever drove it); and for
    what comes next: `rlt_switch_flags` (the critical phase is on), `rlt_policy_switch_event`
    (None, "enter_actor", "actor_already_active"), `next_action_source`. `reset()` reports the
    same keys.

    Drop-in mode (`skip_inactive=True`) for generic RL libraries, the one place its rules are
    stated: the wrapper itself executes every chunk the actor does not drive, so the library
    sees actor steps only. `reset()` returns the first observation where the actor drives
    (info `skipped_chunks`, `skipped_reward`), starting new episodes while one ends without
    the actor's turn (at most `max_skipped_episodes`, then it raises); a reset that runs
    longer than a few seconds shows a progress bar on stderr. When control leaves the actor
    mid-episode (an expert takes over, or an unlatched gate closes), the step returns
    `truncated=True`: the library bootstraps from that observation, and rewards earned by
    other drivers (e.g. the expert's success) are never credited to the actor's actions. The
    following `reset()` (no seed, no options) then continues that episode under the other
    drivers until the actor is back in control, or starts new episodes. `actor_ready=False`
    is refused in this mode (every chunk would be skipped).

    Example:
        >>> env = gym.make("RPent/PegInsertionSideWideClearance-v1", obs_mode="state")
        >>> expert = PegInsertionExpert(env)
        >>> switch = PolicySwitch(env, AutoGate(), reference=lambda obs: as_step_policy(expert))
        >>> obs, info = switch.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = switch.step(switch.action_space.sample())
        >>> info["action_source"], info["rlt_switch_flags"]
        ('vla', False)
    """

    def __init__(
        self,
        env: gym.Env,
        trigger: SwitchTrigger,
        *,
        reference: ChunkSource | None = None,
        expert_takeover: ExpertTakeover | None = None,
        human_takeover: HumanTakeover | None = None,
        horizon: int | None = None,
        skip_inactive: bool = False,
        max_skipped_episodes: int = 100,
        log_predictions: bool = False,
    ) -> None:
        """Wrap `env`.

        Args:
            env: An RLT observation wrapper (has `step_chunk`) or a raw per-step env.
            trigger: Decides when the actor takes over (`KeyboardTrigger`, `AutoGate`).
            reference: Current observation -> reference chunk (H, A) or closed-loop step
                policy; needed on a raw env, optional above an RLT wrapper (default there:
                `observation["ref_chunk"][:H]`).
            expert_takeover: Stalled-progress expert takeover (training only); None: off.
            human_takeover: A person's teleop takeover, toggled by the operator; None: off.
            horizon: Steps per chunk (H); default 10 on a raw env, the RLT wrapper's otherwise.
            skip_inactive: Execute non-actor chunks inside `reset()` (drop-in mode).
            max_skipped_episodes: In drop-in mode, episodes one `reset()` may run without the
                actor ever getting control before it raises.
            log_predictions: Log each chunk the VLA or the actor drives as a prediction in its
                own tool call on the provenance channel, its actions labelled with their ids
                (`recorders.provenance.label_chunk`), so a recorder's records export with
                `rpent-flywheel`; the env must give an instruction (`info["task"]` or
                `task_description`).

        Raises:
            ValueError: Without a reference source, or with a horizon that does not fit.
        """
        gym.utils.RecordConstructorArgs.__init__(
            self,
            _disable_deepcopy=True,
            trigger=trigger,
            reference=reference,
            expert_takeover=expert_takeover,
            human_takeover=human_takeover,
            horizon=horizon,
            skip_inactive=skip_inactive,
            max_skipped_episodes=max_skipped_episodes,
            log_predictions=log_predictions,
        )
        gym.Wrapper.__init__(self, env)
        self.trigger = trigger
        self.expert_takeover = expert_takeover
        self.human_takeover = human_takeover
        self.skip_inactive = skip_inactive
        self.max_skipped_episodes = max_skipped_episodes
        self.log_predictions = log_predictions
        self._reference = reference
        self._step_chunk = _find_step_chunk(env)
        if self._step_chunk is None and reference is None:
            raise ValueError(
                f"PolicySwitch over {env} needs reference=<observation -> chunk> on a per-step "
                "env, or an RLT observation wrapper (with step_chunk and ref_chunk) below it"
            )
        self.horizon, self.action_dim = self._chunk_shape(horizon)
        if self._step_chunk is None:
            self.action_space = _chunk_action_space(env.action_space, self.horizon)
        self._actor_ready = True
        self._switch_on = False
        self._takeover_requested = False
        self._human_engaged = False
        self._instruction = ""
        self._observation: Any = None
        self._info: dict[str, Any] = {}
        self._episode_over = True
        self._resume_pending = False

    @property
    def actor_ready(self) -> bool:
        """Whether the actor may drive; while False, critical-phase chunks run the reference.

        A learner sets it False during warm-up: the critical phase is still recorded
        (`record_transition`) and takeovers are still requested, but neither the actor nor
        the expert drives.
        """
        return self._actor_ready

    @actor_ready.setter
    def actor_ready(self, ready: bool) -> None:
        if self.skip_inactive and not ready:
            raise ValueError(
                "actor_ready=False with skip_inactive=True would skip every chunk; "
                "use skip_inactive=False for warm-up collection"
            )
        self._actor_ready = bool(ready)

    @property
    def next_action_source(self) -> DriverSource:
        """Who drives the next chunk."""
        if self._human_engaged:
            return "human"
        if not (self._switch_on and self._actor_ready):
            return "vla"
        return "expert" if self._takeover_requested else "actor"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode (drop-in mode: up to the first observation the actor drives from)."""
        resume = self._resume_pending and seed is None and options is None
        self._resume_pending = False
        if not resume:
            self._reset_episode(seed, options)
        if self.skip_inactive:
            return self._skip_to_actor()
        return self._observation, self._info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Execute one chunk with the driver chosen for it; see the class doc for the info."""
        result, info = self._run_chunk(actor_action=action)
        truncated = result.truncated
        if self.skip_inactive and not result.done and self.next_action_source != "actor":
            truncated = self._resume_pending = True
        return result.observation, result.reward, result.terminated, truncated, info

    def close(self) -> None:
        """Stop the trigger (e.g. its keyboard listener), release the teleop, close the env."""
        self.trigger.close()
        if self.human_takeover is not None:
            self.human_takeover.close()
        super().close()

    def _reset_episode(self, seed: int | None, options: dict[str, Any] | None) -> None:
        self._observation, info = self.env.reset(seed=seed, options=options)
        update = self.trigger.reset()
        self._switch_on = update.active
        self._takeover_requested = False
        self._human_engaged = False
        if self.expert_takeover is not None:
            self.expert_takeover.reset()
        if self.human_takeover is not None:
            self.human_takeover.reset()
        if self.log_predictions:
            self._instruction = instruction_of(self.env, info)
        self._episode_over = False
        self._info = {
            **info,
            **switch_info(
                source=None,
                decided_in_critical_phase=False,
                decided_takeover=False,
                executed_actions=np.zeros((0, self.action_dim), np.float32),
                event=update.event,
                switch_on=self._switch_on,
                next_source=self.next_action_source,
            ),
        }

    def _skip_to_actor(self) -> tuple[Any, dict[str, Any]]:
        skipped_chunks, skipped_reward, ended_episodes = 0, 0.0, 0
        started_s = time.monotonic()
        with tqdm(
            desc="reset: other drivers run until the actor's turn",
            unit=" chunks",
            delay=RESET_PROGRESS_DELAY_S,
            leave=False,
        ) as progress:
            while self._episode_over or self.next_action_source != "actor":
                if self._episode_over:
                    ended_episodes += 1
                    if ended_episodes > self.max_skipped_episodes:
                        raise RuntimeError(
                            f"the actor got no control in {self.max_skipped_episodes} episodes; "
                            "check the trigger's conditions or raise max_skipped_episodes"
                        )
                    self._reset_episode(None, None)
                    progress.set_postfix(episodes_ended=ended_episodes, refresh=False)
                    continue
                result, _ = self._run_chunk(actor_action=None)
                skipped_chunks += 1
                skipped_reward += result.reward
                progress.update()
        elapsed_s = time.monotonic() - started_s
        if elapsed_s > RESET_PROGRESS_DELAY_S:
            logger.info(
                "reset ran %d chunks (%d episodes ended) in %.0f s before the actor's turn",
                skipped_chunks, ended_episodes, elapsed_s,
            )  # fmt: skip
        info = {
            **self._info,
            SKIPPED_CHUNKS_KEY: skipped_chunks,
            SKIPPED_REWARD_KEY: skipped_reward,
        }
        return self._observation, info

    def _run_chunk(self, actor_action: Any) -> tuple[ChunkResult, dict[str, Any]]:
        """Execute one chunk with its driver; returns the result and the step's info."""
        source = self.next_action_source
        decided_in_critical_phase = self._switch_on
        decided_takeover = self._takeover_requested or self._human_engaged
        # labelled first, so a reference that logs its own prediction can label it with its ids
        log = provenance_of(self.env)
        call_id = None
        if self.log_predictions:
            call_id = label_chunk(log, source, self._instruction, PREDICTION_MODELS.get(source, ""))
        else:
            log.set_action_source(source)
        chunk = self._chunk_for(source, actor_action)
        result, info = self._execute(chunk)
        if call_id is not None:
            log.tool_result(call_id, {"steps": len(result.rewards), "done": result.done})
        self._observation = result.observation
        self._episode_over = result.done
        event = self._update_switch(result)
        info.update(
            switch_info(
                source=source,
                decided_in_critical_phase=decided_in_critical_phase,
                decided_takeover=decided_takeover,
                executed_actions=result.executed_actions,
                event=event,
                switch_on=self._switch_on,
                next_source=self.next_action_source,
            )
        )
        self._info = info
        return result, info

    def _chunk_for(self, source: DriverSource, actor_action: Any) -> np.ndarray | StepPolicy:
        if source == "human":
            return self.human_takeover.step_policy
        if source == "expert":
            return self.expert_takeover.step_policy
        if source == "vla":
            if self._reference is not None:
                return self._reference(self._observation)
            return np.asarray(self._observation["ref_chunk"])[: self.horizon]
        if actor_action is None:
            raise RuntimeError("the actor drives this chunk but no action was given")
        action = np.asarray(actor_action, dtype=np.float32)
        if action.size != self.horizon * self.action_dim:
            raise ValueError(
                f"actor action has shape {action.shape}; expected "
                f"({self.horizon * self.action_dim},) or ({self.horizon}, {self.action_dim})"
            )
        return action.reshape(self.horizon, self.action_dim)

    def _execute(self, chunk: np.ndarray | StepPolicy) -> tuple[ChunkResult, dict[str, Any]]:
        if self._step_chunk is None:
            result = execute_chunk(self.env, self._observation, chunk, self.horizon)
            return result, result.chunk_info()
        observation, _, terminated, truncated, info = self._step_chunk(chunk)
        return ChunkResult.from_chunk_info(observation, terminated, truncated, info), dict(info)

    def _update_switch(self, result: ChunkResult) -> SwitchEvent | None:
        update = self.trigger.update(result.step_infos)
        self._switch_on = update.active
        if self.expert_takeover is not None:
            self._takeover_requested = self.expert_takeover.update(result.step_infos, update.active)
        if self.human_takeover is not None:
            engaged = self.human_takeover.update(result.step_infos, update.active)
            if engaged and not self._human_engaged:
                self.human_takeover.hand_over(result.executed_actions[-1])
            self._human_engaged = engaged
        return update.event

    def _chunk_shape(self, horizon: int | None) -> tuple[int, int]:
        if self._step_chunk is None:
            per_step = self.env.action_space
            if not isinstance(per_step, gym.spaces.Box) or len(per_step.shape) != 1:
                raise ValueError(f"PolicySwitch needs a 1-D Box action space, got {per_step}")
            return horizon or DEFAULT_HORIZON, per_step.shape[0]
        return rlt_chunk_shape(self.env, horizon)


def _find_step_chunk(env: gym.Env) -> Callable[..., tuple] | None:
    try:
        return env.get_wrapper_attr("step_chunk")
    except AttributeError:
        return None


def _chunk_action_space(per_step: gym.spaces.Box, horizon: int) -> gym.spaces.Box:
    return gym.spaces.Box(
        np.tile(per_step.low, horizon), np.tile(per_step.high, horizon), dtype=per_step.dtype
    )
