"""Shared pytest fixtures. Each block is owned by one part of the project; keep blocks separate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# ---- data root (shared by all blocks) -------------------------------------------------------------
# Tests that need the shared data take the `data_root` fixture. Where HARDMIX_DATA is unset or missing
# they skip with a reason, except when HARDMIX_REQUIRE_DATA=1 (set by .ci/run when the data is present):
# then a missing data folder fails the test, so CI cannot pass by skipping.


def _require_data() -> bool:
    return os.environ.get("HARDMIX_REQUIRE_DATA", "") not in ("", "0")


def require_data_path(*parts: str) -> Path:
    """Return HARDMIX_DATA/parts..., or skip (fail under HARDMIX_REQUIRE_DATA=1) when it is absent."""
    root = os.environ.get("HARDMIX_DATA")
    path = Path(root).joinpath(*parts) if root else None
    if path is None or not path.exists():
        reason = (
            f"needs the shared data: HARDMIX_DATA={root!r} has no {'/'.join(parts) or 'folder'}"
            if root
            else "needs the shared data: HARDMIX_DATA is not set"
        )
        if _require_data():
            pytest.fail(reason + " (HARDMIX_REQUIRE_DATA=1)")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The shared data folder (HARDMIX_DATA)."""
    return require_data_path()


@pytest.fixture(scope="session")
def bert_mini_path() -> Path:
    """The shared pretrained bert-mini folder (its tokenizer is the real bert-base-uncased WordPiece)."""
    return require_data_path("models", "bert-mini-wiki-mlm")
# ---- end data root ---------------------------------------------------------------------------------
