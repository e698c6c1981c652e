"""The flywheel gain table (issue 25) from the folders bench/device/flywheel_gain.sh leaves.

    python bench/flywheel_table.py --work-dir /tmp/flywheel --output-dir /tmp/flywheel

reads the `rpent-run` summaries (`eval_*`, `forget_*`, `record_*`), the exports' `report.json`
(`cache_*`), the fine-tuned checkpoints' metadata (`ft_*/config.json`) and the stages' wall
times (`logs/wall_s.txt`), and writes
`table.json` (issue 25's rows: the default, own-success and actor-success VLAs on the held-out
seeds; then every model on the training seeds it was evaluated on, the data and the
fine-tunes) and `summary.md` (the same as Markdown tables). A missing run gives a row of nulls.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EVAL_DIRS = {"default": "eval_default", "own-success": "eval_own", "actor-success": "eval_actor"}
# The folders of each fine-tuned model: its recorded run, the export, the checkpoint and its
# evaluation on training seeds (flywheel_gain.sh's names).
FINE_TUNED = {
    "own-success": {
        "record": "record_vla",
        "cache": "cache_own",
        "ft": "ft_own",
        "forget": "forget_own",
    },
    "actor-success": {
        "record": "record_actor",
        "cache": "cache_actor",
        "ft": "ft_actor",
        "forget": "forget_actor",
    },
}


def seed_ranges(seeds: list[int]) -> str:
    """Seeds written as ranges: [0, 1, 2, 5] -> "0..2, 5"."""
    ranges: list[list[int]] = []
    for seed in sorted(seeds):
        if ranges and ranges[-1][1] + 1 == seed:
            ranges[-1][1] = seed
        else:
            ranges.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in ranges)


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def outcomes(run_dir: Path) -> dict[int, bool] | None:
    """Seed -> verdict of a `rpent-run` summary (None when the run is missing)."""
    summary = read_json(run_dir / "run_summary.json")
    if summary is None:
        return None
    return {episode["seed"]: bool(episode["success"]) for episode in summary["episode_outcomes"]}


def row(model: str, verdicts: dict[int, bool] | None, seeds: list[int] | None = None) -> dict:
    """A table row: successes of `model` over `seeds` (every seed of the run when None)."""
    if verdicts is None:
        return {"model": model, "successes": None, "episodes": None, "eval_seeds": None}
    seeds = sorted(verdicts) if seeds is None else [s for s in seeds if s in verdicts]
    successes = sum(verdicts[seed] for seed in seeds)
    return {
        "model": model,
        "successes": successes,
        "episodes": len(seeds),
        "eval_seeds": seed_ranges(seeds),
        "success_rate": successes / len(seeds) if seeds else None,
    }


def training_seed_rows(work_dir: Path) -> list[dict]:
    """Every model on the training seeds the fine-tuned ones were evaluated on (forgetting).

    The default's and the actor's verdicts come from their recorded runs on the same seeds;
    `data_seeds` restricts a fine-tuned model to the seeds whose episodes it was tuned on.
    """
    forget = {model: outcomes(work_dir / dirs["forget"]) for model, dirs in FINE_TUNED.items()}
    seeds = sorted({seed for verdicts in forget.values() if verdicts for seed in verdicts})
    recorded = {"default": outcomes(work_dir / "record_vla")}
    recorded["actor (Stage 2)"] = outcomes(work_dir / "record_actor")
    rows = [row(model, verdicts, seeds) for model, verdicts in recorded.items()]
    for model, verdicts in forget.items():
        data_run = outcomes(work_dir / FINE_TUNED[model]["record"]) or {}
        data_seeds = [seed for seed in seeds if data_run.get(seed)]
        rows.append({**row(model, verdicts, seeds), "data_seeds": row(model, verdicts, data_seeds)})
    return rows


def data_and_fine_tunes(work_dir: Path) -> dict[str, dict]:
    """Per fine-tuned model: the recorded run, the export's counts and the fine-tune's metadata."""
    described = {}
    for model, dirs in FINE_TUNED.items():
        report = read_json(work_dir / dirs["cache"] / "report.json") or {}
        config = read_json(work_dir / dirs["ft"] / "config.json") or {}
        described[model] = {
            "recorded": row(model, outcomes(work_dir / dirs["record"])),
            "sources": report.get("sources"),
            "export_counts": report.get("counts"),
            "excluded_tasks": report.get("excluded", {}).get("tasks"),
            "fine_tune": config.get("metadata"),
        }
    return described


def wall_times(work_dir: Path) -> dict[str, int]:
    """Seconds of each stage of the job (`logs/wall_s.txt`: "name seconds" lines)."""
    path = work_dir / "logs" / "wall_s.txt"
    lines = path.read_text().splitlines() if path.is_file() else []
    return {name: int(seconds) for name, seconds in (line.split() for line in lines)}


def markdown(table: dict) -> str:
    """The rows as Markdown tables: held-out seeds, training seeds, the data."""

    def cell(entry: dict) -> str:
        if entry["successes"] is None:
            return "not run"
        return f"{entry['successes']} / {entry['episodes']} ({entry['success_rate']:.2f})"

    lines = ["| model | held-out seeds | successes / episodes (rate) |", "|---|---|---|"]
    lines += [f"| {r['model']} | {r['eval_seeds']} | {cell(r)} |" for r in table["rows"]]
    lines += ["", "| model | training seeds | successes / episodes | on its data's seeds |"]
    lines += ["|---|---|---|---|"]
    for entry in table["on_training_seeds"]:
        data = cell(entry["data_seeds"]) if "data_seeds" in entry else "-"
        lines.append(f"| {entry['model']} | {entry['eval_seeds']} | {cell(entry)} | {data} |")
    lines += [
        "",
        "| model | recorded run | exported episodes / frames | fine-tune |",
        "|---|---|---|---|",
    ]
    for model, data in table["data"].items():
        counts = data["export_counts"] or {}
        tune = data["fine_tune"] or {}
        lines.append(
            f"| {model} | {cell(data['recorded'])} | {counts.get('episodes')} /"
            f" {counts.get('frames')} | step {tune.get('step')}, val/chunk_mse"
            f" {tune.get('val_chunk_mse')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--settings", type=Path, help="JSON of the job's settings, copied in")
    args = parser.parse_args()
    table = {
        "rows": [row(model, outcomes(args.work_dir / run)) for model, run in EVAL_DIRS.items()],
        "on_training_seeds": training_seed_rows(args.work_dir),
        "data": data_and_fine_tunes(args.work_dir),
        "settings": read_json(args.settings) if args.settings else None,
        "wall_s": wall_times(args.work_dir),
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "table.json").write_text(json.dumps(table, indent=2) + "\n")
    (args.output_dir / "summary.md").write_text(markdown(table))
    print(markdown(table))


if __name__ == "__main__":
    main()
