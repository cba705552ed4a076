"""Scripts of ``benchmarks/`` (and other files outside the package) loaded as modules by
their path: the benchmarks folder is not a package, and ``benchmarks/sparse.py`` would
shadow the pydata ``sparse`` package if the folder were on ``sys.path``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_module(path, alias):
    """A fresh module from the file ``path``, registered in ``sys.modules`` as ``alias``
    (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(alias, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


def load_benchmark(name, alias=None):
    """``benchmarks/NAME.py`` as a fresh module (alias: ``_benchmark_NAME``)."""
    return load_module(ROOT / "benchmarks" / f"{name}.py", alias or f"_benchmark_{name}")
