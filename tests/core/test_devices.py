"""The losses on every available device, in float32, against float64 on the CPU.

Kernels differ by device (cuBLAS products, ``topk``, the generators), so each test runs on the CPU here
and on CUDA where a GPU is present (``benchmarks/device_check.sh``). The float64 CPU values themselves
are pinned to NumPy by the other test modules.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss
from hardmix.ops.mixing import hardest
from hardmix.strategies.mochi import mochi_synthesize

from ._reference import cross_entropy, normalize

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _loss_and_grads(fn, *inputs: torch.Tensor) -> tuple[float, list[np.ndarray]]:
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    loss = fn(*leaves).loss
    loss.backward()
    return float(loss.detach()), [x.grad.double().cpu().numpy() for x in leaves]


def _assert_close(got: tuple[float, list[np.ndarray]], want: tuple[float, list[np.ndarray]]) -> None:
    assert abs(got[0] - want[0]) < 1e-5 * max(1.0, abs(want[0]))
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-5 * np.abs(w).max())


IN_BATCH = [
    ("none-single", None, False),
    ("none-sym", None, True),
    ("mixcse-bi", {"name": "mixcse", "lam": 0.2}, None),
    ("mixcse-single", {"name": "mixcse", "lam": 0.2, "second_direction": False}, None),
    ("mixcse-no-sg", {"name": "mixcse", "lam": 0.2, "stop_grad": False}, None),
    ("mixcse-reference", {"name": "mixcse", "lam": 0.2, "mode": "reference"}, None),
    # A ramp at step 0 (lam = 0.3).
    ("mixcse-scheduled", {"name": "mixcse", "lam": {"start": 0.3, "end": 0.2, "steps": 10}}, None),
    ("mixcse_adaptive-bi", {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.5}, None),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,spec,both_directions", IN_BATCH, ids=[c[0] for c in IN_BATCH])
def test_in_batch_loss_on_device_equals_float64_cpu(device: str, name: str, spec, both_directions) -> None:
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(48, 24, generator=g, dtype=torch.float64)
    z2 = z1 + 0.8 * torch.randn(48, 24, generator=g, dtype=torch.float64)
    reference = ContrastiveLoss(0.05, spec, both_directions=both_directions)
    want = _loss_and_grads(reference.in_batch, z1, z2)
    loss_fn = ContrastiveLoss(0.05, spec, both_directions=both_directions)
    got = _loss_and_grads(loss_fn.in_batch, z1.float().to(device), z2.float().to(device))
    _assert_close(got, want)


def _queue_inputs(seed: int = 1, b: int = 12, k: int = 64, d: int = 16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, generator=g, dtype=torch.float64)
    key = q + 0.5 * torch.randn(b, d, generator=g, dtype=torch.float64)
    queue = torch.randn(k, d, generator=g, dtype=torch.float64)
    queue[:b] = q + 0.3 * torch.randn(b, d, generator=g, dtype=torch.float64)  # each query's own old key
    query_ids = torch.arange(b)
    queue_ids = torch.cat([torch.arange(b), torch.full((3,), -1), 100 + torch.arange(k - b - 3)])
    return q, key, queue, query_ids, queue_ids


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "spec",
    [None, {"name": "mixcse", "lam": 0.2}, {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.5}],
    ids=["none", "mixcse", "mixcse_adaptive"],
)
def test_queue_loss_with_sample_ids_on_device_equals_float64_cpu(device: str, spec) -> None:
    q, key, queue, query_ids, queue_ids = _queue_inputs()
    loss_fn = ContrastiveLoss(0.2, spec)

    def run(q_, key_, queue_, ids_device: str):
        return loss_fn.queue(q_, key_, queue_, query_ids.to(ids_device), queue_ids.to(ids_device))

    want = _loss_and_grads(lambda a: run(a, key, queue, "cpu"), q)
    key_d, queue_d = key.float().to(device), queue.float().to(device)
    got = _loss_and_grads(lambda a: run(a, key_d, queue_d, device), q.float().to(device))
    _assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_mixcse", [False, True], ids=["mochi", "mochi+mixcse"])
def test_mochi_queue_loss_on_device_equals_its_detached_synthetic_points(device: str, with_mixcse) -> None:
    """MoCHi's closed-form logits on the device, against cross-entropy (float64, autograd on the CPU) with
    the synthetic points that ``mochi_synthesize`` builds on the same device from the same seed."""
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=2)
    tau, lam, n_hard, n_pair, n_query = 0.2, 0.2, 10, 12, 5
    specs = [{"name": "mochi", "n_hard": n_hard, "n_pair": n_pair, "n_query": n_query}]
    if with_mixcse:
        specs.append({"name": "mixcse", "lam": lam})
    qd, keyd, queued = (x.float().to(device) for x in (q, key, queue))
    qids, kids = query_ids.to(device), queue_ids.to(device)
    loss_fn = ContrastiveLoss(tau, specs)

    def run(a: torch.Tensor):
        return loss_fn.queue(a, keyd, queued, qids, kids, generator=torch.Generator(device).manual_seed(7))

    got = _loss_and_grads(run, qd)

    valid = (kids.view(1, -1) != -1) & (qids.view(-1, 1) != kids.view(1, -1))
    synthetic = mochi_synthesize(
        F.normalize(qd, dim=1), F.normalize(queued, dim=1), n_hard, n_pair, n_query,
        generator=torch.Generator(device).manual_seed(7), valid=valid,
    )
    assert synthetic.device.type == device and not synthetic.requires_grad
    s = synthetic.double().cpu()
    a = q.clone().requires_grad_(True)
    h = F.normalize(a, dim=1)
    k_, n_ = F.normalize(key, dim=1), F.normalize(queue, dim=1)
    mask = valid.cpu()
    blocks = [
        (h * k_).sum(1, keepdim=True) / tau,
        (h @ n_.T / tau).masked_fill(~mask, float("-inf")),
        torch.einsum("bd,bmd->bm", h, s) / tau,
    ]
    if with_mixcse:
        m = F.normalize(lam * k_.unsqueeze(1) + (1 - lam) * n_.unsqueeze(0), dim=2)  # (B, K, D), constant
        blocks.append(torch.einsum("bd,bkd->bk", h, m).div(tau).masked_fill(~mask, float("-inf")))
    want_loss = F.cross_entropy(torch.cat(blocks, 1), torch.zeros(len(q), dtype=torch.long))
    want_loss.backward()
    _assert_close(got, (float(want_loss.detach()), [a.grad.numpy()]))
    if not with_mixcse:  # the float64 reference itself, against NumPy
        qn, kn, nn_ = (normalize(x.numpy()) for x in (q, key, queue))
        logits = [np.sum(qn * kn, 1, keepdims=True) / tau, np.where(mask.numpy(), qn @ nn_.T / tau, -np.inf)]
        logits.append(np.einsum("bd,bmd->bm", qn, s.numpy()) / tau)
        assert abs(float(want_loss.detach()) - cross_entropy(np.concatenate(logits, 1), [0] * len(q))) < 1e-10


@pytest.mark.parametrize("device", DEVICES)
def test_hardest_on_device_equal_brute_force(device: str) -> None:
    g = torch.Generator().manual_seed(3)
    sims = torch.randn(9, 300, generator=g)
    sims[2, :50] = float("-inf")
    valid = torch.rand(9, 300, generator=g) > 0.2
    hard = hardest(sims.to(device), 17, valid.to(device)).cpu()
    masked = sims.masked_fill(~valid, float("-inf")).numpy()
    for row in range(9):
        want = set(np.argsort(-masked[row], kind="stable")[:17].tolist())
        assert set(hard[row].tolist()) == want


_SMALL_MOCHI = {"name": "mochi", "n_hard": 6, "n_pair": 5, "n_query": 3}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "spec", [None, {"name": "mixcse"}, [{"name": "mixcse"}, _SMALL_MOCHI]], ids=["none", "mixcse", "both"]
)
def test_queue_loss_under_bf16_autocast_on_device(device: str, spec) -> None:
    """Under bf16 autocast on the device: an fp32 loss and gradient close to the fp32 run's."""
    q, key, queue, query_ids, queue_ids = (x.to(device) for x in _queue_inputs(seed=4))
    q, key, queue = q.float(), key.float(), queue.float()
    loss_fn = ContrastiveLoss(0.2, spec)
    a, c = q.clone().requires_grad_(True), q.clone().requires_grad_(True)
    ids = query_ids, queue_ids
    with torch.autocast(device, dtype=torch.bfloat16):
        low = loss_fn.queue(a, key, queue, *ids, generator=torch.Generator(device).manual_seed(1))
    low.loss.backward()
    full = loss_fn.queue(c, key, queue, *ids, generator=torch.Generator(device).manual_seed(1))
    full.loss.backward()
    assert low.loss.dtype == torch.float32 and a.grad.dtype == torch.float32
    assert abs(float(low.loss.detach()) - float(full.loss.detach())) < 0.01 * float(full.loss.detach())
    assert F.cosine_similarity(a.grad.flatten(), c.grad.flatten(), dim=0) > 0.99
