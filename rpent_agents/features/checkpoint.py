"""Stage 1 checkpoint folders: `model.safetensors` + `config.json` + `norm_stats.json`.

One folder holds the built-in VLA and its RL token; Stage 1 writes it, Stage 2 and
`wrappers.RLTObservation` (through `load_featurizer`) read it. The embedded default ships inside
the package (`DEFAULT_CHECKPOINT_DIR`).

A save replaces the three files as one set (`rpent_agents.common.atomic_save`): a process
killed while saving leaves the previous checkpoint or the new one, never a mix, and the loader
finishes a save that was committed before the kill. A file damaged some other way (truncated
by a copy, written by hand) is refused with a `CheckpointError` naming it, never loaded half.
Weights holding NaN or inf are refused at save (ValueError) and at load (`CheckpointError`),
the message naming the tensor.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rpent_agents.common.atomic_save import complete_interrupted_save, staged_save
from rpent_agents.common.finite_checks import require_finite_tensors
from rpent_agents.features.builtin import BuiltinVLA, BuiltinVLAConfig
from rpent_agents.features.graphed import GraphedRLTFeaturizer
from rpent_agents.features.norm import NormStats
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.rl_token import RLToken, RLTokenConfig

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
DEFAULT_CHECKPOINT_DIR = Path(__file__).parent / "default_checkpoint"
FEATURE_MODEL_KIND = "builtin"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read (truncated or not written by a save)."""


def write_checkpoint_files(
    folder: Path,
    vla: BuiltinVLA,
    rl_token: RLToken,
    metadata: dict[str, Any] | None = None,
    weights_dtype: torch.dtype = torch.float32,
) -> None:
    """Write the three checkpoint files into an existing folder (a `staged_save` staging one).

    Args:
        folder: Where to write them.
        vla: The built-in VLA (its norm stats are saved too).
        rl_token: The RL token trained on the VLA's prefix.
        metadata: Extra JSON-serialisable facts stored under "metadata" (step, dataset...).
        weights_dtype: Storage dtype of the weights (bfloat16 halves the size; loading
            always returns float32 modules).

    Raises:
        ValueError: When a weight (in `weights_dtype`) holds NaN or inf; nothing is written.
    """
    folder = Path(folder)
    tensors = {
        f"{prefix}.{name}": value.detach().to("cpu", weights_dtype).contiguous()
        for prefix, module in (("vla", vla), ("rl_token", rl_token))
        for name, value in module.state_dict().items()
    }
    require_finite_tensors(
        tensors,
        f"saving a Stage 1 checkpoint to {folder}",
        f"training diverged (lower the learning rate) or {weights_dtype} overflowed",
    )
    save_file(tensors, folder / WEIGHTS_FILE)
    config = {
        "feature_model": FEATURE_MODEL_KIND,
        "vla": asdict(vla.config),
        "rl_token": asdict(rl_token.config),
        "metadata": metadata or {},
    }
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=1))
    vla.norm_stats.save(folder)


def save_checkpoint(
    folder: Path,
    vla: BuiltinVLA,
    rl_token: RLToken,
    metadata: dict[str, Any] | None = None,
    weights_dtype: torch.dtype = torch.float32,
) -> None:
    """Replace the checkpoint files of `folder` (created if needed) as one set.

    `write_checkpoint_files` (same arguments) writes them into a `staged_save` of `folder`.
    """
    with staged_save(folder) as staging:
        write_checkpoint_files(staging, vla, rl_token, metadata, weights_dtype)


def read_config(folder: Path) -> dict[str, Any]:
    """The `config.json` of a checkpoint folder (finishing a save a kill interrupted).

    Raises:
        FileNotFoundError: When the folder lacks one of the three checkpoint files.
        CheckpointError: When `config.json` is not valid JSON.
    """
    folder = Path(folder)
    complete_interrupted_save(folder)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} is missing; pass a folder written by rpent-stage1"
            )
    try:
        return json.loads((folder / CONFIG_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(
            f"{folder / CONFIG_FILE} is not valid JSON ({error}); the folder was not written by"
            " a complete rpent-stage1 save: retrain, or restore the folder from a copy"
        ) from error


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except SafetensorError as error:
        raise CheckpointError(
            f"{path} cannot be read ({error}); it is truncated or damaged: retrain, or restore"
            " the folder from a copy"
        ) from error


def load_checkpoint(
    folder: Path, device: str | torch.device = "cpu"
) -> tuple[BuiltinVLA, RLToken, dict[str, Any]]:
    """Rebuild the VLA and RL token of a checkpoint folder, in float32 on `device`.

    Returns:
        The VLA, the RL token and the folder's config (with "metadata").

    Raises:
        FileNotFoundError: When a checkpoint file is missing.
        CheckpointError: When a checkpoint file cannot be read or a weight holds NaN or inf.
    """
    config = read_config(folder)
    if config.get("feature_model") != FEATURE_MODEL_KIND:
        raise ValueError(
            f"{folder} holds feature model {config.get('feature_model')!r}; this loader reads"
            f" {FEATURE_MODEL_KIND!r} checkpoints"
        )
    vla = BuiltinVLA(BuiltinVLAConfig(**config["vla"]), NormStats.load(folder))
    rl_token = RLToken(RLTokenConfig(**config["rl_token"]))
    tensors = _load_tensors(Path(folder) / WEIGHTS_FILE)
    require_finite_tensors(
        tensors,
        str(Path(folder) / WEIGHTS_FILE),
        "the checkpoint is broken: use an earlier one, or retrain",
        CheckpointError,
    )
    for prefix, module in (("vla", vla), ("rl_token", rl_token)):
        state = {
            name[len(prefix) + 1 :]: value.float()
            for name, value in tensors.items()
            if name.startswith(prefix + ".")
        }
        module.load_state_dict(state)
    return vla.to(device), rl_token.to(device), config


def load_featurizer(
    folder: Path | None = None, device: str | torch.device = "cpu", cuda_graphs: bool = True
) -> RLTFeaturizer:
    """The RL-token featurizer of a checkpoint folder (default: the embedded checkpoint).

    Args:
        folder: A Stage 1 checkpoint folder; None: the embedded default.
        device: Where the models run.
        cuda_graphs: On a CUDA device, the built-in VLA's fast path
            (`features.graphed.GraphedRLTFeaturizer`: one CUDA graph per batch bucket, the
            same outputs up to float rounding); False keeps the eager model. Ignored on the CPU.
    """
    vla, rl_token, _ = load_checkpoint(folder or DEFAULT_CHECKPOINT_DIR, device)
    if cuda_graphs and vla.device.type == "cuda":
        return GraphedRLTFeaturizer(vla.eval(), rl_token)
    return RLTFeaturizer(vla.eval(), rl_token)
