"""`RPent/Libero-v0`: one LIBERO or LIBERO-PRO task as a plain Gymnasium env.

LIBERO's `OffScreenRenderEnv` returns a 4-tuple, upside-down OpenGL images and dozens of raw
observables; this adapter returns the flat Dict convention of DESIGN.md §2 and the 5-tuple step.
An episode starts from one of the benchmark's initial states and lets the scene settle for a
few no-op steps, as LIBERO evaluations do.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rpent_envs.action_checks import checked_action
from rpent_envs.episode import episode_seed_of, observation_space, success_info
from rpent_envs.libero.backend import LiberoTask, import_libero, load_task
from rpent_envs.state_checks import INVALID_STATE_KEY, LastFiniteState

logger = logging.getLogger(__name__)

ACTION_DIM = 7
STATE_DIM = 8
CONTROL_FREQ_HZ = 20
GRIPPER_OPEN, GRIPPER_CLOSED = -1.0, 1.0
NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, GRIPPER_OPEN], dtype=np.float32)
CAMERAS = {"image": "agentview", "wrist_image": "robot0_eye_in_hand"}
# Evaluation horizons of the standard suites (their longest training demos plus a margin);
# a PRO suite uses its base suite's.
SUITE_MAX_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
DEFAULT_MAX_STEPS = 600
ObsMode = Literal["rgb", "state"]
InstructionSource = Literal["env", "benchmark"]


def suite_max_steps(suite: str) -> int:
    """Episode length of `suite`: its base suite's evaluation horizon, else 600 steps."""
    for base in sorted(SUITE_MAX_STEPS, key=len, reverse=True):
        if suite == base or suite.startswith(base + "_"):
            return SUITE_MAX_STEPS[base]
    return DEFAULT_MAX_STEPS


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """Axis-angle of a unit quaternion with angle 2*acos(w) in [0, 2*pi], unwrapped.

    Unlike a canonical rotation vector (angle <= pi), this does not jump from +pi to -pi while
    the gripper points down; it is the convention of the LIBERO datasets' `state`.
    """
    w = float(np.clip(quat_xyzw[3], -1.0, 1.0))
    sin_half = np.sqrt(1.0 - w * w)
    if np.isclose(sin_half, 0.0):
        return np.zeros(3)
    return np.asarray(quat_xyzw[:3]) * 2.0 * np.arccos(w) / sin_half


def eef_state(raw_obs: dict[str, np.ndarray]) -> np.ndarray:
    """The 8-D proprioceptive state: eef position, eef axis-angle, two gripper finger positions."""
    axis_angle = quat_to_axis_angle(raw_obs["robot0_eef_quat"])  # robosuite quaternions: xyzw
    parts = [raw_obs["robot0_eef_pos"], axis_angle, raw_obs["robot0_gripper_qpos"]]
    return np.concatenate(parts).astype(np.float32)


def _upright(image: np.ndarray) -> np.ndarray:
    """Rotate an OpenGL-convention (bottom-up) frame by 180 degrees, as LIBERO datasets store it."""
    return np.ascontiguousarray(image[::-1, ::-1])


class LiberoEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """A LIBERO / LIBERO-PRO task: Panda arm, delta end-effector control at 20 Hz.

    Observation (Dict): `image` (agentview camera) and `wrist_image` (eye-in-hand camera), uint8
    HxWx3, upright (rotated 180 degrees from MuJoCo's frame, like the LIBERO LeRobot datasets),
    only with `obs_mode="rgb"`; `state`, float32 (8,) = eef position (m), eef orientation as
    axis-angle (rad, angle in [0, 2 pi] as in the LIBERO datasets), gripper finger positions (2,
    m).
    Action: float32 (7,) in [-1, 1] = eef translation (x 0.05 m) and rotation (x 0.5 rad) deltas
    of robosuite's OSC_POSE controller, and the gripper (-1 open, 1 close).
    Reward: 1.0 on success, else 0.0; the episode terminates on success and truncates after the
    suite's evaluation horizon (`max_episode_steps`; `gym.make(..., max_episode_steps=N)` adds
    a shorter limit). A step whose state is NaN or inf (a MuJoCo blow-up) truncates the episode
    with `info["invalid_state"]` naming the entries; its observation holds the last finite
    state (`rpent_envs.state_checks`).

    The instruction is `task_description` and `info["task"]`: by default the BDDL file's
    language, which LIBERO-PRO's language and task suites rewrite (the registry's
    `task.language` keeps the base instruction there).

    Info keys: `success` / `is_success` (bool), `task` (the instruction), `init_state_id` (int,
    index of the benchmark initial state of the episode), `episode_seed` (int).

    Example:
        >>> import gymnasium as gym, rpent_envs
        >>> env = gym.make("RPent/Libero-v0", suite="libero_goal", task_id=1, image_size=64)
        >>> obs, info = env.reset(seed=0)
        >>> obs["image"].shape, obs["state"].shape, info["task"]
        ((64, 64, 3), (8,), 'put the bowl on the stove')
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_FREQ_HZ}

    def __init__(
        self,
        suite: str = "libero_goal",
        task_id: int = 0,
        init_state_id: int | None = None,
        obs_mode: ObsMode = "rgb",
        image_size: int = 128,
        render_mode: str | None = None,
        settle_steps: int = 10,
        instruction_source: InstructionSource = "env",
        shadows_and_reflections: bool = False,
    ) -> None:
        """Build the task's MuJoCo scene (CPU physics, offscreen rendering).

        Args:
            suite: Suite name, e.g. "libero_goal" or a LIBERO-PRO one like "libero_goal_lan".
            task_id: Index of the task in the suite.
            init_state_id: Start every episode from this benchmark initial state; None draws
                one per reset from `np_random`. `reset(options={"init_state_id": k})` overrides.
            obs_mode: "rgb" for both cameras and the state, "state" for the state only (no
                renderer, several times faster).
            image_size: Height and width of both camera images, in pixels.
            render_mode: None or "rgb_array" (the agentview image; needs `obs_mode="rgb"`).
            settle_steps: No-op steps after restoring the initial state so objects come to rest.
            instruction_source: "env" (the BDDL file's language) or "benchmark" (the suite
                registry's `task.language`, what standard LIBERO evaluations pass to policies).
            shadows_and_reflections: Render shadows and reflections (LIBERO's look; about twice
                the cost of software rendering on a CPU).
        """
        self._check_arguments(obs_mode, image_size, render_mode, instruction_source)
        self.task: LiberoTask = load_task(suite, task_id)
        num_init_states = len(self.task.init_states)
        if init_state_id is not None and not 0 <= init_state_id < num_init_states:
            raise ValueError(
                f"init_state_id={init_state_id} is out of range: the task has {num_init_states}"
                f" initial states (0..{num_init_states - 1}); or pass None to draw one"
            )
        self.init_state_id = init_state_id
        self.obs_mode = obs_mode
        self.render_mode = render_mode
        self.max_episode_steps = suite_max_steps(self.task.suite)
        self.settle_steps = settle_steps
        self.shadows_and_reflections = shadows_and_reflections
        self._sim = self._build_sim(image_size)
        self.task_description: str = (
            self._sim.language_instruction
            if instruction_source == "env"
            else self.task.benchmark_language
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.observation_space = observation_space(
            STATE_DIM, image_size if obs_mode == "rgb" else None
        )
        self.episode_seed: int | None = None
        self.current_init_state_id: int | None = None
        self._elapsed_steps = 0
        self._last_obs: dict[str, np.ndarray] | None = None
        self._states = LastFiniteState(f"LIBERO {self.task.suite} task {task_id}")

    @staticmethod
    def _check_arguments(
        obs_mode: str, image_size: int, render_mode: str | None, instruction_source: str
    ) -> None:
        if obs_mode not in ("rgb", "state"):
            raise ValueError(f"obs_mode={obs_mode!r}: use 'rgb' or 'state'")
        if image_size < 16:
            raise ValueError(f"image_size={image_size}: use at least 16 pixels")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: use None or 'rgb_array'")
        if render_mode == "rgb_array" and obs_mode != "rgb":
            raise ValueError("render_mode='rgb_array' renders the agentview: use obs_mode='rgb'")
        if instruction_source not in ("env", "benchmark"):
            raise ValueError(f"instruction_source={instruction_source!r}: use 'env' or 'benchmark'")

    def _build_sim(self, image_size: int) -> Any:
        _, libero_envs = import_libero()
        with_cameras = self.obs_mode == "rgb"
        return libero_envs.OffScreenRenderEnv(
            bddl_file_name=str(self.task.bddl_path),
            camera_heights=image_size,
            camera_widths=image_size,
            use_camera_obs=with_cameras,
            has_offscreen_renderer=with_cameras,
            control_freq=CONTROL_FREQ_HZ,
            hard_reset=False,  # reuse the compiled model: a reset takes ~0.7 s instead of ~4.5 s
            ignore_done=True,  # this adapter owns the time limit
        )

    @property
    def elapsed_steps(self) -> int:
        """Steps taken in the current episode."""
        return self._elapsed_steps

    @property
    def libero_env(self) -> Any:
        """LIBERO's `OffScreenRenderEnv` (its `.env` is the robosuite task), for privileged use."""
        return self._sim

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Restore a benchmark initial state and let the scene settle.

        Options: `init_state_id` (int) picks the initial state of this episode.
        """
        super().reset(seed=seed)
        self.episode_seed = episode_seed_of(seed, self.np_random)
        self.current_init_state_id = self._pick_init_state(options or {})
        self._sim.seed(self.episode_seed)
        self._sim.reset()
        self._reset_gripper_commands()
        self._configure_renderer()
        with self._cameras_off():
            self._sim.set_init_state(self.task.init_states[self.current_init_state_id])
            for _ in range(self.settle_steps):
                self._sim.step(NOOP_ACTION.astype(np.float64))
        raw_obs = self._sim.env._get_observations(force_update=True)
        self._elapsed_steps = 0
        self._last_obs = self._observation(raw_obs)
        self._last_obs["state"] = self._states.start(self._last_obs["state"])
        return self._last_obs, self._info(success=False)

    def _pick_init_state(self, options: dict[str, Any]) -> int:
        num_init_states = len(self.task.init_states)
        init_state_id = options.get("init_state_id", self.init_state_id)
        if init_state_id is None:
            return int(self.np_random.integers(num_init_states))
        if not 0 <= int(init_state_id) < num_init_states:
            raise ValueError(
                f"options['init_state_id']={init_state_id} is out of range: use "
                f"0..{num_init_states - 1}"
            )
        return int(init_state_id)

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply one delta-eef action for one 0.05 s control step."""
        action = checked_action(action, (ACTION_DIM,), np.float32)
        raw_obs, _, _, _ = self._sim.step(np.clip(action, -1.0, 1.0).astype(np.float64))
        self._elapsed_steps += 1
        success = bool(self._sim.check_success())
        truncated = not success and self._elapsed_steps >= self.max_episode_steps
        self._last_obs = self._observation(raw_obs)
        self._last_obs["state"], invalid = self._states.check(self._last_obs["state"])
        info = self._info(success)
        if invalid is not None:
            info[INVALID_STATE_KEY] = invalid
        return self._last_obs, float(success), success, truncated or invalid is not None, info

    def render(self) -> np.ndarray | None:
        """Return the current agentview image when `render_mode="rgb_array"`."""
        if self.render_mode is None or self._last_obs is None:
            return None
        return self._last_obs["image"]

    def close(self) -> None:
        """Release the MuJoCo simulation and its rendering context."""
        if self._sim is not None and hasattr(self._sim, "env"):
            self._sim.close()

    def _reset_gripper_commands(self) -> None:
        """Zero robosuite's integrated gripper command, as a freshly loaded model has it.

        A soft reset (`hard_reset=False`) keeps the gripper model object, whose command ramps
        by a fixed speed per step; without this the same seed would not replay an episode.
        """
        for robot in self._sim.env.robots:
            robot.gripper.current_action = np.zeros(robot.gripper.dof)

    def _configure_renderer(self) -> None:
        """Switch shadows and reflections, the costliest effects of software rendering."""
        context = getattr(self._sim.env.sim, "_render_context_offscreen", None)
        if context is None:
            return
        import mujoco

        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            context.scn.flags[flag] = int(self.shadows_and_reflections)

    def _cameras_off(self) -> Any:
        """Context in which camera observables are not rendered (restoring and settling)."""
        return _DisabledObservables(self._sim.env, [f"{cam}_image" for cam in CAMERAS.values()])

    def _observation(self, raw_obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        obs = {"state": eef_state(raw_obs)}
        if self.obs_mode == "rgb":
            for key, camera in CAMERAS.items():
                obs[key] = _upright(raw_obs[f"{camera}_image"])
        return obs

    def _info(self, success: bool) -> dict[str, Any]:
        return success_info(
            success,
            self.task_description,
            init_state_id=self.current_init_state_id,
            episode_seed=self.episode_seed,
        )


class _DisabledObservables:
    """Temporarily stops robosuite from computing some observables (when they exist)."""

    def __init__(self, robosuite_env: Any, names: list[str]) -> None:
        observables = robosuite_env._observables
        self._observables = [observables[name] for name in names if name in observables]
        self._was_enabled = [observable.is_enabled() for observable in self._observables]

    def __enter__(self) -> None:
        for observable in self._observables:
            observable.set_enabled(False)

    def __exit__(self, *exc_info: object) -> None:
        for observable, enabled in zip(self._observables, self._was_enabled, strict=True):
            observable.set_enabled(enabled)
