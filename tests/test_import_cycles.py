"""No import circle anywhere in the house (docs/design.md §1): no module imports one that
imports it back, directly or through others; imports under `TYPE_CHECKING` and inside
functions count too."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rpent_envs", "rpent_agents", "wrappers", "recorders")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def house_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The house modules `path` imports (`from a.b import c`: a.b.c when it is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            for alias in node.names:
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in
                          modules else node.module)  # fmt: skip
    return found


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its modules in order, the first repeated), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        path, branches = [start], [iter(sorted(graph[start]))]
        while branches:
            target = next(branches[-1], None)
            if target is None:
                done.add(path.pop())
                branches.pop()
            elif target in path:
                return path[path.index(target) :] + [target]
            elif target not in done:
                path.append(target)
                branches.append(iter(sorted(graph[target])))
    return None


def test_no_module_imports_itself_back():
    modules = house_modules()
    graph = {name: imports_of(path, modules) - {name} for name, path in modules.items()}
    assert first_cycle(graph) is None


def test_the_check_finds_a_circle():
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
