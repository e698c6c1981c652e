"""`rpent-stage2` end to end on 2 real workers: learning, evaluation, plot, resume; the example.

The runs are tiny: every chunk is critical (`trigger_mode=always_on`), episodes last 2 chunks,
2 held-out seeds, and Stage 2 starts learning after 2 transitions and lets the actor drive
after 2 updates. lerobot is blocked in every process of the run (trainer and workers, through a
`sitecustomize` module), as on the GPU machine that has no lerobot.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from matplotlib.image import imread
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rpent_agents.stage2 import actor_gate

pytestmark = [pytest.mark.sim, pytest.mark.subprocess]

EXAMPLE = Path(__file__).parents[3] / "examples" / "train_rlt_peg.py"
TINY_RUN = [
    "--num-envs", "2", "--env.render-backend", "cpu", "--env.trigger-mode", "always_on",
    "--env.max-episode-chunks", "2", "--num-eval-episodes", "2", "--eval-every-env-steps", "100",
    "--save-every-env-steps", "60", "--log-every-iterations", "1",
    "--stage2.hidden-dim", "32", "--stage2.batch-size", "8", "--stage2.learning-starts", "2",
    "--stage2.warmup-updates", "2", "--stage2.weight-warmup-updates", "1",
    "--stage2.weight-ramp-updates", "2", "--stage2.device", "cpu",
    "--stage2.replay-capacity", "1000", "--stage2.sample-window", "1000",
]  # fmt: skip
ISSUE_SCALARS = {
    "critic/critic_loss", "actor/actor_loss", "q_pi", "actor/bc_loss", "actor/bc_ref_loss",
    "actor/bc_human_loss", "actor/human_mask_ratio", "train/replay_buffer/size",
    "env/success_once", "env/episode_len", "eval/success_once",
    "train/replay/record_transition_rate", "train/replay/actor_switch_rate",
    "train/replay/intervention_requested_rate", "train/replay/intervention_rate",
    "train/replay/transition_count", "train/replay/reward_mean", "train/rlt/ready_for_online",
    "train/rlt/actor_updates_run", "train/rlt/critic_updates_run",
    "train/rlt/pending_update_budget",
}  # fmt: skip


@pytest.fixture(scope="module")
def no_lerobot_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['lerobot'] = None\n")
    return site


def run_training(output_dir, site, *args, check=True, script=("-m", "rpent_agents.stage2.train")):
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    preset = ["reference"] if script == ("-m", "rpent_agents.stage2.train") else []
    command = [sys.executable, *script, *preset, *TINY_RUN, "--output-dir", str(output_dir), *args]
    result = subprocess.run(
        command, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": path}
    )
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def scalar_values(tensorboard_dir):
    values = {}
    for event_file in sorted(Path(tensorboard_dir).iterdir()):
        events = EventAccumulator(str(event_file))
        events.Reload()
        for tag in events.Tags()["scalars"]:
            values.setdefault(tag, []).extend(event.value for event in events.Scalars(tag))
    return values


def run_extra(output_dir):
    state = torch.load(output_dir / "run" / "learner_state.pt", weights_only=True)
    return state["extra"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, no_lerobot_site):
    output_dir = tmp_path_factory.mktemp("train") / "run1"
    result = run_training(output_dir, no_lerobot_site, "--total-env-steps", "200")
    return output_dir, result


def test_training_learns_lets_the_actor_drive_and_writes_results(first_run):
    output_dir, result = first_run
    results = json.loads((output_dir / "results.json").read_text())
    assert results["eval_seeds"] == [0, 1] and results["base_success_rate"] in (0.0, 0.5, 1.0)
    # one vector step = 2 envs x 10 steps; evaluations every 100 env steps and at the end
    assert results["env_steps"] == 200 and results["stop_reason"] == "total_env_steps"
    assert [point["env_steps"] for point in results["evals"]] == [100, 200]
    assert results["transitions"] == 20  # always_on: every chunk of the 10 vector steps
    assert results["updates"] >= 2 and results["eval_env_steps"] == 3 * 2 * 20
    assert results["gain_points"] == pytest.approx(
        100 * (results["final_success_rate"] - results["base_success_rate"])
    )
    scalars = scalar_values(output_dir / "tensorboard")
    assert ISSUE_SCALARS <= set(scalars)
    assert max(scalars["train/rlt/ready_for_online"]) == 1.0
    assert max(scalars["train/replay/actor_switch_rate"]) > 0  # the actor drove training chunks
    assert max(scalars["train/replay/record_transition_rate"]) == 1.0
    image = imread(output_dir / "success_curve.png")
    assert image.ndim == 3 and image.shape[0] > 100
    assert {path.name for path in (output_dir / "run").iterdir()} == {
        "stage2_config.json", "learner_state.pt", "replay.npz", "weights.pt", "results.json"
    }  # fmt: skip
    assert (output_dir / "run" / "results.json").read_bytes() == (
        output_dir / "results.json"
    ).read_bytes()  # saved with the learner; the copy next to run/ is the same
    assert "base 0." in result.stdout or "base 1." in result.stdout
    # the speed and the profile of the training loop, readable without TensorBoard
    assert results["train_env_steps_per_s_median"] > 0 and results["wall_time_s"] > 0
    profile = results["loop_profile"]
    assert profile["vector_steps"] == 10 and 0 < profile["worker_busy_share"] <= 1
    assert profile["worker_max_busy_ms_per_step"] >= profile["worker_mean_busy_ms_per_step"] > 0
    assert {"act_s", "learner_s", "wait_s", "featurize_s", "store_s"} <= set(profile)
    assert "critical_phase_median_steps" in results
    assert "base_critical_phase_median_steps" in results
    # where the command's time went: every part measured, adding up to the run's wall time
    parts = results["wall_time_parts_s"]
    assert set(parts) == {"workers_start", "base_evaluation", "evaluations", "checkpoints",
                          "training"}  # fmt: skip
    assert min(parts.values()) > 0
    assert sum(parts.values()) == pytest.approx(results["wall_time_s"])
    assert "wall time by part (s): workers_start" in result.stdout


def test_the_sample_efficient_preset_rescues_missed_grasps_with_kept_scenes(
    no_lerobot_site, tmp_path
):
    output_dir = tmp_path / "rescue"
    path = os.pathsep.join([str(no_lerobot_site), os.environ.get("PYTHONPATH", "")])
    tiny_run = [flag for flag in TINY_RUN if flag not in ("--env.trigger-mode", "always_on")]
    command = [
        sys.executable, "-m", "rpent_agents.stage2.train", "sample-efficient", *tiny_run,
        "--env.missed-grasp-chunks", "1", "--env.reconfiguration-freq", "2",
        "--env.end-on-lost-grasp", "--output-dir", str(output_dir), "--total-env-steps", "100",
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": path}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads((output_dir / "results.json").read_text())
    env, stage2 = results["args"]["env"], results["args"]["stage2"]
    assert env["trigger_mode"] == "auto" and env["missed_grasp_chunks"] == 1
    assert env["expert_takeover"] is True and env["reconfiguration_freq"] == 2
    assert env["end_on_lost_grasp"] is True
    assert stage2["eval_q_filter"] is True and stage2["intervention_batch_share"] == 0.5
    # asynchronous stepping: with 2 workers, each step waits for both (the fewer busy ones)
    assert results["args"]["ready_envs"] == 8
    assert [point["env_steps"] for point in results["evals"]] == [100]
    # no grasp in the first chunk of a random policy: the rescue hands the actor chunks
    assert results["transitions"] > 0
    # the actor keeps the gate it learned under, for whoever acts with it later
    assert actor_gate(output_dir / "run") == {"trigger_mode": "auto", "missed_grasp_chunks": 1}


def test_robot_hour_reports_on_test_seeds_and_never_lets_an_unready_actor_drive(
    no_lerobot_site, tmp_path
):
    output_dir = tmp_path / "hour"
    result = run_training(
        output_dir, no_lerobot_site, "--total-env-steps", "200", "--num-test-episodes", "2",
        "--stage2.warmup-updates", "100000",  # the actor is never ready in this run
        script=("-m", "rpent_agents.stage2.train", "robot-hour"),
    )  # fmt: skip
    results = json.loads((output_dir / "results.json").read_text())
    stage2 = results["args"]["stage2"]
    assert stage2["acting_samples"] == 0 and stage2["eval_consensus"]
    assert stage2["update_epoch"] == 40
    assert results["train_seed"] == 100_000 and results["test_seeds"] == [50_000, 50_001]
    assert results["intervention_env_steps"] >= 0 and results["updates"] > 0
    # not ready: every evaluation measured the reference, so the base's figure on its seeds
    assert [point["actor_ready"] for point in results["evals"]] == [False, False]
    assert {point["success_rate"] for point in results["evals"]} == {results["base_success_rate"]}
    test = results["test"]
    assert not test["actor_ready"] and test["success_rate"] == test["base_success_rate"]
    assert results["final_success_rate"] == test["success_rate"]
    low, high = results["final_success_ci95"]
    assert 0.0 <= low <= test["success_rate"] <= high <= 1.0
    assert results["critical_phase_median_steps"] == test["critical_phase_median_steps"]
    assert "2 test seeds from 50000" in result.stdout


def test_the_example_resumes_the_run_with_expert_takeover(first_run, no_lerobot_site, tmp_path):
    first_dir, _ = first_run
    output_dir = tmp_path / "run1"
    shutil.copytree(first_dir, output_dir)
    first = json.loads((first_dir / "results.json").read_text())
    run_training(output_dir, no_lerobot_site, "--resume", "--env.expert-takeover",
                 "--total-env-steps", "300", script=(str(EXAMPLE),))  # fmt: skip
    results = json.loads((output_dir / "results.json").read_text())
    assert results["base_success_rate"] == first["base_success_rate"]  # measured once
    assert results["evals"][:2] == first["evals"]
    assert [point["env_steps"] for point in results["evals"]] == [100, 200, 300]
    assert results["transitions"] == 30 and results["updates"] > first["updates"]
    assert results["wall_time_s"] > first["wall_time_s"]
    # training episodes keep counting: no seed of the first part is replayed
    assert run_extra(output_dir)["seeds_handed_out"] > run_extra(first_dir)["seeds_handed_out"]


def test_a_fresh_run_never_overwrites_a_saved_one(first_run, no_lerobot_site):
    output_dir, _ = first_run
    before = (output_dir / "results.json").read_bytes()
    result = run_training(output_dir, no_lerobot_site, check=False)
    assert result.returncode != 0
    assert "holds a run; pass --resume" in result.stderr
    assert (output_dir / "results.json").read_bytes() == before


def test_training_on_ray_workers_matches_the_vector_run(first_run, no_lerobot_site, tmp_path):
    pytest.importorskip("ray")
    vector_dir, _ = first_run
    output_dir = tmp_path / "ray_run"
    # Ray's workers step together: --ready-envs changes nothing there
    ray_flags = ["--rollout", "ray", "--num-workers", "1", "--envs-per-worker", "2"]
    ray_flags += ["--ready-envs", "1"]
    run_training(output_dir, no_lerobot_site, "--total-env-steps", "200", *ray_flags)
    results = json.loads((output_dir / "results.json").read_text())
    vector = json.loads((vector_dir / "results.json").read_text())
    assert results["args"]["rollout"] == "ray" and results["args"]["ray"]["envs_per_worker"] == 2
    # the same seeds in the same env slots: the same episodes, chunks, updates and evaluations
    for key in ("env_steps", "transitions", "updates", "eval_env_steps", "base_success_rate"):
        assert results[key] == vector[key], key
    assert [point["success_rate"] for point in results["evals"]] == [
        point["success_rate"] for point in vector["evals"]
    ]
    assert run_extra(output_dir)["episodes_discarded"] == 0
    ray_weights = torch.load(output_dir / "run" / "weights.pt", weights_only=True)
    vector_weights = torch.load(vector_dir / "run" / "weights.pt", weights_only=True)
    # Equal up to float rounding carried through the updates (the episodes, chunks and updates
    # above match exactly): ~1e-8 on one machine, one weight of 11040 off by 1.07e-5 on another.
    for part in ("actor", "critic"):
        torch.testing.assert_close(ray_weights[part], vector_weights[part], atol=1e-4, rtol=1e-3)


def test_asynchronous_stepping_trains_and_evaluates(no_lerobot_site, tmp_path):
    output_dir = tmp_path / "ready"
    run_training(
        output_dir, no_lerobot_site, "--total-env-steps", "120", "--ready-envs", "1",
        "--stage2.act-during-updates",  # the GPU loop's way to wait for no update
    )  # fmt: skip
    results = json.loads((output_dir / "results.json").read_text())
    assert results["args"]["stage2"]["act_during_updates"] is True
    # each train step's scalars are written one loop step later, the last one at the end
    updates_run = scalar_values(output_dir / "tensorboard")["train/rlt/critic_updates_run"]
    assert sum(updates_run) == results["updates"] > 0
    # every chunk a worker ran is counted and stored once (always_on: all are transitions)
    assert results["env_steps"] >= 120 and results["transitions"] * 10 >= results["env_steps"]
    assert [point["env_steps"] for point in results["evals"]][-1] == results["env_steps"]
    # Which workers answer each step depends on timing (test_vector pins that down); here the
    # loop never takes fewer steps than lockstep over both workers would (120 / (2 * 10)).
    assert results["updates"] > 0
    assert results["loop_profile"]["vector_steps"] >= results["env_steps"] / 20
    refused = run_training(tmp_path / "refused", no_lerobot_site, "--ready-envs", "-1", check=False)
    assert refused.returncode != 0 and "--ready-envs -1: use 0 (synchronous)" in refused.stderr
