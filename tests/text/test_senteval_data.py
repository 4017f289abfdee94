"""SentEval loaders: official sizes on the shared data, quirks and errors on small synthetic files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hardmix.text import senteval_data as sd

# ------------------------------------------------------------------------- official sizes (real data)
# shared/README.md: "Counts below were checked against the official split sizes."
STS_SIZES = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}


@pytest.mark.data
@pytest.mark.parametrize("task,size", sorted(STS_SIZES.items()))
def test_sts_year_sizes(senteval_root, task, size):
    subsets = sd.load_sts_year(task, senteval_root)
    assert list(subsets) == list(sd.STS_SUBSETS[task])
    assert sum(len(p) for p in subsets.values()) == size
    for p in subsets.values():
        assert len(p.sent1) == len(p.sent2) == len(p.labels)
        assert p.labels.min() >= 0 and p.labels.max() <= 5


@pytest.mark.data
def test_stsb_and_sick_sizes(senteval_root):
    assert [len(sd.load_stsb(s, senteval_root)) for s in ("train", "dev", "test")] == [5749, 1500, 1379]
    assert [len(sd.load_sickr(s, senteval_root)) for s in ("train", "dev", "test")] == [4500, 500, 4927]
    test = sd.load_sickr("test", senteval_root)  # CRLF file: no stray carriage returns
    assert not any("\r" in s for s in test.sent1 + test.sent2)
    assert 1.0 <= test.labels.min() and test.labels.max() <= 5.0


@pytest.mark.data
@pytest.mark.parametrize("task,size", [("MR", 10662), ("CR", 3775), ("SUBJ", 10000), ("MPQA", 10606)])
def test_binary_sizes(senteval_root, task, size):
    d = sd.load_binary(task, senteval_root)
    assert len(d.sentences) == len(d.labels) == size
    assert set(np.unique(d.labels)) == {0, 1}


@pytest.mark.data
def test_sst_trec_mrpc_sizes(senteval_root):
    sst = sd.load_sst2(senteval_root)
    assert [len(sst[s]) for s in ("train", "dev", "test")] == [67349, 872, 1821]
    trec = sd.load_trec(senteval_root)
    assert [len(trec[s]) for s in ("train", "test")] == [5452, 500]
    assert set(np.unique(trec["train"].labels)) == set(range(6))
    mrpc = sd.load_mrpc(senteval_root)
    assert [len(mrpc[s]) for s in ("train", "test")] == [4076, 1725]
    assert not mrpc["train"].sent1[0].startswith("\ufeff")


# --------------------------------------------------------------------------- synthetic layout helpers
def _write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


def _sts_year(root: Path, task: str, subsets: dict[str, tuple[str, str]]) -> None:
    folder = root / "STS" / f"{task}-en-test"
    for name, (inp, gs) in subsets.items():
        _write(folder / f"STS.input.{name}.txt", inp)
        _write(folder / f"STS.gs.{name}.txt", gs)


GOOD_STS13 = {  # each subset scorable: at least 2 pairs whose gold scores vary
    "FNWN": ("a b\tc d\ne\tf\n", "1.0\n3.0\n"),
    "headlines": ("x  y\tz\ne\tf\n", "2.5\n4\n"),
    "OnWN": ("p\tq\nr\ts\n", "0.2\n0.8\n"),
}


def test_sts_drops_pairs_without_gold_and_normalises_whitespace(tmp_path):
    _sts_year(tmp_path, "STS13", {**GOOD_STS13, "headlines": ("x  y\tz\ne\tf\ng\th\n", "2.5\n\n4\n")})
    subsets = sd.load_sts_year("STS13", tmp_path)
    h = subsets["headlines"]
    assert h.sent1 == ["x y", "g"] and h.sent2 == ["z", "h"]
    np.testing.assert_array_equal(h.labels, [2.5, 4.0])


def test_sts_missing_file_names_it(tmp_path):
    _sts_year(tmp_path, "STS13", {k: v for k, v in GOOD_STS13.items() if k != "OnWN"})
    with pytest.raises(FileNotFoundError, match=r"STS\.input\.OnWN\.txt"):
        sd.load_sts_year("STS13", tmp_path)


@pytest.mark.parametrize(
    "inp,gs,bad_file,line",
    [
        ("a\tb\nc\td\te\n", "1\n2\n", "STS.input.FNWN.txt", 2),  # three fields
        ("a\tb\nc d\n", "1\n2\n", "STS.input.FNWN.txt", 2),  # no tab
        ("a\tb\nc\td\n", "1\nfive\n", "STS.gs.FNWN.txt", 2),  # not a number
        ("a\tb\nc\td\n", "1\n", "STS.gs.FNWN.txt", 1),  # line counts differ
    ],
)
def test_sts_malformed_line_names_file_and_line(tmp_path, inp, gs, bad_file, line):
    _sts_year(tmp_path, "STS13", {**GOOD_STS13, "FNWN": (inp, gs)})
    with pytest.raises(ValueError, match=rf"{bad_file}:{line}: "):
        sd.load_sts_year("STS13", tmp_path)


def test_stsb_extra_fields_and_errors(tmp_path):
    path = _write(tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv",
                  "g\tMSRvid\t2012\t0001\t5.000\ta  man .\tthe man .\textra\tmore\n"
                  "g\tMSRvid\t2012\t0002\t1.5\tb\tc\n")
    d = sd.load_stsb("dev", tmp_path)
    assert d.sent1 == ["a man .", "b"] and d.sent2 == ["the man .", "c"]
    np.testing.assert_array_equal(d.labels, [5.0, 1.5])
    _write(path, "g\tMSRvid\t2012\t0001\t5.000\ta\tb\ng\tMSRvid\t2012\t0002\tx\tb\tc\n")
    with pytest.raises(ValueError, match=r"sts-dev\.csv:2: score 'x'"):
        sd.load_stsb("dev", tmp_path)
    _write(path, "g\tMSRvid\t2012\t0001\t5.000\ta\n")
    with pytest.raises(ValueError, match=r"sts-dev\.csv:1: expected at least 7"):
        sd.load_stsb("dev", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"sts-test\.csv"):
        sd.load_stsb("test", tmp_path)


def test_sick_crlf_header_and_errors(tmp_path):
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    path = _write(tmp_path / "SICK" / "SICK_test_annotated.txt",
                  f"{header}\r\n1\tA dog runs\tA cat sleeps\t3.3\tNEUTRAL\r\n2\tx\ty\t4.5\tENTAILMENT\r\n")
    d = sd.load_sickr("test", tmp_path)
    assert d.sent1 == ["A dog runs", "x"] and d.sent2 == ["A cat sleeps", "y"]
    np.testing.assert_array_equal(d.labels, [3.3, 4.5])
    _write(path, f"{header}\n1\ta\tb\t3.3\tN\n2\ta\tb\tnan?\tN\n")
    with pytest.raises(ValueError, match=r"SICK_test_annotated\.txt:3: "):
        sd.load_sickr("test", tmp_path)


def test_binary_keeps_blank_lines_and_reads_latin1(tmp_path):
    _write(tmp_path / "CR" / "custrev.pos", "good  one .\n\ncaf\xe9 ok\n", encoding="latin-1")
    _write(tmp_path / "CR" / "custrev.neg", "bad .\n", encoding="latin-1")
    d = sd.load_binary("CR", tmp_path)
    assert d.sentences == ["good one .", "", "caf\xe9 ok", "bad ."]
    np.testing.assert_array_equal(d.labels, [1, 1, 1, 0])
    with pytest.raises(FileNotFoundError, match=r"rt-polarity\.pos"):
        sd.load_binary("MR", tmp_path)


def test_sst_trec_mrpc_errors(tmp_path):
    for split in ("train", "dev", "test"):
        _write(tmp_path / "SST" / "binary" / f"sentiment-{split}", "fine film \t1\nbad \t0\n")
    assert sd.load_sst2(tmp_path)["dev"].sentences == ["fine film", "bad"]
    _write(tmp_path / "SST" / "binary" / "sentiment-dev", "fine film \t1\nbad \t2\n")
    with pytest.raises(ValueError, match=r"sentiment-dev:2: label 2"):
        sd.load_sst2(tmp_path)

    _write(tmp_path / "TREC" / "train_5500.label", "NUM:dist How far ?\nLOC:city Where  is it ?\n", "latin-1")
    _write(tmp_path / "TREC" / "TREC_10.label", "HUM:desc Who ?\nFOO:bar What ?\n", "latin-1")
    with pytest.raises(ValueError, match=r"TREC_10\.label:2: unknown TREC class 'FOO'"):
        sd.load_trec(tmp_path)
    _write(tmp_path / "TREC" / "TREC_10.label", "HUM:desc Who ?\n", "latin-1")
    trec = sd.load_trec(tmp_path)
    assert trec["train"].sentences == ["How far ?", "Where is it ?"]
    np.testing.assert_array_equal(trec["train"].labels, [5, 4])

    head = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    _write(tmp_path / "MRPC" / "msr_paraphrase_train.txt", head + "1\t1\t2\tA b .\tA  c .\n0\t3\t4\tx\ty\n")
    _write(tmp_path / "MRPC" / "msr_paraphrase_test.txt", head + "1\t1\t2\tA b .\n")
    with pytest.raises(ValueError, match=r"msr_paraphrase_test\.txt:2: expected 5"):
        sd.load_mrpc(tmp_path)
    _write(tmp_path / "MRPC" / "msr_paraphrase_test.txt", head + "0\t1\t2\tu\tv\n")
    mrpc = sd.load_mrpc(tmp_path)
    assert mrpc["train"].sent2 == ["A c .", "y"]
    np.testing.assert_array_equal(mrpc["train"].labels, [1, 0])


def test_missing_data_folder(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="SentEval data folder"):
        sd.senteval_dir(tmp_path / "nope")
    monkeypatch.setenv("HARDMIX_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="senteval"):
        sd.load_mrpc()


@pytest.mark.parametrize("lines, message", [
    ([], "0 scored pairs: a correlation needs at least 2"),
    (["g\tMSRvid\t2012\t0000\t4.0\ta man .\ta woman ."], "1 scored pair: a correlation needs at least 2"),
    ([f"g\tMSRvid\t2012\t000{i}\t3.0\ta man {i} .\ta woman {i} ." for i in range(5)],
     "5 scored pairs whose gold scores are all 3.0"),
])
def test_a_degenerate_evaluation_set_is_refused_before_training_naming_the_file(
    lines, message, tmp_path, monkeypatch, tiny_text_config, capsys
):
    """An empty STS-B dev, one pair, or constant gold scores gave a NaN selection score
    at the first evaluation; the run is refused before any step, naming the file."""
    import yaml

    from hardmix.cli import main

    dev = tmp_path / "root" / "senteval" / "STS" / "STSBenchmark" / "sts-dev.csv"
    dev.parent.mkdir(parents=True)
    dev.write_text("".join(x + "\n" for x in lines))
    monkeypatch.setenv("HARDMIX_DATA", str(tmp_path / "root"))
    config = {**tiny_text_config, "eval": {"eval_steps": 2, "at_end": True}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "text", str(tmp_path / "c.yaml"), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{dev}: {message}" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def _mini_senteval(root: Path) -> Path:
    """A SentEval folder holding every file ``hardmix data check`` looks for, each with 3 scorable pairs
    (or a line), written here: no shared data needed."""
    from hardmix.datasets.layout import SENTEVAL_FILES

    folder = root / "senteval"
    for name in SENTEVAL_FILES:
        path = folder / name
        if "/STS.input." in name:
            _write(path, "".join(f"a man plays {i} .\ta woman sings {i} .\n" for i in range(3)))
        elif "/STS.gs." in name:
            _write(path, "1.0\n2.5\n4.0\n")
        elif name.endswith(".csv"):
            _write(path, "".join(f"g\tMSRvid\t2012\t000{i}\t{i + 1}.0\ta man {i} .\ta woman {i} .\n"
                                 for i in range(3)))
        elif name.startswith("SICK/"):
            head = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
            _write(path, head + "".join(f"{i}\tA dog runs {i}\tA cat sits {i}\t{i + 2}.0\tNEUTRAL\n"
                                        for i in range(3)))
        else:
            _write(path, "a sentence .\n")
    return folder


@pytest.mark.parametrize("where, content, message", [
    ("STS/STSBenchmark/sts-dev.csv", "", "0 scored pairs: a correlation needs at least 2"),
    ("STS/STSBenchmark/sts-test.csv", "g\tMSRvid\t2012\t0000\t4.0\ta man .\ta woman .\n",
     "1 scored pair: a correlation needs at least 2"),
    ("SICK/SICK_test_annotated.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tx\n"
     "1\tA dog\tA cat\t3.0\tN\n2\tA man\tA boy\t3.0\tN\n", "2 scored pairs whose gold scores are all 3.0"),
    ("STS/STS15-en-test/STS.input.images.txt", "a man .\ta woman .\n \ta boy .\nx .\ty .\n",
     ":2: a scored pair whose first sentence is empty"),
])
def test_data_check_refuses_a_degenerate_evaluation_set_naming_the_file(where, content, message, tmp_path,
                                                                          capsys):
    """``hardmix data check`` said `ok` of an STS set that training, evaluation and every scorer refuse (an
    empty file, one pair, constant gold scores, a pair with an empty side); it reads them with the same
    loaders now, and names the file."""
    from hardmix.cli import main

    folder = _mini_senteval(tmp_path)
    assert main(["data", "check", "senteval", "--root", str(tmp_path)]) == 0, capsys.readouterr()
    capsys.readouterr()
    (folder / where).write_text(content, encoding="utf-8")
    assert main(["data", "check", "senteval", "--root", str(tmp_path)]) != 0
    out = capsys.readouterr()
    assert f"{folder / where}" in out.out + out.err and message in out.out + out.err, out
    assert "Traceback" not in out.err


@pytest.mark.parametrize("pairs, message", [
    (sd.SentencePairs([], [], np.zeros(0)), "0 scored pairs"),
    (sd.SentencePairs(["a ."], ["b ."], np.array([3.0])), "1 scored pair"),
    (sd.SentencePairs(["a .", "b .", "c ."], ["d .", "e .", "f ."], np.full(3, 2.0)),
     "gold scores are all 2.0"),
    (sd.SentencePairs(["a .", "", "c ."], ["d .", "e .", "f ."], np.array([1.0, 2.0, 3.0])),
     "scored pair 2 of 3 has an empty sentence"),
])
def test_every_sts_scorer_refuses_a_degenerate_set(pairs, message):
    """The scorers took hand-built pairs as given: a NaN correlation (or one of empty inputs) as a score."""
    from hardmix.text.sts import score_pairs, score_year, system_scores

    def embed(sentences: list[str]) -> np.ndarray:
        return np.random.default_rng(0).normal(size=(len(sentences), 4))

    for score in (lambda: score_pairs(embed, pairs), lambda: score_year(embed, {"s": pairs}),
                  lambda: system_scores(embed, pairs)):
        with pytest.raises(ValueError, match=f"the evaluation set: .*{message}"):
            score()
