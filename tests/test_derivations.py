"""The derivation pages name only benchmark scripts that exist in benchmarks/."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = re.compile(r"benchmarks/[\w/]+\.py")


def test_derivations_name_existing_benchmark_scripts():
    pages = sorted((ROOT / "docs" / "derivations").glob("*.md"))
    assert pages
    named = {(page.name, m) for page in pages for m in SCRIPT.findall(page.read_text())}
    assert any(m == "benchmarks/engine.py" for _, m in named)  # the pattern finds them
    missing = sorted((page, m) for page, m in named if not (ROOT / m).is_file())
    assert not missing, missing
