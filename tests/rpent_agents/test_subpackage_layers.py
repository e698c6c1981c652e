"""No import runs back up inside rpent_agents (docs/design.md §1): each subpackage imports only
the ones below it, lazy imports inside functions included."""

import ast
from pathlib import Path

import rpent_agents

# A subpackage may import those of a lower layer; stage1 and rollout share one and import
# neither each other, as run and robot do.
LAYERS = {
    "common": 0,
    "features": 1,
    "stage1": 2,
    "rollout": 2,
    "stage2": 3,
    "run": 4,
    "robot": 4,
}
PACKAGE_DIR = Path(rpent_agents.__file__).parent


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] == "rpent_agents"]


def test_every_module_lives_in_a_layered_subpackage():
    loose = [p.name for p in PACKAGE_DIR.glob("*.py") if p.name != "__init__.py"]
    folders = {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").exists()}
    assert loose == [] and folders == set(LAYERS)


def test_no_import_runs_back_up():
    backward = []
    for subpackage, layer in LAYERS.items():
        for path in sorted((PACKAGE_DIR / subpackage).rglob("*.py")):
            for name in imported_modules(path):
                parts = name.split(".")
                target = parts[1] if len(parts) > 1 else "rpent_agents"
                if target != subpackage and LAYERS.get(target, layer) >= layer:
                    backward.append(f"{path.relative_to(PACKAGE_DIR)} imports {name}")
    assert backward == []
