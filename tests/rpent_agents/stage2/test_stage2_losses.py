"""Each Stage 2 loss against values computed by hand on small tensors."""

import pytest
import torch

from rpent_agents.stage2 import losses
from rpent_agents.stage2.networks import reference_dropout


def test_discounted_chunk_return_weights_step_k_by_gamma_to_the_k():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    # 0.25 * 1 and 1 + 0.5 + 0.25
    assert torch.allclose(losses.discounted_chunk_return(rewards, 0.5), torch.tensor([0.25, 1.75]))


def test_td_target_bootstraps_with_gamma_to_the_h_unless_done():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    done = torch.tensor([0.0, 1.0])
    next_q_min = torch.tensor([2.0, 2.0])
    standard = losses.td_target(rewards, done, next_q_min, gamma=0.5, bootstrap_type="standard")
    always = losses.td_target(rewards, done, next_q_min, gamma=0.5, bootstrap_type="always")
    # not done: 0.25 + 0.5^3 * 2 = 0.5; done: 1.75 (standard) or 1.75 + 0.25 (always)
    assert torch.allclose(standard, torch.tensor([0.5, 1.75]))
    assert torch.allclose(always, torch.tensor([0.5, 2.0]))


def test_td_target_rejects_unknown_bootstrap_type():
    with pytest.raises(ValueError, match="bootstrap_type"):
        losses.td_target(torch.zeros(1, 2), torch.zeros(1), torch.zeros(1), 0.9, "sometimes")


def test_critic_loss_averages_squared_error_over_batch_and_heads():
    q_values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    target = torch.tensor([1.0, 2.0])
    # errors (0, 1, 1, 2) -> squares (0, 1, 1, 4) -> 6 / 4
    assert losses.critic_loss(q_values, target).item() == pytest.approx(1.5)


def _bc_case(intervened):
    actor_chunk = torch.zeros(2, 2, 2)
    ref_chunk = torch.tensor(
        [[[1.0, 1.0], [2.0, 2.0], [9.0, 9.0]], [[0.0, 2.0], [1.0, 1.0], [9.0, 9.0]]]
    )
    executed = torch.tensor([[[3.0, 3.0], [4.0, 4.0]], [[5.0, 5.0], [6.0, 6.0]]])
    return losses.bc_terms(actor_chunk, ref_chunk, executed, torch.tensor(intervened))


def test_bc_targets_the_first_h_reference_actions_without_intervention():
    terms = _bc_case([[False, False], [False, False]])
    # per-step mean over A: (1, 4) and (2, 1); the third reference action (9) is beyond H
    assert terms.loss.item() == pytest.approx(2.0)
    assert terms.ref_loss.item() == pytest.approx(2.0)
    assert terms.human_loss.item() == 0.0
    assert terms.human_mask_ratio.item() == 0.0


def test_intervention_switches_the_bc_target_to_the_executed_action():
    terms = _bc_case([[False, True], [False, False]])
    # step (0, 1) now targets the executed (4, 4): error 16 instead of 4
    assert terms.loss.item() == pytest.approx((1 + 16 + 2 + 1) / 4)
    assert terms.ref_loss.item() == pytest.approx((1 + 2 + 1) / 3)
    assert terms.human_loss.item() == pytest.approx(16.0)
    assert terms.human_mask_ratio.item() == pytest.approx(0.25)


def test_actor_loss_combines_q1_and_bc_with_their_weights():
    loss = losses.actor_loss(torch.tensor([1.0, 3.0]), torch.tensor(5.0), q_weight=0.5, bc_weight=2)
    assert loss.item() == pytest.approx(-0.5 * 2.0 + 2 * 5.0)


def test_reference_dropout_zeroes_whole_samples():
    ref_flat = torch.arange(1.0, 2001.0).reshape(1000, 2)
    assert torch.equal(reference_dropout(ref_flat, 0.0), ref_flat)
    assert torch.equal(reference_dropout(ref_flat, 1.0), torch.zeros_like(ref_flat))
    dropped = reference_dropout(ref_flat, 0.5, torch.Generator().manual_seed(0))
    zero_rows = (dropped == 0).all(dim=1)
    kept_rows = (dropped == ref_flat).all(dim=1)
    assert torch.all(zero_rows ^ kept_rows)
    assert 0.4 < zero_rows.float().mean().item() < 0.6


def test_the_normalized_q_term_divides_by_the_floored_mean_abs_q():
    q = torch.tensor([0.2, -0.6, 1.0], requires_grad=True)
    assert losses.q_scale(q, None) == 1.0
    assert losses.q_scale(q, 0.1).item() == pytest.approx(0.6)
    assert losses.q_scale(q * 0.01, 0.1).item() == pytest.approx(0.1)  # floored
    loss = losses.actor_loss(q, torch.tensor(0.0), 0.45, 2.5, losses.q_scale(q, 0.1))
    assert loss.item() == pytest.approx(-0.45 * q.mean().item() / 0.6)
    loss.backward()
    torch.testing.assert_close(q.grad, torch.full((3,), -0.45 / 3 / 0.6))  # no grad via scale
