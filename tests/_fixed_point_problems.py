"""Small problems shared by the tests of EP's fixed points (stability, Newton's method)."""

from __future__ import annotations

import numpy as np
from sklearn.gaussian_process.kernels import RBF

from _benchmarks import load_benchmark

__all__ = ["probit_problem", "xor_step"]


def probit_problem(n=40, seed=0):
    """(K (n, n), y (n,)): one-dimensional inputs, RBF covariance of amplitude 2, labels
    from a noisy threshold at 0."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 1))
    K = 2.0 * np.exp(-0.5 * (X - X.T) ** 2) + 1e-8 * np.eye(n)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return K, y


def xor_step(n, seed, ell):
    """(K, y): XOR with 20% flipped labels (benchmarks/stress.py's step_noise_data) and
    RBF(ell) plus a 1e-8 jitter."""
    X, y = load_benchmark("stress", "_stress_fixed_points").step_noise_data("xor", n, 0.2, seed)
    return RBF(ell)(X) + 1e-8 * np.eye(n), y
