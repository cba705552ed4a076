"""Settings shared by every test run.

Multithreaded BLAS is pathologically slow on the many small factorisations of
these tests when the cores are busy (docs/performance.md#blas-threads), and
pytest-xdist already runs one worker per core: limit BLAS to one thread per worker.
"""

import matplotlib
from threadpoolctl import threadpool_limits

matplotlib.use("Agg")
_limits = threadpool_limits(limits=1)
