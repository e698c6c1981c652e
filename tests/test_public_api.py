"""The packages export their public names, and importing them stays light."""

import importlib
import inspect
import json
import subprocess
import sys

import pytest

PACKAGES = ("rpent_envs", "wrappers", "recorders", "rpent_agents")
HEAVY_MODULES = ("torch", "sapien", "mani_skill", "lerobot", "mujoco", "robosuite", "franky")


def test_short_imports_of_the_docs_work():
    from recorders import TrajectoryWriter, export_flywheel, provenance_of
    from recorders.flywheel import export_flywheel as defined_export
    from rpent_agents import PegRLTConfig, Stage2Config, load_featurizer
    from wrappers import AutoGate, PolicySwitch, RecordTrajectory, RLTObservation
    from wrappers.policy_switch import PolicySwitch as defined_switch

    assert PolicySwitch is defined_switch and export_flywheel is defined_export
    assert all(
        callable(name)
        for name in (TrajectoryWriter, provenance_of, PegRLTConfig, Stage2Config, load_featurizer)
    )
    assert all(callable(name) for name in (AutoGate, RecordTrajectory, RLTObservation))


@pytest.mark.parametrize("package", ["wrappers", "recorders", "rpent_agents"])
def test_every_name_in_all_resolves_to_an_object_defined_in_the_package(package):
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__)) > 5
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith(f"{package}."), (name, value.__module__)
    assert set(module.__all__) <= set(dir(module))


def test_unknown_lazy_name_raises_attribute_error():
    import rpent_agents

    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        rpent_agents.NoSuchName  # noqa: B018


@pytest.mark.subprocess
def test_importing_every_package_imports_no_torch_and_no_simulator():
    script = (
        "import json, sys\n"
        f"import {', '.join(PACKAGES)}\n"
        f"heavy = {HEAVY_MODULES!r}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == []
