"""Utilities: atomic checkpoint and text writes, the progress bar, the data root, RNG state."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from hardmix.datasets.paths import ENV_VAR, DataRootError, data_root, resolve_data_path
from hardmix.utils.confine import save_torch, write_text
from hardmix.utils.rng import rng_state, seed_everything, set_rng_state

# ---- atomic writes ----------------------------------------------------------------------------------


class _Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot pickle this")


def test_atomic_torch_save_round_trip_and_no_temporaries(tmp_path: Path) -> None:
    path = save_torch({"step": 3, "w": torch.arange(4)}, tmp_path / "sub" / "ckpt.pt", tmp_path)
    loaded = torch.load(path)
    assert loaded["step"] == 3 and torch.equal(loaded["w"], torch.arange(4))
    assert os.listdir(tmp_path / "sub") == ["ckpt.pt"]


def test_a_failed_save_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    save_torch({"step": 1}, path, tmp_path)
    with pytest.raises(RuntimeError, match="cannot pickle"):
        save_torch({"step": 2, "bad": _Unpicklable()}, path, tmp_path)
    assert torch.load(path) == {"step": 1}
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # the temporary file was removed


def test_atomic_write_text(tmp_path: Path) -> None:
    path = tmp_path / "a" / "notes.txt"
    write_text("first\n", path, tmp_path)
    write_text("second é\n", path, tmp_path)
    assert path.read_text(encoding="utf-8") == "second é\n"
    assert os.listdir(path.parent) == ["notes.txt"]


# ---- data root --------------------------------------------------------------------------------------


def test_data_root_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert data_root() == tmp_path
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(DataRootError, match="does not exist"):
        data_root()
    assert data_root(required=False) is None
    monkeypatch.delenv(ENV_VAR)  # unset: the per-user default root, ~/.cache/hardmix/data
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataRootError, match=rf"{ENV_VAR} is not set .*hardmix/data.*hardmix data download"):
        data_root()
    assert data_root(required=False) is None
    (tmp_path / "cache" / "hardmix" / "data").mkdir(parents=True)
    assert data_root() == tmp_path / "cache" / "hardmix" / "data"
    assert issubclass(DataRootError, FileNotFoundError)


def test_resolve_data_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    (root / "wiki").mkdir(parents=True)
    (root / "wiki" / "a.txt").write_text("x")
    work = tmp_path / "work"
    work.mkdir()
    (work / "local.txt").write_text("y")
    monkeypatch.chdir(work)
    monkeypatch.setenv(ENV_VAR, str(root))
    assert resolve_data_path("wiki/a.txt") == root / "wiki" / "a.txt"  # under the data root
    assert resolve_data_path("local.txt") == Path("local.txt")  # exists from the working directory
    assert resolve_data_path(tmp_path / "abs.txt") == tmp_path / "abs.txt"  # absolute stays
    assert resolve_data_path("new/out.txt") == root / "new" / "out.txt"  # not found: under the root
    with pytest.raises(FileNotFoundError, match="neither"):
        resolve_data_path("nope.txt", must_exist=True)
    with pytest.raises(FileNotFoundError):
        resolve_data_path(tmp_path / "abs.txt", must_exist=True)
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))  # no default root either
    assert resolve_data_path("nope.txt") == Path("nope.txt")
    with pytest.raises(FileNotFoundError, match="is not set"):
        resolve_data_path("nope.txt", must_exist=True)


# ---- RNG state --------------------------------------------------------------------------------------


def test_rng_state_round_trip_restores_every_generator() -> None:
    seed_everything(123)
    state = rng_state()
    first = (random.random(), float(np.random.rand()), float(torch.rand(())))
    set_rng_state(state)
    again = (random.random(), float(np.random.rand()), float(torch.rand(())))
    assert first == again
    seed_everything(123)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == first


def test_a_bad_data_root_is_named_not_replaced_by_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hardmix.datasets.paths import data_root_path, default_data_root, missing_hint

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "typo"))
    with pytest.raises(DataRootError, match="typo does not exist"):
        data_root_path()
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert data_root_path() == default_data_root() == tmp_path / "c" / "hardmix" / "data"
    assert missing_hint("images/cifar10") == "; fetch it with `hardmix data download cifar10`"
    assert missing_hint("elsewhere/x") == ""
