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


# =============================================================================
# 2. Theory / oracle
# =============================================================================


# =============================================================================
# 3. Reward models
# =============================================================================


# The fast engine compiles its inner loops with numba; ``cache=True`` stores the
# machine code next to this file, so a new process (or notebook kernel) loads
# it instead of compiling again.
from numba import njit, prange


@dataclass(frozen=True)
class ModelSettings:
    """Hyper-parameters of the reward models, in one place (the paper, App. E).

    The defaults are the paper's values; :data:`PAPER_SETTINGS` is that
    default instance and every function takes it unless told otherwise.

    Attributes
    ----------
    gamma : float
        Prior precision of the Laplace-logistic model, Sigma_1 = I / gamma
        (App. E.1: gamma_prior = 1).
    kappa : float
        Thompson-sampling scale, theta ~ N(theta_hat, kappa^2 Sigma) (App. E.1: 0.5).
    w_min, w_max : float
        Clip of the Laplace weight w_t = p_t (1 - p_t) (App. E.1: [1e-4, 0.25]).
    n_trees : int
        Trees per agent ensemble, B (App. E.2: 20).
    max_depth, min_samples_leaf : int
        Size limits of every regression tree (App. E.2: 3 and 10).
    refit_every : int
        The ensemble of an agent is refit after every ``refit_every`` rewards
        observed for that agent (App. E.2: 20).
    max_bins : int
        Fast engine only: contexts are cut into at most this many quantile bins
        per feature before the online trees are grown (the reference engine
        uses exact scikit-learn thresholds; the fast offline benchmark uses
        255).  Not a parameter of the paper.
    """

    gamma: float = 1.0
    kappa: float = 0.5
    w_min: float = 1e-4
    w_max: float = 0.25
    n_trees: int = 20
    max_depth: int = 3
    min_samples_leaf: int = 10
    refit_every: int = 20
    max_bins: int = 64

    def __post_init__(self):
        for name in ("gamma", "kappa", "w_max"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"settings.{name} must be a positive number, got {v!r}")
        if not (isinstance(self.w_min, (int, float)) and 0 < self.w_min <= self.w_max):
            raise ValueError(f"settings.w_min must lie in (0, w_max], got {self.w_min!r}")
        for name, lo, hi in (("n_trees", 1, 10_000), ("max_depth", 1, 12),
                             ("min_samples_leaf", 1, 10**9), ("refit_every", 1, 10**9),
                             ("max_bins", 2, 255)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise ValueError(f"settings.{name} must be an integer in [{lo}, {hi}], got {v!r}")


#: The paper's hyper-parameters (App. E).
PAPER_SETTINGS = ModelSettings()


def _sigmoid(z):
    """Logistic function sigma(z) = 1 / (1 + e^-z), without overflow."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class LaplaceLogistic:
    """Bayesian logistic reward model of one agent, Laplace-approximated online.

    The paper, Sec. 3.1 and App. E.1 (after Chapelle and Li, 2011).  The reward
    is ``r ~ Bernoulli(sigma(theta^T [1, x]))`` (an intercept is prepended to
    the context); the posterior of ``theta`` is kept as ``N(theta_hat, Sigma)``
    with ``theta_hat = 0`` and ``Sigma = I / gamma`` before any data.  After a
    reward ``r`` for context ``x`` (with ``z = [1, x]``)::

        p     = sigma(theta_hat^T z)
        w     = clip(p (1 - p), w_min, w_max)
        Sigma <- Sigma - w Sigma z z^T Sigma / (1 + w z^T Sigma z)   (Sherman-Morrison)
        Sigma <- (Sigma + Sigma^T) / 2
        theta_hat <- theta_hat + Sigma z (r - p)                     (new Sigma)

    :meth:`predict` is the greedy plug-in ``sigma(theta_hat^T z)``;
    :meth:`sample` is one Thompson draw ``sigma(theta~^T z)`` with
    ``theta~ ~ N(theta_hat, kappa^2 Sigma)``, drawn literally through a Cholesky
    factor (the fast engine draws the scalar ``theta~^T z`` instead, which has
    the same distribution).
    """

    def __init__(self, n_features, settings=PAPER_SETTINGS):
        if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) or n_features < 0:
            raise ValueError(f"n_features must be an integer >= 0, got {n_features!r}")
        self.settings = settings
        p = int(n_features) + 1
        self.theta = np.zeros(p)
        self.Sigma = np.eye(p) / settings.gamma
        self.n_updates = 0

    @staticmethod
    def _design(x):
        return np.concatenate(([1.0], np.asarray(x, dtype=float)))

    def predict(self, x):
        """Greedy estimate sigma(theta_hat^T [1, x]) of mu_a(x)."""
        return _sigmoid(float(self.theta @ self._design(x)))

    def sample(self, x, rng):
        """Thompson estimate sigma(theta~^T [1, x]), theta~ ~ N(theta_hat, kappa^2 Sigma)."""
        L = np.linalg.cholesky(self.Sigma)
        theta = self.theta + self.settings.kappa * (L @ rng.standard_normal(self.theta.size))
        return _sigmoid(float(theta @ self._design(x)))

    def update(self, x, r):
        """Absorb one reward ``r`` in {0, 1} observed for context ``x`` (App. E.1)."""
        s = self.settings
        z = self._design(x)
        p = _sigmoid(float(self.theta @ z))
        w = min(max(p * (1.0 - p), s.w_min), s.w_max)
        Sz = self.Sigma @ z
        Sigma = self.Sigma - w * np.outer(Sz, Sz) / (1.0 + w * float(z @ Sz))
        self.Sigma = 0.5 * (Sigma + Sigma.T)
        self.theta = self.theta + (self.Sigma @ z) * (float(r) - p)
        self.n_updates += 1
        return self


class _FlatTree:
    """A fitted scikit-learn regression tree, flattened for one-row prediction."""

    __slots__ = ("feature", "threshold", "left", "right", "value")

    def __init__(self, tree):
        t = tree.tree_
        self.feature = t.feature.tolist()
        self.threshold = t.threshold.tolist()
        self.left = t.children_left.tolist()
        self.right = t.children_right.tolist()
        self.value = t.value[:, 0, 0].tolist()

    def predict_one(self, x):
        """Prediction for one context ``x`` (a list of float32 values, as
        scikit-learn compares contexts in float32)."""
        node = 0
        while self.left[node] != -1:
            if x[self.feature[node]] <= self.threshold[node]:
                node = self.left[node]
            else:
                node = self.right[node]
        return min(max(self.value[node], 0.0), 1.0)


class BootstrapTrees:
    """Bootstrap ensemble of regression trees for one agent (the paper, Sec. 3.1, App. E.2).

    Every observed ``(x, r)`` pair is stored.  After every ``refit_every``
    (20) observations the whole ensemble is refit: each of the ``n_trees``
    (B = 20) scikit-learn ``DecisionTreeRegressor(max_depth=3,
    min_samples_leaf=10)`` is grown on its own fresh bootstrap resample (n
    draws with replacement from the n stored pairs).  :meth:`predict` is the
    greedy ensemble mean (0.5 before the first fit); :meth:`sample` is the
    prediction of one tree drawn uniformly (a draw from U[0, 1] before the
    first fit).  Tree predictions are clipped to [0, 1].
    """

    def __init__(self, settings=PAPER_SETTINGS):
        self.settings = settings
        self._X = []
        self._r = []
        self.trees = None
        self.estimators_ = None
        self.n_fits = 0

    @property
    def n_observations(self):
        return len(self._r)

    def fit(self, X, r, rng):
        """Grow the ensemble on ``(X, r)``, one bootstrap resample per tree."""
        import sklearn
        from sklearn.tree import DecisionTreeRegressor

        s = self.settings
        # scikit-learn trees work on float32 contexts; converting once here and
        # skipping its per-fit input checks changes nothing but the speed.
        X = np.ascontiguousarray(X, dtype=np.float32)
        r = np.asarray(r, dtype=np.float64)
        n = len(r)
        trees = []
        with sklearn.config_context(skip_parameter_validation=True):
            for _ in range(s.n_trees):
                rows = rng.integers(0, n, size=n)
                tree = DecisionTreeRegressor(max_depth=s.max_depth,
                                             min_samples_leaf=s.min_samples_leaf,
                                             random_state=int(rng.integers(2**31 - 1)))
                tree.fit(X[rows], np.ascontiguousarray(r[rows]), check_input=False)
                trees.append(tree)
        self.estimators_ = trees
        self.trees = [_FlatTree(t) for t in trees]
        self.n_fits += 1
        return self

    def update(self, x, r, rng):
        """Store one observation; refit after every ``refit_every`` of them."""
        self._X.append(np.asarray(x, dtype=float))
        self._r.append(float(r))
        if len(self._r) % self.settings.refit_every == 0:
            self.fit(np.array(self._X), np.array(self._r), rng)
        return self

    def predict(self, x):
        """Greedy estimate: mean of the tree predictions (0.5 before the first fit)."""
        if self.trees is None:
            return 0.5
        x = np.asarray(x, dtype=np.float32).tolist()
        return sum(t.predict_one(x) for t in self.trees) / len(self.trees)

    def predict_batch(self, X):
        """Greedy estimates for many contexts at once (rows of ``X``)."""
        X = np.asarray(X, dtype=np.float32)
        if self.trees is None:
            return np.full(len(X), 0.5)
        return np.mean([np.clip(t.predict(X), 0.0, 1.0) for t in self.estimators_], axis=0)

    def sample(self, x, rng):
        """Bootstrap Thompson estimate: one uniformly drawn tree (U[0, 1] before the first fit)."""
        if self.trees is None:
            return float(rng.random())
        x = np.asarray(x, dtype=np.float32).tolist()
        return self.trees[int(rng.integers(len(self.trees)))].predict_one(x)


class MarginalAccuracy:
    """Context-free reward model: the running mean reward of one agent (App. D.5).

    Used by the learned non-contextual ``marginal`` policy.  Before the agent
    has any observation the estimate is 0.5, like the tree models' prior.
    """

    def __init__(self):
        self.n = 0
        self.successes = 0.0

    def predict(self, x=None):
        return self.successes / self.n if self.n else 0.5

    def sample(self, x, rng):
        return self.predict(x)

    def update(self, x, r):
        self.n += 1
        self.successes += float(r)
        return self


# --- compiled kernels of the fast engine ------------------------------------
#
# Random numbers: xoshiro256** (Blackman and Vigna), one 4-word state per run,
# seeded from numpy's SeedSequence, so a run's numbers never depend on which
# thread runs it.

@njit(cache=True, inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True)
def _next_u64(s):
    result = _rotl(s[1] * np.uint64(5), 7) * np.uint64(9)
    t = s[1] << np.uint64(17)
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


@njit(cache=True)
def _uniform(s):
    """A double in [0, 1) with 53 random bits."""
    return float(_next_u64(s) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def _randint(s, n):
    """An integer uniform on {0, ..., n-1}: floor(n u) of a 53-bit uniform u."""
    k = int(_uniform(s) * n)
    return k if k < n else n - 1


@njit(cache=True)
def _normal_pair(s):
    """Two independent standard normal draws (both outputs of Box-Muller)."""
    u1 = 1.0 - _uniform(s)
    u2 = _uniform(s)
    r = math.sqrt(-2.0 * math.log(u1))
    return r * math.cos(2.0 * math.pi * u2), r * math.sin(2.0 * math.pi * u2)


@njit(cache=True)
def _sigmoid_nb(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@njit(cache=True)
def _laplace_update_nb(theta, Sigma, x, r, w_min, w_max, Sx):
    """One Laplace-logistic step in place (App. E.1); ``Sx`` is scratch.

    Uses Sigma_new z = Sigma z / (1 + w z^T Sigma z), exact for the
    Sherman-Morrison update, and writes the upper triangle then mirrors it,
    so Sigma stays exactly symmetric (the symmetrisation of the paper).
    """
    p = x.shape[0]
    m = 0.0
    for j in range(p):
        m += theta[j] * x[j]
    ph = _sigmoid_nb(m)
    w = ph * (1.0 - ph)
    if w < w_min:
        w = w_min
    elif w > w_max:
        w = w_max
    q = 0.0
    for j in range(p):
        acc = 0.0
        for k in range(p):
            acc += Sigma[j, k] * x[k]
        Sx[j] = acc
        q += x[j] * acc
    denom = 1.0 + w * q
    c = w / denom
    for j in range(p):
        g = c * Sx[j]
        for k in range(j, p):
            v = Sigma[j, k] - g * Sx[k]
            Sigma[j, k] = v
            Sigma[k, j] = v
    step = (r - ph) / denom
    for j in range(p):
        theta[j] += Sx[j] * step


def _bin_contexts(X, max_bins):
    """Quantile-bin every context feature into at most ``max_bins`` bins.

    Fast engine only.  The bin edges depend on the contexts ``X`` alone, never
    on rewards, so no reward information leaks into the discretisation; they
    are computed once from all T contexts of the stream (an unsupervised step
    that a deployment would do on historical contexts).  A feature with at most
    ``max_bins`` distinct values gets one bin per value, with edges at the
    midpoints, so its candidate splits are exactly scikit-learn's.  Otherwise
    edges are distinct empirical quantiles.  Bin ``b`` of feature ``j`` holds
    ``edges[j][b-1] < x <= edges[j][b]``; a tree split "bin <= b" is the
    threshold split "x <= edges[j][b]".

    Returns ``(Xb, n_bins, edges)`` with ``Xb`` a C-contiguous uint8 array.
    """
    X = np.asarray(X, dtype=float)
    T, d = X.shape
    Xb = np.zeros((T, d), dtype=np.uint8)
    n_bins = np.ones(max(d, 1), dtype=np.int64)[:d]
    edges = []
    for j in range(d):
        col = X[:, j]
        u = np.unique(col)
        if len(u) <= max_bins:
            e = (u[:-1] + u[1:]) / 2.0
        else:
            e = np.unique(np.quantile(col, np.linspace(0.0, 1.0, max_bins + 1)[1:-1]))
        Xb[:, j] = np.searchsorted(e, col, side="left")
        n_bins[j] = len(e) + 1
        edges.append(e)
    return np.ascontiguousarray(Xb), n_bins, edges


@njit(cache=True)
def _tree_predict_nb(feat, thr, val, xb):
    k = 0
    while feat[k] >= 0:
        if xb[feat[k]] <= thr[k]:
            k = 2 * k + 1
        else:
            k = 2 * k + 2
    v = val[k]
    return 0.0 if v < 0.0 else (1.0 if v > 1.0 else v)


@njit(cache=True)
def _fit_forest_nb(Xb, n_bins, max_bins, R, agent, obs, n, max_depth, min_leaf, rng,
                   cnt, H, HS, node_c, node_s, wl, can, cl, sl, best, bpos, tot_c, tot_s,
                   feat, thr, val):
    """Refit all B trees of one agent at once, each on a fresh bootstrap (App. E.2).

    The online engine's tree kernel.  Tree b's bootstrap resample of the n
    observations ``obs[:n]`` is drawn as multiplicities ``cnt[:, b]`` (n
    uniform draws, counted).  The trees are then grown level by level in
    lockstep: one pass over the observations per level adds each row's
    multiplicity, for every tree at once (a contiguous vector over trees),
    to the histogram of (count, reward sum) per feature bin of the node the
    row reaches in that tree.  Only left children are accumulated; a right
    child's histogram is its parent's minus its sibling's (sibling
    subtraction).  Each node then takes the bin threshold maximising
    ``S_L^2/n_L + S_R^2/n_R`` with at least ``min_leaf`` rows per side (the
    squared-error criterion of scikit-learn's best splitter), unless it is
    pure, too small, or at ``max_depth``.

    Layout: ``H[u, j * max_bins + bin, b]`` (counts) and ``HS`` (reward sums)
    for heap node u of tree b; ``feat[b, u] = -1`` marks a leaf.  The other
    arguments after ``rng`` are scratch arrays (see :func:`_tree_run`); on
    return ``cnt[:n, b]`` holds tree b's bootstrap multiplicities.
    """
    B = cnt.shape[1]
    d = Xb.shape[1]
    n_nodes = feat.shape[1]
    n_cols = H.shape[1]
    for k in range(n):
        for b in range(B):
            cnt[k, b] = 0
    for b in range(B):
        for _ in range(n):
            cnt[_randint(rng, n), b] += 1
    for b in range(B):
        for u in range(n_nodes):
            feat[b, u] = -1
            thr[b, u] = 0
            val[b, u] = 0.0
    for u in range(n_nodes):
        for b in range(B):
            node_c[u, b] = 0
            node_s[u, b] = 0
    for c in range(n_cols):
        for b in range(B):
            H[0, c, b] = 0
            HS[0, c, b] = 0
    # level 0: totals and the root histogram
    for k in range(n):
        i = obs[k]
        y = R[i, agent]
        for b in range(B):
            node_c[0, b] += cnt[k, b]
        if y:
            for b in range(B):
                node_s[0, b] += cnt[k, b]
        for j in range(d):
            col = j * max_bins + Xb[i, j]
            for b in range(B):
                H[0, col, b] += cnt[k, b]
            if y:
                for b in range(B):
                    HS[0, col, b] += cnt[k, b]
    for level in range(max_depth):
        first = 2 ** level - 1
        last = 2 ** (level + 1) - 1
        if level > 0:
            n_par = 2 ** (level - 1)
            pfirst = first - n_par
            for u in range(first, last, 2):
                for c in range(n_cols):
                    for b in range(B):
                        H[u, c, b] = 0
                        HS[u, c, b] = 0
            for k in range(n):
                i = obs[k]
                y = R[i, agent]
                hit = False
                for p in range(n_par):
                    for b in range(B):
                        wl[p, b] = 0
                for b in range(B):
                    if cnt[k, b] == 0:
                        continue
                    u = 0
                    for _ in range(level):
                        f = feat[b, u]
                        if f < 0:
                            u = -1
                            break
                        u = 2 * u + 1 if Xb[i, f] <= thr[b, u] else 2 * u + 2
                    if u >= 0 and (u - first) % 2 == 0:
                        wl[(u - first) // 2, b] = cnt[k, b]
                        hit = True
                if not hit:
                    continue
                for j in range(d):
                    col = j * max_bins + Xb[i, j]
                    for p in range(n_par):
                        u = first + 2 * p
                        for b in range(B):
                            H[u, col, b] += wl[p, b]
                        if y:
                            for b in range(B):
                                HS[u, col, b] += wl[p, b]
            for p in range(n_par):
                u = first + 2 * p
                par = pfirst + p
                for c in range(n_cols):
                    for b in range(B):
                        H[u + 1, c, b] = H[par, c, b] - H[u, c, b]
                        HS[u + 1, c, b] = HS[par, c, b] - HS[u, c, b]
        # split search for every node of this level, all trees side by side
        for u in range(first, last):
            any_can = False
            for b in range(B):
                C = node_c[u, b]
                S = node_s[u, b]
                if C > 0:
                    val[b, u] = S / C
                can[b] = C >= 2 * min_leaf and 0 < S < C
                any_can = any_can or can[b]
                best[b] = -1.0
                bpos[b] = -1
                tot_c[b] = C
                tot_s[b] = S
            if not any_can:
                continue
            for j in range(d):
                for b in range(B):
                    cl[b] = 0
                    sl[b] = 0
                for q in range(n_bins[j] - 1):
                    col = j * max_bins + q
                    filled = False
                    for b in range(B):
                        h = H[u, col, b]
                        filled = filled or h != 0
                        cl[b] += h
                        sl[b] += HS[u, col, b]
                    if not filled:
                        # an empty bin repeats the previous threshold's split,
                        # which was already scored (and wins ties)
                        continue
                    # branch-free scoring of this threshold in every tree
                    for b in range(B):
                        c_l = cl[b]
                        c_r = tot_c[b] - c_l
                        s_l = sl[b]
                        s_r = tot_s[b] - s_l
                        ok = can[b] and c_l >= min_leaf and c_r >= min_leaf
                        pr = s_l * s_l / max(c_l, 1) + s_r * s_r / max(c_r, 1)
                        better = ok and pr > best[b]
                        best[b] = pr if better else best[b]
                        bpos[b] = col if better else bpos[b]
            for b in range(B):
                if bpos[b] >= 0:
                    j = bpos[b] // max_bins
                    q = bpos[b] - j * max_bins
                    c_l = 0
                    s_l = 0
                    for qq in range(q + 1):
                        c_l += H[u, j * max_bins + qq, b]
                        s_l += HS[u, j * max_bins + qq, b]
                    feat[b, u] = j
                    thr[b, u] = q
                    node_c[2 * u + 1, b] = c_l
                    node_s[2 * u + 1, b] = s_l
                    node_c[2 * u + 2, b] = node_c[u, b] - c_l
                    node_s[2 * u + 2, b] = node_s[u, b] - s_l
    for u in range(2 ** max_depth - 1, n_nodes):
        for b in range(B):
            if node_c[u, b] > 0:
                val[b, u] = node_s[u, b] / node_c[u, b]


# =============================================================================
# 4. Capacity control
# =============================================================================


class VirtualQueues:
    """Virtual queues that enforce long-run capacities (the paper, Eq. 1-2, App. F).

    ``Q[a]`` tracks how far agent a has run ahead of its share alpha_a::

        Q_{t+1,a} = max(Q_{t,a} + 1{a_t = a} - alpha_a, 0)

    and the assignment rule is ``argmax_a mu_a(x_t) - eta Q_{t,a}`` (Eq. 2),
    the queues acting as running estimates of the shadow prices.  A free agent
    (capacity ``None``, App. I.3) has no queue: its ``Q`` stays 0.
    """

    def __init__(self, capacities):
        self.alpha, self.constrained = _validate_capacities(capacities)
        self.Q = np.zeros(len(self.alpha))

    def select(self, mu, eta):
        """Index of ``argmax_a mu[a] - eta Q[a]`` (first index on ties)."""
        return select_agent(mu, self.Q, eta)

    def update(self, a):
        """Advance the queues after task t went to agent ``a`` (Eq. 1)."""
        indicator = np.zeros(len(self.Q))
        indicator[a] = 1.0
        self.Q = np.where(self.constrained,
                          np.maximum(self.Q + indicator - self.alpha, 0.0), 0.0)
        return self


def select_agent(mu, Q, eta):
    """The capacity-aware choice ``argmax_a {mu[a] - eta Q[a]}`` (Eq. 2).

    Ties go to the lowest agent index.
    """
    return int(np.argmax(np.asarray(mu, dtype=float) - eta * np.asarray(Q, dtype=float)))


@njit(cache=True)
def _select_nb(mu, Q, eta):
    best = 0
    best_s = mu[0] - eta * Q[0]
    for a in range(1, mu.shape[0]):
        s = mu[a] - eta * Q[a]
        if s > best_s:
            best_s = s
            best = a
    return best


@njit(cache=True)
def _queue_step_nb(Q, alpha, constrained, chosen):
    for a in range(Q.shape[0]):
        if constrained[a]:
            # (Q + I) - alpha, in the same order as VirtualQueues.update
            q = (Q[a] + (1.0 if a == chosen else 0.0)) - alpha[a]
            Q[a] = q if q > 0.0 else 0.0
        else:
            Q[a] = 0.0


# =============================================================================
# 5. Simulation engine
# =============================================================================

# How the engine is organised
# ---------------------------
# simulate() validates everything first, then draws, from one SeedSequence,
# each run's task permutation and each run's policy seed (_stream_orders).
# The permutations are the same on both engines; only the policies' own draws
# differ (numpy Generators in the reference engine, xoshiro256** streams in the
# compiled kernels), so the engines agree in distribution, and exactly for the
# deterministic policies (marginal, logistic-greedy, offline-logistic) up to
# floating-point rounding.
#
# engine="reference": _reference_run, a plain loop over the model classes of
#   section 3 and VirtualQueues of section 4 - Algorithm 1 line by line.
# engine="fast": one compiled kernel per model family, prange over runs.
#   - logistic: per-agent Sherman-Morrison updates in place, O(p^2) per step;
#     Thompson draws through the scalar theta~^T z (exact, no factorisation).
#   - trees: contexts quantile-binned once (edges from X only, never from
#     rewards); each refit regrows all B trees of the agent in lockstep by
#     histogram split search on (count, reward sum) with bootstrap
#     multiplicities and sibling subtraction (_fit_forest_nb).  The cost of a
#     refit stays linear in the agent's observations, so a run costs O(T^2)
#     in all, as in the paper's algorithm.
#   Every run owns its RNG state and writes only its own outputs, so numbers
#   do not depend on the number of threads.


#: Public policy names (Sec. 3, App. D.5, E).  The first two are
#: non-contextual, the next four learn mu_a(x) online, and the last two are the
#: paper's optimistic offline benchmark (Sec. 4), which ignores capacities.
POLICIES = ("random", "marginal", "logistic-greedy", "logistic-ts",
            "tree-greedy", "tree-ts", "offline-logistic", "offline-tree")
#: The four contextual online policies of the paper's experiments.
CONTEXTUAL_POLICIES = ("logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts")
#: ``"fast"``: compiled kernels; ``"reference"``: the literal Python loop.
ENGINES = ("fast", "reference")
#: Default queue penalty eta (Sec. 4: eta = 0.5).
DEFAULT_ETA = 0.5


@dataclass(repr=False)
class SimulationResult:
    """Outcome of :func:`simulate`: per-run errors, realised shares and inputs.

    Attributes
    ----------
    policy, capacities, eta, runs, seed, engine
        The inputs (``capacities`` as a tuple, ``None`` for a free agent).
    errors : ndarray, shape (runs,)
        Error rate of each run, ``1 - (1/T) sum_t r_{t, a_t}``.
    assigned : ndarray, shape (runs, A)
        Realised fraction of the T tasks given to each agent in each run.
    orders : ndarray of int, shape (runs, T), optional
        Task index processed at step t of run k (the run's permutation).
    assignments : ndarray of int, shape (runs, T), optional
        Agent chosen at step t of run k (for ``orders[k, t]``).
    queues : ndarray, shape (runs, T, A), optional
        Virtual queues Q_{t,a} in force at decision t (Q_1 = 0); ``None`` for
        the offline policies, which have no queues.
    """

    policy: str
    capacities: tuple
    eta: float
    runs: int
    seed: int
    engine: str
    errors: np.ndarray
    assigned: np.ndarray
    orders: np.ndarray | None = None
    assignments: np.ndarray | None = None
    queues: np.ndarray | None = None

    @property
    def error(self):
        """Mean error rate over runs (the number the paper plots)."""
        return float(np.mean(self.errors))

    @property
    def std(self):
        """Standard deviation of the error over runs (ddof=1; 0 for one run)."""
        return float(np.std(self.errors, ddof=1)) if self.runs > 1 else 0.0

    @property
    def stderr(self):
        """Standard error of :attr:`error`."""
        return self.std / math.sqrt(self.runs)

    @property
    def n_agents(self):
        return self.assigned.shape[1]

    def __repr__(self):
        shares = ", ".join(f"{v:.3f}" for v in self.assigned.mean(axis=0))
        return (f"SimulationResult(policy={self.policy!r}, engine={self.engine!r}, "
                f"capacities={self.capacities}, eta={self.eta}, runs={self.runs}, "
                f"seed={self.seed}, error={self.error:.4f} +/- {self.stderr:.4f}, "
                f"assigned=[{shares}])")


def synthetic_stream(T=5000, d=12, n_agents=2, *, seed=0):
    """A synthetic task stream with known, context-dependent agent accuracies.

    For tests, benchmarks and the theory chapters; not one of the paper's
    tasks.  Contexts are i.i.d. standard normal, ``X ~ N(0, I_d)``.  Agent a is
    an "expert" on one feature, ``j = a mod d``: its accuracy is::

        mu_a(x) = sigma(0.4 + 1.5 s_a tanh(2 x_j) + 0.5 u_a^T x / sqrt(d))

    with ``s_a = +1`` for even a and ``-1`` for odd a, and ``u_a`` a fixed
    random direction, so every agent is better than the others somewhere.
    Rewards are ``R[t, a] ~ Bernoulli(mu_a(x_t))``, drawn independently.

    Returns
    -------
    X : ndarray, shape (T, d)
    R : ndarray of uint8, shape (T, n_agents), values in {0, 1}
    mu : ndarray, shape (T, n_agents)
        The true accuracies mu_a(x_t).
    """
    for name, v, lo in (("T", T, 1), ("d", d, 1), ("n_agents", n_agents, 2)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    U = rng.standard_normal((n_agents, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    sign = np.where(np.arange(n_agents) % 2 == 0, 1.0, -1.0)
    expert = np.arange(n_agents) % d
    z = 0.4 + 1.5 * sign * np.tanh(2.0 * X[:, expert]) + 0.5 * (X @ U.T) / math.sqrt(d)
    mu = 1.0 / (1.0 + np.exp(-z))
    R = (rng.random((T, n_agents)) < mu).astype(np.uint8)
    return X, R, mu


def _stream_orders(seed, runs, T):
    """Per-run task orders and per-run policy seeds, both drawn from ``seed``.

    ``SeedSequence(seed)`` spawns one child per run; each child spawns two
    streams: the first draws the run's permutation of the T tasks (the same on
    every engine), the second seeds the policy's own randomness (Thompson
    draws, bootstraps, the random baseline).
    """
    children = np.random.SeedSequence(seed).spawn(runs)
    orders = np.empty((runs, T), dtype=np.int64)
    policy_seeds = []
    for k, child in enumerate(children):
        perm_ss, policy_ss = child.spawn(2)
        orders[k] = np.random.default_rng(perm_ss).permutation(T)
        policy_seeds.append(policy_ss)
    return orders, policy_seeds


def _rng_states(policy_seeds):
    """xoshiro256** states (runs x 4 uint64) for the compiled kernels."""
    states = np.array([ss.generate_state(4, np.uint64) for ss in policy_seeds],
                      dtype=np.uint64).reshape(len(policy_seeds), 4)
    states[~states.any(axis=1), 0] = 1  # the all-zero state is invalid
    return states


def _validate_simulation(X, R, capacities, policy, eta, runs, seed, engine, settings):
    """Check every argument of :func:`simulate`; return the normalised values."""
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    X = _validate_matrix(X, "X")
    R = _validate_matrix(R, "R", finite=False)
    if np.isnan(R).any():
        raise ValueError("R contains NaN values; rewards must be 0 or 1")
    if not np.isin(R, (0.0, 1.0)).all():
        raise ValueError("R must contain only rewards 0 and 1")
    if X.shape[0] != R.shape[0]:
        raise ValueError(f"X has {X.shape[0]} tasks (rows) but R has {R.shape[0]}; "
                         f"they must describe the same T tasks")
    if X.shape[0] < 1:
        raise ValueError("X and R must hold at least one task")
    if "tree" in policy and X.shape[1] < 1:
        raise ValueError(f"X has no feature columns; policy {policy!r} needs at least one")
    alpha, constrained = _validate_capacities(capacities, R.shape[1])
    eta = _validate_eta(eta)
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 1:
        raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not isinstance(settings, ModelSettings):
        raise TypeError(f"settings must be a ModelSettings, got {type(settings).__name__}")
    caps = tuple(None if c is None else float(c) for c in capacities)
    return X, R.astype(np.uint8), alpha, constrained, eta, int(runs), int(seed), caps


def simulate(X, R, capacities, policy, *, eta=DEFAULT_ETA, runs=100, seed=0,
             engine="fast", return_traces=False, settings=PAPER_SETTINGS):
    """Run an assignment policy on a task stream, ``runs`` times (Algorithm 1).

    Every run processes the T tasks in its own random order (the paper's
    randomised streams, Sec. 4).  At step t the policy sees context ``x_t``,
    picks ``a_t = argmax_a mu_{a,t}(x_t) - eta Q_{t,a}`` (Eq. 2), observes only
    ``R[t, a_t]``, updates agent ``a_t``'s reward model and the virtual queues
    (Eq. 1).  A free agent (capacity ``None``, App. I.3) has Q = 0 throughout
    and its model learns whenever it is chosen.

    Parameters
    ----------
    X : array, shape (T, d)
        Contexts, finite.  The logistic models prepend an intercept.
    R : array, shape (T, A)
        Reward (correctness) of every agent on every task, in {0, 1}.
    capacities : sequence of length A
        alpha_a in [0, 1] per agent, or ``None`` for a free agent; the
        constrained entries must sum to 1.
    policy : str
        One of :data:`POLICIES`:

        - ``"random"``: agent a with probability alpha_a, ignoring x (a free
          agent has probability 0);
        - ``"marginal"``: running mean reward of each agent minus eta Q (App. D.5);
        - ``"logistic-greedy"`` / ``"logistic-ts"``: :class:`LaplaceLogistic`
          models, plug-in or Thompson estimate (App. E.1);
        - ``"tree-greedy"`` / ``"tree-ts"``: :class:`BootstrapTrees`, ensemble
          mean or one random tree (App. E.2);
        - ``"offline-logistic"`` / ``"offline-tree"``: the optimistic offline
          unconstrained benchmark, see :func:`offline_benchmark`.
    eta : float
        Queue penalty, >= 0 (default 0.5 as in the paper).
    runs : int
        Number of randomised streams.
    seed : int
        Seed of everything random: run k's permutation and the policy's draws.
        Both engines use the same permutations.
    engine : {"fast", "reference"}
        ``"reference"`` is the plain Python loop over the model classes of
        section 3 (slow, the definition); ``"fast"`` runs compiled kernels in
        parallel over runs (results do not depend on the thread count).  The
        two agree in distribution, not draw by draw.
    return_traces : bool
        Also return ``orders``, ``assignments`` (runs x T) and ``queues``
        (runs x T x A) in the result.
    settings : ModelSettings
        Model hyper-parameters (default: the paper's, :data:`PAPER_SETTINGS`).

    Returns
    -------
    SimulationResult
    """
    X, R, alpha, constrained, eta, runs, seed, caps = _validate_simulation(
        X, R, capacities, policy, eta, runs, seed, engine, settings)
    T, A = R.shape
    orders, policy_seeds = _stream_orders(seed, runs, T)
    if policy.startswith("offline-"):
        rewards, counts, assign = _offline_runs(X, R, orders, policy, policy_seeds,
                                                engine, settings)
        queues = None
    elif engine == "reference":
        rewards = np.zeros(runs, dtype=np.int64)
        counts = np.zeros((runs, A), dtype=np.int64)
        assign = np.zeros((runs, T), dtype=np.int32)
        queues = np.zeros((runs, T, A))
        for k in range(runs):
            rng = np.random.default_rng(policy_seeds[k])
            a_k, q_k = _reference_run(X, R, orders[k], caps, eta, policy, rng, settings)
            assign[k] = a_k
            queues[k] = q_k
            rewards[k] = R[orders[k], a_k].sum()
            counts[k] = np.bincount(a_k, minlength=A)
    else:
        rewards, counts, assign, queues = _fast_runs(
            X, R, orders, alpha, constrained, eta, policy, _rng_states(policy_seeds),
            settings, return_traces)
    result = SimulationResult(policy=policy, capacities=caps, eta=eta, runs=runs, seed=seed,
                              engine=engine, errors=1.0 - rewards / T, assigned=counts / T)
    if return_traces:
        result.orders = orders
        result.assignments = assign
        result.queues = queues
    return result


def _reference_run(X, R, order, capacities, eta, policy, rng, settings):
    """One run of Algorithm 1 (App. E), literally: the definition of the engine.

    Returns the chosen agent at every step and the queues in force at every
    decision.
    """
    T, A = R.shape
    queues = VirtualQueues(capacities)
    if policy == "marginal":
        models = [MarginalAccuracy() for _ in range(A)]
    elif policy.startswith("logistic"):
        models = [LaplaceLogistic(X.shape[1], settings) for _ in range(A)]
    elif policy.startswith("tree"):
        models = [BootstrapTrees(settings) for _ in range(A)]
    else:
        models = None
    thompson = policy.endswith("-ts")
    chosen = np.zeros(T, dtype=np.int32)
    Q = np.zeros((T, A))
    for t, i in enumerate(order):
        x = X[i]
        Q[t] = queues.Q
        if policy == "random":
            a = int(rng.choice(A, p=queues.alpha))
        else:
            if thompson:
                mu = [m.sample(x, rng) for m in models]
            else:
                mu = [m.predict(x) for m in models]
            a = queues.select(mu, eta)
        r = R[i, a]
        if isinstance(models, list):
            if policy.startswith("tree"):
                models[a].update(x, r, rng)
            else:
                models[a].update(x, r)
        queues.update(a)
        chosen[t] = a
    return chosen, Q


# --- fast engine -------------------------------------------------------------


@njit(cache=True)
def _noncontextual_run(R, order, alpha, constrained, eta, learned, rng,
                       assign, queues, counts, trace):
    """One run of ``random`` (learned=False) or ``marginal`` (learned=True)."""
    T = order.shape[0]
    A = R.shape[1]
    Q = np.zeros(A)
    mu = np.empty(A)
    n = np.zeros(A)
    s = np.zeros(A)
    cum = np.cumsum(alpha)
    last = 0
    for a in range(A):
        if alpha[a] > 0.0:
            last = a
    total = 0
    for t in range(T):
        i = order[t]
        if trace:
            queues[t, :] = Q
        if learned:
            for a in range(A):
                mu[a] = s[a] / n[a] if n[a] > 0 else 0.5
            a = _select_nb(mu, Q, eta)
        else:
            u = _uniform(rng)
            a = last
            for b in range(A):
                if u < cum[b] and alpha[b] > 0.0:
                    a = b
                    break
        r = R[i, a]
        n[a] += 1.0
        s[a] += r
        total += r
        counts[a] += 1
        if trace:
            assign[t] = a
        _queue_step_nb(Q, alpha, constrained, a)
    return total


@njit(cache=True)
def _logistic_run(Xd, R, order, alpha, constrained, eta, thompson, kappa, gamma,
                  w_min, w_max, rng, assign, queues, counts, trace):
    """One run of ``logistic-greedy`` / ``logistic-ts`` (App. E.1).

    Thompson sampling draws the scalar theta~^T z ~ N(theta_hat^T z,
    kappa^2 z^T Sigma z), which is exactly the distribution of theta~^T z
    under theta~ ~ N(theta_hat, kappa^2 Sigma), at O(p^2) cost and without
    factorising Sigma.
    """
    T = order.shape[0]
    A = R.shape[1]
    p = Xd.shape[1]
    theta = np.zeros((A, p))
    Sigma = np.zeros((A, p, p))
    for a in range(A):
        for j in range(p):
            Sigma[a, j, j] = 1.0 / gamma
    Q = np.zeros(A)
    mu = np.empty(A)
    Sx = np.empty(p)
    total = 0
    spare = 0.0
    has_spare = False
    for t in range(T):
        i = order[t]
        x = Xd[i]
        if trace:
            queues[t, :] = Q
        for a in range(A):
            m = 0.0
            for j in range(p):
                m += theta[a, j] * x[j]
            if thompson:
                if has_spare:
                    g = spare
                    has_spare = False
                else:
                    g, spare = _normal_pair(rng)
                    has_spare = True
                q = 0.0
                for j in range(p):
                    acc = 0.5 * Sigma[a, j, j] * x[j]
                    for k in range(j + 1, p):
                        acc += Sigma[a, j, k] * x[k]
                    q += x[j] * acc
                q *= 2.0
                if q < 0.0:
                    q = 0.0
                m += kappa * math.sqrt(q) * g
            mu[a] = _sigmoid_nb(m)
        a = _select_nb(mu, Q, eta)
        r = R[i, a]
        total += r
        counts[a] += 1
        if trace:
            assign[t] = a
        _laplace_update_nb(theta[a], Sigma[a], x, float(r), w_min, w_max, Sx)
        _queue_step_nb(Q, alpha, constrained, a)
    return total


@njit(cache=True)
def _tree_run(Xb, n_bins, max_bins, R, order, alpha, constrained, eta, thompson,
              n_trees, max_depth, min_leaf, refit_every, rng, assign, queues, counts, trace):
    """One run of ``tree-greedy`` / ``tree-ts`` (App. E.2) on binned contexts."""
    T = order.shape[0]
    A = R.shape[1]
    d = Xb.shape[1]
    n_nodes = 2 ** (max_depth + 1) - 1
    n_int = 2 ** max_depth - 1
    feat = np.full((A, n_trees, n_nodes), -1, dtype=np.int32)
    thr = np.zeros((A, n_trees, n_nodes), dtype=np.int32)
    val = np.zeros((A, n_trees, n_nodes))
    fitted = np.zeros(A, dtype=np.bool_)
    obs = np.empty((A, T), dtype=np.int32)
    nobs = np.zeros(A, dtype=np.int64)
    # workspace of the lockstep forest builder
    cnt = np.empty((T, n_trees), dtype=np.int32)
    H = np.empty((n_int, d * max_bins, n_trees), dtype=np.int32)
    HS = np.empty((n_int, d * max_bins, n_trees), dtype=np.int32)
    node_c = np.empty((n_nodes, n_trees), dtype=np.int64)
    node_s = np.empty((n_nodes, n_trees), dtype=np.int64)
    wl = np.empty((max(n_int // 2 + 1, 1), n_trees), dtype=np.int32)
    can = np.empty(n_trees, dtype=np.bool_)
    cl = np.empty(n_trees, dtype=np.int64)
    sl = np.empty(n_trees, dtype=np.int64)
    best = np.empty(n_trees)
    bpos = np.empty(n_trees, dtype=np.int64)
    tot_c = np.empty(n_trees, dtype=np.int64)
    tot_s = np.empty(n_trees, dtype=np.int64)
    Q = np.zeros(A)
    mu = np.empty(A)
    total = 0
    for t in range(T):
        i = order[t]
        xb = Xb[i]
        if trace:
            queues[t, :] = Q
        for a in range(A):
            if not fitted[a]:
                mu[a] = _uniform(rng) if thompson else 0.5
            elif thompson:
                b = _randint(rng, n_trees)
                mu[a] = _tree_predict_nb(feat[a, b], thr[a, b], val[a, b], xb)
            else:
                acc = 0.0
                for b in range(n_trees):
                    acc += _tree_predict_nb(feat[a, b], thr[a, b], val[a, b], xb)
                mu[a] = acc / n_trees
        a = _select_nb(mu, Q, eta)
        r = R[i, a]
        total += r
        counts[a] += 1
        if trace:
            assign[t] = a
        obs[a, nobs[a]] = i
        nobs[a] += 1
        if nobs[a] % refit_every == 0:
            _fit_forest_nb(Xb, n_bins, max_bins, R, a, obs[a], nobs[a], max_depth, min_leaf,
                           rng, cnt, H, HS, node_c, node_s, wl, can, cl, sl, best, bpos,
                           tot_c, tot_s, feat[a], thr[a], val[a])
            fitted[a] = True
        _queue_step_nb(Q, alpha, constrained, a)
    return total


@njit(parallel=True, cache=True)
def _noncontextual_runs(R, orders, alpha, constrained, eta, learned, states, assign, queues):
    runs = orders.shape[0]
    rewards = np.zeros(runs, dtype=np.int64)
    counts = np.zeros((runs, R.shape[1]), dtype=np.int64)
    trace = assign.shape[1] > 0
    for k in prange(runs):
        rewards[k] = _noncontextual_run(R, orders[k], alpha, constrained, eta, learned,
                                        states[k], assign[k], queues[k], counts[k], trace)
    return rewards, counts


@njit(parallel=True, cache=True)
def _logistic_runs(Xd, R, orders, alpha, constrained, eta, thompson, kappa, gamma,
                   w_min, w_max, states, assign, queues):
    runs = orders.shape[0]
    rewards = np.zeros(runs, dtype=np.int64)
    counts = np.zeros((runs, R.shape[1]), dtype=np.int64)
    trace = assign.shape[1] > 0
    for k in prange(runs):
        rewards[k] = _logistic_run(Xd, R, orders[k], alpha, constrained, eta, thompson,
                                   kappa, gamma, w_min, w_max, states[k], assign[k],
                                   queues[k], counts[k], trace)
    return rewards, counts


@njit(parallel=True, cache=True)
def _tree_runs(Xb, n_bins, max_bins, R, orders, alpha, constrained, eta, thompson,
               n_trees, max_depth, min_leaf, refit_every, states, assign, queues):
    runs = orders.shape[0]
    rewards = np.zeros(runs, dtype=np.int64)
    counts = np.zeros((runs, R.shape[1]), dtype=np.int64)
    trace = assign.shape[1] > 0
    for k in prange(runs):
        rewards[k] = _tree_run(Xb, n_bins, max_bins, R, orders[k], alpha, constrained, eta,
                               thompson, n_trees, max_depth, min_leaf, refit_every,
                               states[k], assign[k], queues[k], counts[k], trace)
    return rewards, counts


def _fast_runs(X, R, orders, alpha, constrained, eta, policy, states, settings, traces):
    """Dispatch the compiled kernels of one online policy over all runs."""
    runs, T = orders.shape
    A = R.shape[1]
    assign = np.zeros((runs, T if traces else 0), dtype=np.int32)
    queues = np.zeros((runs, T if traces else 0, A))
    R = np.ascontiguousarray(R, dtype=np.uint8)
    s = settings
    if policy in ("random", "marginal"):
        rewards, counts = _noncontextual_runs(R, orders, alpha, constrained, eta,
                                              policy == "marginal", states, assign, queues)
    elif policy.startswith("logistic"):
        Xd = np.ascontiguousarray(np.column_stack([np.ones(T), X]))
        rewards, counts = _logistic_runs(Xd, R, orders, alpha, constrained, eta,
                                         policy.endswith("-ts"), float(s.kappa),
                                         float(s.gamma), float(s.w_min), float(s.w_max),
                                         states, assign, queues)
    else:
        Xb, n_bins, _ = _bin_contexts(X, s.max_bins)
        max_bins = int(n_bins.max()) if len(n_bins) else 1
        rewards, counts = _tree_runs(Xb, n_bins, max_bins, R, orders, alpha, constrained,
                                     eta, policy.endswith("-ts"), s.n_trees, s.max_depth,
                                     s.min_samples_leaf, s.refit_every, states, assign, queues)
    if not traces:
        assign = queues = None
    return rewards, counts, assign, queues


# --- offline unconstrained benchmark (Sec. 4) --------------------------------


def _logistic_map(Z, y, gamma, *, tol=1e-10, max_iter=100):
    """MAP of the Bayesian logistic model, prior N(0, I/gamma), by damped Newton.

    Minimises ``sum_t log(1 + e^{z_t}) - y_t z_t + gamma/2 ||theta||^2`` with
    ``z_t = theta^T Z_t``: the batch counterpart of the online Laplace model,
    on the same design (intercept first) and the same prior.
    """
    theta = np.zeros(Z.shape[1])

    def objective(th):
        z = Z @ th
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * gamma * th @ th)

    f = objective(theta)
    for _ in range(max_iter):
        p = 0.5 * (1.0 + np.tanh(0.5 * (Z @ theta)))
        grad = Z.T @ (p - y) + gamma * theta
        H = (Z * (p * (1.0 - p))[:, None]).T @ Z + gamma * np.eye(Z.shape[1])
        step = np.linalg.solve(H, grad)
        t = 1.0
        while True:
            f_new = objective(theta - t * step)
            if f_new <= f or t < 1e-10:
                break
            t *= 0.5
        theta = theta - t * step
        f = f_new
        if np.max(np.abs(t * step)) < tol:
            break
    return theta


@njit(parallel=True, cache=True)
def _offline_tree_runs(Xb, n_bins, max_bins, R, n_trees, max_depth, min_leaf, states):
    """Fast ``offline-tree``: per run and agent, one forest on all T tasks."""
    runs = states.shape[0]
    T, A = R.shape
    d = Xb.shape[1]
    choice = np.zeros((runs, T), dtype=np.int32)
    n_nodes = 2 ** (max_depth + 1) - 1
    n_int = 2 ** max_depth - 1
    for k in prange(runs):
        feat = np.full((n_trees, n_nodes), -1, dtype=np.int32)
        thr = np.zeros((n_trees, n_nodes), dtype=np.int32)
        val = np.zeros((n_trees, n_nodes))
        obs = np.arange(T).astype(np.int32)
        cnt = np.empty((T, n_trees), dtype=np.int32)
        H = np.empty((n_int, d * max_bins, n_trees), dtype=np.int32)
        HS = np.empty((n_int, d * max_bins, n_trees), dtype=np.int32)
        node_c = np.empty((n_nodes, n_trees), dtype=np.int64)
        node_s = np.empty((n_nodes, n_trees), dtype=np.int64)
        wl = np.empty((max(n_int // 2 + 1, 1), n_trees), dtype=np.int32)
        can = np.empty(n_trees, dtype=np.bool_)
        cl = np.empty(n_trees, dtype=np.int64)
        sl = np.empty(n_trees, dtype=np.int64)
        best_s = np.empty(n_trees)
        bpos = np.empty(n_trees, dtype=np.int64)
        tot_c = np.empty(n_trees, dtype=np.int64)
        tot_s = np.empty(n_trees, dtype=np.int64)
        best = np.full(T, -1.0)
        for a in range(A):
            _fit_forest_nb(Xb, n_bins, max_bins, R, a, obs, T, max_depth, min_leaf, states[k],
                           cnt, H, HS, node_c, node_s, wl, can, cl, sl, best_s, bpos,
                           tot_c, tot_s, feat, thr, val)
            for i in range(T):
                acc = 0.0
                for b in range(n_trees):
                    acc += _tree_predict_nb(feat[b], thr[b], val[b], Xb[i])
                acc /= n_trees
                if acc > best[i]:
                    best[i] = acc
                    choice[k, i] = a
    return choice


#: Bins per feature of the fast offline tree benchmark (the uint8 maximum).
OFFLINE_MAX_BINS = 255


def _offline_choices(X, R, policy, policy_seeds, engine, settings):
    """Optimistic offline unconstrained assignment (the paper, Sec. 4).

    Each agent's reward model is fitted on *all* T tasks with that agent's
    rewards (information no online policy has), and every task goes to
    ``argmax_a mu_hat_a(x)`` (lowest index on ties), with no capacities.

    - ``"offline-logistic"``: the MAP of the same Bayesian logistic model as
      the online policies (intercept, prior N(0, I/gamma), gamma = 1), found
      by Newton's method in batch (:func:`_logistic_map`).  It has no
      randomness, so every run gives the same assignment, on both engines.
    - ``"offline-tree"``: per agent a bootstrap ensemble of B = 20 depth-3
      trees with min leaf 10, fitted on all T tasks; greedy ensemble mean.
      The bootstraps are redrawn in every run from the run's policy seed.
      ``engine="reference"`` grows scikit-learn trees, ``"fast"`` the binned
      trees of the fast engine with :data:`OFFLINE_MAX_BINS` (255) bins per
      feature: being scored in-sample, this benchmark rewards fine thresholds
      more than the online policies do, and with the online default of 64
      bins it came out about 0.004 above the reference on a 300-task stream.

    Returns ``choice`` (runs x T): the agent given each task, indexed by task.
    """
    runs = len(policy_seeds)
    T, A = R.shape
    if policy == "offline-logistic":
        Z = np.column_stack([np.ones(T), X])
        scores = np.column_stack([Z @ _logistic_map(Z, R[:, a].astype(float), settings.gamma)
                                  for a in range(A)])
        # sigma is increasing, so argmax over theta^T z is argmax over mu_hat
        return np.repeat(np.argmax(scores, axis=1)[None, :].astype(np.int32), runs, axis=0)
    if engine == "fast":
        # The benchmark is scored on the data it was fitted on, so threshold
        # resolution shows directly in its error: bin as finely as uint8 allows.
        Xb, n_bins, _ = _bin_contexts(X, OFFLINE_MAX_BINS)
        max_bins = int(n_bins.max()) if len(n_bins) else 1
        return _offline_tree_runs(Xb, n_bins, max_bins, np.ascontiguousarray(R, dtype=np.uint8),
                                  settings.n_trees, settings.max_depth,
                                  settings.min_samples_leaf, _rng_states(policy_seeds))
    choice = np.zeros((runs, T), dtype=np.int32)
    for k in range(runs):
        rng = np.random.default_rng(policy_seeds[k])
        mu = np.column_stack([BootstrapTrees(settings).fit(X, R[:, a], rng).predict_batch(X)
                              for a in range(A)])
        choice[k] = np.argmax(mu, axis=1)
    return choice


def _offline_runs(X, R, orders, policy, policy_seeds, engine, settings):
    """Rewards, agent counts and per-step assignments of the offline benchmark."""
    T, A = R.shape
    choice = _offline_choices(X, R, policy, policy_seeds, engine, settings)
    rewards = R[np.arange(T)[None, :], choice].sum(axis=1).astype(np.int64)
    counts = np.stack([np.bincount(c, minlength=A) for c in choice]).astype(np.int64)
    assign = np.take_along_axis(choice, orders, axis=1)
    return rewards, counts, assign


# --- benchmark -----------------------------------------------------------------


#: Capacities of agent 1 in the paper's two-agent experiments (Sec. 4).
PAPER_CAPACITY_GRID = (0.2, 0.4, 0.5, 0.6, 0.8)


def benchmark_engines(*, T=5000, d=12, fast_runs=20, reference_runs=1, reference_T=None,
                      policies=("random", "marginal") + CONTEXTUAL_POLICIES, seed=0,
                      grid=True, grid_T=21000, grid_d=11, grid_runs=100, out=print):
    """Time both engines on a synthetic stream and the paper's largest grid.

    For each policy: microseconds per decision = time / (runs x T) on a
    :func:`synthetic_stream` with two agents at capacities (0.5, 0.5), both
    as wall-clock time and as CPU time of the process (all threads).  Two
    speed-ups are printed: of wall time (the fast engine using every core,
    the reference engine one) and of CPU time (work per decision, and less
    disturbed by other load on the machine).  The fast engine is first called once on a tiny stream, so
    compilation (or loading the compiled cache) is never timed.  The
    reference engine may be timed on fewer runs or a shorter prefix of the
    stream (``reference_runs``, ``reference_T``).

    With ``grid=True`` it then times the paper's full grid for its largest
    task shape (T = 21,000, d = 11 like Cardio; synthetic data here): 100
    runs x 5 capacities x (4 contextual policies + random).  With
    ``grid_runs`` below 100 only that many runs are simulated per grid point
    and the printed total is scaled to 100 runs (runs are independent, so
    time is linear in runs); the output says so.

    Returns a dict with the per-policy figures and the grid times.
    """
    import time

    import numba

    def clocks():
        return time.perf_counter(), time.process_time()

    reference_T = T if reference_T is None else min(int(reference_T), T)
    out(f"capassign bench: synthetic stream, A=2 agents, capacities (0.5, 0.5), eta=0.5, "
        f"d={d}; numba threads={numba.get_num_threads()} (cpu_count={os.cpu_count()})")
    w0, _ = clocks()
    Xw, Rw, _ = synthetic_stream(60, d, seed=seed)
    for policy in policies:
        simulate(Xw, Rw, [0.5, 0.5], policy, runs=2, seed=seed)
    out(f"compile / cache load of the fast kernels: {clocks()[0] - w0:.1f} s (not counted)")
    X, R, _ = synthetic_stream(T, d, seed=seed)
    out(f"fast engine: {fast_runs} runs x {T} decisions (parallel over runs); "
        f"reference engine: {reference_runs} run(s) x {reference_T} decisions")
    header = (f"{'policy':<17}{'fast us/dec':>12}{'(cpu)':>9}{'reference us/dec':>18}"
              f"{'(cpu)':>9}{'speed-up wall':>15}{'(cpu)':>8}")
    out(header)
    out("-" * len(header))
    rows = {}
    for policy in policies:
        w0, c0 = clocks()
        simulate(X, R, [0.5, 0.5], policy, runs=fast_runs, seed=seed)
        w1, c1 = clocks()
        fast = ((w1 - w0) / (fast_runs * T) * 1e6, (c1 - c0) / (fast_runs * T) * 1e6)
        simulate(X[:reference_T], R[:reference_T], [0.5, 0.5], policy, runs=reference_runs,
                 seed=seed, engine="reference")
        w2, c2 = clocks()
        n_ref = reference_runs * reference_T
        ref = ((w2 - w1) / n_ref * 1e6, (c2 - c1) / n_ref * 1e6)
        rows[policy] = dict(fast_us=fast[0], fast_cpu_us=fast[1], reference_us=ref[0],
                            reference_cpu_us=ref[1], speedup=ref[0] / fast[0],
                            speedup_cpu=ref[1] / fast[1])
        out(f"{policy:<17}{fast[0]:>12.3f}{fast[1]:>9.3f}{ref[0]:>18.1f}{ref[1]:>9.1f}"
            f"{ref[0] / fast[0]:>14.0f}x{ref[1] / fast[1]:>7.0f}x")
    if reference_T < T:
        out(f"note: the reference engine ran on the first {reference_T} of {T} tasks; its "
            f"tree refits cost more per decision on longer streams, so the tree speed-ups "
            f"above understate the ratio at T={T}.")
    result = dict(policies=rows, T=T, d=d, fast_runs=fast_runs,
                  reference_runs=reference_runs, reference_T=reference_T)
    if grid:
        Xg, Rg, _ = synthetic_stream(grid_T, grid_d, seed=seed)
        grid_policies = CONTEXTUAL_POLICIES + ("random",)
        per_policy = {p: 0.0 for p in grid_policies}
        w0, c0 = clocks()
        for c in PAPER_CAPACITY_GRID:
            for policy in grid_policies:
                t0 = time.perf_counter()
                simulate(Xg, Rg, [c, 1.0 - c], policy, runs=grid_runs, seed=seed)
                per_policy[policy] += time.perf_counter() - t0
        w1, c1 = clocks()
        scale = 100 / grid_runs
        n_sim = len(PAPER_CAPACITY_GRID) * len(grid_policies)
        parts = ", ".join(f"{p} {s * scale:.1f} s" for p, s in per_policy.items())
        how = ("measured" if grid_runs == 100 else
               f"scaled from {grid_runs} runs per grid point to 100")
        out(f"full grid T={grid_T}, d={grid_d}: 100 runs x {len(PAPER_CAPACITY_GRID)} "
            f"capacities x (4 contextual + random) = {n_sim} simulations: "
            f"wall {(w1 - w0) * scale:.1f} s, cpu {(c1 - c0) * scale:.1f} s ({how}; {parts})")
        result.update(grid_wall_seconds=(w1 - w0) * scale, grid_cpu_seconds=(c1 - c0) * scale,
                      grid_runs=grid_runs, grid_per_policy={p: s * scale for p, s in
                                                            per_policy.items()})
    return result


# =============================================================================
# 6. Tasks
# =============================================================================


# =============================================================================
# 7. Experiments
# =============================================================================


# =============================================================================
# 8. Plotting
# =============================================================================


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
    """Drop run-dependent metadata (timings, papermill bookkeeping).

    The executed notebooks are committed, so everything that changes from run
    to run without changing a result is removed: durations, timestamps and the
    papermill environment record.  Outputs are left untouched.
    """
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    return nb


def reproduce(chapters=(), *, parameters=None, kernel_name="python3", log_output=False):
    """Re-execute chapters through papermill and write the executed notebooks.

    Each chapter source ``book/chapters/NAME.md`` (a jupytext MyST notebook) is
    converted to a notebook, executed by papermill with the defaults of its
    ``parameters`` cell (the paper's settings) unless ``parameters`` overrides
    them, cleaned of run-dependent metadata, and written to
    ``book/executed/NAME.ipynb``.  A failing cell raises and nothing is written
    for that chapter.
    """
    import jupytext
    import nbformat
    import papermill
    import tempfile

    names = _resolve_chapters(chapters)
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        src = CHAPTER_DIR / f"{name}.md"
        nb = jupytext.read(src)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / f"{name}.ipynb"
            done = Path(tmp) / f"{name}.out.ipynb"
            nbformat.write(nb, raw)
            papermill.execute_notebook(
                str(raw), str(done), parameters=parameters or {},
                kernel_name=kernel_name, cwd=str(EXECUTED_DIR),
                progress_bar=sys.stderr.isatty(), log_output=log_output)
            out = _clean_executed(nbformat.read(done, as_version=4))
        target = EXECUTED_DIR / f"{name}.ipynb"
        nbformat.write(out, target)
        written.append(target)
        print(f"executed {src.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
    return written


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
    _add_bench_parser(sub)
    return parser


def _add_bench_parser(sub):
    p = sub.add_parser("bench", help="time the fast and reference engines",
                       description="Microseconds per decision of every online policy on both "
                                   "engines (synthetic stream), the speed-up, and the time of the "
                                   "paper's full grid for its largest task shape.")
    p.add_argument("--T", type=int, default=5000, help="tasks in the stream (default 5000)")
    p.add_argument("--d", type=int, default=12, help="context features (default 12)")
    p.add_argument("--fast-runs", type=int, default=20, help="runs timed on the fast engine")
    p.add_argument("--reference-runs", type=int, default=1,
                   help="runs timed on the reference engine")
    p.add_argument("--reference-T", type=int, default=None,
                   help="time the reference engine on the first N tasks only")
    p.add_argument("--grid-runs", type=int, default=100, help="runs per grid point (default 100)")
    p.add_argument("--no-grid", action="store_true", help="skip the full-grid timing")
    p.add_argument("--quick", action="store_true",
                   help="a short check: T=2000, reference on 1000 tasks, grid with 2 runs "
                        "per point (scaled to 100)")
    p.add_argument("--policies", default=None,
                   help="comma-separated online policies to time (default: all six)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args):
    T, ref_T, grid_runs = args.T, args.reference_T, args.grid_runs
    if args.quick:
        T, ref_T, grid_runs = 2000, 1000, 2
    kwargs = {}
    if args.policies:
        kwargs["policies"] = tuple(p.strip() for p in args.policies.split(","))
        bad = [p for p in kwargs["policies"] if p not in POLICIES or p.startswith("offline")]
        if bad:
            raise ValueError(f"--policies: unknown online policy {bad[0]!r}")
    for name, v in (("--T", T), ("--d", args.d), ("--fast-runs", args.fast_runs),
                    ("--reference-runs", args.reference_runs), ("--grid-runs", grid_runs)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    benchmark_engines(T=T, d=args.d, fast_runs=args.fast_runs, reference_runs=args.reference_runs,
                      reference_T=ref_T, seed=args.seed, grid=not args.no_grid,
                      grid_runs=grid_runs, **kwargs)


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
