"""Work pi0.5's stock code repeats at every call, that its fast calls do once or not at all.

LeRobot keeps two groups of pi0.5's weights in fp32, and a fast call paid for both each time:
- the SigLIP tower's Linear layers: under bf16 autocast (`PI05FeatureModel.bf16_vision`)
  each call cast every fp32 weight to bf16 again, once per camera (~2 ms of a 30 ms batch-1
  call on the H200). `Bf16CopyLinear` keeps that bf16 copy.
- the action expert's adaptive RMSNorms (adaRMS): each turns the Euler step's time
  conditioning into a scale, shift and gate through an fp32 dense layer, 37 per step and 370
  matrix-vector products per call (2.1 ms). The Euler loop's times are fixed, so
  `TabulatedLinear` keeps the dense layer's outputs for them and looks its row up.

And Gemma's eager attention copies its one key/value head to every query head (`repeat_kv`)
before two batched matmuls: at batch 64 the action expert's copies of the 712-token prefix
cache took ~30 ms of a 600 ms call on an H100. `grouped_query_attention` computes the same
attention with the query heads of each key/value head stacked along the query axis, so the
matmuls read the one head in place.

The Linear layers are replaced by subclasses that share the policy's parameters (the state
dict and the parameters' names are unchanged; the copies and tables are non-persistent
buffers); each attention module gets a copy of its config naming `grouped_query_attention`
(LeRobot sets "eager" on the shared one at every call). All of them run the stock code unless
`fast_routes` is active: only the feature model's fast calls take the fast routes, the eager
path (the tests' reference) and the user's own calls of the policy never do. The copies and
tables are computed from the weights at the time they are installed: load the weights first
(as `PI05FeatureModel.from_checkpoint` does).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# The attention implementation's name in transformers' `AttentionInterface`
GROUPED_QUERY_ATTENTION = "rpent_grouped_query"


class PrecomputedLinear(nn.Linear):
    """A Linear layer sharing another's parameters, with a precomputed route for fast calls.

    Attributes:
        fast_route: Whether calls take the precomputed route (`fast_routes`).
    """

    fast_route: bool

    @classmethod
    def sharing(cls, linear: nn.Linear) -> PrecomputedLinear:
        """A module of this class whose weight and bias are `linear`'s own parameters."""
        module = cls(linear.in_features, linear.out_features, bias=False, device="meta")
        module.weight, module.bias = linear.weight, linear.bias
        module.fast_route = False
        return module

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if self.fast_route:
            return self.precomputed_forward(inputs)
        return super().forward(inputs)

    def precomputed_forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The layer's output from what was computed once (each subclass's own)."""
        raise NotImplementedError


class Bf16CopyLinear(PrecomputedLinear):
    """A fp32 Linear whose precomputed route multiplies by a bf16 copy of its weights.

    The route is what bf16 autocast computes (it rounds the weights to bf16 before the matmul,
    the same rounding as the copy's), so it is taken only under bf16 autocast; without it the
    stock fp32 layer runs.
    """

    @classmethod
    def copying(cls, linear: nn.Linear) -> Bf16CopyLinear:
        """`linear` with a bf16 copy of its weight and bias."""
        module = cls.sharing(linear)
        module.register_buffer("weight_bf16", linear.weight.detach().bfloat16(), persistent=False)
        bias = None if linear.bias is None else linear.bias.detach().bfloat16()
        module.register_buffer("bias_bf16", bias, persistent=False)
        return module

    def precomputed_forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102
        device_type = inputs.device.type
        under_bf16_autocast = (
            torch.is_autocast_enabled(device_type)
            and torch.get_autocast_dtype(device_type) == torch.bfloat16
        )
        if not under_bf16_autocast:
            return nn.Linear.forward(self, inputs)
        return F.linear(inputs, self.weight_bf16, self.bias_bf16)


class TabulatedLinear(PrecomputedLinear):
    """A Linear whose inputs take a few known values: its outputs for them, looked up.

    The precomputed route finds, for each input row, the nearest of the tabulated inputs and
    returns that one's output: it equals the layer wherever the inputs are those values (the
    Euler loop's time conditionings), and nothing else should reach it.
    """

    @classmethod
    def tabulating(
        cls, linear: nn.Linear, inputs: torch.Tensor, keys: torch.Tensor
    ) -> TabulatedLinear:
        """`linear` with its outputs for the rows of `inputs` (S, in_features).

        `keys` is `inputs` in fp32, what the lookup compares with. Layers given one `keys`
        tensor hold that same tensor, so inductor finds all their rows in one fused kernel
        per Euler step (on the CPU toy: one kernel, not one per layer).
        """
        module = cls.sharing(linear)
        module.register_buffer("table_inputs", keys, persistent=False)
        module.register_buffer("table_outputs", linear(inputs).detach(), persistent=False)
        return module

    def precomputed_forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102
        flat = inputs.reshape(-1, self.in_features).float()
        distances = (flat[:, None, :] - self.table_inputs[None]).square().sum(dim=-1)
        rows = self.table_outputs[distances.argmin(dim=-1)]
        return rows.reshape(*inputs.shape[:-1], self.out_features)


@torch.no_grad()
def install_bf16_vision_copies(policy: nn.Module) -> list[PrecomputedLinear]:
    """Give every Linear of pi0.5's SigLIP tower and projector a bf16 copy (`Bf16CopyLinear`).

    Returns:
        The tower's and projector's `Bf16CopyLinear` layers (those installed before too).
    """
    paligemma = policy.model.paligemma_with_expert.paligemma.model
    owners = (paligemma.vision_tower, paligemma.multi_modal_projector)
    for owner in owners:
        _replace_linears(owner, Bf16CopyLinear.copying)
    return [
        module
        for owner in owners
        for module in owner.modules()
        if isinstance(module, Bf16CopyLinear)
    ]


@torch.no_grad()
def install_modulation_tables(policy: nn.Module, times: Sequence[float]) -> list[PrecomputedLinear]:
    """Tabulate the action expert's adaRMS dense layers at the Euler loop's `times`.

    The time conditioning is the policy's own (`embed_suffix` on the times); every adaptive
    norm of the expert receives it unchanged.

    Returns:
        The expert's `TabulatedLinear` layers (none when it has no adaptive norm; a second
        call tabulates nothing again).
    """
    model = policy.model
    config = policy.config
    device = next(model.parameters()).device
    time = torch.tensor(list(times), dtype=torch.float32, device=device)
    actions = torch.zeros(len(times), config.chunk_size, config.max_action_dim, device=device)
    *_, conditioning = model.embed_suffix(actions, time)
    keys = conditioning.float()
    norms = [
        module
        for module in model.paligemma_with_expert.gemma_expert.modules()
        if isinstance(getattr(module, "dense", None), nn.Linear)
    ]
    for norm in norms:
        if not isinstance(norm.dense, TabulatedLinear):
            norm.dense = TabulatedLinear.tabulating(norm.dense, conditioning, keys)
    return [norm.dense for norm in norms]


def grouped_query_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gemma's eager attention on the fast route, without copying the key/value heads.

    Query head h attends with key/value head h // groups (transformers' `repeat_kv`), so the
    query (B, H, Q, D) is viewed as (B, KV, groups * Q, D) against the key (B, KV, K, D): the
    same products, softmax in fp32 as the eager code. Off the route (`module.fast_route`
    False), transformers' eager attention runs.

    Returns:
        The output (B, Q, H, D) and None (no attention weights).
    """
    from transformers.models.gemma.modeling_gemma import eager_attention_forward

    if not getattr(module, "fast_route", False):
        return eager_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    batch, heads, queries, width = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scores = query.reshape(batch, kv_heads, groups * queries, width) @ key.transpose(2, 3)
    scores = (scores * scaling).view(batch, kv_heads, groups, queries, keys)
    if attention_mask is not None:  # (B, 1, Q, K): the same for every head
        scores = scores + attention_mask[:, :, None]
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    output = weights.view(batch, kv_heads, groups * queries, keys) @ value
    output = output.view(batch, heads, queries, width)
    return output.transpose(1, 2).contiguous(), None


def install_grouped_query_attention(policy: nn.Module) -> list[nn.Module]:
    """Route pi0.5's Gemma attention through `grouped_query_attention` on the fast route.

    Each attention module of the language model and the action expert gets a config of its
    own naming it (registered with transformers' `AttentionInterface`).

    Returns:
        The attention modules (those of a second call too).
    """
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_QUERY_ATTENTION, grouped_query_attention)
    experts = policy.model.paligemma_with_expert
    owners = (experts.paligemma.model.language_model, experts.gemma_expert)
    attentions = [
        module
        for owner in owners
        for module in owner.modules()
        if hasattr(module, "num_key_value_groups") and hasattr(module, "config")
    ]
    for attention in attentions:
        if attention.config._attn_implementation != GROUPED_QUERY_ATTENTION:
            attention.config = copy.copy(attention.config)
            attention.config._attn_implementation = GROUPED_QUERY_ATTENTION
    return attentions


@contextmanager
def fast_routes(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Within the block, `modules` take their fast route (their `fast_route` is True).

    `torch.compile` guards on the switch: code compiled inside the block runs the routes,
    code compiled outside it the stock code.
    """
    for module in modules:
        module.fast_route = True
    try:
        yield
    finally:
        for module in modules:
            module.fast_route = False


def _replace_linears(owner: nn.Module, replacement: Callable[[nn.Linear], nn.Module]) -> None:
    """Replace each plain `nn.Linear` under `owner` (not a subclass) by `replacement(linear)`."""
    for parent in list(owner.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, replacement(child))
