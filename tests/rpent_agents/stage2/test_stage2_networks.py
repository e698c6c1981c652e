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
    # two heads of 3 x (Linear + LayerNorm + Tanh) and a scalar output, stacked layer by layer
    assert [tuple(weight.shape) for weight in critic.weights] == [
        (2, 256, 16 + 9 + H * 8), (2, 256, 256), (2, 256, 256), (2, 1, 256)
    ]  # fmt: skip
    assert [tuple(norm.shape) for norm in critic.norm_weights] == [(2, 256)] * 3
    action = torch.rand(5, H, 8)
    q_values = critic(obs, action)
    torch.testing.assert_close(q_values, _per_head_q_values(critic, obs, action))
    assert q_values.shape == (5, 2)
    other_ref = RLTObs(obs.z_rl, obs.proprio, torch.randn_like(obs.ref_chunk))
    assert torch.equal(critic(other_ref, action), q_values)
    assert not torch.equal(q_values[:, 0], q_values[:, 1])


def _per_head_q_values(critic, obs, action):
    """Each head's Q computed alone, as nn.Linear / LayerNorm / Tanh modules do."""
    critic_input = torch.cat([obs.z_rl, obs.proprio, action.flatten(1)], dim=-1)
    q_values = []
    for head in range(critic.num_heads):
        x = critic_input
        for layer in range(critic.num_layers):
            x = nn.functional.linear(x, critic.weights[layer][head], critic.biases[layer][head])
            norm_affine = (critic.norm_weights[layer][head], critic.norm_biases[layer][head])
            x = torch.tanh(nn.functional.layer_norm(x, x.shape[-1:], *norm_affine))
        q_values.append(nn.functional.linear(x, critic.weights[-1][head], critic.biases[-1][head]))
    return torch.cat(q_values, dim=-1)


def _per_head_critic_state(num_heads, hidden, layers, seed):
    """A saved critic of the per-head layout (RPent before 2026-12-02): heads.q.k.*."""
    torch.manual_seed(seed)
    input_dim = 16 + 9 + H * 8
    state = {}
    for head in range(num_heads):
        modules = []
        for layer in range(layers):
            in_dim = input_dim if layer == 0 else hidden
            modules += [nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.Tanh()]
        for module in modules:
            if isinstance(module, nn.LayerNorm):  # not the identity, so a mix-up shows
                nn.init.normal_(module.weight)
                nn.init.normal_(module.bias)
        sequential = nn.Sequential(*modules, nn.Linear(hidden, 1))
        state |= {f"heads.{head}.{key}": value for key, value in sequential.state_dict().items()}
    return state, sequential


def test_a_critic_saved_head_by_head_loads_with_its_sizes_and_values():
    state, last_head = _per_head_critic_state(num_heads=3, hidden=32, layers=2, seed=0)
    critic = TwinQCritic.from_state_dict(DIMS, H, state)
    assert (critic.num_heads, critic.num_layers, critic.weights[0].shape[1]) == (3, 2, 32)
    obs, action = _obs(), torch.rand(5, H, 8)
    critic_input = torch.cat([obs.z_rl, obs.proprio, action.flatten(1)], dim=-1)
    q_values = critic(obs, action)
    torch.testing.assert_close(q_values[:, 2:], last_head(critic_input))
    same_sizes = TwinQCritic(DIMS, H, hidden_dim=32, num_layers=2, num_heads=3)
    same_sizes.load_state_dict(state)  # a learner's critic reads the old layout too
    torch.testing.assert_close(same_sizes(obs, action), q_values)
    stacked = TwinQCritic.from_state_dict(DIMS, H, critic.state_dict())  # and its own
    torch.testing.assert_close(stacked(obs, action), q_values)
