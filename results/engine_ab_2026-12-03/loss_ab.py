"""The loss alone, forward and backward, in whichever hardmix the interpreter imports (run with the old and
the new install in turn): ``python -P loss_ab.py old|new``."""

import statistics
import sys
import time

import torch

from hardmix.losses.contrastive import ContrastiveLoss

torch.set_num_threads(1)
loss_fn = ContrastiveLoss(0.05, {"name": "mixcse", "lam": 0.2})
g = torch.Generator().manual_seed(0)
z1 = torch.randn(64, 256, generator=g, requires_grad=True)
z2 = torch.randn(64, 256, generator=g, requires_grad=True)


def once() -> None:
    loss_fn.in_batch(z1, z2).loss.backward()


for _ in range(50):
    once()
times = []
for _ in range(7):
    start = time.perf_counter()
    for _ in range(200):
        once()
    times.append((time.perf_counter() - start) / 200 * 1e3)
print(sys.argv[1], "ms/call median", round(statistics.median(times), 3), [round(x, 3) for x in times])
