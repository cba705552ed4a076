"""Every built-in experiment cites the paper's section, figure or table, never a work item."""

from __future__ import annotations

import re

import pytest

from robustep.experiments.base import registered

EXPERIMENTS = registered()


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_source_names_a_part_of_the_paper(name):
    exp = EXPERIMENTS[name]
    assert re.search(r"(Fig|Table|§|Sec)", exp.source), exp.source
    for text in (exp.paper, exp.source, exp.claim):
        assert not re.search(r"\bissues?\b|#\d", text, re.IGNORECASE), text
