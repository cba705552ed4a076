"""Every example in a docstring of robustep runs as a doctest and shows what it prints.

The same examples also run with ``pytest --doctest-modules src/robustep`` (the option
flags are in pyproject.toml); this test keeps them in ``make test``, one case per module,
and skips a module whose optional dependency (dask, torch, CuPy) is not installed.
"""

import doctest
import importlib
import pkgutil
import warnings

import robustep

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules():
    names = [robustep.__name__]
    for info in pkgutil.walk_packages(robustep.__path__, prefix="robustep."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            names.append(info.name)
    return sorted(names)


def _examples(name):
    """The doctests of module ``name`` (of the objects defined in it); [] if an optional
    dependency of the module is not installed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the deprecated aliases
        try:
            module = importlib.import_module(name)
        except ImportError:
            return []
    return [t for t in doctest.DocTestFinder().find(module, name) if t.examples]


def _failures(tests):
    """The report of the examples of ``tests`` that fail ("" when all pass)."""
    report = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in tests:
        runner.run(test, out=report.append)
    return "".join(report) if runner.failures else ""


def test_docstring_examples_run():
    tests = {name: _examples(name) for name in _modules()}
    assert len(tests["robustep.mrf"]) == 1 and len(tests["robustep.plotting"]) == 1
    failures = {name: _failures(found) for name, found in tests.items() if found}
    failed = {name: text for name, text in failures.items() if text}
    assert not failed, "\n".join(failed.values())


def test_a_failing_example_is_reported():
    parser = doctest.DocTestParser()
    test = parser.get_doctest(">>> 1 + 1\n3\n", {}, "example", "example.py", 0)
    assert "Expected:\n    3\nGot:\n    2" in _failures([test])
    test = parser.get_doctest(">>> [1,   2]\n[1, 2]\n", {}, "example", "example.py", 0)
    assert _failures([test]) == ""
