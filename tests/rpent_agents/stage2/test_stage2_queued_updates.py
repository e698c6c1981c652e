"""The training loop's queued updates on a GPU: launched with no host read.

Needs a CUDA device, which CI never has; runs on the GPU machine
(`python -m pytest tests/rpent_agents/stage2/test_stage2_queued_updates.py`). Kept apart from
the CUDA-graph tests, whose failure turns the graphs off in the device jobs.
"""

import numpy as np
import pytest
import torch
from stage2_helpers import filled_learner, random_transitions

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (CI machines have none)"
)


def test_a_queued_train_step_reads_nothing_back_from_the_device():
    learner = filled_learner(
        cuda_graphs=True, learning_starts=0, update_schedule=False, intervention_batch_share=0.25
    )
    learner.run_updates(8)  # both update kinds captured
    learner.add_transitions(random_transitions(8, seed=1))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host sync raises
    try:
        scalars = learner.start_train_step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    read = scalars.read()
    assert read["train/rlt/critic_updates_run"] == learner.config.update_epoch
    assert np.isfinite(read["critic/critic_loss"])
