"""Saving a checkpoint's files as one set: a kill at any moment leaves a complete save.

Stage 1 and Stage 2 write their checkpoints through `staged_save`. The new files go into a
staging folder inside the checkpoint folder and are fsynced; one rename of that folder to
`.save-commit` is the commit point; then each file is moved over its old copy and the empty
commit folder is removed. The folder is never missing and never holds a mix of two saves:

- killed before the commit: the previous save is untouched; the next save removes the staging
  leftovers;
- killed after it: the committed set is complete on disk, and `complete_interrupted_save`
  (which every loader and every later save calls first) finishes moving it into place.

The files are fsynced before the commit and the folder after each rename, so a power cut
behaves like a kill. Files of the folder that a save does not write (TensorBoard events, a
Stage 1 checkpoint written at an earlier best validation) are left alone.

Example:
    >>> with staged_save(Path("checkpoints/run")) as staging:
    ...     (staging / "weights.pt").write_bytes(b"...")
    ...     (staging / "config.json").write_text("{}")
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)
STAGING_DIR = ".save-staging"
COMMIT_DIR = ".save-commit"


def _fsync_path(path: Path) -> None:
    """Flush a file's data, or a folder's entries, to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _install_committed(folder: Path) -> None:
    """Move every file of `folder/.save-commit` over its copy in `folder`, then drop the folder.

    Several processes may run this at once (a loader and a resumed run): a file another one
    already moved is skipped.
    """
    commit = folder / COMMIT_DIR
    for source in sorted(commit.iterdir()):
        try:
            os.replace(source, folder / source.name)
        except FileNotFoundError:
            continue
    _fsync_path(folder)
    try:
        commit.rmdir()
    except FileNotFoundError:
        pass
    except OSError as error:  # a newer save committed meanwhile: its installer removes it
        if error.errno != errno.ENOTEMPTY:
            raise


def complete_interrupted_save(folder: str | os.PathLike[str]) -> None:
    """Finish installing a save that was committed but interrupted (killed) before its end.

    Loaders call this before reading; it does nothing when no committed save is pending.

    Raises:
        PermissionError: When the folder holds a committed save but cannot be written (a
            read-only copy of a folder whose save was killed): finish it where it is writable.
    """
    folder = Path(folder)
    if not (folder / COMMIT_DIR).is_dir():
        return
    logger.info("%s: finishing a save that was interrupted after its commit", folder)
    try:
        _install_committed(folder)
    except PermissionError as error:
        raise PermissionError(
            f"{folder} holds a complete save not yet moved into place ({COMMIT_DIR}/) and "
            f"cannot be written ({error}); load it from a writable copy of the folder"
        ) from error


@contextlib.contextmanager
def staged_save(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty staging folder whose files replace those of `folder` as one set.

    `folder` is created when missing. The block writes plain files into the yielded folder;
    when it returns they are fsynced, committed and installed. When it raises, nothing of
    `folder` changes and the staging folder is removed.

    Args:
        folder: The checkpoint folder.

    Yields:
        The staging folder (inside `folder`, on the same filesystem).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    complete_interrupted_save(folder)
    staging = folder / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)  # a save killed before its commit
    staging.mkdir()
    try:
        yield staging
        for path in staging.iterdir():
            _fsync_path(path)
        _fsync_path(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    os.rename(staging, folder / COMMIT_DIR)  # the commit point
    _fsync_path(folder)
    _install_committed(folder)
