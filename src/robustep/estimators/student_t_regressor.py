"""Robust GP regression with a Student-t likelihood (Jylänki, Vanhatalo & Vehtari 2011).

``StudentTGPRegressor`` is a thin scikit-learn shell over the inference engines:

* ``"auto"`` (default): EP's fixed point found by parallel EP, then damped EP, then the
  double loop (:mod:`robustep.ep.chain`);
* ``"ep"``: robust parallel EP with double-loop fallback (§4), :mod:`robustep.ep`;
* ``"fractional"``: fractional (power) EP with eta = ``power`` (§3.7, eqs. 14–15);
* ``"laplace"``: Laplace approximation (§3.2), :mod:`robustep.baselines.laplace`;
* ``"vb"``: variational bounds (§3.4), :mod:`robustep.baselines.variational`;
* ``"fvb"``: factorised VB on the scale mixture with EM for hyperparameters (§3.3);
* ``"mcmc"``: scale-mixture Gibbs sampling with slice-sampled hyperparameters (§3.1),
  :mod:`robustep.baselines.mcmc`;
* ``"gaussian"``: ordinary GP regression with Gaussian noise of variance ``scale**2``.

Type-II MAP (§6.2): the kernel hyperparameters, sigma (``scale``) and, with
``optimize_df``, nu are optimised with flat priors on log theta, log sigma and
log log nu (so the MAP is the maximum of the approximate marginal likelihood in
those coordinates; nu is kept in [1.05, 1000] and sigma in [0.01, 100] standardised
units — the lower bound keeps EP away from near-noise-free fits where it converges
very slowly; during the search EP is warm-started from the previous evaluation's
sites, runs at most 30 sweeps to a site tolerance of 1e-2 per evaluation, and a
non-converged evaluation counts as failed; the final fit runs to 1e-4).
``df_grid`` gives EP3: nu fixed at 15 values log-log spaced in [1.5, 20], the
other hyperparameters optimised for each (in increasing nu, each warm-started from the
previous value's mode and EP sites; ``n_restarts_optimizer`` random restarts at the
smallest value only) and the
predictions mixed with weights w_j ∝ q(theta_j, sigma_j, nu_j | D) (§6.2).

Targets are standardised when ``normalize_y`` (as in the paper, §6.2); ``scale``
and the fitted ``scale_`` are then in units of the standardised targets.

``device`` (a PyTorch device string) runs the EP methods' O(n^2) / O(n^3) work there
(:mod:`robustep.estimators._device`): K and dK/dlog theta, the EP posterior, the
kernel part of the evidence gradient and the predictions' cross-covariances.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from robustep._config import get_config, limits_blas_threads
from robustep._validation import validate_data as _validate_data
from robustep.estimators import _device
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    maximise_evidence,
    warn_if_stuck,
)
from robustep.kernels.gradient import KernelWithGradient
from robustep.likelihoods import StudentT, predictive_mixture
from robustep.likelihoods.student_t import student_t_noise
from robustep.posterior import DensePrior

__all__ = ["StudentTGPRegressor", "default_df_grid", "student_t_gaussian_quantiles"]

_METHODS = ("auto", "ep", "fractional", "laplace", "vb", "fvb", "mcmc", "gaussian")
#: methods whose fit sets the leave-one-out attributes (robustep.diagnostics)
_LOO_METHODS = ("auto", "ep", "fractional", "gaussian")
#: methods that run on ``device`` (dense EP on an ArrayPrior; estimators/_device.py)
_DEVICE_METHODS = ("auto", "ep", "fractional")
_DF_BOUNDS = (1.05, 1000.0)
_SCALE_BOUNDS = (1e-2, 1e2)


def default_df_grid(n: int = 15, low: float = 1.5, high: float = 20.0) -> np.ndarray:
    """EP3 grid: ``n`` values of nu linearly spaced in log-log scale on [low, high] (§6.2)."""
    return np.exp(np.exp(np.linspace(np.log(np.log(low)), np.log(np.log(high)), n)))


def _df_grid_order(grid):
    """The order in which EP3 visits its grid: [(index, nu, index of the warm start)].

    In increasing nu from the smallest value (warm start None: the random restarts are
    spent there, where the evidence has the most local modes), each later value
    warm-started from the one before.  Indices refer to ``grid``.

    Measured (docs/benchmarks.md, "tgp-benchmark --full"): starting at the grid value
    nearest the initial nu = 4 and walking out to both ends instead was cheaper (Boston
    fold 0: 146-199 s against ~250 s) but followed the nu = 4 mode down to nu = 1.5 and
    ended in a far worse one there on Friedman sets 0 and 3 (log evidence -91.4 vs -61.5
    and -83.5 vs -57.0; MLPD -2.29 vs -1.79 and -2.35 vs -1.69)."""
    grid = np.asarray(grid, dtype=float)
    rank = np.argsort(grid, kind="stable")
    return [
        (int(rank[k]), float(grid[rank[k]]), None if k == 0 else int(rank[k - 1]))
        for k in range(rank.size)
    ]


def _validate(estimator, X, y=None, reset=True):
    kwargs = dict(ensure_2d=True, dtype="numeric", reset=reset)
    if y is not None:
        kwargs["y_numeric"] = True
    if _validate_data is not None:
        if y is None:
            return _validate_data(estimator, X, **kwargs)
        return _validate_data(estimator, X, y, **kwargs)
    if y is None:  # pragma: no cover
        return estimator._validate_data(X, **kwargs)
    return estimator._validate_data(X, y, **kwargs)  # pragma: no cover


def _student_t(df, scale):
    """The Student-t likelihood with the given parameters."""
    return StudentT(df=float(df), scale=float(scale))


def _lik_grad(likelihood, grad) -> tuple[float, float]:
    """(d/dlog nu, d/dlog sigma) from a gradient ordered by ``hyperparameter_names``."""
    names = tuple(likelihood.hyperparameter_names)
    g = dict(zip(names, np.asarray(grad, float), strict=False))
    return float(g.get("df", 0.0)), float(g.get("scale", 0.0))


def student_t_gaussian_quantiles(q, means, variances, dfs, scales, weights=None, tol=1e-10):
    """Quantiles of the predictive y = f + eps, f Gaussian, eps Student-t (a mixture of such).

    q : (Q,) probabilities in [0, 1]; means, variances : (J, m) latent moments of J mixture
    components at m test points; dfs, scales : (J,) Student-t nu (``inf`` = Gaussian) and
    sigma; weights : (J,) mixture weights (default equal).  Returns (m, Q).

    :meth:`robustep.likelihoods.PredictiveMixture.quantiles` of the components'
    :func:`robustep.likelihoods.student_t.student_t_noise` likelihoods; q = 0 and q = 1 give
    -inf and +inf.
    """
    means = np.atleast_2d(np.asarray(means, float))
    J = means.shape[0]
    dfs = np.broadcast_to(np.asarray(dfs, float), (J,))
    scales = np.broadcast_to(np.asarray(scales, float), (J,))
    liks = [student_t_noise(nu, s) for nu, s in zip(dfs, scales, strict=True)]
    return predictive_mixture(liks, means, variances, weights).quantiles(q, tol=tol)


class _GaussianGP:
    """Exact GP regression with noise variance s2; the ``"gaussian"`` reference method."""

    def __init__(self, K, y, s2):
        from robustep.baselines.variational import _HeteroscedasticGP

        self.gp = _HeteroscedasticGP(K, y, np.full(y.size, s2))
        self.s2 = s2
        self.log_marginal_likelihood = self.gp.log_marginal()
        self.mean, self.var = self.gp.mean, self.gp.var
        self.site_precision = np.full(y.size, 1.0 / s2)
        self.site_shift = y / s2
        self.converged, self.n_iter = True, 1

    def predict(self, K_cross, k_diag):
        return self.gp.predict(K_cross, k_diag)

    def gradient(self, K_gradient):
        gk = self.gp.kernel_gradient(K_gradient)
        # d(K + s2 I)/dlog sigma = 2 s2 I: (alpha^T alpha - tr(Ky^-1)) s2, no (n, n) array
        gs = self.s2 * float(self.gp.alpha @ self.gp.alpha - np.sum(self.gp.Kyinv_diag))
        return gk, gs


class StudentTGPRegressor(RegressorMixin, BaseEstimator):
    """Gaussian process regression with a Student-t observation model.

    Parameters
    ----------
    kernel : sklearn kernel, default ``ConstantKernel(1.0) * RBF(1.0)``
        Prior covariance (log-space hyperparameters); cloned, never modified.
    df : float > 0
        Degrees of freedom nu (initial value, or fixed unless ``optimize_df``).
    scale : float > 0
        Student-t scale sigma (initial value; standardised-target units if ``normalize_y``).
        For ``method="gaussian"`` the noise standard deviation.
    method : {"auto", "ep", "fractional", "laplace", "vb", "fvb", "mcmc", "gaussian"}
        The approximation (§3).  "auto" (default) is the same approximation as "ep" —
        EP's fixed point, the paper's EP1/EP2 — found by the chain of
        :mod:`robustep.ep.chain` (parallel EP, then damped EP with adaptive
        damping, then the double loop with 10 inner iterations; ``method_used_`` says
        which converged).  The method names the *approximation* and "auto" does not
        change it, so it can be the default: on the hard grid of
        ``benchmarks/auto_grid.py`` (nu = 1.5, near-duplicate inputs, large signal
        variance) "ep" — exactly the paper's §4 algorithm, kept for reproductions —
        stalls where "auto" converges (docs/reliability.md, "method='auto'").  A
        ConvergenceWarning is raised only when every stage failed, naming them.
        "fractional" (power EP) and the non-EP approximations have no "auto" variant.
    power : float in (0, 1]
        Fractional EP power eta, used by ``method="fractional"``.
    optimize_df : bool
        Also optimise nu (LA2/EP2/VB2/fVB2 of §6.2); with ``method="mcmc"`` nu is sampled.
    df_grid : None, True or array of nu values
        EP3 (§6.2): optimise the other hyperparameters for each nu on the grid
        (True: :func:`default_df_grid`) and mix the predictions.
    optimizer : "fmin_l_bfgs_b", callable or None
        None keeps kernel, ``df`` and ``scale`` exactly as given (for ``"mcmc"``:
        hyperparameters are not sampled).  A callable is called as
        ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)`` like
        scikit-learn's GaussianProcessRegressor, over [kernel log hyperparameters,
        log sigma, log nu (``optimize_df``), the inducing inputs (``inducing_points``
        with ``optimize_inducing``; their rows of ``bounds`` are ±inf)].
    n_restarts_optimizer : int
        Extra optimiser runs from random initial kernel hyperparameters; the best
        approximate marginal posterior wins.
    normalize_y : bool
        Standardise targets to zero mean and unit variance before fitting.
    n_samples : int
        MCMC draws kept (``method="mcmc"``).
    mcmc_hyper_every : int
        ``method="mcmc"``: slice-sample the kernel hyperparameters every this many Gibbs
        sweeps (f, the scale mixture, sigma and nu every sweep); 1 = every sweep.
        ``mcmc_diagnostics_`` gives R-hat and the effective sample size to check mixing.
    mcmc_hyper_sampler : {"slice", "metropolis"}
        ``method="mcmc"``: how the kernel hyperparameters are updated —
        coordinate-wise slice sampling (~4.5 Cholesky factorisations per hyperparameter
        and update), or, after the first half of the burn-in, joint random-walk
        Metropolis with a proposal covariance learnt from the burn-in (one factorisation
        per proposal, p proposals per update; :func:`robustep.baselines.mcmc.gibbs_student_t_gp`).
        ``mcmc_diagnostics_["hyper_acceptance"]`` gives its acceptance rate.
    random_state : int, RandomState or None
    inducing_points : None, int or array of shape (m, n_features)
        None: the dense model.  An int m: a sparse FITC model (docs/derivations/sparse.md)
        with m inducing inputs at k-means centres of X (``MiniBatchKMeans`` seeded by
        ``random_state``); an array: those inducing inputs.  O(n m^2) per EP sweep, no
        n x n array; methods "auto", "ep" and "fractional" (no ``df_grid``).  ``fit`` also
        accepts ``dask.array`` X (and y) chunked by rows (posterior/_dask.py).
    optimize_inducing : bool
        With an ``optimizer`` and ``inducing_points``, optimise the inducing inputs jointly
        with the hyperparameters (analytic gradient); False keeps them fixed.
    inducing_power : float in (0, 1], default 1
        With ``inducing_points``: the power α of power EP on the pseudo-point posterior
        (Bui, Yan & Turner 2017; docs/derivations/sparse.md §8), applied to each exact
        factor p(y_i | f_i) while p(f_i | u) is kept exact.  1: FITC-EP (today's sparse
        model, unchanged); towards 0: the variational free energy (Titsias' VFE).  Not the
        fractional ``power`` η of method "fractional", which tempers the sites under the
        fixed FITC prior; α < 1 needs method "auto" or "ep" and in-memory X.
        ``site_precision_`` / ``site_shift_`` are then the effective factors of f_i whose
        removal gives the leave-one-out cavity
        (``robustep.ep.sparse_power.PseudoPointEPResult.latent_view``).
    device : None or str
        None: numpy on the CPU.  A PyTorch device ("cpu", "cuda", "cuda:1"): K and its
        kernel gradient are built there, EP (robust, with negative sites and the double
        loop; also ``optimize_df`` and ``df_grid``) factorises there, and the kernel part
        of the evidence gradient and the predictive cross-covariances are computed there;
        the O(n) per-site work and the sigma / nu gradient stay in numpy, and the
        predict methods and fitted attributes are numpy.  Methods "auto", "ep" and
        "fractional", dense model only (the others and ``inducing_points`` raise
        ValueError); needs ``pip install robustep[torch]``.  See docs/architecture.md,
        "Array backends".
    dtype : "float64"
        Floating-point type on ``device`` (ignored with ``device=None``).  "float32"
        (which GPClassifier accepts) raises ValueError here: Student-t sites are
        informative (precisions near the likelihood's largest curvature
        (nu+1)/(nu sigma^2)), so I + S K S is ill-conditioned and float32 rounding leaves
        a floor in EP's residual (0.10 at n = 500, docs/benchmarks.md "float32 against
        float64"; 0.075 at n = 60 with the tests' outliers) far above the tolerance:
        EP never converges, the log evidence is off by ~0.1, and every evaluation of the
        hyperparameter search would count as failed.  A clear error is better than a
        fit that silently keeps its starting hyperparameters.

    Attributes
    ----------
    kernel_, df_, scale_ : fitted hyperparameters.
    inducing_points_ : (m, n_features) fitted inducing inputs, or None (dense model).
    converged_, n_iter_ : whether the final inference converged, and its iterations.
    log_marginal_likelihood_value_ : approximate log p(y | hyperparameters) of the
        standardised targets (a lower bound for "vb"/"fvb"; NaN-free; None for "mcmc").
    site_precision_, site_shift_ : (n,) site natural parameters in standardised units
        (EP sites; W and W f^ + d1 for Laplace; 1/gamma for VB/fVB; None for MCMC).
    negative_precision_ : (n,) bool, sites with negative precision (the §5/§7 outliers).
    cavity_mean_, cavity_var_ : (n,) leave-one-out (cavity) moments of f in target
        units (§7 diagnostics; NaN where a cavity is undefined).
    df_grid_, df_weights_ : EP3 grid and mixture weights (None otherwise).
    hyperparameters_at_bounds_ : list of (name, "lower" | "upper") for optimised
        hyperparameters that ended on a bound (a ConvergenceWarning is raised then,
        as scikit-learn's GaussianProcessRegressor does); empty otherwise.
    mcmc_diagnostics_ : dict with R-hat, ESS and the Metropolis acceptance rate of the
        hyperparameter updates (None for slice sampling) (``method="mcmc"``).
    method_used_ : for "auto" the stage that converged ("ep", "damped", "double_loop");
        else ``method``.
    loo_log_predictive_, loo_mean_, loo_std_, loo_interval_, outlier_scores_, loo_approximate_ :
        leave-one-out diagnostics from the cavities q / t~_i (:mod:`robustep.diagnostics`;
        Opper & Winther 2000, Vehtari et al. 2016), methods "auto", "ep", "fractional"
        (the full-site cavity for any power) and "gaussian" (exact LOO, Rasmussen &
        Williams eq. 5.12), in target units: (n,) log p(y_i | y_-i); the mean and
        standard deviation of the LOO predictive of y_i including the Student-t noise
        (``inf`` for nu <= 2, where the noise has no variance); its central 95% interval
        ((n,), (n,)); the standardised LOO residuals Phi^-1(F_-i(y_i)) (N(0, 1) under the
        model; large |value| = outlier; see also ``negative_precision_``).  EP3 mixes the
        grid with the LOO weights w_j / p_j(y_i | y_-i).  Not set for "laplace", "vb",
        "fvb" and "mcmc" (:meth:`loo_score` raises).
    """

    _parameter_constraints: dict = {
        "kernel": [Kernel, None],
        "df": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "scale": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "method": [StrOptions(set(_METHODS))],
        "power": [Interval(numbers.Real, 0.0, 1.0, closed="right")],
        "optimize_df": ["boolean"],
        "df_grid": [None, "array-like", "boolean"],
        "optimizer": [StrOptions({"fmin_l_bfgs_b"}), callable, None],
        "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
        "normalize_y": ["boolean"],
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "mcmc_hyper_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "mcmc_hyper_sampler": [StrOptions({"slice", "metropolis"})],
        "random_state": ["random_state"],
        "inducing_points": [None, numbers.Integral, "array-like"],
        "optimize_inducing": ["boolean"],
        "inducing_power": [Interval(numbers.Real, 0.0, 1.0, closed="right")],
        "device": [str, None],
        "dtype": [StrOptions({"float64", "float32"})],
    }

    def __init__(
        self,
        kernel=None,
        *,
        df=4.0,
        scale=0.5,
        method="auto",
        power=0.5,
        optimize_df=False,
        df_grid=None,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        normalize_y=True,
        n_samples=2000,
        mcmc_hyper_every=1,
        mcmc_hyper_sampler="slice",
        random_state=None,
        inducing_points=None,
        optimize_inducing=True,
        device=None,
        dtype="float64",
        inducing_power=1.0,
    ):
        self.kernel = kernel
        self.df = df
        self.scale = scale
        self.method = method
        self.power = power
        self.optimize_df = optimize_df
        self.df_grid = df_grid
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.n_samples = n_samples
        self.mcmc_hyper_every = mcmc_hyper_every
        self.mcmc_hyper_sampler = mcmc_hyper_sampler
        self.random_state = random_state
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.device = device
        self.dtype = dtype
        self.inducing_power = inducing_power

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # score() is the mean log predictive density, not R^2.
        tags.regressor_tags.poor_score = True
        return tags

    def _more_tags(self):  # pragma: no cover - scikit-learn < 1.6
        return {"poor_score": True}

    # ------------------------------------------------------------- inference
    def _infer(self, K, df, scale, warm=None, max_iter=1000, tol=1e-4, search=False):
        """Approximate inference at fixed hyperparameters; returns a result with
        ``log_marginal_likelihood``, ``mean``, ``var``, ``converged``, ``n_iter``, ``predict``.

        ``tol`` is EP's site-change tolerance (looser inside the hyperparameter search).
        ``search``: an evaluation inside the hyperparameter search, whose run is discarded
        when it does not converge within ``max_iter``: it runs
        :meth:`InferenceStrategy.search_run <robustep.ep.InferenceStrategy.search_run>`
        (EP never starts the double loop and stops, not converged, after
        ``search_factorisations_per_sweep * max_iter`` posterior factorisations per stage
        of the "auto" chain), else :meth:`InferenceStrategy.auto
        <robustep.ep.InferenceStrategy.auto>` with the engine's default run for "ep"."""
        y = self._y
        m = self.method
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            if m in ("ep", "fractional", "auto"):
                from robustep.ep import InferenceStrategy, expectation_propagation, run_chain

                power = 1.0 if m == "ep" else float(self.power)
                if isinstance(K, np.ndarray):
                    # K comes from a scikit-learn kernel (symmetric PSD by construction): skip
                    # the engine's O(n^3) PSD check, once per optimiser evaluation
                    if not np.all(np.isfinite(K)):
                        raise ValueError("K contains NaN or inf; check the kernel")
                    K = DensePrior(K, check=False)
                # a search run never starts the double loop and has bounded work
                strategy = (
                    InferenceStrategy.search_run(max_iter)
                    if search
                    else InferenceStrategy.auto(max_iter)
                )
                if m == "auto":  # parallel -> damped -> double loop (ep/chain.py)
                    res = run_chain(K, y, _student_t(df, scale), strategy, tol=tol, init=warm)
                else:
                    res = expectation_propagation(
                        K, y, _student_t(df, scale), power=power, init=warm, tol=tol,
                        **strategy.engine_options(),
                    )  # fmt: skip
                res.log_marginal_likelihood = float(res.log_Z)
                return res
            if m == "laplace":
                from robustep.baselines.laplace import laplace_approximation

                return laplace_approximation(
                    K, y, _student_t(df, scale), init=warm, max_iter=min(max_iter, 100)
                )
            if m == "vb":
                from robustep.baselines.variational import variational_bounds

                return variational_bounds(K, y, _student_t(df, scale), init=warm)
            if m == "fvb":
                from robustep.baselines.variational import factorized_vb

                return factorized_vb(K, y, _student_t(df, scale), init=warm)
            return _GaussianGP(K, y, scale**2)

    def _gradient(self, res, K_gradient, df, scale):
        """(d/dlog theta_kernel (p,), d/dlog nu, d/dlog sigma) of the approximate evidence."""
        m = self.method
        lik = _student_t(df, scale)
        if m in ("ep", "fractional", "auto"):
            from robustep.ep import log_Z_gradient

            if self.device is not None:  # kernel part on the device, sigma / nu in numpy
                from robustep.ep.evidence import likelihood_gradient

                gk = _device.ep_gradient(res, K_gradient)
                return gk, *_lik_grad(lik, likelihood_gradient(res, lik, self._y))
            gk, gl = log_Z_gradient(res, K_gradient, lik, self._y)
            return gk, *_lik_grad(lik, gl)
        if m == "laplace":
            from robustep.baselines.laplace import laplace_log_marginal_likelihood_gradient

            gk, gl = laplace_log_marginal_likelihood_gradient(res, K_gradient, lik, self._y)
            return gk, *_lik_grad(lik, gl)
        if m == "vb":
            from robustep.baselines.variational import vb_log_marginal_likelihood_gradient

            gk, gl = vb_log_marginal_likelihood_gradient(res, K_gradient, lik, self._y)
            return gk, float(gl[0]), float(gl[1])
        gk, gs = res.gradient(K_gradient)
        return gk, 0.0, gs

    @staticmethod
    def _warm_of(res):
        """The warm start for the next inference from a previous result (or None)."""
        if res is None:
            return None
        if hasattr(res, "log_Z"):
            return res
        if hasattr(res, "mode"):
            return res.mode
        if hasattr(res, "gamma"):
            return res.gamma
        if hasattr(res, "b") and hasattr(res, "a"):
            return res.b
        return None

    # ---------------------------------------------------------- optimisation
    def _optimise(self, kernel, df, scale, optimize_df, rng, n_restarts=None, warm=None):
        """Type-II MAP of (log theta, log sigma[, log nu]); returns (kernel, df, scale).

        ``n_restarts``: extra random starts (default ``n_restarts_optimizer``); ``warm``: a
        previous inference result to start the first start's inference from (EP3 passes
        the neighbouring grid value's).  The first evaluation of every start has the final
        fit's sweep budget (there is nothing to warm-start from yet, and a failed first
        evaluation would leave the optimiser nowhere to go), or ``warm_first_max_iter``
        (:func:`robustep.get_config`) from a warm start followed, if that does not
        converge, by a cold start with the final fit's budget; later ones have
        ``search_max_iter``, all at ``search_tol``.  If no evaluation of
        any start succeeds, the starting values are returned and ``self._search_failed``
        is set (the fit then reports that it did not converge).  ``self._search_res`` is
        the inference at the returned point (None if there is none)."""
        X = self._X
        p = kernel.theta.size
        fit_df = optimize_df and self.method != "gaussian"
        # K and a lazy dK/dlog theta operator (ConstantKernel * RBF), else scikit-learn's
        # kernel call and its dense gradient (robustep/kernels/gradient.py)
        if self.device is None:
            kernel_and_gradient = KernelWithGradient(kernel, X)
        else:  # (ArrayPrior of K, [dK_j]) on the device

            def kernel_and_gradient(theta):
                return _device.prior(kernel.clone_with_theta(theta), X, self._like, True)

        def unpack(x):
            k = kernel.clone_with_theta(x[:p])
            s = float(np.exp(min(x[p], 700.0)))  # the upper bound of log sigma is open
            d = float(np.exp(x[p + 1])) if fit_df else df
            return k, d, s

        must_converge = self.method in ("ep", "fractional", "auto", "laplace")
        settings = get_config()

        def evaluate(x, context):
            s = float(np.exp(min(x[p], 700.0)))
            d = float(np.exp(x[p + 1])) if fit_df else df
            K, Kg = kernel_and_gradient(x[:p])
            warm_start = self._warm_of(context.warm)
            budget = settings.search_max_iter
            if context.first:
                budget = (
                    settings.final_max_iter if warm_start is None else settings.warm_first_max_iter
                )
            res = self._infer(
                K, d, s, warm=warm_start, max_iter=budget, tol=settings.search_tol,
                search=not context.first,
            )  # fmt: skip
            if context.first and warm_start is not None and must_converge and not res.converged:
                # nothing to back off to yet: try the start once more from cold
                res = self._infer(
                    K, d, s, warm=None, max_iter=settings.final_max_iter, tol=settings.search_tol
                )  # fmt: skip
            value = float(res.log_marginal_likelihood)
            # A non-converged EP evidence is not a stationary value and its explicit
            # gradient is wrong, nor is a Laplace evidence away from the mode (its
            # implicit gradient assumes the mode); either is a failed evaluation.
            if not np.isfinite(value) or (must_converge and not res.converged):
                raise EvaluationFailed
            gk, gd, gs = self._gradient(res, Kg, d, s)
            return Evaluation(value, np.concatenate([gk, [gs], [gd] if fit_df else []]), res)

        bounds = np.vstack(
            [
                np.asarray(kernel.bounds, float).reshape(-1, 2),
                np.log([_SCALE_BOUNDS]),
                np.log([_DF_BOUNDS]) if fit_df else np.zeros((0, 2)),
            ]
        )
        # L-BFGS-B takes a full gradient-length first step when every variable is boxed,
        # which throws sigma to its bound on the first iteration (gradients of ~40 are
        # common); leaving the upper bound of log sigma open makes its first step unit
        # length.  Large sigma is harmless for every method.
        opt_bounds = [tuple(b) for b in bounds]
        opt_bounds[p] = (bounds[p, 0], None)
        x0 = np.concatenate([kernel.theta, [np.log(scale)], [np.log(df)] if fit_df else []])
        x0 = np.clip(x0, bounds[:, 0], bounds[:, 1])
        n_restarts = self.n_restarts_optimizer if n_restarts is None else int(n_restarts)
        starts = draw_starts(x0, bounds, n_restarts, rng, radius=2.0, n_coordinates=p)
        search = maximise_evidence(
            evaluate, x0, opt_bounds, optimizer=self.optimizer, starts=starts, warm=warm,
            options={"maxiter": 200, "ftol": settings.search_ftol}, callable_bounds=bounds,
            verbose=bool(getattr(self, "verbose", False)),
        )  # fmt: skip
        # the inference at the best point: a warm start for the final fit
        self._search_res = search.state
        self._searches.append(search)
        if not search.success:
            self._search_failed = True
        self._record_bounds(kernel, search.x, bounds, fit_df)
        return unpack(search.x)

    def _record_bounds(self, kernel, x, bounds, fit_df):
        """Note optimised hyperparameters that ended on a bound (as scikit-learn's GPR does)."""
        names = []
        for hp in kernel.hyperparameters:
            if not hp.fixed:
                k = int(hp.n_elements)
                names += [hp.name] if k == 1 else [f"{hp.name}[{i}]" for i in range(k)]
        names += ["scale"] + (["df"] if fit_df else [])
        for j, name in enumerate(names):
            lo, hi = bounds[j]
            tol = 1e-5 * max(1.0, abs(lo), abs(hi))  # log space, like np.isclose in sklearn
            side = "lower" if x[j] <= lo + tol else "upper" if x[j] >= hi - tol else None
            if side is not None:
                value = float(np.exp(x[j]))
                bound = float(np.exp(lo if side == "lower" else hi))
                if (name, side) not in [(a[0], a[1]) for a in self._at_bounds]:
                    self._at_bounds.append((name, side, value, bound))

    # ----------------------------------------------------------------- fit
    @limits_blas_threads
    def fit(self, X, y):
        """Fit the hyperparameters and the posterior approximation; returns self.

        X : (n, d) inputs; y : (n,) real targets.
        """
        self._validate_params()
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        from robustep.estimators import _sparse

        if _sparse.is_dask_input(X):  # Dask arrays: the sparse model over X's row chunks
            X, y = _sparse.validate_dask(self, X, y)
        else:
            X, y = _validate(self, X, y, reset=True)
        self._like = None
        if self.device is not None:  # dense EP only (estimators/_device.py)
            if self.dtype != "float64":
                raise ValueError(
                    "dtype='float32' does not work with the Student-t likelihood: EP does not "
                    "converge in float32 (the informative sites make I + S K S ill-conditioned; "
                    "docs/benchmarks.md, 'float32 against float64'); use dtype='float64'"
                )
            self._like = _device.check_fit(self, y, methods=_DEVICE_METHODS)
        y = np.asarray(y, dtype=float)
        if (
            self.method in ("mcmc", "gaussian", "fvb")
            and self.df_grid is not None
            and (self.df_grid is not False)
        ):
            raise ValueError(
                f"df_grid (EP3) needs an approximate marginal likelihood; method={self.method!r} "
                "does not support it — use method='ep', 'fractional', 'laplace' or 'vb'"
            )
        if self.normalize_y:
            self._y_mean = float(np.mean(y))
            std = float(np.std(y))
            self._y_std = std if std > 0 and np.isfinite(std) else 1.0
        else:
            self._y_mean, self._y_std = 0.0, 1.0
        self._X = X
        self._y = (y - self._y_mean) / self._y_std
        kernel = (
            ConstantKernel(1.0, (1e-5, 1e5)) * RBF(1.0, (1e-5, 1e5))
            if self.kernel is None
            else clone(self.kernel)
        )
        rng = check_random_state(self.random_state)
        self._at_bounds = []
        self._search_failed = False
        self._searches = []  # the evidence searches of this fit (EP3: one per grid value)
        self.df_grid_ = None
        self.df_weights_ = None
        self.mcmc_diagnostics_ = None
        self.inducing_points_ = None
        if self.inducing_power != 1 and self.inducing_points is None:
            raise ValueError("inducing_power applies to the sparse model: pass inducing_points, "
                             "or inducing_power=1 for the dense model")  # fmt: skip
        if self.inducing_points is not None:  # sparse FITC model: estimators/_sparse.py
            _sparse.fit_regressor(self, kernel, rng, _SCALE_BOUNDS, _DF_BOUNDS)
        elif self.method == "mcmc":
            self._fit_mcmc(kernel, rng)
        elif self.method == "fvb" and self.optimizer is not None:
            self._fit_fvb(kernel)
        elif self.df_grid is not None and self.df_grid is not False:
            self._fit_df_grid(kernel, rng)
        else:
            df, scale = float(self.df), float(self.scale)
            if self.optimizer is not None:
                kernel, df, scale = self._optimise(kernel, df, scale, self.optimize_df, rng)
            self._components = [self._final(kernel, df, scale)]
            self._weights = np.ones(1)
        if self.df_grid_ is not None:  # EP3: one search per grid value
            self.optimizer_result_ = list(self._searches) or None
        else:
            self.optimizer_result_ = self._searches[-1] if self._searches else None
        self._set_attributes()
        return self

    def _final(self, kernel, df, scale, warm=None):
        if self.device is None:
            K = kernel(self._X)
        else:
            K = _device.prior(kernel, self._X, self._like)[0]
        res = self._infer(
            K, df, scale, warm=self._warm_of(warm), max_iter=get_config().final_max_iter
        )
        return {"kernel": kernel, "df": df, "scale": scale, "res": res}

    def _fit_df_grid(self, kernel, rng):
        grid = (
            default_df_grid()
            if self.df_grid is True
            else np.asarray(self.df_grid, dtype=float).reshape(-1)
        )
        if grid.size == 0 or np.any(~np.isfinite(grid)) or np.any(grid <= 0):
            raise ValueError("df_grid must be True or a non-empty array of positive df values")
        comps = [None] * grid.size
        for j, nu, prev in _df_grid_order(grid):
            # EP3: one optimisation per grid value.  The first is the smallest nu, with the
            # random restarts; each other starts from the previous value's mode
            # (hyperparameters and EP sites; §6.2: the mode moves little between grid
            # values), and its first evaluation may run to convergence (_optimise).
            if prev is None:
                k0, s0, warm, n_restarts = kernel, float(self.scale), None, None
            else:
                c = comps[prev]
                # sites from a run that did not converge are no start (a cold one is)
                warm = c["res"] if getattr(c["res"], "converged", False) else None
                k0, s0, n_restarts = c["kernel"], c["scale"], 0
            if self.optimizer is not None:
                k0, _, s0 = self._optimise(
                    k0, float(nu), s0, False, rng, n_restarts=n_restarts, warm=warm
                )
                # the final fit starts from the search's inference at the optimum (the
                # same hyperparameters), not from the neighbouring grid value's
                warm = self._search_res if self._search_res is not None else warm
            comps[j] = self._final(k0, float(nu), s0, warm=warm)
        lml = np.array([c["res"].log_marginal_likelihood for c in comps], float)
        lml = np.where(np.isfinite(lml), lml, -np.inf)
        if not np.any(np.isfinite(lml)):
            lml = np.zeros_like(lml)
        w = np.exp(lml - np.max(lml))
        self._components = comps
        self._weights = w / w.sum()
        self.df_grid_ = grid
        self.df_weights_ = self._weights.copy()

    def _fit_fvb(self, kernel):
        from robustep.baselines.variational import fvb_em

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            k, lik, res, n_it, conv = fvb_em(
                kernel,
                self._X,
                self._y,
                _student_t(self.df, self.scale),
                optimize_df=self.optimize_df,
                bounds_df=_DF_BOUNDS,
            )
        res.converged = res.converged and conv
        self._components = [
            {"kernel": k, "df": float(lik.df), "scale": float(lik.scale), "res": res}
        ]
        self._weights = np.ones(1)

    def _fit_mcmc(self, kernel, rng):
        from robustep.baselines.mcmc import gibbs_student_t_gp

        sample_h = self.optimizer is not None
        res = gibbs_student_t_gp(
            kernel,
            self._X,
            self._y,
            df=float(self.df),
            scale=float(self.scale),
            n_samples=int(self.n_samples),
            sample_hyperparameters=sample_h,
            sample_df=bool(self.optimize_df) and sample_h,
            hyper_every=int(self.mcmc_hyper_every),
            hyper_sampler=self.mcmc_hyper_sampler,
            random_state=rng,
        )
        theta = res.kernel_theta.mean(axis=0)
        self._mcmc = res
        self._components = [
            {
                "kernel": kernel.clone_with_theta(theta),
                "df": float(np.mean(res.df)),
                "scale": float(np.mean(res.scale)),
                "res": res,
            }
        ]
        self._weights = np.ones(1)
        self.mcmc_diagnostics_ = {
            "rhat": dict(res.rhat),
            "ess": dict(res.ess),
            "hyper_acceptance": res.hyper_acceptance,
        }

    def _set_attributes(self):
        from robustep.diagnostics import clear_loo_attributes

        clear_loo_attributes(self)  # set again below for the methods with LOO
        self.method_used_ = self.method
        best = self._components[int(np.argmax(self._weights))]
        res = best["res"]
        self.hyperparameters_at_bounds_ = [(a[0], a[1]) for a in self._at_bounds]
        if self._at_bounds:
            text = "; ".join(
                f"{name} = {value:.3g} is at its {side} bound {bound:.3g}"
                for name, side, value, bound in self._at_bounds
            )
            warnings.warn(
                f"StudentTGPRegressor(method={self.method!r}): optimised hyperparameters ended "
                f"on their bounds ({text}). The fit may be degenerate (too few or constant "
                "data); widen the bounds (kernel bounds; sigma in [0.01, 100], nu in "
                "[1.05, 1000] standardised units) or add data and fit again.",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.kernel_ = best["kernel"]
        self.df_ = float(best["df"])
        self.scale_ = float(best["scale"])
        self.X_train_ = self._X
        self.y_train_ = self._y * self._y_std + self._y_mean
        if self.method == "mcmc":
            self.converged_ = bool(all(np.isfinite(v) and v < 1.1 for v in res.rhat.values()))
            self.n_iter_ = int(res.n_iter)
            self.log_marginal_likelihood_value_ = None
            self.site_precision_ = self.site_shift_ = None
            self.negative_precision_ = np.zeros(self._y.size, dtype=bool)
            self.cavity_mean_ = self.cavity_var_ = None
            return
        self.converged_ = bool(all(bool(c["res"].converged) for c in self._components))
        if self._search_failed:
            self.converged_ = False
        self.n_iter_ = int(sum(int(c["res"].n_iter) for c in self._components))
        lml = np.array([float(c["res"].log_marginal_likelihood) for c in self._components])
        lml = lml[np.isfinite(lml)]
        if lml.size == 0:
            self.log_marginal_likelihood_value_ = -np.inf
        else:  # log of the (grid-)averaged evidence
            mx = lml.max()
            self.log_marginal_likelihood_value_ = float(mx + np.log(np.mean(np.exp(lml - mx))))
        if len(self._components) == 1:
            self.log_marginal_likelihood_value_ = float(res.log_marginal_likelihood)
        prec, shift = self._sites(res)
        self.site_precision_, self.site_shift_ = prec, shift
        self.negative_precision_ = prec < 0
        # Cavity (leave-one-out) moments (§7): q(f_i) / t~_i(f_i).
        q_prec = 1.0 / np.maximum(res.var, 1e-300)
        cav_prec = q_prec - prec
        ok = cav_prec > 0
        cv = np.where(ok, 1.0 / np.where(ok, cav_prec, 1.0), np.nan)
        cm = np.where(ok, (res.mean * q_prec - shift) * np.where(ok, cv, 0.0), np.nan)
        self.cavity_mean_ = cm * self._y_std + self._y_mean
        self.cavity_var_ = cv * self._y_std**2
        self.method_used_ = getattr(res, "method_used", self.method)
        if self.method in _LOO_METHODS:
            from robustep import diagnostics
            from robustep.likelihoods import Gaussian

            diagnostics.set_regressor_loo(
                self,
                [
                    (c["res"], Gaussian(c["scale"] ** 2), np.inf, c["scale"])
                    if self.method == "gaussian"
                    else (c["res"], _student_t(c["df"], c["scale"]), c["df"], c["scale"])
                    for c in self._components
                ],
                self._weights, self._y, self._y_mean, self._y_std,
            )  # fmt: skip
        if self._search_failed:
            warnings.warn(
                f"StudentTGPRegressor(method={self.method!r}): the hyperparameter search "
                "found no point where the inference converged, so the hyperparameters were "
                "not optimised (converged_ is False); try a larger scale, method='auto' or "
                "method='fractional'",
                ConvergenceWarning,
                stacklevel=3,
            )
        elif any(search.stuck_reason() for search in self._searches):
            warn_if_stuck(
                next(search for search in self._searches if search.stuck_reason()),
                "pass another starting kernel or scale, or set n_restarts_optimizer > 0",
                stacklevel=4,
            )
        elif not self.converged_ and self.method == "auto":
            msgs = [c["res"].message for c in self._components if not c["res"].converged]
            warnings.warn(f"StudentTGPRegressor: {msgs[0]}", ConvergenceWarning, stacklevel=3)
        elif not self.converged_:
            warnings.warn(
                f"StudentTGPRegressor(method={self.method!r}): the posterior approximation did "
                "not converge; results may be inaccurate (try optimize_df=False, a larger "
                "scale, or method='fractional')",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _sites(self, res):
        if hasattr(res, "site_precision") and hasattr(res, "site_shift"):
            return np.asarray(res.site_precision, float), np.asarray(res.site_shift, float)
        if hasattr(res, "mode"):  # Laplace: log p ≈ -W f^2/2 + (W f^ + d1) f
            return res.W.copy(), res.W * res.mode + res.grad_log_lik
        noise = res.gamma if hasattr(res, "gamma") else res.noise
        return 1.0 / noise, self._y / noise

    # -------------------------------------------------------------- predict
    def _component_moments(self, X):
        """Per-component latent (means (J, m), vars (J, m)) in standardised units."""
        means, vars_ = [], []
        for c in self._components:
            k = c["kernel"]
            if self.method == "mcmc":
                m, v = c["res"].predict(X, max_draws=200)
            elif self.inducing_points_ is not None:  # sparse: row batches
                from robustep.estimators import _sparse

                m, v = _sparse.latent_moments(c["res"], k, self.inducing_points_, X)
            elif self.device is not None:  # K(X, X_train) and the solves on the device
                m, v = _device.predict_latent(k, X, self._X, c["res"], self._like)
            else:
                m, v = c["res"].predict(k(X, self._X), k.diag(X))
            means.append(np.asarray(m, float))
            vars_.append(np.maximum(np.asarray(v, float), 1e-12))
        return np.array(means), np.array(vars_)

    def _predictive_mixture(self, X):
        """The predictive of y at X (m, d) in standardised units, a
        :class:`robustep.likelihoods.PredictiveMixture` over the EP3 grid or MCMC draws."""
        if self.method == "mcmc":
            M, V, idx = self._mcmc.predictive_components(X, max_draws=200)
            J = M.shape[0]
            liks = [
                student_t_noise(nu, s)
                for nu, s in zip(self._mcmc.df[idx], self._mcmc.scale[idx], strict=True)
            ]
            return predictive_mixture(liks, M, V, np.full(J, 1.0 / J))
        M, V = self._component_moments(X)
        gauss = self.method == "gaussian"
        liks = [student_t_noise(np.inf if gauss else c["df"], c["scale"]) for c in self._components]
        return predictive_mixture(liks, M, V, self._weights)

    def predict_quantiles(self, X, q):
        """Quantiles of the predictive distribution of the *observation* y at X.

        The predictive of y is the Student-t likelihood (nu = ``df_``, sigma = ``scale_``)
        convolved with the Gaussian latent q(f* | D) (Jylänki et al. 2011, eq. 3 and
        §2), mixed over the EP3 grid or the MCMC draws; it is not Gaussian, so its
        quantiles are computed by quadrature over the scale-mixture variable and Newton
        inversion (:meth:`robustep.likelihoods.PredictiveMixture.quantiles`).
        ``method="gaussian"``: the Gaussian N(mean, var_f + scale^2).

        X : (m, d); q : float or array-like of probabilities in [0, 1].
        Returns (m,) for a scalar q, else (m, len(q)), in target units.
        """
        check_is_fitted(self)
        scalar = np.ndim(q) == 0
        try:
            qa = np.asarray(q, dtype=float).reshape(-1)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"q must be a float or an array-like of floats in [0, 1], got {q!r}"
            ) from err
        if qa.size == 0 or not np.all(np.isfinite(qa)) or np.any((qa < 0) | (qa > 1)):
            raise ValueError(f"q must contain probabilities in [0, 1], got {q!r}")
        X = _validate(self, X, reset=False)
        Q = self._predictive_mixture(X).quantiles(qa)
        Q = Q * self._y_std + self._y_mean
        return Q[:, 0] if scalar else Q

    def predict_interval(self, X, coverage=0.95):
        """Central predictive interval of the observation y at X: (lower (m,), upper (m,)).

        The (1 - coverage)/2 and (1 + coverage)/2 quantiles of :meth:`predict_quantiles`
        (Student-t noise convolved with the latent posterior); ``coverage`` in (0, 1).
        Unlike ``predict(X, return_std=True)``, which gives the latent f's std, this
        interval contains a new noisy y with probability ``coverage`` under the model.
        """
        if (
            isinstance(coverage, bool)
            or not isinstance(coverage, numbers.Real)
            or not (0.0 < float(coverage) < 1.0)
        ):
            raise ValueError(f"coverage must be a number in (0, 1) such as 0.95, got {coverage!r}")
        c = float(coverage)
        Q = self.predict_quantiles(X, [0.5 * (1.0 - c), 0.5 * (1.0 + c)])
        return Q[:, 0], Q[:, 1]

    def predict(self, X, return_std=False):
        """Posterior mean (and std) of the *latent* function f at X (m, d), in target units.

        Returns mean (m,), and with ``return_std`` also std (m,): the standard deviation
        of q(f* | D), **not** of a new observation y* (scikit-learn's
        GaussianProcessRegressor includes the noise only through a WhiteKernel).  The
        Student-t predictive of y has heavy tails and may have no finite variance
        (nu <= 2); use :meth:`predict_interval` or :meth:`predict_quantiles` for y.
        For EP3 and MCMC the moments are those of the mixture over the grid or draws.
        """
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        M, V = self._component_moments(X)
        w = self._weights[:, None]
        mean = np.sum(w * M, axis=0)
        var = np.sum(w * (V + M**2), axis=0) - mean**2
        mean = mean * self._y_std + self._y_mean
        if not return_std:
            return mean
        return mean, np.sqrt(np.maximum(var, 1e-12)) * self._y_std

    def predict_log_density(self, X, y):
        """log int p(y_i | f) q(f | x_i) df per test point, shape (m,) (§6.1).

        For MCMC the density is averaged over posterior draws; for EP3 over the grid.
        """
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        y = np.asarray(y, dtype=float).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
        ys = (y - self._y_mean) / self._y_std
        if self.method == "mcmc":
            lp = self._mcmc.log_predictive_density(X, ys, max_draws=200)
        else:
            # each component's log int p(y|f) N(f|m, v) df (Student-t: the tilted log Z at
            # power 1), mixed over the EP3 grid
            lp = self._predictive_mixture(X).log_density(ys)
        return lp - np.log(self._y_std)

    def loo_score(self):
        """Mean leave-one-out log predictive density of the training targets (target units).

        mean_i log p(y_i | y_-i) from the cavities (see ``loo_log_predictive_``); raises
        AttributeError for methods without it.
        """
        from robustep import diagnostics

        return diagnostics.loo_score(self, f"method in {_LOO_METHODS}")

    def score(self, X, y, sample_weight=None):
        """Mean log predictive density (MLPD) of y at X (higher is better)."""
        lp = self.predict_log_density(X, y)
        return float(np.average(lp, weights=sample_weight))
