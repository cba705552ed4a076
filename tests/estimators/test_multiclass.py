"""Multi-class GP classification: the multinomial probit site, nested EP, GPClassifier.

References used here (docs/derivations/multiclass.md):
* the tilted moments of one multinomial probit site against tensor Gauss–Hermite
  integration in f (c = 3: 3-D, with the likelihood's integral over u by 1-D quadrature);
* the nested EP posterior and log Z on a tiny problem (n = 2, c = 3: six latents) against
  importance sampling with a Student-t proposal;
* c = 2: p(y = 1 | f) = Φ((f_1 - f_0)/√2), so nested EP on K (shared kernel) is binary probit
  EP on g = (f_1 - f_0)/√2 with the same K: same posterior of g, same log Z;
* the evidence gradient against central finite differences.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import special, stats
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep.multiclass import nested_ep
from robustep.estimators import GPClassifier
from robustep.likelihoods.multinomial_probit import (
    MultinomialProbit,
    inner_ep,
    site_natural_parameters,
)


def _gh_tilted(y, m, S, n_nodes=36):
    """Exact (to quadrature accuracy) log Z, mean, cov of p(y|f) N(f | m, S), c = 3."""
    c = m.size
    x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / np.sqrt(2 * np.pi)
    grids = np.meshgrid(*([x] * c), indexing="ij")
    Z = np.stack(grids, -1).reshape(-1, c)
    W = np.prod(np.stack(np.meshgrid(*([w] * c), indexing="ij"), -1).reshape(-1, c), 1)
    F = m + Z @ np.linalg.cholesky(S).T
    p = np.exp(MultinomialProbit(c, quadrature_points=40).log_prob(np.full(len(F), y), F))
    z = np.sum(W * p)
    mean = (W * p) @ F / z
    cov = ((W * p)[:, None] * (F - mean)).T @ (F - mean) / z
    return np.log(z), mean, cov


CAVITIES = [
    (
        1,
        np.array([0.3, -0.5, 0.8]),
        np.array([[1.5, 0.3, 0.2], [0.3, 1.0, -0.4], [0.2, -0.4, 2.0]]),
    ),
    (0, np.array([-1.0, 0.5, 0.0]), np.array([[0.6, 0.1, 0.0], [0.1, 0.8, 0.2], [0.0, 0.2, 0.5]])),
    (2, np.array([0.0, 0.0, 0.0]), np.eye(3) * 2.0),
]


@pytest.mark.parametrize("y, m, S", CAVITIES)
def test_tilted_moments_against_quadrature_c3(y, m, S):
    """Inner EP (converged) vs 3-D Gauss–Hermite: EP's own error, ~1e-3 on these cavities."""
    lik = MultinomialProbit(3)
    log_Z, mean, cov = lik.tilted_moments(np.array([y]), m[None], S[None])
    ref_log_Z, ref_mean, ref_cov = _gh_tilted(y, m, S)
    assert abs(log_Z[0] - ref_log_Z) < 5e-3
    np.testing.assert_allclose(mean[0], ref_mean, atol=5e-3)
    np.testing.assert_allclose(cov[0], ref_cov, atol=1.5e-2)


def test_tilted_moments_exact_for_two_classes():
    """c = 2: one probit factor, the inner EP is exact after one update."""
    rng = np.random.default_rng(0)
    n = 5
    m = rng.normal(size=(n, 2))
    A = rng.normal(size=(n, 2, 2))
    S = A @ A.transpose(0, 2, 1) + 0.3 * np.eye(2)
    y = rng.integers(0, 2, n)
    log_Z, mean, cov = MultinomialProbit(2).tilted_moments(y, m, S)
    # exact: the tilted distribution of d = f_y - f_other under Φ(d/√2) is a probit tilt
    for i in range(n):
        x, w = np.polynomial.hermite_e.hermegauss(120)
        w = w / np.sqrt(2 * np.pi)
        L = np.linalg.cholesky(S[i])
        Z2 = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
        W2 = np.outer(w, w).reshape(-1)
        F = m[i] + Z2 @ L.T
        o = 1 - y[i]
        p = special.ndtr((F[:, y[i]] - F[:, o]) / np.sqrt(2.0))
        z = np.sum(W2 * p)
        mu = (W2 * p) @ F / z
        C = ((W2 * p)[:, None] * (F - mu)).T @ (F - mu) / z
        assert abs(log_Z[i] - np.log(z)) < 1e-9
        np.testing.assert_allclose(mean[i], mu, atol=1e-9)
        np.testing.assert_allclose(cov[i], C, atol=1e-9)


def test_outer_site_matches_marginalising_u():
    """Π̃, ν̃, κ from the inner sites equal the u-integral of N(u) ∏ exp(-α x²/2 + β x)."""
    rng = np.random.default_rng(1)
    c, y = 4, np.array([2])
    alpha = np.abs(rng.normal(size=(1, c)))
    beta = rng.normal(size=(1, c))
    alpha[0, 2] = beta[0, 2] = 0.0
    P, nu, _, kappa = site_natural_parameters(y, alpha, beta)
    u, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / np.sqrt(2 * np.pi)
    for _ in range(3):
        f = rng.normal(size=c)
        x = u[:, None] + f[2] - f[None, :]  # (q, c)
        g = np.exp(-0.5 * alpha[0] * x**2 + beta[0] * x)
        g[:, 2] = 1.0
        direct = np.log(np.sum(w * np.prod(g, axis=1)))
        closed = -0.5 * f @ P[0] @ f + nu[0] @ f + kappa[0]
        assert abs(direct - closed) < 1e-10
    np.testing.assert_allclose(P[0] @ np.ones(c), 0.0, atol=1e-12)  # rank c-1, null vector 1


def test_inner_ep_does_not_modify_inputs_and_is_finite():
    m = np.zeros((2, 3))
    S = np.stack([np.eye(3)] * 2)
    a0 = np.zeros((2, 3))
    out = inner_ep(np.array([0, 2]), m, S, a0, a0.copy(), n_sweeps=3)
    assert np.all(a0 == 0) and np.all(np.isfinite(out[0])) and np.all(out[0] >= 0)


def _tiny_problem():
    X = np.array([[0.0], [0.9]])
    K = 1.5 * np.exp(-0.5 * (X - X.T) ** 2) + 1e-6 * np.eye(2)
    return K, np.array([0, 2])


def test_posterior_and_log_Z_against_importance_sampling():
    """n = 2, c = 3 (six latents): IS with 2e5 Student-t draws (sd of its estimates ~1e-3)."""
    K, y = _tiny_problem()
    n, c = 2, 3
    res = nested_ep(K, y, c, damping=0.3, tol=1e-10, max_iter=1000)
    assert res.converged
    Kfull = np.kron(np.eye(c), K)
    Pi = np.zeros((n * c, n * c))
    nu = np.zeros(n * c)
    for i in range(n):
        idx = [j * n + i for j in range(c)]
        Pi[np.ix_(idx, idx)] = res.site_precision[i]
        nu[idx] = res.site_shift[i]
    Sig = np.linalg.inv(np.linalg.inv(Kfull) + Pi)
    mu = Sig @ nu
    np.testing.assert_allclose(mu.reshape(c, n).T, res.mean, atol=1e-10)
    N = 200_000
    q = stats.multivariate_t(loc=mu, shape=1.5 * Sig, df=5, seed=3)
    F = q.rvs(N)
    Fr = F.reshape(N, c, n).transpose(0, 2, 1).reshape(-1, c)
    ll = MultinomialProbit(c, quadrature_points=24).log_prob(np.tile(y, N), Fr).reshape(N, n).sum(1)
    lw = stats.multivariate_normal(np.zeros(n * c), Kfull).logpdf(F) + ll - q.logpdf(F)
    log_Z = special.logsumexp(lw) - np.log(N)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    m_is = w @ F
    C_is = (w[:, None] * (F - m_is)).T @ (F - m_is)
    assert abs(res.log_Z - log_Z) < 0.02
    np.testing.assert_allclose(mu, m_is, atol=0.02)
    np.testing.assert_allclose(Sig, C_is, atol=0.03)


def test_two_classes_equal_binary_probit_ep():
    """c = 2 with a shared K: g = (f_1 - f_0)/√2 has prior K and likelihood Φ(±g)."""
    from robustep.ep import expectation_propagation
    from robustep.likelihoods import Probit

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    K = (ConstantKernel(2.0) * RBF(1.0))(X) + 1e-8 * np.eye(30)
    y = (X[:, 0] + 0.3 * rng.normal(size=30) > 0).astype(int)
    res = nested_ep(K, y, 2, damping=0.0, tol=1e-10, max_iter=500)
    ref = expectation_propagation(K, np.where(y == 1, 1.0, -1.0), Probit(), tol=1e-10, max_iter=500)
    g = (res.mean[:, 1] - res.mean[:, 0]) / np.sqrt(2)
    vg = (res.cov[:, 1, 1] + res.cov[:, 0, 0] - 2 * res.cov[:, 0, 1]) / 2
    np.testing.assert_allclose(g, ref.mean, atol=1e-8)
    np.testing.assert_allclose(vg, ref.var, atol=1e-8)
    assert abs(res.log_Z - ref.log_Z) < 1e-8


def test_log_Z_gradient_against_finite_differences():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 2))
    y = rng.integers(0, 3, 20)
    kernel = ConstantKernel(2.0) * RBF(1.0)

    def fit(theta):
        return nested_ep(
            kernel.clone_with_theta(theta)(X), y, 3, damping=0.3, tol=1e-11, max_iter=3000
        )

    theta = kernel.theta
    _, dK = kernel(X, eval_gradient=True)
    grad = fit(theta).log_Z_gradient(dK)
    h = 1e-5
    fd = [
        (fit(theta + h * e).log_Z - fit(theta - h * e).log_Z) / (2 * h) for e in np.eye(theta.size)
    ]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_per_class_kernels_gradient():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(12, 1))
    y = np.arange(12) % 3
    ks = [ConstantKernel(a) * RBF(ls) for a, ls in [(1.0, 0.5), (2.0, 1.0), (0.5, 2.0)]]

    def fit(thetas):
        Ks = np.stack([k.clone_with_theta(t)(X) for k, t in zip(ks, thetas, strict=True)])
        return nested_ep(Ks, y, 3, damping=0.3, tol=1e-11, max_iter=3000)

    thetas = [k.theta for k in ks]
    dK = np.stack([k(X, eval_gradient=True)[1] for k in ks])  # (c, n, n, p)
    grad = fit(thetas).log_Z_gradient(dK)
    h = 1e-5
    for j in range(3):  # d/d theta of class j's kernel = block j of the per-class sum
        for p in range(2):
            tp = [t.copy() for t in thetas]
            tm = [t.copy() for t in thetas]
            tp[j][p] += h
            tm[j][p] -= h
            fd = (fit(tp).log_Z - fit(tm).log_Z) / (2 * h)
            one = np.zeros_like(dK)
            one[j] = dK[j]
            np.testing.assert_allclose(fit(thetas).log_Z_gradient(one)[p], fd, rtol=1e-5, atol=1e-6)
    assert grad.shape == (2,)


def test_nested_ep_warns_and_stays_finite_when_not_converged():
    X = np.linspace(0, 1, 15)[:, None]
    K = (ConstantKernel(1000.0) * RBF(0.3))(X)
    y = np.arange(15) % 3
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = nested_ep(K, y, 3, damping=0.0, max_iter=3)
    assert not res.converged and np.isfinite(res.log_Z)
    assert np.all(np.isfinite(res.mean)) and np.all(np.isfinite(res.cov))


def test_nested_ep_input_errors_say_what_to_do():
    K = np.eye(3)
    with pytest.raises(ValueError, match="one label per row"):
        nested_ep(K, np.array([0, 1]), 3)
    with pytest.raises(ValueError, match="class indices in 0 .. 2"):
        nested_ep(K, np.array([0, 1, 5]), 3)
    with pytest.raises(ValueError, match="damping must be in"):
        nested_ep(K, np.array([0, 1, 2]), 3, damping=1.0)


def test_predictive_probabilities_against_monte_carlo():
    """QMC over f + Gauss–Hermite over u vs plain Monte Carlo of argmax(f + ε)."""
    rng = np.random.default_rng(3)
    m = np.array([[0.5, -0.2, 0.1], [2.0, 0.0, -1.0]])
    A = rng.normal(size=(2, 3, 3))
    S = A @ A.transpose(0, 2, 1) * 0.5 + 0.1 * np.eye(3)
    lik = MultinomialProbit(3, quadrature_points=20)
    P_ep = lik.predictive_probabilities(m, S)
    P_qmc = lik.predictive_probabilities(m, S, method="qmc")
    for P in (P_ep, P_qmc):
        np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    N = 400_000
    for i in range(2):
        g = rng.multivariate_normal(m[i], S[i] + np.eye(3), size=N)
        ref = np.bincount(np.argmax(g, axis=1), minlength=3) / N
        np.testing.assert_allclose(P_qmc[i], ref, atol=4e-3)  # MC sd <= 8e-4
        np.testing.assert_allclose(P_ep[i], ref, atol=6e-3)  # + EP's own error
    with pytest.raises(ValueError, match="'ep' or 'qmc'"):
        lik.predictive_probabilities(m, S, method="mc")


def test_class_probabilities_two_classes_closed_form():
    f = np.array([[0.3, -0.4], [1.0, 2.0]])
    p = MultinomialProbit(2).class_probabilities(f)
    np.testing.assert_allclose(p[:, 0], special.ndtr((f[:, 0] - f[:, 1]) / np.sqrt(2)), atol=1e-12)


# ------------------------------------------------------------------------ estimator
def _three_class_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
    y = np.arange(n) % 3
    X = centres[y] + 0.9 * rng.normal(size=(n, 2))
    return X, y


@pytest.mark.parametrize("multi_class", ["multinomial", "one_vs_rest"])
def test_gpclassifier_multiclass_labels_and_probabilities(multi_class):
    X, y = _three_class_data()
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = GPClassifier(ConstantKernel(2.0) * RBF(1.0), optimizer=None, multi_class=multi_class)
    clf.fit(X, labels)
    assert clf.multi_class_ == multi_class
    np.testing.assert_array_equal(clf.classes_, ["setosa", "versicolor", "virginica"])
    P = clf.predict_proba(X)
    assert P.shape == (60, 3)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    pred = clf.predict(X)
    np.testing.assert_array_equal(pred, clf.classes_[np.argmax(P, 1)])
    np.testing.assert_array_equal(np.argmax(clf.decision_function(X), 1), np.argmax(P, 1))
    assert np.mean(pred == labels) > 0.85
    mean, std = clf.predict_latent(X, return_std=True)
    assert mean.shape == std.shape == (60, 3)


def test_gpclassifier_multinomial_optimiser_raises_evidence_and_gradient_matches_fd():
    X, y = _three_class_data(45)
    k0 = ConstantKernel(1.0) * RBF(1.0)
    clf = GPClassifier(k0, multi_class="multinomial").fit(X, y)
    fixed = GPClassifier(k0, multi_class="multinomial", optimizer=None).fit(X, y)
    assert clf.log_marginal_likelihood_value_ >= fixed.log_marginal_likelihood_value_ - 1e-6
    theta = fixed.kernel_.theta
    value, grad = fixed.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(value - fixed.log_marginal_likelihood_value_) < 1e-3
    h = 1e-4
    fd = [
        (
            fixed.log_marginal_likelihood(theta + h * e)
            - fixed.log_marginal_likelihood(theta - h * e)
        )
        / (2 * h)
        for e in np.eye(theta.size)
    ]
    np.testing.assert_allclose(grad, fd, rtol=1e-3, atol=1e-3)


def test_auto_uses_multinomial_and_falls_back_to_one_vs_rest():
    X, y = _three_class_data(30)
    assert GPClassifier(optimizer=None).fit(X, y).multi_class_ == "multinomial"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = GPClassifier(method="laplace", optimizer=None).fit(X, y)
    assert clf.multi_class_ == "one_vs_rest" and len(clf.estimators_) == 3
    with pytest.raises(ValueError, match="multi_class='one_vs_rest'"):
        GPClassifier(method="laplace", multi_class="multinomial", optimizer=None).fit(X, y)


def test_binary_data_ignores_multi_class_bit_for_bit():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 2))
    y = (X[:, 0] > 0).astype(int)
    a = GPClassifier(optimizer=None).fit(X, y)
    for mc in ("multinomial", "one_vs_rest"):
        b = GPClassifier(optimizer=None, multi_class=mc).fit(X, y)
        np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
        np.testing.assert_array_equal(a.site_precision_, b.site_precision_)
        assert not hasattr(b, "multi_class_")


def test_refit_binary_after_multiclass_and_back():
    X, y = _three_class_data(30)
    clf = GPClassifier(optimizer=None)
    clf.fit(X, y)
    clf.fit(X, (y == 0).astype(int))
    assert clf.predict_proba(X).shape == (30, 2) and not hasattr(clf, "multi_class_")
    clf.fit(X, y)
    assert clf.predict_proba(X).shape == (30, 3)


def test_one_vs_rest_log_marginal_likelihood_theta_shapes():
    X, y = _three_class_data(30)
    clf = GPClassifier(ConstantKernel(1.0) * RBF(1.0), multi_class="one_vs_rest", optimizer=None)
    clf.fit(X, y)
    theta = clf.kernel_.theta
    assert theta.shape == (6,)
    assert np.isclose(clf.log_marginal_likelihood(theta), clf.log_marginal_likelihood_value_)
    with pytest.raises(ValueError, match="theta must have 6 entries"):
        clf.log_marginal_likelihood(np.zeros(3))


# ----------------------------------------------------------------------- experiment
def test_multiclass_uci_registered_and_runs_on_a_tiny_config(tmp_path):
    from robustep.experiments import registered
    from robustep.experiments.multiclass_uci import load, report, run

    exp = registered()["multiclass-uci"]
    assert exp.quick and exp.full and exp.claim and exp.source
    assert "digits" in exp.full["datasets"] and "digits" not in exp.quick["datasets"]
    X, y = load("thyroid")
    assert X.shape == (215, 5) and set(np.unique(y)) == {1, 2, 3}
    cfg = dict(exp.quick, datasets=["synthetic"], max_n=45, models=["nested-ep", "laplace-ovr"])
    res = run(cfg, 0)
    assert len(res["results"]) == 2
    for r in res["results"]:
        assert r["n_classes"] == 3 and 0 <= r["error"] <= 0.3 and np.isfinite(r["log_loss"])
    again = run(cfg, 0)  # same splits, same numbers
    assert [r["log_loss"] for r in again["results"]] == [r["log_loss"] for r in res["results"]]
    summary = report(res, tmp_path)
    assert (tmp_path / "multiclass_uci.png").exists()
    assert "synthetic" in summary.tables[0] and summary.agrees in (True, False, None)


def test_multiclass_uci_splits_per_dataset_caps_one_data_set():
    from robustep.experiments import registered
    from robustep.experiments.multiclass_uci import n_splits, units

    cfg = dict(registered()["multiclass-uci"].full, datasets=["iris", "digits"])
    assert n_splits(cfg, "digits") == 10 and len(units(cfg)) == 2 * 10 * len(cfg["models"])
    cfg["splits_per_dataset"] = {"digits": 2, "wine": 50}
    assert n_splits(cfg, "digits") == 2 and n_splits(cfg, "iris") == 10
    assert n_splits(cfg, "wine") == 10  # never more than n_splits
    digits = [u for u in units(cfg) if u["dataset"] == "digits"]
    assert sorted({u["split"] for u in digits}) == [0, 1]
    # the capped data set keeps its index d, so its splits are those of the uncapped run
    assert {u["d"] for u in digits} == {1}


def test_search_subset_is_stratified_and_deterministic():
    from robustep import config
    from robustep.estimators._multinomial import _search_subset

    y = np.repeat([0, 1, 2], [60, 30, 10])
    with config(multinomial_search_subset=50):
        a = _search_subset(y, 3, None)
        b = _search_subset(y, 3, None)
        assert not np.array_equal(a, _search_subset(y, 3, 1))
        assert _search_subset(y[:50], 3, 0) is None  # at most m points: no subset
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.bincount(y[a]), [30, 15, 5])
    assert np.unique(a).size == a.size
    with config(multinomial_search_subset=None):
        assert _search_subset(y, 3, 0) is None


def test_subset_search_starts_a_short_search_on_all_points():
    from robustep import config

    X, y = _three_class_data(60)
    k0 = ConstantKernel(1.0) * RBF(1.0)
    full = GPClassifier(k0, multi_class="multinomial", random_state=0).fit(X, y)
    with config(multinomial_search_subset=30, multinomial_refine_maxiter=2):
        staged = GPClassifier(k0, multi_class="multinomial", random_state=0).fit(X, y)
    core = staged._state.core
    assert core.subset_search_result is not None and core.subset_search_result.moved
    assert full._state.core.subset_search_result is None
    # the search on all points starts at the subset's optimum: fewer evaluations, and an
    # evidence within a fraction of a nat of the full search's
    assert staged.optimizer_result_.n_evaluations < full.optimizer_result_.n_evaluations
    assert staged.log_marginal_likelihood_value_ > full.log_marginal_likelihood_value_ - 0.5
    value = staged.log_marginal_likelihood(staged.kernel_.theta)
    assert abs(value - staged.log_marginal_likelihood_value_) < 1e-3


def test_subset_search_runs_the_restarts():
    from robustep import config

    X, y = _three_class_data(45)
    kernel = ConstantKernel(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-1, 1e1))
    with config(multinomial_search_subset=25, multinomial_subset_maxiter=5):
        clf = GPClassifier(kernel, n_restarts_optimizer=2, random_state=0).fit(X, y)
    core = clf._state.core
    assert core.subset_search_result.n_starts == 3 and clf.optimizer_result_.n_starts == 1


def test_callable_optimizer_searches_on_all_points():
    from scipy.optimize import minimize

    from robustep import config

    calls = []

    def optimizer(obj_func, initial_theta, bounds):
        calls.append(initial_theta.copy())
        sol = minimize(obj_func, initial_theta, jac=True, bounds=bounds, options={"maxiter": 3})
        return sol.x, sol.fun

    X, y = _three_class_data(45)
    with config(multinomial_search_subset=20):
        clf = GPClassifier(optimizer=optimizer, multi_class="multinomial").fit(X, y)
    assert len(calls) == 1 and clf._state.core.subset_search_result is None
    np.testing.assert_array_equal(calls[0], (ConstantKernel(1.0) * RBF(1.0)).theta)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("multinomial_search_subset", 0),
        ("multinomial_search_subset", 2.5),
        ("multinomial_subset_maxiter", 0),
        ("multinomial_refine_maxiter", True),
    ],
)
def test_subset_search_settings_are_validated(name, value):
    from robustep import config

    with pytest.raises(ValueError, match=name), config(**{name: value}):
        pass
