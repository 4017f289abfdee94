"""The loss alone, forward and backward, in whichever hardmix the interpreter imports (run with the old and
the new install in turn, from outside both checkouts): ``python -P loss_ab.py old|new``. Prints one JSON
line: per case, the median ms per call of 5 x 40 calls after 10 warm-up calls."""

import json
import statistics
import sys
import time

import torch

from hardmix.losses.contrastive import ContrastiveLoss

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
MOCHI = {"name": "mochi", "n_hard": 512, "n_pair": 512, "n_query": 128}
SMALL = {"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8}
q = torch.randn(64, 128, generator=g, requires_grad=True)
k, queue = torch.randn(64, 128, generator=g), torch.randn(4096, 128, generator=g)
z1 = torch.randn(64, 256, generator=g, requires_grad=True)
z2 = torch.randn(64, 256, generator=g, requires_grad=True)
CASES = {
    "queue/mochi 512/512/128, B 64, K 4096, D 128": (ContrastiveLoss(0.1, MOCHI), "queue"),
    "queue/none, B 64, K 4096, D 128": (ContrastiveLoss(0.1, "none"), "queue"),
    "in_batch/mochi 16/16/8, B 64, D 256": (ContrastiveLoss(0.05, SMALL), "in_batch"),
    "in_batch/none, B 64, D 256": (ContrastiveLoss(0.05, "none"), "in_batch"),
}


def once(loss_fn: ContrastiveLoss, mode: str, gen: torch.Generator) -> None:
    if mode == "queue":
        out = loss_fn.queue(q, k, queue, generator=gen)
    else:
        out = loss_fn.in_batch(z1, z2, generator=gen)
    out.loss.backward()


result = {}
for name, (loss_fn, mode) in CASES.items():
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        once(loss_fn, mode, gen)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(40):
            once(loss_fn, mode, gen)
        times.append((time.perf_counter() - start) / 40 * 1e3)
    result[name] = round(statistics.median(times), 3)
print(json.dumps({"version": sys.argv[1], "ms_per_call": result}))
