"""What pi0.5's fast calls would recompute from fixed weights at every call, computed once.

LeRobot keeps two groups of pi0.5's weights in fp32, and a fast call paid for both each time:
- the SigLIP tower's Linear layers: under bf16 autocast (`PI05FeatureModel.bf16_vision`)
  each call cast every fp32 weight to bf16 again, once per camera (~2 ms of a 30 ms batch-1
  call on the H200). `Bf16CopyLinear` keeps that bf16 copy.
- the action expert's adaptive RMSNorms (adaRMS): each turns the Euler step's time
  conditioning into a scale, shift and gate through an fp32 dense layer, 37 per step and 370
  matrix-vector products per call (2.1 ms). The Euler loop's times are fixed, so
  `TabulatedLinear` keeps the dense layer's outputs for them and looks its row up.

Both replace a policy's Linear modules by subclasses that share its parameters (the state
dict and the parameters' names are unchanged; the copies and tables are non-persistent
buffers) and run the stock Linear unless `precomputed_routes` is active: only the feature
model's fast calls take the precomputed routes, the eager path (the tests' reference) and the
user's own calls of the policy never do. They are computed from the weights at the time they
are installed: load the weights first (as `PI05FeatureModel.from_checkpoint` does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


class PrecomputedLinear(nn.Linear):
    """A Linear layer sharing another's parameters, with a precomputed route for fast calls.

    Attributes:
        precomputed: Whether calls take the precomputed route (`precomputed_routes`).
    """

    precomputed: bool

    @classmethod
    def sharing(cls, linear: nn.Linear) -> PrecomputedLinear:
        """A module of this class whose weight and bias are `linear`'s own parameters."""
        module = cls(linear.in_features, linear.out_features, bias=False, device="meta")
        module.weight, module.bias = linear.weight, linear.bias
        module.precomputed = False
        return module

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if self.precomputed:
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
    def tabulating(cls, linear: nn.Linear, inputs: torch.Tensor) -> TabulatedLinear:
        """`linear` with its outputs for the rows of `inputs` (S, in_features)."""
        module = cls.sharing(linear)
        module.register_buffer("table_inputs", inputs.detach().float(), persistent=False)
        module.register_buffer("table_outputs", linear(inputs).detach(), persistent=False)
        return module

    def precomputed_forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102
        flat = inputs.reshape(-1, self.in_features).float()
        distances = (flat[:, None, :] - self.table_inputs[None]).square().sum(dim=-1)
        rows = self.table_outputs[distances.argmin(dim=-1)]
        return rows.reshape(*inputs.shape[:-1], self.out_features)


def install_bf16_vision_copies(policy: nn.Module) -> list[PrecomputedLinear]:
    """Give every Linear of pi0.5's SigLIP tower and projector a bf16 copy (`Bf16CopyLinear`).

    Returns:
        The tower's and projector's `Bf16CopyLinear` layers (those installed before too).
    """
    paligemma = policy.model.paligemma_with_expert.paligemma.model
    owners = (paligemma.vision_tower, paligemma.multi_modal_projector)
    with torch.no_grad():
        for owner in owners:
            _replace_linears(owner, Bf16CopyLinear.copying)
    return [
        module
        for owner in owners
        for module in owner.modules()
        if isinstance(module, Bf16CopyLinear)
    ]


def install_modulation_tables(policy: nn.Module, times: Sequence[float]) -> int:
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
    with torch.no_grad():
        *_, conditioning = model.embed_suffix(actions, time)
    norms = [
        module
        for module in model.paligemma_with_expert.gemma_expert.modules()
        if isinstance(getattr(module, "dense", None), nn.Linear)
    ]
    with torch.no_grad():
        for norm in norms:
            if not isinstance(norm.dense, TabulatedLinear):
                norm.dense = TabulatedLinear.tabulating(norm.dense, conditioning)
    return [norm.dense for norm in norms]


@contextmanager
def precomputed_routes(modules: Sequence[PrecomputedLinear]) -> Iterator[None]:
    """Within the block, `modules` take their precomputed route.

    `torch.compile` guards on the switch: code compiled inside the block runs the routes,
    code compiled outside it the stock layers.
    """
    for module in modules:
        module.precomputed = True
    try:
        yield
    finally:
        for module in modules:
            module.precomputed = False


def _replace_linears(owner: nn.Module, replacement: Callable[[nn.Linear], nn.Module]) -> None:
    """Replace each plain `nn.Linear` under `owner` (not a subclass) by `replacement(linear)`."""
    for parent in list(owner.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, replacement(child))
