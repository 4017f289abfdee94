"""bf16 autocast on the CPU: how ``train.precision: auto`` chooses, the loss and the strategies' logits under
autocast against float32, both trainers under autocast against float32, and a resume across the choice."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

import hardmix.losses.contrastive as contrastive
from hardmix.losses import ContrastiveLoss
from hardmix.training import run_training
from hardmix.training import runtime as runtime_module
from hardmix.training.runtime import Runtime, bf16_flags_in, choose_precision, cpu_bf16_flags
from hardmix.utils.errors import ConfigError

CPU = torch.device("cpu")


# ----------------------------------------------------------------------------------- the choice
def test_the_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n\n"
        "processor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n"
    )
    assert bf16_flags_in(str(info)) == ("avx512_bf16",)
    info.write_text("flags : fpu avx2 amx_bf16 amx_tile avx512_bf16\n")
    assert bf16_flags_in(str(info)) == ("avx512_bf16", "amx_bf16")
    info.write_text("flags : fpu sse2 avx2 avx512f avx512_bf16x\n")  # a longer name is not the flag
    assert bf16_flags_in(str(info)) == ()
    assert bf16_flags_in(str(tmp_path / "absent")) == ()
    real = Path("/proc/cpuinfo")
    if real.is_file():  # this machine, read another way
        words = set(real.read_text().split())
        assert cpu_bf16_flags() == tuple(f for f in ("avx512_bf16", "amx_bf16") if f in words)


@pytest.mark.parametrize(
    ("flags", "want"), [(("avx512_bf16",), "bf16"), (("amx_bf16",), "bf16"), ((), "fp32")]
)
def test_auto_is_bf16_exactly_where_the_cpu_computes_it(monkeypatch, flags, want) -> None:
    monkeypatch.setattr(runtime_module, "cpu_bf16_flags", lambda: flags)
    precision, why = choose_precision("auto", CPU)
    assert precision == want
    assert ("computes bfloat16 natively" in why) == bool(flags) and all(f in why for f in flags)
    # an explicit choice is kept either way; bf16 without the instructions says it will be slow
    assert choose_precision("fp32", CPU)[0] == "fp32"
    precision, why = choose_precision("bf16", CPU)
    assert precision == "bf16" and ("slower than fp32" in why) == (not flags)
    # a task whose bf16 was not shown to give fp32's answers stays fp32 under auto, saying why
    precision, why = choose_precision("auto", CPU, task="vision", auto_bf16=False)
    assert precision == "fp32" and ("not shown to give vision's held-out scores" in why) == bool(flags)
    assert choose_precision("bf16", CPU, task="vision", auto_bf16=False)[0] == "bf16"


def test_a_resume_keeps_the_runs_precision_and_fp16_needs_cuda(monkeypatch) -> None:
    monkeypatch.setattr(runtime_module, "cpu_bf16_flags", lambda: ("avx512_bf16",))
    assert choose_precision("auto", CPU, saved="fp32")[0] == "fp32"
    monkeypatch.setattr(runtime_module, "cpu_bf16_flags", lambda: ())
    assert choose_precision("auto", CPU, saved="bf16")[0] == "bf16"
    assert choose_precision("auto", CPU, saved=None)[0] == "fp32"
    with pytest.raises(ConfigError, match="train.precision: fp16 needs CUDA"):
        choose_precision("fp16", CPU)
    with pytest.raises(ConfigError, match=r"fp16 needs CUDA \(the resumed run used it\)"):
        choose_precision("auto", CPU, saved="fp16")


# ------------------------------------------------------------------- the loss and the strategies
def _views(seed: int = 0, b: int = 32, d: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two correlated views (cosine ~0.6) and a queue of 256 keys."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(b, d, generator=g)
    z1 = base + 0.8 * torch.randn(b, d, generator=g)
    z2 = base + 0.8 * torch.randn(b, d, generator=g)
    return z1, z2, torch.randn(256, d, generator=g)


TAU = 0.2  # where HCL's and DCL's floor does not clamp these views' negatives

#: The strategies whose arithmetic is sensitive to rounding, each in the mode it is used in.
SENSITIVE = [
    ("in_batch", {"name": "mixcse", "lam": 0.2}),
    ("queue", {"name": "mixcse", "lam": 0.2}),
    ("in_batch", {"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8}),
    ("queue", {"name": "mochi", "n_hard": 64, "n_pair": 64, "n_query": 16}),
    ("in_batch", {"name": "hcl", "beta": 1.0, "tau_plus": 0.1}),
    ("in_batch", {"name": "dcl", "tau_plus": 0.1}),
    ("in_batch", {"name": "mixcse_adaptive"}),
]


def _recorded(monkeypatch, mode: str, spec: dict, z1, z2, queue, autocast: bool):
    """The loss and every strategy's logits (its reweighting, extra columns or per-anchor estimate),
    recorded where the loss composes them; with ``autocast`` the loss is called inside
    ``torch.autocast("cpu", bfloat16)``."""
    seen: list[torch.Tensor] = []
    real = contrastive.composed_direction

    def recording(ctx, strategies, tau, *labels):
        for s in strategies:
            hooked = _with_generator(ctx, torch.Generator().manual_seed(7))
            if (out := s.reweight(hooked)) is not None:
                seen.append(out[0].detach())
            if (out := s.extra_cosines(hooked)) is not None:
                seen.append(out[0].detach() / tau)  # the logits the loss makes of them
            negatives = ctx.cosines.masked_fill(~ctx.negative_mask, float("-inf")) / tau
            if (out := s.estimator(ctx, ctx.positive_cosines / tau, negatives, tau)) is not None:
                seen.append(out[0].detach())
        seen.append(ctx.cosines.detach() / tau)
        return real(ctx, strategies, tau, *labels)

    monkeypatch.setattr(contrastive, "composed_direction", recording)
    loss_fn = ContrastiveLoss(TAU, [spec])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        g = torch.Generator().manual_seed(3)
        if mode == "in_batch":
            out = loss_fn.in_batch(z1, z2, generator=g)
        else:
            out = loss_fn.queue(z1, z2, queue, generator=g)
    monkeypatch.setattr(contrastive, "composed_direction", real)
    return out.loss, seen


def _with_generator(ctx, g):
    from dataclasses import replace

    return replace(ctx, generator=g)


@pytest.mark.parametrize(("mode", "spec"), SENSITIVE, ids=[f"{m}-{s['name']}" for m, s in SENSITIVE])
def test_the_strategies_logits_under_autocast_equal_float32(monkeypatch, mode, spec) -> None:
    """Under autocast the loss computes in float32 (it turns autocast off and upcasts bf16 views), so the
    strategies' logits are float32's bit for bit. From views the encoder rounded to bf16 (what it gives
    under autocast), the logits differ from float32's by less than 0.005 in cosine units (logit x tau) on
    average, and by more at under 5% of the entries: where the rounding reorders MoCHi's hardest negatives,
    another mixture is drawn; the loss stays within 1%."""
    z1, z2, queue = _views()
    loss32, logits32 = _recorded(monkeypatch, mode, spec, z1, z2, queue, autocast=False)
    loss_ac, logits_ac = _recorded(monkeypatch, mode, spec, z1, z2, queue, autocast=True)
    assert loss_ac.dtype == torch.float32 and torch.equal(loss_ac, loss32)
    assert len(logits_ac) == len(logits32) >= 2
    for a, b in zip(logits_ac, logits32, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)
    rounded = [t.bfloat16() for t in (z1, z2, queue)]
    loss16, logits16 = _recorded(monkeypatch, mode, spec, *rounded, autocast=True)
    assert loss16.dtype == torch.float32
    for a, b in zip(logits16, logits32, strict=True):
        finite = torch.isfinite(b)
        assert torch.equal(torch.isfinite(a), finite)
        cosines = (a[finite] - b[finite]).abs() * TAU
        assert cosines.mean() < 0.005 and (cosines > 0.005).float().mean() < 0.05
    assert float(loss32) > 0.1 and abs(float(loss16) - float(loss32)) < 0.01 * float(loss32)


# ------------------------------------------------------------------------------- the two trainers
def test_the_text_loss_under_autocast_matches_float32(
    tiny_text_config, wiki_sentences, one_torch_thread
) -> None:
    """The text trainer's step on real sentences with the shared bert-mini: views, loss and gradient of the
    encoder's forward under bf16 autocast against float32 (no dropout, so both see the same network)."""
    from hardmix.text.config import build_text_config
    from hardmix.text.task import TextTask, forward_views
    from tests.conftest import require_data_path

    cfg = copy.deepcopy(tiny_text_config)
    cfg["model"]["name_or_path"] = str(require_data_path("models", "bert-mini-wiki-mlm"))
    task = TextTask(build_text_config(cfg), Runtime(CPU, precision="bf16"))
    task.check()
    task.build()
    task.net.eval()
    tok = task.net.tokenizer
    batch = dict(tok(wiki_sentences[:32], padding=True, truncation=True, max_length=32, return_tensors="pt"))
    results = {}
    for precision in ("fp32", "bf16"):
        task.runtime = Runtime(CPU, precision=precision)
        task.net.zero_grad()
        with task.runtime.autocast():
            z1, z2 = forward_views(task.net, batch)
        out = contrastive.ContrastiveLoss(0.05).in_batch(z1[:16], z2[16:])
        out.loss.backward()
        grad = torch.cat([p.grad.flatten() for p in task.net.parameters() if p.grad is not None])
        results[precision] = (z1.detach().float(), out.loss.detach(), grad)
    (z32, loss32, grad32), (z16, loss16, grad16) = results["fp32"], results["bf16"]
    assert loss16.dtype == torch.float32
    assert F.cosine_similarity(z16, z32).min() > 0.99
    assert abs(float(loss16) - float(loss32)) < 0.02 * float(loss32)
    assert F.cosine_similarity(grad16, grad32, dim=0) > 0.95


def test_the_vision_loss_under_autocast_matches_float32(cifar_tree, vision_one_thread) -> None:
    """MoCo's step on real CIFAR-10 images: the loss under bf16 autocast against float32 from the same
    weights and queue; the loss and the queue stay float32."""
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor

    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.moco import MoCo

    files = sorted(Path(cifar_tree, "train").rglob("*.jpg"))[:32]
    images = torch.stack([pil_to_tensor(Image.open(f).convert("RGB")).float() / 255 for f in files])
    images = (images - 0.45) / 0.25
    torch.manual_seed(0)
    net, dim = build_backbone("resnet10", width=8, small_stem=True)
    moco32 = MoCo(
        net,
        dim,
        proj_hidden=64,
        proj_dim=32,
        queue_size=128,
        bn_splits=2,
        queue_generator=torch.Generator().manual_seed(1),
    )
    moco16 = copy.deepcopy(moco32)
    losses = {}
    for name, moco, dtype in (("fp32", moco32, None), ("bf16", moco16, torch.bfloat16)):
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = moco(
                images[:16],
                images[16:],
                torch.arange(16),
                ContrastiveLoss(0.2),
                momentum=0.99,
                generator=torch.Generator().manual_seed(5),
            )
        out.loss.backward()
        losses[name] = out.loss.detach()
        assert out.loss.dtype == torch.float32 and moco.queue.keys.dtype == torch.float32
    assert abs(float(losses["bf16"]) - float(losses["fp32"])) < 0.02 * float(losses["fp32"])
    # the keys that entered the queue: the same images, encoded in bf16 against float32
    new16, new32 = moco16.queue.keys[:16], moco32.queue.keys[:16]
    assert F.cosine_similarity(new16, new32).min() > 0.99


# ------------------------------------------------------------------------ a resume across the choice
def _record(run: Path) -> tuple[str, str, list[float]]:
    saved = yaml.safe_load((run / "config.yaml").read_text())["train"]["precision"]
    results = json.loads((run / "results.json").read_text())
    losses = [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    return saved, results["precision"], losses


@pytest.mark.parametrize("modality", ["text", "vision"])
def test_a_resume_across_the_choice_of_auto_keeps_the_runs_precision(
    monkeypatch, tmp_path, modality, tiny_text_config, tiny_vision_config, one_torch_thread
) -> None:
    """A run started with ``auto`` on a bf16 CPU and resumed with ``auto`` on a CPU without it continues
    in the precision it started in (text: bf16; vision, whose bf16 is not shown equal: fp32), exactly as
    the uninterrupted run in that precision; results.json and config.yaml say which."""
    if modality == "text":
        from hardmix.text.config import build_text_config as build
        from hardmix.text.task import TextTask as task

        base = copy.deepcopy(tiny_text_config)
        base["train"].update(max_steps=6, save_steps=2)
    else:
        from hardmix.config.loader import build_config
        from hardmix.vision.config import VisionConfig
        from hardmix.vision.task import VisionTask as task

        def build(d):
            return build_config(VisionConfig, d)

        base = tiny_vision_config(train={"epochs": 1, "save_steps": 2})
        base["train"]["max_steps"] = 6

    def cfg(**train):
        d = copy.deepcopy(base)
        d["train"].update(train)
        return build(d)

    expected = "bf16" if task.about(cfg()).auto_bf16() else "fp32"  # the tiny configs run `none`
    assert expected == {"text": "bf16", "vision": "fp32"}[modality]
    run_training(task, cfg(precision=expected), tmp_path / "whole")
    monkeypatch.setattr(runtime_module, "cpu_bf16_flags", lambda: ("avx512_bf16",))
    part = run_training(task, cfg(precision="auto", stop_after_steps=2), tmp_path / "parts")
    assert part["precision"] == expected and not part["finished"]
    monkeypatch.setattr(runtime_module, "cpu_bf16_flags", lambda: ())  # "another machine"
    done = run_training(task, cfg(precision="auto"), tmp_path / "parts", resume=True)
    assert done["finished"] and done["precision"] == expected
    whole, parts = _record(tmp_path / "whole"), _record(tmp_path / "parts")
    assert parts[:2] == (expected, expected) and parts == whole
    # an explicit other precision on --resume is refused, naming the key
    other = "fp32" if expected == "bf16" else "bf16"
    with pytest.raises(ConfigError, match="train.precision"):
        run_training(task, cfg(precision=other, stop_after_steps=4), tmp_path / "parts", resume=True)


# --------------------------------------------------------------------- evaluation stays float32
def test_a_bf16_run_evaluates_in_float32(monkeypatch, tmp_path, tiny_text_config, tiny_vision_config,
                                         one_torch_thread) -> None:
    """The scores of a bf16 run (selection and held-out) come from float32 embeddings, outside autocast:
    comparable with the published ones and with fp32 runs'."""
    import hardmix.text.model as text_model
    import hardmix.vision.evaluation as vision_evaluation
    from hardmix.config.loader import build_config
    from hardmix.text.config import build_text_config
    from hardmix.text.task import TextTask
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.task import VisionTask

    seen: list[tuple[bool, torch.dtype]] = []
    real_features = vision_evaluation.extract_features

    def features(*args, **kwargs):
        out = real_features(*args, **kwargs)
        seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
        return out

    monkeypatch.setattr(vision_evaluation, "extract_features", features)
    d = tiny_vision_config(train={"epochs": 1, "precision": "bf16"}, data={"val_samples": 60},
                           eval={"at_end": True, "final_scores": ["knn_top1"]})
    record = run_training(VisionTask, build_config(VisionConfig, d), tmp_path / "vision")
    assert record["precision"] == "bf16" and "knn_top1" in record["final_scores"]
    assert len(seen) >= 3 and set(seen) == {(False, torch.float32)}

    seen.clear()
    real_encode = text_model.ContrastiveSentenceModel.encode

    def encode(self, *args, **kwargs):
        out = real_encode(self, *args, **kwargs)
        seen.append((torch.is_autocast_enabled("cpu"), torch.as_tensor(out).dtype))
        return out

    monkeypatch.setattr(text_model.ContrastiveSentenceModel, "encode", encode)
    cfg = copy.deepcopy(tiny_text_config)
    cfg["train"].update(precision="bf16", max_steps=2)
    cfg["eval"].update(eval_steps=1)
    record = run_training(TextTask, build_text_config(cfg), tmp_path / "text")
    assert record["precision"] == "bf16" and record["best_score"] is not None
    assert len(seen) >= 2 and set(seen) == {(False, torch.float32)}


def test_auto_runs_bf16_only_for_the_strategies_it_was_shown_for(monkeypatch, tmp_path, tiny_text_config,
                                                                   one_torch_thread) -> None:
    """Text's bf16 was shown to give fp32's answers for SimCSE (``none``) only: on a CPU with native bf16,
    ``auto`` trains ``none`` in bf16 and MixCSE (alone, or after ``none`` in a list) in fp32, and each run's
    records say which."""
    import hardmix.training.runtime as runtime_module
    from hardmix.text.config import build_text_config
    from hardmix.text.task import TextTask
    from hardmix.training.engine import run_training

    monkeypatch.setattr(runtime_module, "cpu_bf16_flags", lambda: ("avx512_bf16",))
    for name, strategies, expected in (("none", [{"name": "none"}], "bf16"),
                                       ("mixcse", [{"name": "mixcse"}], "fp32"),
                                       ("both", [{"name": "none"}, {"name": "mixcse"}], "fp32")):
        d = copy.deepcopy(tiny_text_config)
        d["train"].update(max_steps=1, precision="auto")
        d["loss"]["strategies"] = strategies
        record = run_training(TextTask, build_text_config(d), tmp_path / name)
        assert record["precision"] == expected, name
        assert _record(tmp_path / name)[0] == expected
