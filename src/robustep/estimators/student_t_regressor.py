"""Robust GP regression with a Student-t likelihood (Jylänki, Vanhatalo & Vehtari 2011).

``StudentTGPRegressor`` is :class:`~robustep.estimators.GPRegressor` with the Student-t
likelihood, whose parameters ``df`` and ``scale`` are its own:

* ``"auto"`` (default): EP's fixed point found by parallel EP, then damped EP, then the
  double loop, and power EP as the last resort (:mod:`robustep.ep.chain`);
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
units unless ``likelihood_bounds`` says otherwise — the lower bound keeps EP away from
near-noise-free fits where it converges very slowly; during the search EP is
warm-started from the previous evaluation's sites, runs at most 30 sweeps to a site
tolerance of 1e-2 per evaluation, and a non-converged evaluation counts as failed; the
final fit runs to ``tol``, 1e-4 by default, within ``max_iter`` sweeps).
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

from sklearn.utils._param_validation import Interval

from robustep.estimators._regressor_grid import default_df_grid
from robustep.estimators._regressor_predictive import student_t_gaussian_quantiles
from robustep.estimators._regressor_search import DEFAULT_BOUNDS, resolve_bounds
from robustep.estimators.gp_regressor import GPRegressor
from robustep.likelihoods import StudentT

__all__ = ["StudentTGPRegressor", "default_df_grid", "student_t_gaussian_quantiles"]

_DF_BOUNDS = DEFAULT_BOUNDS["df"]
_SCALE_BOUNDS = DEFAULT_BOUNDS["scale"]


class StudentTGPRegressor(GPRegressor):
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
        :mod:`robustep.ep.chain` (parallel EP, then damped EP at 0.8, then the double
        loop with 10 inner iterations, then power EP with alpha = 0.5, a different
        approximation used only where none of EP's stages converged; ``method_used_`` says
        which converged).  The method names the *approximation* and "auto" does not
        change it, so it can be the default: on the hard grid of
        ``benchmarks/auto_grid.py`` (nu = 1.5, near-duplicate inputs, large signal
        variance) "ep" — exactly the paper's §4 algorithm, kept for reproductions —
        stalls where "auto" converges (docs/reliability.md, "method='auto'").  A
        ConvergenceWarning is raised only when every stage failed, naming them.
        "fractional" (power EP) and the non-EP approximations have no "auto" variant.
    power : float in (0, 1]
        Fractional EP power eta, used by ``method="fractional"``.
    max_iter : int >= 1, default 1000
        Maximum EP sweeps of the final fit at the found hyperparameters (Newton
        iterations for "laplace", at most 100); the search's runs keep their
        :func:`robustep.get_config` budgets (``search_max_iter``).  As in
        :class:`~robustep.estimators.GPRegressor`.
    tol : float > 0, default 1e-4
        The final fit's EP tolerance on the largest change of site natural parameters
        (the search's runs use ``search_tol``, 1e-2).  Dense model only.
    likelihood_bounds : None or dict
        Bounds of sigma and nu in the search: ``{"scale": (low, high), "df": (low,
        high)}`` (either may be omitted, or be "fixed"); the defaults are sigma in
        [0.01, 100] and nu in [1.05, 1000] (standardised units with ``normalize_y``).
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
    inducing_power : "auto" or float in (0, 1], default "auto"
        With ``inducing_points``: the power α of power EP on the pseudo-point posterior
        (Bui, Yan & Turner 2017; docs/derivations/sparse.md §8), applied to each exact
        factor p(y_i | f_i) while p(f_i | u) is kept exact.  1: FITC-EP; towards 0: the
        variational free energy (Titsias' VFE).  "auto": α = 0.5 when the inducing inputs
        are optimised (``optimize_inducing`` with an ``optimizer``), X is in memory and the
        method is "auto" or "ep"; α = 1 otherwise (fixed inducing inputs, Dask X, method
        "fractional").  With free inducing inputs the FITC evidence rewards an over-fitted
        model (Bauer, van der Wilk & Rasmussen 2016; measured for classification in
        :class:`~robustep.GPClassifier`'s ``inducing_power``: α = 1 drove the amplitude
        up to 1000 times dense EP's, α = 0.5 stayed near it).  The fitted α is
        ``inducing_power_``.  Not the fractional ``power`` η of method "fractional", which
        tempers the sites under the fixed FITC prior; a number α < 1 needs method "auto"
        or "ep" and in-memory X.  ``site_precision_`` / ``site_shift_`` are then the
        effective factors of f_i whose removal gives the leave-one-out cavity
        (``robustep.ep.pseudo_point.PseudoPointEPResult.latent_view``).
    learner : {"auto", "full_batch", "stochastic"} or StochasticLearner, default "auto"
        What learns the sparse model's kernel, sigma (nu with ``optimize_df``) and
        inducing inputs: the full-batch evidence search, or stochastic power EP with
        minibatch gradients (:class:`~robustep.StochasticLearner`); "auto" picks the
        latter from ``robustep.get_config().stochastic_learner_min_n`` (10000) training
        points.  As in :class:`~robustep.estimators.GPRegressor`.
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
        a floor in EP's residual (0.10 at n = 500, docs/performance.md#gpu "float32 against
        float64"; 0.075 at n = 60 with the tests' outliers) far above the tolerance:
        EP never converges, the log evidence is off by ~0.1, and every evaluation of the
        hyperparameter search would count as failed.  A clear error is better than a
        fit that silently keeps its starting hyperparameters.

    verbose : bool, default False
        Print one line per evaluation of the hyperparameter search to stderr (evaluation
        count, failures, approximate log evidence, elapsed time); quiet otherwise.  The
        same lines are INFO records of the ``robustep.search`` logger.

    Attributes
    ----------
    kernel_, df_, scale_ : fitted hyperparameters; likelihood_ : the fitted StudentT.
    inducing_points_ : (m, n_features) fitted inducing inputs, or None (dense model).
    inducing_power_ : the power α the sparse model ran with (``inducing_power``
        resolved), or None (dense model).
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
    method_used_ : for "auto" the stage that converged ("ep", "damped", "double_loop",
        "power");
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
        **{k: v for k, v in GPRegressor._parameter_constraints.items() if k != "likelihood"},
        "df": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "scale": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "optimize_df": ["boolean"],
    }

    def __init__(
        self,
        kernel=None,
        *,
        df=4.0,
        scale=0.5,
        method="auto",
        power=0.5,
        max_iter=1000,
        tol=1e-4,
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
        inducing_power="auto",
        likelihood_bounds=None,
        verbose=False,
        learner="auto",
    ):
        super().__init__(
            kernel, likelihood_bounds=likelihood_bounds, method=method, power=power,
            max_iter=max_iter, tol=tol, df_grid=df_grid, optimizer=optimizer,
            n_restarts_optimizer=n_restarts_optimizer,
            normalize_y=normalize_y, n_samples=n_samples, mcmc_hyper_every=mcmc_hyper_every,
            mcmc_hyper_sampler=mcmc_hyper_sampler, random_state=random_state,
            inducing_points=inducing_points, optimize_inducing=optimize_inducing,
            device=device, dtype=dtype, inducing_power=inducing_power, verbose=verbose,
            learner=learner,
        )  # fmt: skip
        # the likelihood is the Student-t, whose df and scale are this class's parameters
        del self.likelihood
        self.df = df
        self.scale = scale
        self.optimize_df = optimize_df

    def _likelihood_and_bounds(self):
        """StudentT(df, scale); nu is searched only with ``optimize_df``."""
        lik = StudentT(df=float(self.df), scale=float(self.scale))
        bounds = resolve_bounds(lik, self.likelihood_bounds)
        if not self.optimize_df:
            bounds["df"] = "fixed"
        return lik, bounds

    def _set_likelihood_attributes(self, likelihood):
        super()._set_likelihood_attributes(likelihood)
        self.df_ = float(likelihood.df)
        self.scale_ = float(likelihood.scale)

    # ------------------------------------------- the core at fixed (df, scale)
    def _inference_core(self):
        from robustep.estimators._regressor_inference import InferenceCore

        return InferenceCore(self.method, float(self.power), self._y, self.device)

    def _infer(self, K, df, scale, warm=None, max_iter=1000, tol=1e-4, search=False):
        """The method's inference on prior K at StudentT(df, scale) and the targets
        ``self._y`` (:meth:`InferenceCore.infer
        <robustep.estimators._regressor_inference.InferenceCore.infer>`)."""
        lik = StudentT(df=float(df), scale=float(scale))
        return self._inference_core().infer(K, lik, warm, max_iter, tol, search)

    def _gradient(self, res, K_gradient, df, scale):
        """(d/dlog theta_kernel (p,), d/dlog nu, d/dlog sigma) of the approximate evidence."""
        lik = StudentT(df=float(df), scale=float(scale))
        gk, gl = self._inference_core().gradient(res, K_gradient, lik)
        return gk, gl.get("df", 0.0), gl.get("scale", 0.0)

    @property
    def _components(self):
        """The fitted components as dicts: kernel, df, scale, res."""
        return [
            {"kernel": c.kernel, "df": float(c.likelihood.df),
             "scale": float(c.likelihood.scale), "res": c.res}
            for c in self._fit.components
        ]  # fmt: skip

    @property
    def _mcmc(self):
        """The MCMC result of a ``method="mcmc"`` fit (None otherwise)."""
        return self._fit.mcmc
