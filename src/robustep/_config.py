"""Numerical settings with one home.

Every tolerance, jitter and quadrature size used by the library is read from
:func:`get_config`; :func:`config` overrides them inside a ``with`` block
(thread- and task-safe through :mod:`contextvars`)::

    with robustep.config(quadrature_points=64, jitter=1e-8):
        ...

The BLAS thread count of the fits is one of these settings (``blas_threads``):
:func:`blas_thread_limit` applies it around a fit's O(n^3) loops and restores the
previous limits afterwards.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import numbers
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class Settings:
    """Numerical settings.

    Attributes
    ----------
    jitter : float
        First diagonal jitter (relative to the mean diagonal) tried when a
        Cholesky factorisation fails.
    max_jitter_tries : int
        Number of tenfold jitter increases before giving up.
    quadrature_points : int
        Gauss–Hermite nodes for log-space quadrature of smooth tilted distributions.
    student_t_quadrature_points : int
        Nodes per integration panel for the (possibly bimodal) Student-t tilted distribution.
    student_t_predictive_nodes : int
        Gauss–Legendre nodes over the Gamma scale-mixture variable for the Student-t
        predictive distribution of a new observation (CDF, density, quantiles): relative
        error of tail probabilities below 1e-5 with 96
        (:func:`robustep.quadrature.gamma_scale_mixture_nodes`).
    min_cavity_precision : float
        A cavity precision at or below this fraction of the marginal (reference)
        precision is treated as invalid: that site is not updated and is reported.
    blas_threads : "auto", int >= 1 or None
        BLAS threads inside a fit (through ``threadpoolctl``; the previous limits are
        restored when the fit returns).  ``"auto"`` (default): one thread when the
        training set has at most ``blas_threads_auto_max_n`` points, the BLAS library's
        own setting above that; an integer: that many threads for every fit; ``None``:
        never touch the BLAS threads.  Why one thread: an EP or Laplace fit is a long
        chain of small factorisations (n x n, a few ms each), and multithreaded
        OpenBLAS on a busy machine spends far longer waiting for its threads than
        computing (docs/performance.md#blas-threads).
    blas_threads_auto_max_n : int
        Largest training-set size for which ``blas_threads="auto"`` uses one thread.
    subset_start_min_n : int or None
        ``GPClassifier`` (probit likelihood, a dense EP method, the parallel schedule) starts EP
        from the sites of FITC EP on a random subset of the training inputs
        (``init="subset"`` of :func:`robustep.ep.expectation_propagation`) when it has at
        least this many training points and no warm start; None never does.  The fixed
        point is the same; on smooth kernels the O(n^3) sweeps drop from 6-7 to 1-2 at
        n = 2000-4000, on rough ones it costs up to ~20% more
        (``python benchmarks/engine.py``; docs/derivations/engine_floor.md §5).
    search_tol : float > 0
        EP's site tolerance in every evaluation of a hyperparameter search (the final fit
        runs to the estimator's ``tol``).  Warm-started sites move little between optimiser
        steps; 1e-2 halves the sweeps per evaluation against 1e-4 while the fitted sigma
        moves by < 2e-5 (relative) on Friedman sets 0 and 1 of tgp-benchmark
        (``robustep reproduce tgp-benchmark --full``).
    search_max_iter : int >= 1
        EP sweeps at most in a warm-started evaluation of a hyperparameter search; a run
        that needs more counts as a failed evaluation and the line search backs off.  30
        gives the same optimum as 100 (sigma and MLPD to all printed digits) on Friedman
        sets 0-2 and Boston fold 0 of tgp-benchmark at ~20% less CPU for EP1
        (``robustep reproduce tgp-benchmark --full``).
    search_ftol : float > 0
        L-BFGS-B's relative tolerance on the objective in a hyperparameter search: stop
        when an iteration improves the approximate log evidence by less than this fraction
        of its value (GPstuff's ``gp_optim`` uses 1e-6 as well).  SciPy's default, 2.2e-9,
        spends 15-30% of a Boston search on improvements below 1e-3 nats
        (``robustep reproduce tgp-benchmark --full``).
    search_fallback_starts : int >= 0
        A dense classifier's evidence search whose first evaluation fails (inference does
        not converge at the starting kernel) starts again from the kernel with every
        length-scale times ``search_fallback_factor``, then its square, ..., this many
        times at most, until an evaluation succeeds; 0 never does.  On 300 points of an
        XOR pattern with 20% flipped labels fitted with ``label_noise=0.1`` EP fails at
        length-scales 1 and 0.25 and converges from 0.0625, where the search then finds
        its optimum (docs/reliability.md, "Cost of the step classifier").
    search_fallback_factor : float in (0, 1)
        See ``search_fallback_starts``.
    search_warm_jump : float > 0 or None
        The label-noise step classifier's evidence search starts each evaluation from the
        last successful evaluation's EP sites, unless that point lies farther than this
        from the new one (the largest difference of a log hyperparameter), when it starts
        from the nearest successful evaluation's sites instead; None always from the
        last's.  L-BFGS-B's first trial point is the raw gradient (length-scales of 0.013
        or 4 from a start at 1): the next point, back near the start, took 43 sweeps from
        there against 12 from the start's sites (the two n = 2000 fits of
        docs/reliability.md: ``python benchmarks/step_search.py --large --compare current
        last-warm``).  Near the optimum the last success is
        kept, as there the evidence at the search tolerance depends on the starting sites
        by ~1e-4 nats, and switching between neighbours' sites made L-BFGS-B's line
        searches chase the jumps (``python benchmarks/step_search.py --compare current
        last-warm``).  An evaluation farther than this from every successful one is a
        probe: its EP stage makes no run from zero sites after a run that stopped
        (``InferenceStrategy.search_stages(probe=True)``), so that a far trial point
        where EP fails is abandoned after about 20 sweeps.
    search_first_restarts : bool
        Whether the first evaluation of a step classifier's search start makes its EP
        stage's runs from zero sites after a run that stopped while another start (a
        fallback start, ``search_fallback_starts``) would follow its failure.  False (the
        default) treats it as a probe: a failure there is followed by the next start
        anyway, and on the n = 2000 smooth cell with 30% flips the restart made 75 of
        the first evaluation's 138 sweeps (docs/reliability.md, "Cost of the step
        classifier"; ``python benchmarks/step_search.py --large smooth30 --runs``, with
        and without ``--variant first-restarts``).  The last start's first evaluation
        always makes them.
    search_power_fallback : bool
        Whether the step classifier's evidence search (``method="auto"``), where every
        evaluation of every start failed in EP, runs again from the starting kernel on
        *power EP's* evidence (alpha 0.5, Anderson-accelerated:
        :meth:`robustep.ep.InferenceStrategy.power_search`), and the fit is then power
        EP's approximation at the kernel that maximises it (``method_used_ == "power"``,
        ``optimizer_result_.approximation == "power"``).  With a label noise below the
        share of flipped labels EP can have no fixed point at the longer length-scales,
        where its evidence rises (docs/reliability.md, "Cost of the step classifier";
        ``benchmarks/step_fixed_points.py``).  False keeps the kernel at its start and
        warns.
    search_stall_evaluations : int >= 1 or None
        The step classifier's evidence search ends a start when this many successful
        evaluations in a row lie within ``search_stall_step`` of the start's best point
        (the largest difference of a log hyperparameter) without raising its log evidence
        by more than ``search_ftol`` relative: at the search tolerance the step evidence
        is noisy, and near the optimum L-BFGS-B's line searches failed there for tens of
        evaluations (``maximise_evidence(stall=...)``; docs/reliability.md, "Cost of the
        step classifier": ``python benchmarks/step_search.py --compare no-stall
        current``).  None never does.
    search_stall_step : float >= 0
        See ``search_stall_evaluations``.
    search_fallback_first_step : float > 0 or None
        The step classifier's search from a fallback start (``search_fallback_starts``),
        and its search on power EP's evidence (``search_power_fallback``), takes a first
        step of at most this many units of a log hyperparameter: its optimiser sees the
        evidence divided by max(1, largest entry of the first gradient / this)
        (``maximise_evidence(fallback_first_step=...)``).  From the fallback starts the
        evidence is steep, and L-BFGS-B's first step, the raw gradient, landed on the
        length-scale's bound (10⁵) and then on other far points where EP fails
        (docs/reliability.md, "Cost of the step classifier": ``python
        benchmarks/step_search.py --compare raw-fallback-step current``).  Half a unit
        against one: on the 42 fits of ``benchmarks/step_search.py`` 3693 posterior
        factorisations against 3787 and on seeds 8-9 4024 against 4231, the misspecified
        XOR fits at n = 300 starting at 0.0625 with optima at 0.085-0.127, which a unit
        step overshot; one of them ends at the nearer of two maxima, 0.067 nats lower
        (``python benchmarks/step_search.py --compare unit-fallback-step current``, and
        with ``--seeds 8,9``).  None takes the raw step.
    search_first_step : float > 0 or None
        The step classifier's evidence search (``method="auto"``, its own optimiser) takes
        a first step of at most this many units of a log hyperparameter from its first
        start (and from the ``n_restarts_optimizer`` starts): its optimiser sees the
        evidence divided by max(1, largest entry of the first gradient / this)
        (``maximise_evidence(first_step=...)``); the stationary points are the same.
        Each evaluation is EP warm-started from a nearby one, and costs more sweeps the
        farther it lies; L-BFGS-B's raw first step, the gradient itself, went up to 5.8
        units of log length-scale away, and the search then came back.  On the 42 fits of
        ``benchmarks/step_search.py`` (measured with an empty Anderson memory at each
        warm start) a quarter unit takes 4355 posterior factorisations instead of 5701,
        to the same optima (length-scale within 0.9%, log evidence within 2.5e-4) except
        one misspecified fit, which ends at the nearer of two maxima, 2.7 nats lower
        (docs/reliability.md, "Cost of the step classifier": ``python
        benchmarks/step_search.py --compare
        raw-first-step+fresh-memory+no-stones+unit-fallback-step
        fresh-memory+no-stones+unit-fallback-step``, without the stepping stones and the
        half step of a fallback start, as it was measured).  None takes the raw step.
    search_stone_step : float > 0 or None
        The step classifier's evidence search (``method="auto"``) reaches a point that
        lies farther than this from its warm start's point (the largest difference of a
        log hyperparameter) through evaluations in between, each warm-started from the one
        before: at most ``search_stones`` points evenly spaced at most this far apart
        (``maximise_evidence(stones=...)``).  Under a label noise below the share of
        flipped labels EP's fixed point moves fast with the length-scale: on 200 points of
        XOR with 20% flips and ``label_noise=0.1`` a warm start from length-scale 0.78
        failed at 0.505 and at 0.627 (22 and 19 sweeps), where stones 0.675 and 0.585
        bring 0.507 within reach (6 + 6 + 9 sweeps; ``python benchmarks/step_search.py
        --runs``, and with ``--variant no-stones``).  On the 42 fits of
        ``benchmarks/step_search.py`` 3693 posterior factorisations against 4617 without
        stones, to optima within 2.3% in length-scale and 1e-3 in log evidence; on seeds
        8-9 4024 against 4835, two fits at other maxima, one 2.0 nats higher and one 0.13
        lower (``python benchmarks/step_search.py --compare no-stones current``, and with
        ``--seeds 8,9``; docs/reliability.md, "Cost of the step classifier").  None: no
        stones.
    search_stones : int >= 1
        See ``search_stone_step``.
    search_factorisations_per_sweep : int >= 0
        Posterior factorisations allowed (the initial one included) per allowed sweep of a
        search run, per stage of the "auto" chain: the engine's ``max_factorisations`` is
        this times the run's sweeps (:meth:`robustep.ep.InferenceStrategy.search_run`).  A
        sweep factorises once plus once per step halving; converged search runs use
        1.0-2.0 per sweep in six tgp-benchmark units, while on concrete fold 0 failing
        ones used up to 388 factorisations and three quarters of the search's EP time
        (``robustep reproduce tgp-benchmark --full``).
    final_max_iter : int >= 1
        EP sweeps at most in the first, cold-started evaluation of each search start of
        the regressors (their final fit runs the estimator's own ``max_iter``).
    warm_first_max_iter : int >= 1
        EP sweeps at most in the first evaluation of a search start warm-started from
        another inference (EP3's neighbouring grid value); when it does not converge the
        evaluation is repeated from zero sites with ``final_max_iter``.  Warm starts from a
        poor neighbour ran 495-1000 sweeps on Boston fold 0 of tgp-benchmark
        (``robustep reproduce tgp-benchmark --full``).
    sparse_first_max_iter : int >= 1
        EP sweeps at most in the first (cold-started) evaluation of a sparse (FITC) search
        start, where a sweep costs O(n m^2).
    multinomial_search_subset : int or None
        ``GPClassifier``'s multinomial model with more training points than this searches
        its kernel hyperparameters on a stratified random subset of this many points
        first (a posterior sweep costs O(c m^3) there instead of O(c n^3)), then runs
        ``multinomial_refine_maxiter`` L-BFGS-B iterations on all points from the subset's
        optimum; None always searches on all points.  On digits (10 classes) a search on
        all of 300 points made 117 evaluations, the last 90 on a flat ridge of the
        amplitude worth < 0.1 nats; with the subset the default fit at n = 1000 takes 130
        CPU seconds (``python benchmarks/multiclass.py --digits``, docs/performance.md).
    multinomial_subset_maxiter : int >= 1
        L-BFGS-B iterations at most of the search on the subset.
    multinomial_refine_maxiter : int >= 1
        L-BFGS-B iterations on all training points after the subset's search.
    stall_patience : int >= 1
        Robust parallel EP halves its step (and finally switches to the double loop) after
        this many sweeps without a new smallest residual by 10%.
    mean_sweep_fraction : float >= 0
        The engine's O(n^2) mean sweeps stop once the mean mismatch is below this fraction
        of the largest proposed change of a site precision (``python benchmarks/engine.py``;
        docs/derivations/engine_floor.md).
    stochastic_learner_min_n : int >= 1 or None
        ``learner="auto"`` of the sparse estimators (``inducing_points`` with the built-in
        optimizer) learns the kernel and the inducing inputs with the stochastic learner
        (:class:`robustep.StochasticLearner`) from this many training points on, with the
        full-batch evidence search below; None: always the full-batch search.  Measured
        (docs/guide/large-data.md, "Learning at scale"): the full-batch search takes
        longer than the stochastic learner's default from about 10⁴ points.  The rule is
        the same for a Dask X, which the stochastic learner then reads block by block.
    stochastic_validation_max_rows : int >= 1 or None
        With a Dask X, the stochastic learner holds out at most this many rows for its
        held-out score (``validation_fraction`` of n otherwise), drawn from a random subset
        of the row blocks (at least a share ``validation_fraction`` of them) and computed
        into memory once, so that the split costs no pass over X; each epoch scores them
        in O(rows m²).  None: no cap.  In-memory X is not capped.
    auto_inducing_power : float in (0, 1]
        The power α that ``inducing_power="auto"`` of the sparse estimators gives when the
        inducing inputs are optimised (in-memory X, a method with a power-α version): power
        EP on the pseudo-point posterior (Bui, Yan & Turner 2017) instead of FITC-EP
        (α = 1), whose evidence rewards inducing inputs and amplitudes that over-fit
        (Bauer, van der Wilk & Rasmussen 2016).
    tep_fixed_point_max_sites : int >= 0
        ``BayesPointMachine``: when damped t-EP sweeps do not converge and Newton's method
        finds no fixed point, the dogleg trust-region method
        (:func:`robustep.tep.fixed_point.solve_fixed_point`, a dense 2n x 2n Jacobian per
        step) is tried on training sets of at most this many points; 0 never does.
    stability_max_sites : int >= 0
        :func:`robustep.ep.fixed_point_stability` analyses, and
        :func:`robustep.ep.newton_expectation_propagation` solves, at most this many
        sites: both form the n x n posterior covariance and a 2n x 2n Jacobian (an
        eigen-decomposition, or a solve per Newton step), O(n³) time and O(n²) memory.
    """

    jitter: float = 1e-10
    max_jitter_tries: int = 8
    quadrature_points: int = 48
    student_t_quadrature_points: int = 40
    student_t_predictive_nodes: int = 96
    min_cavity_precision: float = 1e-12
    blas_threads: str | int | None = "auto"
    blas_threads_auto_max_n: int = 2000
    subset_start_min_n: int | None = 2000
    search_tol: float = 1e-2
    search_max_iter: int = 30
    search_ftol: float = 1e-6
    search_factorisations_per_sweep: int = 2
    search_fallback_starts: int = 2
    search_fallback_factor: float = 0.25
    search_warm_jump: float | None = 1.0
    search_first_restarts: bool = False
    search_power_fallback: bool = True
    search_stall_evaluations: int | None = 5
    search_stall_step: float = 1e-2
    search_fallback_first_step: float | None = 0.5
    search_first_step: float | None = 0.25
    search_stone_step: float | None = 0.175
    search_stones: int = 3
    final_max_iter: int = 1000
    warm_first_max_iter: int = 200
    sparse_first_max_iter: int = 100
    multinomial_search_subset: int | None = 300
    multinomial_subset_maxiter: int = 20
    multinomial_refine_maxiter: int = 3
    stall_patience: int = 5
    mean_sweep_fraction: float = 0.3
    stochastic_learner_min_n: int | None = 10_000
    stochastic_validation_max_rows: int | None = 10_000
    auto_inducing_power: float = 0.5
    tep_fixed_point_max_sites: int = 1000
    stability_max_sites: int = 1000

    def __post_init__(self):
        bt = self.blas_threads
        ok = bt is None or bt == "auto"
        ok = ok or (isinstance(bt, numbers.Integral) and not isinstance(bt, bool) and bt >= 1)
        if not ok:
            raise ValueError(f'blas_threads must be "auto", a positive integer or None, got {bt!r}')
        for name in ("subset_start_min_n", "multinomial_search_subset"):
            sm = getattr(self, name)
            if sm is not None and not (
                isinstance(sm, numbers.Integral) and not isinstance(sm, bool) and sm >= 1
            ):
                raise ValueError(f"{name} must be a positive integer or None, got {sm!r}")
        sl = self.stochastic_learner_min_n
        if sl is not None:
            _check_integer("stochastic_learner_min_n", sl, 1)
        vm = self.stochastic_validation_max_rows
        if vm is not None:
            _check_integer("stochastic_validation_max_rows", vm, 1)
        _check_fraction("auto_inducing_power", self.auto_inducing_power, one_allowed=True)
        for name in ("search_tol", "search_ftol"):
            _check_real(name, getattr(self, name), positive=True)
        _check_real("mean_sweep_fraction", self.mean_sweep_fraction, positive=False)
        _check_integer("search_factorisations_per_sweep", self.search_factorisations_per_sweep, 0)
        _check_integer("search_fallback_starts", self.search_fallback_starts, 0)
        _check_fraction("search_fallback_factor", self.search_fallback_factor, one_allowed=False)
        for name in ("search_warm_jump", "search_first_step", "search_fallback_first_step",
                     "search_stone_step"):  # fmt: skip
            if getattr(self, name) is not None:  # None: the rule is off
                _check_real(name, getattr(self, name), positive=True)
        _check_integer("tep_fixed_point_max_sites", self.tep_fixed_point_max_sites, 0)
        _check_integer("stability_max_sites", self.stability_max_sites, 0)
        if self.search_stall_evaluations is not None:
            _check_integer("search_stall_evaluations", self.search_stall_evaluations, 1)
        _check_real("search_stall_step", self.search_stall_step, positive=False)
        _check_integer("search_stones", self.search_stones, 1)
        if not isinstance(self.search_power_fallback, bool):
            raise ValueError(
                f"search_power_fallback must be True or False, got {self.search_power_fallback!r}"
            )
        if not isinstance(self.search_first_restarts, bool):
            raise ValueError(
                f"search_first_restarts must be True or False, got {self.search_first_restarts!r}"
            )
        for name in (
            "search_max_iter",
            "final_max_iter",
            "warm_first_max_iter",
            "sparse_first_max_iter",
            "multinomial_subset_maxiter",
            "multinomial_refine_maxiter",
            "stall_patience",
        ):
            _check_integer(name, getattr(self, name), 1)


def _check_real(name, value, positive):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and (value > 0 if positive else value >= 0)):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}")  # fmt: skip


def _check_fraction(name, value, one_allowed):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (ok and 0 < value and (value <= 1 if one_allowed else value < 1)):
        interval = "(0, 1]" if one_allowed else "(0, 1)"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")


def _check_integer(name, value, low):
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


# Settings is a frozen dataclass, so sharing one default instance is safe.
_current: contextvars.ContextVar[Settings] = contextvars.ContextVar(
    "robustep_settings",
    default=Settings(),  # noqa: B039
)


def get_config() -> Settings:
    """Return the settings in force."""
    return _current.get()


@contextlib.contextmanager
def config(**overrides) -> Iterator[Settings]:
    """Override numerical settings inside a ``with`` block.

    Unknown names raise ``TypeError`` listing the valid ones.
    """
    valid = {f.name for f in dataclasses.fields(Settings)}
    unknown = set(overrides) - valid
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; valid settings are {sorted(valid)}")
    token = _current.set(dataclasses.replace(_current.get(), **overrides))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


_controller = None


def _threadpool_controller():
    """One cached ``threadpoolctl.ThreadpoolController`` (building one scans the loaded
    libraries, ~1 ms; limiting through it costs microseconds)."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        controller = ThreadpoolController()
        if not controller.select(user_api="blas").lib_controllers:
            return controller  # BLAS not loaded yet: do not cache an empty controller
        _controller = controller
    return _controller


def blas_threads_for(n: int) -> int | None:
    """The BLAS thread limit that ``blas_threads`` gives a fit on n points (None: no limit)."""
    settings = get_config()
    if settings.blas_threads is None:
        return None
    if settings.blas_threads == "auto":
        return 1 if n <= settings.blas_threads_auto_max_n else None
    return int(settings.blas_threads)


@contextlib.contextmanager
def blas_thread_limit(n: int) -> Iterator[int | None]:
    """Limit the BLAS threads for a fit on n training points (see ``Settings.blas_threads``).

    Yields the limit applied (None when the BLAS setting is left alone); the previous
    limits are restored on exit, also after an exception.
    """
    limit = blas_threads_for(n)
    if limit is None:
        yield None
        return
    with _threadpool_controller().limit(limits=limit, user_api="blas"):
        yield limit


def limits_blas_threads(fit):
    """Decorate an estimator's ``fit(self, X, y, ...)`` to run under :func:`blas_thread_limit`.

    The number of training points is read from ``X`` (its length); input that has no length
    is left to the fit's own validation, under the limit for n = 0.
    """

    @functools.wraps(fit)
    def wrapper(self, X, *args, **kwargs):
        try:
            n = len(X)
        except TypeError:
            n = 0
        with blas_thread_limit(n):
            return fit(self, X, *args, **kwargs)

    return wrapper
