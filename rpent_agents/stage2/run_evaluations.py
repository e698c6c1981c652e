"""The evaluations of one `rpent-stage2` run: the base once, the actor's curve, the test seeds.

Every evaluation runs one episode per seed on the run's training workers (`evaluate_on_seeds`:
no expert, the reference outside the gate). The base policy (reference chunks only) is
measured once, on the validation seeds; the actor then on the same seeds at points of
training, the curve; and, when the run names test seeds (`--test-seed`), the base and the
final actor once more at the end on those, which nothing was chosen on: the run's final
figures, with Wilson 95% intervals. An actor whose warm-up has not ended
(`Stage2Learner.ready_for_online` False) never drives, here as in training: its points
measure the reference, and say so (`EvalPoint.actor_ready`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rpent_agents.rollout.vector import FeaturizedVectorEnv
from rpent_agents.stage2.evaluation import EvalResult, evaluate_on_seeds, evaluation_on_test_seeds
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.results import EvalPoint, LearningResults, TestEvaluation
from rpent_agents.stage2.scalar_log import ScalarLog

logger = logging.getLogger(__name__)


class RunEvaluations:
    """Evaluate a run's base policy and actor on its workers, into its results and log."""

    def __init__(
        self,
        envs: FeaturizedVectorEnv,
        learner: Stage2Learner,
        results: LearningResults,
        log: ScalarLog,
        ready_envs: int,
    ) -> None:
        """Evaluate on `envs` with `learner`'s mean chunks (`ready_envs`: `evaluate_on_seeds`)."""
        self.envs, self.learner, self.results, self.log = envs, learner, results, log
        self.ready_envs = ready_envs
        self.latest_wall_time_s = 0.0

    def evaluate(self, seeds: Sequence[int], actor_ready: bool, label: str) -> EvalResult:
        """One episode per seed; the actor's chunk where the gate opens, if `actor_ready`."""
        result = evaluate_on_seeds(
            self.envs,
            seeds,
            act=lambda obs: self.learner.act(obs, deterministic=True),
            actor_ready=actor_ready,
            progress_label=label,
            ready_envs=self.ready_envs,
        )
        self.results.eval_env_steps += result.env_steps
        self.results.add_wall_time("evaluations" if actor_ready else "base_evaluation",
                                   result.wall_time_s)  # fmt: skip
        self.latest_wall_time_s = result.wall_time_s
        return result

    def base(self, env_steps: int) -> None:
        """The base policy on the validation seeds (reference chunks only; once per run)."""
        base = self.evaluate(self.results.eval_seeds, False, "eval base policy")
        self.results.base_success_rate = base.success_rate
        self.results.base_successful_seeds = base.successful_seeds
        self.results.base_median_success_len = base.median_success_len
        self.results.base_critical_phase_median_steps = base.critical_phase_median_steps
        self.log.write({"eval/base_success_once": base.success_rate} | base.scalars, env_steps)
        logger.info("base policy success %.3f (%.0f s)", base.success_rate, base.wall_time_s)

    def actor(self, env_steps: int, wall_time_s: float) -> EvalPoint:
        """The actor on the validation seeds: a point of the curve, added to the results."""
        ready = self.learner.ready_for_online
        result = self.evaluate(self.results.eval_seeds, ready, "eval actor")
        point = result.point(env_steps, self.learner.update_step, wall_time_s, actor_ready=ready)
        self.results.add_eval(point)
        self.log.write(result.scalars, step=env_steps)
        logger.info(
            "env step %d: %s success %.3f (base %.3f)", env_steps,
            "actor" if ready else "reference (actor not ready)", result.success_rate,
            self.results.base_success_rate,
        )  # fmt: skip
        return point

    def test(self, seeds: Sequence[int], env_steps: int) -> TestEvaluation:
        """The base and the final actor on the test seeds: the run's final figures."""
        base = self.evaluate(seeds, False, "test base policy")
        ready = self.learner.ready_for_online
        actor = self.evaluate(seeds, ready, "test actor")
        test = evaluation_on_test_seeds(seeds, base, actor, ready)
        self.results.test = test
        scalars = {"test/success_once": test.success_rate, "test/base_success_once":
                   test.base_success_rate}  # fmt: skip
        self.log.write(scalars, step=env_steps)
        logger.info(
            "test seeds %d..%d: actor %.3f %s, base %.3f %s", seeds[0], seeds[-1],
            test.success_rate, test.success_ci95, test.base_success_rate, test.base_success_ci95,
        )  # fmt: skip
        return test
