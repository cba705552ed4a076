"""Power EP on the pseudo-point posterior (Bui, Yan & Turner, JMLR 2017): the α family.

The approximate posterior keeps the prior conditional exact and approximates every data
factor by a Gaussian factor of the inducing values u (docs/derivations/sparse.md §8):

    q(f) ∝ p(f_≠u | u) p(u) ∏_i t_i(u),     t_i(u) = exp(γ_i h_i − β_i h_i² / 2),

with ``h_i = E[f_i | u] = v_iᵀ u`` (``u`` whitened, ``v_i`` the rows of
``V = K_nm L_mm^-T``), so that ``f_i = h_i + g_i``, ``g_i ~ N(0, d_i)``,
``d_i = k_ii − ‖v_i‖²`` (the FITC diagonal Λ).  Power EP with power α removes ``t_i^α``
and puts back ``p(y_i | f_i)^α`` with ``f_i | u`` exact (eqs. P3–P6):

* the prior over ``h = V u`` is ``N(0, Q_nn)``: :class:`~robustep.posterior.sparse.FITCPrior`
  with Λ = 0 (:func:`pseudo_point_prior`), whose posterior for Gaussian sites on ``h`` is
  the FITC posterior of eqs. S6–S9 with ``c_i = 1``;
* the tilted normaliser of site i at cavity ``h_i ~ N(m, v)`` is
  ``Z_i = ∫ p(y_i | f)^α N(f | m, v + d_i) df`` (eq. P4), the likelihood's own power-α
  tilted integral with the cavity variance widened by ``d_i``;
  :class:`PseudoPointLikelihood` forms it and maps the tilted moments of ``f`` back to
  those of ``h`` (eq. P5);
* the engine (:func:`robustep.ep.expectation_propagation`) runs unchanged with its
  power η set to α: cavity ``q / t_i^α`` and site update ``(tilted − cavity) / α`` on h.

α = 1 is FITC-EP (the same fixed point and log Z as EP on
:class:`~robustep.posterior.sparse.FITCPrior`); α → 0 tends to the variational free
energy (Titsias 2009).  This α is **not** the engine's fractional ``power`` η on the FITC
prior: η tempers the likelihood sites under the fixed FITC covariance
``Q_nn + diag(d)`` (and η → 0 stays on that prior), α tempers the exact factor
``p(y_i | f_i)`` while ``p(f_i | u)`` is kept exact, which moves the model itself from FITC
(α = 1) to VFE (α → 0).

Per-site data: ``d_i`` travels with the targets, packed as an (n, 2) array
``[y_i, d_i]`` (:meth:`PseudoPointLikelihood.pack`), so every row selection the engine makes
(``y[valid]`` when some cavities are improper) keeps each ``d_i`` with its ``y_i``.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers

import numpy as np

from robustep.ep.chain import run_chain
from robustep.ep.engine import expectation_propagation
from robustep.ep.sparse_evidence import fitc_log_Z_gradient
from robustep.ep.state import EPResult
from robustep.likelihoods.base import Likelihood
from robustep.posterior.sparse import FITCPrior

__all__ = [
    "PseudoPointEPResult",
    "PseudoPointLikelihood",
    "check_inducing_power",
    "pseudo_point_log_Z_gradient",
    "pseudo_point_power_ep",
    "pseudo_point_prior",
]


def check_inducing_power(inducing_power) -> float:
    """Return α as a float; ValueError unless it is a real number in (0, 1]."""
    if isinstance(inducing_power, bool) or not isinstance(inducing_power, numbers.Real):
        raise ValueError(
            f"inducing_power must be a number in (0, 1] (1 = FITC-EP, towards 0 = the "
            f"variational free energy), got {inducing_power!r}"
        )
    alpha = float(inducing_power)
    if not (0.0 < alpha <= 1.0):
        raise ValueError(
            f"inducing_power must lie in (0, 1] (1 = FITC-EP, towards 0 = the variational "
            f"free energy; for the VFE limit use a small value such as 1e-3), got "
            f"{inducing_power!r}"
        )
    return alpha


# ------------------------------------------------------------------------ the prior on h
def pseudo_point_prior(prior: FITCPrior) -> FITCPrior:
    """The prior N(0, Q_nn) of ``h = E[f | u]`` from a FITC prior (eq. P2).

    Returns a new :class:`FITCPrior` sharing ``L_mm`` and ``V`` with ``prior`` (neither
    is copied nor modified), with ``Lambda = 0`` and the attribute ``conditional_var``
    (n,) = ``prior.Lambda``, the variances ``d_i`` of ``f_i | u``.  Its posteriors are the
    FITC posteriors of eqs. S6–S9 with ``c_i = 1``: O(n m²), no n × n array.
    """
    from robustep.posterior._dask import DaskFITCPrior

    if isinstance(prior, DaskFITCPrior):
        raise ValueError(
            "inducing_power < 1 is not implemented for Dask inputs; compute X into memory, "
            "or use inducing_power=1 (FITC-EP)"
        )
    if not isinstance(prior, FITCPrior):
        raise TypeError(
            f"pseudo_point_prior needs a robustep.posterior.FITCPrior, got {type(prior).__name__}"
        )
    new = copy.copy(prior)
    new.conditional_var = np.array(prior.Lambda, dtype=float)
    new.Lambda = np.zeros_like(new.conditional_var)
    return new


# ------------------------------------------------------------------ the likelihood on h
class PseudoPointLikelihood(Likelihood):
    """``p(y_i | f_i)`` seen from ``h_i = E[f_i | u]``: ``f_i = h_i + g_i``, ``g_i ~ N(0, d_i)``.

    Targets are (n, 2) arrays ``[y_i, d_i]`` (:meth:`pack`).  At a cavity ``h_i ~ N(m, v)``
    the tilted normaliser is the base likelihood's power tilted integral at the widened
    cavity ``N(f | m, V)``, ``V = v + d_i`` (eq. P4), and the tilted moments of h follow
    from those of f, ``(m̂_f, v̂_f)`` (eq. P5):

        m̂_h = m + (v / V)(m̂_f − m),      v̂_h = v d_i / V + (v / V)² v̂_f.

    Parameters
    ----------
    base : the :class:`~robustep.likelihoods.Likelihood` of ``y_i`` given ``f_i``.
    """

    def __init__(self, base):
        if not isinstance(base, Likelihood):
            raise TypeError(
                f"base must be a robustep.likelihoods.Likelihood, got {type(base).__name__}"
            )
        self.base = base

    @property
    def hyperparameter_names(self):
        return self.base.hyperparameter_names

    @staticmethod
    def pack(y, conditional_var) -> np.ndarray:
        """(n, 2) targets ``[y_i, d_i]`` from targets y (n,) and variances d (n,) (copies)."""
        y = np.asarray(y, dtype=float)
        d = np.asarray(conditional_var, dtype=float)
        if y.ndim != 1 or d.shape != y.shape:
            raise ValueError(
                f"y and conditional_var must be 1-D of the same length, got {y.shape} and {d.shape}"
            )
        return np.column_stack([y, d])

    @staticmethod
    def _split(y):
        y = np.asarray(y, dtype=float)
        return y[:, 0], y[:, 1]

    def validate_targets(self, y) -> np.ndarray:
        """(n, 2) float targets ``[y_i, d_i]``: y_i checked by the base likelihood, d_i ≥ 0."""
        y = np.asarray(y, dtype=float)
        if y.ndim != 2 or y.shape[1] != 2:
            raise ValueError(
                f"PseudoPointLikelihood takes (n, 2) targets [y_i, d_i], got shape {y.shape}; "
                "build them with PseudoPointLikelihood.pack(y, d)"
            )
        self.base.validate_targets(y[:, 0])
        d = y[:, 1]
        if not np.all(np.isfinite(d) & (d >= 0)):
            raise ValueError("conditional variances d_i must be finite and >= 0")
        return y

    def _widened(self, y, cavity_mean, cavity_var, power):
        yy, d = self._split(y)
        m = np.asarray(cavity_mean, dtype=float)
        v = np.asarray(cavity_var, dtype=float)
        V = v + d
        log_Z, mf, vf = self.base.tilted_moments(yy, m, V, power)
        return log_Z, np.asarray(mf), np.asarray(vf), m, v, d, V

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """(log Z_i (eq. P4), tilted mean of h, tilted variance of h (eq. P5)), each (n,)."""
        log_Z, mf, vf, m, v, d, V = self._widened(y, cavity_mean, cavity_var, power)
        r = v / V
        # eq. P5 as a sum of non-negative terms (no cancellation when v << d)
        return log_Z, m + r * (mf - m), v * d / V + r * r * vf

    def conditional_var_derivative(self, y, cavity_mean, cavity_var, power=1.0):
        """d log Z_i / d d_i = ½[(∂_m log Z_i)² + ∂²_m log Z_i] (eq. P9), shape (n,)."""
        _, mf, vf, m, _, _, V = self._widened(y, cavity_mean, cavity_var, power)
        g1 = (mf - m) / V
        g2 = (vf - V) / (V * V)
        return 0.5 * (g1 * g1 + g2)

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        """d log Z_i / d log ψ of the base likelihood's parameters at the widened cavity."""
        yy, d = self._split(y)
        V = np.asarray(cavity_var, dtype=float) + d
        return self.base.tilted_log_Z_gradient(yy, cavity_mean, V, power)

    def log_prob(self, y, f):
        """log E[p(y_i | h_i + g_i)], g_i ~ N(0, d_i), at h_i = ``f`` (n,)."""
        yy, d = self._split(y)
        f = np.broadcast_to(np.asarray(f, dtype=float), yy.shape)
        out = np.asarray(self.base.log_prob(yy, f), dtype=float).copy()
        pos = d > 0
        if np.any(pos):
            out[pos] = self.base.tilted_moments(yy[pos], f[pos], d[pos], 1.0)[0]
        return out

    def with_log_params(self, log_params):
        return PseudoPointLikelihood(self.base.with_log_params(log_params))

    def get_log_params(self):
        return self.base.get_log_params()

    def __repr__(self):
        return f"PseudoPointLikelihood({self.base!r})"


# ------------------------------------------------------------------------- the result
@dataclasses.dataclass
class PseudoPointEPResult(EPResult):
    """:class:`EPResult` of :func:`pseudo_point_power_ep`; its state lives on h = E[f | u].

    ``mean``, ``var``, ``cavity_mean``, ``cavity_var`` and the sites are those of
    ``h_i = E[f_i | u]`` (the engine's state, usable as ``init``); ``power`` is α.  The
    marginals of the latent f add the conditional variance: :meth:`latent_marginals`,
    :meth:`latent_cavity`.  ``predict`` gives the latent f at new inputs (eq. S10).

    Extra attributes: ``inducing_power`` α, ``conditional_var`` (n,) d_i.
    """

    inducing_power: float = 1.0
    conditional_var: np.ndarray | None = None

    def latent_marginals(self):
        """(mean (n,), var (n,)) of q(f_i) = N(μ_i, σ_i² + d_i)."""
        return self.mean, self.var + self.conditional_var

    def latent_cavity(self):
        """(mean (n,), var (n,)) of the α-cavity of f_i: N(m_i, v_i + d_i) (NaN if improper)."""
        return self.cavity_mean, self.cavity_var + self.conditional_var

    def latent_view(self) -> EPResult:
        """An :class:`EPResult` over the latent f_i, for code that reads results of f.

        ``mean``, ``var``: q(f_i) (:meth:`latent_marginals`); ``cavity_mean``,
        ``cavity_var``: :meth:`latent_cavity`; ``site_precision``, ``site_shift``: the
        effective Gaussian factors ``s_i`` of f_i with ``q(f_i) / s_i(f_i)`` equal to the
        leave-one-out cavity of f_i, ``∫ p(f_i | u) q(u) / t_i(h_i) du`` (precision
        ``λ_c / (1 + d_i λ_c)``, ``λ_c = 1/σ_i² − β_i``; where ``λ_c ≤ 0`` the factor gives
        an improper cavity, which the LOO diagnostics detect).  A factor is negative
        exactly where the site on h_i is.  ``log_Z``, ``posterior`` (predictions), the
        other fields and the chain's extras (``method_used``, ``methods_tried``) are
        unchanged.  Not a warm start: use this result itself as ``init``.
        """
        d = self.conditional_var
        mean, var = self.latent_marginals()
        lam_c = 1.0 / self.var - self.site_precision
        shift_c = self.mean / self.var - self.site_shift
        proper = lam_c > 0
        den = np.where(proper, 1.0 + d * lam_c, 1.0)
        # widening a cavity N(m, 1/λ) by d gives precision λ/(1 + dλ), shift (m λ)/(1 + dλ)
        cav_prec = np.where(proper, lam_c / den, -1.0)
        cav_shift = np.where(proper, shift_c / den, 0.0)
        cm, cv = self.latent_cavity()
        fields = {f.name for f in dataclasses.fields(EPResult)}
        view = dataclasses.replace(
            EPResult(**{name: getattr(self, name) for name in fields}),
            mean=mean, var=var, cavity_mean=cm, cavity_var=cv,
            site_precision=1.0 / var - cav_prec, site_shift=mean / var - cav_shift,
        )  # fmt: skip
        # the chain's extras (method_used, methods_tried, tol, message), not this class's
        # nor the Anderson memory's differences (on h, and the view is no warm start)
        own = ("inducing_power", "conditional_var", "anderson_differences")
        view.__dict__.update({k: v for k, v in self.__dict__.items()
                              if k not in fields and k not in own})  # fmt: skip
        return view


def pseudo_point_power_ep(
    prior, y, likelihood, *, inducing_power=1.0, strategy=None, **engine_options
):
    """Power EP with power α on the pseudo-point posterior (Bui, Yan & Turner 2017).

    Parameters
    ----------
    prior : :class:`~robustep.posterior.sparse.FITCPrior` (e.g. ``FITCPrior.from_kernel``);
        not modified.
    y : (n,) targets for ``likelihood``.
    likelihood : the :class:`~robustep.likelihoods.Likelihood` p(y_i | f_i).
    inducing_power : α in (0, 1], the power on each exact factor p(y_i | f_i) with
        p(f_i | u) kept exact: 1 = FITC-EP, → 0 the variational free energy (VFE).  It is
        the engine's power here, so ``power`` (η) cannot be passed as well.
    **engine_options : passed to :func:`robustep.ep.expectation_propagation` (damping,
        robust, max_iter, tol, init (a previous result of this function, not its
        ``latent_view``), callback, double_loop, ...; the schedule must be "parallel";
        custom site updates such as relaxed EP are untested with α < 1).
    strategy : None (one engine run with ``engine_options``) or an
        :class:`~robustep.ep.InferenceStrategy`, whose chain then runs with every site at
        power α (:func:`robustep.ep.run_chain` with ``power=α``; below 1 its stages may
        not include ``"power"``); ``engine_options`` may then hold only ``tol`` and
        ``init``.
        The label-noise step classifier's ``method="auto"`` runs Anderson-accelerated
        sweeps, then damped ones, this way: one undamped run oscillates on that
        likelihood (docs/reliability.md, "The sparse step classifier").

    Returns
    -------
    PseudoPointEPResult
        ``log_Z`` is the power-EP approximation of log p(y) (eq. P7; for a Gaussian
        likelihood eq. P8).
    """
    alpha = check_inducing_power(inducing_power)
    if "power" in engine_options:
        raise ValueError(
            "pass inducing_power (α, the power on p(y_i | f_i) with p(f_i | u) exact) and not "
            "power: the engine's power is α here.  For the fractional power η on the FITC "
            "prior use expectation_propagation(FITCPrior, ...) with power=η"
        )
    h_prior = pseudo_point_prior(prior)
    lik = PseudoPointLikelihood(likelihood)
    y = likelihood.validate_targets(y)
    if y.ndim != 1 or y.shape[0] != h_prior.n:
        raise ValueError(f"y must have shape ({h_prior.n},), one target per row of K_nm")
    packed = lik.pack(y, h_prior.conditional_var)
    if strategy is None:
        res = expectation_propagation(h_prior, packed, lik, power=alpha, **engine_options)
    else:
        extra = sorted(set(engine_options) - {"tol", "init"})
        if extra:
            raise ValueError(
                f"with a strategy pass only tol and init; the strategy sets {extra} (its "
                "stages' options)"
            )
        res = run_chain(h_prior, packed, lik, strategy, power=alpha, **engine_options)
    out = object.__new__(PseudoPointEPResult)
    out.__dict__.update(res.__dict__)  # keeps extras such as method_used
    out.inducing_power = alpha
    out.conditional_var = h_prior.conditional_var
    return out


def pseudo_point_log_Z_gradient(result, kernel, X, Z, likelihood, y, *, wrt_inducing=True):
    """Gradient of ``result.log_Z`` of :func:`pseudo_point_power_ep` (eqs. P10, P11).

    At a converged fixed point the power-EP energy is stationary in the sites, so only the
    explicit dependencies count: Q_nn in the prior term (as eq. S12 with Λ = 0) and
    d_i = k_ii − Q_ii in each tilted normaliser.  Both enter the FITC weights of eq. S14
    with ``diag(M)`` replaced by ``2 e``, ``e_i = (1/α) ∂ log Z_i / ∂ d_i`` (eq. P11).

    Parameters
    ----------
    result : converged :class:`PseudoPointEPResult`; kernel : the scikit-learn kernel
        of the prior (log hyperparameters theta); X : (n, d) training inputs;
    Z : (m, d) inducing inputs; likelihood, y : the base likelihood and (n,) targets;
    wrt_inducing : also return d log Z / d Z.

    Returns
    -------
    grad_kernel (p,), grad_likelihood (q,) (log parameters of ``likelihood``),
    grad_inducing (m, d) or None.
    """
    prior = result.posterior.prior
    alpha = float(result.inducing_power)
    lik = PseudoPointLikelihood(likelihood)
    yy = lik.pack(np.asarray(y, dtype=float), result.conditional_var)
    valid = np.isfinite(result.cavity_var)
    e = np.zeros(prior.n)
    e[valid] = (
        lik.conditional_var_derivative(
            yy[valid], result.cavity_mean[valid], result.cavity_var[valid], alpha
        )
        / alpha
    )
    # eq. P11: 2 e replaces diag(M) of eq. S14; the rest is FITC-EP's gradient on Q_nn
    return fitc_log_Z_gradient(
        result, kernel, X, Z, lik, yy, wrt_inducing=wrt_inducing, M_diag=2.0 * e
    )
