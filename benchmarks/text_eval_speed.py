"""Speed of ``hardmix eval text``: time per task and for the whole suite, and SentEval's cost estimated.

Two measurements, on one model (default: bert-mini-wiki-mlm with [CLS] pooling):

1. **Whole suite, per task.** ``evaluate_sts`` then ``evaluate_transfer`` end to end with a fresh encoder
   (data loading, encoding every distinct sentence once, all classifiers): what ``hardmix eval text``
   costs. The evaluation records the encoding time of each task (its sentences not already encoded by an
   earlier task, which is rare) and the classifier time of each transfer task; each classifier is run
   ``--repeats`` times in all on the cached embeddings (median reported). ``--suite-repeats`` end-to-end
   runs (median).
   ``--protocol`` picks the transfer protocol (``senteval``, the default of ``hardmix eval text``, or
   ``converged``; the numbers in ``docs/performance.md``'s "Text evaluation" section are ``converged``'s,
   measured before ``senteval`` existed). Official SentEval itself, measured side by side on the same
   embeddings, is ``benchmarks/senteval_parity.py``.
2. **SentEval's defaults, estimated.** SentEval with the papers' settings (``usepytorch``, ``kfold`` 10,
   classifier ``nhid`` 0, Adam, batch 64, ``epoch_size`` 4, ``tenacity`` 5, ``max_epoch`` 200) trains every
   model one at a time with mini-batch Adam and early stopping. A re-implementation of that training loop
   (written from SentEval's description, not its code) is timed on a few of MR's inner-fold fits (one per
   L2 value); the time per mini-batch step and the mean number of epochs are measured, and the total is
   extrapolated to SentEval's fit count per task (MR/CR/SUBJ/MPQA: 10 x (4 x 10 + 1) = 410 fits; SST: 4 + 1;
   TREC, MRPC: 4 x 10 + 1). Encoding is not included in that estimate (SentEval encodes each task
   separately, with no sharing: about the same cost as ours). It is an estimate; the timed fits are
   measured.

Times are wall-clock seconds; process CPU seconds and the load average are recorded too, since the
machine may be shared.

Usage:
    python benchmarks/text_eval_speed.py                 # HARDMIX_DATA must be set
    python benchmarks/text_eval_speed.py --pooling avg --repeats 1 --skip-senteval --threads 1
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from hardmix.paths import resolve_data_path
from hardmix.text import evaluation as ev
from hardmix.text.encoder import SentenceEncoder
from hardmix.text.transfer import SENTEVAL_L2, fit_logreg, stratified_kfold

RESULTS = Path(__file__).resolve().parent / "results"


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


def whole_suite(model: str, pooling: str, batch_size: int, repeats: int, protocol: str = "senteval") -> dict:
    """``hardmix eval text`` end to end (STS then transfer with ``protocol``, a fresh encoder), with the time
    of each task; then each transfer classifier ``repeats - 1`` more times on the cached embeddings (median
    reported)."""
    with Clock() as load:
        enc = SentenceEncoder(model, pooling=pooling, batch_size=batch_size)
    sts_d: dict = {}
    tr_d: dict = {}
    with Clock() as c_sts:
        sts = ev.evaluate_sts(enc, details=sts_d)
    with Clock() as c_tr:
        transfer = ev.evaluate_transfer(enc, details=tr_d, protocol=protocol)
    tasks: dict[str, dict] = {}
    for task, sec in sts_d["task_encode_seconds"].items():
        tasks[task] = {"encode_s": round(sec, 2)}
    suite = ev.load_transfer_suite()
    for task, res in tr_d["tasks"].items():
        runs = [res["classifier_seconds"]]
        for _ in range(repeats - 1):
            with Clock() as k:
                ev.run_transfer_task(task, suite[task], enc.encode, protocol=protocol)
            runs.append(k.wall)
        tasks[task] = {"encode_s": round(res["encode_seconds"], 2),
                       "classifier_s": round(statistics.median(runs), 2),
                       "classifier_runs_s": [round(r, 2) for r in runs],
                       "devacc": res["devacc"], "l2": res["l2"]}
    mrpc_senteval = ev.run_transfer_task("MRPC", suite["MRPC"], enc.encode, mrpc_features="senteval",
                                         protocol=protocol)
    return {
        "model_load_s": round(load.wall, 2),
        "sts_s": round(c_sts.wall, 2), "sts_cpu_s": round(c_sts.cpu, 2),
        "sts_encode_s": round(sts_d["encode_seconds"], 2), "sts_sentences": sts_d["n_sentences"],
        "transfer_s": round(c_tr.wall, 2), "transfer_cpu_s": round(c_tr.cpu, 2),
        "transfer_encode_s": round(tr_d["encode_seconds"], 2), "transfer_sentences": tr_d["n_sentences"],
        "transfer_classifiers_s": round(sum(v["classifier_seconds"] for v in tr_d["tasks"].values()), 2),
        "total_s": round(load.wall + c_sts.wall + c_tr.wall, 2),
        "per_task": tasks,
        "scores": {"sts": sts, "transfer": transfer}, "protocol": protocol,
        "mrpc_acc_senteval_features": mrpc_senteval["acc"],
        "sts_subsets": sts_d["subsets"],
        "load": _load(),
    }


# ----------------------------------------------------------------------- SentEval-style training, timed
def senteval_style_fit(Xtr: np.ndarray, ytr: np.ndarray, Xva: np.ndarray, yva: np.ndarray, l2: float,
                       n_classes: int, seed: int = 1111, batch: int = 64, epoch_size: int = 4,
                       tenacity: int = 5, max_epoch: int = 200) -> dict:
    """One model trained as SentEval's PyTorch logistic regression is (Adam with weight decay ``l2``,
    mini-batches of 64, validation accuracy checked every ``epoch_size`` passes, the best model kept, stop
    once validation has failed to improve more than ``tenacity`` times in all). Returns its validation
    accuracy, epochs, steps and seconds."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    Xt, yt = torch.as_tensor(Xtr, dtype=torch.float32), torch.as_tensor(ytr)
    Xv, yv = torch.as_tensor(Xva, dtype=torch.float32), torch.as_tensor(yva)
    model = torch.nn.Linear(Xt.shape[1], n_classes)
    opt = torch.optim.Adam(model.parameters(), weight_decay=l2)
    best, best_state, fails, epochs, steps = -1.0, None, 0, 0, 0
    t0 = time.perf_counter()
    while epochs <= max_epoch:
        for _ in range(epoch_size):
            perm = torch.as_tensor(rng.permutation(len(Xt)))
            for i in range(0, len(Xt), batch):
                idx = perm[i:i + batch]
                loss = torch.nn.functional.cross_entropy(model(Xt[idx]), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
        epochs += epoch_size
        with torch.no_grad():
            acc = float((model(Xv).argmax(1) == yv).float().mean())
        if acc > best:
            best, best_state = acc, copy.deepcopy(model.state_dict())
        else:
            if fails >= tenacity:
                break
            fails += 1
    model.load_state_dict(best_state)
    return {"val_acc": best, "epochs": epochs, "steps": steps, "seconds": time.perf_counter() - t0}


def senteval_estimate(model: str, pooling: str, batch_size: int) -> dict:
    """Time SentEval-style fits on MR's first inner fold (one per L2 value), compare them with our
    converged models on the same fold, and extrapolate SentEval's classifier time for the suite."""
    enc = SentenceEncoder(model, pooling=pooling, batch_size=batch_size)
    suite = ev.load_transfer_suite()
    mr = suite["MR"]
    X, y = enc.encode(mr.sentences, show_progress=False), mr.labels
    outer = stratified_kfold(y, 10, 1111)
    tr = np.flatnonzero(outer != 0)
    inner = stratified_kfold(y[tr], 10, 1111)
    a, b = tr[inner != 0], tr[inner == 0]
    fits = []
    with Clock() as c_ours:
        ours = fit_logreg(X[a], y[a], np.ones((len(SENTEVAL_L2), len(a)), dtype=bool), list(SENTEVAL_L2), 2)
    ours_acc = (ours.predict(X[b]) == y[b][None]).mean(1)
    for r, l2 in enumerate(SENTEVAL_L2):
        f = senteval_style_fit(X[a], y[a], X[b], y[b], l2, 2)
        f.update(l2=l2, ours_val_acc=float(ours_acc[r]))
        fits.append(f)
        print(f"  SentEval-style fit l2={l2:g}: {f['epochs']} epochs, {f['steps']} steps, "
              f"{f['seconds']:.1f}s, "
              f"val acc {100 * f['val_acc']:.2f} (ours, converged: {100 * ours_acc[r]:.2f})", file=sys.stderr)
    step_s = sum(f["seconds"] for f in fits) / sum(f["steps"] for f in fits)
    mean_epochs = float(np.mean([f["epochs"] for f in fits]))

    def fit_seconds(n_train: int) -> float:
        return np.ceil(n_train / 64) * mean_epochs * step_s

    n = {t: len(d) for t, d in suite.items() if t in ("MR", "CR", "SUBJ", "MPQA")}
    est: dict[str, float] = {}
    for t, size in n.items():  # 10 outer folds x (4 l2 x 10 inner fits on 81% + one final fit on 90% x 95%)
        est[t] = 10 * (40 * fit_seconds(int(0.81 * size)) + fit_seconds(int(0.855 * size)))
    est["SST"] = 5 * fit_seconds(len(suite["SST"]["train"]))
    for t in ("TREC", "MRPC"):  # 4 l2 x 10 folds on 90% of train + one final fit on 95% of train
        size = len(suite[t]["train"])
        est[t] = 40 * fit_seconds(int(0.9 * size)) + fit_seconds(int(0.95 * size))
    return {
        "timed_fits": fits, "seconds_per_step": step_s, "mean_epochs": mean_epochs,
        "ours_same_4_models_s": round(c_ours.wall, 3),
        "estimated_classifier_s": {t: round(v, 1) for t, v in est.items()},
        "estimated_total_classifier_s": round(sum(est.values()), 1),
        "note": "extrapolated from the timed fits: time per Adam step x steps per fit x SentEval's fit "
                "count; "
                "the step cost of a linear model is mostly per-call overhead, so it is taken as the same for "
                "every task (MRPC's 512-d and TREC's 6 classes are assumed no slower)",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/bert-mini-wiki-mlm")
    p.add_argument("--pooling", default="cls")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="classifier runs per transfer task (median)")
    p.add_argument("--suite-repeats", type=int, default=1, help="whole-suite runs (median)")
    p.add_argument("--skip-senteval", action="store_true")
    p.add_argument("--protocol", default="senteval", choices=["senteval", "converged"],
                   help="transfer protocol of the whole-suite run")
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
        runs.append(whole_suite(model, args.pooling, args.batch_size, args.repeats, args.protocol))
    if runs:
        mid = sorted(runs, key=lambda r: r["total_s"])[len(runs) // 2]
        result["suite"] = {**mid, "runs_total_s": [r["total_s"] for r in runs], "n_runs": len(runs)}
    if not args.skip_senteval:
        print("SentEval estimate:", file=sys.stderr)
        result["senteval_estimate"] = senteval_estimate(model, args.pooling, args.batch_size)
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
    if "senteval_estimate" in result:
        e = result["senteval_estimate"]
        print(f"SentEval-style classifiers (estimated): {e['estimated_total_classifier_s']:.0f}s")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
