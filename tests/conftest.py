"""Test-session settings.

Multithreaded BLAS is pathologically slow on the many small factorisations of
these tests when cores are shared (e.g. 24 ms instead of 0.003 ms for a 42 x 42
triangular solve under load), and pytest-xdist already runs one worker per
core: limit BLAS to one thread per worker.
"""

import matplotlib
from threadpoolctl import threadpool_limits

matplotlib.use("Agg")
_limits = threadpool_limits(limits=1)
