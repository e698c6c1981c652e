"""Optimizer steps that are skipped, on the device, when their loss or gradient is not finite.

A NaN or inf loss (a diverging critic, an overflowing TD target) or gradient must never reach
the weights: one such step makes every weight NaN. The skip is decided on the device, with no
host sync, so the eager update and the captured CUDA-graph update run the same code: the fused
Adam takes a `found_inf` flag (the mechanism of `torch.amp.GradScaler`) and leaves the
parameters and its moments untouched, its step count too, where the flag is set; a counter
tensor adds the flag up.
"""

from __future__ import annotations

import torch


def step_unless_non_finite(
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    skipped_steps: torch.Tensor,
) -> None:
    """Step `optimizer` when `loss` and `grad_norm` are finite; else count one skip instead.

    Args:
        optimizer: A fused Adam (`torch.optim.Adam(..., fused=True)`: it honours
            `found_inf`; the other implementations refuse it).
        loss: The scalar loss whose gradients fill the optimizer's parameters.
        grad_norm: Their total gradient norm (as `clip_grad_norm_` returns it: NaN or inf as
            soon as one gradient entry is).
        skipped_steps: Scalar float tensor on the parameters' device, incremented in place
            when the step is skipped.
    """
    non_finite = (~(torch.isfinite(loss) & torch.isfinite(grad_norm))).float()
    optimizer.found_inf = non_finite
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf
    skipped_steps.add_(non_finite)
