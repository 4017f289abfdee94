"""The strategy of docs/architecture.md ("Add a strategy in one file") runs as written and computes its
equation (checked against NumPy), so that the recipe cannot drift from the interface."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from hardmix.losses import ContrastiveLoss
from hardmix.strategies import base
from hardmix.strategies.build import build_strategies
from hardmix.utils.errors import ConfigError

from ._reference import logsumexp, normalize

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _example_source() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Add a strategy in one file", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def test_the_documented_strategy_registers_and_computes_its_equation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # registered for this test only
    namespace: dict[str, object] = {}
    exec(compile(_example_source(), str(DOC), "exec"), namespace)  # noqa: S102 - our own docs
    assert "positive_mix" in base.available_strategies()
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.weight: must be in \(0, 1\), got 1.5$"):
        build_one({"name": "positive_mix", "weight": 1.5})

    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(6, 5, generator=g, dtype=torch.float64)
    z2 = torch.randn(6, 5, generator=g, dtype=torch.float64)
    spec = {"name": "positive_mix", "weight": 0.3}
    loss = float(ContrastiveLoss(0.1, spec).in_batch(z1, z2).loss)
    h1, h2 = normalize(z1.numpy()), normalize(z2.numpy())
    rows = []
    for i in range(6):
        mixed = normalize(0.3 * h1[i] + 0.7 * h2[i])
        row = np.append(h1[i] @ h2.T / 0.1, h1[i] @ mixed / 0.1)
        rows.append(logsumexp(row) - row[i])
    assert loss == pytest.approx(float(np.mean(rows)), rel=1e-12)


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
