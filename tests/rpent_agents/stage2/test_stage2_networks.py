"""Actor and twin-Q critic: inputs, outputs and structure as DESIGN.md §4 specifies."""

import torch
from torch import nn

from rpent_agents.stage2 import Actor, RLTDims, RLTObs, TwinQCritic

DIMS = RLTDims(z_dim=16, proprio_dim=9, ref_chunk_len=12, action_dim=8)
H = 10


def _obs(batch=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return RLTObs(
        torch.randn(batch, 16, generator=generator),
        torch.randn(batch, 9, generator=generator),
        torch.randn(batch, 12, 8, generator=generator),
    )


def test_actor_is_three_tanh_layers_of_256_and_an_h_by_a_head():
    actor = Actor(DIMS, chunk_len=H)
    linears = [m for m in actor.backbone if isinstance(m, nn.Linear)]
    assert [layer.out_features for layer in linears] == [256, 256, 256]
    assert linears[0].in_features == H * 8 + 16 + 9
    assert sum(isinstance(m, nn.Tanh) for m in actor.backbone) == 3
    assert actor.mean.out_features == H * 8


def test_actor_reads_only_the_first_h_reference_actions():
    actor, obs = Actor(DIMS, chunk_len=H), _obs()
    changed_tail = RLTObs(obs.z_rl, obs.proprio, obs.ref_chunk.clone())
    changed_tail.ref_chunk[:, H:] += 100.0
    changed_head = RLTObs(obs.z_rl, obs.proprio, obs.ref_chunk.clone())
    changed_head.ref_chunk[:, 0] += 1.0
    base = actor(obs, deterministic=True)
    assert torch.equal(actor(changed_tail, deterministic=True), base)
    assert not torch.equal(actor(changed_head, deterministic=True), base)


def test_actor_eval_is_tanh_of_the_mean_and_training_adds_small_fixed_noise():
    actor, obs = Actor(DIMS, chunk_len=H), _obs()
    mean = actor.mean(
        actor.backbone(torch.cat([obs.ref_chunk[:, :H].flatten(1), obs.z_rl, obs.proprio], -1))
    )
    deterministic = actor(obs, deterministic=True)
    assert deterministic.shape == (5, H, 8)
    assert torch.allclose(deterministic, torch.tanh(mean).view(5, H, 8))
    noisy = actor(obs)
    assert noisy.abs().max() < 1.0
    # tanh is 1-Lipschitz: the 0.002 noise moves every action by at most ~5 std
    assert 0 < (noisy - deterministic).abs().max() < 0.002 * 6


def test_actor_reference_dropout_one_equals_a_zero_reference():
    actor, obs = Actor(DIMS, chunk_len=H), _obs()
    zero_ref = RLTObs(obs.z_rl, obs.proprio, torch.zeros_like(obs.ref_chunk))
    dropped = actor(obs, deterministic=True, ref_dropout_prob=1.0)
    assert torch.equal(dropped, actor(zero_ref, deterministic=True))


def test_critic_has_two_layernorm_tanh_heads_and_ignores_the_reference():
    critic, obs = TwinQCritic(DIMS, chunk_len=H), _obs()
    assert len(critic.heads) == 2
    for head in critic.heads:
        kinds = [type(m) for m in head]
        assert kinds == [nn.Linear, nn.LayerNorm, nn.Tanh] * 3 + [nn.Linear]
        assert head[0].in_features == 16 + 9 + H * 8
        assert [m.out_features for m in head if isinstance(m, nn.Linear)] == [256, 256, 256, 1]
    action = torch.rand(5, H, 8)
    q_values = critic(obs, action)
    assert q_values.shape == (5, 2)
    other_ref = RLTObs(obs.z_rl, obs.proprio, torch.randn_like(obs.ref_chunk))
    assert torch.equal(critic(other_ref, action), q_values)
    assert not torch.equal(q_values[:, 0], q_values[:, 1])
