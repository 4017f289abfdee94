"""A comparison's folder, named once (as :mod:`hardmix.training.run_folder` names a run's): every module of
``hardmix compare`` imports these names instead of typing them.

::

    DIR/spec.yaml            SPEC_COPY     the spec as it was run (and the precision ``auto`` resolved to)
    DIR/growth.json          GROWTH        each ``--resume`` that added seeds, strategies or grid points
    DIR/start/<task>/seed<k>_<key>.json   START_DIR  a start measured after the fact (--measure-start)
    DIR/start_cache/<key>.json   START_CACHE   a start measured by the first cell that starts from it, read
                                           by the others (``hardmix train --start-cache``)
    DIR/runs/<task>/<strategy>/seed<k>/    RUNS       the evaluation cells' run folders
    DIR/tune/<task>/<strategy>/point<i>/seed<k>/  TUNE  the tuning cells'; ``tune/points.json`` POINT_ORDER
    DIR/logs/                LOGS          each cell's output
    DIR/superseded/<task>/<strategy>/...   SUPERSEDED  cells set aside (a tuning point no longer chosen;
                                           ``mismatched/``, MISMATCHED: made from other inputs), kept
    DIR/plots/               PLOTS_FOLDER         the figures
    DIR/summary.json, summary.md, summary.csv, report.html   SUMMARY_JSON, SUMMARY_MD, SUMMARY_CSV, REPORT
    <a cell>/failure.json    FAILURE       why a failed cell's run failed
    DIR/launcher/jobs.json   LAUNCHER_RECORDS    the jobs a launcher submitted, one per cell
    DIR/launcher/submitit/   LAUNCHER_SUBMITIT   submitit's files, by its own names
"""

from __future__ import annotations

from pathlib import Path

SPEC_COPY = "spec.yaml"
GROWTH = "growth.json"
START_DIR = "start"
START_CACHE = "start_cache"
RUNS = "runs"
TUNE = "tune"
POINT_ORDER = "points.json"
LOGS = "logs"
SUPERSEDED = "superseded"
MISMATCHED = "mismatched"
PLOTS_FOLDER = "plots"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
SUMMARY_CSV = "summary.csv"
REPORT = "report.html"
FAILURE = "failure.json"
LAUNCHER_RECORDS = Path("launcher") / "jobs.json"
LAUNCHER_SUBMITIT = Path("launcher") / "submitit"

__all__ = ["FAILURE", "GROWTH", "LAUNCHER_RECORDS", "LAUNCHER_SUBMITIT", "LOGS", "MISMATCHED", "PLOTS_FOLDER",
           "POINT_ORDER", "REPORT", "RUNS", "SPEC_COPY", "START_CACHE", "START_DIR", "SUMMARY_CSV",
           "SUMMARY_JSON", "SUMMARY_MD", "SUPERSEDED", "TUNE"]
