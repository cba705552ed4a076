"""The t-exponential family, q-algebra and the multivariate Student-t.

Futami, Sato & Sugiyama (2017), "Expectation propagation for t-exponential
family using q-algebra" (NIPS), Sections 2 and 4.1.  Derivations and the
numerical checks of every step are in ``docs/derivations/tep.md``.

Conventions
-----------
* ``t = 1 + 2 / (df + k)`` for a ``k``-dimensional Student-t with ``df``
  degrees of freedom (so ``1 / (1 - t) = -(df + k) / 2``, Futami et al. §2).
* Sufficient statistics ``Phi(x) = (x, x x^T)`` and natural parameters
  ``theta = (theta1, theta2)`` with ``<Phi(x), theta> = theta1 @ x + x @ theta2 @ x``
  (eq. 8: ``theta2 = Psi K / (1 - t)``, ``theta1 = -2 Psi K mu / (1 - t)``,
  ``K = (df Sigma)^-1``).  ``theta2`` is negative definite (as ``-Sigma^-1 / 2``
  for a Gaussian, to which it tends as ``df -> inf``).
* ``Psi`` (eq. 7) is the Student-t normaliser raised to the power ``1 - t``.
* The escort distribution ``p^t / int p^t`` of ``St(mu, Sigma, df)`` is
  ``St(mu, df Sigma / (df + 2), df + 2)``; its mean is ``mu`` and its covariance
  is ``Sigma``, so the expected sufficient statistics (eq. 3) are
  ``eta = (mu, Sigma + mu mu^T)``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

__all__ = [
    "exp_t",
    "log_t",
    "q_product",
    "q_division",
    "t_of_df",
    "log_normaliser",
    "log_psi",
    "student_t_logpdf",
    "to_natural",
    "from_natural",
    "log_partition",
    "expected_sufficient_statistics",
    "from_expected_sufficient_statistics",
    "escort_parameters",
    "log_integral_exp_t",
]


# --------------------------------------------------------------------------- q-algebra
def exp_t(x, t):
    """Deformed exponential (eq. 2), elementwise.

    ``exp_t(x) = exp(x)`` if ``t == 1`` else ``[1 + (1 - t) x]_+^{1 / (1 - t)}``.
    For ``t > 1`` the exponent is negative: where ``1 + (1 - t) x <= 0`` the value
    is ``+inf`` (the function's pole); for ``t < 1`` it is 0 there.
    """
    x = np.asarray(x, dtype=float)
    if t == 1:
        return np.exp(x)
    base = 1.0 + (1.0 - t) * x
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(base > 0, np.abs(base) ** (1.0 / (1.0 - t)), np.inf if t > 1 else 0.0)
    return out


def log_t(x, t):
    """Deformed (q-)logarithm (Definition 3): ``(x^{1-t} - 1) / (1 - t)`` for ``x >= 0``.

    Reduces to ``log x`` for ``t == 1``.  Raises ``ValueError`` for negative ``x``.
    """
    x = np.asarray(x, dtype=float)
    if np.any(x < 0):
        raise ValueError("log_t is defined for x >= 0 only")
    if t == 1:
        with np.errstate(divide="ignore"):
            return np.log(x)
    with np.errstate(divide="ignore"):
        return (x ** (1.0 - t) - 1.0) / (1.0 - t)


def q_product(x, y, q):
    """q-product (Definition 1): ``[x^{1-q} + y^{1-q} - 1]^{1/(1-q)}``.

    Defined as 0 unless ``x > 0``, ``y > 0`` and ``x^{1-q} + y^{1-q} - 1 > 0``.
    For ``q == 1`` it is the ordinary product.  Satisfies eqs. (24)-(25):
    ``log_q(x (x)_q y) = log_q x + log_q y`` and ``exp_q(a) (x)_q exp_q(b) = exp_q(a + b)``.
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    if q == 1:
        return x * y
    ok = (x > 0) & (y > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        base = np.where(
            ok, np.where(ok, x, 1.0) ** (1 - q) + np.where(ok, y, 1.0) ** (1 - q) - 1, -1
        )
        out = np.where(ok & (base > 0), np.abs(base) ** (1.0 / (1 - q)), 0.0)
    return out


def q_division(x, y, q):
    """q-division (Definition 2): ``[x^{1-q} - y^{1-q} + 1]^{1/(1-q)}``.

    Defined as 0 unless ``x > 0``, ``y > 0`` and ``x^{1-q} - y^{1-q} + 1 > 0``.
    (The paper prints ``- 1`` inside the bracket; with ``- 1`` the q-division rules
    (26)-(27) fail, with ``+ 1`` they hold and ``(x (x)_q y) (/)_q y = x`` — see
    docs/derivations/tep.md §1.)  For ``q == 1`` it is the ordinary quotient.
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    if q == 1:
        return x / y
    ok = (x > 0) & (y > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        base = np.where(
            ok, np.where(ok, x, 1.0) ** (1 - q) - np.where(ok, y, 1.0) ** (1 - q) + 1, -1
        )
        out = np.where(ok & (base > 0), np.abs(base) ** (1.0 / (1 - q)), 0.0)
    return out


# --------------------------------------------------------------------------- Student-t
def t_of_df(df, k):
    """``t = 1 + 2 / (df + k)`` (Futami et al. §2); ``t = 1`` for ``df = inf``."""
    df = float(df)
    if not df > 0:
        raise ValueError(f"df must be positive, got {df}")
    if int(k) < 1:
        raise ValueError(f"dimension k must be >= 1, got {k}")
    return 1.0 if np.isinf(df) else 1.0 + 2.0 / (df + k)


def _check_mu_sigma(mu, sigma):
    mu = np.atleast_1d(np.asarray(mu, dtype=float))
    sigma = np.atleast_2d(np.asarray(sigma, dtype=float))
    if mu.ndim != 1 or sigma.shape != (mu.size, mu.size):
        raise ValueError(f"mu must be (k,) and Sigma (k, k); got {mu.shape} and {sigma.shape}")
    return mu, sigma


def log_normaliser(sigma, df):
    """log of the Student-t normaliser (eq. 5), ``Sigma`` of shape (k, k)."""
    sigma = np.atleast_2d(np.asarray(sigma, dtype=float))
    k = sigma.shape[0]
    sign, logdet = np.linalg.slogdet(sigma)
    if sign <= 0:
        raise ValueError("Sigma must be positive definite")
    return gammaln((df + k) / 2.0) - gammaln(df / 2.0) - 0.5 * k * np.log(np.pi * df) - 0.5 * logdet


def log_psi(sigma, df):
    """``log Psi`` with ``Psi = normaliser^{1 - t}`` (eq. 7)."""
    k = np.atleast_2d(sigma).shape[0]
    return (1.0 - t_of_df(df, k)) * log_normaliser(sigma, df)


def student_t_logpdf(x, mu, sigma, df):
    """log St(x; df, mu, Sigma) (eq. 5) for x of shape (..., k)."""
    mu, sigma = _check_mu_sigma(mu, sigma)
    x = np.asarray(x, dtype=float)
    d = x - mu
    maha = np.einsum("...i,ij,...j->...", d, np.linalg.inv(sigma), d)
    k = mu.size
    if np.isinf(df):
        return -0.5 * (k * np.log(2 * np.pi) + np.linalg.slogdet(sigma)[1] + maha)
    return log_normaliser(sigma, df) - 0.5 * (df + k) * np.log1p(maha / df)


def to_natural(mu, sigma, df):
    """(mu, Sigma, df) -> natural parameters (theta1 (k,), theta2 (k, k)) (eqs. 8-10).

    ``theta2 = Psi K / (1 - t)``, ``theta1 = -2 Psi K mu / (1 - t)``, ``K = (df Sigma)^-1``;
    for ``df = inf``: ``theta2 = -Sigma^-1 / 2``, ``theta1 = Sigma^-1 mu``.
    """
    mu, sigma = _check_mu_sigma(mu, sigma)
    prec = np.linalg.inv(sigma)
    if np.isinf(df):
        return prec @ mu, -0.5 * prec
    t = t_of_df(df, mu.size)
    psi = np.exp(log_psi(sigma, df))
    kmat = prec / df
    theta2 = psi * kmat / (1.0 - t)
    return -2.0 * theta2 @ mu, theta2


def from_natural(theta1, theta2, df):
    """Natural parameters -> (mu, Sigma); inverse of :func:`to_natural`.

    With ``A = (1 - t) theta2`` (positive definite) and ``Psi K = A``,
    ``log Psi = -(2 / df) log(c0 df^{k/2} |A|^{1/2})`` where ``c0`` is the normaliser
    without ``|Sigma|`` (derivation §2), so ``Sigma = Psi A^-1 / df`` and
    ``mu = -theta2^-1 theta1 / 2``.
    """
    theta1 = np.atleast_1d(np.asarray(theta1, dtype=float))
    theta2 = np.atleast_2d(np.asarray(theta2, dtype=float))
    k = theta1.size
    mu = -0.5 * np.linalg.solve(theta2, theta1)
    if np.isinf(df):
        return mu, np.linalg.inv(-2.0 * theta2)
    t = t_of_df(df, k)
    a = (1.0 - t) * theta2
    sign, logdet_a = np.linalg.slogdet(a)
    if sign <= 0 or np.any(np.linalg.eigvalsh(0.5 * (a + a.T)) <= 0):
        raise ValueError("theta2 does not define a proper Student-t (it must be negative definite)")
    log_c0 = gammaln((df + k) / 2.0) - gammaln(df / 2.0) - 0.5 * k * np.log(np.pi * df)
    log_psi_ = -(2.0 / df) * (log_c0 + 0.5 * k * np.log(df) + 0.5 * logdet_a)
    sigma = np.exp(log_psi_) * np.linalg.inv(a) / df
    return mu, 0.5 * (sigma + sigma.T)


def log_partition(theta1, theta2, df):
    """g_t(theta) (eq. 9): ``-Psi (mu^T K mu + 1) / (1 - t) + 1 / (1 - t)``."""
    mu, sigma = from_natural(theta1, theta2, df)
    k = mu.size
    if np.isinf(df):
        prec = np.linalg.inv(sigma)
        return (
            0.5 * mu @ prec @ mu + 0.5 * np.linalg.slogdet(sigma)[1] + 0.5 * k * np.log(2 * np.pi)
        )
    t = t_of_df(df, k)
    psi = np.exp(log_psi(sigma, df))
    kmat = np.linalg.inv(df * sigma)
    return (-psi * (mu @ kmat @ mu + 1.0) + 1.0) / (1.0 - t)


def escort_parameters(mu, sigma, df):
    """The escort ``p^t / int p^t`` of St(mu, Sigma, df) is St(mu, df Sigma/(df+2), df+2)."""
    mu, sigma = _check_mu_sigma(mu, sigma)
    if np.isinf(df):
        return mu, sigma, df
    return mu, df * sigma / (df + 2.0), df + 2.0


def expected_sufficient_statistics(mu, sigma):
    """eta = E_escort[Phi] = (mu, Sigma + mu mu^T) (eq. 3; escort covariance = Sigma)."""
    mu, sigma = _check_mu_sigma(mu, sigma)
    return mu, sigma + np.outer(mu, mu)


def from_expected_sufficient_statistics(eta1, eta2):
    """Inverse of :func:`expected_sufficient_statistics`: (mu, Sigma)."""
    eta1 = np.atleast_1d(np.asarray(eta1, dtype=float))
    sigma = np.atleast_2d(np.asarray(eta2, dtype=float)) - np.outer(eta1, eta1)
    return eta1, 0.5 * (sigma + sigma.T)


def log_integral_exp_t(theta1, theta2, g, df):
    """log of ``int exp_t(<Phi(w), theta> - g) dw`` (Theorem 2, generalised to k dims).

    ``= -(df / 2) log([1 - (1 - t) g - Psi mu^T K mu] / Psi)``
    ``= (df / (df + k)) log exp_t((g_t(theta) - g) / Psi)``;
    for ``k = 1`` the exponent ``df / (df + 1)`` equals the paper's ``(3 - t) / 2`` (eq. 40).
    Returns ``+inf`` where the integrand has a pole (bracket <= 0).
    """
    mu, sigma = from_natural(theta1, theta2, df)
    k = mu.size
    t = t_of_df(df, k)
    psi = np.exp(log_psi(sigma, df))
    kmat = np.linalg.inv(df * sigma)
    bracket = (1.0 - (1.0 - t) * g - psi * (mu @ kmat @ mu)) / psi
    if bracket <= 0:
        return np.inf
    return -0.5 * df * np.log(bracket)
