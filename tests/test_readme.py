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


def test_readme_python_training_example_runs(tmp_path, monkeypatch, data_root) -> None:
    """The README's ``hardmix.train`` example, as written (20 steps of the CPU MixCSE config)."""
    text = README.read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "hardmix.train(" in b)
    root = README.parent
    monkeypatch.chdir(tmp_path)  # the run folder lands here; the config is the repository's
    namespace: dict[str, object] = {}
    exec(compile(block.replace('"configs/', f'"{root}/configs/'), str(README), "exec"), namespace)  # noqa: S102
    results = namespace["results"]
    assert results["steps"] == 20 and results["task"] == "text"
    assert (tmp_path / "runs" / "try" / "results.json").is_file()
    assert results["best_score"] is not None and "stsb_dev" in results["final_scores"]
