"""`rpent-run --video`: one MP4 of a run's episodes, both cameras side by side, marked by driver.

The frames come from the episodes as they run, not from the records: `EpisodeVideo` wraps the
raw env (under `RecordTrajectory` when recording), so `--video` works with or without
`--record-trajectory` and shows each episode's final observation too (the records keep the
pre-action observations only). It holds the env's image demand (`rpent_envs.image_demand`),
so every step renders, and encodes each frame as it arrives: memory stays flat over any run.

Frame i of an episode shows the observation its i-th action was taken from: `image` (left) and
`wrist_image` (right), upscaled to about `FRAME_HEIGHT_PX`, inside a border whose colour says
who drove that step's chunk (`DRIVER_COLOURS`: grey the VLA, orange the actor, blue the expert,
magenta a human at a teleop device). The episode's final observation follows, held for
`END_HOLD_S` seconds in a border of its outcome (`OUTCOME_COLOURS`: green success, red failure).
So an episode of N steps gives N + `end_hold_frames` frames. H.264 (yuv420p) at the env's
`render_fps` (10 for peg).

Example:
    >>> env = EpisodeVideo(gym.make("RPent/PegInsertionSideWideClearance-v1"), "runs/v.mp4")
    >>> obs, info = env.reset(seed=0)
    >>> env.driver = "actor"  # rpent-run sets it before each chunk
    >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    >>> env.close()  # finishes runs/v.mp4
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rpent_agents.features.builtin import CAMERA_KEYS
from rpent_agents.run.policies import Driver
from rpent_envs.image_demand import image_demand_of
from wrappers.record import environment_verdict

Colour = tuple[int, int, int]
DRIVER_COLOURS: dict[str, Colour] = {
    "vla": (110, 110, 110),
    "actor": (255, 140, 0),
    "expert": (30, 110, 255),
    "human": (220, 40, 220),
}
"""Border colour (RGB) of the frames of each driver's chunks."""
OUTCOME_COLOURS: dict[bool | None, Colour] = {
    True: (40, 200, 60),
    False: (220, 30, 30),
    None: (110, 110, 110),
}
"""Border colour of an episode's held final frame: success, failure, no verdict."""
FRAME_HEIGHT_PX = 256
"""Camera images are upscaled (nearest pixel, by an integer factor) to about this height."""
BORDER_PX = 8
END_HOLD_S = 1.0


class _Encoder:
    """An H.264 MP4 written frame by frame, moved to its path when finished."""

    def __init__(self, path: Path, fps: int, height: int, width: int) -> None:
        import av  # PyAV (lerobot[dataset]); imported when a video is written

        self.path = path
        self.partial_path = path.with_name(f".{path.name}.partial")
        self.container = av.open(str(self.partial_path), "w", format="mp4")
        self.stream = self.container.add_stream("libx264", rate=fps)
        self.stream.height, self.stream.width = height, width
        self.stream.pix_fmt = "yuv420p"
        self.stream.options = {"preset": "veryfast"}  # half the CPU of x264's default, same size
        self.av_frame = av.VideoFrame

    def write(self, frame: np.ndarray) -> None:
        self.container.mux(self.stream.encode(self.av_frame.from_ndarray(frame, "rgb24")))

    def finish(self) -> None:
        self.container.mux(self.stream.encode())
        self.container.close()
        os.replace(self.partial_path, self.path)


Observation = dict[str, np.ndarray]


class EpisodeVideo(gym.Wrapper[Observation, np.ndarray, Observation, np.ndarray]):
    """Encodes every step of every episode into one MP4 (see the module doc for the layout).

    Attributes:
        driver: Who drives the next steps ("vla", "actor", "expert", "human"); set before each chunk
            (`rpent_agents.run.episodes` does).
        frames_written: Frames encoded so far.
    """

    def __init__(self, env: gym.Env, path: str | os.PathLike[str]) -> None:
        """Write the episodes of `env` to `path` (written when the wrapper closes).

        Raises:
            ValueError: When the observation lacks a camera of `CAMERA_KEYS`.
        """
        super().__init__(env)
        spaces = getattr(env.observation_space, "spaces", {})
        missing = [key for key in CAMERA_KEYS if key not in spaces]
        if missing:
            raise ValueError(
                f"--video shows {list(CAMERA_KEYS)}; the env's observation lacks {missing}: make"
                " the env with both cameras (obs_mode='rgb')"
            )
        self.path = Path(path)
        self.fps = int(env.metadata.get("render_fps") or 10)
        self.end_hold_frames = max(1, round(END_HOLD_S * self.fps))
        self.scale = max(1, FRAME_HEIGHT_PX // spaces[CAMERA_KEYS[0]].shape[0])
        self.driver: Driver = "vla"
        self.frames_written = 0
        self._pending: Observation | None = None
        self._encoder: _Encoder | None = None
        self._image_demand = image_demand_of(env)
        if self._image_demand is not None:
            self._image_demand.hold(self)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode; its first observation becomes a frame with the first action."""
        observation, info = self.env.reset(seed=seed, options=options)
        self._pending = observation
        return observation, info

    def step(self, action: np.ndarray) -> tuple[Observation, Any, bool, bool, dict[str, Any]]:
        """Step; the observation the action was taken from becomes a frame of its driver."""
        if self._pending is not None:
            self._write(self._pending, DRIVER_COLOURS[self.driver])
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._pending = observation
        if terminated or truncated:
            for _ in range(self.end_hold_frames):
                self._write(observation, OUTCOME_COLOURS[environment_verdict(info)])
            self._pending = None
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Finish the MP4 (when a frame was written), release the image demand, close."""
        if self._encoder is not None:
            self._encoder.finish()
            self._encoder = None
        if self._image_demand is not None:
            self._image_demand.release(self)
        super().close()

    def compose(self, observation: Observation, colour: Colour) -> np.ndarray:
        """One video frame: the cameras side by side, upscaled, inside a `colour` border."""
        cameras = [
            np.repeat(np.repeat(observation[key], self.scale, 0), self.scale, 1)
            for key in CAMERA_KEYS
        ]
        height, width = cameras[0].shape[:2]
        frame_height = height + 2 * BORDER_PX
        frame_width = len(cameras) * (width + BORDER_PX) + BORDER_PX
        even_size = (frame_height + frame_height % 2, frame_width + frame_width % 2)  # yuv420p
        frame = np.empty((*even_size, 3), np.uint8)
        frame[:] = colour
        for index, camera in enumerate(cameras):
            left = BORDER_PX + index * (width + BORDER_PX)
            frame[BORDER_PX : BORDER_PX + height, left : left + width] = camera
        return frame

    def _write(self, observation: Observation, colour: Colour) -> None:
        frame = self.compose(observation, colour)
        if self._encoder is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._encoder = _Encoder(self.path, self.fps, frame.shape[0], frame.shape[1])
        self._encoder.write(frame)
        self.frames_written += 1


def episode_video_of(env: gym.Env) -> EpisodeVideo | None:
    """The `EpisodeVideo` in `env`'s wrapper stack; None when there is none."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, EpisodeVideo):
            return env
        env = env.env
    return None
