"""Where peg RLT episodes fail: per-episode traces, a report, a plot (`rpent-eval-rlt`).

`rpent-eval-rlt` evaluates the base policy (reference chunks only) or a Stage 2 actor on
held-out seeds of the vectorized peg RLT stack and records, per episode, each chunk's end
state from the env's info: grasp, peg-head position in the hole frame (x along the hole axis,
y and z in hole radii), whether the chunk was in the critical phase. The report sorts failures
into missed grasp, gate never opened and stalled in the critical phase, and says for the
stalled chunks where they are: in front of the box face or inside the hole, and whether they
lie inside the expert takeover's eligibility window (so a reader sees why a takeover would or
would not fire).

    rpent-eval-rlt --num-episodes 100 --output-dir runs/eval_base
    rpent-eval-rlt --policy actor --output-dir runs/eval_default_actor   # the embedded actor
    rpent-eval-rlt --policy actor --stage2-run runs/rlt_peg/run --output-dir runs/eval_actor

The output folder gets report.json (summary and every trace) and stalls.png.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tyro

from rpent_agents.common.cli import command
from rpent_agents.common.devices import resolve_device
from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.rollout.vector import make_rlt_vector_env
from rpent_agents.stage2.checkpoint import DEFAULT_ACTOR_DIR, actor_gate, load_actor
from rpent_agents.stage2.chunk_info import ChunkInfo
from rpent_agents.stage2.evaluation import EvalResult, evaluate_on_seeds
from rpent_agents.stage2.networks import RLTDims
from wrappers.takeover import ExpertTakeover

logger = logging.getLogger(__name__)


@dataclass
class ChunkEnd:
    """The state at the end of one chunk (from its last step's info).

    Attributes:
        head_x_m: Peg-head x in the hole frame (0 at the box centre, larger is deeper).
        head_y_radii: |y| of the peg head in hole radii.
        head_z_radii: |z| of the peg head in hole radii.
        entry_x_m: x of the box face (where the hole begins).
        grasped: The gripper holds the peg.
        critical: The chunk was decided in the critical phase (a replay transition).
        source: Who drove it ("vla", "actor", "expert", "human").
    """

    head_x_m: float
    head_y_radii: float
    head_z_radii: float
    entry_x_m: float
    grasped: bool
    critical: bool
    source: str | None

    @classmethod
    def of_chunk(cls, chunk: ChunkInfo) -> ChunkEnd:
        """The end of `chunk` (its info must report the peg task's hole signals)."""
        head, radius = chunk.peg_head_pos_at_hole, chunk.hole_radius
        if head is None or radius is None or chunk.hole_entry_x is None:
            raise KeyError("rpent-eval-rlt reads the peg task's hole signals from each chunk")
        return cls(
            head_x_m=float(head[0]),
            head_y_radii=abs(float(head[1])) / radius,
            head_z_radii=abs(float(head[2])) / radius,
            entry_x_m=chunk.hole_entry_x,
            grasped=chunk.is_grasped,
            critical=chunk.record_transition,
            source=chunk.action_source,
        )


@dataclass
class EpisodeTrace:
    """One evaluated episode.

    Attributes:
        seed: Its reset seed.
        success: It succeeded.
        length_steps: Simulator steps it ran.
        chunks: Its chunk ends, in order.
    """

    seed: int
    success: bool = False
    length_steps: int = 0
    chunks: list[ChunkEnd] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """The outcome: success, no_grasp, no_gate (grasped, never critical) or stalled."""
        if self.success:
            return "success"
        if not any(chunk.grasped for chunk in self.chunks):
            return "no_grasp"
        if not any(chunk.critical for chunk in self.chunks):
            return "no_gate"
        return "stalled"

    @property
    def critical_chunks(self) -> list[ChunkEnd]:
        """The chunks decided in the critical phase."""
        return [chunk for chunk in self.chunks if chunk.critical]


class TraceRecorder:
    """A `ChunkObserver` of `evaluate_on_seeds` that builds one trace per seed."""

    def __init__(self) -> None:
        """Start with no traces."""
        self.traces: dict[int, EpisodeTrace] = {}

    def __call__(self, seed: int, info: Mapping[str, Any], done: bool) -> None:
        """Add one chunk of the episode of `seed`."""
        trace = self.traces.setdefault(seed, EpisodeTrace(seed))
        chunk = ChunkInfo.from_info(info)
        trace.chunks.append(ChunkEnd.of_chunk(chunk))
        trace.length_steps += chunk.steps
        trace.success |= chunk.success


def stall_summary(chunks: list[ChunkEnd], takeover: ExpertTakeover) -> dict[str, Any]:
    """Where critical-phase chunks of failed episodes end, against the takeover's window.

    Args:
        chunks: Chunk ends of the critical phase of failed episodes.
        takeover: The takeover whose thresholds define its eligibility window.

    Returns:
        Counts and quantiles: head x, x past the box face, y and z in radii, grasped share,
        and the share inside the takeover window with the share failing each condition.
    """
    if not chunks:
        return {"chunks": 0}
    head_x = np.array([chunk.head_x_m for chunk in chunks])
    past_face = head_x - np.array([chunk.entry_x_m for chunk in chunks])
    yz = np.array([max(chunk.head_y_radii, chunk.head_z_radii) for chunk in chunks])
    grasped = np.array([chunk.grasped for chunk in chunks])
    window = takeover.window
    x_ok = head_x >= window.hole.x_min_m
    yz_ok = yz <= window.hole.yz_margin
    grasp_ok = grasped | (not window.require_grasp)

    def quantiles(values: np.ndarray) -> list[float]:
        return [round(float(value), 4) for value in np.quantile(values, [0.1, 0.5, 0.9])]

    return {
        "chunks": len(chunks),
        "head_x_m_q10_50_90": quantiles(head_x),
        "past_face_m_q10_50_90": quantiles(past_face),
        "inside_hole_share": float(np.mean(past_face > 0)),
        "max_yz_radii_q10_50_90": quantiles(yz),
        "grasped_share": float(np.mean(grasped)),
        "in_takeover_window_share": float(np.mean(x_ok & yz_ok & grasp_ok)),
        "x_below_takeover_min_share": float(np.mean(~x_ok)),
        "yz_outside_takeover_margin_share": float(np.mean(~yz_ok)),
        "not_grasped_share": float(np.mean(~grasped)),
    }


def diagnosis(traces: list[EpisodeTrace], takeover: ExpertTakeover) -> dict[str, Any]:
    """Outcome counts, gate share, lengths and the stall summary of `traces`."""
    outcomes = [trace.outcome for trace in traces]
    successes = [trace for trace in traces if trace.success]
    stalled = [trace for trace in traces if trace.outcome == "stalled"]
    return {
        "episodes": len(traces),
        "success_rate": float(np.mean([trace.success for trace in traces])),
        "gate_opened_share": float(np.mean([bool(trace.critical_chunks) for trace in traces])),
        "outcomes": {name: outcomes.count(name) for name in sorted(set(outcomes))},
        "median_success_len_steps": (
            float(np.median([trace.length_steps for trace in successes])) if successes else None
        ),
        "critical_chunks_per_success": [len(trace.critical_chunks) for trace in successes],
        "critical_chunks_per_stall": [len(trace.critical_chunks) for trace in stalled],
        "stalls": stall_summary(
            [chunk for trace in stalled for chunk in trace.critical_chunks], takeover
        ),
    }


def plot_stalls(traces: list[EpisodeTrace], takeover: ExpertTakeover, path: Path) -> None:
    """Scatter of critical-phase chunk ends (x past the face vs max(|y|,|z|) in radii)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.4), dpi=120)
    axes = figure.add_subplot()
    for outcome, color in (("stalled", "tab:red"), ("success", "tab:green")):
        chunks = [c for t in traces if t.outcome == outcome for c in t.critical_chunks]
        if chunks:
            axes.scatter(
                [c.head_x_m - c.entry_x_m for c in chunks],
                [max(c.head_y_radii, c.head_z_radii) for c in chunks],
                s=8, alpha=0.5, color=color, label=f"{outcome} episodes",
            )  # fmt: skip
    axes.axvline(0.0, color="black", linewidth=0.8, label="box face (hole entry)")
    axes.axhline(takeover.window.hole.yz_margin, color="gray", linestyle="--",
                 label="takeover y/z margin")  # fmt: skip
    axes.set(
        xlabel="peg head past the box face (m)",
        ylabel="max(|y|, |z|) of the peg head (hole radii)",
        title="critical-phase chunk ends",
    )
    axes.legend(fontsize=7)
    figure.savefig(path)


@dataclass
class EvalRLTArgs:
    """Evaluate the base policy or a Stage 2 actor on held-out seeds, with a failure report."""

    output_dir: Path = Path("runs/eval_rlt")
    """Folder of report.json and stalls.png (created)."""
    env: PegRLTConfig = field(default_factory=PegRLTConfig)
    """The peg RLT stack (the expert takeover stays off while evaluating)."""
    policy: Literal["base", "actor"] = "base"
    """base: reference chunks only; actor: a Stage 2 actor's mean chunks where its gate opens."""
    actor_gate: bool = True
    """(actor) Open the gate the actor was trained under, stored with its weights, in place of
    --env.trigger-mode and --env.missed-grasp-chunks; --no-actor-gate: those options."""
    stage2_run: Path | None = None
    """Stage 2 run folder or weights.pt of the actor (actor only); None: the embedded default
    actor (rpent_agents/stage2/default_actor)."""
    num_envs: int = 2
    """Worker processes."""
    seed: int = 0
    """First reset seed; episode i uses seed + i (held out: Stage 1 data starts at 1000)."""
    num_episodes: int = 100
    ready_envs: int = 1
    """Asynchronous evaluation: a step goes on once this many workers have finished their chunk
    (each starting its next seed at once when its episode ends); 0: synchronous. A seed gives
    the same episode either way."""


def evaluate_with_traces(args: EvalRLTArgs) -> tuple[EvalResult, list[EpisodeTrace]]:
    """Run the evaluation of `args`; returns the result and the per-seed traces."""
    envs = make_rlt_vector_env(args.env, args.num_envs)
    try:
        act, actor_ready = _policy(args, envs)
        recorder = TraceRecorder()
        result = evaluate_on_seeds(
            envs,
            range(args.seed, args.seed + args.num_episodes),
            act=act,
            actor_ready=actor_ready,
            progress_label="actor" if actor_ready else "base policy",
            observer=recorder,
            ready_envs=args.ready_envs,
        )
    finally:
        envs.close()
    return result, [recorder.traces[seed] for seed in sorted(recorder.traces)]


def _policy(args: EvalRLTArgs, envs: Any) -> tuple[Any, bool]:
    """The chunk policy of the evaluation and whether the actor drives the critical phase."""
    flat = envs.single_action_space.shape[0]
    if args.policy == "base":
        return (lambda obs: np.zeros((envs.num_envs, flat), np.float32)), False
    dims = RLTDims.from_observation_space(envs.single_observation_space)
    device = resolve_device(args.env.feature_device)
    actor = load_actor(args.stage2_run, dims, args.env.chunk_len, device)
    return actor.act, True


def main() -> None:
    """Entry point of `rpent-eval-rlt`."""
    with command("rpent-eval-rlt"):
        _evaluate_and_report(tyro.cli(EvalRLTArgs))


def with_actor_gate(args: EvalRLTArgs) -> EvalRLTArgs:
    """`args` with the gate the actor was trained under (`--policy actor`, `actor_gate`)."""
    if args.policy != "actor" or not args.actor_gate:
        return args
    return dataclasses.replace(args, env=args.env.with_gate_settings(actor_gate(args.stage2_run)))


def _evaluate_and_report(args: EvalRLTArgs) -> None:
    if args.stage2_run is not None and args.policy != "actor":
        raise ValueError("--stage2-run is read by --policy actor only")
    args = with_actor_gate(args)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    result, traces = evaluate_with_traces(args)
    takeover = ExpertTakeover(expert=lambda observation: None)  # its default thresholds
    report = {
        "policy": args.policy,
        "seeds": [args.seed, args.seed + args.num_episodes - 1],
        "env": asdict(args.env),
        "stage2_run": args.stage2_run or (DEFAULT_ACTOR_DIR if args.policy == "actor" else None),
        "diagnosis": diagnosis(traces, takeover),
        "traces": [asdict(trace) for trace in traces],
    }
    (args.output_dir / "report.json").write_text(json.dumps(report, indent=1, default=str))
    plot_stalls(traces, takeover, args.output_dir / "stalls.png")
    summary = report["diagnosis"]
    print(
        f"success {result.success_rate:.2f}, gate opened {summary['gate_opened_share']:.2f}, "
        f"outcomes {summary['outcomes']} over {len(traces)} seeds"
    )


if __name__ == "__main__":
    main()
