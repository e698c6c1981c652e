"""Griffe extension: a Google docstring's `Example:` section renders as code, like `Examples:`.

The house docstrings (as Gymnasium's) head their runnable snippet `Example:`; griffe reads only
`Examples:` as an examples section (doctest lines become code blocks) and every other heading
as a text admonition. This extension renames the heading when griffe loads a docstring, so the
sources keep their style.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

EXAMPLE_HEADING = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Renames `Example:` section headings to `Examples:` in every loaded docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the heading of `obj`'s docstring before it is parsed."""
        if obj.docstring is not None:
            obj.docstring.value = EXAMPLE_HEADING.sub(r"\g<indent>Examples:", obj.docstring.value)
