"""A local HTTP server for the download tests: the standard library's ``http.server`` in a thread,
serving a folder with Range requests (206 Partial Content), logging every request, and able to cut a
response off after N bytes (a dropped connection)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class ServerState:
    folder: Path
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    cut_after: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the cut (once)
    ranges: bool = True  # False: ignore Range headers (answer 200 with the whole file), as some servers do


class _Handler(SimpleHTTPRequestHandler):
    state: ServerState

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name): the length, as a real server announces it
        f = self.state.folder / self.path.lstrip("/")
        if not f.is_file():
            self.send_error(404, "not found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(f.stat().st_size))
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        rel = self.path.lstrip("/")
        self.state.requests.append((rel, self.headers.get("Range")))
        f = self.state.folder / rel
        if not f.is_file():
            self.send_error(404, "not found")
            return
        data = f.read_bytes()
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and self.state.ranges:
            start = int(rng[6:].split("-", 1)[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            status = 206
        body = data[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        cut = self.state.cut_after.pop(rel, None)
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


class LocalServer:
    """``with LocalServer(folder) as srv: srv.url`` serves ``folder`` at ``http://127.0.0.1:PORT``."""

    def __init__(self, folder: Path) -> None:
        self.state = ServerState(Path(folder))
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> LocalServer:
        # The tests run with HARDMIX_OFFLINE=1 (conftest) so that nothing reaches the network; a test that
        # serves files here downloads from this machine, so it is lifted while the server runs.
        self._offline = os.environ.pop("HARDMIX_OFFLINE", None)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._offline is not None:
            os.environ["HARDMIX_OFFLINE"] = self._offline
