"""One success-against-env-steps plot of several Stage 2 runs (results.json files), base as a line.

    .venv/bin/python bench/plot_stage2_runs.py --output bench/figures/issue13/success_curves.png \
        --runs "sample-efficient=bench/figures/issue13/stage2_sample_efficient_results.json" \
               "reference actor=bench/figures/issue13/stage2_reference_actor_results.json"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tyro
from matplotlib.figure import Figure

from rpent_agents.stage2.results import LearningResults


@dataclass
class Args:
    runs: list[str]
    """label=path/to/results.json, one per run (all on the same held-out seeds)."""
    output: Path
    card: str = "H200"
    """The card the runs ran on, named in the title."""


def main(args: Args) -> None:
    figure = Figure(figsize=(6.4, 4.0), dpi=120)
    axes = figure.add_subplot()
    base = None
    for item in args.runs:
        label, _, path = item.partition("=")
        results = LearningResults.load(Path(path))
        base = results.base_success_rate if base is None else base
        steps = [0] + [point.env_steps for point in results.evals]
        rates = [results.base_success_rate] + [point.success_rate for point in results.evals]
        axes.plot(steps, rates, marker="o", label=label)
        seeds = len(results.eval_seeds)
    axes.axhline(base, linestyle="--", color="gray", label="base policy (reference chunks)")
    axes.set(
        xlabel="training env steps",
        ylabel=f"success rate ({seeds} held-out seeds)",
        ylim=(0.4, 1.0),
        title=f"Stage 2 on the peg RLT stack ({args.card})",
    )
    axes.legend(fontsize=8)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.output)


if __name__ == "__main__":
    main(tyro.cli(Args))
