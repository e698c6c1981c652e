"""`rpent-run`: run a policy on a registered env for given seeds, optionally recording it.

    rpent-run --policy vla --seeds 0 1 2 --record-trajectory --output-dir runs/vla
    rpent-run --policy actor --stage2-run runs/rlt_peg/run --seeds $(seq 0 99) --output-dir O
    rpent-run --env RPent/Libero-v0 --env-kwargs '{"suite": "libero_goal", "task_id": 8}' \
        --policy expert --seeds 0 1 --record-trajectory --output-dir runs/libero

Each episode runs chunk by chunk (`rpent_agents.run_policies` decides each chunk). Before a
chunk executes, its decision goes to the provenance channel: a tool call named after its
source (`vla` or `actor`) with the env's instruction as argument, a prediction of the
deciding model inside that call, and the label of the chunk's actions (source, call id,
prediction id). With `--record-trajectory`, `RecordTrajectory` writes those records under
`O/trajectories/`, so `rpent-flywheel` exports the VLA chunks of successful episodes under its
default rules, and the actor's chunks with `--include-sources actor`.

The success summary (the env's verdict `info["success"]` at each episode's end) is printed as
JSON and written to `O/run_summary.json` with every episode's seed, verdict, steps and chunks.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import tyro
from tqdm import tqdm

import rpent_envs
from recorders.provenance import provenance_of
from recorders.record_format import write_json_atomic
from rpent_agents.rlt_envs import PegRLTConfig
from rpent_agents.run_policies import ActorPolicy, ChunkPolicy, ExpertPolicy, VLAPolicy
from wrappers.chunking import ChunkResult, execute_chunk
from wrappers.record import RecordTrajectory, environment_verdict
from wrappers.triggers import TriggerMode

logger = logging.getLogger(__name__)
SUMMARY_FILE = "run_summary.json"
ROBOTS = {rpent_envs.PEG_INSERTION_ID: "panda", rpent_envs.LIBERO_ID: "panda"}
ROBOTS[rpent_envs.FRANKA_ID] = "franka"


@dataclass
class RunArgs:
    """Run a policy on a registered env for given seeds; optionally record trajectories."""

    seeds: list[int]
    """Reset seeds, one episode each (e.g. `--seeds $(seq 0 99)`)."""
    env: str = rpent_envs.PEG_INSERTION_ID
    """A registered env id (one action per step, the flat Dict observation of DESIGN.md §2)."""
    env_kwargs: str = "{}"
    """JSON object of keyword arguments for `gym.make` (e.g. '{"image_size": 32}')."""
    policy: Literal["vla", "actor", "expert"] = "vla"
    """vla: the checkpoint's reference chunks; actor: a Stage 2 actor in the critical phase of
    the peg RLT stack (the reference outside it); expert: the env's scripted expert as the VLA
    stand-in (peg, LIBERO)."""
    checkpoint: Path | None = None
    """Stage 1 checkpoint folder of the VLA (vla, actor); None: the embedded default."""
    stage2_run: Path | None = None
    """Stage 2 run folder or weights.pt of the actor (actor only)."""
    chunk_len: int = 10
    """Steps executed per chunk (at most the checkpoint's reference chunk)."""
    trigger_mode: TriggerMode = "auto"
    """Critical-phase gate of the actor: "auto" (AutoGate), "always_on" (every chunk)."""
    device: str = "auto"
    """Torch device of the feature model and the actor ("auto": cuda when available)."""
    max_episode_steps: int | None = None
    """Step limit of each episode; None: the env's own."""
    record_trajectory: bool = False
    """Record every episode with RecordTrajectory under output_dir/trajectories/."""
    output_dir: Path | None = None
    """Run folder of the records and run_summary.json (needed with --record-trajectory)."""
    robot: str | None = None
    """Robot name in the records; None: the env's (panda for peg and LIBERO, franka)."""


@dataclass
class EpisodeOutcome:
    """One episode of a run.

    Attributes:
        seed: Its reset seed.
        success: The env's verdict at its end (None when the env gives none).
        steps: Steps it ran.
        chunks: Chunks it ran, by source ("vla", "actor").
        task_dir: Its trajectory folder when recorded.
    """

    seed: int
    success: bool | None
    steps: int
    chunks: dict[str, int]
    task_dir: str | None = None


@dataclass
class RunSummary:
    """What `run_policy` did; `to_json()` is what `run_summary.json` holds."""

    env: str
    env_kwargs: dict[str, Any]
    policy: str
    model: str
    episodes: list[EpisodeOutcome] = field(default_factory=list)

    @property
    def successful_seeds(self) -> list[int]:
        """Seeds whose episode the env judged successful, in run order."""
        return [episode.seed for episode in self.episodes if episode.success]

    def to_json(self, with_episodes: bool = True) -> dict[str, Any]:
        """Counts first (successes, rate, seeds by verdict), then each episode."""
        successful = self.successful_seeds
        summary = {
            "env": self.env,
            "env_kwargs": self.env_kwargs,
            "policy": self.policy,
            "model": self.model,
            "episodes": len(self.episodes),
            "successes": len(successful),
            "success_rate": len(successful) / len(self.episodes) if self.episodes else None,
            "successful_seeds": successful,
            "failed_seeds": [episode.seed for episode in self.episodes if not episode.success],
        }
        if with_episodes:
            summary["episode_outcomes"] = [asdict(episode) for episode in self.episodes]
        return summary


def check_args(args: RunArgs) -> dict[str, Any]:
    """Refuse options that do not fit together; returns the parsed env kwargs.

    Raises:
        ValueError: Naming the option and the fix.
        FileExistsError: When the output folder already holds a run summary.
    """
    env_kwargs = json.loads(args.env_kwargs)
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"--env-kwargs {args.env_kwargs!r}: give a JSON object")
    if not args.seeds or len(set(args.seeds)) != len(args.seeds):
        raise ValueError(f"--seeds {args.seeds}: give distinct seeds, at least one")
    if args.record_trajectory and args.output_dir is None:
        raise ValueError("--record-trajectory needs --output-dir (the run folder)")
    if (args.policy == "actor") != (args.stage2_run is not None):
        raise ValueError("--policy actor needs --stage2-run, which no other policy reads")
    if args.policy == "actor" and args.env != rpent_envs.PEG_INSERTION_ID:
        raise ValueError(
            f"--policy actor runs on the peg RLT stack: use --env {rpent_envs.PEG_INSERTION_ID}"
        )
    if args.policy == "expert" and args.checkpoint is not None:
        raise ValueError("--checkpoint is read by --policy vla and actor, not expert")
    if args.output_dir is not None and (args.output_dir / SUMMARY_FILE).exists():
        raise FileExistsError(f"{args.output_dir / SUMMARY_FILE} exists; choose a new --output-dir")
    return env_kwargs


def make_policy(args: RunArgs, env: gym.Env) -> ChunkPolicy:
    """The policy of `args.policy` on `env`."""
    if args.policy == "expert":
        return ExpertPolicy.for_env(env, args.env)
    if args.policy == "vla":
        return VLAPolicy(env, args.checkpoint, args.chunk_len, args.device)
    config = PegRLTConfig(
        checkpoint=args.checkpoint,
        chunk_len=args.chunk_len,
        feature_device=args.device,
        trigger_mode=args.trigger_mode,
    )
    return ActorPolicy.on_peg_stack(env, config, args.stage2_run)


def instruction_of(env: gym.Env, info: dict[str, Any]) -> str:
    """The env's language instruction (`info["task"]` or `task_description`).

    Raises:
        ValueError: When the env gives none (a prediction needs one to be exported).
    """
    instruction = info.get("task") or getattr(env.unwrapped, "task_description", None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(
            f"env {env.spec.id if env.spec else env} gives no instruction (info['task'] or"
            " task_description); a prediction needs one"
        )
    return instruction


def run_chunk(
    env: gym.Env, policy: ChunkPolicy, observation: Any, instruction: str, horizon: int
) -> tuple[ChunkResult, str]:
    """Decide, log and execute one chunk; returns its result and its source.

    The decision is logged before its first action executes: a tool call named after the
    source with the instruction, a prediction of the deciding model in that call, and the
    label of the actions that follow.
    """
    decision = policy.decide(observation, instruction)
    log = provenance_of(env)
    call_id = log.tool_call(decision.source, {"instruction": instruction})
    prediction_id = log.prediction(call_id, instruction, decision.model, decision.source)
    log.set_action_source(decision.source, call_id=call_id, prediction_id=prediction_id)
    result = execute_chunk(env, observation, decision.chunk, horizon)
    log.tool_result(call_id, {"steps": len(result.rewards), "done": result.done})
    policy.observe(result)
    return result, decision.source


def run_episode(env: gym.Env, policy: ChunkPolicy, seed: int, chunk_len: int) -> EpisodeOutcome:
    """Run one episode of `policy` from `env.reset(seed=seed)` to its end."""
    observation, info = env.reset(seed=seed)
    task_dir = env.task_dir if isinstance(env, RecordTrajectory) else None
    instruction = instruction_of(env, info)
    policy.reset()
    chunks: Counter[str] = Counter()
    steps = 0
    while True:
        result, source = run_chunk(env, policy, observation, instruction, chunk_len)
        chunks[source] += 1
        steps += len(result.rewards)
        if result.done:
            break
        observation = result.observation
    return EpisodeOutcome(
        seed=seed,
        success=environment_verdict(result.info),
        steps=steps,
        chunks=dict(chunks),
        task_dir=str(task_dir) if task_dir is not None else None,
    )


def run_policy(args: RunArgs, env: gym.Env | None = None) -> RunSummary:
    """Run `args.policy` for one episode per seed and write the summary.

    Args:
        args: The run's options.
        env: The raw env to run on instead of `gym.make(args.env, **env_kwargs)`, for what JSON
            cannot describe (a camera object); it is closed at the end.

    Returns:
        The summary (also in `output_dir/run_summary.json` when an output folder is given).
    """
    env_kwargs = check_args(args)
    if env is None:
        env = gym.make(args.env, max_episode_steps=args.max_episode_steps, **env_kwargs)
    if args.record_trajectory:
        robot = args.robot or ROBOTS.get(args.env)
        planner = {"kind": "rpent-run", "policy": args.policy}
        env = RecordTrajectory(env, args.output_dir, robot=robot, planner=planner)
    try:
        policy = make_policy(args, env)
        summary = RunSummary(args.env, env_kwargs, args.policy, getattr(policy, "model", ""))
        with tqdm(args.seeds, desc=f"{args.policy} episodes") as progress:
            for seed in progress:
                summary.episodes.append(run_episode(env, policy, seed, args.chunk_len))
                progress.set_postfix(successes=len(summary.successful_seeds))
    finally:
        env.close()
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.output_dir / SUMMARY_FILE, summary.to_json())
    return summary


def main() -> None:
    """Entry point of `rpent-run`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = tyro.cli(RunArgs)
    try:
        summary = run_policy(args)
    except (FileExistsError, FileNotFoundError, ValueError) as error:
        raise SystemExit(f"rpent-run: {error}") from error
    print(json.dumps(summary.to_json(with_episodes=False), indent=2))


if __name__ == "__main__":
    main()
