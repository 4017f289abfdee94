"""The downloader over a real local HTTP server: resume, retry, checksum rejection, clear errors."""

from __future__ import annotations

import hashlib
import os
import socket

import pytest

from hardmix.datasets.download import DataDownloadError, download_file
from tests.core.http_server import LocalServer


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "srv"
    folder.mkdir()
    payload = os.urandom(300_000)
    (folder / "blob.bin").write_bytes(payload)
    with LocalServer(folder) as srv:
        yield srv, payload, hashlib.md5(payload).hexdigest()


def test_a_cut_off_transfer_resumes_on_the_next_call(served, tmp_path):
    srv, payload, md5 = served
    dest = tmp_path / "out" / "blob.bin"
    srv.state.cut_after["blob.bin"] = 100_000
    with pytest.raises(DataDownloadError, match=r"interrupted.*run the same command again to resume"):
        download_file(f"{srv.url}/blob.bin", dest, md5=md5, retries=0, progress=False)
    part = dest.with_name("blob.bin.part")
    assert not dest.exists() and part.stat().st_size == 100_000  # nothing half-written at dest
    got = download_file(f"{srv.url}/blob.bin", dest, md5=md5, retries=0, progress=False)
    assert dest.read_bytes() == payload and got.md5 == md5 and not part.exists()
    assert srv.state.requests == [("blob.bin", None), ("blob.bin", "bytes=100000-")]


def test_a_dropped_connection_is_resumed_within_the_call(served, tmp_path):
    srv, payload, md5 = served
    srv.state.cut_after["blob.bin"] = 1234
    download_file(f"{srv.url}/blob.bin", tmp_path / "b", md5=md5, retries=2, progress=False)
    assert (tmp_path / "b").read_bytes() == payload
    assert [r for _, r in srv.state.requests] == [None, "bytes=1234-"]


def test_a_server_without_ranges_makes_the_resume_start_over(served, tmp_path):
    srv, payload, md5 = served
    dest = tmp_path / "b"
    dest.with_name("b.part").write_bytes(b"stale bytes of an earlier attempt")
    srv.state.ranges = False
    download_file(f"{srv.url}/blob.bin", dest, md5=md5, progress=False)
    assert dest.read_bytes() == payload and srv.state.requests[0][1] == "bytes=33-"


def test_a_checksum_mismatch_is_rejected_and_the_partial_file_deleted(served, tmp_path):
    srv, payload, md5 = served
    dest = tmp_path / "b"
    with pytest.raises(DataDownloadError, match=r"blob\.bin: sha256 mismatch .*deleted"):
        download_file(f"{srv.url}/blob.bin", dest, sha256="0" * 64, progress=False)
    assert not dest.exists() and not dest.with_name("b.part").exists()
    with pytest.raises(DataDownloadError, match=r"got 300000 bytes, expected 5"):
        download_file(f"{srv.url}/blob.bin", dest, size=5, progress=False)
    assert not dest.with_name("b.part").exists()


def test_a_complete_partial_file_is_verified_without_refetching(served, tmp_path):
    srv, payload, md5 = served
    dest = tmp_path / "b"
    dest.with_name("b.part").write_bytes(payload)  # an earlier call died after the last byte
    download_file(f"{srv.url}/blob.bin", dest, md5=md5, progress=False)
    assert dest.read_bytes() == payload and srv.state.requests == [("blob.bin", f"bytes={len(payload)}-")]


def test_missing_file_and_unreachable_server_are_one_line(served, tmp_path):
    srv, _, _ = served
    with pytest.raises(DataDownloadError, match=r"/nope\.bin: HTTP 404") as e:
        download_file(f"{srv.url}/nope.bin", tmp_path / "n", progress=False)
    assert "\n" not in str(e.value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataDownloadError, match=r"cannot connect .*--base-url"):
        download_file(f"http://127.0.0.1:{port}/x", tmp_path / "x", retries=0, progress=False)


def test_a_damaged_partial_file_of_an_unverified_source_is_never_resumed(served, tmp_path):
    """A damaged ``senteval.tar.part`` was resumed and its SHA-256 recorded as the
    reference. A source that no checksum verifies (none published, none recorded) is fetched whole, from
    byte 0, in one transfer: kept bytes are discarded, so what gets recorded is the server's file."""
    from hardmix.datasets.manager import fetch_source
    from hardmix.datasets.records import downloads_dir
    from hardmix.datasets.sources import Source

    srv, payload, _ = served
    root = tmp_path / "root"
    src = Source("blob.bin", f"{srv.url}/blob.bin")  # no md5, no sha256: like senteval.tar
    part = downloads_dir(root) / "blob.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"\x00" * 1000)  # damaged bytes a resume would keep
    dest, first = fetch_source(root, src, progress=False)
    assert dest.read_bytes() == payload and not part.exists()
    assert srv.state.requests == [("blob.bin", None)]  # no range request: nothing kept was trusted
    assert first["sha256"] == hashlib.sha256(payload).hexdigest()
    # a transfer of such a source dropped within the call starts again from byte 0, not from the cut
    srv.state.cut_after["blob.bin"] = 5000
    srv.state.requests.clear()
    (downloads_dir(root) / "blob.bin").unlink()
    dest, _ = fetch_source(root, src, progress=False)
    assert dest.read_bytes() == payload and srv.state.requests == [("blob.bin", None), ("blob.bin", None)]
    # and when every attempt fails, nothing is kept to be resumed later
    srv.state.cut_after["blob.bin"] = 5000
    dest.unlink()
    with pytest.raises(DataDownloadError, match="no checksum verifies this file, so nothing is kept"):
        download_file(src.url, dest, retries=0, progress=False, resume=False)
    assert not part.exists()


def test_hardmix_offline_means_no_connection_is_attempted(served, tmp_path, monkeypatch, capsys):
    """With HARDMIX_OFFLINE=1 no command attempts a connection: a download is refused
    before any request (the local server sees none), and a Hub model name is refused without the
    reachability probe."""
    from hardmix.cli import main
    from hardmix.text import model_source

    srv, _, md5 = served
    monkeypatch.setenv("HARDMIX_OFFLINE", "1")
    with pytest.raises(DataDownloadError, match="HARDMIX_OFFLINE=1 is set, so no connection is attempted"):
        download_file(f"{srv.url}/blob.bin", tmp_path / "b", md5=md5, progress=False)
    assert main(["data", "download", "cifar10", "--root", str(tmp_path / "root"), "--base-url", srv.url]) == 2
    assert "no connection is attempted" in capsys.readouterr().err
    assert srv.state.requests == []

    def probe():
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(model_source, "_hub_reachable", probe)
    cached, why = model_source._hub_status("some-org/a-model-that-is-not-cached")
    assert (cached, why) == (False, "offline mode is set (HARDMIX_OFFLINE=1)")


def test_two_downloads_into_one_root_take_a_lock(served, tmp_path, capsys):
    """A second download into a data root while one is in progress is refused in one
    line (before any request), instead of two processes writing the same archive."""
    import json as _json

    from hardmix.cli import main
    from hardmix.datasets.records import records_dir

    srv, _, _ = served
    root = tmp_path / "root"
    lock = records_dir(root) / ".lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(_json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))  # a live process
    assert main(["data", "download", "cifar10", "--root", str(root), "--base-url", srv.url]) == 2
    err = capsys.readouterr().err
    assert "a download into this data root is in progress there" in err and "Traceback" not in err
    assert srv.state.requests == []
