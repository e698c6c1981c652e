"""Record a planner driving the peg env through tool calls, then export the flywheel dataset.

A scripted "planner" stands in for an LLM: it logs a model request and reply, then issues tool
calls until the episode ends. The `vla` tool stands in for a VLA model: each call logs one
prediction (instruction "insert the peg in the hole") and executes a chunk whose actions are
the scripted expert's next actions, labelled `vla`. The `open_gripper` and `hold_still` tools
are scripted primitives, labelled `scripted`. `rpent-flywheel` rules then keep only the
VLA-driven actions of successful episodes; every `hold_still` splits them into episodes.

Usage:
    .venv/bin/python examples/record_and_export.py --run-dir runs/demo --export-dir exports/demo
"""

import json
from dataclasses import dataclass
from itertools import chain, cycle
from pathlib import Path
from typing import Literal

import gymnasium as gym
import numpy as np
import tyro

import rpent_envs
from recorders.flywheel import export_flywheel
from recorders.provenance import provenance_of
from rpent_envs.maniskill.expert import PegInsertionExpert
from wrappers.chunking import ChunkResult, execute_chunk
from wrappers.record import RecordTrajectory

INSTRUCTION = "insert the peg in the hole"
PLANNER_MODEL = "scripted-planner"
VLA_MODEL = "scripted-expert-as-vla"
GRIPPER_OPEN = 1.0


@dataclass
class Args:
    run_dir: Path
    """Run folder for the trajectory records (new tasks are added)."""
    export_dir: Path
    """Flywheel export folder to create (must not exist)."""
    num_episodes: int = 2
    """Episodes (tasks) to record, on seeds seed, seed+1, ..."""
    seed: int = 0
    image_size: int = 64
    """Height and width of both cameras, in pixels."""
    chunk_size: int = 10
    """Actions per VLA prediction."""
    max_steps: int = 200
    """Steps after which the planner gives up on an episode."""
    render_backend: Literal["auto", "cpu", "gpu"] = "auto"


class ScriptedPlanner:
    """Plans with fixed tool calls; knows nothing about recording beyond `provenance_of(env)`."""

    def __init__(self, env: gym.Env, chunk_size: int, max_steps: int) -> None:
        self.env = env
        self.log = provenance_of(env)
        self.expert = PegInsertionExpert(env)
        self.chunk_size = chunk_size
        self.max_steps = max_steps
        self.gripper = GRIPPER_OPEN

    def run_episode(self, seed: int) -> bool:
        observation, info = self.env.reset(seed=seed)
        self.gripper = GRIPPER_OPEN
        request_id = self.log.model_request(
            PLANNER_MODEL, [{"role": "user", "content": f"task: {info['task']}"}]
        )
        plan = chain(["open_gripper"], cycle(["vla", "vla", "hold_still"]))
        self.log.model_reply(request_id, {"plan": "open_gripper, then vla x2 / hold_still"})
        steps, done = 0, False
        while not done and steps < self.max_steps:
            tool = next(plan)
            arguments = {"instruction": INSTRUCTION} if tool == "vla" else {}
            call_id = self.log.tool_call(tool, arguments, request_id=request_id)
            result = getattr(self, f"_{tool}")(observation, call_id)
            self.gripper = float(result.executed_actions[-1, -1])
            self.log.tool_result(call_id, {"steps": len(result.rewards), "done": result.done})
            observation, done, info = result.observation, result.done, result.info
            steps += len(result.rewards)
        reply_to = self.log.model_request(PLANNER_MODEL, [{"role": "tool", "content": "finished"}])
        self.log.model_reply(reply_to, "done")  # the planner's word; success is the env's verdict
        return bool(info["success"])

    def _vla(self, observation: dict, call_id: str) -> ChunkResult:
        prediction_id = self.log.vla_prediction(call_id, INSTRUCTION, VLA_MODEL)
        self.log.set_action_source("vla", call_id=call_id, prediction_id=prediction_id)
        return execute_chunk(self.env, observation, lambda _: self.expert.act(), self.chunk_size)

    def _open_gripper(self, observation: dict, call_id: str) -> ChunkResult:
        self.log.set_action_source("scripted", call_id=call_id)
        action = np.zeros(8, dtype=np.float32)
        action[-1] = GRIPPER_OPEN
        return execute_chunk(self.env, observation, np.stack([action, action]), horizon=2)

    def _hold_still(self, observation: dict, call_id: str) -> ChunkResult:
        self.log.set_action_source("scripted", call_id=call_id)
        action = np.zeros(8, dtype=np.float32)
        action[-1] = self.gripper
        return execute_chunk(self.env, observation, action[None], horizon=1)


def main(args: Args) -> None:
    env = gym.make(
        rpent_envs.PEG_INSERTION_ID,
        obs_mode="rgb",
        image_size=args.image_size,
        render_backend=args.render_backend,
    )
    env = RecordTrajectory(
        env, args.run_dir, robot="panda", planner={"kind": "scripted", "model": PLANNER_MODEL}
    )
    planner = ScriptedPlanner(env, args.chunk_size, args.max_steps)
    try:
        for episode in range(args.num_episodes):
            success = planner.run_episode(args.seed + episode)
            print(f"episode {episode}: environment_success={success} -> {env.task_dir}")
    finally:
        env.close()
    report = export_flywheel(args.run_dir, args.export_dir).to_json()
    report.pop("tasks")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(tyro.cli(Args))
