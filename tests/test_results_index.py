"""``results/README.md`` indexes every record under ``results/``: each entry matches a name of its table's
first column (``*`` and ``{a,b}`` as the shell reads them)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _patterns(index: str) -> list[str]:
    out = []
    for line in index.splitlines():
        if not line.startswith("| `"):
            continue
        for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
            braces = re.search(r"\{([^}]*)\}", name)
            names = ([name[:braces.start()] + alt + name[braces.end():] for alt in braces[1].split(",")]
                     if braces else [name])
            out += [n.rstrip("/") for n in names]
    return out


def test_every_record_is_in_the_index() -> None:
    patterns = _patterns((ROOT / "results/README.md").read_text())
    assert "vision_quality*.json" in patterns and "text_eval_bert_mini_cls.json" in patterns
    missing = [p.name for p in sorted((ROOT / "results").iterdir())
               if p.name != "README.md" and not any(fnmatch.fnmatch(p.name, pat) for pat in patterns)]
    assert missing == []
