"""`rpent-eval-rlt`: per-episode traces sorted into outcomes, where stalls lie, the report."""

import json
import subprocess
import sys

import pytest

from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.stage2 import DEFAULT_ACTOR_DIR
from rpent_agents.stage2.eval_rlt import (
    ChunkEnd,
    EpisodeTrace,
    EvalRLTArgs,
    diagnosis,
    stall_summary,
    with_actor_gate,
)
from wrappers.takeover import ExpertTakeover

RADIUS = 0.04


def end(x, y=0.0, grasped=True, critical=True, entry=-0.1):
    return ChunkEnd(x, abs(y) / RADIUS, 0.0, entry, grasped, critical, "vla")


def reference_takeover():
    return ExpertTakeover(expert=lambda observation: None)


def test_outcomes_follow_grasp_gate_and_success():
    traces = [
        EpisodeTrace(0, True, 50, [end(-0.3, critical=False), end(0.0)]),
        EpisodeTrace(1, False, 500, [end(-0.3, grasped=False, critical=False)]),
        EpisodeTrace(2, False, 500, [end(-0.3, critical=False)]),
        EpisodeTrace(3, False, 500, [end(-0.3, critical=False), end(-0.12), end(-0.12)]),
    ]
    assert [trace.outcome for trace in traces] == ["success", "no_grasp", "no_gate", "stalled"]
    report = diagnosis(traces, reference_takeover())
    assert report["outcomes"] == {"no_gate": 1, "no_grasp": 1, "stalled": 1, "success": 1}
    assert report["gate_opened_share"] == 0.5 and report["median_success_len_steps"] == 50
    assert report["critical_chunks_per_stall"] == [2]


def test_stall_summary_says_which_takeover_condition_fails():
    chunks = [end(-0.12, entry=-0.12), end(-0.05, y=0.1), end(-0.05, grasped=False), end(-0.05)]
    summary = stall_summary(chunks, reference_takeover())
    assert summary["chunks"] == 4
    assert summary["x_below_takeover_min_share"] == 0.25
    assert summary["yz_outside_takeover_margin_share"] == 0.25
    assert summary["not_grasped_share"] == 0.25
    assert summary["in_takeover_window_share"] == 0.25
    assert summary["inside_hole_share"] == 0.75  # past the face at -0.1
    assert stall_summary([], reference_takeover()) == {"chunks": 0}


def run_cli(tmp_path, *options):
    command = [
        sys.executable, "-m", "rpent_agents.stage2.eval_rlt", "--output-dir", str(tmp_path),
        "--env.render-backend", "cpu", "--env.feature-device", "cpu",
        "--env.max-episode-chunks", "2", *options,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, json.loads((tmp_path / "report.json").read_text())


@pytest.mark.sim
@pytest.mark.subprocess
def test_cli_evaluates_the_embedded_actor_without_a_stage2_run(tmp_path):
    _, report = run_cli(
        tmp_path, "--policy", "actor", "--no-actor-gate", "--env.trigger-mode", "always_on",
        "--num-envs", "1", "--num-episodes", "1",
    )  # fmt: skip
    assert (report["policy"], report["stage2_run"]) == ("actor", str(DEFAULT_ACTOR_DIR))
    assert [chunk["critical"] for chunk in report["traces"][0]["chunks"]] == [True, True]


def test_the_actor_is_evaluated_under_the_gate_it_was_trained_under():
    # the embedded actor learned with the missed-grasp entry: its evaluation opens it too
    args = EvalRLTArgs(policy="actor", env=PegRLTConfig(trigger_mode="always_on"))
    assert with_actor_gate(args).env.gate_settings() == {
        "trigger_mode": "auto", "missed_grasp_chunks": 4
    }  # fmt: skip
    untouched = EvalRLTArgs(policy="actor", actor_gate=False, env=args.env)
    assert with_actor_gate(untouched).env == args.env


@pytest.mark.sim
@pytest.mark.subprocess
def test_cli_writes_a_report_and_a_plot(tmp_path):
    result, report = run_cli(tmp_path, "--num-envs", "2", "--num-episodes", "2")
    assert report["policy"] == "base" and report["seeds"] == [0, 1]
    assert report["stage2_run"] is None
    assert [trace["seed"] for trace in report["traces"]] == [0, 1]
    assert all(len(trace["chunks"]) == 2 for trace in report["traces"])
    assert report["diagnosis"]["episodes"] == 2
    assert (tmp_path / "stalls.png").stat().st_size > 1000
    assert "success" in result.stdout


@pytest.mark.subprocess
def test_cli_refuses_an_actor_for_the_base_policy(tmp_path):
    command = [sys.executable, "-m", "rpent_agents.stage2.eval_rlt", "--stage2-run", "w.pt"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode != 0 and "read by --policy actor only" in result.stderr


@pytest.mark.parametrize("flag", ["--num-episodes", "--num-envs"])
@pytest.mark.subprocess
def test_cli_refuses_nonsense_counts(tmp_path, flag):
    command = [sys.executable, "-m", "rpent_agents.stage2.eval_rlt", flag, "zero"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode != 0
