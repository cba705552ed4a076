"""Shared command line of the gallery scripts: ``--quick`` and ``--out DIR``.

Every example defines ``main(quick: bool, out: pathlib.Path) -> pathlib.Path`` (the
figure it saved) and ends with ``run(main)``.  ``--quick`` shrinks the problem so that
the test suite can run every example in seconds; the figures in docs/gallery/ come
from the default (full) mode. Every figure is drawn in the library's figure style
(:func:`robustep.plotting.style`).
"""

from __future__ import annotations

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")

from robustep.plotting import style  # noqa: E402


def run(main, argv=None):
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="a small problem (seconds)")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("."), help="folder for the figure"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with style():
        path = main(quick=args.quick, out=args.out)
    print(f"saved {path}")
    return path
