"""Resumable HTTP downloads, verified before they are used.

:func:`download_file` writes ``DEST.part``, continues a partial file with an HTTP range request (on a
later call, or on the next attempt within a call when the connection drops), shows a tqdm progress bar,
checks the length and the checksum, and only then renames ``DEST.part`` to ``DEST``. A file that fails
its checksum is deleted, so the next call starts afresh; nothing half-written is ever at ``DEST``.

Example (a local file served over ``file://`` takes the same path, without ranges):
    >>> import tempfile, pathlib, hashlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a.txt").write_bytes(b"hello")
    5
    >>> got = download_file((d / "a.txt").as_uri(), d / "b.txt", md5=hashlib.md5(b"hello").hexdigest(),
    ...                     progress=False)
    >>> got.size, (d / "b.txt").read_bytes()
    (5, b'hello')
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hardmix.utils.confine import makedirs, open_for_write, remove_written, replace
from hardmix.utils.offline import OFFLINE_ENV, offline_reason

CHUNK = 1 << 20
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class DataDownloadError(ValueError):
    """A download failed (unreachable, refused, cut off too often, or not the expected bytes)."""


@dataclass(frozen=True)
class Digest:
    """The length and checksums of a file."""

    size: int
    md5: str
    sha256: str


def file_checksums(path: str | os.PathLike[str]) -> Digest:
    """Length, MD5 and SHA-256 of a file, read in 1 MiB chunks."""
    md5, sha = hashlib.md5(), hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            md5.update(chunk)
            sha.update(chunk)
            size += len(chunk)
    return Digest(size, md5.hexdigest(), sha.hexdigest())


def _total_length(resp: http.client.HTTPResponse, offset: int) -> int | None:
    """The full length of the resource: from Content-Range on a 206, else Content-Length."""
    content_range = resp.headers.get("Content-Range", "")
    if resp.status == 206 and "/" in content_range:
        total = content_range.rsplit("/", 1)[1].strip()
        return int(total) if total.isdigit() else None
    length = resp.headers.get("Content-Length")
    if length and length.isdigit():
        return int(length) + (offset if resp.status == 206 else 0)
    return None


def _attempt(url: str, part: Path, progress: bool, desc: str, timeout: float,
             root: Path) -> tuple[int, int | None]:
    """One request: continue ``part`` from its length (or start it). Returns (bytes on disk, full length)."""
    from tqdm.auto import tqdm

    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "hardmix-data/1", "Accept-Encoding": "identity"}
    if offset and not url.startswith("file:"):
        headers["Range"] = f"bytes={offset}-"
    req = urllib.request.Request(url, headers=headers)
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # the partial file already holds every byte
            whole = e.headers.get("Content-Range", "").rsplit("/", 1)[-1]
            return offset, int(whole) if whole.isdigit() else offset
        raise
    with resp:
        status = getattr(resp, "status", 200) or 200
        if status != 206:
            offset = 0  # the server sent the whole file: start over
        total = _total_length(resp, offset)
        with open_for_write(part, root, "ab" if offset else "wb") as f, tqdm(
            total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
            disable=not progress, leave=False,
        ) as bar:
            while True:
                try:
                    chunk = resp.read(CHUNK)
                except http.client.IncompleteRead as e:
                    f.write(e.partial)
                    break
                if not chunk:
                    break
                f.write(chunk)
                bar.update(len(chunk))
    return part.stat().st_size, total


def _mismatch(digest: Digest, md5: str | None, sha256: str | None) -> str | None:
    """What of the expected checksums ``digest`` fails (``md5 mismatch (expected ..., got ...)``), or None."""
    for name, want, have in (("md5", md5, digest.md5), ("sha256", sha256, digest.sha256)):
        if want is not None and want.lower() != have:
            return f"{name} mismatch (expected {want}, got {have})"
    return None


def download_file(
    url: str,
    dest: str | os.PathLike[str],
    md5: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    retries: int = 3,
    progress: bool = True,
    timeout: float = 60.0,
    resume: bool = True,
    root: str | os.PathLike[str] | None = None,
) -> Digest:
    """Download ``url`` to ``dest``, resuming ``dest.part`` if an earlier call was interrupted.

    Args:
        url: http(s) or file URL.
        dest: the final path; written only once the file is complete and verified.
        md5, sha256: expected checksums (hex); a mismatch deletes the partial file and raises.
        size: expected length in bytes (else the length the server announces is checked).
        retries: further attempts after a dropped connection, each resuming where the last stopped.
        progress: show a tqdm progress bar.
        timeout: seconds without data before an attempt is abandoned.
        resume: continue a partial file (``dest.part``, or a dropped transfer); False restarts every
            attempt from byte 0: what a file no checksum verifies needs, since damaged bytes kept from an
            earlier transfer could not be told from good ones. A resumed file that then fails its length
            or checksum is downloaded again from byte 0, once, within the call: kept bytes are used only
            when the whole file verifies.
        root: the folder ``dest`` and its ``.part`` lie in (the downloads folder; by default the folder
            of ``dest``): nothing is written outside it.

    Returns:
        The verified file's :class:`Digest`.

    Raises:
        DataDownloadError: one line naming the URL and what to do.
    """
    reason = offline_reason()
    if reason is not None and not url.startswith("file:"):  # the one place every download goes through
        raise DataDownloadError(f"{url}: {reason} is set, so no connection is attempted; "
                                f"{'unset it' if reason.startswith(OFFLINE_ENV) else 'leave it out'} to "
                                "download, or lay the file out by hand (docs/data.md)")
    dest = Path(dest)
    root = dest.parent if root is None else Path(root)
    makedirs(dest.parent, root)
    part = dest.with_name(dest.name + ".part")
    kept_bytes = resume and part.exists() and part.stat().st_size > 0  # from an earlier call
    got, total, last_error = 0, None, "no attempt"
    for _ in range(retries + 1):
        if not resume:
            remove_written(part, root)
        try:
            got, total = _attempt(url, part, progress, dest.name, timeout, root)
        except urllib.error.HTTPError as e:
            if e.code not in _RETRY_STATUS:
                raise DataDownloadError(
                    f"{url}: HTTP {e.code} {e.reason}; check the URL (or --base-url)") from None
            last_error = f"HTTP {e.code}"
            continue
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            cause = e.reason if isinstance(e, urllib.error.URLError) else e
            last_error = f"{type(e).__name__}: {cause}"
            got = part.stat().st_size if part.exists() else 0
            if got == 0 and isinstance(e, urllib.error.URLError):
                raise DataDownloadError(f"{url}: cannot connect ({cause}); check the network or use a "
                                        "mirror with --base-url") from None
            continue
        if total is None or got >= total:  # the server sent all it has (verified below)
            break
        last_error = f"connection closed after {got} of {total} bytes"
    else:
        kept = (f"{got} bytes are kept in {part}: run the same command again to resume" if resume else
                "no checksum verifies this file, so nothing is kept: run the same command again")
        if not resume:
            remove_written(part, root)
        raise DataDownloadError(f"{url}: transfer interrupted ({last_error}); {kept}")
    expected = size if size is not None else total
    digest = file_checksums(part) if expected is None or got == expected else None
    problem = f"got {got} bytes, expected {expected}" if digest is None else _mismatch(digest, md5, sha256)
    if digest is not None and problem is None:
        replace(part, dest, root)
        return digest
    remove_written(part, root)
    if kept_bytes:  # the bytes kept from an earlier call were not the file's: start over, once
        return download_file(url, dest, md5=md5, sha256=sha256, size=size, retries=retries,
                             progress=progress, timeout=timeout, resume=resume, root=root)
    raise DataDownloadError(f"{url}: {problem}; the download was deleted: run again, and if it persists the "
                            "source has changed")
