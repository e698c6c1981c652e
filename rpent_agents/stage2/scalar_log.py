"""TensorBoard scalars of a Stage 2 run.

Example:
    >>> import tempfile
    >>> with ScalarLog(tempfile.mkdtemp()) as log:
    ...     log.write({"critic/critic_loss": 0.5}, step=1)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType


class ScalarLog:
    """Writes named scalars to TensorBoard event files in `log_dir`."""

    def __init__(self, log_dir: Path | str) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise ImportError(
                "Stage 2 TensorBoard logging needs the tensorboard package: pip install tensorboard"
            ) from error
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, scalars: Mapping[str, float], step: int) -> None:
        """Add each scalar at `step` (x axis, e.g. env steps)."""
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()

    def __enter__(self) -> ScalarLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
