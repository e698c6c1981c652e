"""Issue 52 in a robot owner's setting: the one-env robot loop for 30k env steps, then its curve.

`rpent-stage2-robot sim-stand-in` (one env of RPent/PegInsertion-RLT-v0, the scripted expert
taking over stalls in place of the human) trains with the robot-hour learner
(`Stage2Config.robot_hour()`'s fields, given as --stage2 flags over the preset's) in segments of
--segment-env-steps: each segment is the same command with --resume and a larger
--total-env-steps (the learner process starts again; replay, weights, optimizers and counters
carry on), and each segment's weights.pt is kept. A second run of the bench goes on from the
segments it finds. The command runs with --learner-catches-up: each episode starts once the
learner is on its update schedule, so a run learns as beside a GPU learner at a robot's pace,
on any machine. Then the evaluations, with the vector env `rpent-eval-rlt` uses and the gate
saved with the actor, no expert: the base once and each segment's actor on the validation
seeds 0..99, then the base and the last actor on the test seeds 50000..50255, which nothing was
chosen on. The base's evaluations do not depend on the run: --base-file keeps them for
every run of one bench with the same env kwargs (--phase base evaluates only them).

Writes <output-dir>/results.json (`LearningResults`: the keys `rpent-stage2` writes, among them
`base_success_rate`, `final_success_rate`, `final_success_ci95`, `test_seeds`, `env_steps`,
`intervention_env_steps`, `train_seed` and the critical phase) and success_curve.png; the
command's own output under <output-dir>/loop/ and the segments' weights under segments/.

--demo-transitions starts the run from the Stage 1 demonstrations (issue 52's first lever).

Usage (CPU; --phase train or evaluate runs one half):
    .venv/bin/python bench/robot_loop_hour.py --output-dir runs/loop_hour_a --train-seed 100000
On a GPU host: --learner-device cuda --num-envs 8
    --env-kwargs '{"render_backend": "gpu", "feature_device": "cuda"}'
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tyro

from rpent_agents.common.devices import resolve_device
from rpent_agents.robot.config import PRESETS
from rpent_agents.rollout.rlt_stack import GATE_FIELDS, PegRLTConfig
from rpent_agents.rollout.vector import make_rlt_vector_env
from rpent_agents.stage2.checkpoint import TrainedActor, actor_gate, load_actor
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.evaluation import EvalResult, evaluate_on_seeds, evaluation_on_test_seeds
from rpent_agents.stage2.networks import RLTDims
from rpent_agents.stage2.results import LearningResults

COMMAND = [sys.executable, "-m", "rpent_agents.robot.train", "sim-stand-in"]
SEGMENTS_FILE = "segments.json"


@dataclass
class Args:
    output_dir: Path = Path("runs/loop_hour")
    """Folder of the bench: loop/ (the command's run), segments/, results.json."""
    phase: Literal["all", "train", "evaluate", "base"] = "all"
    """train, evaluate (both: all), or base: the base's evaluations alone, into --base-file."""
    total_env_steps: int = 30_000
    segment_env_steps: int = 5_000
    """Env steps between two kept weights (the curve's spacing)."""
    train_seed: int = 100_000
    """Reset seed of the first training episode (episode k uses train_seed + k)."""
    stage2_seed: int = 0
    learner_device: str = "cpu"
    env_kwargs: str = "{}"
    """gym.make kwargs of the training env and of the evaluation's, JSON (devices, rendering)."""
    no_expert: bool = False
    """Train without the scripted expert's takeovers."""
    learner_catches_up: bool = True
    """The command's --learner-catches-up: the learner keeps its update schedule whatever the
    machine (False: it runs what it can beside the loop, as run A of bench/RESULTS.md)."""
    final_updates: int = 0
    """Updates after the run's last episode, at no robot time (the last segment's
    --final-updates; 0: none)."""
    demo_transitions: Path | None = None
    """Stage 1 demonstrations as transitions (`rpent-demo-transitions`), preloaded into the
    run's replay before its first episode (the command's --stage2.demo-transitions)."""
    demo_pretrain_updates: int = 0
    """Updates on them before the first episode, at no robot time (a CPU learner needs
    --learner-start-timeout-s in --command-args for thousands)."""
    command_args: str = ""
    """More flags for the command, after the bench's, as one string."""
    val_seeds: tuple[int, int] = (0, 100)
    """First validation seed and how many."""
    test_seeds: tuple[int, int] = (50_000, 256)
    """First test seed and how many (0: no test evaluation)."""
    num_envs: int = 2
    """Evaluation workers."""
    base_file: Path | None = None
    """JSON of the base's evaluations (validation and test seeds): read when it exists, else
    evaluated and written there (None: evaluated, not kept)."""


def robot_hour_flags() -> list[str]:
    """`Stage2Config.robot_hour()`'s fields that differ from the sim-stand-in preset's."""
    preset, hour = PRESETS["sim-stand-in"][1].stage2, Stage2Config.robot_hour()
    flags = []
    for item in dataclasses.fields(Stage2Config):
        value = getattr(hour, item.name)
        if value == getattr(preset, item.name):
            continue
        flag = "--stage2." + item.name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else flag.replace("--stage2.", "--stage2.no-"))
        else:
            flags += [flag, str(value)]
    return flags


def env_kwargs(args: Args) -> dict[str, Any]:
    """The training env's gym.make kwargs over the preset's (the expert off with --no-expert)."""
    return json.loads(args.env_kwargs) | ({"expert_takeover": False} if args.no_expert else {})


def read_segments(output_dir: Path) -> list[dict[str, Any]]:
    path = output_dir / SEGMENTS_FILE
    return json.loads(path.read_text()) if path.exists() else []


def train(args: Args) -> None:
    """Run the command segment by segment, keeping each segment's weights and counters."""
    loop_dir, weights_dir = args.output_dir / "loop", args.output_dir / "segments"
    weights_dir.mkdir(parents=True, exist_ok=True)
    segments = read_segments(args.output_dir)
    done_steps = segments[-1]["env_steps"] if segments else 0
    target = (done_steps // args.segment_env_steps + 1) * args.segment_env_steps
    while done_steps < args.total_env_steps:
        target = min(target, args.total_env_steps)
        command = [
            *COMMAND, "--output-dir", str(loop_dir), "--total-env-steps", str(target),
            "--seed", str(args.train_seed), "--stage2.seed", str(args.stage2_seed),
            "--learner-device", args.learner_device, "--env-kwargs", json.dumps(env_kwargs(args)),
            *robot_hour_flags(), *args.command_args.split(),
        ]  # fmt: skip
        if (loop_dir / "run").exists():
            command.append("--resume")
        if args.learner_catches_up:
            command.append("--learner-catches-up")
        if args.demo_transitions is not None:
            command += ["--stage2.demo-transitions", str(args.demo_transitions)]
            command += ["--stage2.demo-pretrain-updates", str(args.demo_pretrain_updates)]
        if target == args.total_env_steps and args.final_updates > 0:
            command += ["--final-updates", str(args.final_updates)]
        print(" ".join(command), flush=True)
        started_s = time.monotonic()
        subprocess.run(command, check=True)
        results = json.loads((loop_dir / "results.json").read_text())
        done_steps = results["env_steps"]
        weights = weights_dir / f"{done_steps}.pt"
        shutil.copy2(loop_dir / "run" / "weights.pt", weights)
        keep = ("env_steps", "intervention_env_steps", "actor_env_steps", "updates",
                "transitions", "episodes", "successes", "robot_time_s", "wall_time_s")  # fmt: skip
        segment = {key: results[key] for key in keep if key in results}
        segment_s = time.monotonic() - started_s
        segments.append(segment | {"weights": weights.name, "segment_s": segment_s})
        (args.output_dir / SEGMENTS_FILE).write_text(json.dumps(segments, indent=1))
        target += args.segment_env_steps


def seed_range(first_and_count: tuple[int, int]) -> range:
    """The seeds of a (first seed, how many) pair."""
    return range(first_and_count[0], first_and_count[0] + first_and_count[1])


def evaluation_config(args: Args, weights: Path | None) -> PegRLTConfig:
    """The evaluation's peg stack: --env-kwargs and the gate saved with `weights`.

    None: the gate a run of the bench saves (the preset's and --env-kwargs' gate fields).
    """
    if weights is None:
        run_args = dataclasses.replace(PRESETS["sim-stand-in"][1], env_kwargs=args.env_kwargs)
        gate = run_args.gate_settings()
    else:
        gate = actor_gate(weights)
    return PegRLTConfig.sample_efficient(**env_kwargs(args)).with_gate_settings(gate)


def base_evaluations(
    args: Args, envs: Any, config: PegRLTConfig
) -> tuple[EvalResult, EvalResult | None]:
    """The base on the validation seeds and on the test seeds (None: no test seeds).

    Read from --base-file when it holds them for the same seeds, env kwargs and gate, else
    evaluated (and written there).

    Raises:
        SystemExit: When --base-file holds the base of other seeds, env kwargs or a gate.
    """
    setting = {
        "val_seeds": list(args.val_seeds), "test_seeds": list(args.test_seeds),
        "env_kwargs": json.loads(args.env_kwargs),
        "gate": {name: getattr(config, name) for name in GATE_FIELDS},
    }  # fmt: skip
    if args.base_file is not None and args.base_file.exists():
        saved = json.loads(args.base_file.read_text())
        if {key: saved.get(key) for key in setting} != setting:
            raise SystemExit(
                f"--base-file {args.base_file} holds the base of {saved.get('val_seeds')}, "
                f"{saved.get('test_seeds')}, env kwargs {saved.get('env_kwargs')} and gate "
                f"{saved.get('gate')}, not of this bench's {setting}: give another --base-file"
            )
        test = saved["test"] and eval_result_from_json(saved["test"])
        return eval_result_from_json(saved["validation"]), test
    zeros = np.zeros((envs.num_envs, envs.single_action_space.shape[0]), np.float32)

    def base(seeds: tuple[int, int], label: str) -> EvalResult:
        return evaluate_on_seeds(envs, seed_range(seeds), lambda obs: zeros, False, label)

    val = base(args.val_seeds, "base, validation seeds")
    test = base(args.test_seeds, "base, test seeds") if args.test_seeds[1] > 0 else None
    if args.base_file is not None:
        saved = setting | {"validation": dataclasses.asdict(val)}
        saved["test"] = test and dataclasses.asdict(test)
        args.base_file.parent.mkdir(parents=True, exist_ok=True)
        partial = args.base_file.with_suffix(".partial")
        partial.write_text(json.dumps(saved, indent=1))
        partial.replace(args.base_file)
    return val, test


def eval_result_from_json(saved: dict[str, Any]) -> EvalResult:
    """An `EvalResult` from its `dataclasses.asdict` JSON (whose seed keys became strings)."""
    by_seed = ("success_by_seed", "length_by_seed", "critical_steps_by_seed")
    keyed = {name: {int(seed): value for seed, value in saved[name].items()} for name in by_seed}
    return EvalResult(**saved | keyed)


def evaluate_base(args: Args) -> None:
    """The base's evaluations alone, into --base-file (runs of the bench then read them)."""
    if args.base_file is None:
        raise SystemExit("--phase base writes the base's evaluations to --base-file: give it")
    config = evaluation_config(args, None)
    envs = make_rlt_vector_env(config, args.num_envs)
    try:
        base_evaluations(args, envs, config)
    finally:
        envs.close()


def evaluate(args: Args) -> LearningResults:
    """The base and the segments' actors on the validation seeds, the last on the test seeds.

    The most telling first (the base, the last actor, the test seeds, then the earlier
    segments, latest first); results.json and the curve are written after each evaluation, so
    a stopped evaluation keeps what it measured.
    """
    segments = read_segments(args.output_dir)
    if not segments:
        raise SystemExit(f"no trained segments in {args.output_dir}: run --phase train first")
    config = evaluation_config(args, args.output_dir / "segments" / segments[-1]["weights"])
    val = seed_range(args.val_seeds)
    results = LearningResults(eval_seeds=list(val), train_seed=args.train_seed)
    final = segments[-1]
    results.env_steps, results.updates = final["env_steps"], final["updates"]
    results.transitions, results.wall_time_s = final["transitions"], final["wall_time_s"]
    results.intervention_env_steps = final["intervention_env_steps"]
    results.stop_reason = "total_env_steps"
    results.args = dataclasses.asdict(args) | {"robot_hour_flags": robot_hour_flags()}
    envs = make_rlt_vector_env(config, args.num_envs)
    try:
        dims = RLTDims.from_observation_space(envs.single_observation_space)
        device = resolve_device(config.feature_device)

        def actor_of(segment: dict[str, Any]) -> TrainedActor:
            weights = args.output_dir / "segments" / segment["weights"]
            return load_actor(weights, dims, config.chunk_len, device)

        base_val, base_test = base_evaluations(args, envs, config)
        results.base_success_rate = base_val.success_rate
        results.base_successful_seeds = base_val.successful_seeds
        results.base_critical_phase_median_steps = base_val.critical_phase_median_steps
        order = [segments[-1], *(["test"] if base_test else []), *segments[-2::-1]]
        for step in order:
            if step == "test":
                test, actor = seed_range(args.test_seeds), actor_of(segments[-1])
                label = "actor, test seeds"
                actor_test = evaluate_on_seeds(envs, test, actor.act, actor.ready, label)
                results.test = evaluation_on_test_seeds(test, base_test, actor_test, actor.ready)
                print(f"test seeds: actor {actor_test.success_rate:.3f}, "
                      f"base {base_test.success_rate:.3f}")  # fmt: skip
            else:
                actor = actor_of(step)
                label = f"actor at {step['env_steps']} env steps"
                result = evaluate_on_seeds(envs, val, actor.act, actor.ready, label)
                counts = (step["env_steps"], step["updates"], step["wall_time_s"])
                results.add_eval(result.point(*counts, actor_ready=actor.ready))
                results.evals.sort(key=lambda point: point.env_steps)
                print(f"{label}: {result.success_rate:.2f} (base {base_val.success_rate:.2f})")
            results.save(args.output_dir / "results.json")
            results.plot(args.output_dir / "success_curve.png",
                         title="One-env robot loop (sim stand-in), robot-hour learner")  # fmt: skip
    finally:
        envs.close()
    return results


def main(args: Args) -> None:
    if args.phase in ("all", "train"):
        train(args)
    if args.phase == "base":
        evaluate_base(args)
    if args.phase in ("all", "evaluate"):
        results = evaluate(args)
        print(json.dumps({key: value for key, value in results.to_dict().items()
                          if key not in ("evals", "args", "test")}, default=str))  # fmt: skip


if __name__ == "__main__":
    main(tyro.cli(Args))
