"""The agents' commands end a known error with one line `rpent-X: message`, exit status 1."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.subprocess


def run_python(code):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True
    )


def test_a_known_error_is_one_line_and_exit_status_one():
    result = run_python(
        """
        from recorders.record_format import RecordWriteError
        from rpent_agents.common.cli import command

        with command("rpent-demo"):
            try:
                raise OSError(28, "No space left on device")
            except OSError as error:  # chained, as a failed write is
                raise RecordWriteError("could not write /disk/task.json: disk full") from error
        """
    )
    assert result.returncode == 1
    assert result.stderr == "rpent-demo: could not write /disk/task.json: disk full\n"


def test_a_key_error_of_the_library_reads_without_quotes():
    result = run_python(
        """
        from rpent_agents.stage1.frame_cache import NotDemonstrationDataError
        from rpent_agents.common.cli import command

        with command("rpent-demo"):
            raise NotDemonstrationDataError("data.npz has no 'state'")
        """
    )
    assert (result.returncode, result.stderr) == (1, "rpent-demo: data.npz has no 'state'\n")


def test_the_helper_imports_no_gymnasium():
    result = run_python(
        """
        import sys
        import rpent_agents.common.cli

        assert "gymnasium" not in sys.modules
        """
    )
    assert result.returncode == 0, result.stderr


def test_a_bug_keeps_its_traceback():
    result = run_python(
        """
        from rpent_agents.common.cli import command

        with command("rpent-demo"):
            raise TypeError("a bug")
        """
    )
    assert result.returncode == 1
    assert "Traceback" in result.stderr and result.stderr.endswith("TypeError: a bug\n")


# A bad input each command refuses before any heavy work: (module, arguments, message part).
BAD_INPUTS = {
    "rpent-collect": ("rpent_agents.stage1.collect", ["--output-dir", "{tmp}"], "exists"),
    "rpent-stage1": (
        "rpent_agents.stage1.train",
        ["train", "--data", "{tmp}/missing.npz", "--output-dir", "{tmp}/out"],
        "missing.npz",
    ),
    "rpent-stage2": (
        "rpent_agents.stage2.train",
        ["sample-efficient", "--train-seed", "0", "--output-dir", "{tmp}/out"],
        "--train-seed",
    ),
    "rpent-eval-rlt": (
        "rpent_agents.stage2.eval_rlt",
        ["--num-envs", "0", "--output-dir", "{tmp}/out"],
        "num_envs",
    ),
    "rpent-feature-server": (
        "rpent_agents.features.server",
        ["--checkpoint", "{tmp}/missing"],
        "missing",
    ),
    "rpent-run": (
        "rpent_agents.run.cli",
        ["--env", "RPent/NoSuchEnv-v0", "--seeds", "0", "--output-dir", "{tmp}/out"],
        "NoSuchEnv",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_each_command_refuses_bad_input_in_one_line(tmp_path, name):
    module, arguments, message_part = BAD_INPUTS[name]
    arguments = [argument.format(tmp=tmp_path) for argument in arguments]
    result = subprocess.run(
        [sys.executable, "-m", module, *arguments], capture_output=True, text=True
    )
    last_line = result.stderr.splitlines()[-1]
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert last_line.startswith(f"{name}: ") and message_part in last_line, last_line
