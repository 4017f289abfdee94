"""Two "nodes" on loopback: ``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d`` runs the one
``hardmix train`` command of both nodes with the same ``--output`` (a shared file system, as on a cluster).

- text: the losses step after step and the final STS-B dev score equal one process over the global batch
  (dropout off; the negatives are the global batch, gathered with gradient), through a SIGTERM to the node
  that does not write (the whole job checkpoints) and a ``--resume`` of both nodes;
- vision: the losses, the weights, MoCo's queue (gathered from both nodes) and the BatchNorm
  statistics equal one process over the global batch with ``model.bn_splits: 2`` (fixed augmentations:
  they are drawn per rank): its BatchNorm groups are the ranks' slices, the keys are shuffled with the
  same permutation, and the ranks' running statistics are averaged after each step. The weights and the
  final scores agree to within what a ReLU input at float rounding's distance from 0 moves (see the test).
Only global rank 0 writes: one metrics line per step, one lock, one checkpoint.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hardmix.training import read_results


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _torchrun(nodes_args: list[list[str]], train: list[str], log: Path) -> list[subprocess.Popen]:
    """Start one torchrun agent per entry of ``nodes_args`` (its node flags), each running ``train``."""
    procs = []
    for i, flags in enumerate(nodes_args):
        cmd = [sys.executable, "-m", "torch.distributed.run", *flags, "--max-restarts", "0",
               "-m", "hardmix", "train", *train]
        out = open(log.with_suffix(f".node{i}.log"), "a")  # noqa: SIM115
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env()))
    return procs


def _two_nodes(port: int) -> list[list[str]]:
    return [["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(r), "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"hardmix-{port}"] for r in (0, 1)]


def _wait(procs: list[subprocess.Popen], timeout: float = 600) -> list[int]:
    return [p.wait(timeout=timeout) for p in procs]


def _logs(log: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(log.parent.glob(log.stem + ".node*.log")))


def _losses(run: Path) -> dict[int, float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [x["step"] for x in lines if "loss" in x]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"  # one writer
    return {x["step"]: x["loss"] for x in lines if "loss" in x}


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_text_on_two_nodes_equals_one_process_through_a_sigterm_and_resume(
        tmp_path, tiny_text_config, one_torch_thread):
    from hardmix.text.config import build_text_config
    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    cfg = copy.deepcopy(tiny_text_config)
    cfg["model"]["dropout"] = 0.0
    cfg["loss"]["strategies"] = [{"name": "mixcse", "lam": 0.2}]
    # lr 1e-5: Adam turns float noise (the ranks pad their slices, not the global batch) in coordinates
    # whose gradient is ~0 into lr-sized steps; at 1e-3 that grows to 1e-3 of the loss within 10 steps.
    cfg["train"].update(max_steps=24, batch_size=12, threads=1, save_steps=0, lr=1e-5)
    cfg["eval"].update(at_end=True)
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(cfg))
    out, log = tmp_path / "two-nodes", tmp_path / "text"
    train = ["text", str(tmp_path / "text.yaml"), "--output", str(out)]
    procs = _torchrun(_two_nodes(_free_port()), train, log)
    # Once a few steps are logged, SIGTERM the training process of the node that does not write (global
    # rank 1: not the lock's holder): both ranks stop at the end of the step and rank 0 checkpoints.
    t0 = time.time()
    while not ((out / "metrics.jsonl").is_file() and len(_losses(out)) >= 2):
        assert all(p.poll() is None for p in procs), _logs(log)
        assert time.time() - t0 < 600, _logs(log)
        time.sleep(0.1)
    writer = json.loads((out / ".lock").read_text())["pid"]
    workers = [w for p in procs for w in _children(p.pid)]
    assert writer in workers and len(workers) == 2
    os.kill(next(w for w in workers if w != writer), signal.SIGTERM)
    codes = _wait(procs)
    assert any(c != 0 for c in codes), _logs(log)
    stopped = read_results(out)
    assert stopped["interrupted"] == "SIGTERM" and not stopped["finished"] and stopped["world_size"] == 2
    assert 2 <= stopped["steps"] < 24 and (out / "checkpoint.pt").is_file() and not (out / ".lock").exists()
    # Both nodes run the same command again with --resume, on a fresh rendezvous.
    assert _wait(_torchrun(_two_nodes(_free_port()), [*train, "--resume"], log)) == [0, 0], _logs(log)
    assert f"resumed {out} at step {stopped['steps']}/24" in _logs(log)
    two = read_results(out)
    assert two["finished"] and two["steps"] == 24 and two["world_size"] == 2

    one = run_training(TextTask, build_text_config(cfg), tmp_path / "one")
    single, multi = _losses(tmp_path / "one"), _losses(out)
    assert sorted(multi) == sorted(single) == list(range(1, 25))
    assert [multi[s] for s in sorted(multi)] == pytest.approx([single[s] for s in sorted(single)], rel=1e-5)
    assert two["final_scores"]["stsb_dev"] == pytest.approx(one["final_scores"]["stsb_dev"], abs=0.01)


def test_vision_on_two_nodes_equals_one_process_on_the_global_batch(tmp_path, tiny_vision_config,
                                                                   one_torch_thread):
    import torch

    from hardmix.config.loader import build_config
    from hardmix.training import run_training
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.task import VisionTask

    # Fixed augmentations (each view is the whole image); MixCSE draws nothing, so every difference
    # between the runs would come from how the work is split: the global batch (rank k trains rows
    # 16k..16k+15), the keys' shuffle across ranks, the gathered queue and the BatchNorm statistics.
    fixed = {"crop_scale": [1.0, 1.0], "crop_ratio": [1.0, 1.0], "jitter_prob": 0.0, "grayscale_prob": 0.0,
             "blur_prob": 0.0, "flip_prob": 0.0}
    cfg = tiny_vision_config(
        loss={"strategies": [{"name": "mixcse", "lam": 0.2}], "queue_size": 96},
        train={"epochs": 1, "batch_size": 32, "save_steps": 0, "threads": 1},
        data={"max_samples": 128, "val_samples": 20, "num_workers": 0},
        eval={"at_end": True, "knn_train_samples": 64, "knn_test_samples": 40, "linear_epochs": 5},
        augment=fixed,
        model={"bn_splits": 2},  # one process: the BatchNorm groups are the two ranks' slices
    )
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump(cfg))
    out, log = tmp_path / "two-nodes", tmp_path / "vision"
    codes = _wait(_torchrun(_two_nodes(_free_port()), ["vision", str(tmp_path / "vision.yaml"), "--output",
                                                       str(out)], log))
    assert codes == [0, 0], _logs(log)
    two = read_results(out)
    one = run_training(VisionTask, build_config(VisionConfig, cfg), tmp_path / "one")
    assert two["finished"] and two["world_size"] == 2 and one["world_size"] == 1 and two["steps"] == 4
    single, multi = _losses(tmp_path / "one"), _losses(out)
    assert sorted(multi) == sorted(single) == [1, 2, 3, 4]
    assert [multi[s] for s in sorted(multi)] == pytest.approx([single[s] for s in sorted(single)], rel=1e-5)
    # Float rounding differs between the two splits (per-rank BatchNorm against split-BN, two partial sums
    # of the gradient), by about 1e-7. A ReLU input that close to 0 is positive in one run and 0 in the
    # other, and its gradient then passes in one only: measured on this run, one of the 32,768 outputs of
    # layer3 at the third step (0 against 8.3e-7) moves the earlier layers' gradient by 2e-3 and the final
    # weights by up to 3e-3 (relative, a BatchNorm bias; without such a flip 1e-6), and one test image's
    # top-5 neighbours. So the weights are compared to 1e-2 (a gradient summed instead of averaged, or a
    # rank's rows lost, moves them by far more, and the losses above by more than 1e-5) and each score to
    # one image of the set it is measured on.
    a = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    drift = {k: float((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-12)) for k in a
             if k.startswith("encoder_q.") and a[k].is_floating_point()}  # relative, per tensor
    stats = [k for k in drift if k.endswith(("running_mean", "running_var"))]
    weights = [k for k in drift if k not in stats]
    assert weights and max(drift[k] for k in weights) < 1e-2, sorted(drift.items(), key=lambda kv: -kv[1])[:3]
    images = {"val_knn_top1": 20, "knn_top1": 40, "knn_top5": 40, "linear_top1": 40}
    for score, n in images.items():
        one_image = 100 / n + 1e-6
        assert two["final_scores"][score] == pytest.approx(one["final_scores"][score], abs=one_image), score
    # The queue holds the keys of both nodes in the global batch's order (4 steps x 32, the last 96), and
    # the BatchNorm statistics averaged over the ranks are the single process's mean over its splits (the
    # flip above moves them by 2.5e-5; a rank's own statistics, not averaged, differ at the batch's scale).
    assert torch.equal(a["queue.ids"], b["queue.ids"]) and int((b["queue.ids"] >= 0).sum()) == 96
    assert stats and max(drift[k] for k in stats) < 1e-3, sorted(drift.items(), key=lambda kv: -kv[1])[:3]
    assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a if k.startswith("queue."))
