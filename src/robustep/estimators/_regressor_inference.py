"""Inference at fixed hyperparameters for the GP regressors, one method at a time.

:class:`InferenceCore` runs the approximation a regressor's ``method`` names on a prior
(a dense K, a :class:`robustep.posterior.GaussianPrior`, or a FITC prior) with a given
likelihood, and gives the gradient of its approximate log evidence with respect to the
kernel's log hyperparameters and the likelihood's log parameters
(``hyperparameter_names``).  It holds no estimator and writes no attributes: the public
classes (estimators/gp_regressor.py) build it from their parameters.

Methods (Jylänki, Vanhatalo & Vehtari 2011): "auto" (EP's fixed point by the chain of
:mod:`robustep.ep.chain`), "ep" (robust parallel EP with the double-loop fallback, §4),
"fractional" (power EP, §3.7) and "laplace" (§3.2) work for any likelihood with the
moments or derivatives they need; "vb", "fvb" (§3.4, §3.3), "mcmc" (§3.1) and the exact
"gaussian" reference use the Student-t's scale-mixture form.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep.estimators import _device
from robustep.likelihoods import Gaussian, Likelihood, StudentT
from robustep.posterior.factory import make_prior

METHODS = ("auto", "ep", "fractional", "laplace", "vb", "fvb", "mcmc", "gaussian")
#: methods that need tilted moments (any likelihood has them)
EP_METHODS = ("auto", "ep", "fractional")
#: methods built on the Student-t's scale-mixture form (StudentT likelihood only)
STUDENT_T_METHODS = ("vb", "fvb", "mcmc", "gaussian")
#: methods whose fit gives the leave-one-out diagnostics (robustep.diagnostics)
LOO_METHODS = ("auto", "ep", "fractional", "gaussian")
#: methods that run on ``device`` (dense EP on an ArrayPrior; estimators/_device.py)
DEVICE_METHODS = EP_METHODS


def check_method(method, likelihood, df_grid=False):
    """Raise ValueError when ``method`` (or EP3's grid) cannot use ``likelihood``."""
    name = type(likelihood).__name__
    if not isinstance(likelihood, StudentT):
        if method in STUDENT_T_METHODS:
            raise ValueError(
                f"method={method!r} uses the Student-t's scale-mixture form and needs the "
                f"StudentT likelihood, not {name}; with {name} use method in "
                f"{supported_methods(likelihood)}"
            )
        if df_grid:
            raise ValueError(
                f"df_grid (EP3) mixes over the Student-t's degrees of freedom and needs the "
                f"StudentT likelihood, not {name}; pass df_grid=None"
            )
    if method == "laplace" and not has_derivatives(likelihood):
        raise ValueError(
            f"method='laplace' needs log_prob_derivatives with a nonzero second derivative "
            f"(the curvature of log p(y | f)), which {name} does not have; use method in "
            f"{supported_methods(likelihood)}"
        )


def has_derivatives(likelihood) -> bool:
    """Whether ``likelihood`` gives the Laplace method what it needs: an implemented
    ``log_prob_derivatives`` whose second derivative is not identically 0 (the Laplace
    likelihood's is 0 away from its kink, so its sites would carry no curvature)."""
    if type(likelihood).log_prob_derivatives is Likelihood.log_prob_derivatives:
        return False
    _, _, d2, _ = likelihood.log_prob_derivatives(np.array([1.0, -1.0]), np.array([0.3, 0.2]))
    return bool(np.any(np.asarray(d2) != 0))


def supported_methods(likelihood) -> tuple[str, ...]:
    """The methods that work with ``likelihood``."""
    if isinstance(likelihood, StudentT):
        return METHODS
    return EP_METHODS + (("laplace",) if has_derivatives(likelihood) else ())


class GaussianGP:
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


def warm_of(res):
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


def sites_of(res, y):
    """(site precision (n,), site shift (n,)) of any method's result on targets y (n,).

    EP sites; W and W f^ + d1 for Laplace (log p ≈ -W f^2/2 + (W f^ + d1) f); 1/gamma and
    y/gamma for VB / fVB.
    """
    if hasattr(res, "site_precision") and hasattr(res, "site_shift"):
        return np.asarray(res.site_precision, float), np.asarray(res.site_shift, float)
    if hasattr(res, "mode"):
        return res.W.copy(), res.W * res.mode + res.grad_log_lik
    noise = res.gamma if hasattr(res, "gamma") else res.noise
    return 1.0 / noise, y / noise


@dataclass(frozen=True)
class InferenceCore:
    """One method's inference and evidence gradient on standardised targets.

    method : one of :data:`METHODS`; power : fractional EP's eta (``"fractional"``);
    y : (n,) standardised targets; device : None or a PyTorch device string (the kernel
    part of the EP gradient is computed there); prior : ``"dense"`` (K as an (n, n)
    array) or ``"diagonal_plus_low_rank"`` (K = diag(d) + U U^T read off the kernel,
    EP methods: :meth:`structured_prior`).
    """

    method: str
    power: float
    y: np.ndarray
    device: str | None = None
    prior: str = "dense"

    def structured_prior(self, kernel, X, eval_gradient=True):
        """The ``"diagonal_plus_low_rank"`` prior of ``kernel`` at X (n, d) and, with
        ``eval_gradient``, the derivatives (dd (n, p), dU (n, r, p)) of d and U w.r.t.
        ``kernel.theta`` that :meth:`gradient` takes in place of dK."""
        from robustep.posterior.low_rank import DiagonalPlusLowRankPrior, kernel_structure

        d, U, *gradient = kernel_structure(kernel, X, eval_gradient=eval_gradient)
        return DiagonalPlusLowRankPrior(d, U), (tuple(gradient) if eval_gradient else None)

    def observation_likelihood(self, likelihood):
        """The noise model of a new observation: Gaussian N(0, sigma^2) for ``"gaussian"``."""
        if self.method == "gaussian":
            return Gaussian(noise_variance=float(likelihood.scale) ** 2)
        return likelihood

    def infer(self, K, likelihood, warm=None, max_iter=1000, tol=1e-4, search=False):
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
        y, m = self.y, self.method
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            if m in EP_METHODS:
                return self._ep(K, likelihood, warm, max_iter, tol, search)
            if m == "laplace":
                from robustep.baselines.laplace import laplace_approximation

                return laplace_approximation(
                    K, y, likelihood, init=warm, max_iter=min(max_iter, 100)
                )
            if m == "vb":
                from robustep.baselines.variational import variational_bounds

                return variational_bounds(K, y, likelihood, init=warm)
            if m == "fvb":
                from robustep.baselines.variational import factorized_vb

                return factorized_vb(K, y, likelihood, init=warm)
            return GaussianGP(K, y, float(likelihood.scale) ** 2)

    def _ep(self, K, likelihood, warm, max_iter, tol, search):
        from robustep.ep import InferenceStrategy, expectation_propagation, run_chain

        if isinstance(K, np.ndarray):
            # K comes from a scikit-learn kernel (symmetric PSD by construction): the dense
            # prior without the engine's O(n^3) PSD check, once per optimiser evaluation
            K = make_prior(None, None, "dense", K=K)
        # a search run never starts the double loop and has bounded work
        strategy = (
            InferenceStrategy.search_run(max_iter) if search else InferenceStrategy.auto(max_iter)
        )
        if self.method == "auto":  # parallel -> damped -> double loop (ep/chain.py)
            res = run_chain(K, self.y, likelihood, strategy, tol=tol, init=warm)
        else:
            power = 1.0 if self.method == "ep" else float(self.power)
            res = expectation_propagation(
                K, self.y, likelihood, power=power, init=warm, tol=tol,
                **strategy.engine_options(),
            )  # fmt: skip
        res.log_marginal_likelihood = float(res.log_Z)
        return res

    def gradient(self, res, K_gradient, likelihood):
        """(d/dlog theta_kernel (p,), {likelihood parameter name: d/dlog parameter}) of
        the approximate log evidence at ``res``."""
        m, y = self.method, self.y
        names = tuple(likelihood.hyperparameter_names)
        if m in EP_METHODS:
            from robustep.ep import log_Z_gradient

            if self.prior == "diagonal_plus_low_rank":  # chain rule through d and U
                from robustep.ep.evidence import likelihood_gradient
                from robustep.posterior.low_rank import structure_evidence_gradient

                gk = structure_evidence_gradient(res.posterior, *K_gradient)
                gl = likelihood_gradient(res, likelihood, y)
            elif self.device is not None:  # kernel part on the device, the likelihood's in numpy
                from robustep.ep.evidence import likelihood_gradient

                gk = _device.ep_gradient(res, K_gradient)
                gl = likelihood_gradient(res, likelihood, y)
            else:
                gk, gl = log_Z_gradient(res, K_gradient, likelihood, y)
        elif m == "laplace":
            from robustep.baselines.laplace import laplace_log_marginal_likelihood_gradient

            gk, gl = laplace_log_marginal_likelihood_gradient(res, K_gradient, likelihood, y)
        elif m == "vb":
            from robustep.baselines.variational import vb_log_marginal_likelihood_gradient

            gk, gl = vb_log_marginal_likelihood_gradient(res, K_gradient, likelihood, y)
            names = ("df", "scale")
        else:  # "gaussian": only the noise scale sigma
            gk, gs = res.gradient(K_gradient)
            return gk, {"scale": float(gs)}
        return gk, {n: float(g) for n, g in zip(names, np.asarray(gl, float), strict=False)}
