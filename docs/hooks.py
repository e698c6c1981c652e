"""MkDocs hook: serve the benchmark figures of `bench/figures/` and their JSON as site files.

The figures stay where the benchmarks write them (one copy in the repository); pages link to
them as `bench/figures/<name>` relative to the docs root (the current-numbers table of
docs/benchmarks.md links the JSON each figure came from).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = Path("bench/figures")
FIGURE_SUFFIXES = (".png", ".svg", ".json", ".jsonl")


def on_files(files: Files, config: Any) -> Files:
    """Add every figure and JSON file under bench/figures/ to the site at the same relative path."""
    for path in sorted((REPO_ROOT / FIGURES_DIR).rglob("*")):
        if path.suffix in FIGURE_SUFFIXES:
            files.append(
                File(
                    path.relative_to(REPO_ROOT).as_posix(),
                    src_dir=str(REPO_ROOT),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files
