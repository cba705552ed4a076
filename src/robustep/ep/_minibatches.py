"""Minibatches of the stochastic learner: rows in memory, or block by block from Dask.

:class:`InMemoryBatches`: an epoch is a random permutation of the n rows cut into batches
of ``batch_size`` (the last one shorter).

:class:`BlockBatches`: X (and y) a Dask array chunked by rows, never gathered.  An epoch
visits the blocks (row chunks) in a random order; each block is computed once, its rows
are permuted and cut into batches, and the rows left over at the end of a block open the
first batch of the next one (so every batch but the epoch's last has ``batch_size``
rows, and an epoch has ceil(n / batch_size) steps, as in memory).  While one block is
cut, the next one is computed: on the workers of an active ``distributed.Client`` (a
future) or in a background thread with Dask's default scheduler.  Memory in the driver:
two blocks and one batch.  Batches mix the rows of one block only (at most two at a
block boundary): rows stored in a meaningful order (sorted by label, by time) should be
shuffled once before chunking, or chunked finely.  All random draws (the block order,
the permutation within each block) come from the learner's generator in the driver, so
a seed fixes the batches whatever the scheduler.
"""

from __future__ import annotations

import collections
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from robustep.posterior._dask import is_dask_array

__all__ = ["BlockBatches", "InMemoryBatches"]


def _active_client():
    """The default ``distributed.Client``, or None (distributed not loaded, or no client)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None


class InMemoryBatches:
    """Batches (idx (b,), X[idx] (b, d), y[idx] (b,)) of in-memory X (n, d), y (n,)."""

    def __init__(self, X, y, batch_size, rng):
        self.X, self.y, self.batch_size, self.rng = X, y, batch_size, rng
        self.n = X.shape[0]

    def epoch(self):
        order = self.rng.permutation(self.n)
        for start in range(0, self.n, self.batch_size):
            idx = order[start : start + self.batch_size]
            yield idx, self.X[idx], self.y[idx]

    def close(self):
        pass


class BlockBatches:
    """Batches (None, X rows (b, d), y rows (b,)) of a Dask array X chunked by rows.

    Parameters
    ----------
    X : dask array (n, d) with known chunk sizes (columns are merged into one chunk).
    y : dask array (n,) (rechunked to X's rows) or an in-memory (n,) array.
    validate : callable checking a block of targets (the likelihood's
        ``validate_targets``), applied as each block arrives.
    batch_size : rows per batch; rng : numpy Generator (all random draws).
    """

    def __init__(self, X, y, validate, batch_size, rng):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError("X has unknown chunk sizes (rows); call X.compute_chunk_sizes() first")
        if X.numblocks[1] > 1:
            X = X.rechunk({1: -1})
        self.X = X
        self.rows = tuple(int(c) for c in X.chunks[0])
        self.n = int(X.shape[0])
        self.offsets = np.concatenate([[0], np.cumsum(self.rows)])
        if is_dask_array(y):
            if y.shape != (self.n,):
                raise ValueError(f"y must have shape ({self.n},), got {y.shape}")
            y = y.rechunk((self.rows,))
            self.y, self.y_memory = y, None
        else:
            y = validate(y)
            if y.shape != (self.n,):
                raise ValueError(f"y must have shape ({self.n},), got {y.shape}")
            self.y, self.y_memory = None, y
        self.validate, self.batch_size, self.rng = validate, batch_size, rng
        self.client = _active_client()
        self._executor = None if self.client is not None else ThreadPoolExecutor(1)
        self._queue = collections.deque()  # (block, handle) in visiting order

    # ------------------------------------------------------------------ fetching
    def _submit(self, j):
        parts = [self.X.blocks[j]] + ([self.y.blocks[j]] if self.y is not None else [])
        if self.client is not None:
            return self.client.compute(parts)
        import dask

        return self._executor.submit(dask.compute, *parts)

    def _collect(self, j, handle):
        parts = [f.result() for f in handle] if self.client is not None else handle.result()
        Xb = np.asarray(parts[0], dtype=float)
        if self.y is not None:
            yb = self.validate(parts[1])
        else:
            yb = self.y_memory[self.offsets[j] : self.offsets[j + 1]]
        return Xb, yb

    def _next_block(self):
        """The next block's rows, and the one after it submitted (drawing the next
        epoch's block order when this one is used up)."""
        if not self._queue:
            self._queue.extend((int(j), None) for j in self.rng.permutation(len(self.rows)))
        j, handle = self._queue.popleft()
        if handle is None:
            handle = self._submit(j)
        if self._queue and self._queue[0][1] is None:
            self._queue[0] = (self._queue[0][0], self._submit(self._queue[0][0]))
        return j, handle

    def epoch(self):
        b = self.batch_size
        carry_X, carry_y = np.empty((0, self.X.shape[1])), np.empty(0)
        n_blocks = len(self.rows)
        for k in range(n_blocks):
            j, handle = self._next_block()
            if k == n_blocks - 1 and not self._queue:
                # prefetch the first block of the next epoch while this one is cut
                self._queue.extend((int(i), None) for i in self.rng.permutation(n_blocks))
                self._queue[0] = (self._queue[0][0], self._submit(self._queue[0][0]))
            Xb, yb = self._collect(j, handle)
            perm = self.rng.permutation(Xb.shape[0])
            Xb, yb = Xb[perm], yb[perm]
            if carry_X.shape[0]:
                Xb, yb = np.concatenate([carry_X, Xb]), np.concatenate([carry_y, yb])
            stop = (Xb.shape[0] // b) * b
            for start in range(0, stop, b):
                yield None, Xb[start : start + b], yb[start : start + b]
            carry_X, carry_y = Xb[stop:], yb[stop:]
        if carry_X.shape[0]:
            yield None, carry_X, carry_y

    def close(self):
        """Cancel the prefetched block and stop the thread."""
        for _, handle in self._queue:
            if handle is None:
                continue
            if self.client is not None:
                for f in handle:
                    f.cancel()
            else:
                handle.cancel()
        self._queue.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
