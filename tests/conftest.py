"""Shared fixtures: real simulators, small images, a small real disk; the quick loop's check."""

import contextlib
import importlib
import multiprocessing.process
import os
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from a model hub in tests


@pytest.fixture
def small_disk(tmp_path):
    """Mount a tmpfs of `size_kb` KiB (needs root, as CI has); unmounted at the end of the test."""
    mounted = []

    def mount(size_kb):
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        command = ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(point)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.fail(f"this test mounts a tmpfs and needs root: {result.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "--lazy", str(point)], check=True)


# The quick loop (`.ci/quick`) runs the tests marked none of sim, subprocess, gpu and slow, so a
# test that starts a process or builds a simulator must say so; this check names those that
# do not, at the end of any run.
SIMULATOR_MODULES = ("mani_skill", "sapien", "robosuite", "mujoco")  # first imported: a sim
SIMULATOR_CLASSES = (("sapien", "Scene"), ("robosuite.utils.binding_utils", "MjSim"))
PROCESS_STARTS = ((subprocess.Popen, "__init__"), (multiprocessing.process.BaseProcess, "start"))
unmarked_needs: dict[str, set[str]] = {}


@contextlib.contextmanager
def noting_calls(owner: type, name: str, found: set[str], need: str):
    """Add `need` to `found` whenever `owner.name` is called, for the `with` block."""
    original = getattr(owner, name)

    def noting(*args, **kwargs):
        found.add(need)
        return original(*args, **kwargs)

    setattr(owner, name, noting)
    try:
        yield
    finally:
        setattr(owner, name, original)


def loaded_simulator_classes() -> list[type]:
    """The simulator classes whose module a test module already imported."""
    names = [(module, name) for module, name in SIMULATOR_CLASSES if module in sys.modules]
    return [getattr(importlib.import_module(module), name) for module, name in names]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Note an unmarked test that starts a process or builds (or first imports) a simulator."""
    marks = {mark.name for mark in item.iter_markers()}
    found: set[str] = set()
    simulators_before = {module for module in SIMULATOR_MODULES if module in sys.modules}
    with contextlib.ExitStack() as probes:
        if "subprocess" not in marks:
            for owner, name in PROCESS_STARTS:
                probes.enter_context(noting_calls(owner, name, found, "subprocess"))
        if "sim" not in marks:
            for simulator in loaded_simulator_classes():
                probes.enter_context(noting_calls(simulator, "__init__", found, "sim"))
        result = yield
    imported = [module for module in SIMULATOR_MODULES if module in sys.modules]
    if "sim" not in marks and set(imported) - simulators_before:
        found.add("sim")
    if found:
        unmarked_needs[item.nodeid] = found
    return result


def pytest_terminal_summary(terminalreporter):
    """List the tests that need a mark they lack (the quick loop would run them)."""
    if unmarked_needs:
        terminalreporter.section("tests that need a mark (pyproject.toml's markers)")
        for nodeid, needs in sorted(unmarked_needs.items()):
            terminalreporter.write_line(f"{nodeid}: {', '.join(sorted(needs))}")
