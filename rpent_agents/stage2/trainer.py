"""The Stage 2 training run on the peg RLT stack: `train(args)` and its loop, `Stage2Run`.

Read top to bottom: `Stage2Run` holds the vector env (workers simulate, the learner's process
featurizes), the learner and the run's records. It measures the base policy once on held-out
seeds, then loops: the actor's chunks go to the workers, the learner updates while they
simulate, critical-phase chunks become replay transitions, finished episodes restart;
periodic evaluations on the same seeds, checkpoints and results. `train` builds the workers
(`make_training_envs`), starts or resumes the run folder (`rpent_agents.stage2.run_folder`)
and runs it. The arguments are `rpent_agents.stage2.train_args`'s; the command line is
`rpent_agents.stage2.train` (`rpent-stage2`).

Example:
    >>> args = Stage2TrainArgs.sample_efficient(output_dir=Path("runs/rlt_fast"))
    >>> results = train(args)
    >>> results.base_success_rate, results.final_success_rate
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time

import numpy as np
from tqdm import tqdm

from rpent_agents.rollout.ray_rollout import make_ray_vector_env
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import (
    FeaturizedVectorEnv,
    discarded_envs,
    make_rlt_vector_env,
    reset_envs,
)
from rpent_agents.rollout.worker import NO_RESET_SEED, WorkerMode
from rpent_agents.stage2.evaluation import EvalResult, evaluate_on_seeds
from rpent_agents.stage2.learner import Stage2Learner, TrainStepScalars
from rpent_agents.stage2.loop_profile import LoopProfile, PartTimer
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.results import LearningResults
from rpent_agents.stage2.rollout_stats import ChunkStats, EpisodeStats, RolloutDiagnostics
from rpent_agents.stage2.run_folder import (
    RunState,
    WallClock,
    save_to_folder,
    stage2_config_of_run,
    start_or_resume,
)
from rpent_agents.stage2.scalar_log import ScalarLog
from rpent_agents.stage2.train_args import Stage2TrainArgs
from rpent_agents.stage2.transitions import (
    build_transition,
    final_observations,
    vector_step_items,
)

logger = logging.getLogger(__name__)
SAVE_RESERVE_S = 30.0
"""Time kept back at the end of a budgeted run for the last checkpoint and results."""


class Stage2Run:
    """One training command: the workers, the learner and the run's records."""

    def __init__(
        self,
        args: Stage2TrainArgs,
        envs: FeaturizedVectorEnv,
        learner: Stage2Learner,
        state: RunState,
        results: LearningResults,
        log: ScalarLog,
        started_s: float,
    ) -> None:
        """Hold the pieces of one command; `run()` trains."""
        self.args, self.envs, self.learner, self.log = args, envs, learner, log
        self.state, self.results = state, results
        self.clock = WallClock(args.max_minutes, state.wall_time_s, started_s)
        self.num_envs = envs.num_envs
        self.chunk_stats, self.episode_stats = ChunkStats(), EpisodeStats(self.num_envs)
        self.diagnostics = RolloutDiagnostics(self.num_envs)
        self.profile = LoopProfile()
        # The latest train step's scalars, read one loop step later (its updates run meanwhile).
        self.unread_train_scalars: TrainStepScalars | None = None
        self.actor_ready = learner.ready_for_online
        # Worker processes can step asynchronously (`ready_envs`); Ray's workers step together.
        self.ready_envs = args.ready_envs if envs.can_step_ready_envs else 0
        self.iteration = 0
        self.obs: dict[str, np.ndarray] = {}
        self.actions = np.zeros(envs.action_space.shape, np.float32)
        self.steps_at_log, self.time_at_log = state.env_steps, time.monotonic()  # env steps/s

    def run(self) -> LearningResults:
        """Train until total_env_steps or the time budget; evaluate and save at the end."""
        with self.learner.ahead_of_updates():  # featurizing and acting before queued updates
            return self._run()

    def _run(self) -> LearningResults:
        if self.results.base_success_rate is None:
            self.measure_base_policy()
        self.checkpoint()
        self.obs = self.start_training_episodes()
        with tqdm(total=self.args.total_env_steps, initial=self.state.env_steps) as progress:
            while self.training_goes_on():
                progress.update(self.collect_and_learn())
                if self.evaluates_now():
                    progress.update(self.finish_busy_chunks())
                    self.evaluate_actor()
                    self.checkpoint()
                    self.obs = self.start_training_episodes()
                elif self.save_due():
                    self.checkpoint()
            progress.update(self.finish_busy_chunks())
        self.write_train_scalars(None)
        if self.state.last_eval_env_steps != self.state.env_steps:
            self.evaluate_actor()
        finished = self.state.env_steps >= self.args.total_env_steps
        self.results.stop_reason = "total_env_steps" if finished else "max_minutes"
        self.checkpoint()
        return self.results

    def training_goes_on(self) -> bool:
        """Whether the loop runs another step: env steps left and time for an evaluation."""
        return self.state.env_steps < self.args.total_env_steps and self.time_left_for(1)

    def evaluates_now(self) -> bool:
        """Whether the loop evaluates after this step (due, with time for one more after)."""
        return self.evaluation_due() and self.time_left_for(2)

    def time_left_for(self, evaluations: int) -> bool:
        """Whether the budget still has room for `evaluations` evaluations and a save."""
        # An evaluation is expected to take about as long as the latest one did.
        needed_s = evaluations * 1.25 * self.state.eval_wall_time_s + SAVE_RESERVE_S
        return self.clock.has_time_for(needed_s)

    def collect_and_learn(self, send: bool = True) -> int:
        """One chunk in every worker while the learner updates; returns the simulator steps.

        Every env gets a fresh seed with its chunk: a worker whose episode ends starts the
        next one with it at once (`FeaturizedVectorEnv`), so no worker waits for a reset. The
        answered workers get their next chunks before the answered chunks are stored, so the
        storing runs while they simulate; no chunk is sent when the loop pauses after this
        step (an evaluation, the end, the actor taking over). With `ready_envs` (asynchronous)
        the step ends once `ready_envs` of the busy workers have answered; `send=False` hands
        out no chunk (the busy workers finish theirs).
        """
        timer = PartTimer()
        if send and not self.envs.busy.any():
            self.send_chunks()  # the first chunks after a pause
        timer.lap("act_s")
        # Queued on the GPU, which runs the updates while the workers simulate and this
        # process waits for them; the scalars are read at the end of the next loop step.
        train_scalars = self.learner.start_train_step()
        timer.lap("learner_s")
        next_obs, _, terminated, truncated, infos = self.envs.step_wait(self.min_ready(send))
        timer.lap("wait_s", minus_s={"featurize_s": self.envs.last_featurize_s})
        answered = self.envs.last_ready
        done = (terminated | truncated) & answered
        discarded = discarded_envs(infos, self.num_envs)
        skipped = ~answered | discarded
        steps = int(infos["chunk_len"][~skipped].sum())
        self.state.env_steps += steps
        decided_obs, decided_actions = self.obs, self.actions.copy()
        self.obs = next_obs  # a busy worker's row: the observation its chunk was decided from
        if send and not self.pauses_after_step():
            self.send_chunks()
        timer.lap("act_s")
        self.abandon_episodes(discarded)
        ended_obs = final_observations(next_obs, infos, done)
        self.store_transitions(
            decided_obs, decided_actions, ended_obs, infos, terminated, truncated, skipped
        )
        timer.lap("store_s")
        self.profile.add_step(timer.part_s, infos)
        self.state.episodes_finished += int(done.sum())
        if send and self.learner.ready_for_online != self.actor_ready:
            steps += self.finish_busy_chunks()  # the workers' drivers change together
            self.actor_ready = self.learner.ready_for_online
            self.envs.set_worker_mode(WorkerMode.training(self.actor_ready, self.args.env))
            logger.info("env step %d: the actor drives the critical phase", self.state.env_steps)
        self.iteration += 1
        self.write_train_scalars(train_scalars)
        return steps

    def write_train_scalars(self, train_scalars: TrainStepScalars | None) -> None:
        """Write the previous train step's scalars and keep `train_scalars` for the next call.

        Reading a step's scalars waits for its updates: one loop step later they have run
        beside it (with `act_during_updates` nothing else in the loop waits for them). None
        writes the last ones (the end of training).
        """
        previous, self.unread_train_scalars = self.unread_train_scalars, train_scalars
        if previous is not None:
            self.write_scalars(previous.read())

    def pauses_after_step(self) -> bool:
        """Whether the loop stops sending chunks after this step (see `run`).

        It pauses to evaluate, at the end of the run, and when the learner lets the actor
        drive (the workers' drivers change together). A pause that this misses (the wall
        clock runs out between here and `run`'s check) costs only the chunks in flight, which
        `finish_busy_chunks` collects.
        """
        return (
            not self.training_goes_on()
            or self.evaluates_now()
            or self.learner.ready_for_online != self.actor_ready
        )

    def send_chunks(self) -> None:
        """The actor's chunks to the idle workers (every worker when stepping synchronously)."""
        idle = np.flatnonzero(~self.envs.busy)
        self.actions[idle] = self.learner.act(
            {key: values[idle] for key, values in self.obs.items()}
        )
        reset_seeds = np.full(self.num_envs, NO_RESET_SEED, np.int64)
        reset_seeds[idle] = self.state.next_seeds(len(idle), self.args.train_seed)
        self.envs.step_async(
            self.actions, reset_seeds, env_indices=idle if self.ready_envs else None
        )

    def min_ready(self, send: bool) -> int | None:
        """How many busy workers the step waits for (None: every worker, synchronous)."""
        if not self.ready_envs:
            return None
        busy = int(self.envs.busy.sum())
        return busy if not send else min(self.ready_envs, busy)

    def finish_busy_chunks(self) -> int:
        """Let the busy workers finish their chunks (none sent after them); their env steps."""
        steps = 0
        while self.envs.busy.any():
            steps += self.collect_and_learn(send=False)
        return steps

    def abandon_episodes(self, discarded: np.ndarray) -> None:
        """Drop the statistics of the episodes lost with a Ray worker (they start over)."""
        for env_index in np.flatnonzero(discarded):
            self.episode_stats.abandon(env_index)
            self.diagnostics.abandon_episode(env_index)
        self.state.episodes_discarded += int(discarded.sum())

    def store_transitions(
        self,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        next_obs: dict,
        infos: dict,
        terminated: np.ndarray,
        truncated: np.ndarray,
        skipped: np.ndarray,
    ) -> None:
        """Store the critical-phase chunks of one vector step, decided from `obs` as `actions`.

        The envs of `skipped` returned no chunk (their worker was lost, or is still busy). The
        diagnostics' Q values of the stored chunks come from one critic call.
        """
        config = self.learner.config
        items = list(vector_step_items(obs, next_obs, infos, terminated, truncated, skipped))
        transition_of = functools.partial(
            build_transition,
            chunk_len=config.chunk_len,
            truncation_ends_bootstrap=config.truncation_ends_bootstrap,
            reference_on_interventions=config.reference_on_interventions,
        )
        transitions = [transition_of(*item) for item in items]
        self.learner.add_transitions(transitions)
        q_values = self.learner.q_values(transitions)
        kept_envs = np.flatnonzero(~skipped)
        for env_index, (env_obs, _, info, ended, cut), transition, q_value in zip(
            kept_envs, items, transitions, q_values, strict=True
        ):
            self.chunk_stats.record(info, transition)
            self.episode_stats.record(env_index, info, ended or cut)
            self.diagnostics.record(
                env_index, info, env_obs, actions[env_index], q_value, ended or cut
            )

    def start_training_episodes(self) -> dict[str, np.ndarray]:
        """Reset every worker with fresh training seeds and the training drivers."""
        self.envs.set_worker_mode(WorkerMode.training(self.learner.ready_for_online, self.args.env))
        seeds = self.state.next_seeds(self.num_envs, self.args.train_seed)
        self.steps_at_log, self.time_at_log = self.state.env_steps, time.monotonic()
        self.diagnostics.abandon_episodes()
        obs, _ = reset_envs(self.envs, np.ones(self.num_envs, bool), seeds)
        return obs

    def write_scalars(self, train_scalars: dict[str, float]) -> None:
        """Learner scalars when it updated; all scalars every log_every_iterations."""
        step = self.state.env_steps
        rollout_due = self.iteration % self.args.log_every_iterations == 0
        if rollout_due or train_scalars.get("train/rlt/critic_updates_run", 0.0) > 0:
            self.log.write(train_scalars, step=step)
        if not rollout_due:
            return
        now = time.monotonic()
        speed = (step - self.steps_at_log) / max(now - self.time_at_log, 1e-9)
        self.steps_at_log, self.time_at_log = step, now
        rollout = self.chunk_stats.scalars() | self.episode_stats.scalars()
        rollout |= self.diagnostics.scalars() | self.learner.replay_scalars()
        rollout["train/episodes_discarded"] = float(self.state.episodes_discarded)
        self.log.write(rollout | {"train/env_steps_per_s": speed}, step=step)
        self.results.train_env_steps_per_s.append(round(speed, 1))

    def evaluation_due(self) -> bool:
        """Whether eval_every_env_steps passed since the last evaluation."""
        since_eval = self.state.env_steps - max(self.state.last_eval_env_steps, 0)
        return since_eval >= self.args.eval_every_env_steps

    def save_due(self) -> bool:
        """Whether save_every_env_steps passed since the last checkpoint."""
        since_save = self.state.env_steps - self.state.last_save_env_steps
        return since_save >= self.args.save_every_env_steps

    def evaluate(self, actor_ready: bool) -> EvalResult:
        """One episode per held-out seed; the actor's mean chunk where it drives."""
        args = self.args
        result = evaluate_on_seeds(
            self.envs,
            range(args.eval_seed, args.eval_seed + args.num_eval_episodes),
            act=lambda obs: self.learner.act(obs, deterministic=True),
            actor_ready=actor_ready,
            progress_label="eval actor" if actor_ready else "eval base policy",
            ready_envs=args.eval_ready_envs,
        )
        self.results.eval_env_steps += result.env_steps
        self.state.eval_wall_time_s = result.wall_time_s
        part = "evaluations" if actor_ready else "base_evaluation"
        self.results.add_wall_time(part, result.wall_time_s)
        return result

    def measure_base_policy(self) -> None:
        """Base policy success on the held-out seeds (reference chunks only; once per run)."""
        base = self.evaluate(actor_ready=False)
        self.results.base_success_rate = base.success_rate
        self.results.base_successful_seeds = base.successful_seeds
        self.results.base_median_success_len = base.median_success_len
        self.results.base_critical_phase_median_steps = base.critical_phase_median_steps
        scalars = {"eval/base_success_once": base.success_rate} | base.scalars
        self.log.write(scalars, step=self.state.env_steps)
        logger.info("base policy success %.3f (%.0f s)", base.success_rate, base.wall_time_s)

    def evaluate_actor(self) -> None:
        """Evaluate the actor and add the point to the curve."""
        result = self.evaluate(actor_ready=True)
        point = result.point(
            self.state.env_steps, self.learner.update_step, self.clock.run_wall_time_s
        )
        self.results.add_eval(point)
        self.state.last_eval_env_steps = self.state.env_steps
        self.episode_stats = EpisodeStats(self.num_envs)  # its episodes were abandoned
        self.log.write(result.scalars, step=self.state.env_steps)
        logger.info(
            "env step %d: actor success %.3f (base %.3f)",
            self.state.env_steps, result.success_rate, self.results.base_success_rate,
        )  # fmt: skip

    def checkpoint(self) -> None:
        """Save the run with its results as one set, then the results' copy and the plot."""
        started_s = time.monotonic()
        self.state.wall_time_s = self.clock.run_wall_time_s
        self.results.loop_profile = self.profile.summary()
        save_to_folder(
            self.args.output_dir, self.learner, self.state, self.results,
            gate=self.args.env.gate_settings(),
        )  # fmt: skip
        self.results.add_wall_time("checkpoints", time.monotonic() - started_s)


def make_training_envs(args: Stage2TrainArgs, env_config: PegRLTConfig) -> FeaturizedVectorEnv:
    """The training vector env of `args.rollout`: worker processes here, or Ray actors."""
    if args.rollout == "ray":
        return make_ray_vector_env(env_config, args.ray, args.worker_torch_threads)
    return make_rlt_vector_env(env_config, args.num_envs, args.worker_torch_threads)


def train(args: Stage2TrainArgs) -> LearningResults:
    """Run (or resume) the training; returns the results also written to results.json.

    Raises:
        ValueError: When the arguments cannot run together (`Stage2TrainArgs.check`).
    """
    started_s = time.monotonic()  # the budget and the wall time include the workers' start
    args.check()
    config = stage2_config_of_run(args)
    env_config = dataclasses.replace(args.env, chunk_len=config.chunk_len)
    envs = make_training_envs(args, env_config)
    try:
        dims = RLTDims.from_observation_space(envs.single_observation_space)
        learner, state, results = start_or_resume(args, config, dims)
        results.add_wall_time("workers_start", time.monotonic() - started_s)
        with ScalarLog(args.output_dir / "tensorboard") as log:
            return Stage2Run(args, envs, learner, state, results, log, started_s).run()
    finally:
        envs.close()
