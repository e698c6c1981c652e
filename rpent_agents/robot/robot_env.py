"""The env of a robot run: the RLT id with the operator, the recorder and the control clock.

`make_robot_env` builds one env of the run's RLT id with `skip_inactive=False` (the control
loop sees every chunk) and these gym.make kwargs of the composite RLT envs:

- `raw_wrappers`, on the raw env, bottom first: the control clock (`ControlPeriods.wrap`),
  the operator's success and failure keys (`OperatorOutcome`), and `RecordTrajectory`, which
  records every episode under the output folder with the operator's verdict;
- `log_predictions=True` when recording: every chunk the VLA or the actor drives is logged as
  a prediction, so `rpent-flywheel` exports the successful episodes;
- `human_takeover`: the teleop key hands the arm to the operator's device;
- `trigger`: the actor key, for the ids whose trigger is the operator's (the Franka's).

All the keys come from one `OperatorConsole`, one keyboard listener (`make_console`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rpent_agents.robot.config import RobotTrainArgs
from rpent_agents.robot.control_period import ControlPeriods, nominal_period_of
from rpent_envs import FRANKA_RLT_ID
from rpent_envs.franka.env import ACTION_DIM as FRANKA_ACTION_DIM
from wrappers.console import OperatorConsole
from wrappers.record import RecordTrajectory
from wrappers.teleop import SpaceMouseTeleop, TeleopDevice

KEY_TRIGGER_IDS = frozenset({FRANKA_RLT_ID})
"""RLT ids whose actor trigger is the operator's key (they take `trigger=`)."""
TELEOP_ACTION_DIM = FRANKA_ACTION_DIM
"""Entries of a teleop device's action: end-effector translation, rotation, gripper."""


def make_console(args: RobotTrainArgs) -> OperatorConsole | None:
    """The operator's console when the run reads any of their keys (None: none does).

    Raises:
        KeyboardUnavailableError: When the keyboard cannot be listened to here.
    """
    if args.operator.uses_keys or args.env_id in KEY_TRIGGER_IDS:
        return OperatorConsole(args.operator.keys)
    return None


def make_teleop_device(args: RobotTrainArgs, console: OperatorConsole) -> TeleopDevice | None:
    """The operator's teleop device (`--operator.teleop`), or None."""
    choice = args.operator.teleop
    if choice == "keyboard":
        return console.keyboard_teleop(TELEOP_ACTION_DIM)
    if choice == "spacemouse":
        return SpaceMouseTeleop(TELEOP_ACTION_DIM)
    return None


def make_robot_env(
    args: RobotTrainArgs,
    chunk_len: int,
    console: OperatorConsole | None,
    periods: ControlPeriods,
) -> gym.Env:
    """The run's env (see the module docstring).

    Args:
        args: The command's arguments (env id and kwargs, operator, recording).
        chunk_len: The actor's chunk length H (the learner's).
        console: The operator's console (`make_console`); None: no operator.
        periods: Where the control clock adds the raw env's periods.

    Raises:
        ValueError: When a teleop device's actions do not fit the env's.
    """
    kwargs = args.make_kwargs(chunk_len) | {
        "skip_inactive": False,
        "raw_wrappers": raw_wrappers(args, console, periods),
        "log_predictions": args.record_trajectories,
    }
    if console is not None:
        kwargs |= operator_kwargs(args, console)
    env = gym.make(args.env_id, **kwargs)
    action_dim = env.observation_space["ref_chunk"].shape[-1]
    if args.operator.teleop != "none" and action_dim != TELEOP_ACTION_DIM:
        env.close()
        raise ValueError(
            f"--operator.teleop {args.operator.teleop} commands {TELEOP_ACTION_DIM}-entry "
            f"end-effector actions (the Franka's); {args.env_id} takes {action_dim}: pass "
            "--operator.teleop none"
        )
    return env


def raw_wrappers(
    args: RobotTrainArgs, console: OperatorConsole | None, periods: ControlPeriods
) -> list[Callable[[gym.Env], gym.Env]]:
    """The wrappers of the raw env, bottom first: the clock, the outcome keys, the recorder."""
    wrappers: list[Callable[[gym.Env], gym.Env]] = [periods.wrap]
    if console is not None and args.operator.outcome_keys:
        wrappers.append(console.outcome)
    if args.record_trajectories:
        wrappers.append(functools.partial(record_episodes, output_dir=args.output_dir))
    return wrappers


def operator_kwargs(args: RobotTrainArgs, console: OperatorConsole) -> dict[str, Any]:
    """The actor key's trigger (ids that take one) and the teleop takeover, as gym.make kwargs."""
    kwargs: dict[str, Any] = {}
    if args.env_id in KEY_TRIGGER_IDS:
        kwargs["trigger"] = console.trigger()
    device = make_teleop_device(args, console)
    if device is not None:
        kwargs["human_takeover"] = console.takeover(device)
    return kwargs


def record_episodes(env: gym.Env, output_dir: Any) -> RecordTrajectory:
    """`env` under `RecordTrajectory` into `output_dir/trajectories/` (fps: the env's period)."""
    period_s = nominal_period_of(env)
    fps = round(1 / period_s) if period_s is not None else None
    return RecordTrajectory(env, output_dir=output_dir, fps=fps)
