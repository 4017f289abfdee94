"""The main job on a fresh machine: from an empty data root, ``hardmix compare`` on the quickstart spec
fetches what it lacks (a local HTTP server stands in for the sources: miniatures of SentEval's tar,
wiki1m, BERT-mini and CIFAR-10 in their real formats, built from the shared data) and the comparison
runs; refused or offline, one message lists everything missing and both fixes."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from hardmix.cli import main
from hardmix.datasets.sources import DATASETS, SOURCES, WIKI1M_HEAD_LINES
from tests.core.http_server import LocalServer
from tests.core.test_data_download import _cifar_archive, _senteval_archive

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "configs" / "compare" / "quickstart.yaml"


@pytest.fixture
def fresh_machine(tmp_path, monkeypatch):
    """HARDMIX_DATA unset, an empty per-user root, no Hugging Face Hub; returns the default root."""
    monkeypatch.delenv("HARDMIX_DATA", raising=False)
    monkeypatch.delenv("HARDMIX_DATA_BASE_URL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    return tmp_path / "cache" / "hardmix" / "data"


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hardmix: error: "), err
    return err


def test_offline_one_message_lists_all_that_is_missing_and_both_fixes(fresh_machine, capsys, monkeypatch):
    monkeypatch.setenv("HARDMIX_OFFLINE", "1")
    assert main(["compare", str(QUICKSTART), "--output", str(fresh_machine.parent / "c")]) == 2
    err = _one_error_line(capsys)
    assert f"missing data under {fresh_machine}: " in err
    for name in ("senteval", "wiki1m-head", "bert-mini", "cifar10"):
        assert f"{name} ({DATASETS[name].target}" in err, name
    assert "`hardmix data download bert-mini wiki1m-head senteval cifar10`" in err
    assert "`export HARDMIX_DATA=" in err and "HARDMIX_OFFLINE=1" in err
    assert not (fresh_machine.parent / "c").exists()  # nothing run, nothing written
    monkeypatch.delenv("HARDMIX_OFFLINE")
    train = ["train", "text", str(REPO / "configs/text/cpu_simcse.yaml"), "--no-download"]
    assert main(train) == 2
    err = _one_error_line(capsys)
    assert "(--no-download)" in err and "`hardmix data download bert-mini enwiki-100k senteval`" in err


def test_a_data_root_that_does_not_exist_is_named_as_such(fresh_machine, capsys, monkeypatch):
    monkeypatch.setenv("HARDMIX_DATA", str(fresh_machine / "nowhere"))
    assert main(["train", "vision", str(REPO / "configs/vision/cpu_mocov2_cifar10.yaml")]) == 2
    assert f"HARDMIX_DATA={fresh_machine / 'nowhere'} does not exist" in _one_error_line(capsys)


def test_no_network_lists_what_is_missing(fresh_machine, capsys, monkeypatch):
    monkeypatch.delenv("HARDMIX_OFFLINE", raising=False)
    monkeypatch.setenv("HARDMIX_DATA_BASE_URL", "http://127.0.0.1:9")  # nothing listens on port 9
    assert main(["train", "vision", str(REPO / "configs/vision/cpu_mocov2_cifar10.yaml")]) == 2
    err = _one_error_line(capsys)
    assert "there is no network" in err and "`hardmix data download cifar10`" in err


def _mirror(folder: Path, shared: Path, monkeypatch) -> None:
    """Miniatures of the quickstart's sources, and the registry's checksums replaced by theirs."""
    import torch

    shared_head = shared / "wiki" / f"wiki1m-head-{WIKI1M_HEAD_LINES}.txt"
    model = shared / "models" / "bert-mini-wiki-mlm"
    (folder / "senteval.tar").write_bytes(_senteval_archive(shared / "senteval", lines=40))
    # wiki1m: the shared head of the real file, then lines of another corpus that the head must not take
    with gzip.open(shared / "wiki" / "enwiki-100k.txt.gz", "rb") as f:
        tail = b"".join(next(f) for _ in range(50))
    (folder / "wiki1m_for_simcse.txt").write_bytes(shared_head.read_bytes() + tail)
    (folder / "bert-mini").mkdir()
    for name in ("config.json", "vocab.txt"):
        (folder / "bert-mini" / name).write_bytes((model / name).read_bytes())
    from transformers import AutoModel

    torch.save(AutoModel.from_pretrained(model).state_dict(), folder / "bert-mini" / "pytorch_model.bin")
    archive, members, _ = _cifar_archive(per_batch=40)
    (folder / "cifar-10-python.tar.gz").write_bytes(archive)
    for key, checks in {
        "wiki1m_for_simcse.txt": {"sha256": None},
        "bert-mini/pytorch_model.bin": {"sha256": None},
        "cifar-10-python.tar.gz": {"md5": hashlib.md5(archive).hexdigest(),
                                   "sha256": hashlib.sha256(archive).hexdigest(), "size": len(archive)},
    }.items():
        monkeypatch.setitem(SOURCES, key, dataclasses.replace(SOURCES[key], **checks))
    monkeypatch.setitem(DATASETS, "cifar10", dataclasses.replace(DATASETS["cifar10"], members=members))


def _tiny_quickstart(path: Path) -> Path:
    """The quickstart spec with a few steps and images (the same tasks, data and scores)."""
    spec = yaml.safe_load(QUICKSTART.read_text())
    spec["seeds"] = [1]
    spec["strategies"] = {k: spec["strategies"][k] for k in ("none", "mixcse")}
    text, vision = spec["tasks"]["text"], spec["tasks"]["vision"]
    text["config"] = str(REPO / text["config"])
    vision["config"] = str(REPO / vision["config"])
    text.pop("strategy_args")
    vision.pop("strategy_args")
    text["set"].update({"train.max_steps": 2, "eval.eval_steps": 2, "train.batch_size": 8})
    vision["set"].update({"data.max_samples": 160, "data.val_samples": 30, "train.batch_size": 32,
                          "train.epochs": 1, "loss.queue_size": 64, "eval.knn_train_samples": 100,
                          "eval.knn_k": 20, "eval.knn_test_samples": 40,
                          "train.save_steps": 0, "data.num_workers": 0})
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.data
def test_the_quickstart_downloads_into_an_empty_root_and_runs(data_root, fresh_machine, tmp_path, capsys,
                                                              monkeypatch):
    shared = data_root  # read before the fixture unset HARDMIX_DATA (session scope)
    folder = tmp_path / "mirror"
    folder.mkdir()
    _mirror(folder, shared, monkeypatch)
    monkeypatch.delenv("HARDMIX_OFFLINE", raising=False)
    spec = _tiny_quickstart(tmp_path / "quickstart_tiny.yaml")
    out = tmp_path / "compare"
    with LocalServer(folder) as srv:
        monkeypatch.setenv("HARDMIX_DATA_BASE_URL", srv.url)
        assert main(["compare", str(spec), "--output", str(out), "--jobs", "2"]) == 0, capsys.readouterr()
        got = {p for p, _ in srv.state.requests}
    captured = capsys.readouterr()
    announce = [ln for ln in captured.err.splitlines() if ln.startswith("hardmix: fetching")]
    total = sum((folder / p).stat().st_size for p in got)
    mb = total / 2**20
    assert len(announce) == 1 and f"into {fresh_machine};" in announce[0], captured.err
    assert "bert-mini, wiki1m, wiki1m-head, senteval, cifar10" in announce[0]
    assert f"({mb:.0f} MB)" in announce[0]
    assert got == {"senteval.tar", "wiki1m_for_simcse.txt", "cifar-10-python.tar.gz",
                   *(f"bert-mini/{n}" for n in ("config.json", "vocab.txt", "pytorch_model.bin"))}
    head = fresh_machine / "wiki" / f"wiki1m-head-{WIKI1M_HEAD_LINES}.txt"
    assert head.read_bytes() == (shared / "wiki" / head.name).read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 4, summary
    assert "report:" in captured.out
    # the data is there now: a second comparison fetches nothing and says nothing of it
    assert main(["compare", str(spec), "--output", str(out), "--resume"]) == 0
    assert "hardmix: fetching" not in capsys.readouterr().err
