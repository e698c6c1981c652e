"""`rpent-run`: a policy driving a registered env for given seeds, optionally recorded.

`cli` is the command (its arguments and the run summary), `policies` the policies it drives an
env with (the Stage 1 VLA, a Stage 2 actor, a scripted expert; one decision per action chunk)
and `episodes` the episode loop that logs each decision to the provenance channel and
executes it, in this process or in workers.
"""
