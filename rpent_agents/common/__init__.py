"""What every stage shares and nothing else: kill-safe checkpoint saves and the torch device.

`atomic_save` replaces a checkpoint's files as one set (Stage 1, Stage 2 and the feature
checkpoints save through it); `devices.resolve_device` turns `"auto"` into a CUDA GPU when one
is visible. Nothing here imports another module of `rpent_agents`.
"""
