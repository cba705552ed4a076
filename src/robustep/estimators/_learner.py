"""How the sparse estimators learn the kernel, the likelihood's parameters and Z.

Two learners behind one interface, ``learner.learn(problem) -> Learned``:

* the **full-batch** learner runs the estimator's evidence search
  (:func:`robustep.estimators._search.maximise_evidence`: L-BFGS-B, each evaluation a
  full O(n m²) EP run), which the problem supplies as ``problem.search``;
* the **stochastic** learner, :class:`StochasticLearner`, runs stochastic power EP
  (:func:`robustep.ep.stochastic.fit_stochastic_ep`; docs/derivations/stochastic_ep.md):
  minibatch site updates and Adam steps on the minibatch gradient of the power-EP energy
  in (log θ, log ψ, Z) (Hernández-Lobato & Hernández-Lobato 2016), with a held-out
  split for early stopping (as scikit-learn's ``SGDClassifier`` and ``MLPClassifier``:
  ``validation_fraction``, ``early_stopping``, ``n_iter_no_change``, ``tol``).

The estimators resolve their ``learner`` parameter with :func:`resolve` and describe the
fit as a :class:`LearningProblem`; what either learner returns is a :class:`Learned`.
After learning, the estimator runs one EP fit on all n points at the learned (θ, ψ, Z)
for its posterior, evidence and leave-one-out diagnostics, as after the full-batch
search.  :func:`continue_stream` is ``partial_fit``'s step: one pass of stochastic EP over
a new batch, continuing the sites, parameters and Adam state of the previous call.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval

from robustep._config import get_config
from robustep._warnings import warn
from robustep.estimators._search import MOVE_TOLERANCE, SearchResult, logger
from robustep.posterior._dask import is_dask_array

__all__ = [
    "FULL_BATCH",
    "FullBatchLearner",
    "STOCHASTIC",
    "InducingPosterior",
    "Learned",
    "LearnerResult",
    "LearningProblem",
    "StochasticLearner",
    "check_batch_in_memory",
    "continue_stream",
    "has_partial_fit",
    "resolve",
]

FULL_BATCH, STOCHASTIC = "full_batch", "stochastic"
#: the ``learner`` values the estimators accept besides a StochasticLearner
LEARNER_NAMES = ("auto", FULL_BATCH, STOCHASTIC)


class StochasticLearner(BaseEstimator):
    """Stochastic power EP as the learner of a sparse GP estimator.

    Pass it as ``learner=`` to :class:`~robustep.GPClassifier` (two classes, one-vs-rest,
    or the sparse multinomial model) or :class:`~robustep.GPRegressor` /
    :class:`~robustep.StudentTGPRegressor` together with ``inducing_points``.  With more
    than two classes and ``multi_class="multinomial"`` the learner runs
    :func:`robustep.ep.stochastic_multiclass.fit_stochastic_multiclass_ep` (pairwise probit
    factors, one tied site per class; ``tied_sites=True`` only; its power defaults to the
    model's α = 1; docs/derivations/stochastic_multiclass.md) and the held-out score is
    the multinomial probit's log loss of its q.

    Each epoch is a random pass over the training split in minibatches: each minibatch
    updates its sites by damped power EP and takes one Adam step along the minibatch
    gradient of the power-EP energy in the kernel's log hyperparameters, the likelihood's
    free log parameters and (``optimize_inducing``) the inducing inputs
    (docs/derivations/stochastic_ep.md).  A step costs O(b m² + m³) for a batch of b
    points, an epoch O(n m²), and memory is O(m²) with tied sites, whatever n.  After
    learning, the estimator runs one EP fit on all n points at the learned values (its
    posterior, ``log_marginal_likelihood_value_`` and leave-one-out diagnostics), as after
    the full-batch search.

    Parameters
    ----------
    batch_size : int >= 1, default 1000
        Points per minibatch (at most the training split's size).
    max_epochs : int >= 1, default 100
        Passes over the training split at most.
    learning_rate : float > 0, default 0.05
        Adam's step in log θ, log ψ and Z, decayed as ``lr / sqrt(1 + t / (5 · steps per
        epoch))`` over the steps t.  The default and ``damping``'s are the settings of the
        learning benchmark (docs/performance.md, *Learning at scale*: tuned on a proxy
        problem, every variant within the noise of the others).
    tied_sites : bool, default True
        True: one average site (stochastic EP, Li, Hernández-Lobato & Turner 2015),
        O(m²) memory; False: one site per training point (O(n) memory, one O(n m²)
        refresh per epoch).  ``partial_fit`` needs tied sites.
    validation_fraction : float in [0, 1), default 0.1
        Share of the training points held out (drawn with the estimator's
        ``random_state``) to score each epoch: the mean held-out log predictive density
        (``history_``'s ``validation_log_loss`` for classifiers, its negative, and
        ``validation_log_density`` for regressors).  0: no held-out split.
    early_stopping : bool, default True
        Stop when the monitored score has not improved by more than ``tol`` for
        ``n_iter_no_change`` epochs: the held-out score when ``validation_fraction > 0``
        (the final state is then the best held-out epoch), else the epoch's mean energy
        estimate per point.  False: run ``max_epochs`` (or ``max_time``).
    n_iter_no_change : int >= 1, default 5
        Epochs without improvement before early stopping.
    tol : float >= 0, default 1e-4
        Improvement of the monitored score (per point) that counts.
    max_time : float > 0 or None, default None
        Seconds for the learning (the final EP fit is not included); the epoch running
        when it passes stops after its current minibatch.
    power : float in (0, 1] or None, default None
        The power α of the stochastic power EP; None: the estimator's ``inducing_power``
        as resolved for the fit (``inducing_power_``: 0.5 for the default "auto" with
        optimised inducing inputs, else 1), the same model as the full-batch search's.
    damping : float > 0 or None, default None
        Weight of a minibatch's new sites: tied sites move by ``min(1, damping b / n)``
        towards the minibatch's average site (> 1 follows the parameters faster); per-point
        sites take the share ``damping`` in (0, 1] of their new value.  None: 2.0 for tied
        sites (the benchmarked setting), 0.5 for per-point sites.
    warmup_epochs : int >= 0, default 1
        Epochs of site updates at the starting hyperparameters and inducing inputs before
        the learning starts (not in ``history_``; their time counts in ``elapsed`` and
        ``max_time``).  Without them Adam moves the hyperparameters while the sites still
        lag: on the n = 10⁵ benchmark problem 3 of 8 minibatch orders then drifted along
        the amplitude/length-scale ridge (σ² up to 5.6e3, test log loss 0.375–0.386),
        against none of 8 with one warm-up epoch (log loss 0.326–0.332;
        ``python benchmarks/learning_seeds.py --seeds 0-7 --variants no-warmup warmup
        --epochs 25``).
    callback : callable or None, default None
        Called after every epoch (after its held-out score) as ``callback(state,
        record)``: ``state`` the learner's current
        :class:`~robustep.ep.stochastic.StochasticEPResult` (``state.predict(X)`` gives the
        latent predictive mean and variance of its q(u)), ``record`` the epoch's
        ``history_`` entry.  Returning True stops the learner (``optimizer_result_.stopped``
        is then "callback").  Its time counts in ``elapsed`` and ``max_time``.

    Notes
    -----
    Adam moves freely in the log parameters and Z: the kernel's bounds and the
    regressors' ``likelihood_bounds`` are not enforced, and ``n_restarts_optimizer`` does
    not apply (one run from the starting values).

    Dask input: an estimator's ``fit`` with a ``dask.array`` X chunked by rows (tied sites
    only) has the learner read X block by block (``robustep.ep._minibatches``: an epoch
    visits the blocks in a random order, computing each once and the next one
    meanwhile), never the whole array at once; its held-out rows are at most
    ``robustep.get_config().stochastic_validation_max_rows``, drawn from a random subset
    of the blocks (at least a share ``validation_fraction`` of them) and computed into
    memory once.  Batches then mix the rows of one block (two at a block boundary): rows
    stored in a meaningful order should be shuffled before chunking.

    Measured on an idle 2-core machine, probit classification in 2-d, m = 64 optimised
    inducing inputs, the defaults (``python benchmarks/learning.py --parts estimators
    --full``): a whole ``GPClassifier`` fit (learning and the final EP fit) takes 2.5 s at
    n = 10⁴, 4.5 s at 2·10⁴ and 36 s at 10⁵, against 55 s and 111 s with the full-batch
    search at 10⁴ and 2·10⁴, at equal test log loss (docs/guide/large-data.md, "Learning
    at scale").
    """

    _parameter_constraints: dict = {
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "tied_sites": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0.0, 1.0, closed="left")],
        "early_stopping": ["boolean"],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0.0, None, closed="left")],
        "max_time": [Interval(numbers.Real, 0.0, None, closed="neither"), None],
        "power": [Interval(numbers.Real, 0.0, 1.0, closed="right"), None],
        "damping": [Interval(numbers.Real, 0.0, None, closed="neither"), None],
        "warmup_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
        "callback": [callable, None],
    }

    def __init__(
        self,
        batch_size=1000,
        max_epochs=100,
        learning_rate=0.05,
        *,
        tied_sites=True,
        validation_fraction=0.1,
        early_stopping=True,
        n_iter_no_change=5,
        tol=1e-4,
        max_time=None,
        power=None,
        damping=None,
        warmup_epochs=1,
        callback=None,
    ):
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.learning_rate = learning_rate
        self.tied_sites = tied_sites
        self.validation_fraction = validation_fraction
        self.early_stopping = early_stopping
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.max_time = max_time
        self.power = power
        self.damping = damping
        self.warmup_epochs = warmup_epochs
        self.callback = callback

    name = STOCHASTIC

    def check(self):
        """Raise ValueError (scikit-learn's InvalidParameterError) for a bad parameter."""
        self._validate_params()
        if not self.tied_sites and self.damping is not None and self.damping > 1:
            raise ValueError(
                f"damping must be in (0, 1] with tied_sites=False (per-point sites), got "
                f"{self.damping!r}"
            )
        return self

    def learn(self, problem: LearningProblem) -> Learned:
        """Learn the problem's parameters by stochastic power EP; returns :class:`Learned`."""
        self.check()
        return _learn_stochastic(self, problem)


class FullBatchLearner:
    """The estimator's evidence search over full EP runs (``problem.search``)."""

    name = FULL_BATCH

    def learn(self, problem):
        return problem.search()


def resolve(learner, *, n, sparse, optimizer, dask=False):
    """The learner object an estimator's ``learner`` parameter gives for this fit.

    learner : "auto", "full_batch", "stochastic" or a :class:`StochasticLearner`;
    n : training points; sparse : ``inducing_points`` is set; optimizer : the estimator's
    ``optimizer``; dask : X is a dask.array.  "auto" gives the stochastic learner when the
    model is sparse, the optimizer is the built-in one ("fmin_l_bfgs_b": a callable
    optimizer asks for the full-batch search) and n >= ``stochastic_learner_min_n`` of
    :func:`robustep.get_config`, for in-memory and Dask X alike; the full-batch search
    otherwise.  With a Dask X the stochastic learner needs tied sites.
    """
    if isinstance(learner, StochasticLearner):
        chosen = learner.check()
    elif learner == STOCHASTIC:
        chosen = StochasticLearner()
    elif learner == FULL_BATCH:
        return FullBatchLearner()
    elif learner == "auto":
        min_n = get_config().stochastic_learner_min_n
        auto = sparse and optimizer == "fmin_l_bfgs_b"
        if auto and min_n is not None and n >= min_n:
            return StochasticLearner()
        return FullBatchLearner()
    else:
        raise ValueError(
            f"learner must be 'auto', 'full_batch', 'stochastic' or a "
            f"robustep.StochasticLearner, got {learner!r}"
        )
    if not sparse:
        raise ValueError(
            "the stochastic learner learns the sparse (inducing-point) model: pass "
            "inducing_points (e.g. inducing_points=256), or learner='full_batch' for the "
            "dense model"
        )
    if dask:
        _check_dask_sites(chosen)
    if optimizer is None:
        raise ValueError(
            "the stochastic learner learns the kernel hyperparameters and inducing inputs, "
            "and optimizer=None keeps them fixed: pass learner='full_batch' (or 'auto') "
            "with optimizer=None, or optimizer='fmin_l_bfgs_b' to learn them"
        )
    return chosen


def _check_dask_sites(learner):
    """A Dask X is read block by block: tied sites only (a ValueError says so)."""
    if not learner.tied_sites:
        raise ValueError(
            "per-point sites (StochasticLearner(tied_sites=False)) keep one site per row and "
            "need every row in memory each epoch; with a Dask X use tied_sites=True (the "
            "default), or compute X into memory"
        )


def check_batch_in_memory(X):
    """``partial_fit``'s batch must be in memory: a ValueError for a Dask array."""
    if is_dask_array(X):
        raise ValueError(
            "partial_fit takes in-memory batches: compute each Dask batch (e.g. "
            "X.blocks[i].compute()) before passing it, or pass the whole Dask array to fit, "
            "whose stochastic learner reads it block by block"
        )


# ----------------------------------------------------------------------- the problem
@dataclasses.dataclass
class LearningProblem:
    """What a learner needs to know about a sparse fit.

    kernel : the starting kernel; X : (n, d) inputs; y : (n,) targets (±1 labels, or
    standardised real targets); likelihood : the starting likelihood; Z : (m, d) starting
    inducing inputs; alpha : the estimator's resolved inducing power (a number in
    (0, 1], never "auto": :func:`robustep.estimators._sparse.inducing_power_of`); jitter :
    the fixed K_mm jitter; learn_kernel, learn_inducing : bool; learn_likelihood : names of the
    likelihood's free parameters; random_state : the estimator's; search : the
    full-batch search, ``() -> Learned``; classifier : whether the held-out score is
    reported as a log loss; score_offset : added to the held-out log density (the
    regressor's ``-log y_std``, for target units); n_classes : None for a scalar
    likelihood, or c > 2 for the multi-class model (y then holds labels 0 .. c-1,
    likelihood is None, and the stochastic learner runs
    :func:`robustep.ep.stochastic_multiclass.fit_stochastic_multiclass_ep`).
    """

    kernel: Any
    X: np.ndarray
    y: np.ndarray
    likelihood: Any
    Z: np.ndarray
    alpha: float
    jitter: float
    learn_kernel: bool
    learn_inducing: bool
    learn_likelihood: tuple
    random_state: Any
    search: Callable[[], Learned] | None = None
    classifier: bool = True
    score_offset: float = 0.0
    n_classes: int | None = None


@dataclasses.dataclass
class Learned:
    """What a learner leaves: the learned kernel, likelihood and inducing inputs Z (m, d),
    its ``optimizer_result_`` (``search``), a warm start for the final EP fit (``warm``,
    None for the stochastic learner), which learner ran (``learner``) and, for the
    stochastic learner, ``history`` (one dict per epoch), ``n_epochs`` and its
    :class:`~robustep.ep.stochastic.StochasticEPResult` (``state``)."""

    kernel: Any
    likelihood: Any
    Z: np.ndarray
    search: Any
    warm: Any = None
    learner: str = FULL_BATCH
    history: list | None = None
    n_epochs: int | None = None
    state: Any = None


@dataclasses.dataclass
class LearnerResult(SearchResult):
    """The stochastic learner's ``optimizer_result_``: a
    :class:`~robustep.estimators._search.SearchResult` (``x`` the learned coordinates
    [log θ, the likelihood's free log parameters, vec(Z) when learned], ``log_evidence``
    the chosen epoch's mean energy estimate, ``n_evaluations`` the minibatch steps) and

    stopped : why it stopped: "converged" (the energy estimate stalled), "early_stopping"
        (the held-out score stalled), "max_epochs", "max_time", "callback" (the
        learner's callback returned True) or "interrupted" (KeyboardInterrupt: the last
        finished epoch is kept).
    n_epochs : epochs run; best_epoch : the epoch whose state was kept; n_train : the
        points the learner trained on (its energy estimates sum over them).
    """

    stopped: str = ""
    n_epochs: int = 0
    best_epoch: int = 0
    n_train: int = 0


def fitted_attributes(learned):
    """The estimators' learner attributes by name: ``learner_`` ("full_batch" or
    "stochastic"), and the stochastic learner's ``history_`` and ``n_epochs_`` (None for
    the full-batch search and fits without learning)."""
    if learned is None or learned.learner != STOCHASTIC:
        return {"learner_": FULL_BATCH, "history_": None, "n_epochs_": None}
    return {
        "learner_": STOCHASTIC,
        "history_": [dict(record) for record in learned.history],
        "n_epochs_": int(learned.n_epochs),
    }


# ------------------------------------------------------------------- the posterior
class InducingPosterior:
    """q(u) = N(mean, cov) over the inducing values as a posterior with the FITC
    predictive ``predict(K_star_m (k, m), k_star_diag (k,)) -> (mean (k,), var (k,))``
    (eq. S10 of docs/derivations/sparse.md): ``a = K_mm⁻¹ k_*``, mean ``aᵀ m_u``,
    variance ``k_** − k_*ᵀ K_mm⁻¹ k_* + aᵀ S_u a``.  Built from a
    :class:`~robustep.ep.stochastic.StochasticEPResult` (``partial_fit``'s posterior)."""

    def __init__(self, result):
        from scipy.linalg import cho_factor

        Z = np.asarray(result.inducing_inputs, dtype=float)
        K = np.asarray(result.kernel(Z), dtype=float) + result.jitter * np.eye(Z.shape[0])
        self._chol = cho_factor(K, lower=True)
        self.u_mean = np.asarray(result.mean, dtype=float)
        self.u_cov = np.asarray(result.cov, dtype=float)

    def predict(self, K_star_m, k_star_diag):
        from scipy.linalg import cho_solve

        K_star_m = np.asarray(K_star_m, dtype=float)
        A = cho_solve(self._chol, K_star_m.T).T  # rows a_i = K_mm⁻¹ k_i
        mean = A @ self.u_mean
        var = (
            np.asarray(k_star_diag, dtype=float)
            - np.einsum("ij,ij->i", A, K_star_m)
            + np.einsum("ij,ij->i", A @ self.u_cov, A)
        )
        return mean, np.maximum(var, 0.0)


# ------------------------------------------------------------------ the stochastic run
def _split(n, fraction, rng):
    """(training rows, held-out rows) of n points; no held-out rows for fraction 0."""
    n_val = int(round(fraction * n)) if fraction > 0 else 0
    n_val = min(max(n_val, 1 if fraction > 0 else 0), n - 1)
    order = rng.permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _dask_split(X, y, fraction, rng):
    """(X_train, y_train, X_val, y_val) of a Dask X (n, d) chunked by rows and in-memory
    y (n,), without a pass over X.

    The held-out rows: ``min(round(fraction n), stochastic_validation_max_rows)`` (at least
    one, at most n − 1) drawn uniformly from the rows of a random subset of the row
    blocks: the fewest blocks, in a random order, that hold that many rows, and at least
    ``ceil(fraction · blocks)`` of them.  Only those blocks are computed, once, and only
    the held-out rows are kept (X_val (k, d) and y_val (k,) in memory).  X_train is X
    without those rows, still a Dask array with one chunk per block (never computed
    here); y_train (n − k,) in memory.  fraction 0: no held-out rows (X_val None).
    """
    import dask
    import dask.array as da

    y = np.asarray(y)
    n = int(X.shape[0])
    if fraction <= 0 or n < 2:
        return X, y, None, None
    n_val = int(round(fraction * n))
    cap = get_config().stochastic_validation_max_rows
    if cap is not None:
        n_val = min(n_val, int(cap))
    n_val = min(max(n_val, 1), n - 1)
    rows = np.array([int(c) for c in X.chunks[0]])
    offsets = np.concatenate([[0], np.cumsum(rows)])
    order = rng.permutation(rows.size)
    k = int(np.searchsorted(np.cumsum(rows[order]), n_val)) + 1
    k = min(max(k, int(np.ceil(fraction * rows.size))), rows.size)
    chosen = np.sort(order[:k])
    candidates = np.concatenate([np.arange(offsets[j], offsets[j + 1]) for j in chosen])
    val = np.sort(rng.choice(candidates, n_val, replace=False))
    held, train_parts = [], []
    for j in range(rows.size):
        block = X.blocks[j]
        if j not in chosen:
            train_parts.append(block)
            continue
        local = val[(val >= offsets[j]) & (val < offsets[j + 1])] - offsets[j]
        keep = np.setdiff1d(np.arange(rows[j]), local)
        held.append(block[local])
        if keep.size:
            train_parts.append(block[keep])
    X_val = np.concatenate(dask.compute(*held), axis=0).astype(float, copy=False)
    mask = np.ones(n, dtype=bool)
    mask[val] = False
    return da.concatenate(train_parts, axis=0), y[mask], X_val, y[val]


def _coordinates(kernel, likelihood, Z, free, learn_inducing):
    """[log θ, free log likelihood parameters, vec(Z) when learned]."""
    lp = [np.log(float(getattr(likelihood, name))) for name in free]
    return np.concatenate([kernel.theta, lp, Z.ravel() if learn_inducing else []])


class _Monitor:
    """The per-epoch callback of the stochastic run: the held-out score, the history
    record, the progress line, the kept state and the early-stopping rule."""

    def __init__(self, learner, problem, X_val, y_val, n_train, started):
        self.learner, self.problem = learner, problem
        self.X_val, self.y_val = X_val, y_val
        self.n_train = n_train
        self.started = started
        self.history = []
        self.last = self.best = None  # (StochasticEPResult, epoch)
        self.best_score = -np.inf
        self.since_best = 0
        self.stopped = None

    def score(self, result):
        """Mean held-out log predictive density (target units), or None."""
        if self.X_val is None or self.X_val.shape[0] == 0:
            return None
        if self.problem.n_classes is not None:
            p = result.predict_proba(self.X_val)[np.arange(self.y_val.size), self.y_val]
            return float(np.mean(np.log(np.maximum(p, np.finfo(float).tiny))))
        mean, var = result.predict(self.X_val)
        lp = result.likelihood.predictive_log_density(self.y_val, mean, var)
        return float(np.mean(lp)) + self.problem.score_offset

    def __call__(self, result, record):
        learner = self.learner
        score = self.score(result)
        entry = {
            "epoch": len(self.history) + 1,
            "steps": int(record["step"]),
            "energy": float(record["energy"]),
            "elapsed": time.perf_counter() - self.started,
        }
        if score is not None:
            key = "validation_log_loss" if self.problem.classifier else "validation_log_density"
            entry[key] = -score if self.problem.classifier else score
        self.history.append(entry)
        self.last = (result, entry["epoch"])
        monitored = score if score is not None else entry["energy"] / self.n_train
        if not np.isfinite(monitored):
            monitored = -np.inf
        if monitored > self.best_score + learner.tol or self.best is None:
            self.since_best = 0
        else:
            self.since_best += 1
        if monitored > self.best_score or self.best is None:
            self.best_score = monitored
            self.best = self.last
        self._progress(entry, score)
        if learner.callback is not None and learner.callback(result, dict(entry)):
            self.stopped = "callback"
            return True
        if learner.early_stopping and self.since_best >= learner.n_iter_no_change:
            self.stopped = "early_stopping" if score is not None else "converged"
            return True
        return False

    def kept(self):
        """(result, epoch) the fit keeps: the best held-out epoch under early stopping."""
        if self.learner.early_stopping and self.X_val is not None and self.X_val.shape[0]:
            return self.best
        return self.last

    def _progress(self, entry, score):
        """One INFO line of the ``robustep.search`` logger per epoch (printed under an
        estimator's ``verbose=True``)."""
        if not logger.isEnabledFor(logging.INFO):
            return
        learner, elapsed = self.learner, entry["elapsed"]
        left = [(learner.max_epochs - entry["epoch"]) * elapsed / entry["epoch"]]
        if learner.max_time is not None:
            left.append(max(learner.max_time - elapsed, 0.0))
        held = ""
        if score is not None:
            held = (
                f", held-out log loss {-score:.4f}"
                if self.problem.classifier
                else f", held-out log density {score:.4f}"
            )
        logger.info(
            "stochastic learner: epoch %d/%d, %d steps, energy %.6g%s, %.1f s (at most "
            "%.0f s left)",
            entry["epoch"], learner.max_epochs, entry["steps"], entry["energy"], held,
            elapsed, min(left),
            extra={"epoch": entry["epoch"], "elapsed": elapsed},
        )  # fmt: skip


def _seeds(random_state):
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    return rng.randint(np.iinfo(np.int32).max, size=2)


def _site_damping(learner):
    """The damping handed to the sites (``damping=None``: 2.0 tied, 0.5 per point)."""
    if learner.damping is None:
        return 2.0 if learner.tied_sites else 0.5
    return float(learner.damping)


def _learn_stochastic(learner, problem):
    from robustep.ep.stochastic import fit_stochastic_ep
    from robustep.ep.stochastic_multiclass import fit_stochastic_multiclass_ep

    if problem.n_classes is not None and not learner.tied_sites:
        raise ValueError(
            "the multinomial model's stochastic learner has tied sites only (one average "
            "site per class, O(c m²) memory): pass StochasticLearner(tied_sites=True), or "
            "multi_class='one_vs_rest' for per-point sites"
        )

    n = problem.X.shape[0]
    split_seed, run_seed = _seeds(problem.random_state)
    fraction = float(learner.validation_fraction)
    if fraction > 0 and n < 2:
        fraction = 0.0
    split_rng = np.random.default_rng(split_seed)
    if is_dask_array(problem.X):
        _check_dask_sites(learner)
        X_train, y_train, X_val, y_val = _dask_split(problem.X, problem.y, fraction, split_rng)
    else:
        train, val = _split(n, fraction, split_rng)
        X_train, y_train = problem.X[train], problem.y[train]
        X_val = problem.X[val] if val.size else None
        y_val = problem.y[val] if val.size else None
    n_train = int(X_train.shape[0])
    started = time.perf_counter()
    monitor = _Monitor(learner, problem, X_val, y_val, n_train, started)
    alpha = problem.alpha if learner.power is None else float(learner.power)
    options = dict(
        power=alpha, batch_size=int(learner.batch_size), n_epochs=int(learner.max_epochs),
        learning_rate=float(learner.learning_rate), damping=_site_damping(learner),
        learn_kernel=problem.learn_kernel, learn_inducing=problem.learn_inducing,
        jitter=problem.jitter, random_state=np.random.default_rng(run_seed),
        callback=monitor, max_time=learner.max_time,
    )  # fmt: skip

    def learn(warmup=False):
        """One run of the learner; ``warmup``: site updates only, for the warm-up epochs."""
        chosen = dict(options)
        learn_likelihood = tuple(problem.learn_likelihood)
        if warmup:
            chosen.update(n_epochs=int(learner.warmup_epochs), learn_kernel=False,
                          learn_inducing=False, callback=None)  # fmt: skip
            learn_likelihood = False
        if problem.n_classes is not None:  # no likelihood parameters
            return fit_stochastic_multiclass_ep(
                problem.kernel, X_train, y_train, problem.n_classes, problem.Z, **chosen
            )
        return fit_stochastic_ep(
            problem.kernel, X_train, y_train, problem.likelihood, problem.Z,
            tied_sites=bool(learner.tied_sites), learn_likelihood=learn_likelihood, **chosen,
        )  # fmt: skip

    try:
        if learner.warmup_epochs:
            # the sites first settle at the starting values (the parameters stay)
            options["state"] = learn(warmup=True)
            if learner.max_time is not None:
                spent = time.perf_counter() - started
                options["max_time"] = max(float(learner.max_time) - spent, 1e-3)
        run = learn()
    except KeyboardInterrupt:
        if monitor.last is None:
            raise
        stopped = "interrupted"
        warn(
            f"the stochastic learner was interrupted during epoch {len(monitor.history) + 1}; "
            f"the fit keeps epoch {monitor.kept()[1]} (optimizer_result_.stopped is "
            "'interrupted')",
            UserWarning,
        )
    else:
        # the epoch that passes max_time ends early and is scored like the others
        stopped = monitor.stopped or ("max_time" if run.stopped == "max_time" else "max_epochs")
    result, epoch = monitor.kept()
    free, learn_Z = problem.learn_likelihood, problem.learn_inducing
    x0 = _coordinates(problem.kernel, problem.likelihood, problem.Z, free, learn_Z)
    # the multi-class run has no likelihood parameters (free is empty)
    likelihood = getattr(result, "likelihood", problem.likelihood)
    x = _coordinates(result.kernel, likelihood, result.inducing_inputs, free, learn_Z)
    n_epochs = len(monitor.history)
    search = LearnerResult(
        x=x,
        log_evidence=float(monitor.history[epoch - 1]["energy"]),
        state=None,
        success=True,
        n_evaluations=int(monitor.history[-1]["steps"]),
        n_failures=0,
        n_starts=1,
        moved=bool(np.max(np.abs(x - x0), initial=0.0) > MOVE_TOLERANCE),
        message=f"stochastic learner: {stopped} after {n_epochs} epochs",
        stopped=stopped,
        n_epochs=n_epochs,
        best_epoch=int(epoch),
        n_train=n_train,
    )
    return Learned(
        kernel=result.kernel, likelihood=likelihood, Z=np.array(result.inducing_inputs),
        search=search, learner=STOCHASTIC, history=list(monitor.history), n_epochs=n_epochs,
        state=result,
    )  # fmt: skip


# ----------------------------------------------------------------------- streaming
def has_partial_fit(estimator):
    """Whether ``estimator.partial_fit`` exists: with ``inducing_points`` only (the dense
    model has no incremental form), else an AttributeError that says so."""
    if getattr(estimator, "inducing_points", None) is None:
        raise AttributeError(
            f"{type(estimator).__name__}.partial_fit learns the sparse model: pass "
            "inducing_points (an int m or an (m, n_features) array)"
        )
    return True


def continue_stream(learner, problem, previous, n_seen):
    """``partial_fit``'s step: one pass of stochastic power EP (tied sites) over the batch
    ``problem.X``, continuing ``previous`` (a
    :class:`~robustep.ep.stochastic.StochasticEPResult`, or None for the first batch)
    whose average site stands for ``n_seen`` points (this batch included).

    Returns :class:`Learned` whose ``state`` is the run to continue next time; no
    held-out split and no early stopping (each call is one epoch over its batch).
    """
    from robustep.ep.stochastic import fit_stochastic_ep

    learner.check()
    if not learner.tied_sites:
        raise ValueError(
            "partial_fit needs tied sites (StochasticLearner(tied_sites=True)): per-point "
            "sites would grow with every batch"
        )
    alpha = problem.alpha if learner.power is None else float(learner.power)
    _, run_seed = _seeds(problem.random_state)
    rng = np.random.default_rng([run_seed, int(n_seen)])
    if previous is None:
        kernel, likelihood, Z = problem.kernel, problem.likelihood, problem.Z
    else:
        kernel, likelihood, Z = previous.kernel, previous.likelihood, previous.inducing_inputs
    run = fit_stochastic_ep(
        kernel, problem.X, problem.y, likelihood, Z, power=alpha,
        batch_size=int(learner.batch_size), n_epochs=1,
        learning_rate=float(learner.learning_rate), damping=_site_damping(learner),
        tied_sites=True, learn_kernel=problem.learn_kernel,
        learn_likelihood=tuple(problem.learn_likelihood), learn_inducing=problem.learn_inducing,
        jitter=problem.jitter, random_state=rng, max_time=learner.max_time,
        state=previous, n_data=int(n_seen),
    )  # fmt: skip
    history = [] if previous is None else list(previous.history)
    record = run.history[-1]
    history.append(
        {"epoch": len(history) + 1, "steps": int(run.n_steps), "energy": float(record["energy"]),
         "elapsed": float(record["time"])}
    )  # fmt: skip
    run = dataclasses.replace(run, history=history)
    x = _coordinates(
        run.kernel,
        run.likelihood,
        run.inducing_inputs,
        problem.learn_likelihood,
        problem.learn_inducing,
    )
    search = LearnerResult(
        x=x, log_evidence=float(record["energy"]), state=None, success=True,
        n_evaluations=int(run.n_steps), n_starts=1, moved=True,
        message=f"stochastic learner: partial_fit over {n_seen} points",
        stopped=run.stopped if run.stopped == "max_time" else "max_epochs",
        n_epochs=len(history), best_epoch=len(history), n_train=int(n_seen),
    )  # fmt: skip
    return Learned(
        kernel=run.kernel, likelihood=run.likelihood, Z=np.array(run.inducing_inputs),
        search=search, learner=STOCHASTIC, history=history, n_epochs=len(history), state=run,
    )  # fmt: skip
