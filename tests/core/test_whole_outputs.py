"""Outputs written whole, and numbers finite or refused.

A full disk is the kernel's own ``ENOSPC``: the temporary file a write goes to is opened on ``/dev/full``
(every write to it fails with ``ENOSPC`` from the kernel), so torch's and NumPy's own writers meet the
error as they would on a full disk. A killed writer is a real ``SIGKILL``.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from hardmix.cli import main
from hardmix.commands.neighbours import marker_path, nearest_rows, write_set
from hardmix.training.run_folder import process_alive
from hardmix.utils import confine

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def full_disk_for(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """The temporary files of the files named ``names`` (all when none) are written to ``/dev/full``: a real
    ``ENOSPC`` from the kernel on the first write that reaches it."""
    real = confine._temporary

    def temporary(target: Path) -> tuple[int, str]:
        fd, tmp = real(target)
        if not names or target.name in names:
            os.close(fd)
            return os.open("/dev/full", os.O_WRONLY), tmp
        return fd, tmp

    monkeypatch.setattr(confine, "_temporary", temporary)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------------------------- a full disk
@pytest.mark.parametrize("writer", ["torch", "numpy", "text"])
def test_a_real_full_disk_names_the_file_and_keeps_the_previous_one(writer, tmp_path, monkeypatch):
    """torch.save meets ENOSPC as ``RuntimeError: ... unexpected pos`` and NumPy's tofile as "N requested
    and M written": both reach the user as the full disk, naming the file, the previous file intact."""
    path = tmp_path / "out.bin"
    path.write_bytes(b"the previous output")
    full_disk_for(monkeypatch)
    with pytest.raises(OSError) as info:
        if writer == "torch":
            confine.save_torch({"w": torch.zeros(50_000)}, path, tmp_path)
        elif writer == "numpy":
            confine.save_numpy(np.zeros((3000, 8), np.float32), path, tmp_path)
        else:
            confine.write_text("x" * 100_000, path, tmp_path)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path), info.value
    assert path.read_bytes() == b"the previous output"
    assert hidden(tmp_path) == []


def test_a_real_full_disk_during_a_checkpoint_is_one_line_naming_it(tmp_path, monkeypatch, capsys,
                                                                     tiny_text_config, one_torch_thread):
    """``hardmix train``: the disk fills while the checkpoint is written (torch's writer; the simulated case
    of the table fails os.fsync instead): one line naming checkpoint.pt, the previous checkpoint kept."""
    cfg = {**tiny_text_config, "train": {**tiny_text_config["train"], "max_steps": 2, "stop_after_steps": 1,
                                         "threads": 1}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["train", "text", str(path), "--output", str(run)]) != 1
    before = (run / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    full_disk_for(monkeypatch, "checkpoint.pt")
    cfg["train"]["stop_after_steps"] = None
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", "text", str(path), "--output", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("hardmix: error:")]
    assert "Traceback" not in err and len(lines) == 1, err
    assert f"{run / 'checkpoint.pt'}: No space left on device" in lines[0], lines[0]
    assert (run / "checkpoint.pt").read_bytes() == before
    assert [n for n in hidden(run) if n.endswith(".tmp")] == []


# --------------------------------------------------------------------------- sets replaced together
def _set(folder: Path, rows: int, tag: str) -> Path:
    out = folder / "emb.npy"
    items = [f"{tag}{i}.png" for i in range(rows)]
    write_set(out, np.full((rows, 4), float(rows), np.float32), "paths", items, [])
    return out


@pytest.mark.parametrize("fails", ["emb.npy", "emb.paths.txt", "emb.skipped.txt"])
def test_a_full_disk_on_any_member_keeps_the_whole_previous_set(fails, tmp_path, monkeypatch):
    out = _set(tmp_path, 3, "old")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    full_disk_for(monkeypatch, fails)
    with pytest.raises(OSError) as info:
        write_set(out, np.ones((5, 4), np.float32), "paths", [f"new{i}.png" for i in range(5)], ["bad.png"])
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / fails)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no marker, no temporary file


def test_a_replacement_killed_midway_is_refused_by_neighbours_until_encoded_again(tmp_path, monkeypatch,
                                                                                   capsys):
    """Killed between the renames (the array new, its listing old): the marker stays, and ``neighbours``
    refuses the pair instead of showing the old listing's names for the new rows."""
    out = _set(tmp_path, 3, "old")
    renames = []

    def dies_after_two(src: str, dst: str) -> None:
        renames.append(dst)
        if len(renames) == 3:
            raise KeyboardInterrupt  # the process stops here, as a kill would
        os.rename(src, dst)

    monkeypatch.setattr(confine.os, "replace", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        write_set(out, np.eye(3, 4, dtype=np.float32) + 1, "paths", ["x.png", "y.png", "z.png"], [])
    monkeypatch.undo()
    assert marker_path(out).exists() and np.load(out)[0, 0] == 2.0  # the new array, the old listing
    assert main(["neighbours", str(out), "old0.png"]) == 2
    err = capsys.readouterr().err
    assert "emb.incomplete is there" in err and "encode again with -o" in err
    assert [p.name for p in tmp_path.glob(".*.tmp")] == []  # an interrupt takes its temporary files
    write_set(out, np.eye(3, 4, dtype=np.float32), "paths", ["x.png", "y.png", "z.png"], [])
    assert not marker_path(out).exists() and main(["neighbours", str(out), "x.png"]) == 0


def test_a_new_set_removes_the_other_kind_s_listing_of_the_previous_one(tmp_path):
    out = _set(tmp_path, 3, "img")
    write_set(out, np.ones((2, 4), np.float32), "sentences", ["a .", "b ."])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.npy", "emb.sentences.txt"]


def test_text_encode_on_a_full_disk_keeps_the_previous_array_and_listing(tmp_path, monkeypatch, capsys,
                                                                        tiny_bert_dir, one_torch_thread):
    """``hardmix encode -o`` once truncated the previous array, then failed with NumPy's "15360 requested
    and 9184 written"."""
    out = tmp_path / "emb.npy"

    def encode(text: bytes) -> int:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
        return main(["encode", str(tiny_bert_dir), "-o", str(out)])

    assert encode(b"one .\ntwo .\n") == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    full_disk_for(monkeypatch, "emb.npy")
    assert encode(b"three .\nfour .\nfive .\n") == 2
    err = capsys.readouterr().err
    assert f"hardmix: error: {out}: No space left on device; the disk is full" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# ----------------------------------------------------------------------------- stale temporary files
def _killed_writer(folder: Path, name: str) -> Path:
    """A real process killed by SIGKILL while :func:`confine.atomic_write` writes ``folder/name``: its
    temporary file, as it left it."""
    code = textwrap.dedent(f"""
        import sys, time
        from hardmix.utils.confine import atomic_write
        def write(f):
            f.write(b"x" * 3_000_000); f.flush(); print("writing", flush=True); time.sleep(60)
        atomic_write({str(folder / name)!r}, {str(folder)!r}, write, "wb")
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = list(folder.glob(f".{name}.*.tmp"))
    assert len(left) == 1 and left[0].stat().st_size == 3_000_000
    return left[0]


def test_the_next_run_removes_the_temporary_checkpoint_a_sigkill_left_and_says_so(tmp_path, capsys,
                                                                                  tiny_text_config,
                                                                                  one_torch_thread):
    cfg = {**tiny_text_config, "train": {**tiny_text_config["train"], "max_steps": 2, "stop_after_steps": 1,
                                         "threads": 1}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["train", "text", str(path), "--output", str(run)]) != 1
    left = _killed_writer(run, "checkpoint.pt")
    older = run / ".checkpoint.pt.abcd_123.tmp"  # an older hardmix's name (no pid), under the run's lock
    older.write_bytes(b"y" * 10)
    capsys.readouterr()
    assert main(["train", "text", str(path), "--output", str(run), "--resume"]) in (0, 75)
    err = capsys.readouterr().err
    assert not left.exists() and not older.exists()
    assert f"removed 2 temporary files a killed run left in {run} (3.0 MB)" in err, err
    assert left.name in err


def test_a_live_writer_s_temporary_file_is_not_removed(tmp_path):
    """Another process writing in the folder now (its pid alive) keeps its temporary file."""
    mine = tmp_path / f".emb.npy.{os.getppid()}-abcd1234.tmp"
    mine.write_bytes(b"z")
    assert confine.remove_stale_temporaries(tmp_path, tmp_path, process_alive) == [] and mine.exists()


# ------------------------------------------------------------------------------------ finite or refused
def test_encode_refuses_a_model_with_a_nan_weight_naming_the_tensor(tmp_path, monkeypatch, capsys,
                                                                  tiny_bert_dir):
    """Once: NaN embeddings written with exit 0."""
    from safetensors.torch import load_file, save_file

    model = Path(shutil.copytree(tiny_bert_dir, tmp_path / "model"))
    tensors = load_file(model / "model.safetensors")
    name = next(k for k in tensors if k.endswith("attention.self.query.weight"))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"one .\n")))
    assert main(["encode", str(model), "-o", str(tmp_path / "emb.npy")]) == 2
    err = capsys.readouterr().err
    assert "are not finite" in err and name.removeprefix("bert.") in err, err
    assert not (tmp_path / "emb.npy").exists()


def test_encode_refuses_rows_that_are_not_finite_naming_them(tmp_path):
    with pytest.raises(ValueError, match=r"2 of its 4 rows are not finite .*rows 1, 3"):
        write_set(tmp_path / "e.npy", np.array([[1, 0], [np.nan, 0], [0, 1], [np.inf, 1]], np.float32),
                  "sentences", ["a", "b", "c", "d"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("array, expect", [
    (np.array([[1, 0], [np.nan, 1], [0, 1]], np.float32),
     "1 of its 3 rows are not finite (NaN or infinite): row 1"),
    (np.array([[1, 0], [np.inf, 1], [0, 1]], np.float32), "row 1"),
    (np.zeros((3, 0), np.float32), "shape (3, 0): rows of 0 dimensions"),
])
def test_neighbours_refuses_non_finite_and_zero_dimensional_arrays(array, expect, tmp_path, capsys):
    """Once: NaN and inf rows ranked (faiss listed one image several times at -3.4e38); (N, 0) accepted."""
    np.save(tmp_path / "emb.npy", array)
    (tmp_path / "emb.paths.txt").write_text("a.png\nb.png\nc.png\n")
    assert main(["neighbours", str(tmp_path / "emb.npy"), "a.png", "--backend", "numpy"]) == 2
    assert expect in capsys.readouterr().err


def test_a_crlf_listing_is_refused_showing_the_carriage_return(tmp_path, capsys):
    np.save(tmp_path / "emb.npy", np.eye(3, dtype=np.float32))
    (tmp_path / "emb.paths.txt").write_bytes(b"a.png\r\nb.png\r\nc.png\r\n")
    assert main(["neighbours", str(tmp_path / "emb.npy"), "a.png"]) == 2
    err = capsys.readouterr().err
    assert "emb.paths.txt: line 1 ('a.png\\r') ends with \\r\\n (CRLF line ends, 3 of 3 lines)" in err, err


class _FaissMissingOne:
    """A faiss whose flat index leaves the last result of each query unfound (index -1, similarity
    -3.4e38), as faiss does when it finds fewer than asked."""

    class IndexFlatIP:
        def __init__(self, d: int) -> None:
            self.x = np.zeros((0, d), np.float32)

        def add(self, x: np.ndarray) -> None:
            self.x = x

        def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            sims = q @ self.x.T
            idx = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            out = np.take_along_axis(sims, idx, axis=1)
            idx[:, -1], out[:, -1] = -1, -3.4e38
            return out, idx


def test_a_result_faiss_did_not_find_is_never_an_item(monkeypatch):
    monkeypatch.setattr("hardmix.utils.faiss_backend.faiss_module", lambda: _FaissMissingOne)
    emb = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    sims, rows = nearest_rows(emb, [0, 2], k=5, backend="faiss")
    want_sims, want_rows = nearest_rows(emb, [0, 2], k=5, backend="numpy")
    assert (rows >= 0).all() and rows.tolist() == want_rows.tolist()
    np.testing.assert_allclose(sims, want_sims, atol=1e-6)


def test_a_killed_writer_s_file_is_real(tmp_path):
    """The helper above leaves what a SIGKILL leaves: a temporary file named with the dead writer's pid."""
    left = _killed_writer(tmp_path, "emb.npy")
    pid = int(left.name.split(".")[-2].split("-")[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    time.sleep(0)
    removed = confine.remove_stale_temporaries(tmp_path, tmp_path, process_alive, names=["emb.npy"])
    assert [p.name for p, _ in removed] == [left.name] and not left.exists()


def test_a_full_disk_in_an_export_names_the_folder_and_keeps_the_previous_one(tmp_path, monkeypatch,
                                                                             tiny_bert_dir):
    """safetensors reports a full disk as its own ``SafetensorError("... (os error 28)")``, once a
    traceback past the run's one line, and its half-written temporary folder stayed."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    from hardmix.text.model import ContrastiveSentenceModel, export_model, load_backbone

    backbone, tokenizer = load_backbone(str(tiny_bert_dir), None, True)
    model = ContrastiveSentenceModel(backbone, "cls", tokenizer)
    export_model(model, tmp_path / "best")
    before = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "best").rglob("*") if p.is_file()}

    def full(*args, **kwargs):  # what safetensors raises when the disk fills under it
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    with pytest.raises(OSError) as info:
        export_model(model, tmp_path / "best")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "best")
    assert {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "best").rglob("*") if p.is_file()} \
        == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
