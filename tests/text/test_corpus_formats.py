"""The text trainer's corpora as people keep them: JSON lines, CSV, TSV, parquet and ``save_to_disk`` folders
read to the same token ids as the same sentences in a plain text file, and every bad record refused in one
line naming the file and the record."""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

import pytest

from hardmix.cli import main
from hardmix.config.loader import ConfigError
from hardmix.text.config import build_text_config
from hardmix.text.data import CorpusError, corpus_format, iter_sentences, read_corpus

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

#: Sentences a CSV writer must quote, and non-ASCII text, besides the real ones.
TRICKY = ['a "quoted" word , and a comma .', "tab\tinside", "ünïcödé and 中文 .", "  leading spaces kept"]


class StubTokenizer:
    """Enough of a tokenizer for :func:`read_corpus` where only the reading is tested: one id per word."""

    def __len__(self) -> int:
        return 100

    def __call__(self, texts: list[str], **kw: object) -> dict[str, list[list[int]]]:
        return {"input_ids": [[1 + len(w) % 98 for w in t.split()] or [99] for t in texts]}


@pytest.fixture(scope="module")
def tokenizer(bert_mini_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bert_mini_path)


# ------------------------------------------------------------------------------------------ writers
def write_jsonl(path: Path, values: list[object], field: str = "text", compress: bool = False) -> Path:
    """One object a line with ``field`` and another key; a blank line after the first record."""
    lines = [json.dumps({"id": i, field: v}, ensure_ascii=i % 2 == 0) for i, v in enumerate(values)]
    text = "\n".join(lines[:1] + [""] + lines[1:]) + "\n"
    if compress:
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_csv(path: Path, values: list[str | None], field: str = "text", delimiter: str = ",") -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(["id", field, "source"])
        w.writerows([i, "" if v is None else v, "wiki"] for i, v in enumerate(values))
    return path


def write_parquet(path: Path, values: list[object], field: str = "text") -> Path:
    pq.write_table(pa.table({"id": list(range(len(values))), field: values}), path, row_group_size=7)
    return path


def write_saved(path: Path, values: list[object], field: str = "text", splits: tuple[str, ...] = ()) -> Path:
    ds = datasets.Dataset.from_dict({"id": list(range(len(values))), field: values})
    (datasets.DatasetDict({s: ds for s in splits}) if splits else ds).save_to_disk(str(path))
    return path


WRITERS = {
    "jsonl": lambda d, v: write_jsonl(d / "c.jsonl", v),
    "jsonl.gz": lambda d, v: write_jsonl(d / "c.jsonl.gz", v, compress=True),
    "json, key sentence": lambda d, v: write_jsonl(d / "c.json", v, field="sentence"),
    "csv": lambda d, v: write_csv(d / "c.csv", v),
    "csv, column sentence": lambda d, v: write_csv(d / "c.CSV", v, field="sentence"),
    "tsv": lambda d, v: write_csv(d / "c.tsv", v, delimiter="\t"),
    "parquet": lambda d, v: write_parquet(d / "c.parquet", v),
    "save_to_disk": lambda d, v: write_saved(d / "saved", v),
    "DatasetDict of one split": lambda d, v: write_saved(d / "dict", v, splits=("train",)),
}


def field_of(kind: str) -> str:
    return "sentence" if "sentence" in kind else "text"


# ------------------------------------------------------------------------------- the same token ids
@pytest.mark.data
@pytest.mark.parametrize("kind", list(WRITERS))
def test_every_format_reads_the_ids_of_the_plain_text(tmp_path, tokenizer, wiki_sentences, kind, monkeypatch):
    sentences = TRICKY + wiki_sentences[:40]
    plain = tmp_path / "c.txt"
    plain.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    expected = read_corpus(plain, tokenizer, max_length=32)
    # a null and a blank record are skipped as blank lines are (a CSV has no null: an empty field)
    path = WRITERS[kind](tmp_path, [*sentences[:3], None, "   ", *sentences[3:]])
    monkeypatch.setattr("hardmix.text.data._BATCH_ROWS", 5)  # several parquet / arrow batches
    got = read_corpus(path, tokenizer, max_length=32, chunk_lines=7, text_field=field_of(kind))
    assert len(got) == len(expected) == len(sentences)
    assert [got[i].tolist() for i in range(len(got))] == [expected[i].tolist() for i in range(len(expected))]
    assert got[2].tolist() == tokenizer(TRICKY[2], truncation=True, max_length=32)["input_ids"]


def test_record_numbers(tmp_path, monkeypatch):
    """Lines (from 1) for JSON lines and CSV (a record is one line: a quoted field holding a line break is
    refused, see BAD); rows (from 0) for parquet and arrow, across batches; nulls and blanks skipped."""
    monkeypatch.setattr("hardmix.text.data._BATCH_ROWS", 2)
    values = ["one .", None, "two .", "", "three ."]
    assert list(iter_sentences(write_jsonl(tmp_path / "a.jsonl", values))) == [
        (1, "one ."), (4, "two ."), (6, "three .")]  # line 2 is blank
    csv_path = tmp_path / "a.csv"
    csv_path.write_text('text,n\n"first, ""quoted""",1\n\nsecond,2\n', encoding="utf-8")
    assert list(iter_sentences(csv_path)) == [(2, 'first, "quoted"'), (4, "second")]
    expected = [(0, "one ."), (2, "two ."), (4, "three .")]
    assert list(iter_sentences(write_parquet(tmp_path / "a.parquet", values))) == expected
    assert list(iter_sentences(write_saved(tmp_path / "saved", values))) == expected


def test_formats_by_name(tmp_path):
    assert [corpus_format(n) for n in ("wiki1m.txt", "cut.gz", "plain", "a.jsonl", "a.json.gz", "a.CSV",
                                       "a.tsv.gz", "a.parquet")] == \
        ["text", "text", "text", "jsonl", "jsonl", "csv", "tsv", "parquet"]
    assert corpus_format(write_saved(tmp_path / "saved", ["a ."])) == "arrow"


# --------------------------------------------------------------------------------------- bad input
def _jsonl(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


BAD = [
    # (file name, content: bytes, or a callable writing the path, text_field, record, what the message says)
    ("bad.jsonl", _jsonl('{"text": "fine ."}', '{"text": "cut'), "text", 2, "not valid JSON"),
    ("bad.jsonl", _jsonl('{"text": "fine ."}', "", '["a list ."]'), "text", 3, "an array, not a JSON object"),
    ("bad.json", _jsonl('{"text": "fine ."}', '{"sentence": "x", "id": 3}'), "text", 2,
     "no key 'text' (data.text_field); the line's keys: 'sentence', 'id'"),
    ("bad.jsonl", _jsonl('{"text": "fine ."}', '{"text": 5}'), "text", 2, "holds a value of type int (5)"),
    ("bad.jsonl", _jsonl('{"text": "fine ."}', '{"text": ["a", "b"]}'), "text", 2, "type list"),
    ("bad.jsonl", b'{"text": "fine ."}\n{"text": "caf\xe9"}\n', "text", 2, "not valid UTF-8"),
    ("bad.jsonl", _jsonl('{"text": "fine ."}', '{"text": "a \\ud800 b"}'), "text", 2, "lone surrogate"),
    ("cut.jsonl.gz", gzip.compress(_jsonl(*[f'{{"text": "sentence {i} ."}}' for i in range(3000)]))[:400],
     "text", None, "not a complete gzip file"),
    ("bad.csv", b"id,sentence\n1,a .\n", "text", 1, "no column 'text' (data.text_field) in the header row; "
     "its columns: 'id', 'sentence'"),
    ("bad.csv", b"id,text\n1,fine .\n2,a, comma\n", "text", 3, "3 fields where the header row has 2"),
    ("bad.csv", b'id,text\n1,fine .\n2,"never closed\n3,x\n', "text", 3, "not valid CSV"),
    ("bad.csv", b"id,text\n1,fine .\n2,caf\xe9\n", "text", 3, "not valid UTF-8"),
    ("bad.tsv", b"id\ttext\n1\tfine .\n2\ttoo\tmany\n", "text", 3, "3 fields where the header row has 2"),
    # an unpaired quote opening a field swallowed the next record (line 3's id and sentence) into line 2's
    ("merge.tsv", b'id\ttext\n1\t"Hello there .\n2\tworld ."\n3\tok .\n', "text", 2,
     "a quoted field opens on this line and runs on to line 3; a TSV record is one line, so records are "
     "never merged"),
    ("merge.csv", b'id,text\n1,"Hello there .\n2,world ."\n3,ok .\n', "text", 2, "a CSV record is one line"),
    ("break.csv", b'text,n\n"first\nline",1\n', "text", 2, "runs on to line 3"),
    ("bad.parquet", lambda p: write_parquet(p, [None, 7, 8]), "text", "row 1", "type int (7)"),
    ("bad.parquet", lambda p: pq.write_table(pa.table({"text": pa.Array.from_buffers(
        pa.string(), 3, pa.array([b"ok", b"fine", b"caf\xe9"], pa.binary()).buffers())}), p), "text", "row 2",
     "not valid UTF-8"),
    ("bad.parquet", lambda p: write_parquet(p, ["a ."], field="sentence"), "text", None,
     "no column 'text' (data.text_field); its columns: 'id', 'sentence'"),
    ("bad.parquet", b"PAR1 not really\n", "text", None, "not a readable parquet file"),
    ("saved", lambda p: write_saved(p, ["a ."], field="sentence"), "text", None,
     "no column 'text' (data.text_field); its columns: 'id', 'sentence'"),
    ("saved", lambda p: write_saved(p, [[1], [2]]), "text", "row 0", "type list"),
    ("dict", lambda p: write_saved(p, ["a ."], splits=("train", "test")), "text", None,
     "a DatasetDict folder of 2 splits ('train', 'test'): name one in data.train_file"),
    ("folder", lambda p: p.mkdir(), "text", None, "is a folder"),
    ("plain.txt", b"a sentence .\n", "sentence", None,
     "data.text_field is 'sentence', but this is a plain text"),
    # nothing to train on
    ("empty.jsonl", _jsonl('{"text": null}', "", '{"text": "  "}'), "text", None,
     "no sentences (no record holds a non-blank 'text')"),
    ("empty.csv", b"id,text\n", "text", None, "no sentences"),
    ("empty.parquet", lambda p: write_parquet(p, [None, "", " "]), "text", None, "no sentences"),
    ("empty.txt", b"\n \n", "text", None, "no sentences (the file is empty or holds only blank lines)"),
]


@pytest.mark.parametrize("name, content, field, record, says", BAD,
                         ids=[f"{b[0]}-{b[4][:24]}" for b in BAD])
def test_bad_input_is_one_line_naming_file_and_record(tmp_path, monkeypatch, name, content, field, record,
                                                      says):
    monkeypatch.setattr("hardmix.text.data._BATCH_ROWS", 2)
    path = tmp_path / name
    if callable(content):
        content(path)
    else:
        path.write_bytes(content)
    with pytest.raises(CorpusError) as e:
        read_corpus(path, StubTokenizer(), max_length=16, text_field=field)
    message = str(e.value)
    assert "\n" not in message and says in message, message
    assert message.startswith(str(path)), message  # the file (of a DatasetDict: the folder)
    if isinstance(record, int):
        assert message.startswith(f"{path}:{record}: "), message
    elif record is not None:
        assert message.startswith(f"{path}: {record}: "), message


def test_the_data_of_a_failed_read_is_untouched(tmp_path):
    path = tmp_path / "bad.jsonl"
    content = _jsonl('{"text": "fine ."}', "{oops")
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: not valid JSON"):
        read_corpus(path, StubTokenizer(), max_length=16)
    assert path.read_bytes() == content and [p.name for p in tmp_path.iterdir()] == ["bad.jsonl"]


@pytest.mark.parametrize("module, name", [("pyarrow.parquet", "c.parquet"), ("datasets", "saved")])
def test_a_missing_library_names_the_file_and_the_extra(tmp_path, monkeypatch, module, name):
    path = write_parquet(tmp_path / name, ["a ."]) if name.endswith("parquet") else \
        write_saved(tmp_path / name, ["a ."])
    monkeypatch.setitem(sys.modules, module, None)  # import fails
    with pytest.raises(CorpusError) as e:
        corpus_format(path)
    assert str(e.value) == (f"{path}: reading a {'parquet' if 'parquet' in name else 'arrow'} corpus needs "
                            f"{module.split('.')[0]}: pip install 'hardmix[corpora]'")


# ---------------------------------------------------------------------------------- config, fingerprint
def test_text_field_in_the_config():
    assert build_text_config({}).data.text_field == "text"
    assert build_text_config({"data": {"text_field": "sentence"}}).data.text_field == "sentence"
    with pytest.raises(ConfigError, match="data.text_field: must name"):
        build_text_config({"data": {"text_field": " "}})
    with pytest.raises(ConfigError, match="data.text_field: expected a string"):
        build_text_config({"data": {"text_field": 3}})


def test_fingerprint_of_a_folder_is_its_data(tmp_path):
    """The same rows saved twice have one fingerprint (their JSON files differ); a cache file beside them
    changes nothing; other rows change it."""
    from hardmix.text.task import TextTask

    def fingerprint(path: Path) -> dict:
        return TextTask.about(build_text_config({"data": {"train_file": str(path)}})).data_fingerprint()

    a = write_saved(tmp_path / "a", ["one .", "two ."])
    b = write_saved(tmp_path / "b", ["one .", "two ."])
    assert fingerprint(a) == fingerprint(b)
    (b / "cache-0123.arrow").write_bytes(b"whatever")
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(write_saved(tmp_path / "c", ["one .", "three ."]))
    one = write_jsonl(tmp_path / "c.jsonl", ["one ."])
    from hardmix.training.fingerprint import file_digest

    assert fingerprint(one)["corpus sha256"] == file_digest(one)


# ------------------------------------------------------------------------------ the command line
@pytest.fixture(scope="module")
def plain_losses(tmp_path_factory, tiny_text_config_module) -> list[float]:
    """The losses of 2 steps on the plain text corpus (the same 400 sentences)."""
    import torch
    import yaml

    out = tmp_path_factory.mktemp("plain")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    (out / "c.yaml").write_text(yaml.safe_dump(tiny_text_config_module))
    assert main(["train", "text", str(out / "c.yaml"), "--set", "train.max_steps=2",
                 "--output", str(out / "run")]) == 0
    torch.set_num_threads(threads)
    return _losses(out / "run")


@pytest.fixture(scope="module")
def tiny_text_config_module(tiny_bert_dir, tiny_corpus) -> dict:
    """tests/conftest.py's ``tiny_text_config`` for this module's shared run (that fixture is per test)."""
    return {
        "model": {"name_or_path": str(tiny_bert_dir), "pooling": "cls"},
        "data": {"train_file": str(tiny_corpus), "max_length": 32},
        "loss": {"temperature": 0.05, "strategies": [{"name": "none"}]},
        "train": {"batch_size": 16, "lr": 1e-3, "max_steps": 10, "device": "cpu", "seed": 1, "save_steps": 0,
                  "precision": "fp32"},
        "eval": {"eval_steps": 0, "at_end": False},
        "log": {"log_steps": 1, "progress": False},
    }


def _losses(run: Path) -> list[float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if "loss" in x]


@pytest.mark.data
@pytest.mark.parametrize("kind", ["jsonl", "csv, column sentence", "save_to_disk"])
def test_train_two_steps_from_the_command_line(tmp_path, tiny_text_config_module, wiki_sentences, kind,
                                               plain_losses, one_torch_thread):
    """``hardmix train text CONFIG --set data.train_file=... --set data.text_field=...`` trains on the same
    batches as the plain text file of the same sentences: the same losses; the folder's fingerprint is its
    data files'."""
    import yaml

    from hardmix.training.fingerprint import files_digest

    corpus = WRITERS[kind](tmp_path, wiki_sentences[:400])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tiny_text_config_module))
    out = tmp_path / "run"
    assert main(["train", "text", str(tmp_path / "c.yaml"), "--set", "train.max_steps=2",
                 "--set", f"data.train_file={corpus}", "--set", f"data.text_field={field_of(kind)}",
                 "--output", str(out)]) == 0
    assert _losses(out) == plain_losses and len(plain_losses) == 2
    data = json.loads((out / "results.json").read_text())["fingerprint"]["data"]
    assert data["corpus sentences"] == 400 and list(data) == ["corpus sentences", "corpus sha256"]
    if corpus.is_dir():
        assert data["corpus sha256"] == files_digest(sorted(corpus.glob("data-*.arrow")))


@pytest.mark.data
def test_text_field_on_plain_text_is_refused_before_training(tmp_path, tiny_text_config_module, capsys):
    import yaml

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tiny_text_config_module))
    assert main(["train", "text", str(tmp_path / "c.yaml"), "--set", "data.text_field=sentence",
                 "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "data.text_field is 'sentence', but this is a plain text corpus" in err and "\n" not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
