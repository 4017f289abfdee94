"""``hardmix data download`` end to end, offline: a local HTTP server serves small archives built here in
the real formats (SentEval's tar, CIFAR-10's python pickles, Imagenette's tgz, a corpus, a BERT folder);
the data sets are fetched through the same code path as the real sources (the base URL is the mirror)
and end as data that hardmix's readers load."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from hardmix.cli import main
from hardmix.datasets import DATASETS, SOURCES, DataCheckError, DataDownloadError, check, download, inventory
from hardmix.datasets.layout import SENTEVAL_FILES
from hardmix.datasets.manager import provenance
from hardmix.datasets.paths import resolve_data_path
from hardmix.datasets.sources import CIFAR10_MEMBERS, download_command_for
from tests.conftest import require_data_path
from tests.core.http_server import LocalServer


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _cifar_archive(per_batch: int = 10) -> tuple[bytes, dict[str, str], np.ndarray]:
    """CIFAR-10's python release in miniature: 5 training batches and a test batch of ``per_batch``
    images each, pickled dicts with ``data`` (N, 3072) uint8 and ``labels``, and ``batches.meta``."""
    rng = np.random.default_rng(0)
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    members: dict[str, bytes] = {}
    first = None
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        first = data if first is None else first
        labels = [int(x) for x in rng.permutation(per_batch) % 10]  # every class in every batch
        members[name] = pickle.dumps({"batch_label": name, "data": data, "labels": labels,
                                      "filenames": [f"{name}_{i}.png" for i in range(per_batch)]})
    members["batches.meta"] = pickle.dumps({"label_names": classes, "num_cases_per_batch": per_batch})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            _add(tar, f"cifar-10-batches-py/{name}", data)
    return buf.getvalue(), {f"cifar-10-batches-py/{k}": _md5(v) for k, v in members.items()}, first


def _imagenette_archive() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    rng = np.random.default_rng(1)
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for split, n in (("train", 3), ("val", 2)):
            for wnid in ("n01440764", "n02102040"):
                for i in range(n):
                    img = io.BytesIO()
                    Image.fromarray(rng.integers(0, 256, (160, 213, 3), dtype=np.uint8)).save(img, "JPEG")
                    name = f"imagenette2-160/{split}/{wnid}/ILSVRC2012_{split}_{i:08d}.JPEG"
                    _add(tar, name, img.getvalue())
        _add(tar, "imagenette2-160/noisy_imagenette.csv", b"path,noisy_labels_0\n")
    return buf.getvalue()


def _senteval_archive(shared: Path, lines: int = 30) -> bytes:
    """SimCSE's senteval.tar in miniature: every file of the layout, the first lines of the shared copy."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in SENTEVAL_FILES:
            data = b"".join((shared / rel).read_bytes().splitlines(keepends=True)[:lines])
            _add(tar, f"./{rel}", data)
    return buf.getvalue()


@pytest.fixture
def mirror(tmp_path):
    folder = tmp_path / "mirror"
    folder.mkdir()
    with LocalServer(folder) as srv:
        yield srv, folder


def _registry(**sources: dict) -> dict:
    return {k: dataclasses.replace(SOURCES[k], **sources.get(k, {})) for k in SOURCES}


def test_cifar10_and_imagenette_download_into_the_vision_layout(mirror, tmp_path):
    from hardmix.vision.data import eval_splits, load_tensors

    srv, folder = mirror
    archive, members, first = _cifar_archive()
    (folder / "cifar-10-python.tar.gz").write_bytes(archive)
    (folder / "imagenette2-160.tgz").write_bytes(tgz := _imagenette_archive())
    sources = _registry(**{"cifar-10-python.tar.gz": {"md5": _md5(archive), "sha256": _sha256(archive),
                                                      "size": len(archive)},
                           "imagenette2-160.tgz": {"md5": _md5(tgz), "sha256": _sha256(tgz),
                                                   "size": len(tgz)}})
    datasets = {**DATASETS, "cifar10": dataclasses.replace(DATASETS["cifar10"], members=members)}
    root = tmp_path / "root"
    out = download(["cifar10", "imagenette-64"], root=root, base_url=srv.url, progress=False,
                   datasets=datasets, sources=sources)
    assert [(o.name, o.action) for o in out] == [("cifar10", "downloaded"), ("imagenette", "downloaded"),
                                                 ("imagenette-64", "downloaded")]
    train, test = eval_splits(str(root / "images" / "cifar10"))
    assert (len(train.paths), len(test.paths), len(train.classes)) == (50, 10, 10)
    decoded = load_tensors(train, cache_dir="")
    assert decoded.images.shape == (50, 3, 32, 32)
    # the first image of data_batch_1, lossless (PNG): CIFAR's rows are 1024 R, then G, then B values
    idx = train.paths.index(next(p for p in train.paths if p.endswith("/00000.png")))
    np.testing.assert_array_equal(decoded.images[idx].numpy(), first[0].reshape(3, 32, 32))
    small = load_tensors(eval_splits(str(root / "images" / "imagenette-64"))[0], cache_dir="")
    assert small.images.shape == (6, 3, 64, 64)
    assert (root / "images" / "imagenette" / "classes.tsv").read_text().startswith("n01440764\ttench\n")
    assert not (root / ".hardmix" / "downloads" / "cifar-10-python.tar.gz").exists()  # archives removed
    assert provenance(root / "images" / "cifar10" / "train")["origin"] == "hardmix download"
    # idempotent: a second call checks and fetches nothing
    before = len(srv.state.requests)
    again = download(["cifar10", "imagenette-64"], root=root, base_url=srv.url, progress=False,
                     datasets=datasets, sources=sources)
    assert {o.action for o in again} == {"present"} and len(srv.state.requests) == before
    # a damaged file is found by check, and download refuses to call it present
    victim = next((root / "images" / "cifar10" / "test").rglob("*.png"))
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    assert "sha256 differs" in check(["cifar10"], root=root, datasets=datasets)["cifar10"][0]
    with pytest.raises(DataCheckError, match=r"cifar10: .* fails its check .*hardmix data download cifar10"):
        download(["cifar10"], root=root, base_url=srv.url, progress=False, datasets=datasets, sources=sources)


def test_a_wrong_archive_checksum_is_rejected(mirror, tmp_path):
    srv, folder = mirror
    archive, members, _ = _cifar_archive()
    (folder / "cifar-10-python.tar.gz").write_bytes(archive)
    root = tmp_path / "root"
    with pytest.raises(DataDownloadError, match=r"python\.tar\.gz: got \d+ bytes, expected 170498071"):
        download(["cifar10"], root=root, base_url=srv.url, progress=False)  # the real registry's size and md5
    sources = _registry(**{"cifar-10-python.tar.gz": {"size": None}})
    with pytest.raises(DataDownloadError, match=r"md5 mismatch \(expected c58f30108f718f92721af3b95e74349a"):
        download(["cifar10"], root=root, base_url=srv.url, progress=False, sources=sources)
    assert not (root / "images" / "cifar10").exists()
    assert not list((root / ".hardmix" / "downloads").glob("cifar*"))  # the partial file was deleted


def test_senteval_and_the_corpora_from_the_cli_with_the_default_root(mirror, tmp_path, monkeypatch, capsys):
    from hardmix.text import senteval_data as sd
    from hardmix.text.data import iter_sentences

    shared = require_data_path("senteval")
    srv, folder = mirror
    (folder / "senteval.tar").write_bytes(_senteval_archive(shared))
    corpus = "".join(f"Sentence number {i} of the corpus .\n" for i in range(100_050)).encode()
    (folder / "wiki1m_for_simcse.txt").write_bytes(corpus)
    monkeypatch.delenv("HARDMIX_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "cache" / "hardmix" / "data"
    # wiki1m is pinned by the SHA-256 the Hub publishes: this corpus is not it
    assert main(["data", "download", "wiki1m", "--base-url", srv.url, "--quiet"]) == 2
    assert "sha256 mismatch (expected 7b1825863a99aa76479b0456f7c210539dfaeeb69598b41fb4de4f524dd5a706" in \
        capsys.readouterr().err
    # unpinned (as a source without a published checksum), its SHA-256 is recorded at the first download
    monkeypatch.setitem(SOURCES, "wiki1m_for_simcse.txt",
                        dataclasses.replace(SOURCES["wiki1m_for_simcse.txt"], sha256=None))
    assert main(["data", "download", "senteval", "enwiki-100k", "--base-url", srv.url, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"senteval: downloaded: {root / 'senteval'}" in out and "enwiki-100k: downloaded" in out
    # the evaluators and the corpus reader read them from the default root (HARDMIX_DATA unset)
    assert len(sd.load_stsb("dev")) == 30 and len(sd.load_sts_year("STS12")["MSRpar"]) == 30
    assert sd.load_stsb("dev").sent1[:2] == sd.load_stsb("dev", shared).sent1[:2]
    corpus_path = resolve_data_path("wiki/enwiki-100k.txt.gz", must_exist=True)  # as read_corpus does
    assert corpus_path == root / "wiki" / "enwiki-100k.txt.gz"
    sentences = [s for _, s in iter_sentences(corpus_path)]
    assert len(sentences) == 100_000 and sentences[-1] == "Sentence number 99999 of the corpus ."
    # SHA-256 recorded at the first download of a source that publishes none, checked afterwards
    recorded = (root / ".hardmix" / "checksums.json").read_text()
    assert hashlib.sha256(corpus).hexdigest() in recorded
    assert main(["data", "check"]) == 0
    assert "senteval: ok (layout and recorded checksums)" in capsys.readouterr().out
    assert main(["data", "list"]) == 0
    listing = capsys.readouterr().out
    assert "wiki1m              present (downloaded by hardmix)" in listing
    assert "cifar10             absent" in listing and "wiki1m-head         absent" in listing
    assert "bert-mini-wiki-mlm  absent (bert-mini stands in)" in listing
    (root / "wiki" / "wiki1m_for_simcse.txt").unlink()
    (folder / "wiki1m_for_simcse.txt").write_bytes(corpus.replace(b"number 7 ", b"number 8 "))  # changed
    assert main(["data", "download", "wiki1m", "--base-url", srv.url, "--quiet"]) == 2
    assert "sha256 mismatch" in capsys.readouterr().err
    assert {e.name: e.present for e in inventory()}["wiki1m"] is False


def test_unknown_name_and_a_missing_data_set_say_what_to_run(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HARDMIX_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["data", "download", "imagenet"]) == 2
    assert "unknown data set 'imagenet'; known: senteval, wiki1m" in capsys.readouterr().err
    assert main(["data", "check", "cifar10"]) == 1
    assert "missing; fetch it with `hardmix data download cifar10`" in capsys.readouterr().out


def test_gzip_corpus_layout_check(tmp_path):
    from hardmix.datasets.layout import check_layout

    p = tmp_path / "c.txt.gz"
    p.write_bytes(b"not gzip")
    assert "not a readable gzip" in check_layout("enwiki-100k", p)[0]
    p.write_bytes(gzip.compress(b"a\n"))
    assert check_layout("enwiki-100k", p) == []


def test_the_registry_holds_torchvisions_checksums_and_names_the_commands():
    from torchvision.datasets import CIFAR10, Imagenette

    cifar = SOURCES["cifar-10-python.tar.gz"]
    assert (cifar.url, cifar.md5) == (CIFAR10.url, CIFAR10.tgz_md5)
    members = {f"{CIFAR10.base_folder}/{n}": m for n, m in CIFAR10.train_list + CIFAR10.test_list}
    assert CIFAR10_MEMBERS == {**members, f"{CIFAR10.base_folder}/batches.meta": CIFAR10.meta["md5"]}
    nette = SOURCES["imagenette2-160.tgz"]
    assert (nette.url, nette.md5) == Imagenette._ARCHIVES["160px"]
    assert download_command_for("wiki/enwiki-100k.txt.gz") == "hardmix data download enwiki-100k"
    assert download_command_for("models/bert-mini-wiki-mlm") == "hardmix data download bert-mini"
    assert download_command_for("my/own/folder") is None


def test_commands_on_a_fresh_machine_stop_with_the_download_command(tmp_path, monkeypatch, capsys):
    """HARDMIX_DATA unset and an empty per-user root: the README's commands stop before any work with one
    line naming the missing path and the `hardmix data download ...` that fetches it."""
    repo = Path(__file__).resolve().parents[2]
    bert = require_data_path("models", "bert-mini-wiki-mlm")  # a model given by its path
    monkeypatch.delenv("HARDMIX_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "cache" / "hardmix" / "data"
    cases = [  # (offline: tests set HARDMIX_OFFLINE=1) everything missing is listed at once
        (["train", "vision", str(repo / "configs/vision/cpu_mocov2_cifar10.yaml"), "--output", "r1"],
         f"{root}: cifar10 (images/cifar10)", "`hardmix data download cifar10`"),
        (["train", "text", str(repo / "configs/text/cpu_mixcse.yaml"), "--output", "r2"],
         "models/bert-mini-wiki-mlm", "`hardmix data download bert-mini enwiki-100k senteval`"),
        (["eval", "text", str(bert)], f"{root}/senteval", "`hardmix data download senteval`"),
    ]
    for argv, path, command in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("hardmix: error: "), err
        assert path in err and command in err, err
    assert not (tmp_path / "r1").exists() or not any((tmp_path / "r1").iterdir())


def test_imagenet100_class_list_downloads_and_a_wrong_file_is_never_placed(mirror, tmp_path, monkeypatch):
    from hardmix.vision.data import read_class_list

    shared = require_data_path("images", "imagenet100-classes.txt")
    srv, folder = mirror
    (folder / "imagenet100.txt").write_text("n01440764\nnot-an-id\n")
    root = tmp_path / "root"
    with pytest.raises(DataDownloadError, match=r"got 20 bytes, expected 1000"):  # the pinned size
        download(["imagenet100-classes"], root=root, base_url=srv.url, progress=False)
    unpinned = _registry(**{"imagenet100.txt": {"sha256": None, "size": None}})
    with pytest.raises(DataCheckError, match=r"expected 100 WordNet ids .*found 2, e\.g\. 'not-an-id'"):
        download(["imagenet100-classes"], root=root, base_url=srv.url, progress=False, sources=unpinned)
    assert not list((root / "images").iterdir())  # no half-made or wrong file at the target
    assert not (root / ".hardmix" / "checksums.json").exists()  # a rejected file's sha256 is not recorded
    (folder / "imagenet100.txt").write_bytes(shared.read_bytes())
    download(["imagenet100-classes"], root=root, base_url=srv.url, progress=False)
    monkeypatch.setenv("HARDMIX_DATA", str(root))
    assert read_class_list("images/imagenet100-classes.txt") == read_class_list(shared)


def test_a_kept_file_nothing_verifies_is_fetched_again_and_recorded(mirror, tmp_path, monkeypatch):
    """A file left in the downloads folder of a source without a published checksum, and none recorded
    yet (a hand-placed copy, a download from another mirror), was once used as it stood and its checksum
    never recorded. It is fetched again: the placed data is the mirror's, and its SHA-256 is recorded."""
    from hardmix.datasets.records import downloads_dir, recorded_checksum
    from hardmix.vision.data import read_class_list

    shared = require_data_path("images", "imagenet100-classes.txt")
    srv, folder = mirror
    good = shared.read_bytes()
    (folder / "imagenet100.txt").write_bytes(good)
    root = tmp_path / "root"
    kept = downloads_dir(root) / "imagenet100.txt"
    kept.parent.mkdir(parents=True)
    other = b"".join(reversed(good.splitlines(keepends=True)))  # 100 valid ids: the data check passes it
    kept.write_bytes(other)
    unpinned = _registry(**{"imagenet100.txt": {"sha256": None, "size": None}})
    download(["imagenet100-classes"], root=root, base_url=srv.url, progress=False, sources=unpinned)
    assert srv.state.requests == [("imagenet100.txt", None)]  # fetched whole, not taken from the folder
    assert (root / "images" / "imagenet100-classes.txt").read_bytes() == good
    assert recorded_checksum(root, "imagenet100.txt")["sha256"] == _sha256(good)
    monkeypatch.setenv("HARDMIX_DATA", str(root))
    assert read_class_list("images/imagenet100-classes.txt") == read_class_list(shared)


def test_every_source_but_two_has_a_pinned_sha256():
    """Pinned where an independent record of the file exists; the two without one (no checksum published,
    no network here to record one) are verified by the SHA-256 recorded at their first download."""
    from hardmix.datasets.sources import SOURCES

    unpinned = sorted(key for key, src in SOURCES.items() if not src.sha256)
    assert unpinned == ["bert-mini/config.json", "senteval.tar"]
    assert all(len(src.sha256) == 64 and int(src.sha256, 16) >= 0 for src in SOURCES.values() if src.sha256)
