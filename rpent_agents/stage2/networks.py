"""The Stage 2 actor and twin-Q critic (DESIGN.md §4).

Both read an `RLTObs` batch: `z_rl` (B, D) from the frozen RL token, `proprio` (B, P) and the
VLA reference chunk `ref_chunk` (B, H_ref, A). The actor sees the first H reference actions; the
critic never sees the reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class RLTDims:
    """Sizes of the RLT observation.

    Attributes:
        z_dim: D, size of the RL token `z_rl`.
        proprio_dim: P, size of `proprio`.
        ref_chunk_len: H_ref, reference actions in `ref_chunk` (>= the actor's chunk length).
        action_dim: A, size of one env action.
    """

    z_dim: int
    proprio_dim: int
    ref_chunk_len: int
    action_dim: int

    @classmethod
    def from_observation_space(cls, space: Any) -> RLTDims:
        """Read the sizes from an RLT Dict observation space (`z_rl`, `proprio`, `ref_chunk`)."""
        ref_len, action_dim = space["ref_chunk"].shape
        return cls(
            z_dim=int(space["z_rl"].shape[0]),
            proprio_dim=int(space["proprio"].shape[0]),
            ref_chunk_len=int(ref_len),
            action_dim=int(action_dim),
        )


@dataclass
class RLTObs:
    """A batch of RLT observations as tensors.

    Attributes:
        z_rl: (B, D) RL token.
        proprio: (B, P) proprioception.
        ref_chunk: (B, H_ref, A) VLA reference chunk in env action units.
    """

    z_rl: torch.Tensor
    proprio: torch.Tensor
    ref_chunk: torch.Tensor

    def to(self, device: torch.device) -> RLTObs:
        """The same batch on `device` (no copy when it is there already)."""
        return RLTObs(self.z_rl.to(device), self.proprio.to(device), self.ref_chunk.to(device))


def reference_dropout(
    ref_flat: torch.Tensor, prob: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Zero each sample's whole reference input with probability `prob`.

    Args:
        ref_flat: (B, H*A) flattened reference chunks.
        prob: Drop probability per sample.
        generator: Random source (the default generator when None).

    Returns:
        `ref_flat` with dropped rows set to zero.
    """
    if prob <= 0.0:
        return ref_flat
    keep = torch.rand((ref_flat.shape[0], 1), device=ref_flat.device, generator=generator)
    return ref_flat * (keep >= prob).to(ref_flat.dtype)


def _orthogonal_linear(in_dim: int, out_dim: int, gain: float) -> nn.Linear:
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class Actor(nn.Module):
    """Chunk actor: [ref_chunk[:H] flattened, z_rl, proprio] -> H x A actions in [-1, 1].

    Hidden layers are Linear(hidden_dim) + Tanh; the chunk is tanh(mean + N(0, noise_std)) while
    training and tanh(mean) when deterministic (evaluation). Initialisation follows the
    reference MLP policy: orthogonal weights (gain sqrt 2), a small output layer (gain 0.01 sqrt 2).

    Example:
        >>> actor = Actor(RLTDims(16, 9, 10, 8), chunk_len=10)
        >>> obs = RLTObs(torch.zeros(4, 16), torch.zeros(4, 9), torch.zeros(4, 10, 8))
        >>> actor(obs, deterministic=True).shape
        torch.Size([4, 10, 8])
    """

    def __init__(
        self,
        dims: RLTDims,
        chunk_len: int,
        hidden_dim: int = 256,
        num_layers: int = 3,
        noise_std: float = 0.002,
    ) -> None:
        super().__init__()
        if chunk_len > dims.ref_chunk_len:
            raise ValueError(
                f"chunk_len {chunk_len} exceeds the reference chunk length {dims.ref_chunk_len}; "
                "the feature model must predict at least chunk_len actions"
            )
        self.chunk_len = chunk_len
        self.action_dim = dims.action_dim
        self.noise_std = noise_std
        input_dim = chunk_len * dims.action_dim + dims.z_dim + dims.proprio_dim
        layers: list[nn.Module] = []
        for layer_index in range(num_layers):
            in_dim = input_dim if layer_index == 0 else hidden_dim
            layers += [_orthogonal_linear(in_dim, hidden_dim, math.sqrt(2)), nn.Tanh()]
        self.backbone = nn.Sequential(*layers)
        self.mean = _orthogonal_linear(hidden_dim, chunk_len * dims.action_dim, 0.01 * math.sqrt(2))

    def forward(
        self,
        obs: RLTObs,
        *,
        deterministic: bool = False,
        ref_dropout_prob: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Action chunks (B, H, A) for a batch of observations.

        Args:
            obs: The observation batch.
            deterministic: Return tanh(mean) without noise (evaluation).
            ref_dropout_prob: Reference dropout probability (the actor loss only).
            generator: Random source of the noise and the dropout (default generator: None).
        """
        mean = self.pre_tanh_mean(obs, ref_dropout_prob, generator)
        if not deterministic:
            noise = torch.randn(
                mean.shape, generator=generator, device=mean.device, dtype=mean.dtype
            )
            mean = mean + self.noise_std * noise
        return self.squash(mean)

    def pre_tanh_mean(
        self,
        obs: RLTObs,
        ref_dropout_prob: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The chunks' means before the tanh, flat (B, H*A) (see `forward`)."""
        ref_flat = obs.ref_chunk[:, : self.chunk_len].flatten(1)
        ref_flat = reference_dropout(ref_flat, ref_dropout_prob, generator)
        return self.mean(self.backbone(torch.cat([ref_flat, obs.z_rl, obs.proprio], dim=-1)))

    def squash(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        """Flat pre-tanh chunks (..., H*A) as action chunks (..., H, A) in [-1, 1]."""
        return torch.tanh(pre_tanh).view(*pre_tanh.shape[:-1], self.chunk_len, self.action_dim)


def _q_head(input_dim: int, hidden_dim: int, num_layers: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for layer_index in range(num_layers):
        in_dim = input_dim if layer_index == 0 else hidden_dim
        layers += [nn.Linear(in_dim, hidden_dim), nn.LayerNorm(hidden_dim), nn.Tanh()]
    output = nn.Linear(hidden_dim, 1)
    # A small output layer starts every Q estimate near zero (as the reference Q heads do).
    nn.init.normal_(output.weight, std=0.02)
    nn.init.zeros_(output.bias)
    return nn.Sequential(*layers, output)


def _stacked(tensors: list[torch.Tensor]) -> nn.Parameter:
    return nn.Parameter(torch.stack([tensor.detach() for tensor in tensors]))


class TwinQCritic(nn.Module):
    """Q heads on [z_rl, proprio, action chunk flattened]; no reference input.

    Each head is `num_layers` x (Linear(hidden_dim) + LayerNorm + Tanh) and a scalar output.
    The heads are computed together: layer l of every head is one stacked weight
    `weights.l` (Q, out, in) with its bias `biases.l` (Q, out) and LayerNorm affine
    `norm_weights.l`, `norm_biases.l` (Q, hidden), so a forward pass costs a few batched
    kernels per layer whatever the number of heads. Saved critics of the per-head layout
    (`heads.q.k.*`, RPent before 2026-12-02) load into it unchanged.

    Example:
        >>> critic = TwinQCritic(RLTDims(16, 9, 10, 8), chunk_len=10)
        >>> obs = RLTObs(torch.zeros(4, 16), torch.zeros(4, 9), torch.zeros(4, 10, 8))
        >>> critic(obs, torch.zeros(4, 10, 8)).shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        dims: RLTDims,
        chunk_len: int,
        hidden_dim: int = 256,
        num_layers: int = 3,
        num_heads: int = 2,
    ) -> None:
        super().__init__()
        input_dim = dims.z_dim + dims.proprio_dim + chunk_len * dims.action_dim
        # Initialised head by head, as independent heads are.
        heads = [_q_head(input_dim, hidden_dim, num_layers) for _ in range(num_heads)]
        linear = [[head[3 * layer] for head in heads] for layer in range(num_layers + 1)]
        norms = [[head[3 * layer + 1] for head in heads] for layer in range(num_layers)]
        self.weights = nn.ParameterList(_stacked([m.weight for m in ms]) for ms in linear)
        self.biases = nn.ParameterList(_stacked([m.bias for m in ms]) for ms in linear)
        self.norm_weights = nn.ParameterList(_stacked([m.weight for m in ms]) for ms in norms)
        self.norm_biases = nn.ParameterList(_stacked([m.bias for m in ms]) for ms in norms)
        self._register_load_state_dict_pre_hook(_stack_per_head_state)

    @classmethod
    def from_state_dict(
        cls, dims: RLTDims, chunk_len: int, state: Mapping[str, torch.Tensor]
    ) -> TwinQCritic:
        """A critic of the sizes of a saved state (either layout), holding its weights."""
        stacked = dict(state)
        _stack_per_head_state(stacked, "")
        heads, hidden, _ = stacked["weights.0"].shape
        layers = sum(1 for key in stacked if key.startswith("norm_weights."))
        critic = cls(dims, chunk_len, hidden, layers, heads)
        critic.load_state_dict(stacked)
        return critic

    @property
    def num_heads(self) -> int:
        """Q, the number of heads."""
        return self.weights[0].shape[0]

    @property
    def num_layers(self) -> int:
        """Hidden layers of each head (Linear + LayerNorm + Tanh)."""
        return len(self.norm_weights)

    def forward(self, obs: RLTObs, action_chunk: torch.Tensor) -> torch.Tensor:
        """Q values (B, num_heads) of action chunks (B, H, A) in observations `obs`."""
        critic_input = torch.cat([obs.z_rl, obs.proprio, action_chunk.flatten(1)], dim=-1)
        heads, hidden = self.weights[0].shape[:2]
        # The first layer of every head in one matrix product: (B, Q * hidden) -> (Q, B, hidden).
        x = nn.functional.linear(
            critic_input, self.weights[0].flatten(0, 1), self.biases[0].flatten()
        )
        x = x.view(-1, heads, hidden).transpose(0, 1)
        for layer in range(self.num_layers):
            if layer > 0:
                x = torch.baddbmm(
                    self.biases[layer].unsqueeze(1), x, self.weights[layer].transpose(1, 2)
                )
            x = nn.functional.layer_norm(x, (hidden,))
            x = torch.addcmul(
                self.norm_biases[layer].unsqueeze(1), x, self.norm_weights[layer].unsqueeze(1)
            )
            x = torch.tanh(x)
        q_values = torch.baddbmm(
            self.biases[-1].unsqueeze(1), x, self.weights[-1].transpose(1, 2)
        )  # (Q, B, 1)
        return q_values.squeeze(-1).transpose(0, 1)


def _stack_per_head_state(state_dict: dict[str, torch.Tensor], prefix: str, *args: Any) -> None:
    """Turn a per-head critic state (`heads.q.k.weight`, ...) into the stacked layout, in place.

    Layer k of head q was `heads.q.(3k)` (Linear) and `heads.q.(3k+1)` (LayerNorm); the output
    Linear came last. A state of the stacked layout passes untouched.
    """
    old = {key[len(prefix) :]: key for key in state_dict if key.startswith(prefix + "heads.")}
    if not old:
        return
    heads = 1 + max(int(key.split(".")[1]) for key in old)
    modules = 1 + max(int(key.split(".")[2]) for key in old)  # 3 per hidden layer + the output

    def stack(module: int, name: str) -> torch.Tensor:
        return torch.stack(
            [state_dict.pop(old[f"heads.{q}.{module}.{name}"]) for q in range(heads)]
        )

    for layer, module in enumerate(range(0, modules, 3)):
        state_dict[f"{prefix}weights.{layer}"] = stack(module, "weight")
        state_dict[f"{prefix}biases.{layer}"] = stack(module, "bias")
        if module + 1 < modules:
            state_dict[f"{prefix}norm_weights.{layer}"] = stack(module + 1, "weight")
            state_dict[f"{prefix}norm_biases.{layer}"] = stack(module + 1, "bias")
