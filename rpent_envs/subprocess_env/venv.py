"""Virtual environments for simulator backends that cannot share RPent's interpreter.

Each backend (RoboCasa, RoboTwin) describes its environment as a `VenvSpec`; `ensure_venv`
creates it once under `RPENT_VENVS_DIR` (default `~/.cache/rpent/venvs/<name>`) and does
nothing when a stamp file says the same spec is already installed. `rpent-backend-venv`
is the command line for it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

VENVS_DIR_VARIABLE = "RPENT_VENVS_DIR"
STAMP_NAME = ".rpent-venv-stamp"
# Backend name -> "module:attribute" of its VenvSpec (imported only when asked for).
BACKEND_SPECS = {
    "robocasa": "rpent_envs.robocasa.install:VENV_SPEC",
    "robotwin": "rpent_envs.robotwin.install:VENV_SPEC",
    "robotwin-light": "rpent_envs.robotwin.install:LIGHT_VENV_SPEC",  # CI: local CPU torch
}


@dataclass(frozen=True)
class VenvSpec:
    """How to build one backend's virtual environment.

    Attributes:
        name: Backend name, also the venv's folder name.
        python_version: "major.minor" of the interpreter the venv needs, e.g. "3.11".
        install_steps: `pip install` argument lists, run in order (a step may use
            `--no-deps` to keep a package's exact pins from replacing an earlier choice).
        smoke_test: Python code the new venv must run without error, e.g. imports.
    """

    name: str
    python_version: str
    install_steps: tuple[tuple[str, ...], ...]
    smoke_test: str

    def fingerprint(self) -> str:
        """A hash of everything that decides the venv's contents."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def venvs_dir() -> Path:
    """Folder of the backend venvs: `$RPENT_VENVS_DIR`, else `~/.cache/rpent/venvs`."""
    configured = os.environ.get(VENVS_DIR_VARIABLE)
    return Path(configured) if configured else Path.home() / ".cache" / "rpent" / "venvs"


def venv_python(venv_dir: Path) -> Path:
    """The interpreter of the venv at `venv_dir`."""
    return venv_dir / "bin" / "python"


def find_python(version: str) -> Path:
    """An interpreter of `version` ("3.11"): the newest pyenv one, else `python3.11` on PATH.

    pyenv's shims on PATH are skipped: they resolve by the current folder's `.python-version`.

    Raises:
        FileNotFoundError: None found; the message says how to install one.
    """
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(getattr(sys, "_base_executable", sys.executable))  # not a venv's python
    pyenv_versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = sorted(
        pyenv_versions.glob(f"{version}.*/bin/python{version}"),
        key=lambda path: [int(part) for part in path.parents[1].name.split(".") if part.isdigit()],
    )
    if installed:
        return installed[-1]
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory) / f"python{version}"
        if "shims" not in candidate.parts and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        f"no Python {version} found (under {pyenv_versions} or python{version} on PATH); "
        f"install one (e.g. `pyenv install {version}`) or pass its path with --python"
    )


def ensure_venv(spec: VenvSpec, venv_dir: Path | None = None, python: Path | None = None) -> Path:
    """Create or update the backend's venv unless its stamp says it is current.

    Args:
        spec: What to install.
        venv_dir: Where; default `venvs_dir() / spec.name`.
        python: Base interpreter; default `find_python(spec.python_version)`.

    Returns:
        The venv's interpreter.

    Raises:
        subprocess.CalledProcessError: A pip step or the smoke test failed (the stamp is not
            written, so the next call tries again).
    """
    venv_dir = venv_dir or venvs_dir() / spec.name
    stamp = venv_dir / STAMP_NAME
    interpreter = venv_python(venv_dir)
    if interpreter.exists() and stamp.exists() and stamp.read_text().strip() == spec.fingerprint():
        logger.info("%s venv is up to date: %s", spec.name, venv_dir)
        return interpreter
    base = python or find_python(spec.python_version)
    logger.info("creating the %s venv at %s with %s", spec.name, venv_dir, base)
    stamp.unlink(missing_ok=True)
    subprocess.run([str(base), "-m", "venv", "--clear", str(venv_dir)], check=True)
    for step in spec.install_steps:
        logger.info("%s venv: pip install %s", spec.name, " ".join(step))
        subprocess.run([str(interpreter), "-m", "pip", "install", "-q", *step], check=True)
    subprocess.run([str(interpreter), "-c", spec.smoke_test], check=True)
    stamp.write_text(spec.fingerprint() + "\n")
    return interpreter


def load_spec(backend: str) -> VenvSpec:
    """The `VenvSpec` of a backend named in `BACKEND_SPECS`."""
    if backend not in BACKEND_SPECS:
        raise ValueError(f"unknown backend {backend!r}: use one of {sorted(BACKEND_SPECS)}")
    module_name, _, attribute = BACKEND_SPECS[backend].partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def resolve_backend_python(backend: str, python: str | Path | None, variable: str) -> Path:
    """The interpreter a backend env runs: `python`, else `$variable`, else its default venv.

    Raises:
        FileNotFoundError: That interpreter does not exist; the message says how to create it.
    """
    chosen = python or os.environ.get(variable)
    interpreter = Path(chosen) if chosen else venv_python(venvs_dir() / backend)
    if not interpreter.exists():
        raise FileNotFoundError(
            f"the {backend} backend runs in its own virtual environment, and its interpreter "
            f"{interpreter} does not exist. Create it with `rpent-backend-venv {backend}` "
            f"(into ${VENVS_DIR_VARIABLE}, default ~/.cache/rpent/venvs), or point python= or "
            f"${variable} at an interpreter that has the backend installed"
        )
    return interpreter


def main(argv: list[str] | None = None) -> None:
    """`rpent-backend-venv BACKEND...`: create the virtual environments of simulator backends."""
    parser = argparse.ArgumentParser(prog="rpent-backend-venv", description=main.__doc__)
    parser.add_argument("backends", nargs="+", choices=sorted(BACKEND_SPECS))
    parser.add_argument(
        "--venvs-dir",
        type=Path,
        default=None,
        help=f"parent folder of the venvs (default ${VENVS_DIR_VARIABLE} or ~/.cache/rpent/venvs)",
    )
    parser.add_argument("--python", type=Path, default=None, help="base interpreter to use")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for backend in args.backends:
        spec = load_spec(backend)
        venv_dir = args.venvs_dir / spec.name if args.venvs_dir else None
        interpreter = ensure_venv(spec, venv_dir, args.python)
        print(f"{backend}: {interpreter}")


if __name__ == "__main__":
    main()
