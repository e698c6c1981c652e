"""A Stage 2 run's folder across commands: fresh or resumed, its counters and its clock.

`rpent-stage2 --output-dir D` keeps the learner's checkpoint in D/run/ with the results saved
beside it as one set, and a copy of the results in D/results.json (`save_to_folder`). A fresh
run refuses a folder that holds one; `--resume` continues it with its saved Stage 2 config, its
counters (`RunState`, the checkpoint's `extra`) and its results, and `WallClock` adds this
command's time to the run's earlier parts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpent_agents.common.atomic_save import complete_interrupted_save
from rpent_agents.stage2.checkpoint import CONFIG_FILE, resume_run, save_run
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.demo_replay import start_from_demos
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.results import LearningResults
from rpent_agents.stage2.train_args import Stage2TrainArgs

logger = logging.getLogger(__name__)
RESULTS_FILE = "results.json"


@dataclass
class RunState:
    """Counters a checkpoint keeps next to the learner (its `extra`)."""

    env_steps: int = 0
    seeds_handed_out: int = 0
    episodes_finished: int = 0
    episodes_discarded: int = 0
    """Training episodes lost with a Ray worker (never finished, no statistics)."""
    wall_time_s: float = 0.0
    last_eval_env_steps: int = -1
    last_save_env_steps: int = 0
    eval_wall_time_s: float = 60.0

    def next_seeds(self, count: int, first_seed: int) -> list[int]:
        """`count` training seeds never handed out before (first_seed, first_seed + 1, ...)."""
        first = first_seed + self.seeds_handed_out
        self.seeds_handed_out += count
        return list(range(first, first + count))


class WallClock:
    """This command's time against --max-minutes, and the run's wall time over resumes."""

    def __init__(self, max_minutes: float, earlier_wall_time_s: float, started_s: float) -> None:
        """Count from `started_s` (monotonic), after `earlier_wall_time_s` of earlier parts."""
        self.started_s = started_s
        self.max_s = max_minutes * 60.0
        self.earlier_wall_time_s = earlier_wall_time_s

    @property
    def elapsed_s(self) -> float:
        """Seconds since this command started."""
        return time.monotonic() - self.started_s

    @property
    def run_wall_time_s(self) -> float:
        """Seconds of the whole run, resumed parts included."""
        return self.earlier_wall_time_s + self.elapsed_s

    def has_time_for(self, seconds: float) -> bool:
        """Whether `seconds` more fit in this command's budget."""
        return self.max_s <= 0 or self.elapsed_s + seconds <= self.max_s


def stage2_config_of_run(args: Stage2TrainArgs) -> Stage2Config:
    """Check args.output_dir; the saved Stage 2 config when resuming, else the command line's.

    Raises:
        FileExistsError: A fresh run into a folder that holds one (nothing is overwritten).
        FileNotFoundError: --resume without a run in the folder.
    """
    run_dir = args.output_dir / "run"
    if not args.resume:
        if run_dir.exists() or (args.output_dir / RESULTS_FILE).exists():
            raise FileExistsError(
                f"{args.output_dir} holds a run; pass --resume to continue it or choose another "
                "--output-dir"
            )
        return args.stage2
    complete_interrupted_save(run_dir)
    for path in (run_dir / CONFIG_FILE, saved_results_path(args.output_dir)):
        if not path.is_file():
            raise FileNotFoundError(f"--resume: {path} is missing; no run to continue there")
    logger.info("resuming %s with its saved Stage 2 config (--stage2.* ignored)", args.output_dir)
    return Stage2Config.from_json(run_dir / CONFIG_FILE)


def saved_results_path(output_dir: Path) -> Path:
    """The results saved with the learner in run/ (next to run/ for runs saved before they were)."""
    with_learner = output_dir / "run" / RESULTS_FILE
    return with_learner if with_learner.is_file() else output_dir / RESULTS_FILE


def start_or_resume(
    args: Stage2TrainArgs, config: Stage2Config, dims: RLTDims
) -> tuple[Stage2Learner, RunState, LearningResults]:
    """A fresh learner and results, or the ones saved in args.output_dir.

    A fresh learner starts from its config's demonstrations (`demo_replay.start_from_demos`).
    """
    eval_seeds = list(range(args.eval_seed, args.eval_seed + args.num_eval_episodes))
    if not args.resume:
        results = LearningResults(
            eval_seeds=eval_seeds, args=dataclasses.asdict(args), train_seed=args.train_seed
        )
        learner = Stage2Learner(config, dims)
        start_from_demos(learner)
        return learner, RunState(), results
    learner, extra = resume_run(args.output_dir / "run")
    results = LearningResults.load(saved_results_path(args.output_dir))
    if results.eval_seeds != eval_seeds:
        raise ValueError(
            f"--eval-seed/--num-eval-episodes give seeds {eval_seeds[0]}..{eval_seeds[-1]}; the "
            f"run was evaluated on {results.eval_seeds[0]}..{results.eval_seeds[-1]}: pass those"
        )
    return learner, RunState(**extra), results


def save_to_folder(
    output_dir: Path,
    learner: Stage2Learner,
    state: RunState,
    results: LearningResults,
    gate: dict[str, Any],
) -> None:
    """Save the learner, its counters and the results in output_dir/run as one set.

    Then the results' copy next to run/ and the success-curve plot. `state` and `results`
    take the learner's counts first; `gate` is stored with the actor (`save_run`).
    """
    state.last_save_env_steps = state.env_steps
    results.env_steps = state.env_steps
    results.set_wall_time(state.wall_time_s)
    results.transitions, results.updates = learner.replay.total_added, learner.update_step
    save_run(
        learner,
        output_dir / "run",
        extra=dataclasses.asdict(state),
        write_more=lambda staging: results.save(staging / RESULTS_FILE),
        gate=gate,
    )
    results.save(output_dir / RESULTS_FILE)
    results.plot(output_dir / "success_curve.png")
