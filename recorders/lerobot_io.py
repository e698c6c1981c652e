"""Writing LeRobot v3.0 datasets: feature specs, and a folder that appears only when complete.

Both `rpent-collect` (live expert episodes) and `rpent-flywheel` (recorded trajectories) write
through here, so every RPent dataset uses the same feature names: the env's observation keys
(`image`, `wrist_image`, `state`, ...) plus `actions`, with the instruction as the frame's task
(the "rpent" key style, as the OpenPI and RLinf data configs read them). The "lerobot" key
style renames them to what LeRobot's own policies look for: `observation.images.<key>`,
`observation.state`, `observation.<key>` and `action`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

ACTION_KEY = "actions"
KeyStyle = Literal["rpent", "lerobot"]
KEY_STYLES: tuple[str, ...] = ("rpent", "lerobot")
# LeRobot's names (lerobot.utils.constants ACTION, OBS_STATE, OBS_IMAGES, OBS_STR), spelled
# out so that writing the rpent style never imports lerobot.
LEROBOT_ACTION_KEY = "action"
LEROBOT_STATE_KEY = "observation.state"
LEROBOT_IMAGES_PREFIX = "observation.images."
LEROBOT_OBSERVATION_PREFIX = "observation."
IMAGE_NAMES = ["height", "width", "channel"]
MIN_VIDEO_SIZE_PX = 32  # LeRobot's default AV1 encoder (SVT-AV1) dies of SIGFPE below ~26 px
SVT_LOG_VARIABLE = "SVT_LOG"
SVT_LOG_ERRORS = "1"  # SVT-AV1 levels: 0 fatal, 1 error, 2 warning, 3 info (its default)


def is_image(value: np.ndarray) -> bool:
    """True for an HxWx3 uint8 array, the image convention of DESIGN.md §2."""
    return value.dtype == np.uint8 and value.ndim == 3 and value.shape[-1] == 3


def dataset_features(
    observation: Mapping[str, np.ndarray], action_dim: int, use_videos: bool
) -> dict[str, dict[str, Any]]:
    """LeRobot feature spec for frames built from one observation and an action.

    Args:
        observation: One raw observation (flat dict of arrays); images are HxWx3 uint8.
        action_dim: Length of the action vector.
        use_videos: Store images as MP4 videos (True) or as PNG files (False).

    Returns:
        The `features` argument of `LeRobotDataset.create`.

    Raises:
        ValueError: For an unsupported value, or images too small to encode as video.
    """
    features: dict[str, dict[str, Any]] = {}
    for key, value in observation.items():
        value = np.asarray(value)
        if is_image(value):
            if use_videos and min(value.shape[:2]) < MIN_VIDEO_SIZE_PX:
                raise ValueError(
                    f"observation[{key!r}] is {value.shape[0]}x{value.shape[1]} px, too small to"
                    f" encode as video (at least {MIN_VIDEO_SIZE_PX} px); store images as PNG"
                    " frames instead (use_videos=False, CLI flag --no-use-videos)"
                )
            dtype = "video" if use_videos else "image"
            features[key] = {"dtype": dtype, "shape": value.shape, "names": IMAGE_NAMES}
        elif value.dtype.kind == "f" and value.ndim == 1:
            features[key] = {"dtype": "float32", "shape": value.shape, "names": None}
        else:
            raise ValueError(
                f"observation[{key!r}] has dtype {value.dtype} and shape {value.shape}; a dataset"
                " frame takes HxWx3 uint8 images and 1-D float vectors"
            )
    features[ACTION_KEY] = {"dtype": "float32", "shape": (action_dim,), "names": None}
    return features


def styled_key(key: str, image: bool, key_style: KeyStyle) -> str:
    """The dataset name of the frame key `key` (an observation key or `actions`).

    Args:
        key: The rpent name: an env observation key or `ACTION_KEY`.
        image: Whether the key holds camera images.
        key_style: "rpent" (names unchanged) or "lerobot" (see the module doc).
    """
    if key_style == "rpent":
        return key
    if key == ACTION_KEY:
        return LEROBOT_ACTION_KEY
    if image:
        return LEROBOT_IMAGES_PREFIX + key
    return LEROBOT_STATE_KEY if key == "state" else LEROBOT_OBSERVATION_PREFIX + key


def rpent_key(dataset_key: str) -> str:
    """The rpent name of a feature of a dataset of either key style (`styled_key` inverted)."""
    if dataset_key == LEROBOT_ACTION_KEY:
        return ACTION_KEY
    if dataset_key == LEROBOT_STATE_KEY:
        return "state"
    for prefix in (LEROBOT_IMAGES_PREFIX, LEROBOT_OBSERVATION_PREFIX):
        if dataset_key.startswith(prefix):
            return dataset_key[len(prefix) :]
    return dataset_key


def styled_keys(features: Mapping[str, Mapping[str, Any]], key_style: KeyStyle) -> dict[str, str]:
    """The dataset name (value) of every feature (key) of a `dataset_features` spec."""
    return {
        key: styled_key(key, spec["dtype"] in ("image", "video"), key_style)
        for key, spec in features.items()
    }


def staging_dir(output_dir: Path) -> Path:
    """The hidden sibling `staged_output_dir` builds `output_dir` in (this process's)."""
    return output_dir.parent / f".{output_dir.name}.partial-{os.getpid()}"


@contextlib.contextmanager
def staged_output_dir(output_dir: Path) -> Iterator[Path]:
    """Yield a temporary sibling path of `output_dir`, renamed to it when the block succeeds.

    The block creates the yielded folder (LeRobot insists on creating a dataset root itself).
    A crash leaves no half-written `output_dir` that looks complete: the temporary sibling
    (hidden, named after the target) is removed on failure.

    Raises:
        FileExistsError: When `output_dir` already exists (it is never overwritten).
    """
    output_dir = Path(output_dir)
    if output_dir.exists():
        raise FileExistsError(
            f"output dir {output_dir} already exists; choose a new path or remove it first"
        )
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(output_dir)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rename(output_dir)


def quiet_dataset_writers() -> None:
    """Keep what LeRobot's dataset writing prints to warnings and errors.

    Every saved episode would print SVT-AV1's banner and configuration (~20 lines per video,
    plus warnings about LeRobot's own encoder settings), an HF datasets progress bar, and
    libav's info lines per video file. This sets SVT-AV1's log level to errors (`SVT_LOG`;
    a value the user set is kept), libav's to warnings, and turns off HF datasets' progress
    bars. It changes process-wide settings of those libraries, once per dataset created.
    """
    import av
    import datasets

    os.environ.setdefault(SVT_LOG_VARIABLE, SVT_LOG_ERRORS)  # read by each new encoder
    av.logging.set_libav_level(av.logging.WARNING)
    datasets.disable_progress_bars()


def create_dataset(
    root: Path,
    fps: int,
    features: dict[str, dict[str, Any]],
    robot_type: str,
    dataset_name: str,
    image_writer_threads: int = 0,
) -> LeRobotDataset:
    """Create an empty LeRobot v3.0 dataset at `root` (which must not exist yet).

    The writers print only warnings and errors (`quiet_dataset_writers`).

    Args:
        root: Dataset folder.
        fps: Frames per second of the recording.
        features: Feature spec from `dataset_features`.
        robot_type: Robot name stored in the dataset metadata.
        dataset_name: Name in the dataset's `repo_id` ("local/<name>"); nothing is uploaded.
        image_writer_threads: Background threads writing images (0: in the caller's thread).

    Returns:
        A `LeRobotDataset` in write mode; call `finalize()` when done.
    """
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    quiet_dataset_writers()
    use_videos = any(spec["dtype"] == "video" for spec in features.values())
    return LeRobotDataset.create(
        repo_id=f"local/{dataset_name}",
        fps=fps,
        features=features,
        root=root,
        robot_type=robot_type,
        use_videos=use_videos,
        image_writer_threads=image_writer_threads,
    )
