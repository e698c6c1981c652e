"""The Franka env's devices, built from the names its arguments accept: the backend, the cameras.

A device object given instead of a name is used as it is. A backend's module is imported on
first use, so importing the env does not load franky.
"""

from __future__ import annotations

from rpent_envs.franka.backend import FrankaBackend
from rpent_envs.franka.camera import BlankCamera, Camera, RealSenseCamera
from rpent_envs.franka.config import FrankaConfig


def make_backend(backend: str | FrankaBackend, config: FrankaConfig) -> FrankaBackend:
    """The backend that drives the arm.

    Args:
        backend: "franky" (a real arm or franky-sim at `config.host`), "memory" (in-process,
            no hardware), or a backend object.
        config: The env's settings (host, realtime mode, contact thresholds).

    Raises:
        ValueError: For an unknown name.
    """
    if not isinstance(backend, str):
        return backend
    if backend == "memory":
        from rpent_envs.franka.memory_backend import MemoryFrankaBackend

        return MemoryFrankaBackend()
    if backend == "franky":
        from rpent_envs.franka.franky_backend import FrankyBackend

        return FrankyBackend(
            config.host, config.realtime, config.torque_threshold_nm, config.force_threshold_n
        )
    raise ValueError(f"backend={backend!r}: use 'franky', 'memory' or a backend object")


def make_cameras(
    config: FrankaConfig, camera: str | Camera, wrist_camera: str | Camera
) -> dict[str, Camera]:
    """The configured cameras by observation key: `image` (third-person), `wrist_image` (hand).

    Args:
        config: The env's settings (`image_size`, the RealSense serials).
        camera: "none", "realsense", "blank" or a camera object, for `image`.
        wrist_camera: The same choices, for `wrist_image`.

    Returns:
        The cameras that are not "none", in observation order.

    Raises:
        ValueError: For an unknown name.
    """
    choices = (
        ("image", camera, config.camera_serial),
        ("wrist_image", wrist_camera, config.wrist_camera_serial),
    )
    return {
        key: built
        for key, choice, serial in choices
        if (built := _make_camera(key, choice, serial, config.image_size)) is not None
    }


def _make_camera(
    key: str, camera: str | Camera, serial: str | None, image_size: int
) -> Camera | None:
    if not isinstance(camera, str):
        return camera
    if camera == "realsense":
        return RealSenseCamera(image_size, serial)
    if camera == "blank":
        return BlankCamera(image_size)
    if camera == "none":
        return None
    argument = "camera" if key == "image" else "wrist_camera"
    raise ValueError(f"{argument}={camera!r}: use 'none', 'realsense', 'blank' or a camera object")
