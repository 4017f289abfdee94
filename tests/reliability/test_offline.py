"""Offline means offline: with ``HARDMIX_OFFLINE=1`` or ``--no-download``, no command attempts a connection.

Each case runs ``hardmix`` in a fresh interpreter (the Hub client reads its switches when it is imported,
and caches what it fetched, so only a new process shows what a user's command does) under a guard on the
socket layer: a ``sitecustomize`` that records, then refuses, every TCP connect and every name lookup of a
host other than this machine. The command must end in one clean line and the record must stay empty. No
shared data is needed: the corpus is written here and the data root is an empty folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

#: The guard, installed in every interpreter of the case through ``sitecustomize``.
GUARD = '''
import os, socket, traceback

_LOG = os.environ["HARDMIX_TEST_CONNECT_LOG"]
_LOCAL = (None, "", "localhost", "127.0.0.1", "::1")


def _refuse(what, target):
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(f"{what} {target!r}\\n" + "".join(traceback.format_stack(limit=12)) + "\\n")
    raise OSError(f"socket guard: {what} {target!r} refused")


_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _refuse("connect", address)
    return _connect(self, address)


def connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _refuse("connect_ex", address)
    return _connect_ex(self, address)


def create_connection(address, *args, **kwargs):
    _refuse("create_connection", address)


_getaddrinfo = socket.getaddrinfo


def getaddrinfo(host, *args, **kwargs):
    if host not in _LOCAL:
        _refuse("getaddrinfo", host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = connect
socket.socket.connect_ex = connect_ex
socket.create_connection = create_connection
socket.getaddrinfo = getaddrinfo
'''

#: Environment variables that would make the case pass or fail for a reason of this machine's.
_CLEARED = ("HARDMIX_OFFLINE", "HARDMIX_NO_DOWNLOAD", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
            "HF_DATASETS_OFFLINE", "HARDMIX_DATA_BASE_URL", "HF_ENDPOINT", "HF_HUB_CACHE",
            "TRANSFORMERS_CACHE")


def _guarded_hardmix(tmp: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``hardmix ARGV`` under the socket guard: (exit status, stderr, the connects attempted)."""
    site = tmp / "guard"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
    log = tmp / "connects.log"
    log.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in _CLEARED and k != "PYTHONPATH"}
    full = {**base, "PYTHONPATH": str(site), "HARDMIX_TEST_CONNECT_LOG": str(log),
            "HF_HOME": str(tmp / "hf-home"),  # an empty Hugging Face cache: the model is not there
            "HARDMIX_DATA": str(tmp / "root"), **env}
    (tmp / "root").mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "hardmix", *argv], cwd=tmp, env=full, capture_output=True,
                          text=True, timeout=600)
    return proc.returncode, proc.stderr, log.read_text(encoding="utf-8") if log.exists() else ""


@pytest.fixture
def hub_model_config(tmp_path: Path) -> Path:
    """A text config naming the Hub model ``bert-base-uncased`` (no evaluation, so no data set is needed)
    and a corpus of its own."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} of a small corpus .\n" for i in range(40)),
                      encoding="utf-8")
    cfg = {"model": {"name_or_path": "bert-base-uncased"}, "data": {"train_file": str(corpus)},
           "train": {"max_steps": 1, "batch_size": 4, "device": "cpu", "precision": "fp32"},
           "eval": {"eval_steps": 0, "at_end": False, "final_sts": False}}
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hardmix: error: "), err[-3000:]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("how", ["HARDMIX_OFFLINE=1", "--no-download"])
def test_a_hub_model_name_offline_attempts_no_connection(tmp_path: Path, hub_model_config: Path,
                                                         how: str) -> None:
    argv = ["train", "text", str(hub_model_config), "--output", str(tmp_path / "run")]
    env = {"HARDMIX_OFFLINE": "1"} if how == "HARDMIX_OFFLINE=1" else {}
    if how == "--no-download":
        argv.append("--no-download")
    status, err, connects = _guarded_hardmix(tmp_path, argv, env)
    assert connects == "", f"{how}: a connection was attempted:\n{connects[:4000]}"
    line = _one_line(err)
    assert status == 2
    assert "model.name_or_path" in line and "bert-base-uncased" in line
    assert f"offline mode is set ({how})" in line
    assert not (tmp_path / "run").exists()


def test_data_download_offline_attempts_no_connection(tmp_path: Path) -> None:
    status, err, connects = _guarded_hardmix(tmp_path, ["data", "download", "senteval", "--root",
                                                        str(tmp_path / "root")], {"HARDMIX_OFFLINE": "1"})
    assert connects == ""
    assert status == 2 and "HARDMIX_OFFLINE=1 is set, so no connection is attempted" in _one_line(err)


def test_the_guard_sees_a_connection() -> None:
    """The guard itself: a command that does connect is recorded (so an empty record means none)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        site = tmp / "guard"
        site.mkdir()
        (site / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
        log = tmp / "log"
        env = {**os.environ, "PYTHONPATH": str(site), "HARDMIX_TEST_CONNECT_LOG": str(log)}
        code = "import socket\ntry:\n    socket.create_connection(('huggingface.co', 443), timeout=1)\n" \
               "except OSError as e:\n    print(e)"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=60)
        assert "socket guard: create_connection ('huggingface.co', 443) refused" in out.stdout
        assert log.read_text(encoding="utf-8").startswith("create_connection ('huggingface.co', 443)")
