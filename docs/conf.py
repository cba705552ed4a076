"""Sphinx configuration of the robustep documentation (``make docs``).

The build is offline: no intersphinx inventories are fetched, the data sets ship with
the package, and the gallery scripts in examples/ run locally.
"""

from __future__ import annotations

import os
import pathlib
import sys
import warnings

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(DOCS / "_ext"))
# the gallery scripts import their shared command line (examples/_gallery.py)
sys.path.insert(0, str(ROOT / "examples"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import robustep  # noqa: E402

project = "robustep"
author = "robustep developers"
copyright = "robustep developers"
release = robustep.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "robustep_docstrings",
    "robustep_results",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "_ext",
    "_templates",
    # run records of the paper-size experiments; linked, not rendered
    "full-runs",
    # superseded by the sphinx-gallery pages built from examples/
    "gallery.md",
    "gallery",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.json",
    "auto_examples/*.md5",
]

# --- MyST: the Markdown pages of docs/ and docs/derivations/ -------------------------
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 4
myst_dmath_double_inline = True
# some derivation pages step from ## to #### in places
suppress_warnings = ["myst.header"]

# --- API reference ------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()
# robustep.posterior.SitePosterior titles a section "Attributes every implementation
# sets", which numpydoc does not know; it renders as text
warnings.filterwarnings(
    "ignore", message="Unknown section Attributes Every Implementation Sets", category=UserWarning
)

# --- gallery ------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    # every script runs (there is no plot_ prefix); _gallery.py is their shared CLI
    "filename_pattern": r"/[a-z][a-z_]*\.py$",
    "ignore_pattern": r"(^|/)_gallery\.py$",
    "reset_argv": "robustep_gallery.reset_argv",
    "image_scrapers": ("robustep_gallery.saved_figure_scraper",),
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "min_reported_time": 0,
    "show_memory": False,
    "show_signature": False,
}

# --- HTML ---------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"robustep {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_static_path: list[str] = []
html_show_sourcelink = False


# Members left out of the API pages:
# - scikit-learn's generated set_{fit,score,...}_request methods (metadata routing), whose
#   docstrings refer to scikit-learn's own glossary;
# - StudentT.tilted_log_Z_gradient, whose docstring has an indented formula that is not
#   valid RST yet (src/robustep/likelihoods/student_t.py).
_SKIPPED_MEMBERS = {"StudentT.tilted_log_Z_gradient"}


def _skip_member(app, what, name, obj, skip, options):
    if name.startswith("set_") and name.endswith("_request"):
        return True
    if getattr(obj, "__qualname__", None) in _SKIPPED_MEMBERS:
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
