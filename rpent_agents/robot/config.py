"""The arguments of `rpent-stage2-robot` and its presets: `RobotTrainArgs`, `OperatorConfig`.

Two presets (`PRESETS`, tyro's `overridable_config_cli`: a preset, then any flag):

- `real-robot`: `RPent/FrankaPegInsertion-RLT-v0` (give the checkpoint, the arm's address and
  the cameras in `--env-kwargs`), Stage 2 as `Stage2Config.real_robot()` with a warm-up
  (`REAL_ROBOT_STAGE2`), the operator's keys on and a wait for the reset key between episodes;
- `sim-stand-in`: `RPent/PegInsertion-RLT-v0` with one env, the peg stack of
  `PegRLTConfig.sample_efficient()` (its scripted expert takes over stalls: it stands in for
  the human) and `Stage2Config.sample_efficient()`, all on the CPU; no operator keys (the
  simulator judges success and resets the scene).

Example:
    >>> args = PRESETS["sim-stand-in"][1]
    >>> args.env_id, args.operator.wait_for_reset_key
    ('RPent/PegInsertion-RLT-v0', False)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tyro

from rpent_agents.rollout.rlt_stack import GATE_FIELDS, PegRLTConfig
from rpent_agents.stage2.config import Stage2Config
from rpent_envs import FRANKA_RLT_ID, PEG_RLT_ID
from wrappers.operator import OperatorKeys

TeleopChoice = Literal["keyboard", "spacemouse", "none"]


@dataclass
class OperatorConfig:
    """The person at the arm: their keys, their teleop device, the wait between episodes."""

    keys: OperatorKeys = field(default_factory=OperatorKeys)
    """The operator's keys (b actor, c success, a failure, r reset done, space teleop)."""
    outcome_keys: bool = True
    """The success and failure keys end the episode with their verdict (an env that cannot
    judge success itself: the real arm)."""
    teleop: TeleopChoice = "keyboard"
    """The device the teleop key hands the arm to: "keyboard" (the movement keys),
    "spacemouse" (the `spacemouse` extra) or "none"."""
    wait_for_reset_key: bool = True
    """Before each episode, wait for the reset key (the operator has reset the scene); the
    wait is neither robot time nor env steps."""

    @property
    def uses_keys(self) -> bool:
        """Whether any of the operator's keys is read (the keyboard is listened to)."""
        return self.outcome_keys or self.teleop != "none" or self.wait_for_reset_key


@dataclass
class RobotTrainArgs:
    """Stage 2 on one env of an RLT id, a robot with a human in the loop (rpent-stage2-robot)."""

    env_id: str = FRANKA_RLT_ID
    """The RLT env id: RPent/FrankaPegInsertion-RLT-v0, or RPent/PegInsertion-RLT-v0 (one env,
    the simulator stand-in)."""
    env_kwargs: str = "{}"
    """The id's gym.make kwargs as a JSON object, over the preset's (e.g. '{"checkpoint":
    "ckpt/franka", "host": "172.16.0.2", "camera": "realsense", "wrist_camera":
    "realsense"}'); `chunk_len` is the Stage 2 config's."""
    preset_env_kwargs: tyro.conf.Suppress[str] = "{}"
    """The preset's gym.make kwargs (JSON), beneath --env-kwargs."""
    output_dir: Path = Path("runs/robot")
    """Folder of the run: run/ (learner, replay, optimizers, counters), results.json,
    tensorboard/, trajectories/."""
    resume: bool = False
    """Continue the run in output_dir from its last save (counters, replay, weights; its saved
    Stage 2 config wins over --stage2.* flags)."""
    total_env_steps: int = 50_000
    """Robot steps of the whole run (resumed parts included); the run stops at the end of the
    episode that reaches them."""
    max_episodes: int | None = None
    """Episodes of the whole run after which it stops (None: no limit)."""
    final_updates: int = 0
    """Updates the learner runs after the run's last episode, before its last save, whatever
    its schedule owes: training on the whole replay that costs no robot time (0: none)."""
    learner_catches_up: bool = False
    """Before each episode, wait until the learner has run every update its schedule owes and
    its weights are loaded: a reset as long as the learner needs (a GPU learner keeps up with a
    10 Hz arm; the sim stand-in runs faster than an arm, and a CPU learner is slower than a
    GPU's, so with this a stand-in run learns as it would at a robot's pace)."""
    stage2: Stage2Config = field(default_factory=Stage2Config)
    """Stage 2 hyperparameters (the learner's)."""
    learner: Literal["process", "ray"] = "process"
    """Where the learner runs: "process", a child process of this machine; "ray", a Ray actor
    on the node offering the `learner` resource, the control loop on the node offering
    `robot` (docs/robot.md)."""
    ray_address: str | None = None
    """Address of the Ray cluster with --learner ray ("auto": the one this host joined);
    None: a one-machine Ray started here, offering both resources."""
    learner_device: str = "auto"
    """Torch device of the learner ("auto": cuda where it runs when there is one, else cpu)."""
    learner_timeout_s: float = 30.0
    """No heartbeat from the learner for this long: it has stalled and the run stops."""
    learner_start_timeout_s: float = 300.0
    """Longest wait for the learner to start: importing torch, loading the run, and for a
    fresh run its `--stage2.demo-pretrain-updates` (a CPU learner runs ~7 per second: raise
    it for thousands)."""
    learner_nice: int = 10
    """Niceness the learner process adds to its own (--learner process): on cores it shares
    with the control loop (and the arm's driver), their work goes first; 0: the same
    priority."""
    control_torch_threads: int | None = None
    """Torch threads of the control loop (its feature model and actor, on the CPU); None: all
    cores but one, which the learner keeps. On busy cores more threads wait on each other: the
    stand-in's CPU feature model took 1.2 s a chunk with 2 threads on 2 cores, 0.04 s with 1."""
    operator: OperatorConfig = field(default_factory=OperatorConfig)
    """The operator's keys, teleop device and reset wait."""
    record_trajectories: bool = True
    """Record every episode under output_dir/trajectories/ (`RecordTrajectory`), exportable
    with rpent-flywheel."""
    seed: int = 0
    """Reset seed of the run's first episode; episode k uses seed + k."""

    def make_kwargs(self, chunk_len: int) -> dict[str, Any]:
        """The gym.make kwargs of the env: the preset's, then --env-kwargs, and `chunk_len`.

        Raises:
            ValueError: When --env-kwargs is not a JSON object.
        """
        kwargs: dict[str, Any] = {}
        for flag, text in (("preset env kwargs", self.preset_env_kwargs),
                           ("--env-kwargs", self.env_kwargs)):  # fmt: skip
            try:
                values = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"{flag} {text!r} is not JSON: {error}") from None
            if not isinstance(values, dict):
                raise ValueError(f"{flag} {text!r}: give a JSON object of gym.make kwargs")
            kwargs |= values
        return kwargs | {"chunk_len": chunk_len}

    def gate_settings(self) -> dict[str, Any]:
        """The env's gate fields that the preset or --env-kwargs set (`GATE_FIELDS`).

        Stored with the run's actor (`LearnerSetup.gate`); the fields not set keep their
        defaults wherever the actor acts.
        """
        kwargs = self.make_kwargs(self.stage2.chunk_len)
        return {name: kwargs[name] for name in GATE_FIELDS if name in kwargs}


def changed_fields(config: Any) -> dict[str, Any]:
    """The fields of dataclass `config` that differ from its class's defaults."""
    default = type(config)()
    return {
        item.name: getattr(config, item.name)
        for item in dataclasses.fields(config)
        if getattr(config, item.name) != getattr(default, item.name)
    }


# The real arm: Stage2Config.real_robot() trains one update schedule: nothing before
# learning_starts transitions, then warmup_updates updates, then update_epoch per
# train_every_transitions new ones (8 per stored transition, the seed's real-robot rate; the
# issue asks >= 4). Until the warm-up is done, the VLA's reference drives.
REAL_ROBOT_STAGE2 = Stage2Config.real_robot(
    update_schedule=True,
    learning_starts=20,
    warmup_updates=1000,
    train_every_transitions=1,
    update_epoch=8,
)
SIM_STAND_IN_ENV = PegRLTConfig.sample_efficient(render_backend="cpu", feature_device="cpu")
PRESETS = {
    "real-robot": (
        "the Franka (RPent/FrankaPegInsertion-RLT-v0): the seed's real-robot Stage 2 with a "
        "warm-up (learning after 20 transitions, the actor after 1000 updates, then 8 updates "
        "per transition); the operator's keys, keyboard teleop, a wait for the reset key",
        RobotTrainArgs(
            output_dir=Path("runs/franka"),
            stage2=REAL_ROBOT_STAGE2,
        ),
    ),
    "sim-stand-in": (
        "the same loop without hardware: RPent/PegInsertion-RLT-v0 with one env on the CPU, "
        "rpent-stage2 sample-efficient's learner and peg stack, whose scripted expert takes "
        "over stalls in place of the human; the simulator judges success and resets",
        RobotTrainArgs(
            env_id=PEG_RLT_ID,
            preset_env_kwargs=json.dumps(changed_fields(SIM_STAND_IN_ENV)),
            output_dir=Path("runs/standin"),
            total_env_steps=300_000,
            stage2=Stage2Config.sample_efficient(),
            learner_device="cpu",
            operator=OperatorConfig(outcome_keys=False, teleop="none", wait_for_reset_key=False),
        ),
    ),
}
