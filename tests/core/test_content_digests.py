"""Content digests (:mod:`hardmix.training.fingerprint`): a file is read once per machine while its resolved
path, size, mtime, inode and ctime stay the same, its digest cached in this process and in the machine's
cache folder's ``digests.json``, which is written through the write gate; a damaged cache is rebuilt, and no
entry is trusted for a file it does not match in every field."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from hardmix.training import fingerprint
from hardmix.training.fingerprint import DIGESTS, content_digest, file_digest, tree_digest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of its own, this process's cache emptied, and a count of the files read."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("HARDMIX_CACHE", str(folder))
    monkeypatch.setattr(fingerprint, "_memory", {})
    monkeypatch.setattr(fingerprint, "_loaded", set())
    reads: list[str] = []

    def counted(path):
        reads.append(str(path))
        return file_digest(path)

    monkeypatch.setattr(fingerprint, "file_digest", counted)
    return folder, reads


def _new_process(monkeypatch):
    """What a new process starts with: nothing in memory (the cache file stays)."""
    monkeypatch.setattr(fingerprint, "_memory", {})
    monkeypatch.setattr(fingerprint, "_loaded", set())


def test_a_file_is_read_again_only_when_one_of_its_fields_changed(cache, tmp_path, monkeypatch):
    folder, reads = cache
    f = tmp_path / "dev.csv"
    f.write_bytes(b"5.000\tone\n")
    digest = file_digest(f)
    assert content_digest(f) == digest and len(reads) == 1
    assert content_digest(f) == digest and len(reads) == 1  # this process's cache
    _new_process(monkeypatch)
    assert content_digest(f) == digest and len(reads) == 1  # the cache file: the same file is not read
    entry = json.loads((folder / DIGESTS).read_text())["files"][os.path.realpath(f)]
    st = f.stat()
    assert entry == [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, digest]

    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: read again, same content
    assert content_digest(f) == digest and len(reads) == 2

    st = f.stat()  # rewritten in place at the same size (the same inode), its mtime put back
    with open(f, "r+b") as out:
        out.write(b"4.000\tone\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns, f.stat().st_ino) == (st.st_size, st.st_mtime_ns,
                                                                          st.st_ino)
    assert content_digest(f) == file_digest(f) != digest and len(reads) == 3

    other = tmp_path / "other.csv"  # another file moved into its place: another inode
    other.write_bytes(b"5.000\tone\n")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, f)
    assert content_digest(f) == digest and len(reads) == 4

    link = tmp_path / "link.csv"  # a link is its target's file: one entry, no read
    link.symlink_to(f)
    assert content_digest(link) == digest and len(reads) == 4


def test_no_entry_is_trusted_for_a_file_it_does_not_match_in_every_field(cache, tmp_path, monkeypatch):
    folder, reads = cache
    f = tmp_path / "x.txt"
    f.write_bytes(b"abc")
    real, st, fake = os.path.realpath(f), f.stat(), "0" * 64
    key = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
    folder.mkdir()
    for i in range(4):  # one field off by one: the entry is another file's
        wrong = list(key)
        wrong[i] += 1
        (folder / DIGESTS).write_text(json.dumps({"version": 1, "files": {real: [*wrong, fake]}}))
        _new_process(monkeypatch)
        assert content_digest(f) == file_digest(f) and len(reads) == i + 1
    for damaged in ("{not json", json.dumps({"version": 99, "files": {real: [*key, fake]}}),
                    json.dumps({"version": 1, "files": {real: [*key[:3], "x", fake]}}),
                    json.dumps({"version": 1, "files": {real: [*key, "not hex"]}}), json.dumps([1, 2])):
        (folder / DIGESTS).write_text(damaged)  # ignored, and written again whole
        _new_process(monkeypatch)
        assert content_digest(f) == file_digest(f)
        assert json.loads((folder / DIGESTS).read_text())["files"][real] == [*key, file_digest(f)]


def test_the_cache_file_goes_through_the_write_gate(cache, tmp_path, monkeypatch):
    """A link planted where the cache file goes is not written through (nor read): the digests are still
    computed, and the file the link names is unchanged; an unwritable cache folder costs only reading."""
    folder, reads = cache
    folder.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text('{"mine": true}')
    (folder / DIGESTS).symlink_to(victim)
    f = tmp_path / "x.txt"
    f.write_bytes(b"abc")
    assert content_digest(f) == file_digest(f)
    assert victim.read_text() == '{"mine": true}' and (folder / DIGESTS).is_symlink()
    (folder / DIGESTS).unlink()
    folder.chmod(0o500)
    try:
        _new_process(monkeypatch)
        assert content_digest(f) == file_digest(f)
    finally:
        folder.chmod(0o700)
    assert not (folder / DIGESTS).exists() or os.geteuid() == 0  # root writes anyway


def test_a_tree_is_its_files_relative_paths_and_contents(cache, tmp_path):
    """The folder may move; a file rewritten at the same size, or renamed, changes it."""
    a = tmp_path / "a"
    (a / "c0").mkdir(parents=True)
    for i in range(3):
        (a / "c0" / f"{i}.png").write_bytes(bytes([i]) * 10)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    files = lambda root: sorted((root / "c0").iterdir())  # noqa: E731
    assert tree_digest(files(a), a) == tree_digest(files(b), b)
    (b / "c0" / "1.png").write_bytes(bytes([9]) * 10)
    assert tree_digest(files(a), a) != tree_digest(files(b), b)
    (b / "c0" / "1.png").write_bytes(bytes([1]) * 10)
    assert tree_digest(files(a), a) == tree_digest(files(b), b)
    (b / "c0" / "1.png").rename(b / "c0" / "7.png")
    assert tree_digest(files(a), a) != tree_digest(files(b), b)


def test_paths_resolve_as_realpath_with_each_folder_resolved_once(tmp_path):
    """The cache key's path is the file's realpath: through a link to a folder, a link to a file, both, and
    a relative path, it equals ``os.path.realpath``; a folder is resolved once for all its files."""
    import os

    from hardmix.training.fingerprint import _resolved

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.jpg").write_bytes(b"x")
    (tmp_path / "l").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "b" / "g.jpg").symlink_to(tmp_path / "a" / "b" / "f.jpg")
    folders: dict[str, str] = {}
    for q in (tmp_path / "l/b/f.jpg", tmp_path / "a/b/g.jpg", tmp_path / "l/b/g.jpg", "rel/x.jpg"):
        assert _resolved(q, folders) == os.path.realpath(q), q
    assert folders[str(tmp_path / "l" / "b")] == str((tmp_path / "a" / "b").resolve())
