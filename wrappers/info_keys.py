"""The info keys a chunked step of the wrappers reports, named once: what each one holds.

A chunk executor's step (`RLTObservation.step_chunk`, or `PolicySwitch` on a per-step env)
reports the last executed step's own info plus the chunk keys, assembled by
`wrappers.chunking.ChunkResult.chunk_info` (and, for a chunk that ended on a non-finite state,
`rpent_envs.state_checks.INVALID_STATE_KEY`); `PolicySwitch` adds the switch keys. A Stage 2
training worker (`rpent_agents.rollout.worker.RLTWorker`) adds its own keys, named in its
module. The one reader of a chunk's info is `rpent_agents.stage2.chunk_info.ChunkInfo`, which
cannot import this module (Stage 2 runs where gymnasium is not installed) and names the keys
it reads itself; the keys it leaves unread are listed there with their reasons, and a test runs
these writers to check that every key written is read or listed
(`tests/rpent_agents/stage2/test_chunk_info_keys.py`).
"""

CHUNK_REWARDS_KEY = "chunk_rewards"
"""(n,) float32: the reward of each executed step, for chunked TD targets."""
CHUNK_LEN_KEY = "chunk_len"
"""int: n, the steps the chunk executed (fewer than H when the episode ended inside it)."""
EXECUTED_ACTION_KEY = "executed_action"
"""(n, A) float32: the actions as executed ((0, A) in the info of a switch's reset)."""
STEP_INFOS_KEY = "step_infos"
"""list of n dicts: every executed step's own info, in order (what gates and takeovers read)."""

RLT_SWITCH_FLAGS_KEY = "rlt_switch_flags"
"""bool: the switch's critical phase is on, after this chunk (the actor drives the next)."""
RLT_POLICY_SWITCH_EVENT_KEY = "rlt_policy_switch_event"
"""None, "enter_actor" or "actor_already_active": what the trigger reported after this chunk."""
ACTOR_SWITCH_KEY = "actor_switch"
"""bool: the actor drove this chunk."""
RECORD_TRANSITION_KEY = "record_transition"
"""bool: the chunk was decided inside the critical phase: a replay transition."""
INTERVENTION_REQUESTED_KEY = "intervention_requested"
"""bool: a takeover (the expert's latched, or the human's engaged) when the chunk was decided
(executed or not: the expert waits for `actor_ready`, the human never does)."""
INTERVENE_FLAG_KEY = "intervene_flag"
"""bool: the expert or the human drove this chunk (an intervention: Stage 2's BC target)."""
ACTION_SOURCE_KEY = "action_source"
""""vla", "actor", "expert" or "human": who drove this chunk (None in the info of a reset)."""
NEXT_ACTION_SOURCE_KEY = "next_action_source"
""""vla", "actor", "expert" or "human": who drives the next chunk."""
SKIPPED_CHUNKS_KEY = "skipped_chunks"
"""int, in the info of a drop-in reset only: the chunks other drivers ran before the actor's."""
SKIPPED_REWARD_KEY = "skipped_reward"
"""float, in the info of a drop-in reset only: the reward those chunks earned."""
