"""How the agents' commands start and fail: one logging format, known errors in one line.

Each `main()` of `rpent-collect`, `rpent-stage1`, `rpent-stage2`, `rpent-stage2-robot`,
`rpent-eval-rlt`, `rpent-feature-server` and `rpent-run` runs inside `command(name)`. An error
the library knows how to explain (bad input, a missing extra, a full disk, an unknown env id,
any error class RPent defines) ends the command with the single line `name: message` on stderr
and exit status 1; its traceback goes to the debug log only. Anything else is a bug and keeps
its traceback.

Example:
    >>> def main() -> None:
    ...     with command("rpent-run"):
    ...         print(run_policy(tyro.cli(RunArgs)))

Only the standard library is imported here, so `rpent-stage1` still trains where gymnasium and
the simulators are not installed (Gymnasium's errors are recognised by their module's name).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
# Errors the library raises with a message that names the field, file or extra and the fix.
KNOWN_ERROR_TYPES: tuple[type[Exception], ...] = (OSError, ValueError, ImportError)
# Packages whose own error classes are known: RPent's, and Gymnasium's (`gymnasium.error`,
# e.g. an unknown env id).
KNOWN_ERROR_PACKAGES = ("rpent_envs", "rpent_agents", "wrappers", "recorders", "gymnasium")

logger = logging.getLogger(__name__)


def is_known_error(error: BaseException) -> bool:
    """Whether `error` is one the library explains in its message (see `KNOWN_ERROR_TYPES`).

    Example:
        >>> is_known_error(FileExistsError("runs/x exists")), is_known_error(TypeError("bug"))
        (True, False)
    """
    defined_by_a_known_package = any(
        cls.__module__.split(".")[0] in KNOWN_ERROR_PACKAGES for cls in type(error).__mro__
    )
    return defined_by_a_known_package or isinstance(error, KNOWN_ERROR_TYPES)


def one_line(error: BaseException) -> str:
    """The error's message (a `KeyError`'s without the quotes `str` adds)."""
    if isinstance(error, KeyError) and len(error.args) == 1:
        return str(error.args[0])
    return str(error) or type(error).__name__


@contextlib.contextmanager
def command(name: str, log_level: int | str = logging.INFO) -> Iterator[None]:
    """Run a command's body: log in the common format, end a known error in one line.

    Args:
        name: The command as a user types it (`rpent-run`); it prefixes the error line.
        log_level: The root logger's level.

    Raises:
        SystemExit: With `name: message` (exit status 1) for a known error.
    """
    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    try:
        yield
    except Exception as error:
        if not is_known_error(error):
            raise
        logger.debug("%s failed", name, exc_info=error)
        raise SystemExit(f"{name}: {one_line(error)}") from None
