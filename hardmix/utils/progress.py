"""A dependency-free progress bar with rate and ETA (one line, rewritten in place on a TTY)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt_seconds(s: float) -> str:
    s = max(0, int(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class ProgressBar:
    """Progress over ``total`` units with a rate, an ETA and free-form postfix values.

    On a terminal the line is redrawn in place; otherwise (logs, CI) a line is printed every
    ``log_every`` seconds.

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> bar = ProgressBar(10, desc="train", unit="step", stream=out, log_every=0)
        >>> for _ in range(10):
        ...     bar.update(1, loss=0.5)
        >>> bar.close()
        >>> "10/10" in out.getvalue()
        True
    """

    def __init__(
        self,
        total: int,
        desc: str = "",
        unit: str = "it",
        stream: TextIO | None = None,
        log_every: float = 10.0,
        initial: int = 0,
        disable: bool = False,
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.log_every = log_every
        self.n = initial
        self._start_n = initial
        self.disable = disable
        self._t0 = time.perf_counter()
        self._last_print = 0.0
        self._postfix: dict[str, object] = {}
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def _line(self) -> str:
        elapsed = time.perf_counter() - self._t0
        done = self.n - self._start_n
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.n) / rate if rate > 0 else float("nan")
        pct = 100.0 * self.n / self.total if self.total else 100.0
        post = " ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in self._postfix.items()
        )
        eta_s = _fmt_seconds(eta) if eta == eta else "?"
        return (
            f"{self.desc} {self.n}/{self.total} ({pct:5.1f}%) {rate:.2f} {self.unit}/s "
            f"elapsed {_fmt_seconds(elapsed)} eta {eta_s} {post}"
        ).strip()

    def update(self, n: int = 1, **postfix: object) -> None:
        self.n += n
        self._postfix.update(postfix)
        if self.disable:
            return
        now = time.perf_counter()
        if self._tty:
            self.stream.write("\r" + self._line() + "\033[K")
            self.stream.flush()
        elif now - self._last_print >= self.log_every or self.n >= self.total:
            self.stream.write(self._line() + "\n")
            self.stream.flush()
            self._last_print = now

    def set_postfix(self, **postfix: object) -> None:
        self._postfix.update(postfix)

    def close(self) -> None:
        if not self.disable and self._tty:
            self.stream.write("\n")
            self.stream.flush()
