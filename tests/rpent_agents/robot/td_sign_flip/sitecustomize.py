"""Test-only: flips the sign of Stage 2's TD bootstrap in every process of a run that asks.

Python imports `sitecustomize` at start-up from `sys.path`; a test that puts this folder on
PYTHONPATH and sets `RPENT_TEST_FLIP_TD_BOOTSTRAP=1` gets a run whose learner, in whatever
process it runs, bootstraps on -Q' instead of Q' (as test_learning.py's sign check does).
"""

import os

if os.environ.get("RPENT_TEST_FLIP_TD_BOOTSTRAP") == "1":
    from rpent_agents.stage2 import losses

    _td_target = losses.td_target

    def _bootstrap_sign_flipped(rewards, done, next_q_min, gamma, bootstrap_type="standard"):
        return _td_target(rewards, done, -next_q_min, gamma, bootstrap_type)

    losses.td_target = _bootstrap_sign_flipped
