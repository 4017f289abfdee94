"""Quality of the text strategies at CPU scale: SimCSE, SimCSE with the symmetric loss, MixCSE and its two
ablations, identical budgets, several seeds.

Every run is ``hardmix train text`` on models/bert-mini-wiki-mlm and wiki/enwiki-100k.txt.gz (under
HARDMIX_DATA) with the papers' recipe (batch 64, max length 32, tau 0.05, [CLS] with an MLP in training,
lam 0.2), shortened to ``--steps`` optimizer steps with the schedule to match, model selection on STS-B dev
every ``--eval-steps``. The selected model is then scored on the full STS table of the text evaluation
(STS12-16, STS-B test, SICK-R test; Spearman x 100, SimCSE's "all" aggregation). The symmetric SimCSE
control has MixCSE's two-direction loss without the mixtures, so the effect of mixing is kept apart from
that of the second direction.

Results go to ``benchmarks/results/text_quality.json`` after every run (a re-run skips the runs already
there) and a table of means and standard deviations is printed.

Usage:
    python benchmarks/text_quality.py                       # 5 variants x 3 seeds, 100 steps each
    python benchmarks/text_quality.py --variants simcse mixcse --seeds 1 --steps 50
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "text"

#: variant -> (config file, overrides of the loss section)
VARIANTS: dict[str, tuple[str, dict]] = {
    "simcse": ("cpu_simcse.yaml", {}),
    "simcse_symmetric": ("cpu_simcse.yaml", {"symmetric": True}),
    "mixcse": ("cpu_mixcse.yaml", {}),
    "mixcse_single": ("cpu_mixcse_single.yaml", {}),
    "mixcse_nosg": ("cpu_mixcse_nosg.yaml", {}),
}
DIAGNOSTICS = ("loss", "pos_sim", "neg_sim", "alignment", "uniformity", "anchor_grad_norm",
               "mixcse/synthetic_sim", "mixcse/synthetic_harder_than_positive")


def _cache_corpus() -> None:
    """Tokenize the corpus once per process (every run reads the same file with the same tokenizer)."""
    from hardmix.text import task as trainer

    original = trainer.read_corpus
    cached_tok: dict = {}

    def read_corpus_by_name(path, tokenizer, max_length, chunk_lines=10_000):  # noqa: ANN001
        key = (str(path), tokenizer.name_or_path, max_length, chunk_lines)
        if key not in cached_tok:
            cached_tok[key] = original(path, tokenizer, max_length, chunk_lines)
        return cached_tok[key]

    trainer.read_corpus = read_corpus_by_name


def _config(variant: str, seed: int, args: argparse.Namespace):  # noqa: ANN202
    from hardmix.config import load_yaml
    from hardmix.text.config import build_text_config

    file, loss = VARIANTS[variant]
    data = copy.deepcopy(load_yaml(CONFIGS / file))
    data["loss"].update(loss)
    data["train"].update(max_steps=args.steps, seed=seed, lr=args.lr, save_steps=0, threads=args.threads)
    data["eval"].update(eval_steps=args.eval_steps, at_end=True)
    data["log"].update(log_steps=args.log_steps, progress=False)
    return build_text_config(data)


def _sts_table(model_dir: Path | str, pooling: str | None = None) -> dict[str, float]:
    from hardmix.text.encoder import SentenceEncoder
    from hardmix.text.evaluation import evaluate_sts

    return evaluate_sts(SentenceEncoder(model_dir, pooling=pooling, batch_size=128), show_progress=False)


def _last_diagnostics(run_dir: Path) -> dict[str, float]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [x for x in lines if "loss" in x]
    first, last = logged[0], logged[-1]
    out = {f"first/{k}": first[k] for k in DIAGNOSTICS if k in first}
    out.update({f"last/{k}": last[k] for k in DIAGNOSTICS if k in last})
    out["dev_curve"] = [(x["step"], x["stsb_dev"]) for x in lines if "stsb_dev" in x]
    return out


def _baseline(args: argparse.Namespace) -> dict:
    """The untrained encoder (bare [CLS], as the trained models are exported) on STS-B dev and the table."""
    from hardmix.paths import resolve_data_path
    from hardmix.text.encoder import SentenceEncoder
    from hardmix.text.evaluation import stsb_dev_score

    path = resolve_data_path("models/bert-mini-wiki-mlm", must_exist=True)
    enc = SentenceEncoder(path, pooling="cls_before_pooler", batch_size=128)
    return {"stsb_dev": stsb_dev_score(enc), "sts": _sts_table(path, "cls_before_pooler")}


def _summary(runs: list[dict], variants: list[str]) -> dict[str, dict]:
    out = {}
    for v in variants:
        rs = [r for r in runs if r["variant"] == v]
        if not rs:
            continue
        row = {"n": len(rs)}
        keys = ["best_dev_stsb"] + [f"sts/{k}" for k in rs[0]["sts"]]
        for key in keys:
            vals = [r["best_dev_stsb"] if key == "best_dev_stsb" else r["sts"][key[4:]] for r in rs]
            std = statistics.stdev(vals) if len(vals) > 1 else 0.0
            row[key] = {"mean": statistics.fmean(vals), "std": std}
        out[v] = row
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps of batch 64 per run")
    p.add_argument("--eval-steps", type=int, default=20)
    p.add_argument("--log-steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=None, help="default: the CPU configs' lr")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    p.add_argument("--runs-dir", default="runs/text_quality")
    p.add_argument("--out", default=str(RESULTS / "text_quality.json"))
    args = p.parse_args()
    if args.lr is None:
        from hardmix.config import load_yaml

        args.lr = float(load_yaml(CONFIGS / "cpu_mixcse.yaml")["train"]["lr"])

    import torch

    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    torch.set_num_threads(args.threads)
    _cache_corpus()
    out_path = Path(args.out)
    state = json.loads(out_path.read_text()) if out_path.is_file() else {}
    budget = {"steps": args.steps, "batch_size": 64, "eval_steps": args.eval_steps, "lr": args.lr,
              "model": "models/bert-mini-wiki-mlm", "corpus": "wiki/enwiki-100k.txt.gz",
              "threads": args.threads}
    if state.get("budget") != budget:
        state = {"budget": budget, "runs": []}
    if "baseline" not in state:
        state["baseline"] = _baseline(args)
    done = {(r["variant"], r["seed"]) for r in state["runs"]}
    for seed in range(1, args.seeds + 1):
        for variant in args.variants:
            if (variant, seed) in done:
                continue
            run_dir = Path(args.runs_dir) / f"{variant}_seed{seed}"
            if run_dir.exists():
                import shutil

                shutil.rmtree(run_dir)
            cfg = _config(variant, seed, args)
            t0 = time.perf_counter()
            res = run_training(TextTask, cfg, run_dir)
            seconds = time.perf_counter() - t0
            sts = _sts_table(run_dir / "best")
            run = {"variant": variant, "seed": seed, "best_dev_stsb": res["best_score"],
                   "best_step": res["best_step"], "sts": sts, "seconds": round(seconds, 1),
                   "strategies": cfg.loss.strategies, "symmetric": res["task_info"]["symmetric"],
                   **_last_diagnostics(run_dir)}
            state["runs"].append(run)
            state["summary"] = _summary(state["runs"], list(VARIANTS))
            state["machine"] = {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                                "torch": torch.__version__}
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps(state, indent=2) + "\n")
            print(f"{variant} seed {seed}: best dev {res['best_score']:.2f} at step {res['best_step']}, "
                  f"STS avg {sts['avg']:.2f} ({seconds:.0f}s)", flush=True)
    print_table(state)
    return 0


def print_table(state: dict) -> None:
    summary = state.get("summary", {})
    budget = state["budget"]
    print(f"\nbert-mini-wiki-mlm on enwiki-100k, {budget['steps']} steps of batch 64, lr {budget['lr']}, "
          f"STS-B dev every {budget['eval_steps']} steps; mean +- std over seeds")
    tasks = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "avg"]
    print(f"{'variant':<18} {'n':>2} {'dev':>12} " + " ".join(f"{t:>12}" for t in tasks))
    base = state.get("baseline")
    if base:
        print(f"{'untrained [CLS]':<18} {'':>2} {base['stsb_dev']:>12.2f} "
              + " ".join(f"{base['sts'][t]:>12.2f}" for t in tasks))
    for v, row in summary.items():
        cells = [row["best_dev_stsb"]] + [row[f"sts/{t}"] for t in tasks]
        print(f"{v:<18} {row['n']:>2} " + " ".join(f"{c['mean']:>6.2f}+-{c['std']:<4.2f}" for c in cells))


if __name__ == "__main__":
    sys.exit(main())
