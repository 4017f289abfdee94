"""``gather_across_devices=True`` under two processes (gloo on CPU): each process's loss over its local
anchors against the gathered batch averages to the one-process loss over the global batch, and the
gradients of each process's embeddings are the global ones (sentence-transformers' convention, as in
``MultipleNegativesRankingLoss``)."""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD, B, D = 2, 4, 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, z1: torch.Tensor, z2: torch.Tensor, out: str) -> None:
    from hardmix.text.losses import MixCSELoss

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        a = z1[rank * B:(rank + 1) * B].clone().requires_grad_(True)
        p = z2[rank * B:(rank + 1) * B].clone().requires_grad_(True)
        loss = MixCSELoss(model=None, gather_across_devices=True).compute_loss_from_embeddings([a, p])
        # sentence-transformers' trainer averages gradients over processes (DDP): scale to match
        (loss / WORLD).backward()
        torch.save({"loss": loss.detach(), "ga": a.grad, "gp": p.grad}, f"{out}/{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_gathered_loss_and_gradients_equal_one_process_over_the_global_batch(tmp_path):
    from hardmix.losses import mixcse_loss

    torch.manual_seed(0)
    z1, z2 = torch.randn(WORLD * B, D), torch.randn(WORLD * B, D)
    mp.spawn(_worker, args=(_free_port(), z1, z2, str(tmp_path)), nprocs=WORLD, join=True)
    parts = [torch.load(tmp_path / f"{r}.pt") for r in range(WORLD)]
    g1, g2 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    expected = mixcse_loss(g1, g2, lam=0.2, temperature=0.05)
    expected.backward()
    torch.testing.assert_close(sum(p["loss"] for p in parts) / WORLD, expected.detach(), rtol=1e-5, atol=1e-6)
    # the gathered candidates' gradients are summed back to the process that owns them
    torch.testing.assert_close(torch.cat([p["ga"] for p in parts]), g1.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(torch.cat([p["gp"] for p in parts]), g2.grad, rtol=1e-4, atol=1e-6)
