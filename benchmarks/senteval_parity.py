"""Official SentEval against ``hardmix eval text`` on the same embeddings: both tables and both times.

For one model and each pooling given, the script

1. encodes every distinct transfer sentence once with hardmix's encoder (the embeddings both sides use);
2. runs the official SentEval (a checkout the user gives with ``--senteval``; it is not a dependency of
   hardmix) on the transfer tasks with the papers' settings (SimCSE's and MixCSE's ``evaluation.py``:
   ``usepytorch``, ``kfold`` 10, classifier ``nhid`` 0, Adam, batch 64, ``tenacity`` 5, ``epoch_size`` 4,
   seed 1111), its batcher looking the embeddings up, on the CPU; each task is timed (wall and process CPU
   seconds, the load average before and after). SentEval's own encoding is not part of its time here, so
   its times are a lower bound on what SentEval costs with a model;
3. runs the whole ``hardmix eval text --tasks transfer`` command (a fresh process: model loading, data
   loading, encoding and every classifier), timed the same way.

SentEval needs three compatibility shims on Python 3.11 and a machine without CUDA, applied in this process
only (the checkout is not modified): ``inspect.getargspec`` (removed in Python 3.11) is aliased to
``getfullargspec``; ``Tensor.cuda`` and ``Module.cuda`` return their object unchanged; the ``torch.device``
that its classifier module asks for is the CPU. SentEval reads its data from ``<task_path>/downstream``: a
temporary folder with a ``downstream`` link to the shared SentEval data is made.

SentEval is slow on a CPU (hours for the 7 tasks): results are written after every task, and ``--resume``
keeps the tasks already in ``--out``. ``--senteval-tasks`` picks the tasks SentEval runs (default: all).

Usage:
    python benchmarks/senteval_parity.py --senteval /path/to/SentEval --pooling cls avg \
        --out results/senteval_parity.json          # HARDMIX_DATA must be set
    python benchmarks/senteval_parity.py --senteval /path/to/SentEval --senteval-tasks TREC,MRPC,SST \
        --skip-hardmix --resume
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from hardmix.datasets.paths import resolve_data_path
from hardmix.text import evaluation as ev
from hardmix.text import senteval_data as data
from hardmix.utils.machine import cpu_model

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: hardmix's task names -> SentEval's.
SENTEVAL_NAMES = {"MR": "MR", "CR": "CR", "SUBJ": "SUBJ", "MPQA": "MPQA", "SST": "SST2", "TREC": "TREC",
                  "MRPC": "MRPC"}
#: SimCSE's and MixCSE's SentEval settings for the transfer tasks ("test" mode of their evaluation.py).
SENTEVAL_PARAMS = {"usepytorch": True, "kfold": 10, "seed": 1111,
                   "classifier": {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5,
                                  "epoch_size": 4}}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Clock:
    """Wall seconds, process CPU seconds (this process and its finished children) and load of a block."""

    def __enter__(self) -> Clock:
        self.load_before = _load()
        self.w0, self.c0 = time.perf_counter(), self._cpu()
        return self

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def __exit__(self, *exc: object) -> None:
        self.wall = round(time.perf_counter() - self.w0, 2)
        self.cpu = round(self._cpu() - self.c0, 2)
        self.load_after = _load()

    def record(self) -> dict:
        """The block's timing as a JSON-able dict, with the processor it ran on."""
        return {"wall_s": self.wall, "cpu_s": self.cpu, "load_before": self.load_before,
                "load_after": self.load_after, "cpu": cpu_model()}


# ------------------------------------------------------------------------------------ embeddings
def transfer_embeddings(model: str, pooling: str, batch_size: int,
                        cache: Path | None) -> dict[str, np.ndarray]:
    """Every distinct transfer sentence (as hardmix's loaders normalise it) -> its (d,) float32 embedding,
    encoded in the order ``hardmix eval text`` encodes them; kept in ``cache`` (an .npz) when given."""
    from hardmix.text.encoder import SentenceEncoder

    suite = ev.load_transfer_suite()
    sentences = list(dict.fromkeys(s for task, d in suite.items() for s in ev._task_sentences(task, d)))
    if cache is not None and cache.is_file():
        table = np.load(cache)["embeddings"]
        if len(table) == len(sentences):
            return dict(zip(sentences, table))
    enc = SentenceEncoder(model, pooling=pooling, batch_size=batch_size)
    table = enc.encode(sentences, show_progress=False)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, embeddings=table)
    return dict(zip(sentences, table))


# ------------------------------------------------------------------------------------ official SentEval
class _TorchOnCPU(types.ModuleType):
    """``torch`` as SentEval's classifier module sees it: torch, except that every device is the CPU."""

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    @staticmethod
    def device(*args: object, **kwargs: object) -> torch.device:  # noqa: ARG004
        return torch.device("cpu")


@contextlib.contextmanager
def senteval_on_cpu(senteval_path: str) -> Iterator[types.ModuleType]:
    """Import SentEval from ``senteval_path`` with the compatibility shims (see the module docstring)."""
    sys.path.insert(0, str(senteval_path))
    if not hasattr(inspect, "getargspec"):
        inspect.getargspec = inspect.getfullargspec  # type: ignore[attr-defined]
    cuda_t, cuda_m = torch.Tensor.cuda, torch.nn.Module.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    try:
        import senteval
        import senteval.tools.classifier as clf

        clf.torch = _TorchOnCPU("torch")
        yield senteval
    finally:
        torch.Tensor.cuda, torch.nn.Module.cuda = cuda_t, cuda_m  # type: ignore[method-assign]
        sys.path.remove(str(senteval_path))


def run_senteval(senteval_path: str, table: dict[str, np.ndarray], tasks: list[str], done: dict,
                 save: callable) -> dict:
    """Official SentEval on ``tasks`` with a batcher that looks ``table`` up; ``done`` holds results of tasks
    already run (kept), ``save`` is called after every task with the results so far."""
    results = dict(done)
    misses: list[str] = []

    def batcher(params: object, batch: list[list[str]]) -> np.ndarray:  # noqa: ARG001
        rows = []
        for tokens in batch:
            words = [w.decode("utf-8") if isinstance(w, bytes) else w for w in tokens]
            s = " ".join(words)
            if s not in table:
                misses.append(s)
                raise KeyError(f"SentEval asked for a sentence hardmix's loaders do not produce: {s!r}")
            rows.append(table[s])
        return np.stack(rows)

    with senteval_on_cpu(senteval_path) as senteval, tempfile.TemporaryDirectory() as tmp:
        os.symlink(data.senteval_dir(), Path(tmp) / "downstream")
        params = {"task_path": tmp, **SENTEVAL_PARAMS}
        se = senteval.engine.SE(params, batcher)
        for task in tasks:
            if task in results:
                continue
            print(f"  SentEval {task} ...", file=sys.stderr, flush=True)
            with Clock() as c:
                out = se.eval(SENTEVAL_NAMES[task])
            results[task] = {"acc": float(out["acc"]), "devacc": float(out["devacc"]),
                             **({"f1": float(out["f1"])} if "f1" in out else {}), **c.record()}
            print(f"  SentEval {task}: {out['acc']} in {c.wall:.0f}s (cpu {c.cpu:.0f}s, load "
                  f"{c.load_before[0]} -> {c.load_after[0]})", file=sys.stderr, flush=True)
            save(results)
    return results


# ------------------------------------------------------------------------------------ hardmix
def run_hardmix_on_table(table: dict[str, np.ndarray], tasks: list[str]) -> dict:
    """hardmix's SentEval protocol on the same embedding table as SentEval, task by task, timed (classifiers
    only); each task also records the Adam steps SentEval's sequential run of it makes."""
    suite = ev.load_transfer_suite(tasks)

    def embed(batch: list[str]) -> np.ndarray:
        return np.stack([table[s] for s in batch])

    out = {}
    for task in suite:
        with Clock() as c:
            res = ev.run_transfer_task(task, suite[task], embed)
        res.pop("pred", None)
        out[task] = {**res, **c.record()}
        print(f"  hardmix {task}: {res['acc']} in {c.wall:.1f}s", file=sys.stderr, flush=True)
    return out


def run_hardmix(model: str, pooling: str, threads: int | None) -> dict:
    """The whole ``hardmix eval text --tasks transfer`` command in a fresh process, timed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        cmd = [sys.executable, "-m", "hardmix", "eval", "text", model, "--tasks", "transfer",
               "--pooling", pooling, "--json", str(out)]
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        with Clock() as c:
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        scores = json.loads(out.read_text())["transfer"]
    return {"scores": scores, "command": " ".join(cmd[1:]), **c.record()}


# ------------------------------------------------------------------------------------ report
def _mean_load(record: dict) -> float:
    """The mean of a timed record's 1-minute load average before and after it."""
    return (record["load_before"][0] + record["load_after"][0]) / 2


def _comparable(senteval: dict, command: dict) -> bool:
    """Whether a SentEval task ran under the whole command's conditions: a mean load within 1 of it, on
    the same processor where both records name theirs."""
    same_cpu = senteval.get("cpu", command.get("cpu")) == command.get("cpu", senteval.get("cpu"))
    return same_cpu and abs(_mean_load(senteval) - _mean_load(command)) <= 1.0


def _suite_estimate(se: dict, same: dict, near: list[str], key: str) -> tuple[float, float]:
    """SentEval's seconds (``key``: ``wall_s`` or ``cpu_s``) per Adam step on the tasks ``near``, and the
    suite's total: those tasks as measured, every other task at that rate times its Adam steps."""
    rate = sum(se[t][key] for t in near) / sum(same[t]["senteval_steps"] for t in near)
    return rate, sum(se[t][key] if t in near else rate * same[t]["senteval_steps"] for t in same)


def report(paths: list[str], same_load_tasks: list[str] | None = None) -> str:
    """Markdown tables of one or more result files (one per pooling or one with several): scores side by
    side, and times, SentEval's unmeasured tasks estimated from its measured seconds per Adam step."""
    lines: list[str] = []
    tasks = list(SENTEVAL_NAMES)
    runs: dict[str, dict] = {}  # pooling -> its parts, merged over the files (SentEval's and hardmix's)
    for path in paths:
        for pooling, run in json.loads(Path(path).read_text())["runs"].items():
            runs.setdefault(pooling, {}).update(run)
    for pooling, run in runs.items():
        se = run.get("senteval", {})
        same = run.get("hardmix_same_embeddings", {}).get("senteval", {})
        cli = run.get("hardmix", {})
        lines += [f"### {pooling}", "", "| | " + " | ".join(tasks) + " | Avg. |",
                  "|---|" + "---:|" * (len(tasks) + 1)]

        def row(name: str, scores: dict) -> str:
            cells = [f"{scores[t]:.2f}" if t in scores else "-" for t in tasks]
            avg = f"{np.mean([scores[t] for t in tasks]):.2f}" if all(t in scores for t in tasks) else "-"
            return f"| {name} | " + " | ".join(cells) + f" | {avg} |"

        se_acc = {t: v["acc"] for t, v in se.items()}
        hm_acc = {t: v["acc"] for t, v in same.items()}
        lines.append(row("official SentEval", se_acc))
        lines.append(row("hardmix `senteval`", hm_acc))
        diff = {t: hm_acc[t] - se_acc[t] for t in tasks if t in se_acc and t in hm_acc}
        avg_diff = (f"{np.mean([hm_acc[t] - se_acc[t] for t in tasks]):+.2f}" if len(diff) == len(tasks)
                    else "-")
        cells = [f"{diff[t]:+.2f}" if t in diff else "-" for t in tasks]
        lines.append("| difference | " + " | ".join(cells) + f" | {avg_diff} |")
        lines.append("")
        # times
        measured = [t for t in tasks if t in se and t in same]
        if measured:
            steps = sum(same[t]["senteval_steps"] for t in measured)
            per_wall = sum(se[t]["wall_s"] for t in measured) / steps
            per_cpu = sum(se[t]["cpu_s"] for t in measured) / steps
            lines += ["| task | SentEval wall (s) | SentEval CPU (s) | SentEval Adam steps | "
                      "hardmix classifiers wall (s) | CPU (s) | load (1 min) |",
                      "|---|---:|---:|---:|---:|---:|---|"]
            tot = {"se_w": 0.0, "se_c": 0.0, "hm_w": 0.0, "hm_c": 0.0}
            for t in tasks:
                h = same.get(t)
                if h is None:
                    continue
                if t in se:
                    w, c, mark = se[t]["wall_s"], se[t]["cpu_s"], ""
                    load = f"{se[t]['load_before'][0]} -> {se[t]['load_after'][0]}"
                else:
                    w, c, mark = per_wall * h["senteval_steps"], per_cpu * h["senteval_steps"], " (est.)"
                    load = "-"
                tot["se_w"] += w
                tot["se_c"] += c
                tot["hm_w"] += h["wall_s"]
                tot["hm_c"] += h["cpu_s"]
                lines.append(f"| {t} | {w:.0f}{mark} | {c:.0f}{mark} | {h['senteval_steps']:,} | "
                             f"{h['wall_s']:.1f} | {h['cpu_s']:.1f} | {load} |")
            lines.append(f"| all 7 | {tot['se_w']:.0f} | {tot['se_c']:.0f} | | {tot['hm_w']:.1f} | "
                         f"{tot['hm_c']:.1f} | |")
            lines.append("")
            lines.append(f"SentEval measured on {', '.join(measured)}: {1000 * per_wall:.2f} ms wall, "
                         f"{1000 * per_cpu:.2f} ms CPU per Adam step (validation checks included).")
            if (r := cli.get("senteval")) is not None:
                lines.append("- whole `hardmix eval text --tasks transfer`: "
                             f"{r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU (load "
                             f"{r['load_before'][0]} -> {r['load_after'][0]}); SentEval's classifiers "
                             f"alone / this: {tot['se_w'] / r['wall_s']:.1f}x wall, "
                             f"{tot['se_c'] / r['cpu_s']:.1f}x CPU")
                # Wall time depends on the load: SentEval under the command's own conditions, from the
                # tasks measured there (or the tasks given, e.g. those measured on the command's machine
                # when older records do not name their processor), the others estimated from their
                # Adam steps.
                near = same_load_tasks or [t for t in measured if _comparable(se[t], r)]
                near = [t for t in near if t in measured]
                if near:
                    rate, est = _suite_estimate(se, same, near, "wall_s")
                    cpu_rate, est_cpu = _suite_estimate(se, same, near, "cpu_s")
                    chosen = "as given" if same_load_tasks else "at loads within 1 of it"
                    lines.append(f"  - at the same load ({_mean_load(r):.1f}, the mean of the 1-minute load "
                                 f"before and after): SentEval measured on {', '.join(near)} ({chosen}; "
                                 f"{1000 * rate:.2f} ms wall, {1000 * cpu_rate:.2f} ms CPU per Adam step), "
                                 f"the other tasks estimated from them: {est:.0f} s wall and {est_cpu:.0f} "
                                 f"CPU-seconds in all, {est / r['wall_s']:.1f}x wall and "
                                 f"{est_cpu / r['cpu_s']:.1f}x CPU")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--senteval", default=None, help="path of an official SentEval checkout")
    p.add_argument("--report", nargs="+", default=None, metavar="JSON",
                   help="print the Markdown tables of these result files and exit")
    p.add_argument("--same-load-tasks", default="",
                   help="with --report: the SentEval tasks whose time per Adam step stands for the whole "
                   "command's conditions (default: those measured at a load within 1 of it, same processor)")
    p.add_argument("--model", default="models/bert-mini-wiki-mlm")
    p.add_argument("--pooling", nargs="+", default=["cls", "avg"])
    p.add_argument("--senteval-tasks", default=",".join(ev.TRANSFER_TASKS),
                   help="comma list of the tasks SentEval runs (default: all 7)")
    p.add_argument("--skip-hardmix", action="store_true")
    p.add_argument("--skip-senteval", action="store_true")
    p.add_argument("--skip-same-embeddings", action="store_true",
                   help="time only the whole hardmix command (keep the per-task table already in --out)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both sides (default 1)")
    p.add_argument("--resume", action="store_true", help="keep the results already in --out")
    p.add_argument("--cache", default=None,
                   help="folder that keeps the embedding tables between runs (default: none)")
    p.add_argument("--out", default=str(RESULTS / "senteval_parity.json"))
    args = p.parse_args(argv)
    if args.report:
        print(report(args.report, [t.strip() for t in args.same_load_tasks.split(",") if t.strip()] or None))
        return 0
    if not args.skip_senteval and not (Path(args.senteval or "") / "senteval" / "engine.py").is_file():
        p.error(f"--senteval: {args.senteval} is not a SentEval checkout (no senteval/engine.py)")
    tasks = [t.strip() for t in args.senteval_tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in SENTEVAL_NAMES]
    if bad:
        p.error(f"--senteval-tasks: unknown task(s) {bad}; expected some of {list(SENTEVAL_NAMES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    try:
        model = str(resolve_data_path(args.model, must_exist=True))
    except FileNotFoundError as e:
        p.error(f"--model: {e}")
    out = Path(args.out)
    result: dict = json.loads(out.read_text()) if args.resume and out.is_file() else {}
    result.setdefault("runs", {})
    result.update({
        "model": args.model, "senteval_params": SENTEVAL_PARAMS,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "numpy": np.__version__, "torch_threads": torch.get_num_threads(),
                    "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
    })

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")

    for pooling in args.pooling:
        run = result["runs"].setdefault(pooling, {})
        print(f"{pooling}: the transfer sentences' embeddings", file=sys.stderr, flush=True)
        cache = Path(args.cache) / f"{Path(model).name}_{pooling}.npz" if args.cache else None
        with Clock() as c:
            table = transfer_embeddings(model, pooling, args.batch_size, cache)
        run.setdefault("embeddings", {"n_sentences": len(table), **c.record()})
        if not args.skip_senteval:

            def save_senteval(res: dict, run: dict = run) -> None:
                run["senteval"] = res
                run["senteval_date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
                save()

            run_senteval(args.senteval, table, tasks, run.get("senteval", {}), save_senteval)
        if not args.skip_hardmix:
            if not args.skip_same_embeddings:
                print(f"{pooling}: hardmix on the same embeddings", file=sys.stderr, flush=True)
                run["hardmix_same_embeddings"] = {
                    "senteval": run_hardmix_on_table(table, list(SENTEVAL_NAMES)),
                    "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
                save()
            print(f"{pooling}: hardmix eval text", file=sys.stderr, flush=True)
            run.setdefault("hardmix", {})["senteval"] = {
                **run_hardmix(model, pooling, args.threads), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
            save()
    save()
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
