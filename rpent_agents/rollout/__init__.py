"""The envs a Stage 2 policy acts in: the composite RLT stacks and the workers that run them.

`rlt_stack` holds the peg stack's one config (`PegRLTConfig`), its composite env
(`RPent/PegInsertion-RLT-v0`) and `RLTStackEnv`, what every composite RLT env is;
`franka_stack` the Franka stack's (`FrankaRLTConfig`, `RPent/FrankaPegInsertion-RLT-v0`);
`stack_options` what both take besides their config; `vector` runs many
peg stacks in worker processes and featurizes their observations in one batch per step
(`make_rlt_vector_env`, what `rpent-stage2` trains on); `ray_vector_env` is the same worker
pool as Ray actors across machines, `ray_config` its `--rollout ray` flags and `ray_rollout`
its builder.
Nothing here imports `rpent_agents.stage2`: the learner drives these envs, not the reverse.
"""
