"""The README's Python example of the core runs as written (so the README cannot drift from the API)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_core_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has no python example"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102 - our own README
    synthetic = namespace["synthetic"]
    assert isinstance(synthetic, torch.Tensor) and synthetic.shape == (256, 1024 + 128, 128)
    assert torch.allclose(synthetic.norm(dim=-1), torch.ones(256, 1152), atol=1e-5)
    h1 = namespace["h1"]
    assert isinstance(h1, torch.Tensor) and h1.grad is not None and torch.isfinite(h1.grad).all()
