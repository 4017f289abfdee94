"""docs/results.md quotes the CPU comparison as ``hardmix compare`` wrote it: the block between the markers
is the tool's own Markdown of the committed ``summary.json``, so the two cannot drift."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hardmix.compare.report import summary_markdown

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(
    r"<!-- hardmix compare: (?P<path>\S+) -->\n(?P<body>.*?)<!-- end of hardmix compare -->", re.S
)


def test_results_md_quotes_the_comparisons_as_the_tool_wrote_them() -> None:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    blocks = list(BLOCK.finditer(text))
    assert blocks, "docs/results.md quotes no comparison"
    for block in blocks:
        summary = json.loads((ROOT / block["path"]).read_text(encoding="utf-8"))
        assert summary["finished"] == summary["cells"], f"{block['path']}: not every run finished"
        assert block["body"].strip() == summary_markdown(summary).strip(), block["path"]
