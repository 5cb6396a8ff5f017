"""The virtual queues and the selection rule of section 4 (the paper, Eq. 2 and
Eq. 3), step by step against hand-computed values."""

import numpy as np

import capassign as ca


def test_queue_step_by_hand():
    q = ca.VirtualQueues([0.3, 0.7])
    q.update(0)
    np.testing.assert_allclose(q.Q, [0.7, 0.0])
    q.update(0)
    np.testing.assert_allclose(q.Q, [1.4, 0.0])
    q.update(1)
    np.testing.assert_allclose(q.Q, [1.1, 0.3])
    Q = np.zeros(3)
    for a in (0, 0, 1, 2, 2):
        ca._queue_update_nb(Q, np.array([0.3, 0.7, 0.0]), np.array([True, True, False]),
                            np.eye(3, dtype=np.int64)[a], 1)
    # Q_0: 0.7, 1.4, 1.1, 0.8, 0.5 ; Q_1: 0, 0, 0.3, 0 (0.3 - 0.7 floors at 0), 0
    np.testing.assert_allclose(Q, [0.5, 0.0, 0.0])
    free = ca.VirtualQueues([0.4, 0.6, None])
    for a in (2, 2, 2, 0):
        free.update(a)
    np.testing.assert_allclose(free.Q, [0.6, 0.0, 0.0])


def test_select_agent_penalises_queues_and_breaks_ties_low():
    assert ca.select_agent([0.9, 0.6], [0.0, 0.0], 0.5) == 0
    assert ca.select_agent([0.9, 0.6], [1.0, 0.0], 0.5) == 1   # 0.4 < 0.6
    assert ca.select_agent([0.5, 0.5, 0.5], [0.0, 0.0, 0.0], 0.5) == 0
    assert ca._select_nb(np.array([0.9, 0.6]), np.array([1.0, 0.0]), 0.5) == 1
