"""Two processes (gloo on CPU) over a global batch give the loss and gradients of one process over it.

The negatives of every process are the global batch: the views are gathered with gradient
(:func:`hardmix.ops.distributed.gather_with_grad`) and DistributedDataParallel averages the gradients. Dropout
is off so that both runs are deterministic.
"""

from __future__ import annotations

import copy
import json
import os
import socket

import pytest
import torch

WORLD = 2
STRATEGIES = {
    "none": [{"name": "none"}],
    "mixcse": [{"name": "mixcse", "lam": 0.2}],
    "mixcse_nosg": [{"name": "mixcse", "lam": 0.2, "stop_grad": False}],
    "mixcse_reference": [{"name": "mixcse", "lam": 0.2, "mode": "reference"}],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(path):
    from hardmix.text.model import ContrastiveSentenceModel, load_backbone

    torch.manual_seed(0)
    backbone, tok = load_backbone(str(path), dropout=0.0)
    return ContrastiveSentenceModel(backbone, "cls", tok)


def _step(model, loss_fn, batch):
    """Loss and parameter gradients of one step."""
    from hardmix.text.model import forward_views
    from hardmix.text.task import loss_from_views

    model.zero_grad(set_to_none=True)
    z1, z2 = forward_views(model, batch)
    out = loss_from_views(loss_fn, z1, z2)
    out.loss.backward()
    return out.loss.detach()


def _worker(rank, port, model_dir, sentences, cfg_dict, out_dir, result_dir):
    import torch.distributed as dist

    from hardmix.text.config import build_loss, build_text_config
    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    model = _model(model_dir).double().train()  # float64: the comparison is not drowned in fp32 noise
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    tok = model.tokenizer
    batch = dict(tok(sentences, padding=True, truncation=True, max_length=32, return_tensors="pt"))
    b = len(sentences) // WORLD
    local = {k: v[rank * b:(rank + 1) * b] for k, v in batch.items()}
    results = {}
    for name, strategies in STRATEGIES.items():
        loss_fn = build_loss(build_text_config({"loss": {"strategies": strategies}}).loss)
        loss = _step(ddp, loss_fn, local)
        dist.all_reduce(loss)
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[name] = {"loss": loss / WORLD, "grads": grads}
    if rank == 0:
        torch.save(results, os.path.join(result_dir, "step.pt"))
    run_training(TextTask, build_text_config(cfg_dict), out_dir)  # in the process group initialised above
    dist.destroy_process_group()


def _losses(run_dir) -> list[float]:
    lines = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl")).read().splitlines()]
    return [x["loss"] for x in lines if "loss" in x]


def test_two_processes_equal_one_over_the_global_batch(tmp_path, tiny_bert_dir, wiki_sentences,
                                                       tiny_text_config, one_torch_thread):
    import torch.multiprocessing as mp

    from hardmix.text.config import build_loss, build_text_config
    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    sentences = wiki_sentences[:12]
    cfg = copy.deepcopy(tiny_text_config)
    cfg["model"]["dropout"] = 0.0
    cfg["train"].update(max_steps=4, batch_size=12)
    cfg["loss"]["strategies"] = [{"name": "mixcse", "lam": 0.2}]
    mp.spawn(_worker, args=(_free_port(), str(tiny_bert_dir), sentences, cfg, str(tmp_path / "ddp"),
                            str(tmp_path)), nprocs=WORLD, join=True)
    dist_results = torch.load(tmp_path / "step.pt", weights_only=False)

    model = _model(tiny_bert_dir).double().train()
    batch = dict(model.tokenizer(sentences, padding=True, truncation=True, max_length=32,
                                 return_tensors="pt"))
    for name, strategies in STRATEGIES.items():
        loss_fn = build_loss(build_text_config({"loss": {"strategies": strategies}}).loss)
        loss = _step(model, loss_fn, batch)
        torch.testing.assert_close(dist_results[name]["loss"], loss, rtol=1e-10, atol=0)
        for n, p in model.named_parameters():
            g = dist_results[name]["grads"][n]
            rel = float((g - p.grad).norm() / p.grad.norm().clamp_min(1e-12))
            assert rel < 1e-6, f"{name} {n}: relative gradient difference {rel:.2e}"

    run_training(TextTask, build_text_config(cfg), tmp_path / "single")
    single, ddp = _losses(tmp_path / "single"), _losses(tmp_path / "ddp")
    assert len(single) == 4
    # Same losses step after step: the updates matched too. (The fp32 weights themselves are not compared:
    # Adam turns float noise in coordinates whose gradient is ~0 into lr-sized differences.)
    assert ddp == pytest.approx(single, rel=1e-5)
