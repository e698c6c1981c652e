"""PNG files written on background threads, so that recording does not slow the control loop.

The queue is bounded: when the disk falls behind, `submit` blocks instead of holding an
unbounded number of frames in memory. A failed write is never silent: the first error is raised
by the next `submit`, `flush` or `close` (after every other queued image was still written).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import numpy as np

PNG_COMPRESS_LEVEL = 1  # lossless either way; level 1 encodes ~2x faster than the default 6


class ImageWriteError(RuntimeError):
    """An image could not be written (the path names which one)."""


def write_png(path: Path, image: np.ndarray) -> None:
    """Write one uint8 HxWx3 image as PNG.

    Raises:
        ImageWriteError: When the image cannot be encoded or the file cannot be written.
    """
    from PIL import Image

    try:
        Image.fromarray(image).save(path, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    except Exception as error:  # a worker thread must never die silently: report every failure
        raise ImageWriteError(f"could not write image {path}: {error}") from error


class BackgroundImageWriter:
    """Writes PNG images from a bounded queue on `num_threads` worker threads.

    Example:
        >>> writer = BackgroundImageWriter(num_threads=1)
        >>> writer.submit(Path("frame.png"), np.zeros((8, 8, 3), np.uint8))
        >>> writer.close()  # waits for the queue; raises ImageWriteError if a write failed
    """

    def __init__(self, num_threads: int = 1, queue_size: int = 64) -> None:
        """Start the workers.

        Args:
            num_threads: Worker threads; 0 writes each image in the caller's thread.
            queue_size: Images that may wait before `submit` blocks.
        """
        if num_threads < 0 or queue_size < 1:
            raise ValueError(
                f"num_threads={num_threads}, queue_size={queue_size}: use num_threads >= 0"
                " and queue_size >= 1"
            )
        self._queue: queue.Queue[tuple[Path, np.ndarray] | None] = queue.Queue(queue_size)
        self._errors: list[ImageWriteError] = []
        self.failure_count = 0
        """Failed writes since the writer started (raised or not)."""
        self._errors_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name=f"rpent-image-writer-{index}", daemon=True)
            for index in range(num_threads)
        ]
        for thread in self._threads:
            thread.start()
        self._closed = False

    def submit(self, path: Path, image: np.ndarray) -> None:
        """Queue `image` (copied) to be written to `path`.

        Raises:
            ImageWriteError: When this or an earlier write failed (this image is still queued).
            RuntimeError: When the writer is closed.
        """
        if self._closed:
            raise RuntimeError(f"image writer is closed; cannot write {path}")
        image = np.array(image, copy=True)  # the env may reuse its observation buffers
        if self._threads:
            self._queue.put((path, image))
        else:
            self._write(path, image)
        self.raise_if_failed()

    def flush(self) -> None:
        """Wait until every queued image is written.

        Raises:
            ImageWriteError: When any write failed.
        """
        self._queue.join()
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        """Raise the first write error not raised yet (then forget it)."""
        with self._errors_lock:
            if not self._errors:
                return
            first, *others = self._errors
            self._errors.clear()
        if others:
            raise ImageWriteError(f"{first} (and {len(others)} more failed writes)") from first
        raise first

    def close(self) -> None:
        """Write what is queued, stop the workers (idempotent).

        Raises:
            ImageWriteError: When any write failed.
        """
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self.raise_if_failed()

    def _write(self, path: Path, image: np.ndarray) -> None:
        try:
            write_png(path, image)
        except ImageWriteError as error:
            with self._errors_lock:
                self._errors.append(error)
                self.failure_count += 1

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(*item)
            finally:
                self._queue.task_done()
