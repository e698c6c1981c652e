"""The flywheel on LIBERO: a planner drives a LIBERO task through tool calls, then `rpent-flywheel`.

A scripted "planner" stands in for an LLM: it splits the task into sub-instructions and calls
tools. The `vla` tool stands in for a VLA model: each call logs one prediction with its
sub-instruction ("pick up the akita black bowl", then the task's own instruction) and executes
a chunk of the scripted LIBERO expert's actions, labelled `vla`. `open_gripper` and `lift` are
scripted primitives, labelled `scripted`. The episode is recorded with `RecordTrajectory`;
`rpent-flywheel` then exports only the VLA-driven actions of successful episodes to LeRobot.

Usage (the default is libero_goal task 8, "put the bowl on the plate"):
    .venv/bin/python examples/libero_flywheel.py --run-dir runs/libero --export-dir exports/libero
    .venv/bin/python examples/libero_flywheel.py --suite libero_goal_swap --task-id 8 ...
"""

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro

import rpent_envs
from recorders.provenance import provenance_of
from rpent_envs.libero.env import GRIPPER_CLOSED, GRIPPER_OPEN
from rpent_envs.libero.expert import LiberoExpert
from wrappers.chunking import ChunkResult, execute_chunk
from wrappers.record import RecordTrajectory

PLANNER_MODEL = "scripted-planner"
VLA_MODEL = "scripted-libero-expert-as-vla"
LIFT_ACTION = np.array([0, 0, 0.5, 0, 0, 0, GRIPPER_CLOSED], dtype=np.float32)
OPEN_ACTION = np.array([0, 0, 0, 0, 0, 0, GRIPPER_OPEN], dtype=np.float32)


@dataclass
class Args:
    run_dir: Path
    """Run folder for the trajectory records (new tasks are added)."""
    export_dir: Path | None = None
    """Flywheel export folder to create (must not exist); None records only."""
    suite: str = "libero_goal"
    """LIBERO or LIBERO-PRO suite."""
    task_id: int = 8
    """A pick-and-place task of the suite (the expert solves one On/In goal)."""
    init_state_ids: list[int] = field(default_factory=lambda: [0])
    """Benchmark initial states, one episode each."""
    image_size: int = 128
    """Height and width of both cameras, in pixels."""
    chunk_size: int = 10
    """Actions per VLA prediction."""
    max_steps: int | None = None
    """Episode step limit; None keeps the suite's evaluation horizon."""
    export_videos: bool = True
    """Export camera images as MP4 videos (else PNG frames, quicker to write)."""


def object_noun(name: str) -> str:
    """How a planner would name a BDDL object: `akita_black_bowl_1` -> `akita black bowl`."""
    return re.sub(r"_\d+$", "", name).replace("_", " ")


class ScriptedPlanner:
    """Plans with fixed tool calls; knows nothing about recording beyond `provenance_of(env)`."""

    def __init__(self, env: gym.Env, chunk_size: int) -> None:
        self.env = env
        self.log = provenance_of(env)
        self.expert = LiberoExpert(env)
        self.chunk_size = chunk_size

    def run_episode(self, init_state_id: int) -> bool:
        observation, info = self.env.reset(
            seed=init_state_id, options={"init_state_id": init_state_id}
        )
        pick = f"pick up the {object_noun(self.expert.goal.obj)}"
        request_id = self.log.model_request(
            PLANNER_MODEL, [{"role": "user", "content": f"task: {info['task']}"}]
        )
        plan = ["open_gripper", f"vla: {pick}", "lift", f"vla: {info['task']}"]
        self.log.model_reply(request_id, {"plan": plan})
        result = self._call(request_id, "open_gripper", {}, observation)
        while not result.done and not self.expert.is_lifted():
            result = self._call(request_id, "vla", {"instruction": pick}, result.observation)
        if not result.done:
            result = self._call(request_id, "lift", {}, result.observation)
        while not result.done:
            arguments = {"instruction": info["task"]}
            result = self._call(request_id, "vla", arguments, result.observation)
        reply_to = self.log.model_request(PLANNER_MODEL, [{"role": "tool", "content": "finished"}])
        self.log.model_reply(reply_to, "done")  # the planner's word; success is the env's verdict
        return bool(result.info["success"])

    def _call(self, request_id: str, tool: str, arguments: dict, observation: dict) -> ChunkResult:
        call_id = self.log.tool_call(tool, arguments, request_id=request_id)
        if tool == "vla":
            result = self._vla(arguments["instruction"], observation, call_id)
        else:
            self.log.set_action_source("scripted", call_id=call_id)
            chunk = OPEN_ACTION if tool == "open_gripper" else LIFT_ACTION
            result = execute_chunk(self.env, observation, np.stack([chunk] * 4), horizon=4)
        self.log.tool_result(call_id, {"steps": len(result.rewards), "done": result.done})
        return result

    def _vla(self, instruction: str, observation: dict, call_id: str) -> ChunkResult:
        prediction_id = self.log.vla_prediction(call_id, instruction, VLA_MODEL)
        self.log.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
        return execute_chunk(self.env, observation, lambda _: self.expert.act(), self.chunk_size)


def main(args: Args) -> None:
    limit = {"max_episode_steps": args.max_steps} if args.max_steps else {}
    env = gym.make(
        rpent_envs.LIBERO_ID,
        suite=args.suite,
        task_id=args.task_id,
        image_size=args.image_size,
        **limit,
    )
    env = RecordTrajectory(
        env, args.run_dir, robot="panda", planner={"kind": "scripted", "model": PLANNER_MODEL}
    )
    planner = ScriptedPlanner(env, args.chunk_size)
    try:
        for init_state_id in args.init_state_ids:
            success = planner.run_episode(init_state_id)
            print(f"init state {init_state_id}: environment_success={success} -> {env.task_dir}")
    finally:
        env.close()
    if args.export_dir is not None:  # the `rpent-flywheel` command (same entry point)
        export = [sys.executable, "-m", "recorders.cli", "--input-root", str(args.run_dir)]
        export += ["--output-dir", str(args.export_dir)]
        subprocess.run(
            [*export, "--use-videos" if args.export_videos else "--no-use-videos"], check=True
        )


if __name__ == "__main__":
    main(tyro.cli(Args))
