"""What every stage shares and nothing else: kill-safe saves, the torch device, the commands' start.

`atomic_save` replaces a checkpoint's files as one set (Stage 1, Stage 2 and the feature
checkpoints save through it); `devices.resolve_device` turns `"auto"` into a CUDA GPU when one
is visible; `cli.command` is how every command of `rpent_agents` starts and fails;
`lazy_exports` gives a package public names that load on first access. Nothing here imports
another module of `rpent_agents`.
"""
