"""Which torch device a component runs on: "auto" means a CUDA GPU when one is visible."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """`"auto"` -> cuda when available, else cpu; anything else as given.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
