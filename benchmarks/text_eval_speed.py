"""Speed of ``hardmix eval text``: time per task and for the whole suite.

On one model (default: bert-mini-wiki-mlm with [CLS] pooling), ``evaluate_sts`` then ``evaluate_transfer``
end to end with a fresh encoder (data loading, encoding every distinct sentence once, all of SentEval's
classifiers): what ``hardmix eval text`` costs. The evaluation records the encoding time of each task (its
sentences not already encoded by an earlier task, which is rare) and the classifier time of each transfer
task; each classifier is run ``--repeats`` times in all on the cached embeddings (median reported).
``--suite-repeats`` end-to-end runs (median). Official SentEval itself, measured side by side on the same
embeddings, is ``benchmarks/senteval_parity.py``.

Times are wall-clock seconds; process CPU seconds and the load average are recorded too, since the
machine may be shared.

Usage:
    python benchmarks/text_eval_speed.py                 # HARDMIX_DATA must be set
    python benchmarks/text_eval_speed.py --pooling avg --repeats 1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from hardmix.datasets.paths import resolve_data_path
from hardmix.text import evaluation as ev
from hardmix.text.encoder import SentenceEncoder

RESULTS = Path(__file__).resolve().parents[1] / "results"


class Clock:
    """Wall and process-CPU seconds of a block."""

    def __enter__(self) -> Clock:
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def whole_suite(model: str, pooling: str, batch_size: int, repeats: int) -> dict:
    """``hardmix eval text`` end to end (STS then transfer, a fresh encoder), with the time of each task;
    then each transfer task's classifiers ``repeats - 1`` more times on the cached embeddings (median
    reported)."""
    with Clock() as load:
        enc = SentenceEncoder(model, pooling=pooling, batch_size=batch_size)
    sts_d: dict = {}
    tr_d: dict = {}
    with Clock() as c_sts:
        sts = ev.evaluate_sts(enc, details=sts_d)
    with Clock() as c_tr:
        transfer = ev.evaluate_transfer(enc, details=tr_d)
    tasks: dict[str, dict] = {}
    for task, sec in sts_d["task_encode_seconds"].items():
        tasks[task] = {"encode_s": round(sec, 2)}
    suite = ev.load_transfer_suite()
    for task, res in tr_d["tasks"].items():
        runs = [res["classifier_seconds"]]
        for _ in range(repeats - 1):
            with Clock() as k:
                ev.run_transfer_task(task, suite[task], enc.encode)
            runs.append(k.wall)
        tasks[task] = {"encode_s": round(res["encode_seconds"], 2),
                       "classifier_s": round(statistics.median(runs), 2),
                       "classifier_runs_s": [round(r, 2) for r in runs],
                       "devacc": res["devacc"], "l2": res["l2"]}
    return {
        "model_load_s": round(load.wall, 2),
        "sts_s": round(c_sts.wall, 2), "sts_cpu_s": round(c_sts.cpu, 2),
        "sts_encode_s": round(sts_d["encode_seconds"], 2), "sts_sentences": sts_d["n_sentences"],
        "transfer_s": round(c_tr.wall, 2), "transfer_cpu_s": round(c_tr.cpu, 2),
        "transfer_encode_s": round(tr_d["encode_seconds"], 2), "transfer_sentences": tr_d["n_sentences"],
        "transfer_classifiers_s": round(sum(v["classifier_seconds"] for v in tr_d["tasks"].values()), 2),
        "total_s": round(load.wall + c_sts.wall + c_tr.wall, 2),
        "per_task": tasks,
        "scores": {"sts": sts, "transfer": transfer},
        "sts_subsets": sts_d["subsets"],
        "load": _load(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/bert-mini-wiki-mlm")
    p.add_argument("--pooling", default="cls")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="classifier runs per transfer task (median)")
    p.add_argument("--suite-repeats", type=int, default=1, help="whole-suite runs (median)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", default=str(RESULTS / "text_eval_speed.json"))
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = str(resolve_data_path(args.model, must_exist=True))
    result: dict = {
        "model": args.model, "pooling": args.pooling, "batch_size": args.batch_size,
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpus": os.cpu_count(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                    "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                    "load_at_start": _load()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    runs = []
    for i in range(args.suite_repeats):
        print(f"whole suite, run {i + 1}/{args.suite_repeats}:", file=sys.stderr)
        runs.append(whole_suite(model, args.pooling, args.batch_size, args.repeats))
    if runs:
        mid = sorted(runs, key=lambda r: r["total_s"])[len(runs) // 2]
        result["suite"] = {**mid, "runs_total_s": [r["total_s"] for r in runs], "n_runs": len(runs)}
    result["machine"]["load_at_end"] = _load()

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{args.model} ({args.pooling}), {result['machine']['torch_threads']} threads")
    if "suite" in result:
        s = result["suite"]
        print("| task | encode (s) | classifier (s) |\n|---|---:|---:|")
        for t, v in s["per_task"].items():
            print(f"| {t} | {v['encode_s']:.2f} | {v.get('classifier_s', 0.0):.2f} |")
        print(f"whole suite: STS {s['sts_s']:.1f}s, transfer {s['transfer_s']:.1f}s "
              f"(encoding {s['transfer_encode_s']:.1f}s), total {s['total_s']:.1f}s")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
