"""The control loop of a robot run: one env, a local actor, a learner it never waits for.

`ControlLoop` drives one env of an RLT id built with `skip_inactive=False` (every chunk comes
back to the loop, whoever drove it): it steps chunk after chunk at the env's rate, acting with
its own CPU copy of the trained actor (with the exploration noise, as `rpent-stage2` trains;
with Q-ranked acting its copy of the critic picks the chunk, `local_policy.LocalPolicy`), and
between two chunks it

- checks the learner's health (`LearnerLink.health`): a dead or stalled learner stops the run
  at once: nothing more is sent to the arm, so it holds still where the last chunk left it (no
  chunk is replayed), and `LearnerLostError` says what happened and how to resume;
- takes the learner's news (`poll`): newer weights are loaded into the local copies, and the
  env's `actor_ready` follows the weights' (until the learner's warm-up is done the VLA's
  reference drives: an untrained actor never takes the arm);
- sends the chunk's replay transition at once (`stage2.transitions.build_transition`).

A reset motion that the arm stopped and recovered from (`FrankaResetAborted`: franky-sim's
planner fails one now and then; a real arm's reflex) is tried again, with the same seed, up to
`RESET_ATTEMPTS` times in all, each failure logged; then the command ends on it.

At an episode's end it counts the episode in the run's `RobotRunState` and sends it to the
learner (`end_episode`), which saves the run as one set: a kill at any moment loses at most
the episode in progress. With the run's last episode it asks for `LoopPlan.final_updates` more
updates before that save: the arm is done, so they cost no robot time. Between episodes it
waits for the operator's reset key when asked, and with `LoopPlan.learner_catches_up` for the
learner to run every update its schedule owes (and for the weights after them); these waits
are neither robot time nor env steps.

Example:
    >>> loop = ControlLoop(env, link, LoopPlan(total_env_steps=2000, max_episodes=None,
    ...                                        first_seed=0, config=config))
    >>> state = loop.run()  # the counters of the whole run
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rpent_agents.robot.learner_link import LearnerLink
from rpent_agents.robot.learner_service import LearnerStatus
from rpent_agents.robot.local_policy import LocalPolicy
from rpent_agents.robot.run_state import RobotRunState
from rpent_agents.robot.status import StatusLine, status_text
from rpent_agents.stage2.chunk_info import ChunkInfo
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.transitions import RLT_OBS_KEYS, build_transition
from rpent_envs.franka.backend import FrankaResetAborted
from wrappers.console import OperatorConsole

logger = logging.getLogger(__name__)
RESET_ATTEMPTS = 3
"""Tries of a reset whose motion the arm stopped and recovered from, before the run ends."""


class LearnerLostError(RuntimeError):
    """The learner died or stalled: the arm holds still and the run stops (resume it)."""


@dataclass(frozen=True)
class LoopPlan:
    """How long the control loop runs and how it turns chunks into transitions.

    Attributes:
        total_env_steps: Env steps of the whole run after which it stops (at an episode's end).
        max_episodes: Episodes of the whole run after which it stops (None: no limit).
        first_seed: Reset seed of the run's first episode; episode k uses first_seed + k.
        config: The learner's Stage 2 config (chunk length, how transitions are stored).
        wait_for_reset_key: Wait for the operator's reset key before each episode.
        final_updates: Updates the learner runs after the run's last episode, before its
            last save, whatever its schedule owes (0: none).
        learner_catches_up: Before each episode, wait until the learner has saved the
            episodes so far, owes no update and its latest weights are loaded here.
    """

    total_env_steps: int
    max_episodes: int | None
    first_seed: int
    config: Stage2Config
    wait_for_reset_key: bool = False
    final_updates: int = 0
    learner_catches_up: bool = False


@dataclass
class EpisodeReport:
    """What one finished episode did (for the run's scalars and results).

    Attributes:
        success: The episode succeeded (the operator's verdict, or the env's).
        env_steps: Env steps it ran.
        intervention_env_steps: Its steps a human or the scripted expert drove.
        actor_env_steps: Its steps the actor drove.
        transitions: Replay transitions it sent.
        robot_time_s: Seconds from its reset to its end.
    """

    success: bool = False
    env_steps: int = 0
    intervention_env_steps: int = 0
    actor_env_steps: int = 0
    transitions: int = 0
    robot_time_s: float = 0.0


EpisodeEnded = Callable[[EpisodeReport, RobotRunState, LearnerStatus], None]
"""Called after each episode's `end_episode` with its report, the counters and the learner's
latest status."""


class ControlLoop:
    """Drives one RLT env chunk by chunk while the learner trains (see the module docstring).

    Attributes:
        state: The run's counters (the learner's saved ones at the start).
        learner_status: The learner's latest status.
        policy: The local actor (and critic) the learner's weights are loaded into.
        actor_ready: Whether the actor may drive (the learner's warm-up is done).
    """

    def __init__(
        self,
        env: gym.Env,
        link: LearnerLink,
        plan: LoopPlan,
        console: OperatorConsole | None = None,
        status: StatusLine | None = None,
        episode_ended: EpisodeEnded | None = None,
    ) -> None:
        """Drive `env` (an RLT id, `skip_inactive=False`) with the learner behind `link`.

        Args:
            env: The env; its reference drives until the first weights say the actor may.
            link: The learner's link (started: its `run_state` holds the saved counters).
            plan: How long to run and how to store chunks.
            console: The operator's console (the reset key); None: no operator.
            status: The status line to refresh; None: none.
            episode_ended: Called after each episode (see `EpisodeEnded`).
        """
        self.env, self.link, self.plan = env, link, plan
        self.console, self.status, self.episode_ended = console, status, episode_ended
        self.state = dataclasses.replace(link.run_state)
        self.learner_status = LearnerStatus()
        self.policy = LocalPolicy(link.acting_spec, "cpu")
        self.actor_ready = False
        self.loaded_update_step = -1
        env.set_wrapper_attr("actor_ready", False)  # until the learner's weights say otherwise
        self.generator = torch.Generator().manual_seed(
            plan.first_seed + self.state.seeds_handed_out
        )
        self.transition_of = functools.partial(
            build_transition,
            chunk_len=plan.config.chunk_len,
            truncation_ends_bootstrap=plan.config.truncation_ends_bootstrap,
            reference_on_interventions=plan.config.reference_on_interventions,
        )
        self._idle_action = np.zeros(env.action_space.shape, np.float32)
        self._wall_time_before_s = self.state.wall_time_s
        self._started_s = time.monotonic()

    def run(self) -> RobotRunState:
        """Run episodes until the plan's end; returns the run's counters.

        Raises:
            LearnerLostError: When the learner died or stalled (the arm holds still).
        """
        self.take_learner_news()
        while self.goes_on():
            if self.plan.learner_catches_up:
                self.wait_for_learner()
            if self.plan.wait_for_reset_key and self.console is not None:
                self.wait_for_reset()
            self.run_episode()
        self.show("done", running=False)
        return self.state

    def goes_on(self) -> bool:
        """Whether the plan has room for another episode."""
        plan, state = self.plan, self.state
        if plan.max_episodes is not None and state.episodes >= plan.max_episodes:
            return False
        return state.env_steps < plan.total_env_steps

    def run_episode(self) -> EpisodeReport:
        """Reset, run chunks until the episode ends, count it and have the learner save it."""
        self.check_learner()  # before the reset moves the arm
        started_s = time.monotonic()
        report = EpisodeReport()
        seed = self.state.next_seed(self.plan.first_seed)
        obs, info = reset_where_recovered(self.env, seed, self.show)
        done = False
        while not done:
            self.check_learner()
            self.take_learner_news()
            self.show(f"driver {self.env.get_wrapper_attr('next_action_source')}")
            action = self.act(obs)
            next_obs, _, terminated, truncated, info = self.env.step(action)
            transition = self.transition_of(obs, next_obs, info, terminated, truncated)
            if transition is not None:
                self.link.send([transition])
                report.transitions += 1
            self.count_chunk(ChunkInfo.from_info(info), report)
            obs, done = next_obs, terminated or truncated
        report.success = ChunkInfo.from_info(info).success
        report.robot_time_s = time.monotonic() - started_s
        self.end_episode(report)
        return report

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The actor's flat chunk, exploring as `rpent-stage2` does, when it drives next.

        With Q-ranked acting the local critic picks it among perturbations of the actor's and
        the reference's (`LocalPolicy.act`). Zeros otherwise: another driver runs its own chunk.
        """
        if self.env.get_wrapper_attr("next_action_source") != "actor":
            return self._idle_action
        batch = {key: np.asarray(obs[key])[None] for key in RLT_OBS_KEYS}
        return self.policy.act(batch, deterministic=False, generator=self.generator)[0]

    def count_chunk(self, chunk: ChunkInfo, report: EpisodeReport) -> None:
        """Add an executed chunk's steps to the run's counters and the episode's report."""
        intervened = int(np.count_nonzero(chunk.intervened_steps))
        actor = chunk.steps if chunk.actor_switch else 0
        self.state.env_steps += chunk.steps
        self.state.intervention_env_steps += intervened
        self.state.actor_env_steps += actor
        report.env_steps += chunk.steps
        report.intervention_env_steps += intervened
        report.actor_env_steps += actor

    def end_episode(self, report: EpisodeReport) -> None:
        """Count the finished episode and send the counters for the learner's save."""
        state = self.state
        state.episodes += 1
        state.successes += int(report.success)
        state.failures += int(not report.success)
        state.robot_time_s += report.robot_time_s
        state.wall_time_s = self._wall_time_before_s + time.monotonic() - self._started_s
        self.link.end_episode(state, 0 if self.goes_on() else self.plan.final_updates)
        logger.info(
            "episode %d: %s after %d env steps (%d by a human or expert, %d by the actor)",
            state.episodes, "success" if report.success else "failure", report.env_steps,
            report.intervention_env_steps, report.actor_env_steps,
        )  # fmt: skip
        if self.episode_ended is not None:
            self.episode_ended(report, dataclasses.replace(state), self.learner_status)

    def check_learner(self) -> None:
        """Stop the run when the learner is dead or stalled (nothing more goes to the arm).

        Raises:
            LearnerLostError: Saying what happened, what was saved and how to resume.
        """
        failure = self.link.health()
        if failure is None:
            return
        saved = self.learner_status.saved_episodes
        raise LearnerLostError(
            f"{failure}; the arm holds still and the run stopped (the learner last confirmed a "
            f"save of {saved} episodes): run the same command with --resume to continue"
        )

    def take_learner_news(self) -> None:
        """Load newer weights into the local copies; the actor drives once the learner says so."""
        weights, self.learner_status = self.link.poll()
        if weights is None:
            return
        self.policy.load(weights)
        self.loaded_update_step = weights.update_step
        if weights.actor_ready != self.actor_ready:
            self.actor_ready = weights.actor_ready
            self.env.set_wrapper_attr("actor_ready", self.actor_ready)
            if self.actor_ready:
                logger.info("update %d: warm-up done, the actor may drive", weights.update_step)

    def wait_for_learner(self) -> None:
        """Wait for the learner (`LoopPlan.learner_catches_up`) to catch up.

        Until it has saved the episodes so far, owes no update, and its weights after the last
        update are loaded here.

        Raises:
            LearnerLostError: When the learner dies or stalls during the wait.
        """
        while True:
            self.check_learner()
            self.take_learner_news()
            status = self.learner_status
            if (
                status.saved_episodes >= self.state.episodes
                and status.updates_owed == 0
                and self.loaded_update_step >= status.updates
            ):
                return
            self.show(f"the learner catches up: {status.updates_owed} updates owed")
            time.sleep(0.05)

    def wait_for_reset(self) -> None:
        """Wait for the operator's reset key, keeping the status and the learner's news fresh.

        Raises:
            LearnerLostError: When the learner dies or stalls during the wait.
        """
        key = self.console.keys.reset
        activity = f"waiting for the reset key: press {key} once the scene is reset"

        def learner_lost() -> bool:
            self.take_learner_news()
            self.show(activity)
            return self.link.health() is not None

        self.show(activity)
        if not self.console.wait_for_reset(should_stop=learner_lost):
            self.check_learner()

    def show(self, activity: str, running: bool = True) -> None:
        """Refresh the status line with `activity` (`running`: an episode is to come)."""
        if self.status is not None:
            total_env_steps, learner = self.plan.total_env_steps, self.learner_status
            self.status.show(status_text(activity, self.state, total_env_steps, learner, running))


def reset_where_recovered(
    env: gym.Env, seed: int, show: Callable[[str], None]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """`env.reset(seed=seed)`, tried `RESET_ATTEMPTS` times in all where the arm stopped it.

    A try that raises `FrankaResetAborted` (the arm stopped the reset motion and recovered) is
    logged, shown (`show`) and run again from where the arm holds.

    Raises:
        FrankaResetAborted: When the last try fails so too.
    """
    attempt = 1
    while True:
        try:
            return env.reset(seed=seed)
        except FrankaResetAborted as error:
            if attempt == RESET_ATTEMPTS:
                raise
            logger.warning("%s (try %d of %d)", error, attempt, RESET_ATTEMPTS)
            show(f"reset again after: {error}")
            attempt += 1


def episode_scalars(report: EpisodeReport, learner: LearnerStatus) -> dict[str, Any]:
    """The TensorBoard scalars of a finished episode and the learner's latest losses."""
    scalars = {
        "robot/success": float(report.success),
        "robot/episode_env_steps": float(report.env_steps),
        "robot/intervention_env_steps": float(report.intervention_env_steps),
        "robot/actor_env_steps": float(report.actor_env_steps),
        "robot/transitions": float(report.transitions),
        "robot/episode_robot_time_s": report.robot_time_s,
        "learner/updates": float(learner.updates),
        "learner/replay_size": float(learner.replay_size),
        "learner/actor_ready": float(learner.actor_ready),
    }
    return scalars | dict(learner.scalars)
