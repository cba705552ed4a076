"""The likelihood protocol shared by every inference engine.

A likelihood owns its local math.  All methods are vectorised over sites:
``y``, ``f``, ``cavity_mean`` and ``cavity_var`` are float arrays of shape (n,)
(broadcastable), ``power`` (eta, fractional/power EP) is a scalar in (0, 1].

Likelihood parameters that can be learned (e.g. Student-t ``scale``) are
positive and exposed in log space through :attr:`hyperparameter_names`,
:meth:`get_log_params` and :meth:`with_log_params` (a new object; likelihoods
are immutable values).  A class that names hyperparameters must implement their
gradients (:meth:`Likelihood.tilted_log_Z_gradient` and
:meth:`Likelihood.log_prob_parameter_gradient`); this is checked when the class is created.

The predictive distribution of a new observation y given a Gaussian latent
f ~ N(mean, var) (:meth:`Likelihood.predictive_log_density`, :meth:`Likelihood.predictive_cdf`,
:meth:`Likelihood.predictive_quantiles`) belongs to the likelihood too; mixtures of such
predictives (an EP3 grid, MCMC draws) are :func:`robustep.likelihoods.predictive_mixture`.
"""

from __future__ import annotations

import abc

import numpy as np

from robustep.likelihoods._predictive import predictive_mixture

_GRADIENT_METHODS = ("tilted_log_Z_gradient", "log_prob_parameter_gradient")


class Likelihood(abc.ABC):
    """Base class of site likelihoods p(y_i | f_i)."""

    #: Names of learnable positive parameters, in the order of the log-space vector.
    hyperparameter_names: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        """Refuse a class that names hyperparameters but inherits the empty gradients.

        Only a class-level tuple is checked: a wrapper whose names are a property computed
        per instance (delegating to another likelihood) answers for its own gradients.
        """
        super().__init_subclass__(**kwargs)
        names = cls.__dict__.get("hyperparameter_names", cls.hyperparameter_names)
        if not isinstance(names, (tuple, list)) or not names:
            return
        missing = [
            name for name in _GRADIENT_METHODS if getattr(cls, name) is getattr(Likelihood, name)
        ]
        if missing:
            raise TypeError(
                f"{cls.__name__} declares hyperparameters {tuple(names)} but "
                f"does not implement {', '.join(missing)}; implement both "
                f"{' and '.join(_GRADIENT_METHODS)} (gradients in log parameters, shape "
                "(n, n_params)), or set hyperparameter_names = () for fixed parameters"
            )

    # ------------------------------------------------------------------ targets
    def validate_targets(self, y) -> np.ndarray:
        """Check and return ``y`` as a float array of shape (n,); raise ValueError with advice."""
        y = np.asarray(y, dtype=float)
        if y.ndim != 1:
            raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or inf; remove or impute those observations")
        return y

    # ------------------------------------------------------------ tilted moments
    @abc.abstractmethod
    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """Moments of the tilted distribution p(y|f)^power N(f | cavity_mean, cavity_var).

        Returns
        -------
        log_Z : (n,) log of int p(y|f)^power N(f | m, v) df
        mean : (n,) tilted mean
        var : (n,) tilted variance (> 0)
        """

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0) -> np.ndarray:
        """d log_Z / d log(theta) for each learnable parameter, shape (n, n_params).

        The default (no hyperparameters) is the empty (n, 0) array.
        """
        return np.zeros((np.size(cavity_mean), 0))

    # --------------------------------------------------------------- pointwise
    @abc.abstractmethod
    def log_prob(self, y, f) -> np.ndarray:
        """log p(y | f), shape (n,)."""

    def log_prob_derivatives(self, y, f):
        """(log p, d/df, d2/df2, d3/df3) of log p(y|f), each shape (n,)."""
        raise NotImplementedError(f"{type(self).__name__} does not provide derivatives")

    def log_prob_parameter_gradient(self, y, f) -> np.ndarray:
        """d log p(y|f) / d log(theta), shape (n, n_params); (n, 0) without hyperparameters."""
        return np.zeros((np.size(f), 0))

    # ------------------------------------------------------------- predictive
    # The predictive distribution of a new observation y when the latent f ~ N(mean, var):
    # p(y) = int p(y | f) N(f | mean, var) df.  mean, var and y are (n,) arrays
    # (broadcastable); var >= 0.
    def predictive_log_density(self, y, mean, var) -> np.ndarray:
        """log int p(y | f) N(f | mean, var) df, shape (n,).

        The default is the tilted log normaliser at power 1; ``var`` must then be > 0.
        """
        return self.tilted_moments(y, mean, var, 1.0)[0]

    def predictive_cdf(self, y, mean, var, upper=False) -> np.ndarray:
        """P(Y <= y) (``upper``: P(Y > y), accurate far in the upper tail), shape (n,).

        Only likelihoods of a real-valued observation implement it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not provide a predictive CDF (implement predictive_cdf "
            "and predictive_cdf_and_density for a likelihood of a real-valued observation)"
        )

    def predictive_cdf_and_density(self, y, mean, var):
        """(CDF (n,), density (n,)) of the predictive at y, for Newton steps on quantiles.

        The default evaluates :meth:`predictive_cdf` and :meth:`predictive_log_density`.
        """
        return self.predictive_cdf(y, mean, var), np.exp(self.predictive_log_density(y, mean, var))

    def predictive_quantiles(self, q, mean, var, tol=1e-10) -> np.ndarray:
        """Quantiles of the predictive at probabilities q (Q,), shape (n, Q).

        Safeguarded Newton on :meth:`predictive_cdf_and_density`
        (:meth:`robustep.likelihoods.PredictiveMixture.quantiles` with one component);
        q = 0 and q = 1 give -inf and +inf.
        """
        mean = np.atleast_1d(np.asarray(mean, dtype=float))
        var = np.broadcast_to(np.asarray(var, dtype=float), mean.shape)
        return predictive_mixture([self], mean[None, :], var[None, :]).quantiles(q, tol=tol)

    def noise_scale(self) -> float:
        """A typical width of the observation noise (brackets predictive quantiles); 1 here."""
        return 1.0

    # ----------------------------------------------------------- parameters
    def get_log_params(self) -> np.ndarray:
        """Learnable parameters in log space, shape (n_params,)."""
        return np.array([np.log(getattr(self, name)) for name in self.hyperparameter_names])

    def with_log_params(self, log_params) -> Likelihood:
        """A copy with learnable parameters set from a log-space vector."""
        import copy

        new = copy.copy(self)
        for name, value in zip(self.hyperparameter_names, np.asarray(log_params), strict=True):
            setattr(new, name, float(np.exp(value)))
        return new

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


# ---------------------------------------------------------------- helpers
def check_power(power) -> float:
    """Return ``power`` (eta) as a float, raising ValueError unless it lies in (0, 1]."""
    try:
        eta = float(power)
    except (TypeError, ValueError):
        raise ValueError(f"power must be a scalar in (0, 1], got {power!r}") from None
    if not (0.0 < eta <= 1.0):
        raise ValueError(
            f"power must lie in (0, 1] (1 = standard EP, <1 = fractional EP), got {power!r}"
        )
    return eta


def as_site_arrays(*arrays):
    """Convert site-wise inputs to 1-D float arrays broadcast to a common shape (n,).

    Inputs are never modified; the returned arrays may be views or copies.
    """
    out = np.broadcast_arrays(*[np.atleast_1d(np.asarray(a, dtype=float)) for a in arrays])
    if out[0].ndim != 1:
        raise ValueError(f"site-wise inputs must be one-dimensional, got shape {out[0].shape}")
    return out


def check_cavity(cavity_mean, cavity_var, y=None, binary=False):
    """Raise ValueError unless the cavity mean is finite and the cavity variance finite and > 0.

    If ``y`` is given it must be finite (and in {-1, +1} when ``binary``), so that no NaN
    can leak silently into the tilted moments.
    """
    if y is not None:
        if binary and not np.all(np.abs(y) == 1.0):
            raise ValueError("labels must be -1 or +1; map your two classes to -1 and +1")
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or inf; remove or impute those observations")
    if not np.all(np.isfinite(cavity_mean)):
        raise ValueError("cavity_mean contains NaN or inf")
    if not np.all((cavity_var > 0) & np.isfinite(cavity_var)):
        raise ValueError(
            "cavity_var must be finite and > 0; skip (do not update) sites whose cavity "
            "precision is non-positive"
        )


def check_binary_targets(y) -> np.ndarray:
    """Return labels as a float array of shape (n,) after checking they are in {-1, +1}."""
    y = np.asarray(y, dtype=float)
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    bad = ~np.isin(y, (-1.0, 1.0))
    if np.any(bad):
        found = np.unique(y[bad])[:5]
        raise ValueError(
            f"binary classification likelihoods need labels in {{-1, +1}}; found {found.tolist()}"
            " -- map your two classes to -1 and +1 (e.g. y = 2 * (labels == positive) - 1)"
        )
    return y
