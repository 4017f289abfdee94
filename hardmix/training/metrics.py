"""``metrics.jsonl`` (one JSON object a line, written by rank 0) and, when asked, TensorBoard events."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from hardmix.training.run_folder import METRICS
from hardmix.utils.confine import open_for_write, summary_writer, write_text
from hardmix.utils.errors import ConfigError


def tensorboard_writer_class() -> None:
    """Check that ``torch.utils.tensorboard`` imports (its ``SummaryWriter`` is made by
    :func:`hardmix.utils.confine.summary_writer`), or a ConfigError naming the extra that provides it."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError("log.tensorboard: the tensorboard package is not installed; "
                          "pip install 'hardmix[tensorboard]' (or set log.tensorboard: false)") from None


def _json_value(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


class MetricsLog:
    """Append-only metrics of a run.

    Args:
        path: ``RUN/metrics.jsonl``.
        enabled: whether this process writes (rank 0).
        keep_until: resuming at this step: lines of later steps (written after the checkpoint by a run that
            was then killed) are dropped; None starts a new file.
        tensorboard_dir: also write every numeric value as a TensorBoard scalar there.
        root: the run folder, which both lie in (by default the folder of ``path``).
    """

    def __init__(self, path: Path, enabled: bool, keep_until: int | None = None,
                 tensorboard_dir: Path | None = None, root: Path | None = None) -> None:
        self.path = path
        self.root = path.parent if root is None else root
        self.enabled = enabled
        self.writer = None
        if not enabled:
            return
        kept: list[str] = []
        if keep_until is not None and path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # blank, or the last line cut by the kill that stopped the run
                if isinstance(record, dict) and record.get("step", 0) <= keep_until:
                    kept.append(line)
        write_text("".join(f"{line}\n" for line in kept), path, self.root)
        if tensorboard_dir is not None:
            tensorboard_writer_class()
            self.writer = summary_writer(tensorboard_dir, self.root)

    def write(self, record: dict[str, Any]) -> None:
        """Append one line (NaN and infinities are written as null)."""
        if not self.enabled:
            return
        try:
            with open_for_write(self.path, self.root, "a", encoding="utf-8") as f:
                f.write(json.dumps({k: _json_value(v) for k, v in record.items()}) + "\n")
        except OSError as e:
            if e.errno and e.filename is None:  # a full disk: name the file
                raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(self.path)) from e
            raise
        if self.writer is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.writer.add_scalar(k, v, record["step"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a run folder or the file)."""
    p = Path(path)
    p = p / METRICS if p.is_dir() else p
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


__all__ = ["MetricsLog", "read_metrics", "tensorboard_writer_class"]
