"""Public names of a package that load on first access (PEP 562), so importing it stays light.

Example:
    >>> _EXPORTS = {"Stage2Config": "rpent_agents.stage2.config"}
    >>> __getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)  # in the package's __init__
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package_globals: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of a package whose `exports` load lazily.

    Args:
        package_globals: The package's `globals()`; a name is cached there once loaded.
        exports: Each public name and the module that defines it.
    """
    package_name = package_globals["__name__"]

    def module_getattr(name: str) -> Any:
        """Import the module that defines `name` on first access."""
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        package_globals[name] = value  # later accesses skip this function
        return value

    def module_dir() -> list[str]:
        """The package's names, the lazy exports included."""
        return sorted(set(package_globals) | set(exports))

    return module_getattr, module_dir
