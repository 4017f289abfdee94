"""Two "nodes" on loopback: ``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d`` runs the one
``hardmix train`` command of both nodes with the same ``--output`` (a shared file system, as on a cluster).

- text: the losses step after step and the final STS-B dev score equal one process over the global batch
  (dropout off; the negatives are the global batch, gathered with gradient), through a SIGTERM to the node
  that does not write (the whole job checkpoints) and a ``--resume`` of both nodes;
- vision: MoCo's queue gathered from both nodes and its shuffle-BN across them give the losses and the
  final k-NN score of the same run as 2 processes of one node (the augmentations are drawn per rank and
  the BatchNorm groups are the ranks' slices, so one process over the global batch is another run).
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


def test_vision_on_two_nodes_equals_two_processes_of_one_node(tmp_path, tiny_vision_config):
    import torch

    cfg = tiny_vision_config(
        loss={"strategies": [{"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8}], "queue_size": 96},
        train={"epochs": 1, "batch_size": 32, "save_steps": 0, "threads": 1},
        data={"max_samples": 128, "val_samples": 20, "num_workers": 0},
        eval={"at_end": True, "knn_train_samples": 64, "knn_test_samples": 40, "linear_epochs": 5},
    )
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump(cfg))
    runs = {}
    for name, flags in (("one-node", [["--standalone", "--nnodes", "1", "--nproc-per-node", "2"]]),
                        ("two-nodes", _two_nodes(_free_port()))):
        out, log = tmp_path / name, tmp_path / f"vision-{name}"
        codes = _wait(_torchrun(flags, ["vision", str(tmp_path / "vision.yaml"), "--output", str(out)], log))
        assert all(c == 0 for c in codes), _logs(log)
        runs[name] = out
    a, b = (read_results(runs[n]) for n in ("one-node", "two-nodes"))
    assert a["finished"] and b["finished"] and a["world_size"] == b["world_size"] == 2 and b["steps"] == 4
    la, lb = _losses(runs["one-node"]), _losses(runs["two-nodes"])
    assert sorted(lb) == [1, 2, 3, 4] and [lb[s] for s in sorted(lb)] == pytest.approx(
        [la[s] for s in sorted(la)], rel=1e-5)
    assert b["final_scores"]["knn_top1"] == pytest.approx(a["final_scores"]["knn_top1"], abs=1e-6)
    # The queue holds the keys of both nodes: 4 steps x 32 images gathered, the last 96 of them.
    qa = torch.load(runs["one-node"] / "checkpoint.pt", weights_only=True)["model"]["queue.ids"]
    qb = torch.load(runs["two-nodes"] / "checkpoint.pt", weights_only=True)["model"]["queue.ids"]
    assert torch.equal(qa, qb) and int((qb >= 0).sum()) == 96
