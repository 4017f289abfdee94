"""Two processes on CPU (gloo): keys are gathered into identical queues, the key shuffle crosses ranks and
round-trips, and the trainer runs under DDP."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(r: int, port: int, out: str, tree: str, cache: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hardmix.config.loader import build_config
    from hardmix.losses import ContrastiveLoss
    from hardmix.ops.distributed import batch_shuffle
    from hardmix.training import run_training
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.moco import MoCo
    from hardmix.vision.task import VisionTask

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=WORLD)
    try:
        torch.manual_seed(0)
        net, dim = build_backbone("resnet10", width=4, small_stem=True)
        moco = MoCo(
            net,
            dim,
            proj_hidden=16,
            proj_dim=8,
            queue_size=32,
            bn_splits=1,
            queue_generator=torch.Generator().manual_seed(0),
        )
        moco.set_query_wrapper(DDP(moco.encoder_q))
        x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(10 + r))
        ids = torch.arange(4) + 100 * r
        # Round trip while both ranks' key encoders are equal (their BN running statistics diverge later,
        # as each rank normalizes its own key slice, as in MoCo).
        moco.eval()
        with torch.no_grad():
            plain = moco.encoder_k(x)
        round_trip = moco.encode_keys(x, torch.Generator().manual_seed(5))
        moco.train()
        out_step = moco(x, x.flip(-1), ids, ContrastiveLoss(0.2), 0.99)
        out_step.loss.backward()
        # The shuffle crosses ranks: this rank's slice holds rows of the other rank too.
        tagged = torch.full((4, 1), float(r))
        shuffled, _ = batch_shuffle(tagged, torch.Generator().manual_seed(r))  # rank 0's permutation wins
        grads = [p.grad.clone() for p in moco.encoder_q.parameters()]
        torch.save(
            {
                "queue_ids": moco.queue.ids,
                "queue_keys": moco.queue.keys,
                "shuffled": shuffled,
                "plain": plain,
                "round_trip": round_trip,
                "grads": grads,
            },
            Path(out) / f"rank{r}.pt",
        )
        d = {
            "data": {"dataset": tree, "cache_dir": cache, "max_samples": 64, "num_workers": 1},
            "augment": {"crop_size": 32},
            "model": {
                "backbone": "resnet10",
                "width": 4,
                "small_stem": True,
                "proj_hidden": 16,
                "proj_dim": 8,
                "bn_splits": 2,
            },
            "loss": {
                "strategies": [{"name": "mochi", "n_hard": 8, "n_pair": 8, "n_query": 4}],
                "queue_size": 48,
            },
            "train": {"epochs": 2, "batch_size": 32, "device": "cpu", "threads": 1},
            "eval": {"at_end": False},
            "log": {"progress": False},
        }
        summary = run_training(VisionTask, build_config(VisionConfig, d), Path(out) / "run")
        torch.save(summary, Path(out) / f"summary{r}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(cifar_tree, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vision-ddp")
    cache = tmp_path_factory.getbasetemp() / "vision-cache"
    mp.spawn(_worker, args=(_free_port(), str(out), str(cifar_tree), str(cache)), nprocs=WORLD, join=True)
    return {
        "ranks": [torch.load(out / f"rank{r}.pt") for r in range(WORLD)],
        "summaries": [torch.load(out / f"summary{r}.pt") for r in range(WORLD)],
        "run": out / "run",
    }


def test_keys_of_all_ranks_enter_identical_queues(results):
    a, b = results["ranks"]
    assert torch.equal(a["queue_ids"], b["queue_ids"]) and torch.equal(a["queue_keys"], b["queue_keys"])
    assert a["queue_ids"][:8].tolist() == [0, 1, 2, 3, 100, 101, 102, 103]


def test_shuffle_bn_crosses_ranks_and_round_trips(results):
    a, b = results["ranks"]
    tags = torch.cat([a["shuffled"], b["shuffled"]]).flatten()
    assert sorted(tags.tolist()) == [0.0] * 4 + [1.0] * 4
    assert set(a["shuffled"].flatten().tolist()) == {0.0, 1.0}  # rank 0 now holds rows of rank 1
    for r in results["ranks"]:
        torch.testing.assert_close(r["round_trip"], r["plain"])


def test_ddp_averages_the_query_gradients(results):
    a, b = results["ranks"]
    for ga, gb in zip(a["grads"], b["grads"]):
        torch.testing.assert_close(ga, gb)


def test_trainer_runs_under_ddp(results):
    s0, s1 = results["summaries"]
    assert s0["steps"] == s1["steps"] == 4 and s0["task_info"]["num_samples"] == 64 and s0["world_size"] == 2
    state = torch.load(results["run"] / "checkpoint.pt", weights_only=True)
    ids = state["model"]["queue.ids"]
    assert (ids >= 0).sum() == 48 and ids.unique().numel() == 48  # 4 steps x 32 keys gathered from both ranks
    assert "encoder_q.backbone.conv1.weight" in state["model"]  # saved without the DDP wrapper's prefix
