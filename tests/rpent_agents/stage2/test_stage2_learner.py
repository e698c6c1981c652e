"""The update loop: target updates, critic:actor ratio, budgets, scalars and actual learning."""

import numpy as np
import pytest
import torch
from stage2_helpers import CHUNK_LEN, DIMS, rlt_obs, transition

from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config, Stage2Learner, losses
from rpent_agents.stage2.acting import act_chunks, obs_to_tensors

SMALL = {"chunk_len": CHUNK_LEN, "hidden_dim": 32, "batch_size": 16, "device": "cpu"}


def _learner(**overrides):
    learner = Stage2Learner(Stage2Config(**(SMALL | overrides)), DIMS)
    learner.add_transitions(transition(value) for value in np.linspace(-1, 1, 40))
    return learner


def _flat(module):
    return torch.cat([p.detach().flatten() for p in module.parameters()]).clone()


def test_target_critic_moves_by_tau_toward_the_critic_every_update():
    learner = _learner(tau=0.25)
    target_before = _flat(learner.target_critic)
    learner.run_updates(1)
    expected = 0.75 * target_before + 0.25 * _flat(learner.critic)
    assert torch.allclose(_flat(learner.target_critic), expected, atol=1e-7)


def test_actor_steps_on_every_fourth_update_and_the_critic_on_every_one():
    learner = _learner()
    actor_changed, critic_changed = [], []
    for _ in range(8):
        actor_before, critic_before = _flat(learner.actor), _flat(learner.critic)
        learner.run_updates(1)
        actor_changed.append(not torch.equal(actor_before, _flat(learner.actor)))
        critic_changed.append(not torch.equal(critic_before, _flat(learner.critic)))
    assert actor_changed == [True, False, False, False, True, False, False, False]
    assert all(critic_changed)


def test_actor_step_does_not_touch_the_critic_gradients():
    learner = _learner()
    batch = learner.replay.sample(16)
    learner.critic.zero_grad(set_to_none=True)
    learner._actor_step(batch, bc_weight=1.0, q_weight=1.0)
    assert all(p.grad is None for p in learner.critic.parameters())
    assert all(p.grad is not None for p in learner.actor.parameters())


def test_train_step_follows_the_budget_and_reports_the_reference_scalars():
    learner = _learner(learning_starts=50, warmup_updates=6, max_updates_per_train_step=4)
    assert learner.train_step() == {
        "train/replay_buffer/size": 40.0,
        "train/rlt/ready_for_online": 0.0,
        "train/rlt/critic_updates_run": 0.0,
        "train/rlt/actor_updates_run": 0.0,
        "train/rlt/pending_update_budget": 0.0,
        "train/rlt/skipped_critic_steps": 0.0,
        "train/rlt/skipped_actor_steps": 0.0,
    }
    learner.add_transitions(transition(0.0) for _ in range(10))
    first = learner.train_step()
    assert (first["train/rlt/critic_updates_run"], first["train/rlt/actor_updates_run"]) == (4, 1)
    assert first["train/rlt/pending_update_budget"] == 2
    assert first["train/rlt/ready_for_online"] == 0.0
    assert set(first) >= {
        "critic/critic_loss",
        "actor/actor_loss",
        "q_pi",
        "actor/bc_loss",
        "actor/bc_ref_loss",
        "actor/bc_human_loss",
        "actor/human_mask_ratio",
    }
    second = learner.train_step()
    assert (second["train/rlt/critic_updates_run"], second["train/rlt/actor_updates_run"]) == (2, 1)
    assert second["train/rlt/ready_for_online"] == 1.0 and learner.ready_for_online
    assert learner.update_step == 6


def test_a_queued_train_step_reads_as_train_step_with_its_own_skip_counts():
    fast = {"learning_starts": 0, "max_updates_per_train_step": 4}
    queued, read_at_once = _learner(**fast), _learner(**fast)
    scalars = queued.start_train_step()
    nan_batch = queued.replay.sample(16, queued.sample_generator)
    nan_batch.obs.z_rl[0, 0] = float("nan")
    queued.update(nan_batch)  # skipped and counted after the step was queued
    assert scalars.read() == read_at_once.train_step()
    assert queued.skipped_step_scalars()["train/rlt/skipped_critic_steps"] == 1.0


def test_an_update_stream_on_the_cpu_changes_nothing():
    fast = {"learning_starts": 0, "max_updates_per_train_step": 4}
    with_stream, without = _learner(update_stream=True, **fast), _learner(**fast)
    assert with_stream.train_step() == without.train_step()
    assert torch.equal(_flat(with_stream.critic), _flat(without.critic))


def _optimizer_tensors(optimizer):
    return [value.clone() for state in optimizer.state.values() for value in state.values()]


def test_an_update_with_a_non_finite_loss_is_skipped_counted_and_never_applied():
    learner = _learner()
    learner.run_updates(4)  # the next update steps the actor too
    batch = learner.replay.sample(16, learner.sample_generator)
    batch.obs.z_rl[3, 1] = float("nan")  # e.g. a corrupted batch: both losses are NaN
    networks = (learner.actor, learner.critic)
    optimizers = (learner.actor_optimizer, learner.critic_optimizer)
    weights = [_flat(network) for network in networks]
    moments = [_optimizer_tensors(optimizer) for optimizer in optimizers]
    scalars = learner.update(batch)
    assert np.isnan(scalars["critic/critic_loss"].item())
    assert np.isnan(scalars["actor/actor_loss"].item())
    assert all(torch.equal(_flat(n), w) for n, w in zip(networks, weights, strict=True))
    for optimizer, saved in zip(optimizers, moments, strict=True):  # Adam's moments and steps
        now = _optimizer_tensors(optimizer)
        assert all(torch.equal(a, b) for a, b in zip(now, saved, strict=True))
    assert torch.isfinite(_flat(learner.target_critic)).all()
    assert learner.skipped_step_scalars() == {
        "train/rlt/skipped_critic_steps": 1.0,
        "train/rlt/skipped_actor_steps": 1.0,
    }
    learner.run_updates(4)  # finite batches step again
    assert not torch.equal(_flat(learner.critic), weights[1])
    assert all(torch.isfinite(_flat(network)).all() for network in networks)


def test_a_td_target_that_overflows_skips_the_critic_steps_only():
    learner = Stage2Learner(Stage2Config(**SMALL), DIMS)
    huge = [transition(0.0) for _ in range(20)]
    for stored in huge:
        stored.rewards[:] = 3e38  # finite, but their discounted sum is inf
    learner.add_transitions(huge)
    critic_before = _flat(learner.critic)
    learner.run_updates(8)
    assert torch.equal(_flat(learner.critic), critic_before)
    assert learner.skipped_step_scalars() == {
        "train/rlt/skipped_critic_steps": 8.0,
        "train/rlt/skipped_actor_steps": 0.0,  # the actor's loss is finite: it steps (twice)
    }


def test_act_returns_flat_chunks_in_the_action_box():
    learner = _learner()
    obs = {"z_rl": np.ones((3, 4)), "proprio": np.ones((3, 2)), "ref_chunk": np.ones((3, 3, 2))}
    actions = learner.act(obs)
    assert actions.shape == (3, CHUNK_LEN * 2) and actions.dtype == np.float32
    assert np.abs(actions).max() < 1.0
    np.testing.assert_array_equal(learner.act(obs, True), learner.act(obs, True))


def test_one_batched_critic_call_gives_each_transition_its_own_q_value():
    learner = _learner()
    learner.run_updates(2)
    transitions = [transition(value) for value in (-0.7, 0.1, 0.9)]
    one_by_one = []
    for stored in transitions:  # the critic on one transition at a time
        obs = {key: getattr(stored, key)[None] for key in ("z_rl", "proprio", "ref_chunk")}
        action = torch.as_tensor(stored.action[None])
        one_by_one.append(float(learner.critic(obs_to_tensors(obs, learner.device), action)[0, 0]))
    batched = learner.q_values([transitions[0], None, transitions[1], transitions[2]])
    assert batched[1] is None and len(set(one_by_one)) == 3
    # equal up to float rounding, which depends on the batch size
    assert [batched[0], *batched[2:]] == pytest.approx(one_by_one, rel=1e-5, abs=1e-6)
    assert learner.q_values([None, None]) == [None, None]


def test_the_acting_actor_is_a_polyak_average_that_evaluation_acts_with():
    obs = {"z_rl": np.ones((2, 4)), "proprio": np.ones((2, 2)), "ref_chunk": np.ones((2, 3, 2))}
    reference = _learner()
    assert reference.acting_actor is reference.actor  # no average
    learner = _learner(acting_actor_tau=0.25, actor_noise_std=0.0)
    average_before = _flat(learner.acting_actor)
    learner.run_updates(4)  # one actor step, three critic steps
    expected = 0.75 * average_before + 0.25 * _flat(learner.actor)
    assert torch.allclose(_flat(learner.acting_actor), expected, atol=1e-7)
    assert not torch.allclose(_flat(learner.acting_actor), _flat(learner.actor))
    np.testing.assert_array_equal(
        learner.act(obs, deterministic=True), act_chunks(learner.acting_actor, obs)
    )
    # training explores with the trained actor (here without noise)
    np.testing.assert_array_equal(learner.act(obs), act_chunks(learner.actor, obs))


class PreferringCritic(torch.nn.Module):
    """Q = -|chunk - preferred|^2, one preferred chunk per sample (two equal heads)."""

    def __init__(self, preferred):
        super().__init__()
        self.preferred = preferred

    def forward(self, obs, chunk):
        q = -((chunk - self.preferred) ** 2).flatten(1).sum(dim=-1, keepdim=True)
        return torch.cat([q, q], dim=-1)


def test_the_q_filter_runs_the_reference_where_the_critic_prefers_it():
    learner = _learner()
    obs = {"z_rl": np.ones((2, 4)), "proprio": np.ones((2, 2)),
           "ref_chunk": np.full((2, 3, 2), 0.9, np.float32)}  # fmt: skip
    actor_chunks = torch.as_tensor(learner.act(obs, deterministic=True)).reshape(2, CHUNK_LEN, 2)
    learner.config.eval_q_filter = True
    # Sample 0's critic prefers the reference's chunk, sample 1's the actor's.
    preferred = torch.stack([torch.full((CHUNK_LEN, 2), 0.9), actor_chunks[1]])
    learner.critic = PreferringCritic(preferred)
    filtered = learner.act(obs, deterministic=True).reshape(2, CHUNK_LEN, 2)
    np.testing.assert_allclose(filtered[0], 0.9)
    np.testing.assert_allclose(filtered[1], actor_chunks[1].numpy())
    noisy = learner.act(obs)  # training draws are never filtered
    assert not np.allclose(noisy.reshape(2, CHUNK_LEN, 2)[0], 0.9)


class TargetCritic(torch.nn.Module):
    """Q = -|chunk - target|^2 for one target chunk shared by every sample (two equal heads)."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def forward(self, obs, chunk):
        q = -((chunk - self.target) ** 2).flatten(1).sum(dim=-1, keepdim=True)
        return torch.cat([q, q], dim=-1)


def test_q_ranked_acting_runs_the_candidate_the_critic_values_highest():
    learner = _learner(acting_samples=16, acting_sample_std=1.0)
    obs = {"z_rl": np.ones((3, 4)), "proprio": np.ones((3, 2)),
           "ref_chunk": np.full((3, 3, 2), -0.9, np.float32)}  # fmt: skip
    mean_chunk = learner.actor(obs_to_tensors(obs, learner.device), deterministic=True)
    # The critic wants the actor's mean moved by 0.5: only a perturbation comes closer to
    # it than the actor's chunk and the reference's.
    learner.critic = TargetCritic((mean_chunk[0] + 0.5).clamp(-1, 1))
    chosen = torch.as_tensor(learner.act(obs, deterministic=True)).reshape(3, CHUNK_LEN, 2)
    q_chosen = learner.critic(None, chosen)[:, 0]
    assert torch.all(q_chosen > learner.critic(None, mean_chunk)[:, 0])
    assert not torch.allclose(chosen[0], torch.full_like(chosen[0], -0.9))
    # Deterministic: the same chunks again, and a row's choice whatever else is in the batch
    # (up to the networks' float rounding, which depends on the batch size).
    again = learner.act(obs, deterministic=True).reshape(3, CHUNK_LEN, 2)
    alone = learner.act({key: values[1:2] for key, values in obs.items()}, deterministic=True)
    np.testing.assert_array_equal(again, chosen.numpy())
    np.testing.assert_allclose(alone.reshape(CHUNK_LEN, 2), chosen[1].numpy(), atol=1e-6)
    # Exploring ranks fresh perturbations: the critic's choice beats the actor's mean too.
    explored = torch.as_tensor(learner.act(obs)).reshape(3, CHUNK_LEN, 2)
    assert torch.all(learner.critic(None, explored)[:, 0] > learner.critic(None, mean_chunk)[:, 0])


def test_q_ranked_acting_keeps_the_reference_where_the_critic_prefers_it():
    learner = _learner(acting_samples=4)
    obs = {"z_rl": np.ones((2, 4)), "proprio": np.ones((2, 2)),
           "ref_chunk": np.full((2, 3, 2), 0.9, np.float32)}  # fmt: skip
    learner.critic = TargetCritic(torch.full((CHUNK_LEN, 2), 0.9))
    for deterministic in (True, False):
        np.testing.assert_allclose(learner.act(obs, deterministic), 0.9)


class SplitCritic(torch.nn.Module):
    """Heads that disagree: the first values a chunk by its distance from the reference, the
    second values the reference 1 and every other chunk 0.5 (so by the minimum over the heads
    a far chunk still beats the reference, which the first head values 0)."""

    def forward(self, obs, chunk):
        distance = ((chunk - obs.ref_chunk[:, : chunk.shape[1]]) ** 2).flatten(1).sum(-1)
        second = torch.where(distance > 0, 0.5, 1.0)
        return torch.stack([distance, second], dim=-1)


def test_consensus_runs_the_reference_where_the_critics_heads_disagree():
    learner = _learner(acting_samples=4, eval_consensus=True)
    obs = {"z_rl": np.ones((2, 4)), "proprio": np.ones((2, 2)),
           "ref_chunk": np.full((2, 3, 2), 0.5, np.float32)}  # fmt: skip
    learner.critic = SplitCritic()  # the second head prefers the reference to every chunk
    np.testing.assert_allclose(learner.act(obs, deterministic=True), 0.5)
    # where every head prefers another chunk, it runs
    learner.critic = TargetCritic(torch.full((CHUNK_LEN, 2), -0.5))
    assert not np.allclose(learner.act(obs, deterministic=True), 0.5)
    # exploring, and acting without the consensus, rank by the minimum over the heads alone
    learner.critic = SplitCritic()
    assert not np.allclose(learner.act(obs), 0.5)
    learner.config.eval_consensus = False
    assert not np.allclose(learner.act(obs, deterministic=True), 0.5)


def _bandit_transition(rng, dims):
    """One-chunk episode: reward -|a - target|^2 with a reference biased away from the target."""
    z_rl = rng.uniform(-1, 1, dims.z_dim).astype(np.float32)
    target = 0.5 * np.tanh(z_rl[: dims.action_dim])
    ref_chunk = np.tile(target + 0.3, (dims.ref_chunk_len, 1)).astype(np.float32)
    action = np.clip(ref_chunk[:1] + rng.normal(0, 0.3, (1, dims.action_dim)), -1, 1)
    reward = -np.sum((action[0] - target) ** 2)
    return RLTTransition(
        z_rl=z_rl,
        proprio=np.zeros(1, np.float32),
        ref_chunk=ref_chunk,
        action=action.astype(np.float32),
        rewards=np.array([reward], np.float32),
        next_z_rl=z_rl,
        next_proprio=np.zeros(1, np.float32),
        next_ref_chunk=ref_chunk,
        done=True,
        intervened=np.zeros(1, bool),
    ), target


@pytest.mark.slow
def test_the_actor_learns_to_beat_a_biased_reference_from_the_critic():
    dims = RLTDims(z_dim=2, proprio_dim=1, ref_chunk_len=1, action_dim=2)
    config = Stage2Config(
        chunk_len=1, hidden_dim=32, batch_size=64, actor_lr=1e-3, critic_lr=1e-3,
        weight_schedule=False, bc_weight=0.1, q_weight=1.0, critic_actor_ratio=1,
        update_schedule=False, learning_starts=1, device="cpu", seed=0,
    )  # fmt: skip
    learner = Stage2Learner(config, dims)
    rng = np.random.default_rng(0)
    learner.add_transitions(_bandit_transition(rng, dims)[0] for _ in range(2000))
    learner.run_updates(300)
    test_items = [_bandit_transition(rng, dims) for _ in range(200)]
    obs = {
        "z_rl": np.stack([item.z_rl for item, _ in test_items]),
        "proprio": np.zeros((200, 1)),
        "ref_chunk": np.stack([item.ref_chunk for item, _ in test_items]),
    }
    targets = np.stack([target for _, target in test_items])
    actor_error = np.mean(np.sum((learner.act(obs, True) - targets) ** 2, axis=1))
    reference_error = np.mean(np.sum((obs["ref_chunk"][:, 0] - targets) ** 2, axis=1))
    assert reference_error == pytest.approx(0.18, abs=1e-5)
    assert actor_error < 0.5 * reference_error


@pytest.mark.parametrize(("target_q_heads", "expected_minima"), [(None, {0.0}), (1, {0, 1, 2, 3})])
def test_the_td_target_takes_the_minimum_of_a_random_draw_of_heads(
    monkeypatch, target_q_heads, expected_minima
):
    # target head j answers j everywhere: the minimum over the drawn heads names the draw
    learner = _learner(num_q_heads=4, target_q_heads=target_q_heads, tau=0.0)
    learner.target_critic.weights[-1].data.zero_()  # the output layer of every head
    learner.target_critic.biases[-1].data[:, 0] = torch.arange(4.0)
    minima = []
    td_target = losses.td_target

    def recording_td_target(rewards, done, next_q_min, gamma, bootstrap_type="standard"):
        minima.append(next_q_min.unique().tolist())
        return td_target(rewards, done, next_q_min, gamma, bootstrap_type)

    monkeypatch.setattr(losses, "td_target", recording_td_target)
    learner.run_updates(40)
    assert all(len(values) == 1 for values in minima)  # one draw per update, for every row
    assert {values[0] for values in minima} == expected_minima


def test_an_ensemble_target_draws_at_most_its_heads():
    with pytest.raises(ValueError, match="target_q_heads must lie in 1..num_q_heads"):
        Stage2Config(num_q_heads=2, target_q_heads=3)


def test_acting_during_updates_explores_with_the_networks_from_before_the_latest_train_step():
    learner = _learner(
        act_during_updates=True, actor_noise_std=0.0, learning_starts=0, warmup_updates=8
    )
    obs = {key: np.stack([value] * 3) for key, value in rlt_obs(0.3).items()}
    stored = transition(0.7)
    actor_before, critic_before = _flat(learner.actor), _flat(learner.critic)
    learner.train_step()
    assert not torch.equal(_flat(learner.actor), actor_before)  # the updates moved both
    assert torch.equal(_flat(learner.behaviour_actor), actor_before)
    assert torch.equal(_flat(learner.behaviour_critic), critic_before)
    # training's chunks (noise 0 here) and the stored chunks' Q come from the copies ...
    explored = learner.act(obs)
    np.testing.assert_array_equal(explored, act_chunks(learner.behaviour_actor, obs))
    assert not np.array_equal(explored, act_chunks(learner.actor, obs))
    stored_obs = obs_to_tensors({key: value[None] for key, value in rlt_obs(0.7).items()}, "cpu")
    q_before = learner.behaviour_critic(stored_obs, torch.as_tensor(stored.action[None]))
    assert learner.q_values([stored, None]) == [pytest.approx(q_before[0, 0].item()), None]
    # ... evaluation acts with the trained actor, and the next train step refreshes them
    np.testing.assert_array_equal(learner.act(obs, True), act_chunks(learner.actor, obs))
    actor_now = _flat(learner.actor)
    learner.train_step()
    assert torch.equal(_flat(learner.behaviour_actor), actor_now)


def test_acting_during_updates_writes_stored_transitions_into_their_slots():
    learner = _learner(act_during_updates=True)
    assert learner.add_transitions([transition(0.9), None, transition(0.8)]) == 2
    assert len(learner.replay) == 42
    newest = learner.replay.storage["rewards"][40:42, 0].tolist()
    assert newest == pytest.approx([0.9, 0.8])
