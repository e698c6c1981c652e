"""`VenvBackendEnv`: a registered env whose simulator runs in a venv that `rpent-backend-venv` made.

RoboCasa and RoboTwin differ in their task arguments; this class holds what they share: the
render modes (None or "rgb_array"), the asset folder handed to the worker in an environment
variable, the worker's interpreter (`python=`, else `$<python variable>`, else the backend's
default venv) and the `task` attribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpent_envs.subprocess_env.env import SubprocessEnv
from rpent_envs.subprocess_env.venv import resolve_backend_python


@dataclass(frozen=True)
class BackendVenv:
    """Where a backend's code and interpreter are found.

    Attributes:
        name: The backend's venv name (`rpent-backend-venv NAME`).
        factory: "path/to/backend.py:Class" that the worker builds the env with.
        python_variable: Environment variable naming the venv's interpreter (optional).
        assets_variable: The backend's own environment variable for its asset folder.
    """

    name: str
    factory: str
    python_variable: str
    assets_variable: str


class VenvBackendEnv(SubprocessEnv):
    """A `SubprocessEnv` of a backend venv; subclasses check their own arguments first."""

    def __init__(
        self,
        venv: BackendVenv,
        task: str,
        task_kwargs: dict[str, Any],
        *,
        render_mode: str | None,
        assets_dir: str | Path | None,
        python: str | Path | None,
        make_timeout_s: float,
        call_timeout_s: float,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        """Start the backend's worker and build `task` in it.

        Args:
            venv: The backend.
            task: The backend's task name (also the worker's `task` argument).
            task_kwargs: The worker's other arguments (JSON-serialisable).
            render_mode: None or "rgb_array".
            assets_dir: Asset folder for the worker (sets `venv.assets_variable` there); None
                keeps the variable as it is in this process.
            python: Interpreter of the venv; default `$<venv.python_variable>`, else the venv
                `rpent-backend-venv <venv.name>` made.
            make_timeout_s: Seconds allowed for importing the backend and building the task.
            call_timeout_s: Seconds allowed per reset / step.
            worker_env: Further environment variables of the worker.

        Raises:
            ValueError: An unknown render mode.
            FileNotFoundError: The venv is missing (the message says how to make it).
        """
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: use None or 'rgb_array'")
        worker_env = dict(worker_env or {})
        if assets_dir is not None:
            worker_env[venv.assets_variable] = str(Path(assets_dir).expanduser().resolve())
        super().__init__(
            venv.factory,
            {"task": task, **task_kwargs, "render_mode": render_mode},
            python=resolve_backend_python(venv.name, python, venv.python_variable),
            worker_env=worker_env,
            make_timeout_s=make_timeout_s,
            call_timeout_s=call_timeout_s,
        )
        self.task = task
