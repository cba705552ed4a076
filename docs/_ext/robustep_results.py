"""The ``results-table`` directive: a table of a benchmark suite's results JSON file.

Used by docs/performance.md::

    ```{results-table} benchmarks/results/engine.json
    :table: probit fit at n = 2000, Cholesky-times
    :columns: run, 1 thread, 2 threads
    ```

The argument is a path relative to the repository root; ``:table:`` names one table of the
file (benchmarks/_harness.py describes the format); ``:columns:`` optionally keeps only
the named columns, in that order. Below the table a line gives the exact command, the
date, the machine and the library versions the numbers were measured with (the table's
own entries where it has them, else the file's). A missing file, table or column is a
build error, so the page cannot silently show stale names.
"""

from __future__ import annotations

import json
import pathlib

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository (docs/_ext/ is two down)


def load_table(path: pathlib.Path, name: str, columns: list[str] | None = None) -> dict:
    """One table of a results file, with its provenance filled in from the file.

    Returns
    -------
    dict
        ``columns``, ``rows``, ``command``, ``date``, ``machine``, ``source``, ``note``.

    Raises
    ------
    ValueError
        If the table or a requested column is not in the file.
    """
    record = json.loads(path.read_text())
    tables = {t["name"]: t for t in record.get("tables", [])}
    if name not in tables:
        raise ValueError(f"{path.name} has no table {name!r}; it has {sorted(tables)}")
    table = dict(tables[name])
    for key in ("command", "date", "machine", "source"):
        table.setdefault(key, record.get(key))
    table.setdefault("note", None)
    if columns:
        missing = [c for c in columns if c not in table["columns"]]
        if missing:
            raise ValueError(f"table {name!r} of {path.name} has no columns {missing}")
        index = [table["columns"].index(c) for c in columns]
        table["rows"] = [[row[i] if i < len(row) else "" for i in index] for row in table["rows"]]
        table["columns"] = list(columns)
    return table


def describe_machine(machine) -> str:
    """One line for a machine record (a string is returned as it is)."""
    if not machine:
        return "machine not recorded"
    if isinstance(machine, str):
        return machine
    parts = [machine.get("cpu"), f"{machine['cores']} cores" if machine.get("cores") else None]
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']} GiB")
    versions = machine.get("versions") or {}
    if versions:
        parts.append(", ".join(f"{k} {v}" for k, v in versions.items()))
    if machine.get("note"):
        parts.append(machine["note"])
    return "; ".join(p for p in parts if p)


class ResultsTable(SphinxDirective):
    required_arguments = 1
    option_spec = {"table": directives.unchanged_required, "columns": directives.unchanged}

    def run(self):
        path = ROOT / self.arguments[0]
        self.env.note_dependency(str(path))
        columns = [c.strip() for c in self.options.get("columns", "").split(",") if c.strip()]
        try:
            table = load_table(path, self.options["table"], columns or None)
        except (OSError, ValueError, KeyError) as exc:
            raise self.error(f"results-table {self.arguments[0]}: {exc}") from exc
        out = [self._table(table)]
        caption = nodes.paragraph(classes=["results-provenance"])
        caption += nodes.Text("Command: ")
        caption += nodes.literal(text=table["command"] or "not recorded")
        source = " (copied from the earlier record)" if table.get("source") == "docs" else ""
        caption += nodes.Text(
            f"; {table['date'] or 'date not recorded'}{source}; "
            f"{describe_machine(table['machine'])}."
        )
        if table.get("note"):
            caption += nodes.Text(" " + table["note"])
        out.append(caption)
        return out

    def _table(self, table: dict) -> nodes.table:
        width = len(table["columns"])
        tab = nodes.table()
        group = nodes.tgroup(cols=width)
        tab += group
        for _ in range(width):
            group += nodes.colspec(colwidth=1)
        head = nodes.thead()
        group += head
        head += self._row(table["columns"])
        body = nodes.tbody()
        group += body
        for row in table["rows"]:
            body += self._row([*row, *[""] * (width - len(row))][:width])
        return tab

    def _row(self, cells) -> nodes.row:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            para = nodes.paragraph()
            inline, messages = self.state.inline_text(str(cell), self.lineno)
            para += inline
            entry += para
            entry += messages
            row += entry
        return row


def setup(app):
    app.add_directive("results-table", ResultsTable)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
