"""The documentation site builds without warnings, and its Sphinx hooks do what they say.

The full build (``make docs``) runs every gallery script; the test here builds the site
with ``-W`` but without executing the gallery (sphinx-gallery's ``plot_gallery=0``), from
a copy of docs/ and examples/ so that the generated pages stay out of the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import robustep_docstrings  # noqa: E402


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


SPHINX_STACK = ("sphinx", "sphinx_gallery", "numpydoc", "myst_parser", "pydata_sphinx_theme")


def _escaped(*lines: str) -> list[str]:
    out = list(lines)
    robustep_docstrings.escape_plain_formulas(None, "function", "f", None, {}, out)
    return out


def test_plain_formulas_are_escaped():
    # y_-i: "y_" followed by punctuation is a reference in RST
    assert _escaped("log p(y_i | y_-i) of each") == [r"log p(y_i \| y\_-i) of each"]
    assert _escaped("|B_-i|^{-1/df}") == [r"\|B\_-i\|^{-1/df}"]
    # a trailing underscore would make a reference: fitted attributes, -loo_log_predictive_
    assert _escaped("= -loo_log_predictive_ (n,)") == [r"= -loo_log_predictive\_ (n,)"]
    assert _escaped("**outlier_scores_** : (n,)") == [r"**outlier_scores\_** : (n,)"]


def test_literals_roles_and_literal_blocks_are_left_alone():
    untouched = [
        "``p(y | f)`` and :func:`robustep.ep.expectation_propagation` and `a_`_",
        ".. math::",
        "",
        "   |x| + y_",
        "",
        ">>> a_ | b",
    ]
    assert _escaped(*untouched) == untouched
    # text after a literal block is escaped again
    assert _escaped("Example::", "", "    a | b", "", "then a | b")[-1] == r"then a \| b"


@pytest.mark.skipif(not _have("sphinx_gallery"), reason="sphinx-gallery not installed")
def test_gallery_scraper_moves_the_saved_figure(tmp_path, monkeypatch):
    import robustep_gallery

    monkeypatch.setattr(robustep_gallery, "_ROOT", tmp_path)
    src_file = str(tmp_path / "examples" / "my_example.py")
    argv = robustep_gallery.reset_argv({}, {"src_file": src_file})
    assert argv[0] == "--out"
    out = Path(argv[1])
    out.mkdir(parents=True)
    (out / "my_example.png").write_bytes(b"\x89PNG fake")
    gallery = tmp_path / "gallery" / "images"
    gallery.mkdir(parents=True)
    slots = iter([str(gallery / "sphx_glr_my_example_001.png")])
    block_vars = {"src_file": src_file, "image_path_iterator": slots}
    rst = robustep_gallery.saved_figure_scraper(None, block_vars, {"src_dir": str(tmp_path)})
    assert (gallery / "sphx_glr_my_example_001.png").read_bytes() == b"\x89PNG fake"
    assert not (out / "my_example.png").exists()
    assert "sphx_glr_my_example_001.png" in rst
    # a script that saved nothing gives no image
    assert robustep_gallery.saved_figure_scraper(None, block_vars, {"src_dir": str(tmp_path)}) == ""


@pytest.mark.slow
@pytest.mark.skipif(not _have(*SPHINX_STACK), reason="the docs extra is not installed")
def test_docs_build_without_warnings(tmp_path):
    generated = shutil.ignore_patterns("_build", "auto_examples", "generated", "*.pyc")
    shutil.copytree(DOCS, tmp_path / "docs", ignore=generated)
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=generated)
    # docs/performance.md renders its tables from the suites' results files
    results = ROOT / "benchmarks" / "results"
    shutil.copytree(
        results, tmp_path / "benchmarks" / "results", ignore=shutil.ignore_patterns("local")
    )
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q"]
    cmd += ["-D", "plot_gallery=0", str(tmp_path / "docs"), str(tmp_path / "html")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    html = tmp_path / "html"
    for page in [
        "index.html",
        "guide/convergence.html",
        "auto_examples/index.html",
        "api/generated/robustep.GPClassifier.html",
        "derivations/sparse.html",
        "performance.html",
    ]:
        assert (html / page).is_file(), page


# pages whose ```python blocks form a complete program (the others show fragments)
RUNNABLE_PAGES = [
    "getting-started.md",
    "guide/robust-regression.md",
    "guide/label-noise.md",
    "guide/multiclass.md",
    "guide/large-data.md",
]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_page_code_runs(page):
    blocks = FENCE.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no python blocks"
    if any("import dask" in block for block in blocks):
        pytest.importorskip("dask.array")
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, f"{page} block", "exec"), namespace)
