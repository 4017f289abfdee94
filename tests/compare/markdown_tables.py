"""Reading the Markdown tables ``hardmix compare`` writes, and Holm's adjustment written out by hand, for
tests that recompute a summary independently of the code that wrote it."""

from __future__ import annotations


def parse_tables(markdown: str) -> list[dict]:
    """Every table of ``markdown``: its title (the last ``###`` heading above it), its header, its rows as
    {column: cell}."""
    tables, title, lines = [], "", markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("### "):
            title = line[4:].strip()
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            head = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip()[1:-1].split(" | ")]
                assert len(cells) == len(head), lines[i]
                rows.append(dict(zip(head, cells)))
                i += 1
            tables.append({"title": title, "head": head, "rows": rows})
            continue
        i += 1
    return tables


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment: the k-th smallest of m p-values times (m - k + 1), made monotone by a
    running maximum, capped at 1; in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * pvalues[i])
        adjusted[i] = min(1.0, running)
    return adjusted
