"""Row blocks and reusable work arrays for the O(n m) passes over (n, m) matrices.

Shared by the inducing-point kernels (:mod:`robustep.kernels.inducing`), the FITC
posterior (:mod:`robustep.posterior.sparse`) and the sparse multi-class EP
(:mod:`robustep.ep.multiclass_sparse`); it imports nothing from robustep.
"""

from __future__ import annotations

import numpy as np

# rows per chunk are chosen so that a (chunk, m) float64 temporary holds about this many
# entries (16 MB)
_CHUNK_ENTRIES = 1 << 21


def row_chunks(n: int, m: int, entries: int | None = None):
    """Slices covering range(n) in blocks of about ``entries / m`` rows (16 MB by default)."""
    entries = _CHUNK_ENTRIES if entries is None else entries
    step = max(1, int(entries // max(m, 1)))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


class Scratch:
    """Reusable float64 work arrays, one per name, for loops over row chunks.

    Fresh (chunk, m) temporaries in every chunk cost page faults: glibc hands freed
    blocks of a few MB back to the kernel, and the next block page-faults its memory in
    again on first touch (docs/derivations/sparse.md §6).  ``get(name, shape)``
    returns a C-ordered view of a buffer kept between calls (its contents are
    overwritten by the next call with the same name).
    """

    def __init__(self):
        self._buffers = {}

    def get(self, name, shape):
        size = int(np.prod(shape))
        buf = self._buffers.get(name)
        if buf is None or buf.size < size:
            buf = self._buffers[name] = np.empty(size)
        return buf[:size].reshape(shape)
