"""Writing reproduction reports: JSON, per-experiment README, and the index.

Layout of a report folder ``OUT``::

    OUT/index.html              one line per experiment: the paper's claim (first sentence),
                                agrees, the deciding number, a thumbnail of its first figure
    OUT/README.md               the same in Markdown
                                (both say so at the top when a run was in quick mode)
    OUT/NAME/results.json       raw results returned by the experiment's ``run``
    OUT/NAME/run.json           status, mode, seed, config, wall time, summary (read by the index)
    OUT/NAME/README.md          claim, measured, agreement, tables, figures, notes, config
    OUT/NAME/index.html         the same as a web page (linked from OUT/index.html)
    OUT/NAME/*.png              figures written by the experiment's ``report``
    OUT/NAME/traceback.txt      only for an experiment that failed

The index is rebuilt from every ``OUT/*/run.json``, so experiments reproduced
by earlier invocations into the same folder stay listed (with their date).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "QUICK_MODE_NOTE",
    "NumpyJSONEncoder",
    "agreement_label",
    "dump_json",
    "load_runs",
    "markdown_table",
    "markdown_to_html",
    "table_title",
    "titled",
    "write_experiment_readme",
    "write_index",
]

#: Status values of a run record.
STATUS_OK, STATUS_NO_DATA, STATUS_FAILED = "ok", "no-data", "failed"

#: Said under a quick run's summary line and at the top of a report that lists a quick run.
QUICK_MODE_NOTE = (
    "Quick mode runs smaller problems than the papers (fewer points, folds, draws and "
    "iterations), so its verdicts are indicative only. Full-size verdicts: "
    "docs/full-runs/README.md, or run `robustep reproduce NAME --full`."
)


class NumpyJSONEncoder(json.JSONEncoder):
    """JSON encoder for experiment results.

    Handles numpy arrays and scalars, paths, sets/tuples, dataclasses and complex
    numbers ([real, imag]).  Non-finite floats are written as ``NaN`` /
    ``Infinity`` (Python's ``json`` reads them back; strict JSON parsers do not).
    """

    def default(self, o: Any) -> Any:
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, np.bool_):
            return bool(o)
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, complex | np.complexfloating):
            return [float(o.real), float(o.imag)]
        if isinstance(o, Path):
            return str(o)
        if isinstance(o, set | frozenset):
            return sorted(o, key=repr)
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.asdict(o)
        return super().default(o)


def dump_json(obj: Any, path: Path) -> None:
    """Write ``obj`` as indented JSON with :class:`NumpyJSONEncoder`."""
    text = json.dumps(obj, cls=NumpyJSONEncoder, indent=2, sort_keys=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def agreement_label(agrees: bool | None) -> str:
    """``True`` -> "yes", ``False`` -> "no", ``None`` -> "partly"."""
    if agrees is None:
        return "partly"
    return "yes" if agrees else "no"


def markdown_table(header: list[str], rows: list[list[Any]], float_format: str = ".4g") -> str:
    """A Markdown table; floats are formatted with ``float_format``.

    A helper for experiments' ``report`` functions.
    """
    if any(len(r) != len(header) for r in rows):
        raise ValueError("every row must have as many cells as the header")

    def cell(v: Any) -> str:
        if isinstance(v, float | np.floating):
            return format(float(v), float_format) if math.isfinite(v) else str(float(v))
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def titled(title: str, table: str) -> str:
    """``table`` (Markdown) under its bold title line: the form of every table of an
    experiment page that shows several (the page renders the title above the table)."""
    return f"**{title}**\n\n{table.strip()}"


def table_title(table: str) -> str | None:
    """The title of a table made by :func:`titled` (its first line in bold), or None."""
    first = table.strip().splitlines()[0] if table.strip() else ""
    match = _TITLE.match(first)
    return match.group(1) if match else None


_TITLE = re.compile(r"^\*\*(.+?)\*\*")


def _config_block(config: dict) -> str:
    return "```json\n" + json.dumps(config, cls=NumpyJSONEncoder, indent=2) + "\n```"


def write_experiment_readme(record: dict, out_dir: Path) -> Path:
    """Write ``out_dir/README.md`` and ``out_dir/index.html`` for one run record.

    ``record`` is the content of ``run.json``.
    """
    out_dir = Path(out_dir)
    lines = [f"# {record['name']}", ""]
    lines += [f"**Paper:** {record['paper']} — {record['source']}", ""]
    lines += [f"**Claim:** {record['claim']}", ""]
    status = record["status"]
    if status == STATUS_OK:
        s = record["summary"]
        lines += [f"**Measured:** {s['measured']}", ""]
        lines += [f"**Agrees with the paper:** {agreement_label(s['agrees'])}", ""]
        if s.get("key_number"):
            lines += [f"**Deciding number:** {s['key_number']}", ""]
        if s["tables"]:
            lines += ["## Tables", ""]
            for t in s["tables"]:
                lines += [t.strip(), ""]
        if s["figures"]:
            lines += ["## Figures", ""]
            for f in s["figures"]:
                missing = "" if (out_dir / f).is_file() else " (missing: not written)"
                lines += [f"![{f}]({f}){missing}", ""]
                if (s.get("captions") or {}).get(f):
                    lines += [f"*{f}: {s['captions'][f]}*", ""]
        if s["notes"]:
            lines += ["## Notes", "", s["notes"].strip(), ""]
    elif status == STATUS_NO_DATA:
        lines += ["**Not run: a data set is not available.**", "", record["error"], ""]
    else:
        lines += [
            f"**FAILED** with `{record['error_type']}`: {record['error']}",
            "",
            "The full traceback is in [traceback.txt](traceback.txt).",
            "",
        ]
    if record.get("warnings"):
        lines += ["## Warnings during the run", ""]
        for w in record["warnings"]:
            lines.append(f"- {w['count']} × `{w['category']}`: {_md_text(w['message'])}")
        lines.append("")
    lines += ["## Run", ""]
    lines += [
        f"- mode: {record['mode']}, seed: {record['seed']}",
        f"- wall time: {record['wall_time']:.1f} s",
        f"- finished: {record['finished']}",
        f"- robustep {record['version']}",
        "",
        "Configuration used:",
        "",
        _config_block(record["config"]),
        "",
    ]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    _write_experiment_html(record, out_dir)
    return path


def _split_row(line: str) -> list[str]:
    cells, cur, i = [], "", 0
    body = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur, i = cur + "|", i + 2
            continue
        if body[i] == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    cells.append(cur.strip())
    return cells


def markdown_to_html(text: str) -> str:
    """Minimal Markdown for report pages: pipe tables become HTML tables, other lines <p>.

    Anything that is not a pipe table or a bold title at the start of a line (a table's
    title, :func:`titled`) is shown as escaped text, so no Markdown feature is ever
    misrendered, only left as written.
    """
    e = html.escape
    out: list[str] = []
    lines = text.strip().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        is_table = (
            line.strip().startswith("|")
            and i + 1 < len(lines)
            and set(lines[i + 1].replace("|", "").replace(":", "").strip()) <= {"-"}
            and "-" in lines[i + 1]
        )
        if is_table:
            header = _split_row(line)
            out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in header) + "</tr>")
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = _split_row(lines[i])
                out.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
                i += 1
            out.append("</table>")
            continue
        title = _TITLE.match(line.strip())
        if title:  # a table's title (see titled): bold, the rest of the line as written
            rest = line.strip()[title.end() :]
            out.append(f"<p><strong>{e(title.group(1))}</strong>{e(rest)}</p>")
        elif line.strip():
            out.append(f"<p>{e(line)}</p>")
        i += 1
    return "\n".join(out)


def _write_experiment_html(record: dict, out_dir: Path) -> Path:
    """``out_dir/index.html``: the experiment's page, linked from the report index."""
    e = html.escape
    title = f"{record['name']} — robustep reproduction"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
        '<p><a href="../index.html">&larr; all experiments</a></p>',
        f"<h1>{e(record['name'])}</h1>",
        f"<p><b>Paper:</b> {e(record['paper'])} &mdash; {e(record['source'])}</p>",
        f"<p><b>Claim:</b> {e(record['claim'])}</p>",
    ]
    status = record["status"]
    if status == STATUS_OK:
        s = record["summary"]
        label = agreement_label(s["agrees"])
        parts += [
            f"<p><b>Measured:</b> {e(s['measured'])}</p>",
            f'<p><b>Agrees with the paper:</b> <span class="{label}">{label}</span></p>',
        ]
        if s.get("key_number"):
            parts.append(f"<p><b>Deciding number:</b> {e(s['key_number'])}</p>")
        if s["tables"]:
            parts.append("<h2>Tables</h2>")
            parts += [markdown_to_html(t) for t in s["tables"]]
        if s["figures"]:
            parts.append("<h2>Figures</h2>")
            for f in s["figures"]:
                if (out_dir / f).is_file():
                    parts.append(f'<p><img src="{e(f)}" alt="{e(f)}" style="max-width:100%"></p>')
                else:
                    parts.append(f"<p>{e(f)} (missing: not written)</p>")
                if (s.get("captions") or {}).get(f):
                    parts.append(f"<p><i>{e(s['captions'][f])}</i></p>")
        if s["notes"]:
            parts += ["<h2>Notes</h2>", f'<p style="white-space: pre-wrap">{e(s["notes"])}</p>']
    elif status == STATUS_NO_DATA:
        parts += [
            "<p><b>Not run: a data set is not available.</b></p>",
            f"<p>{e(record['error'])}</p>",
        ]
    else:
        tb_path = out_dir / "traceback.txt"
        tb = tb_path.read_text(encoding="utf-8") if tb_path.is_file() else ""
        parts += [
            f'<div class="failed"><b>FAILED</b> with <code>{e(record["error_type"])}</code>: '
            f"{e(record['error'])}<pre>{e(tb)}</pre></div>"
        ]
    if record.get("warnings"):
        parts.append("<h2>Warnings during the run</h2><ul>")
        for w in record["warnings"]:
            parts.append(
                f"<li>{w['count']} &times; <code>{e(w['category'])}</code>: {e(w['message'])}</li>"
            )
        parts.append("</ul>")
    parts += [
        "<h2>Run</h2>",
        f"<p>mode: {e(record['mode'])}, seed: {e(str(record['seed']))}, wall time: "
        f"{record['wall_time']:.1f} s, finished: {e(record['finished'])}, "
        f"robustep {e(record['version'])}</p>",
        "<p>Configuration used:</p>",
        f"<pre>{e(json.dumps(record['config'], cls=NumpyJSONEncoder, indent=2))}</pre>",
        '<p>Raw results: <a href="results.json">results.json</a></p>'
        if status == STATUS_OK
        else "",
        "</body></html>",
    ]
    path = out_dir / "index.html"
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


def load_runs(out_dir: Path) -> list[dict]:
    """Every ``out_dir/*/run.json`` record, sorted by name (unreadable ones skipped)."""
    records = []
    for p in sorted(Path(out_dir).glob("*/run.json")):
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and {"name", "status"} <= rec.keys():
            rec["folder"] = p.parent.name
            records.append(rec)
    return sorted(records, key=lambda r: r["name"])


def _md_text(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _write_index_md(records: list[dict], out_dir: Path, title: str) -> None:
    ok = [r for r in records if r["status"] == STATUS_OK]
    nodata = [r for r in records if r["status"] == STATUS_NO_DATA]
    failed = [r for r in records if r["status"] == STATUS_FAILED]
    lines = [f"# {title}", ""]
    lines += [
        f"{_plural(len(records))}: {len(ok)} ran, {len(nodata)} lacked data, "
        f"{len(failed)} failed. Generated {_now()}.",
        "",
    ]
    if _any_quick(records):
        lines += [f"> **{QUICK_MODE_NOTE}**", ""]
    if failed:
        lines += [f"## ⚠ FAILED ({len(failed)})", ""]
        for r in failed:
            f = r["folder"]
            lines.append(
                f"- **{r['name']}**: `{r['error_type']}`: {_md_text(r['error'])} "
                f"([traceback]({f}/traceback.txt))"
            )
        lines.append("")
    lines += ["## Results", ""]
    if ok:
        lines += [
            "One line per experiment; the experiment's page has the numbers, tables, all "
            "figures and notes.",
            "",
            "| experiment | paper's claim | agrees | deciding number | figure | run |",
            "|---|---|---|---|---|---|",
        ]
        for r in ok:
            s, f = r["summary"], r["folder"]
            figs = s["figures"]
            fig = f"[{Path(figs[0]).name}]({f}/{figs[0]})" if figs else "—"
            lines.append(
                f"| [{r['name']}]({f}/README.md) ({_md_text(r['paper'])}, "
                f"{_md_text(r['source'])}) | {_md_text(_one_line(r['claim']))} | "
                f"{agreement_label(s['agrees'])} | {_md_text(_key_number(s))} | {fig} | "
                f"{_run_cell(r)} |"
            )
    else:
        lines.append("No experiment produced results.")
    lines.append("")
    if nodata:
        lines += [f"## Lacked data ({len(nodata)})", ""]
        for r in nodata:
            lines.append(f"- **{r['name']}** ({_md_text(r['paper'])}): {_md_text(r['error'])}")
        lines.append("")
    (out_dir / "README.md").write_text("\n".join(lines), encoding="utf-8")


_CSS = """
body { font-family: sans-serif; margin: 2em; max-width: 1400px; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: 6px; vertical-align: top; text-align: left; }
th { background: #f0f0f0; }
.yes { color: #060; font-weight: bold; } .no { color: #a00; font-weight: bold; }
.partly { color: #a60; font-weight: bold; }
.quick { border: 2px solid #a60; background: #fff6e0; padding: 0.6em; }
.failed { border: 2px solid #a00; background: #fee; padding: 1em; }
img.thumb { max-width: 220px; max-height: 160px; margin: 2px; border: 1px solid #ddd; }
.cite { color: #555; font-size: 85%; }
"""


def _write_index_html(records: list[dict], out_dir: Path, title: str) -> None:
    e = html.escape
    ok = [r for r in records if r["status"] == STATUS_OK]
    nodata = [r for r in records if r["status"] == STATUS_NO_DATA]
    failed = [r for r in records if r["status"] == STATUS_FAILED]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f"<p>{_plural(len(records))}: {len(ok)} ran, {len(nodata)} lacked data, "
        f"{len(failed)} failed. Generated {e(_now())}.</p>",
    ]
    if _any_quick(records):
        note = re.sub(r"`([^`]*)`", r"<code>\1</code>", e(QUICK_MODE_NOTE))
        parts.append(f'<p class="quick"><b>{note}</b></p>')
    if failed:
        parts.append(f'<div class="failed"><h2>&#9888; FAILED ({len(failed)})</h2><ul>')
        for r in failed:
            f = e(r["folder"])
            parts.append(
                f'<li><b><a href="{f}/index.html">{e(r["name"])}</a></b>: '
                f"<code>{e(r['error_type'])}</code>: "
                f'{e(r["error"])} (<a href="{f}/traceback.txt">traceback</a>)</li>'
            )
        parts.append("</ul></div>")
    parts.append("<h2>Results</h2>")
    if ok:
        parts.append(
            "<p>One line per experiment; its page (follow its name) has the numbers, tables, "
            "all figures and notes.</p>"
        )
        parts.append(
            "<table><tr><th>experiment</th><th>paper's claim</th><th>agrees</th>"
            "<th>deciding number</th><th>figure</th><th>run</th></tr>"
        )
        for r in ok:
            s, f = r["summary"], e(r["folder"])
            label = agreement_label(s["agrees"])
            figs = s["figures"]
            thumb = (
                f'<a href="{f}/index.html"><img class="thumb" src="{f}/{e(figs[0])}" '
                f'alt="{e(figs[0])}"></a>'
                if figs
                else "&mdash;"
            )
            parts.append(
                f'<tr><td><a href="{f}/index.html">{e(r["name"])}</a><br>'
                f'<span class="cite">{e(r["paper"])} ({e(r["source"])})</span></td>'
                f'<td title="{e(r["claim"])}">{e(_one_line(r["claim"]))}</td>'
                f'<td class="{label}">{label}</td><td>{e(_key_number(s))}</td>'
                f'<td>{thumb}</td><td class="cite">{e(_run_cell(r))}</td></tr>'
            )
        parts.append("</table>")
    else:
        parts.append("<p>No experiment produced results.</p>")
    if nodata:
        parts.append(f"<h2>Lacked data ({len(nodata)})</h2><ul>")
        for r in nodata:
            parts.append(
                f'<li><b><a href="{e(r["folder"])}/index.html">{e(r["name"])}</a></b> '
                f"({e(r['paper'])}): {e(r['error'])}</li>"
            )
        parts.append("</ul>")
    parts.append("</body></html>")
    (out_dir / "index.html").write_text("\n".join(parts) + "\n", encoding="utf-8")


def write_index(out_dir: Path, title: str = "robustep reproduction report") -> list[dict]:
    """Write ``out_dir/index.html`` and ``out_dir/README.md`` from every ``*/run.json``.

    Returns the records listed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = load_runs(out_dir)
    _write_index_md(records, out_dir, title)
    _write_index_html(records, out_dir, title)
    return records


def _run_cell(r: dict) -> str:
    """ "quick, seed 0, 12.3 s, 2026-01-31 12:00" for the index's run column."""
    when = str(r.get("finished", ""))[:16].replace("T", " ")
    return f"{r['mode']}, seed {r['seed']}, {r['wall_time']:.1f} s, {when}"


def _one_line(text: str, limit: int = 160) -> str:
    """The first sentence of ``text``, cut at ``limit`` characters (with "…")."""
    text = " ".join(str(text).split())
    first = text.split(". ", 1)[0]
    if first != text and not first.endswith("."):
        first += "."
    if len(first) > limit:
        first = first[: limit - 1].rsplit(" ", 1)[0] + "…"
    return first


def _key_number(summary: dict) -> str:
    """The summary's deciding number, else the start of what it measured."""
    return summary.get("key_number") or _one_line(summary["measured"], limit=120)


def _any_quick(records: list[dict]) -> bool:
    return any(r.get("mode") == "quick" for r in records)


def _plural(n: int) -> str:
    return f"{n} experiment" + ("" if n == 1 else "s")


def _now() -> str:
    return _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
