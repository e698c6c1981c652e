"""`RecordTrajectory`: every episode of a raw per-step env becomes one trajectory record.

The records (DESIGN.md §6) are what `rpent-flywheel` exports to LeRobot. Code that decides
actions labels them through `recorders.provenance.provenance_of(env)`, which finds this
wrapper's `provenance` (a `TrajectoryWriter`) anywhere in the wrapper stack.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from recorders.image_writer import DEFAULT_PNG_COMPRESSION
from recorders.provenance import ActionSource
from recorders.trajectory import TaskMetadata, TrajectoryWriter
from rpent_envs.image_demand import image_demand_of


def environment_verdict(info: dict[str, Any]) -> bool | None:
    """The env's own success verdict from `info["success"]`; None when it gives none."""
    value = np.asarray(info.get("success", None))
    if value.dtype == np.bool_ and value.size == 1:
        return bool(value.item())
    return None


def _copy_observation(observation: Any) -> Any:
    """A copy that the env cannot change by reusing its buffers on the next step."""
    if isinstance(observation, dict):
        return {key: np.array(value, copy=True) for key, value in observation.items()}
    return {"observation": np.array(observation, copy=True)}


class RecordTrajectory(
    gym.Wrapper[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray], np.ndarray],
    gym.utils.RecordConstructorArgs,
):
    """Records each episode as a task folder `output_dir/trajectories/<task_id>/`.

    Wrap a *raw* env (flat Dict observation of DESIGN.md §2, one action per step). Each step
    appends the action, its pre-action observation (images as PNG under `artifacts/`, written
    by background threads), reward, terminated and truncated to `actions.jsonl`, labelled with
    the source set through `provenance`. At the episode's end `task.json` gets the env's verdict
    `result.environment_success` (`info["success"]`); an episode cut short by `reset()` or
    `close()` gets null. `task.json` also stores env id, env kwargs, reset seed and options, so
    the episode can be replayed.

    The recorder stores the images of every step, so it holds the env's image demand
    (`rpent_envs.image_demand`): chunk executors above it render every step.

    Each episode starts with the label `default_source` (None: recorded as null, "unknown").
    Set labels after `reset()` returns: `provenance.set_action_source("vla", call_id, pred_id)`.

    Example:
        >>> env = gym.make("RPent/PegInsertionSideWideClearance-v1", obs_mode="rgb")
        >>> env = RecordTrajectory(env, output_dir="runs/r1", robot="panda")
        >>> obs, info = env.reset(seed=0)
        >>> log = provenance_of(env)  # the recorder's ProvenanceLog
        >>> log.set_action_source("scripted", call_id=log.tool_call("open_gripper", {}))
        >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        >>> env.close()  # flushes images; the unfinished episode gets environment_success null
    """

    def __init__(
        self,
        env: gym.Env,
        output_dir: str | os.PathLike[str],
        *,
        task_id: str | None = None,
        robot: str | None = None,
        fps: int | None = None,
        suite: str | None = None,
        task_index: int | None = None,
        planner: dict[str, Any] | None = None,
        default_source: ActionSource | None = None,
        image_writer_threads: int = 1,
        image_queue_size: int = 64,
        png_compression: int = DEFAULT_PNG_COMPRESSION,
    ) -> None:
        """Wrap `env` and prepare `output_dir/trajectories/`.

        Args:
            env: A raw per-step env.
            output_dir: Run folder (new tasks are added next to existing ones).
            task_id: Folder name of the first episode (later ones: `set_next_task_id`, else
                derived as `<env id>-seed<seed>-ep<episode>`); an existing folder is never
                overwritten.
            robot: Robot name stored in `task.json` and in the exported dataset.
            fps: Control frequency; default `env.metadata["render_fps"]`.
            suite: Benchmark suite; default the env kwarg `suite`.
            task_index: Task index in the suite; default the env kwarg `task_id`.
            planner: Who plans, e.g. {"kind": "llm", "model": "..."}, stored in `task.json`.
            default_source: Source of actions nobody labelled (see `TrajectoryWriter`).
            image_writer_threads: Threads writing PNG images (0: in the stepping thread).
            image_queue_size: Images that may wait before `step` blocks.
            png_compression: zlib level of the PNG artifacts, 0 (default: fastest, ~2x the
                disk) to 9 (smallest, slowest).

        Raises:
            ValueError: When no fps is given and the env's metadata has no `render_fps`.
        """
        gym.utils.RecordConstructorArgs.__init__(
            self,
            output_dir=str(output_dir),
            task_id=task_id,
            robot=robot,
            fps=fps,
            suite=suite,
            task_index=task_index,
            planner=planner,
            default_source=default_source,
            image_writer_threads=image_writer_threads,
            image_queue_size=image_queue_size,
            png_compression=png_compression,
        )
        gym.Wrapper.__init__(self, env)
        fps = fps if fps is not None else env.metadata.get("render_fps")
        if not isinstance(fps, int) or fps <= 0:
            raise ValueError(
                f"fps={fps!r}: pass fps= (control steps per second); the env's metadata has no"
                " positive int 'render_fps'"
            )
        spec = env.spec
        self._env_id = spec.id if spec is not None else None
        self._env_kwargs = dict(spec.kwargs) if spec is not None else {}
        self._static_metadata = {
            "robot": robot,
            "fps": fps,
            "suite": suite if suite is not None else self._env_kwargs.get("suite"),
            "task_index": task_index if task_index is not None else self._env_kwargs.get("task_id"),
            "planner": planner,
        }
        self._writer = TrajectoryWriter(
            output_dir,
            default_source=default_source,
            image_writer_threads=image_writer_threads,
            image_queue_size=image_queue_size,
            png_compression=png_compression,
        )
        self._next_task_id = task_id
        self._pre_action_observation: dict[str, np.ndarray] | None = None
        self._image_demand = image_demand_of(env)
        if self._image_demand is not None:
            self._image_demand.hold(self)

    @property
    def provenance(self) -> TrajectoryWriter:
        """The recorder's `ProvenanceLog` (what `provenance_of(env)` returns)."""
        return self._writer

    @property
    def task_dir(self) -> Path | None:
        """Folder of the episode being recorded (None before the first reset)."""
        return self._writer.task_dir

    def set_next_task_id(self, task_id: str) -> None:
        """Name the folder of the episode the next `reset()` starts."""
        self._next_task_id = task_id

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Close the previous task (null verdict if unfinished) and start recording a new one."""
        self._writer.close_task(end_reason="reset")
        self._pre_action_observation = None
        observation, info = self.env.reset(seed=seed, options=options)
        unwrapped = self.env.unwrapped
        metadata = TaskMetadata(
            env_id=self._env_id,
            env_kwargs=self._env_kwargs,
            instruction=getattr(unwrapped, "task_description", None) or info.get("task"),
            seed=seed,
            episode_seed=info.get("episode_seed"),
            reset_options=options,
            **self._static_metadata,
        )
        self._writer.start_task(metadata, task_id=self._next_task_id)
        self._next_task_id = None
        self._pre_action_observation = _copy_observation(observation)
        return observation, info

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env and record the action with its pre-action observation."""
        if self._pre_action_observation is None:
            raise gym.error.ResetNeeded("RecordTrajectory: call reset() before step()")
        self._writer.raise_if_failed()  # stop before acting when an image was lost
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._writer.record_action(
            action, self._pre_action_observation, reward, terminated, truncated
        )
        self._pre_action_observation = _copy_observation(observation)
        if terminated or truncated:
            self._writer.finish_task(
                environment_verdict(info), "terminated" if terminated else "truncated"
            )
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Finish the open task (null verdict if the episode is still running), then the env."""
        try:
            self._writer.close()
        finally:
            if self._image_demand is not None:
                self._image_demand.release(self)
            super().close()
