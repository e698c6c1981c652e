"""Wall time of one held-out evaluation, workers in lockstep against workers stepped as they answer.

Both evaluations run the same seeds on the same worker processes, in one run, alternating
(lockstep first): `rpent_agents.stage2.evaluation.evaluate_on_seeds` with `ready_envs=0`
(every worker each step, the step waiting for the slowest) and with `--ready-envs`
(`rpent-stage2 --eval-ready-envs`: a worker that answered gets its next chunk at once). The
policy is the embedded Stage 2 actor where the gate hands it control (as the training's
evaluations run an actor), or the base policy. One evaluation of one seed first warms the
workers up, untimed. The per-seed outcomes must match (`same_outcomes`).

    .venv/bin/python bench/eval_speed.py --num-envs 2 --num-seeds 8 --render-backend cpu \
        --feature-device cpu
    python3 bench/eval_speed.py --num-envs 16 --num-seeds 100 --render-backend gpu
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import tyro

from rpent_agents.common.devices import resolve_device
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import FeaturizedVectorEnv, make_rlt_vector_env
from rpent_agents.stage2.checkpoint import actor_gate, load_actor
from rpent_agents.stage2.evaluation import ChunkActFn, EvalResult, evaluate_on_seeds
from rpent_agents.stage2.networks import RLTDims


@dataclass
class Args:
    num_envs: int = 2
    """Worker processes."""
    num_seeds: int = 8
    """Held-out seeds first_seed, first_seed + 1, ...: one episode each per evaluation."""
    first_seed: int = 0
    ready_envs: int = 1
    """The asynchronous evaluation's answers per step (`rpent-stage2 --eval-ready-envs`)."""
    repeats: int = 1
    """Evaluations of each kind, alternating; the medians are reported."""
    policy: Literal["actor", "base"] = "actor"
    """actor: the embedded Stage 2 actor under the gate it was trained under; base: reference
    chunks only."""
    env: tyro.conf.OmitArgPrefixes[PegRLTConfig] = field(default_factory=PegRLTConfig)
    """The peg RLT stack (`--checkpoint`, `--render-backend`, `--feature-device`, ...); with
    `--policy actor` its gate is the one the actor was trained under."""


def act_fn_of_policy(args: Args, config: PegRLTConfig, envs: FeaturizedVectorEnv) -> ChunkActFn:
    """The chunks of `args.policy` (the base policy's are zeros: never executed)."""
    if args.policy == "base":
        flat = envs.single_action_space.shape[0]
        return lambda obs: np.zeros((len(obs["z_rl"]), flat), np.float32)
    dims = RLTDims.from_observation_space(envs.single_observation_space)
    device = resolve_device(config.feature_device)
    return load_actor(None, dims, config.chunk_len, device).act


def outcomes(result: EvalResult) -> dict[int, tuple]:
    """Per seed: success, length and critical-phase steps."""
    return {
        seed: (success, result.length_by_seed[seed], result.critical_steps_by_seed[seed])
        for seed, success in result.success_by_seed.items()
    }


def main(args: Args) -> dict:
    config = args.env.with_gate_settings(actor_gate(None) if args.policy == "actor" else {})
    seeds = range(args.first_seed, args.first_seed + args.num_seeds)
    envs = make_rlt_vector_env(config, args.num_envs)
    try:
        act, actor_ready = act_fn_of_policy(args, config, envs), args.policy == "actor"
        evaluate_on_seeds(envs, seeds[:1], act, actor_ready, "warm-up", ready_envs=0)
        results: dict[str, list[EvalResult]] = {"lockstep": [], "as_answered": []}
        for _ in range(args.repeats):
            for kind, ready_envs in (("lockstep", 0), ("as_answered", args.ready_envs)):
                result = evaluate_on_seeds(envs, seeds, act, actor_ready, kind, None, ready_envs)
                results[kind].append(result)
    finally:
        envs.close()
    median_s = {
        kind: float(np.median([result.wall_time_s for result in runs]))
        for kind, runs in results.items()
    }
    first = outcomes(results["lockstep"][0])
    return {
        "num_envs": args.num_envs,
        "num_seeds": args.num_seeds,
        "policy": args.policy,
        "ready_envs": args.ready_envs,
        "env_steps": results["lockstep"][0].env_steps,
        "success_rate": results["lockstep"][0].success_rate,
        "lockstep_s": [round(result.wall_time_s, 2) for result in results["lockstep"]],
        "as_answered_s": [round(result.wall_time_s, 2) for result in results["as_answered"]],
        "lockstep_over_as_answered": round(median_s["lockstep"] / median_s["as_answered"], 2),
        "same_outcomes": all(
            outcomes(result) == first for runs in results.values() for result in runs
        ),
    }


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(Args))))
