"""A compact in-memory copy of a demonstration dataset, for Stage 1 training anywhere.

`rpent-stage1 export-cache` turns a LeRobot dataset written by `rpent-collect` or
`rpent-flywheel` (either key style) into one `.npz` file (uint8 images, float32 state and
actions, episode and task indices, the task strings), so Stage 1 can train on a machine that has
torch and numpy but not lerobot. Reading a LeRobot dataset needs lerobot (imported lazily);
reading a cache, or the layout of either (`data_layout`), needs numpy only. Both readers refuse
a step whose `state` or `actions` holds NaN or inf (`require_finite_steps`), naming the
dataset, the episode, the frame and the key, so Stage 1 never trains on one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rpent_agents.common.finite_checks import first_non_finite_entry

logger = logging.getLogger(__name__)
CACHE_FILE = "frames.npz"
"""The cache's name inside a folder that holds one (`rpent-collect --npz-cache`, an export)."""
IMAGE_KEYS = ("image", "wrist_image")
STEP_KEYS = ("state", "actions", "episode_index", "task_index")
ARRAY_KEYS = (*IMAGE_KEYS, *STEP_KEYS, "image_step")


class NotDemonstrationDataError(KeyError):
    """A file or dataset lacks an array or feature that demonstration data has."""


@dataclass
class FrameCache:
    """Every step of a dataset as arrays; camera images for every step or for some of them.

    Attributes:
        image: (M, H, W, 3) uint8 third-person camera, one row per image frame.
        wrist_image: (M, H, W, 3) uint8 wrist camera.
        state: (N, S) float32, one row per step.
        actions: (N, A) float32, env action units.
        episode_index: (N,) int64; steps of one episode are contiguous and in order.
        task_index: (N,) int64 index into `tasks`.
        tasks: The instructions.
        image_step: (M,) int64, the step each image frame belongs to; None: every step has
            its images (M = N).
    """

    image: np.ndarray
    wrist_image: np.ndarray
    state: np.ndarray
    actions: np.ndarray
    episode_index: np.ndarray
    task_index: np.ndarray
    tasks: list[str]
    image_step: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Check that the image frames and the steps fit together."""
        if self.image_step is None:
            self.image_step = np.arange(len(self.state), dtype=np.int64)
        self.image_step = np.asarray(self.image_step, dtype=np.int64)
        images = len(self.image)
        if len(self.wrist_image) != images or len(self.image_step) != images:
            raise ValueError(
                f"frame cache: {images} images, {len(self.wrist_image)} wrist images and "
                f"{len(self.image_step)} image_step entries must be as many"
            )
        if images and (self.image_step.min() < 0 or self.image_step.max() >= len(self.state)):
            raise ValueError(f"frame cache: image_step must index the {len(self.state)} steps")

    def __len__(self) -> int:
        return len(self.state)

    def save(self, path: Path) -> None:
        """Write an uncompressed `.npz` (images compress poorly; loading stays fast)."""
        path = Path(path)
        if path.suffix != ".npz":
            raise ValueError(f"cache path {path} must end in .npz")
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {key: getattr(self, key) for key in ARRAY_KEYS}
        np.savez(path, tasks=np.array(self.tasks, dtype=str), **arrays)

    @classmethod
    def load(cls, path: Path) -> FrameCache:
        """Read a cache written by `save` (caches without `image_step` have every image).

        Raises:
            NotDemonstrationDataError: When the file lacks one of the arrays (not a frame cache).
            ValueError: When a step's state or actions hold NaN or inf.
        """
        with np.load(Path(path)) as data:
            required = (*IMAGE_KEYS, *STEP_KEYS, "tasks")
            missing = [key for key in required if key not in data]
            if missing:
                raise NotDemonstrationDataError(
                    f"{path} is not a frame cache: arrays {missing} are missing"
                )
            arrays = {key: data[key] for key in ARRAY_KEYS if key in data}
            tasks = [str(task) for task in data["tasks"]]
        return require_finite_steps(cls(tasks=tasks, **arrays), path)

    def chunk_targets(self, chunk_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Step indices (N, H) of each step's next `chunk_len` actions, and their validity.

        Steps past the end of an episode repeat the episode's last step and are invalid.
        """
        starts = np.arange(len(self))[:, None] + np.arange(chunk_len)[None]
        last = np.zeros(len(self), dtype=np.int64)
        for episode in np.unique(self.episode_index):
            members = np.flatnonzero(self.episode_index == episode)
            last[members] = members[-1]
        valid = starts <= last[:, None]
        return np.minimum(starts, last[:, None]), valid


def cache_from_episodes(episodes: list[list[dict[str, Any]]]) -> FrameCache:
    """The cache of in-memory episodes, in order.

    Args:
        episodes: Each a list of frames: `state`, `actions` and `task` (the instruction) every
            step, the `IMAGE_KEYS` cameras on the steps that have images (every step, or some).

    Returns:
        The cache; `tasks` sorted, images of the frames that have them.
    """
    frames = [frame for episode in episodes for frame in episode]
    tasks = sorted({frame["task"] for frame in frames})
    episode_index = [index for index, episode in enumerate(episodes) for _ in episode]
    image_step = [step for step, frame in enumerate(frames) if IMAGE_KEYS[0] in frame]
    return FrameCache(
        **{key: np.stack([frames[step][key] for step in image_step]) for key in IMAGE_KEYS},
        state=np.stack([frame["state"] for frame in frames]).astype(np.float32),
        actions=np.stack([frame["actions"] for frame in frames]).astype(np.float32),
        episode_index=np.asarray(episode_index, dtype=np.int64),
        task_index=np.asarray([tasks.index(frame["task"]) for frame in frames], dtype=np.int64),
        tasks=tasks,
        image_step=np.asarray(image_step, dtype=np.int64),
    )


def require_finite_steps(cache: FrameCache, source: Path) -> FrameCache:
    """`cache`, refused when a step's `state` or `actions` holds NaN or inf.

    Args:
        cache: The frames read.
        source: The dataset they were read from, named in the message.

    Raises:
        ValueError: Naming the dataset, the episode, the frame in it and the entry.
    """
    found = first_non_finite_entry({"state": cache.state, "actions": cache.actions})
    if found is not None:
        key, (step, column), value = found
        episode = int(cache.episode_index[step])
        frame = step - int(np.flatnonzero(cache.episode_index == episode)[0])
        raise ValueError(
            f"{source}: episode {episode}, frame {frame} (step {step} of the dataset): "
            f"{key}[{column}] is {value}; refused: Stage 1 trains on finite demonstrations "
            "only: drop or re-record that episode"
        )
    return cache


@dataclass(frozen=True)
class DataLayout:
    """What a dataset's frames hold, in rpent names (`image`, `state`, `actions`, ...).

    Attributes:
        state_dim: Length of `state`.
        action_dim: Length of `actions`.
        image_keys: The camera images of each frame.
    """

    state_dim: int
    action_dim: int
    image_keys: tuple[str, ...]


def _lerobot_info(dataset_dir: Path) -> dict:
    info_path = Path(dataset_dir) / "meta" / "info.json"
    if not info_path.is_file():
        raise FileNotFoundError(f"{dataset_dir} has no meta/info.json; not a LeRobot dataset")
    return json.loads(info_path.read_text())


def _vector_dim(shapes: dict[str, tuple[int, ...]], key: str, path: Path) -> int:
    if key not in shapes:
        raise NotDemonstrationDataError(
            f"{path} has no {key!r} (it has {sorted(shapes)}); not demonstration data"
        )
    return int(shapes[key][-1])


def data_layout(path: Path) -> DataLayout:
    """The layout of a `.npz` frame cache or a LeRobot dataset folder, without reading images.

    Raises:
        FileNotFoundError: When a folder is not a LeRobot dataset.
        NotDemonstrationDataError: When the data has no `state` or `actions`.
    """
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path) as data:
            shapes = {key: data[key].shape for key in STEP_KEYS if key in data.files}
            images = tuple(key for key in IMAGE_KEYS if key in data.files)
    else:
        from recorders.lerobot_io import rpent_key  # the recorders package imports gymnasium

        features = _lerobot_info(path)["features"]
        shapes = {rpent_key(key): tuple(spec["shape"]) for key, spec in features.items()}
        video = ("image", "video")
        images = tuple(rpent_key(k) for k, spec in features.items() if spec["dtype"] in video)
    return DataLayout(
        _vector_dim(shapes, "state", path), _vector_dim(shapes, "actions", path), images
    )


def _to_uint8_hwc(image: torch.Tensor) -> np.ndarray:
    """LeRobot's float CHW image in [0, 1] -> uint8 HWC."""
    return (image.permute(1, 2, 0).clamp(0, 1) * 255).round().to(torch.uint8).numpy()


def cache_from_lerobot(dataset_dir: Path) -> FrameCache:
    """Read every frame of an RPent LeRobot dataset, of either key style (needs lerobot).

    Raises:
        FileNotFoundError: When `dataset_dir` is not a LeRobot dataset.
        NotDemonstrationDataError: When its frames lack a camera, `state` or `actions`.
        ValueError: When a frame's state or actions hold NaN or inf.
    """
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from recorders.lerobot_io import rpent_key

    dataset_dir = Path(dataset_dir)
    names = {rpent_key(key): key for key in _lerobot_info(dataset_dir)["features"]}
    missing = [key for key in (*IMAGE_KEYS, "state", "actions") if key not in names]
    if missing:
        raise NotDemonstrationDataError(
            f"{dataset_dir} has no {missing} (its features: {sorted(names.values())}); Stage 1"
            f" reads the cameras {list(IMAGE_KEYS)}, state and actions"
        )
    dataset = LeRobotDataset(f"local/{dataset_dir.name}", root=dataset_dir)
    columns: dict[str, list[np.ndarray]] = {key: [] for key in (*IMAGE_KEYS, *STEP_KEYS)}
    tasks: list[str] = []
    for index in tqdm(range(len(dataset)), desc="reading frames"):
        frame = dataset[index]
        for key in IMAGE_KEYS:
            columns[key].append(_to_uint8_hwc(frame[names[key]]))
        for key in ("state", "actions"):
            columns[key].append(frame[names[key]].numpy().astype(np.float32))
        columns["episode_index"].append(np.int64(frame["episode_index"]))
        if frame["task"] not in tasks:
            tasks.append(frame["task"])
        columns["task_index"].append(np.int64(tasks.index(frame["task"])))
    logger.info("read %d frames of %d episodes", len(dataset), dataset.num_episodes)
    cache = FrameCache(tasks=tasks, **{key: np.stack(value) for key, value in columns.items()})
    return require_finite_steps(cache, dataset_dir)


def load_frames(path: Path) -> FrameCache:
    """A `.npz` frame cache, or a LeRobot dataset folder read into one."""
    path = Path(path)
    return FrameCache.load(path) if path.suffix == ".npz" else cache_from_lerobot(path)
