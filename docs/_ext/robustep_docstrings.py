"""Render robustep's plain-text formulas in docstrings as text, not as RST markup.

The docstrings write formulas in plain text, e.g. ``p(y_i | y_-i)`` or ``|B_-i|``. In
reStructuredText a word ending in ``_`` is a reference and ``|...|`` a substitution, so
these would be build errors. After numpydoc has turned a docstring into RST, this hook
escapes those two characters outside inline literals, roles and literal blocks; the
rendered text reads exactly as the docstring.
"""

from __future__ import annotations

import re

# inline literals, roles with their target, and interpreted text: left untouched
_PROTECTED = re.compile(r"(``.+?``|:[\w:.-]+:`[^`]*`|`[^`]*`_{0,2})")
_TRAILING_UNDERSCORE = re.compile(r"(?<=[\w)\]])_(?=\W|$)")


def _escape(text: str) -> str:
    parts = _PROTECTED.split(text)
    for k in range(0, len(parts), 2):  # even indices lie outside protected spans
        part = parts[k].replace("|", r"\|")
        parts[k] = _TRAILING_UNDERSCORE.sub(r"\_", part)
    return "".join(parts)


def escape_plain_formulas(app, what, name, obj, options, lines):
    """``autodoc-process-docstring`` handler: escape ``|`` and trailing ``_`` in place."""
    literal_indent = None
    for k, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if literal_indent is not None:
            if not stripped or indent > literal_indent:
                continue
            literal_indent = None
        if stripped.startswith((".. ", ">>>", "...")):
            if stripped.rstrip().endswith("::"):
                literal_indent = indent
            continue
        lines[k] = _escape(line)
        if stripped.rstrip().endswith("::"):
            literal_indent = indent


def setup(app):
    # after numpydoc (priority 500), which needs the raw docstring
    app.connect("autodoc-process-docstring", escape_plain_formulas, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
