"""The Python blocks of README.md and docs/ run as written, so the examples cannot rot.

Each fenced `python` block (at the start of a line) runs on its own, in a fresh namespace, in a
temporary working directory. A block whose first line is `# needs: <what>` needs something CI
does not have (a real robot, simulator assets) and is skipped with that reason.
"""

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)
NEEDS_LINE = re.compile(r"# needs: (?P<what>.+)")


def python_blocks() -> list:
    """One pytest param per block: (code, what it needs or None), id `page:line`."""
    blocks = []
    for page in PAGES:
        text = page.read_text()
        for match in PYTHON_BLOCK.finditer(text):
            code = match.group("code")
            line = text.count("\n", 0, match.start()) + 2
            needs = NEEDS_LINE.match(code)
            block_id = f"{page.relative_to(REPO_ROOT)}:{line}"
            blocks.append(pytest.param(code, needs and needs.group("what"), id=block_id))
    return blocks


BLOCKS = python_blocks()


def test_blocks_are_found():
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize(("code", "needs"), BLOCKS)
@pytest.mark.sim
@pytest.mark.subprocess
def test_block_runs(code, needs, request, tmp_path, monkeypatch):
    if needs:
        pytest.skip(f"needs {needs}")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, request.node.callspec.id, "exec"), {"__name__": "__docs__"})
