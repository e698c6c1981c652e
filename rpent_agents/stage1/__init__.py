"""Stage 1 of RLT: demonstrations in, a built-in VLA and its RL token out (DESIGN.md §4).

`collect` is `rpent-collect` (scripted-expert peg demonstrations, as a LeRobot dataset or a
frame cache), `frame_cache` the compact `.npz` copy of a dataset that training reads, `train`
is `rpent-stage1` (`export-cache` and `train`, with the arguments of `config`); the training
run is `trainer`'s, on the batches of `sampler`, with the losses of `losses`, resumable from
what `run_state` saves, and `fine_tune` starts a run from an existing checkpoint
(`--init-from`). The feature models it trains live in
`rpent_agents.features`. Importing this package imports none of its modules.
"""
