"""`rpent-stage2-robot`: Stage 2 on one env of an RLT id, a robot with a human in the loop.

    rpent-stage2-robot real-robot --output-dir runs/franka --env-kwargs '{"checkpoint":
        "ckpt/franka", "host": "172.16.0.2", "camera": "realsense", "wrist_camera": "realsense"}'
    rpent-stage2-robot sim-stand-in --output-dir runs/standin   # no hardware: the peg sim
    rpent-stage2-robot real-robot --output-dir runs/franka --resume
    rpent-stage2-robot real-robot --learner ray --ray-address auto   # the learner on a GPU host

Read top to bottom: `train` starts the learner (a child process, or a Ray actor with the
control loop as a Ray actor on the robot's node: `train_on_ray`), builds the env with the
operator's console (`robot_env`), and runs the `ControlLoop` until `--total-env-steps` or
`--max-episodes`. The output folder gets run/ (learner, replay, optimizers, counters: one set,
saved at every episode's end), results.json (rewritten after every episode), tensorboard/
and trajectories/ (every episode, exportable with rpent-flywheel). A learner that dies or
stalls ends the command with one line saying what happened and how to resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import torch
import tyro
from tqdm.contrib.logging import logging_redirect_tqdm

from recorders.record_format import write_json_atomic
from rpent_agents.common.cli import LOG_FORMAT, command
from rpent_agents.robot.config import PRESETS, RobotTrainArgs
from rpent_agents.robot.control_loop import (
    ControlLoop,
    EpisodeReport,
    LearnerLostError,
    LoopPlan,
    episode_scalars,
)
from rpent_agents.robot.control_period import ControlPeriods
from rpent_agents.robot.learner_host import LearnerLinkOptions
from rpent_agents.robot.learner_link import LearnerLink, ProcessLearnerLink
from rpent_agents.robot.learner_service import LearnerSetup, LearnerStatus
from rpent_agents.robot.ray_learner_link import (
    LEARNER_RESOURCE,
    NEEDED_FOR,
    ROBOT_RESOURCE,
    RayLearnerLink,
    robot_node_actor,
)
from rpent_agents.robot.robot_env import make_console, make_robot_env
from rpent_agents.robot.run_state import RobotRunState
from rpent_agents.robot.status import StatusLine
from rpent_agents.rollout.ray_vector_env import import_ray
from rpent_agents.stage2.checkpoint import CONFIG_FILE
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.scalar_log import ScalarLog
from wrappers.console import OperatorConsole

logger = logging.getLogger(__name__)
RUN_DIR = "run"
RESULTS_FILE = "results.json"
MakeLink = Callable[[LearnerSetup, LearnerLinkOptions], LearnerLink]


@dataclass
class RobotResults:
    """What a robot run did (results.json; counters over the whole run, resumed parts included).

    The control period's figures are this command's (a resumed part measures its own).
    """

    episodes: int = 0
    """Episodes finished."""
    successes: int = 0
    """Episodes that succeeded (the operator's verdict, or the env's)."""
    env_steps: int = 0
    """Env steps the arm executed, whoever drove."""
    intervention_env_steps: int = 0
    """Env steps a human (teleop) or the scripted expert drove."""
    actor_env_steps: int = 0
    """Env steps the actor drove."""
    updates: int = 0
    """The learner's updates."""
    transitions: int = 0
    """Transitions the learner stored."""
    replay_size: int = 0
    """Transitions in its replay buffer."""
    robot_time_s: float = 0.0
    """Seconds of episodes (the operator's reset waits left out)."""
    wall_time_s: float = 0.0
    """Seconds of the whole run, up to the last episode's end."""
    control_period_s: float | None = None
    """The env's own control period (None: a simulator keeping none)."""
    control_period_p50_s: float | None = None
    """Median of the measured step-to-step periods of the raw env."""
    control_period_p95_s: float | None = None
    """Their 95th percentile."""
    control_period_p99_s: float | None = None
    """Their 99th percentile."""
    control_period_max_s: float | None = None
    """The longest."""
    control_period_samples: int = 0
    """Periods measured."""
    control_period_late_steps: int | None = None
    """Periods over 1.1 x control_period_s (None: the env keeps no period)."""
    stop_reason: str = "running"
    """"running" (written after an episode), "total_env_steps", "max_episodes", or what
    happened to the learner."""

    @classmethod
    def of(
        cls,
        state: RobotRunState,
        learner: LearnerStatus,
        periods: ControlPeriods,
        stop_reason: str = "running",
    ) -> RobotResults:
        """The results of a run at `state`, the learner at `learner`, the clock's `periods`."""
        return cls(
            episodes=state.episodes, successes=state.successes, env_steps=state.env_steps,
            intervention_env_steps=state.intervention_env_steps,
            actor_env_steps=state.actor_env_steps, updates=learner.updates,
            transitions=learner.transitions, replay_size=learner.replay_size,
            robot_time_s=state.robot_time_s, wall_time_s=state.wall_time_s,
            stop_reason=stop_reason, **periods.summary(),
        )  # fmt: skip

    def save(self, path: Path) -> None:
        """Write the results as JSON to `path`, replacing the file in one step."""
        write_json_atomic(path, dataclasses.asdict(self))


def check_output_dir(args: RobotTrainArgs) -> None:
    """Refuse a fresh run into a folder holding one, and --resume without one.

    With a Ray learner the run folder lies where the learner runs: the learner checks it.

    Raises:
        FileExistsError: A fresh run into a folder that holds one (nothing is overwritten).
        FileNotFoundError: --resume without a run in the folder.
    """
    run_dir = args.output_dir / RUN_DIR
    if not args.resume and (run_dir.exists() or (args.output_dir / RESULTS_FILE).exists()):
        raise FileExistsError(
            f"{args.output_dir} holds a run; pass --resume to continue it or choose another "
            "--output-dir"
        )
    if args.resume and args.learner == "process" and not (run_dir / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"--resume: {args.output_dir} holds no run ({RUN_DIR}/ is empty)")


def make_process_link(setup: LearnerSetup, options: LearnerLinkOptions) -> LearnerLink:
    """The learner in a child process of this machine (`ProcessLearnerLink`)."""
    link = ProcessLearnerLink(setup, options)
    logger.info("the learner runs in process %d", link.pid)
    return link


def make_ray_link(setup: LearnerSetup, options: LearnerLinkOptions) -> LearnerLink:
    """The learner as a Ray actor on the node offering `learner` (a GPU when there is one)."""
    ray = import_ray(NEEDED_FOR)
    has_gpu = ray.cluster_resources().get("GPU", 0) >= 1
    num_gpus = 1 if has_gpu and setup.device != "cpu" else 0
    link = RayLearnerLink(setup, options, resources={LEARNER_RESOURCE: 1}, num_gpus=num_gpus)
    logger.info("the learner runs as a Ray actor on node %s", link.node_id)
    return link


class EpisodeRecords:
    """After each episode: its TensorBoard scalars and results.json (`EpisodeEnded`)."""

    def __init__(self, output_dir: Path, log: ScalarLog, periods: ControlPeriods) -> None:
        """Write into `output_dir` and `log`; the control period's figures from `periods`."""
        self.results_path = output_dir / RESULTS_FILE
        self.log, self.periods = log, periods

    def __call__(self, report: EpisodeReport, state: RobotRunState, learner: LearnerStatus) -> None:
        """Write the episode's scalars and the run's results so far."""
        self.log.write(episode_scalars(report, learner), step=state.env_steps)
        RobotResults.of(state, learner, self.periods).save(self.results_path)


def run_robot(args: RobotTrainArgs, make_link: MakeLink) -> RobotResults:
    """Run the control loop here with the learner `make_link` starts; returns the results.

    Call it in the thread that creates the link (a learner process dies with that thread).

    Raises:
        LearnerLostError: When the learner died or stalled (results.json says so too).
    """
    check_output_dir(args)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    set_control_threads(args.control_torch_threads)
    periods = ControlPeriods()
    results_path = args.output_dir / RESULTS_FILE
    with contextlib.ExitStack() as stack:
        loop = start_loop(args, make_link, periods, stack)
        try:
            with logging_redirect_tqdm():
                state = loop.run()
        except LearnerLostError as error:
            RobotResults.of(loop.state, loop.learner_status, periods, str(error)).save(results_path)
            raise
        if args.final_updates > 0:
            logger.info("the learner runs %d updates before its last save", args.final_updates)
        learner = last_saved_status(loop.link, state.episodes)
        results = RobotResults.of(state, learner, periods, stop_reason(args, state))
        results.save(results_path)
        return results


def set_control_threads(torch_threads: int | None) -> None:
    """Use `torch_threads` torch threads here (None: all cores but one, at most torch's default).

    The learner keeps the core left out (`LearnerLinkOptions.torch_threads`).
    """
    if torch_threads is None:
        torch_threads = max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - 1))
    torch.set_num_threads(torch_threads)


def start_loop(
    args: RobotTrainArgs, make_link: MakeLink, periods: ControlPeriods, stack: contextlib.ExitStack
) -> ControlLoop:
    """The console, the env, the learner, the records and the loop; `stack` closes them."""
    console = make_console(args)
    if console is not None:
        stack.callback(console.close)
    env, link = start_env_and_learner(args, make_link, console, periods, stack)
    log = stack.enter_context(ScalarLog(args.output_dir / "tensorboard"))
    status = StatusLine(console.legend() if console is not None else None)
    stack.callback(status.close)
    plan = LoopPlan(
        args.total_env_steps, args.max_episodes, args.seed, link.config,
        wait_for_reset_key=args.operator.wait_for_reset_key, final_updates=args.final_updates,
        learner_catches_up=args.learner_catches_up,
    )  # fmt: skip
    records = EpisodeRecords(args.output_dir, log, periods)
    return ControlLoop(env, link, plan, console, status, records)


def start_env_and_learner(
    args: RobotTrainArgs,
    make_link: MakeLink,
    console: OperatorConsole | None,
    periods: ControlPeriods,
    stack: contextlib.ExitStack,
) -> tuple[gym.Env, LearnerLink]:
    """The env and the learner's link, both closed by `stack`.

    A fresh learner needs the env's observation sizes, so a fresh run builds the env first. A
    resumed run starts the learner first: its saved config, read where the learner runs (the
    GPU host with Ray), gives the env its chunk length.

    Raises:
        ValueError: When a resumed run's env gives observations of other sizes.
    """
    run_dir, device = args.output_dir / RUN_DIR, args.learner_device
    options = LearnerLinkOptions(
        learner_timeout_s=args.learner_timeout_s, nice=args.learner_nice,
        start_timeout_s=args.learner_start_timeout_s,
    )  # fmt: skip
    if not args.resume:
        env = stack.enter_context(make_robot_env(args, args.stage2.chunk_len, console, periods))
        dims = RLTDims.from_observation_space(env.observation_space)
        setup = LearnerSetup(run_dir, args.stage2, dims, device, args.gate_settings())
        link = make_link(setup, options)
        return env, stack.enter_context(link)
    link = stack.enter_context(make_link(LearnerSetup(run_dir, device=device), options))
    logger.info("resuming %s with its saved Stage 2 config (--stage2.* ignored)", run_dir)
    env = stack.enter_context(make_robot_env(args, link.config.chunk_len, console, periods))
    dims = RLTDims.from_observation_space(env.observation_space)
    if dims != link.acting_spec.dims:
        raise ValueError(
            f"the run in {run_dir} learned from observations of sizes {link.acting_spec.dims}; "
            f"the env gives {dims}: resume with the run's --env-kwargs (its checkpoint)"
        )
    return env, link


def stop_reason(args: RobotTrainArgs, state: RobotRunState) -> str:
    """Why a run that ended normally stopped: "max_episodes" or "total_env_steps"."""
    if args.max_episodes is not None and state.episodes >= args.max_episodes:
        return "max_episodes"
    return "total_env_steps"


def last_saved_status(link: LearnerLink, episodes: int) -> LearnerStatus:
    """The learner's status once it has saved `episodes` episodes, or the latest if it is lost.

    A learner that stalls stops its heartbeat (`LearnerLink.health`): no fixed time limit.
    """
    _, status = link.poll()
    while status.saved_episodes < episodes and link.health() is None:
        time.sleep(0.05)
        _, status = link.poll()
    return status


class RobotNodeRun:
    """The control loop's part of a Ray run: a Ray actor on the node holding the robot."""

    def __init__(self, args: RobotTrainArgs) -> None:
        """Hold the command's arguments; log as the command does."""
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
        self.args = args

    def run(self) -> RobotResults:
        """Run the control loop on this node with the learner as a Ray actor."""
        node_id = import_ray(NEEDED_FOR).get_runtime_context().get_node_id()
        logger.info("the control loop runs on Ray node %s", node_id)
        return run_robot(self.args, make_ray_link)


def train_on_ray(args: RobotTrainArgs) -> RobotResults:
    """Run with the learner and the control loop as Ray actors (`--learner ray`).

    Without `--ray-address` a one-machine Ray starts here, offering both resources.
    """
    ray = import_ray(NEEDED_FOR)
    if args.ray_address is None:
        ray.init(resources={ROBOT_RESOURCE: 1, LEARNER_RESOURCE: 1})
    else:
        ray.init(address=args.ray_address)
    try:
        control_loop = robot_node_actor(RobotNodeRun, args)
        try:
            return ray.get(control_loop.run.remote())
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, Exception):
                raise error.cause from None  # the control loop's own error, in one line
            raise
    finally:
        ray.shutdown()


def train(args: RobotTrainArgs) -> RobotResults:
    """Run (or resume) a robot run; returns the results also written to results.json.

    Raises:
        LearnerLostError: When the learner died or stalled (the arm holds still).
    """
    if args.learner == "ray":
        return train_on_ray(args)
    return run_robot(args, make_process_link)


def main() -> None:
    """Entry point of `rpent-stage2-robot`: a preset, then any flag to override it."""
    with command("rpent-stage2-robot"):
        try:
            results = train(tyro.extras.overridable_config_cli(PRESETS))
        except KeyboardInterrupt:
            raise SystemExit(
                "rpent-stage2-robot: stopped (Ctrl-C); the episode in progress is not saved: "
                "run the same command with --resume to continue"
            ) from None
        print(
            f"{results.episodes} episodes, {results.successes} successes, {results.env_steps} "
            f"env steps ({results.intervention_env_steps} by a human or expert), "
            f"{results.updates} updates, {results.transitions} transitions; {results.stop_reason}"
        )


if __name__ == "__main__":
    main()
