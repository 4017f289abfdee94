"""A fingerprint of what is read: every file a loader opens is one its fingerprint holds,
for every layout the loader accepts, and changing any of them changes the fingerprint.

What a loader reads is the kernel's record, not the loader's word: every file of the input's folder gets an
access time of 0 (its modification time kept), the loader runs, and the files whose access time moved were
read (``relatime`` updates an access time older than the modification time on the first read, a memory map
by pyarrow or ``datasets`` included). Where the file system records no access times (``noatime``), the
tests skip, saying so.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from hardmix.config.loader import build_config
from hardmix.text.config import TextConfig
from hardmix.text.data import FORMATS, corpus_files, iter_sentences
from hardmix.text.task import TextTask, _input_files

SENTENCES = [f"sentence number {i} of the corpus ." for i in range(40)]


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) + \
        sorted({p.resolve() for p in folder.rglob("*") if p.is_symlink() and p.is_file()})


def reads(folder: Path, run: Callable[[], object]) -> set[Path]:
    """The files below ``folder`` (links resolved) that ``run()`` read."""
    files = _files(folder)
    for f in files:
        os.utime(f, ns=(0, f.stat().st_mtime_ns))
    probe = folder / ".atime-probe"
    probe.write_text("x")
    os.utime(probe, ns=(0, probe.stat().st_mtime_ns))
    probe.read_text()
    if probe.stat().st_atime_ns == 0:
        pytest.skip(f"{folder}'s file system records no access times (noatime): what is read cannot be seen")
    probe.unlink()
    run()
    return {f.resolve() for f in files if f.stat().st_atime_ns != 0}


# ------------------------------------------------------------------------------------------------ corpora
def _save_to_disk(folder: Path, dict_of_one: bool = False, renamed: bool = False, shards: int = 1) -> Path:
    import datasets

    ds = datasets.Dataset.from_dict({"text": SENTENCES, "other": [str(i) for i in range(len(SENTENCES))]})
    if dict_of_one:
        datasets.DatasetDict({"train": ds}).save_to_disk(str(folder), num_shards={"train": shards})
        split = folder / "train"
    else:
        ds.save_to_disk(str(folder), num_shards=shards)
        split = folder
    if renamed:  # arrow files under other names: state.json lists them, load_from_disk maps them
        state = json.loads((split / "state.json").read_text())
        for i, entry in enumerate(state["_data_files"]):
            (split / entry["filename"]).rename(split / f"part-{i}.arrow")
            entry["filename"] = f"part-{i}.arrow"
        (split / "state.json").write_text(json.dumps(state))
    (split / "cache-0123.arrow").write_bytes((split / state_files(split)[0]).read_bytes())  # datasets' cache
    return folder


def state_files(split: Path) -> list[str]:
    return [e["filename"] for e in json.loads((split / "state.json").read_text())["_data_files"]]


def _corpus(kind: str, folder: Path) -> tuple[Path, str]:
    """A corpus of :data:`SENTENCES` in the layout ``kind`` inside ``folder`` (beside a decoy file), and its
    text field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("not the corpus\n")
    if kind == "text":
        path = folder / "c.txt"
        path.write_text("".join(f"{s}\n" for s in SENTENCES))
    elif kind == "text.gz":
        path = folder / "c.txt.gz"
        path.write_bytes(gzip.compress("".join(f"{s}\n" for s in SENTENCES).encode()))
    elif kind == "jsonl":
        path = folder / "c.jsonl"
        path.write_text("".join(json.dumps({"text": s}) + "\n" for s in SENTENCES))
    elif kind in ("csv", "tsv"):
        sep = "," if kind == "csv" else "\t"
        path = folder / f"c.{kind}"
        path.write_text("text\n" + "".join(f"{s}\n" for s in SENTENCES))
        assert sep not in "".join(SENTENCES)
    elif kind == "parquet":
        path = folder / "c.parquet"
        pq.write_table(pa.table({"text": SENTENCES}), path, row_group_size=7)
    elif kind.startswith("arrow"):
        path = _save_to_disk(folder / "ds", dict_of_one="dict" in kind, renamed="renamed" in kind,
                             shards=2 if "shards" in kind else 1)
    else:
        raise KeyError(f"no sample corpus for the layout {kind!r}: add one, so that it is fingerprinted")
    return path, "text"


#: Every layout the corpus loader accepts: each format of its table, and the datasets folders.
LAYOUTS = sorted({*FORMATS.values(), "text.gz", "arrow", "arrow dict", "arrow renamed",
                  "arrow dict renamed", "arrow shards"})

#: Files a loader opens whose content the fingerprint holds another way: the JSON of a datasets folder says
#: which arrow files, in which order, hold the rows (the fingerprint holds those files by name, in that
#: order); its datasets fingerprints change at each save.
METADATA = {"state.json", "dataset_info.json", "dataset_dict.json"}


def test_the_layouts_are_those_the_loader_accepts():
    assert set(FORMATS.values()) <= set(LAYOUTS)


@pytest.mark.parametrize("kind", LAYOUTS)
def test_every_file_a_corpus_is_read_from_is_in_its_fingerprint_and_changes_it(kind, tmp_path):
    path, field = _corpus(kind, tmp_path / "data")
    got = []
    read = reads(tmp_path / "data", lambda: got.extend(s for _, s in iter_sentences(path, field)))
    assert got == SENTENCES
    held = {p.resolve() for p in corpus_files(path)}
    assert read, "nothing read"
    assert {p for p in read - held if p.name not in METADATA} == set(), (kind, sorted(read), sorted(held))
    assert all(p.name != "notes.txt" and not p.name.startswith("cache-") for p in held)

    def fingerprint() -> str:
        cfg = build_config(TextConfig, {"data": {"train_file": str(path)}})
        return TextTask.about(cfg).data_fingerprint()

    before = fingerprint()
    for f in sorted(held):  # every file it is read from changes it, at the same size too
        data = f.read_bytes()
        f.write_bytes(data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
        assert fingerprint() != before, f
        f.write_bytes(data)
    assert fingerprint() == before


def test_a_datasets_folder_of_other_arrow_names_is_fingerprinted_by_them(tmp_path):
    """Once: only ``data-*.arrow`` counted, so a folder whose ``state.json`` names other files had the
    fingerprint of no data at all; any change of its rows went unseen by ``--resume`` and ``compare``."""
    path, _ = _corpus("arrow renamed", tmp_path / "data")
    cfg = build_config(TextConfig, {"data": {"train_file": str(path)}})
    before = TextTask.about(cfg).data_fingerprint()
    shutil.rmtree(path)
    import datasets

    datasets.Dataset.from_dict({"text": SENTENCES[::-1]}).save_to_disk(str(path))
    state = json.loads((path / "state.json").read_text())
    (path / state["_data_files"][0]["filename"]).rename(path / "part-0.arrow")
    state["_data_files"][0]["filename"] = "part-0.arrow"
    (path / "state.json").write_text(json.dumps(state))
    assert [s for _, s in iter_sentences(path)] == SENTENCES[::-1]
    assert TextTask.about(cfg).data_fingerprint() != before


# ------------------------------------------------------------------------------ model and evaluation sets
def test_every_file_of_the_model_and_the_sts_sets_a_run_reads_is_in_its_inputs(tmp_path, tiny_bert_dir,
                                                                                 monkeypatch):
    """The model folder's files and the STS files of the dev score and the held-out suite (SentEval's
    STS12-16, STS-B, SICK-R), as the run's evaluation loads them."""
    from hardmix.text.evaluation import STS_TASKS, load_sts_suite
    from hardmix.text.model import load_backbone
    from hardmix.text.senteval_data import load_stsb

    root = tmp_path / "root"
    shutil.copytree(Path(os.environ["HARDMIX_DATA"]) / "senteval" / "STS", root / "senteval" / "STS")
    shutil.copytree(Path(os.environ["HARDMIX_DATA"]) / "senteval" / "SICK", root / "senteval" / "SICK")
    model = Path(shutil.copytree(tiny_bert_dir, root / "model"))
    monkeypatch.setenv("HARDMIX_DATA", str(root))
    cfg = build_config(TextConfig, {"model": {"name_or_path": str(model)},
                                         "eval": {"final_sts": True, "at_end": True}})

    def load() -> None:
        load_backbone(str(model), None, True)
        load_stsb("dev")
        load_sts_suite(STS_TASKS)

    read = reads(root, load)
    held = {p.resolve() for p in _input_files(str(model), cfg)}
    assert read - held == set(), sorted(read - held)
    assert {"sts-dev.csv", "SICK_test_annotated.txt"} <= {p.name for p in read}
    assert any(p.suffix == ".safetensors" for p in read)


def _hub_cache(hf: Path, model: Path, revision: str) -> Path:
    """The Hugging Face cache of ``org/tiny-bert`` whose ``main`` is ``revision``, the snapshot a copy of
    ``model`` (its files links to blobs, as the Hub client lays them out)."""
    repo = hf / "hub" / "models--org--tiny-bert"
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(model.iterdir()):
        blob = repo / "blobs" / f"{revision}-{f.name}"
        shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap


def test_a_hub_name_is_fingerprinted_by_the_snapshot_it_resolves_to(tmp_path, tiny_bert_dir,
                                                                    tiny_text_config):
    """Once: a model named by its Hub id added no file to the inputs, so a resume on another revision of
    it (the cache's ``main`` moved) trained on without a word. Offline, in a cache of two revisions."""
    from safetensors.torch import load_file, save_file

    other = Path(shutil.copytree(tiny_bert_dir, tmp_path / "other"))
    tensors = load_file(other / "model.safetensors")
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 0.5
    save_file(tensors, other / "model.safetensors", metadata={"format": "pt"})
    hf = tmp_path / "hf"
    _hub_cache(hf, Path(tiny_bert_dir), "a" * 40)
    _hub_cache(hf, other, "b" * 40)
    (hf / "hub" / "models--org--tiny-bert" / "refs" / "main").write_text("a" * 40)
    cfg = {**tiny_text_config, "model": {**tiny_text_config["model"], "name_or_path": "org/tiny-bert"},
           "train": {**tiny_text_config["train"], "max_steps": 2, "stop_after_steps": 1, "threads": 1}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "HF_HOME": str(hf), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(Path(__file__).parents[2])}
    argv = [sys.executable, "-m", "hardmix", "train", "text", str(tmp_path / "c.yaml"), "--output",
            str(tmp_path / "run")]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode not in (1, 2), first.stderr[-2000:]
    (hf / "hub" / "models--org--tiny-bert" / "refs" / "main").write_text("b" * 40)
    resumed = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    assert "--resume: the run's inputs (model files, evaluation sets) differ" in resumed.stderr
    code = textwrap.dedent("""
        from hardmix.text.model_source import resolve_model
        print(resolve_model("org/tiny-bert")[0])
    """)
    where = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().endswith("snapshots/" + "b" * 40), where.stderr[-2000:]


# ------------------------------------------------------------------------------------------ image folders
def _png(seed: int) -> bytes:
    import io

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, format="PNG", compress_level=0)
    return buf.getvalue()


def _images(kind: str, root: Path) -> dict:
    """An image folder in the layout ``kind`` (beside decoys: a text file, a hidden image, a test split the
    training never reads) and the ``data`` section that reads it."""
    data: dict = {"dataset": str(root)}
    top = root / "train" if kind in ("labelled", "class list") else root
    for i in range(12):
        if kind == "unlabeled":
            where = top / ("a/b" if i % 2 else "") / f"{i}.png"
        else:
            where = top / f"c{i % 3}" / f"{i}.png"
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(_png(i))
    (top / "notes.txt").write_text("not an image\n")
    (top / ".hidden.png").write_bytes(_png(99))
    if kind in ("labelled", "class list"):
        (root / "test" / "c0").mkdir(parents=True)
        (root / "test" / "c0" / "t.png").write_bytes(_png(100))
    if kind == "class list":
        (root / "classes.txt").write_text("c2\nc0\n")
        data["class_list"] = str(root / "classes.txt")
    if kind == "unlabeled":
        data["labels"] = False
    return data


#: Every layout the image loader accepts for training: a ``train`` split of class folders, class folders at
#: the top, a class list selecting some of them, and unlabeled images at any depth.
IMAGE_LAYOUTS = ("labelled", "class folders", "class list", "unlabeled")

#: The class list file: it selects class folders, whose images the fingerprint holds by their paths.
IMAGE_METADATA = {"classes.txt"}


@pytest.mark.parametrize("kind", IMAGE_LAYOUTS)
def test_every_image_training_reads_is_in_its_fingerprint_and_changes_it(kind, tmp_path):
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.data import load_tensors
    from hardmix.vision.pipeline import train_image_list
    from hardmix.vision.task import VisionTask
    from tests.conftest import tiny_vision_config_dict

    root = tmp_path / "images"
    data = _images(kind, root)
    cfg = build_config(VisionConfig, tiny_vision_config_dict(root, tmp_path / "cache", data=data))
    loaded = []

    def load() -> None:
        images, idx = train_image_list(cfg)
        loaded.append(load_tensors(images, idx, 16, cache_dir="", workers=1))

    read = reads(root, load)
    images, _ = train_image_list(cfg)
    held = {Path(p).resolve() for p in images.paths}
    assert len(loaded[0].images) == len(held) == (8 if kind == "class list" else 12)
    assert {p for p in read - held if p.name not in IMAGE_METADATA} == set(), sorted(read - held)
    before = VisionTask.about(cfg).data_fingerprint()
    for f in sorted(held):  # any image read, rewritten at its size, changes it
        data_bytes = f.read_bytes()
        f.write_bytes(_png(1000))
        assert len(data_bytes) == f.stat().st_size
        assert VisionTask.about(cfg).data_fingerprint() != before, f
        f.write_bytes(data_bytes)
    assert VisionTask.about(cfg).data_fingerprint() == before
