"""``hardmix compare``: strategies x tasks (modalities) x seeds, each cell an ordinary training run, then
the paired differences from a baseline with confidence intervals, plots and a self-contained report.

- :mod:`~hardmix.compare.cli`: the command's options; :mod:`~hardmix.compare.command`: what it does;
- :mod:`~hardmix.compare.spec`: the spec file and its validation (:mod:`~hardmix.compare.spec_types`,
  :mod:`~hardmix.compare.cell_keys`); :mod:`~hardmix.compare.resume`: resuming and growing a comparison;
  :mod:`~hardmix.compare.floors`: what the exact test can say before anything runs;
- :mod:`~hardmix.compare.grid`: the cells, their names, configs, commands and states;
- :mod:`~hardmix.compare.runner`: running them here (resumable, ``--jobs`` at once);
  :mod:`~hardmix.compare.launcher`: as SLURM jobs through submitit;
  :mod:`~hardmix.compare.status`: ``--status``;
- :mod:`~hardmix.compare.stats`: paired differences, confidence intervals, the paired t-test, Holm's
  correction, effect sizes and minimum detectable differences;
- :mod:`~hardmix.compare.summary`: the summary, built as the dataclasses of
  :mod:`~hardmix.compare.summary_types` (what ``summary.json`` holds and is read back into);
- :mod:`~hardmix.compare.tables`, :mod:`~hardmix.compare.plots`, :mod:`~hardmix.compare.report`: every
  table, rendered from them, the plots and the files (``summary.md``, ``report.html``, ...).
"""
