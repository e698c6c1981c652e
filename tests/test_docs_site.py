"""What mkdocs cannot check: README.md's links, and the docs' table of exclusion reasons."""

import ast
import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from recorders.provenance import ACTION_SOURCES

REPO_ROOT = Path(__file__).resolve().parent.parent
RECORDING_PAGE = REPO_ROOT / "docs" / "recording.md"
RULE_MODULES = ("flywheel.py", "flywheel_rules.py", "record_format.py", "trajectory_reader.py")
REASON_FUNCTIONS = {"task_exclusion", "_check_prediction", "_parse_line"}
MARKDOWN_LINK = re.compile(r"\]\((?P<path>[^)#\s]*)(?:#(?P<anchor>[^)\s]+))?\)")
HEADING = re.compile(r"^#+ (?P<title>.+)$", re.MULTILINE)
TABLE_ROW = re.compile(r"^\| (?P<category>[a-z, ]+) \| `(?P<reason>[a-z_]+)` \|", re.MULTILINE)


def readme_links() -> list[tuple[str, str | None]]:
    text = (REPO_ROOT / "README.md").read_text()
    links = [(match["path"], match["anchor"]) for match in MARKDOWN_LINK.finditer(text)]
    return [(path, anchor) for path, anchor in links if not path.startswith("http")]


def anchors_of(page: Path) -> set[str]:
    """The heading ids MkDocs gives `page` (code marks dropped, as in the rendered title)."""
    titles = (match["title"].replace("`", "") for match in HEADING.finditer(page.read_text()))
    return {slugify(title, "-") for title in titles}


@pytest.mark.parametrize(("path", "anchor"), readme_links())
def test_readme_links_point_at_existing_files_and_headings(path, anchor):
    target = REPO_ROOT / path
    assert target.exists(), path
    if anchor is not None:
        assert anchor in anchors_of(target), f"{path} has no heading #{anchor}"


def documented_reasons() -> set[str]:
    table = RECORDING_PAGE.read_text().split("### Exclusion reasons", 1)[1]
    return {match.group("reason") for match in TABLE_ROW.finditer(table)}


def _is_reason_sink(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether a string constant sits where the recorders put a reason."""
    parent = parents.get(node)
    while isinstance(parent, ast.IfExp):  # `"a" if test else "b"`: where the choice goes
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Call):
        name = getattr(parent.func, "id", getattr(parent.func, "attr", ""))
        return name in ("Rejected", "RecordError") and parent.args and parent.args[0] is node
    if isinstance(parent, ast.keyword):
        return parent.arg == "reason"
    if isinstance(parent, ast.Assign):
        names = [getattr(target, "attr", getattr(target, "id", "")) for target in parent.targets]
        return "reason" in names
    if isinstance(parent, ast.Subscript):
        counter = getattr(parent.value, "id", getattr(parent.value, "attr", ""))
        return counter.startswith("excluded") and parent.slice is node
    if isinstance(parent, ast.Tuple):
        grand = parents.get(parent)
        return isinstance(grand, (ast.Assign, ast.List, ast.Call)) and parent.elts[-1] is node
    if isinstance(parent, ast.Return):
        function = parent
        while function is not None and not isinstance(function, ast.FunctionDef):
            function = parents.get(function)
        return function is not None and function.name in REASON_FUNCTIONS
    return False


def code_reasons() -> tuple[set[str], set[str]]:
    """(literal reasons, prefixes of reasons composed with an f-string) in the recorders."""
    literals: set[str] = set()
    prefixes: set[str] = set()
    for module in RULE_MODULES:
        tree = ast.parse((REPO_ROOT / "recorders" / module).read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"[a-z]+(_[a-z]+)+", node.value) and _is_reason_sink(node, parents):
                    literals.add(node.value)
            if isinstance(node, ast.JoinedStr) and _is_reason_sink(node, parents):
                prefixes.add(node.values[0].value)
    return literals, prefixes


def test_every_literal_reason_of_the_code_is_documented():
    literals, _ = code_reasons()
    assert len(literals) > 30
    assert literals - documented_reasons() == set()


def test_every_documented_reason_is_one_the_code_can_give():
    literals, prefixes = code_reasons()
    suffixes = literals | set(ACTION_SOURCES) | {"unlabeled", "unknown"}
    for reason in documented_reasons() - literals:
        prefix = next((prefix for prefix in prefixes if reason.startswith(prefix)), None)
        assert prefix is not None, f"{reason} is neither a literal nor composed in the code"
        assert reason.removeprefix(prefix) in suffixes, reason


def test_every_composed_reason_family_is_documented():
    _, prefixes = code_reasons()
    assert prefixes >= {"task_json_", "source_", "prediction_", "tool_call_"}
    for prefix in prefixes:
        assert any(reason.startswith(prefix) for reason in documented_reasons()), prefix
