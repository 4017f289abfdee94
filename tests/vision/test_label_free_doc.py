"""docs/selection_without_labels.md and its one committed run: the run (``results/superseded/``) is retired,
its encoders having ended about where they started, so the doc makes none of its measured claims and says
why, pointing at the record; the record's own ``selection.md`` is still the benchmark script's output of its
runs; and the rule the doc gives for trusting the score is the script's ``noise_range``."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "results/superseded/label_free_2026-12-04"
DOC = ROOT / "docs/selection_without_labels.md"


def _script():
    spec = importlib.util.spec_from_file_location("label_free_selection",
                                                  ROOT / "benchmarks/label_free_selection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_retired_record_s_table_is_the_script_s_output_of_its_runs():
    script = _script()
    assert (FOLDER / "selection.md").read_text().strip() == script.markdown(script.table(FOLDER)).strip()


def test_the_doc_points_at_the_retired_record_and_quotes_none_of_it():
    text = DOC.read_text()
    flat = " ".join(text.split())
    assert "label_free_selection:" not in text  # the table block left with the claims
    assert f"`{FOLDER.relative_to(ROOT)}/`" in flat and "is retired" in flat and FOLDER.is_dir()
    assert "`results/superseded/README.md`" in flat
    readme = (ROOT / "results/superseded/README.md").read_text()
    assert f"`{FOLDER.name}/`" in readme
    # no measured number of the run is left: the only decimals are the rule's factor
    numbers = re.findall(r"\d+\.\d+", text)
    script = _script()
    assert numbers == [f"{script.noise_range(13):.1f}"]
    assert f"about {script.noise_range(13):.1f} times its binomial standard error for 13 evaluations" in flat
