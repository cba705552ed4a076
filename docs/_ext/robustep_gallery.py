"""Sphinx-gallery hooks for the scripts in examples/.

Every gallery script saves its figure with ``savefig`` into ``--out DIR`` and closes it
(examples/_gallery.py), so matplotlib's own scraper finds no open figure. Here each
script gets its own output folder, and the scraper moves the PNG files the script wrote
there into the gallery's image slots.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

from sphinx_gallery.scrapers import figure_rst

_ROOT = pathlib.Path(os.environ.get("ROBUSTEP_GALLERY_OUT") or tempfile.gettempdir())


def _out_dir(src_file) -> pathlib.Path:
    return _ROOT / f"robustep-gallery-{os.getpid()}" / pathlib.Path(src_file).stem


def reset_argv(gallery_conf, script_vars):
    """Command line of a gallery script: its default (full) problem, figure to a fresh folder."""
    out = _out_dir(script_vars["src_file"])
    shutil.rmtree(out, ignore_errors=True)
    return ["--out", str(out)]


def saved_figure_scraper(block, block_vars, gallery_conf):
    """Move the PNG files a script saved into the gallery and return their rST."""
    out = _out_dir(block_vars["src_file"])
    saved = sorted(out.glob("*.png")) if out.is_dir() else []
    image_paths = []
    for src, dst in zip(saved, block_vars["image_path_iterator"], strict=False):
        shutil.move(src, dst)
        image_paths.append(dst)
    return figure_rst(image_paths, gallery_conf["src_dir"])
