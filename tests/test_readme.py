"""The README works as written: its Python blocks run, its shell commands parse.

The ```python blocks run one after the other in one namespace (as a reader pasting
them into one interpreter would); each command line of the ```sh blocks is checked
without running it: ``robustep`` lines through the CLI's own parser, experiment
names and ``--set`` keys against the registry, ``make`` lines against the
Makefile's targets.  ```text blocks (synopses) are not checked.
"""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import pytest

from robustep.cli import _parse_overrides, _parser
from robustep.experiments.runner import _configuration, resolve

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README.read_text()) if lang == language]


def shell_lines() -> list[str]:
    lines = []
    for body in blocks("sh"):
        for raw in body.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", raw).strip()  # drop comments
            if line:
                lines.append(line)
    return lines


def test_readme_has_blocks_of_each_kind():
    assert len(blocks("python")) >= 3 and len(shell_lines()) >= 5


def test_python_blocks_run_in_order_in_one_namespace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    namespace: dict = {"__name__": "__readme__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a snippet's warnings are not failures here
        for k, code in enumerate(blocks("python")):
            try:
                exec(compile(code, f"README.md python block {k + 1}", "exec"), namespace)
            except Exception as exc:  # name the block in the failure
                pytest.fail(f"README python block {k + 1} raised {exc!r}:\n{code}")


def _check_robustep(args: list[str]) -> None:
    ns = _parser().parse_args(args)  # SystemExit (a usage error) fails the test
    if ns.command == "list":
        return
    experiments = resolve(ns.names)  # unknown names raise
    overrides = _parse_overrides(getattr(ns, "overrides", []))
    if overrides:
        assert len(experiments) == 1, "--set applies to exactly one experiment"
        _configuration(experiments[0], ns.mode, overrides)  # unknown keys raise


def test_shell_commands_parse():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    for line in shell_lines():
        words = shlex.split(line)
        if words[0] in (".venv/bin/robustep", "robustep"):
            _check_robustep(words[1:])
        elif words[:3] in ([".venv/bin/python", "-m", "robustep"], ["python", "-m", "robustep"]):
            _check_robustep(words[3:])
        elif words[0] == "make":
            goals = [w for w in words[1:] if "=" not in w]
            assert goals and set(goals) <= targets, f"{line!r}: not a Makefile target"
        elif words[0] in ("export", ".", "source"):
            continue
        else:
            pytest.fail(f"README shell line {line!r}: add a check for this command here")
