"""Fixed-seed MoCHi / hard_copies losses (values, gradients, stats) and MoCHi's points, saved for an exact
before/after comparison: ``python -P draws_check.py OUT.pt`` with the old and the new install, then
torch.equal over every saved tensor (on 2026-12-05: all 327 equal)."""
import sys

import torch

import hardmix.mixing as mx
from hardmix.losses import ContrastiveLoss

try:
    from hardmix.strategies.mochi import mochi_synthesize
except ImportError:
    mochi_synthesize = mx.mochi_synthesize

torch.set_num_threads(1)
out = {}


def g(seed):
    return torch.Generator().manual_seed(seed)


def record(key, res, *leaves):
    out[key + "/loss"] = res.loss.detach().clone()
    res.loss.backward()
    for i, t in enumerate(leaves):
        out[f"{key}/grad{i}"] = t.grad.clone()
    for name, st in res.strategy_stats.items():
        for k, v in st.items():
            out[f"{key}/stat/{name}/{k}"] = torch.as_tensor(v).clone()


specs = {
    "mochi": {"name": "mochi", "n_hard": 12, "n_pair": 20, "n_query": 6, "beta_max": 0.4},
    "mochi_big": {"name": "mochi", "n_hard": 48, "n_pair": 40, "n_query": 16},  # the rejection path
    "mochi_pairs_only": {"name": "mochi", "n_hard": 8, "n_pair": 28, "n_query": 0},
    "mochi_query_only": {"name": "mochi", "n_hard": 8, "n_pair": 0, "n_query": 9},
    "hard_copies": {"name": "hard_copies", "n_hard": 12, "n_pair": 20, "n_query": 6, "beta_max": 0.4},
    "hard_copies_big": {"name": "hard_copies", "n_hard": 48, "n_pair": 40, "n_query": 16},
    "mochi_ramp": {"name": "mochi", "n_hard": 12, "n_pair": {"start": 2, "end": 20, "steps": 10},
                   "n_query": 6, "warmup_steps": 2},
    "mochi+hard_copies": [{"name": "mochi", "n_hard": 10, "n_pair": 8, "n_query": 4},
                          {"name": "false_negative_filter", "top_k": 2}],
}
for dtype in (torch.float32, torch.float64):
    for name, spec in specs.items():
        for both in (False, True):  # text-like in-batch, one and two directions
            z1 = torch.randn(64, 32, generator=g(1), dtype=dtype).requires_grad_(True)
            z2 = torch.randn(64, 32, generator=g(2), dtype=dtype).requires_grad_(True)
            loss = ContrastiveLoss(0.05, spec, both_directions=both)
            res = loss.in_batch(z1, z2, step=5, generator=g(3))
            record(f"{dtype}/{name}/in_batch/{both}", res, z1, z2)
        # queue (MoCo), with sample ids (own keys and empty slots excluded)
        q = torch.randn(32, 32, generator=g(4), dtype=dtype).requires_grad_(True)
        k = torch.randn(32, 32, generator=g(5), dtype=dtype)
        queue = torch.randn(200, 32, generator=g(6), dtype=dtype)
        qids = torch.arange(32)
        kids = torch.randint(-1, 40, (200,), generator=g(7))
        res = ContrastiveLoss(0.2, spec).queue(q, k, queue, qids, kids, step=7, generator=g(8))
        record(f"{dtype}/{name}/queue_ids", res, q)
        q2 = q.detach().clone().requires_grad_(True)
        res = ContrastiveLoss(0.2, spec).queue(q2, k, queue, step=7, generator=g(9))
        record(f"{dtype}/{name}/queue", res, q2)
# bf16 inputs (upcast in the loss)
z1 = torch.randn(64, 32, generator=g(1)).bfloat16().requires_grad_(True)
z2 = torch.randn(64, 32, generator=g(2)).bfloat16().requires_grad_(True)
record("bf16/mochi/in_batch", ContrastiveLoss(0.05, specs["mochi"], both_directions=True).in_batch(
    z1, z2, generator=g(3)), z1, z2)
# the points themselves
qq = torch.nn.functional.normalize(torch.randn(16, 32, generator=g(10)), dim=1)
nn_ = torch.nn.functional.normalize(torch.randn(300, 32, generator=g(11)), dim=1)
valid = torch.rand(16, 300, generator=g(12)) > 0.3
out["points"] = mochi_synthesize(qq, nn_, 40, 50, 10, 0.5, g(13), valid)
out["points_small"] = mochi_synthesize(qq, nn_, 6, 15, 4, 0.3, g(14))
torch.save(out, sys.argv[1])
print(len(out), "tensors saved to", sys.argv[1])
