"""Stage 1 demonstrations become Stage 2 transitions, preloaded and pretrained on."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from stage2_helpers import tiny_featurizer

from rpent_agents.stage1.frame_cache import FrameCache, cache_from_episodes
from rpent_agents.stage2 import RLTDims, Stage2Config, Stage2Learner
from rpent_agents.stage2.demo_replay import start_from_demos
from rpent_agents.stage2.demo_transitions import (
    DemoTransitionArgs,
    convert,
    demo_transitions,
    save_transitions,
)
from rpent_agents.stage2.run_folder import start_or_resume
from rpent_agents.stage2.train_args import Stage2TrainArgs
from wrappers.rlt import rlt_observation_space, rlt_observations

H, STATE_DIM, ACTION_DIM, IMAGE_SIZE = 10, 9, 8, 32
EPISODE_LENGTHS = (23, 10)  # chunks of 10, 10, 3 steps, then one of 10


def expert_cache(image_size=IMAGE_SIZE, image_every=1, lengths=EPISODE_LENGTHS) -> FrameCache:
    """Episodes of the frame cache's layout, as `rpent-collect --npz-cache` keeps them."""
    rng = np.random.default_rng(0)
    episodes = []
    for length in lengths:
        frames = []
        for step in range(length):
            frame = {
                "state": rng.uniform(-1, 1, STATE_DIM).astype(np.float32),
                "actions": rng.uniform(-1, 1, ACTION_DIM).astype(np.float32),
                "task": "insert the peg",
            }
            if step % image_every == 0:
                for key in ("image", "wrist_image"):
                    frame[key] = rng.integers(0, 256, (image_size, image_size, 3), np.uint8)
            frames.append(frame)
        episodes.append(frames)
    return cache_from_episodes(episodes)


def test_each_chunk_of_an_episode_is_a_transition_the_live_loop_would_store():
    cache, featurizer = expert_cache(), tiny_featurizer()
    transitions = demo_transitions(cache, featurizer, H)
    assert len(transitions) == 4
    assert [t.done for t in transitions] == [False, False, True, True]
    starts, lengths = [0, 10, 20, 23], [10, 10, 3, 10]
    last = transitions[2]  # the first episode's last chunk: 3 steps, then padded
    np.testing.assert_array_equal(last.action[:3], cache.actions[20:23])
    np.testing.assert_array_equal(last.action[3:], np.repeat(cache.actions[22:23], 7, axis=0))
    np.testing.assert_array_equal(last.rewards, [0, 0, 1, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(last.intervened, [True] * 3 + [False] * 7)
    assert [t.rewards.sum() for t in transitions] == [0.0, 0.0, 1.0, 1.0]
    assert all(t.intervened[:n].all() for t, n in zip(transitions, lengths, strict=True))
    # The observations are the RLT wrapper's of the chunks' first frames.
    state_space = gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
    space = rlt_observation_space(featurizer, state_space, action_space)
    raw = [{key: getattr(cache, key)[step] for key in ("image", "wrist_image", "state")}
           for step in starts]  # fmt: skip
    live = rlt_observations(featurizer, raw, ["insert the peg"] * 4, space)
    for index, transition in enumerate(transitions):
        np.testing.assert_allclose(transition.z_rl, live["z_rl"][index], atol=1e-5)
        np.testing.assert_array_equal(transition.proprio, cache.state[starts[index]])
        steps = lengths[index]  # "executed": the reference holds the expert's actions
        np.testing.assert_array_equal(transition.ref_chunk[:steps], transition.action[:steps])
    np.testing.assert_array_equal(transitions[0].next_z_rl, transitions[1].z_rl)
    np.testing.assert_array_equal(transitions[2].next_proprio, cache.state[22])  # last frame


def test_observed_references_and_final_chunks():
    cache, featurizer = expert_cache(), tiny_featurizer()
    transitions = demo_transitions(cache, featurizer, H, "observed", final_chunks=1)
    assert len(transitions) == 2 and all(t.done for t in transitions)
    assert not np.array_equal(transitions[0].ref_chunk[:3], transitions[0].action[:3])


@pytest.mark.parametrize(
    ("cache_kwargs", "chunk_len", "message"),
    [
        ({}, 11, "chunk_len=11 must lie in 1..10"),
        ({"image_every": 3}, H, "collect with an --image-every that divides the chunk length"),
    ],
)
def test_caches_that_do_not_fit_are_refused(cache_kwargs, chunk_len, message):
    with pytest.raises(ValueError, match=message):
        demo_transitions(expert_cache(**cache_kwargs), tiny_featurizer(), chunk_len)


def test_other_action_sizes_are_refused():
    cache = expert_cache()
    cache = dataclasses.replace(cache, actions=cache.actions[:, :7])
    with pytest.raises(ValueError, match="actions have 7 entries; the feature model acts with 8"):
        demo_transitions(cache, tiny_featurizer(), H)


def demo_file(tmp_path, chunk_len=H):
    cache, featurizer = expert_cache(), tiny_featurizer()
    transitions = demo_transitions(cache, featurizer, chunk_len)
    dims = RLTDims(featurizer.z_dim, STATE_DIM, featurizer.chunk_len, ACTION_DIM)
    path = tmp_path / "demos.npz"
    save_transitions(transitions, dims, path)
    return path, dims


def small_config(**overrides):
    values = {"hidden_dim": 16, "batch_size": 8, "learning_starts": 2, "warmup_updates": 6,
              "device": "cpu", "intervention_batch_share": 0.5}  # fmt: skip
    return Stage2Config(**(values | overrides))


def test_a_fresh_learner_starts_from_the_demonstrations(tmp_path):
    path, dims = demo_file(tmp_path)
    learner = Stage2Learner(small_config(demo_transitions=path, demo_pretrain_updates=6), dims)
    scalars = start_from_demos(learner)
    assert len(learner.replay) == learner.replay.total_added == 4
    assert learner.replay.intervened_host[:4].all()
    assert learner.update_step == 6 and learner.ready_for_online
    assert "critic/critic_loss" in scalars and "actor/bc_loss" in scalars
    assert learner.schedule.plan(learner.update_step, learner.replay.total_added) == 0


def test_without_demonstrations_nothing_changes():
    dims = RLTDims(8, STATE_DIM, H, ACTION_DIM)
    learner = Stage2Learner(small_config(), dims)
    assert start_from_demos(learner) == {} and len(learner.replay) == 0


def test_demonstration_files_that_cannot_load_are_refused(tmp_path):
    path, dims = demo_file(tmp_path)
    missing = small_config(demo_transitions=tmp_path / "none.npz")
    with pytest.raises(FileNotFoundError, match="demo_transitions .* does not exist; make it"):
        start_from_demos(Stage2Learner(missing, dims))
    other_chunk = small_config(demo_transitions=path, chunk_len=5)
    with pytest.raises(ValueError, match=r"holds .* \(32, 9, 10, 8, 10\); this run's"):
        start_from_demos(Stage2Learner(other_chunk, dims))
    with np.load(path) as data:
        arrays = dict(data)
    arrays["rewards"][1, 2] = np.nan
    broken = tmp_path / "broken.npz"
    np.savez(broken, **arrays)
    with pytest.raises(ValueError, match=r"demo_transitions .*: rewards\[1, 2\] is nan"):
        start_from_demos(Stage2Learner(small_config(demo_transitions=broken), dims))
    with pytest.raises(ValueError, match="demo_pretrain_updates=3 needs demo_transitions"):
        Stage2Config(demo_pretrain_updates=3)


def test_the_config_keeps_its_demonstrations_through_json(tmp_path):
    config = Stage2Config(demo_transitions=tmp_path / "demos.npz", demo_pretrain_updates=2)
    config.to_json(tmp_path / "config.json")
    assert Stage2Config.from_json(tmp_path / "config.json") == config


def test_the_command_converts_a_cache_with_the_embedded_checkpoint(tmp_path):
    cache_path = tmp_path / "frames.npz"
    expert_cache(image_size=128, lengths=(12,)).save(cache_path)
    args = DemoTransitionArgs(cache=cache_path, output=tmp_path / "demos.npz", device="cpu")
    assert convert(args) == 2
    with np.load(args.output) as data:
        assert data["done"].tolist() == [0.0, 1.0] and data["intervened"][:, 0].all()
    with pytest.raises(FileExistsError, match="exists; choose a new --output"):
        convert(args)
    expert_cache().save(cache_path)  # 32 px: the env renders 128 for the default checkpoint
    args = dataclasses.replace(args, output=tmp_path / "other.npz")
    with pytest.raises(ValueError, match="collect with --image-size 128"):
        convert(args)


def test_rpent_stage2_starts_a_fresh_run_from_the_demonstrations(tmp_path):
    path, dims = demo_file(tmp_path)
    config = small_config(demo_transitions=path, demo_pretrain_updates=3)
    learner, _, _ = start_or_resume(Stage2TrainArgs(output_dir=tmp_path / "run"), config, dims)
    assert (len(learner.replay), learner.update_step) == (4, 3)
