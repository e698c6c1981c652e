"""Cameras for the Franka env: the protocol, a RealSense stream, a blank frame, square resizing."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from PIL import Image


class Camera(Protocol):
    """A colour camera giving square uint8 RGB frames of a fixed size."""

    def read_rgb(self) -> np.ndarray:
        """Wait for the next frame; uint8 (S, S, 3)."""
        ...

    def close(self) -> None:
        """Release the device."""
        ...


def square_resize(frame: np.ndarray, size: int) -> np.ndarray:
    """Centre-crop a HxWx3 frame to a square and resize it to `size` x `size` (bilinear).

    Args:
        frame: uint8 (H, W, 3) RGB image.
        size: Output height and width, in pixels.

    Returns:
        uint8 (size, size, 3).
    """
    height, width = frame.shape[:2]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    square = Image.fromarray(np.ascontiguousarray(frame[top : top + side, left : left + side]))
    return np.asarray(square.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8)


class BlankCamera:
    """A constant mid-grey frame: for dry runs of a loop on franky-sim, which has no camera.

    `camera="blank"` (and `wrist_camera="blank"`) of `RPent/Franka-v0` gives the observation
    its image keys, so a feature model that reads them runs against the simulated arm; a policy
    learns nothing from it.

    Example:
        >>> BlankCamera(image_size=32).read_rgb()[0, 0].tolist()
        [128, 128, 128]
    """

    GREY = 128

    def __init__(self, image_size: int) -> None:
        """Give `image_size` x `image_size` frames."""
        self.image_size = image_size

    def read_rgb(self) -> np.ndarray:
        """A new grey frame."""
        return np.full((self.image_size, self.image_size, 3), self.GREY, np.uint8)

    def close(self) -> None:
        """Nothing to release."""


class RealSenseCamera:
    """The colour stream of an Intel RealSense (pyrealsense2, the `realsense` extra).

    Example:
        >>> camera = RealSenseCamera(image_size=128)  # doctest: +SKIP
        >>> camera.read_rgb().shape  # doctest: +SKIP
        (128, 128, 3)
    """

    def __init__(
        self,
        image_size: int,
        serial: str | None = None,
        stream_width: int = 640,
        stream_height: int = 480,
        fps: int = 30,
    ) -> None:
        """Start the colour stream.

        Args:
            image_size: Height and width of the frames `read_rgb` returns.
            serial: Serial number of the device; None takes the first one connected.
            stream_width: Width of the colour stream the device sends, in pixels.
            stream_height: Height of the colour stream, in pixels.
            fps: Frame rate of the stream.
        """
        try:
            import pyrealsense2 as rs
        except ImportError as error:
            raise ImportError(
                "camera='realsense' needs pyrealsense2: pip install -e '.[realsense]'"
            ) from error
        self.image_size = image_size
        config = rs.config()
        if serial is not None:
            config.enable_device(serial)
        config.enable_stream(rs.stream.color, stream_width, stream_height, rs.format.rgb8, fps)
        self._pipeline: Any = rs.pipeline()
        self._pipeline.start(config)

    def read_rgb(self) -> np.ndarray:
        """The next colour frame, centre-cropped and resized."""
        frame = self._pipeline.wait_for_frames().get_color_frame()
        return square_resize(np.asanyarray(frame.get_data()), self.image_size)

    def close(self) -> None:
        """Stop the stream."""
        self._pipeline.stop()
