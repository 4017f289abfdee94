import sys, time, statistics, torch
torch.set_num_threads(1)
from hardmix.losses.contrastive import ContrastiveLoss
loss_fn = ContrastiveLoss(0.05, {"name": "mixcse", "lam": 0.2})
g = torch.Generator().manual_seed(0)
z1 = torch.randn(64, 256, generator=g, requires_grad=True); z2 = torch.randn(64, 256, generator=g, requires_grad=True)
def once():
    out = loss_fn.in_batch(z1, z2); out.loss.backward()
for _ in range(50): once()
ts = []
for _ in range(7):
    t = time.perf_counter()
    for _ in range(200): once()
    ts.append((time.perf_counter() - t) / 200 * 1e3)
print(sys.argv[1], "ms/call median", round(statistics.median(ts), 3), [round(x, 3) for x in ts])
