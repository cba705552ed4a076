"""Exponential-family helpers: Gaussian natural parameters and the t-exponential family."""
