"""The bad-input table: one row per input tried, for every command; ``docs/reliability.md`` is rendered
from it (``python -m tests.reliability.cases`` rewrites it; ``test_doc.py`` fails when it differs).

A case's ``setup`` builds the input under a fresh folder and returns the command line; the runner
(``test_bad_inputs.py``) calls ``hardmix.cli.main`` in-process and checks: a non-zero exit status, exactly
one ``hardmix: error:`` line holding every ``expect`` substring (``{name}`` fields are filled from
``ctx.vars``), no traceback, and every protected file byte-identical afterwards. An ``accepted`` case must
exit 0 instead, and its ``check`` says what it did.
"""

from __future__ import annotations

import copy
import errno
import io
import json
import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


class Ctx:
    """What a case's setup works with: a fresh folder, monkeypatch, the pytest fixtures, the message
    fields (``vars``) and the files that must survive the command byte-identical (``protect``)."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
        self.tmp = tmp
        self.mp = monkeypatch
        self.request = request
        self.vars: dict[str, str] = {"tmp": str(tmp)}
        self.protected: dict[Path, bytes] = {}

    def fixture(self, name: str) -> Any:
        return self.request.getfixturevalue(name)

    def write(self, name: str, content: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        self.vars[Path(name).stem.replace("-", "_")] = str(path)
        return path

    def protect(self, path: Path) -> None:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        assert files, f"nothing to protect under {path}"
        for f in files:
            self.protected[f] = f.read_bytes()

    def damaged(self) -> list[str]:
        return [str(p) for p, data in self.protected.items() if not p.is_file() or p.read_bytes() != data]


@dataclass(frozen=True)
class Case:
    """One input tried. ``expect``: substrings of the one error line (or, for an accepted case, a note
    for the table); ``check``: what an accepted case must have done."""

    name: str
    command: str
    tried: str
    setup: Callable[[Ctx], list[str]]
    expect: tuple[str, ...] = ()
    accepted: bool = False
    check: Callable[[Ctx, str], None] | None = None
    marks: tuple[Any, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------------------------------ helpers
def text_config(ctx: Ctx, **sections: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(ctx.fixture("tiny_text_config"))
    cfg["train"].update({"max_steps": 1, "threads": 1})
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def config_file(ctx: Ctx, cfg: dict[str, Any], name: str = "config.yaml") -> Path:
    return ctx.write(name, yaml.safe_dump(cfg))


def train_text(ctx: Ctx, cfg: dict[str, Any], *extra: str) -> list[str]:
    ctx.vars["run"] = str(ctx.tmp / "run")
    return ["train", "text", str(config_file(ctx, cfg)), "--output", str(ctx.tmp / "run"), *extra]


def image(kind: str, seed: int) -> bytes:
    """A real 32x32 PNG: ``rgb``, ``gray`` (mode L), ``rgba``; ``corrupt`` (PNG header, then garbage) and
    ``empty`` (zero bytes)."""
    from PIL import Image

    if kind == "empty":
        return b""
    if kind == "corrupt":
        return b"\x89PNG\r\n\x1a\n" + bytes(np.random.default_rng(seed).integers(0, 256, 200, dtype=np.uint8))
    rng = np.random.default_rng(seed)
    channels = {"rgb": 3, "gray": 1, "rgba": 4}[kind]
    pixels = rng.integers(0, 256, (32, 32, channels), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels[..., 0] if channels == 1 else pixels).save(buf, format="PNG")
    return buf.getvalue()


def image_tree(root: Path, classes: dict[str, list[str]], splits: tuple[str, ...] = ("train",)) -> Path:
    """``root/<split>/<class>/<i>.png`` with the listed kinds of image (``notes.txt``: a text file)."""
    for split in splits:
        for c, kinds in classes.items():
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i, kind in enumerate(kinds):
                if kind == "text":
                    (d / "notes.txt").write_text("not an image\n")
                else:
                    (d / f"{i}.png").write_bytes(image(kind, hash((split, c, i)) % 2**32))
    return root


def rgb_classes(n_classes: int = 2, per_class: int = 8) -> dict[str, list[str]]:
    return {f"c{k}": ["rgb"] * per_class for k in range(n_classes)}


def vision_config(ctx: Ctx, dataset: Path | str, **sections: dict[str, Any]) -> dict[str, Any]:
    from tests.conftest import tiny_vision_config_dict

    cfg = tiny_vision_config_dict(Path(dataset), ctx.tmp / "cache", data={"num_workers": 0},
                                  train={"batch_size": 8, "max_steps": 1, "save_steps": 0},
                                  loss={"queue_size": 16}, eval={"at_end": False})
    cfg["data"]["dataset"] = str(dataset)
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def train_vision(ctx: Ctx, cfg: dict[str, Any], *extra: str) -> list[str]:
    ctx.vars["run"] = str(ctx.tmp / "run")
    return ["train", "vision", str(config_file(ctx, cfg)), "--output", str(ctx.tmp / "run"), *extra]


def vision_with(ctx: Ctx, classes: dict[str, list[str]]) -> list[str]:
    tree = image_tree(ctx.tmp / "images", classes)
    ctx.vars["images"] = str(tree / "train")
    return train_vision(ctx, vision_config(ctx, tree))


def unlabeled_images(ctx: Ctx, top: int = 6, nested: int = 6, **data: Any) -> list[str]:
    """``images/`` with ``top`` RGB PNGs at its top level and ``nested`` in ``images/a/b/``: unlabeled."""
    root = ctx.tmp / "images"
    for i in range(top + nested):
        d = root if i < top else root / "a" / "b"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i}.png").write_bytes(image("rgb", i))
    ctx.vars["images"] = str(root)
    return train_vision(ctx, vision_config(ctx, root, data=data))


def neighbours_of(ctx: Ctx, *query: str) -> list[str]:
    """``neighbours`` over a 3-row embeddings file listing ``a.jpg``, ``b.jpg``, ``c.jpg``."""
    emb = ctx.tmp / "emb.npy"
    np.save(emb, np.eye(3, dtype=np.float32))
    ctx.write("emb.paths.txt", "a.jpg\nb.jpg\nc.jpg\n")
    ctx.vars["listing"] = str(ctx.tmp / "emb.paths.txt")
    ctx.protect(emb)
    return ["neighbours", str(emb), *query]


def finished_one_step(ctx: Ctx, err: str) -> None:
    record = json.loads((ctx.tmp / "run" / "results.json").read_text())
    assert record["finished"] and record["steps"] == 1, record


def no_data_root(ctx: Ctx) -> None:
    """HARDMIX_DATA unset and the per-user default root absent (HOME and XDG_CACHE_HOME in the tmp
    folder)."""
    ctx.mp.delenv("HARDMIX_DATA", raising=False)
    ctx.mp.setenv("HOME", str(ctx.tmp / "home"))
    ctx.mp.setenv("XDG_CACHE_HOME", str(ctx.tmp / "xdg"))
    ctx.vars["default_root"] = str(ctx.tmp / "xdg" / "hardmix" / "data")


def raise_for(ctx: Ctx, module: Any, name: str, under: Path, exc: Callable[[str], OSError]) -> None:
    """Patch ``module.name`` (an OS call taking a path first) to raise ``exc(path)`` for paths under
    ``under`` (a permission problem or a full disk, which the root user of CI cannot be given)."""
    real = getattr(module, name)

    def patched(path: Any, *args: Any, **kwargs: Any) -> Any:
        p = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
        if p is not None and os.path.abspath(p).startswith(str(under)):
            raise exc(p)
        return real(path, *args, **kwargs)

    ctx.mp.setattr(module, name, patched)


def denied(path: str) -> OSError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


class _FullDiskFile(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk_open(path: Any, *args: Any, **kwargs: Any) -> io.StringIO:
    """``open`` on a full disk: every write fails with ENOSPC, naming no file (as the OS's does)."""
    return _FullDiskFile()


def _full_disk(fd: int) -> None:
    """``os.fsync`` on a full disk: ENOSPC, naming no file (as a failing write does)."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class Exploit:
    """A pickle that would create ``marker`` when loaded unsafely."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def checkpoint_file(ctx: Ctx, kind: str) -> Path:
    """A file where a checkpoint is expected: ``text`` (a real text checkpoint header), ``v1`` (an older
    format version), ``notckpt`` (plain text), ``exploit`` (code-running pickle), ``truncated`` (the first
    half of a real vision checkpoint)."""
    import torch

    from hardmix.training.checkpoint import FORMAT, save_checkpoint

    path = ctx.tmp / "ckpt" / "checkpoint.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "text":
        save_checkpoint({"step": 1, "config": {}, "model": {}}, path, task="text")
    elif kind == "v1":
        torch.save({"format": FORMAT, "version": 1, "task": "vision"}, path)
    elif kind == "notckpt":
        path.write_text("step: 3\n")
    elif kind == "exploit":
        ctx.vars["marker"] = str(ctx.tmp / "pwned")
        with open(path, "wb") as f:
            pickle.dump({"format": FORMAT, "x": Exploit(ctx.tmp / "pwned")}, f, protocol=2)
    elif kind == "truncated":
        data = (Path(ctx.fixture("vision_run")) / "checkpoint.pt").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    ctx.vars["ckpt"] = str(path)
    ctx.protect(path)
    return path


def eval_images(ctx: Ctx, classes: dict[str, list[str]] | None = None) -> Path:
    return image_tree(ctx.tmp / "evalset", classes or rgb_classes(2, 6), splits=("train", "test"))


def knn(ctx: Ctx, checkpoint: Path | str, dataset: Path | str, *extra: str) -> list[str]:
    return ["eval", "knn", str(checkpoint), "--dataset", str(dataset), "--device", "cpu", "--k", "3", *extra]


def linear(ctx: Ctx, checkpoint: Path | str, dataset: Path | str, *extra: str) -> list[str]:
    return ["eval", "linear", str(checkpoint), "--dataset", str(dataset), "--device", "cpu", "--epochs", "1",
            *extra]


def encode(ctx: Ctx, model: str, stdin: bytes, *extra: str) -> list[str]:
    ctx.mp.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    out = ctx.tmp / "emb.npy"
    ctx.vars["emb"] = str(out)
    return ["encode", model, "--output", str(out), *extra]


def compare_spec(ctx: Ctx, spec: dict[str, Any] | str) -> list[str]:
    text = spec if isinstance(spec, str) else yaml.safe_dump(spec)
    path = ctx.write("spec.yaml", text)
    ctx.vars["out"] = str(ctx.tmp / "cmp")
    return ["compare", str(path), "--output", str(ctx.tmp / "cmp"), "--print-commands"]


def good_spec(ctx: Ctx, **changes: Any) -> dict[str, Any]:
    path = config_file(ctx, text_config(ctx, eval={"at_end": True}), "text.yaml")
    spec: dict[str, Any] = {"seeds": [1], "baseline": "none",
                            "strategies": {"none": [{"name": "none"}], "mixcse": [{"name": "mixcse"}]},
                            "tasks": {"text": {"config": str(path), "score": "stsb_dev",
                                                     "allow_selection_score": True}}}
    spec.update(changes)
    return spec


def compare_through_link(ctx: Ctx, where: str) -> list[str]:
    """A one-cell comparison whose new ``--output`` holds a link planted by the user: ``logs`` or ``plots``
    (a folder of the user's, holding ``notes.txt``), or ``logs/text-none-seed1.log`` (a file of the
    user's); the user's files are protected and nothing may be added next to them."""
    outside = ctx.tmp / "users_files"
    ctx.write("users_files/notes.txt", "keep me\n")
    ctx.protect(outside)
    out = ctx.tmp / "cmp"
    (out / "logs").mkdir(parents=True)
    if where == "cell log":
        (out / "logs" / "text-none-seed1.log").symlink_to(outside / "notes.txt")
    else:
        (out / "logs").rmdir()
        (out / where).symlink_to(outside)
    spec = ctx.write("spec.yaml", yaml.safe_dump(good_spec(ctx, strategies={"none": [{"name": "none"}]})))
    ctx.vars["out"] = str(out)
    return ["compare", str(spec), "--output", str(out), "--threads", "1"]


def nothing_added_beside(ctx: Ctx, err: str) -> None:
    """The user's folder holds what it held (its files byte-identical: ``protect``)."""
    assert sorted(p.name for p in (ctx.tmp / "users_files").iterdir()) == ["notes.txt"], err


def previous_text_run(ctx: Ctx) -> Path:
    """A run folder stopped after 1 of 2 steps (a real checkpoint), protected."""
    from hardmix.cli import main

    cfg = text_config(ctx, train={"max_steps": 2, "stop_after_steps": 1})
    argv = train_text(ctx, cfg)
    assert main(argv) != 1
    ctx.protect(ctx.tmp / "run")
    return ctx.tmp / "run"


def _output_is_the_model(ctx: Ctx) -> list[str]:
    model = ctx.tmp / "model"
    shutil.copytree(ctx.fixture("tiny_bert_dir"), model)
    ctx.protect(model)
    ctx.vars.update(model=str(model), model_files=" ".join(sorted(p.name for p in model.iterdir())))
    cfg = text_config(ctx, model={"name_or_path": str(model)})
    return ["train", "text", str(config_file(ctx, cfg)), "--output", str(model)]


def _output_is_the_images(ctx: Ctx) -> list[str]:
    tree = image_tree(ctx.tmp / "images", rgb_classes())
    ctx.protect(tree)
    ctx.vars["images"] = str(tree)
    return ["train", "vision", str(config_file(ctx, vision_config(ctx, tree))), "--output", str(tree)]


def _text_unknown_key(ctx: Ctx) -> list[str]:
    return train_text(ctx, text_config(ctx, train={"bogus": 1}))


def _text_set(ctx: Ctx, *items: str) -> list[str]:
    argv = train_text(ctx, text_config(ctx))
    for item in items:
        argv += ["--set", item]
    return argv


def no_step(ctx: Ctx, err: str) -> None:
    """Refused before work: no training step ran (no loss line in the run's metrics)."""
    metrics = ctx.tmp / "run" / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    assert not any('"loss"' in line for line in lines), lines


def own_corpus(ctx: Ctx) -> Path:
    """A copy of the tiny corpus in the case's folder (to change between a run and its resume)."""
    return ctx.write("corpus.txt", Path(ctx.fixture("tiny_corpus")).read_text(encoding="utf-8"))


def killed_before_checkpoint(ctx: Ctx, cfg: dict[str, Any]) -> None:
    """A run folder as a kill before the first checkpoint leaves it: its config and one metrics line."""
    run = ctx.tmp / "run"
    run.mkdir()
    from hardmix.training.api import load_config_for
    from hardmix.training.config import plain_config

    (run / "config.yaml").write_text(yaml.safe_dump(plain_config(load_config_for("text", cfg)),
                                                    sort_keys=False))
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "lo')  # cut mid-line


def resume_on_changed_corpus(ctx: Ctx) -> list[str]:
    corpus = own_corpus(ctx)
    from hardmix.cli import main

    cfg = text_config(ctx, data={"train_file": str(corpus)}, train={"max_steps": 2, "stop_after_steps": 1})
    argv = train_text(ctx, cfg)
    assert main(argv) != 1
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    corpus.write_text("".join(["a sentence that was not there .\n", *lines[1:]]), encoding="utf-8")
    ctx.protect(ctx.tmp / "run")
    return [*argv, "--resume"]


def resume_on_changed_images(ctx: Ctx) -> list[str]:
    from hardmix.cli import main

    tree = image_tree(ctx.tmp / "images", rgb_classes(2, 8))
    argv = train_vision(ctx, vision_config(ctx, tree, train={"max_steps": 2, "stop_after_steps": 1}))
    assert main(argv) != 1
    (tree / "train" / "c1" / "extra.png").write_bytes(image("rgb", 99))
    ctx.protect(ctx.tmp / "run")
    return [*argv, "--resume"]


def stored_png(seed: int) -> bytes:
    """A real 32x32 RGB PNG stored without compression: its size is the same whatever its pixels."""
    from PIL import Image

    buf = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, format="PNG", compress_level=0)
    return buf.getvalue()


def resume_on_an_image_rewritten_at_the_same_size(ctx: Ctx, keep_mtime: bool) -> list[str]:
    """An unfinished vision run, then one training image rewritten in place (the same inode) with other
    pixels at the same byte size, its modification time put back (``keep_mtime``) or not."""
    from hardmix.cli import main

    tree = image_tree(ctx.tmp / "images", rgb_classes(2, 8))
    target = tree / "train" / "c0" / "0.png"
    target.write_bytes(stored_png(1))
    argv = train_vision(ctx, vision_config(ctx, tree, train={"max_steps": 2, "stop_after_steps": 1}))
    assert main(argv) != 1
    before = target.stat()
    with open(target, "r+b") as f:
        f.write(stored_png(2))
    assert target.stat().st_size == before.st_size and target.stat().st_ino == before.st_ino
    if keep_mtime:
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    ctx.protect(ctx.tmp / "run")
    return [*argv, "--resume"]


def resume_with_a_relative_model_from_another_folder(ctx: Ctx) -> list[str]:
    """An unfinished text run of ``model.name_or_path: tiny-bert`` (relative) started in one working folder,
    resumed from another that holds another ``tiny-bert`` (the same shapes, other weights)."""
    import shutil

    import torch
    from transformers import BertModel

    from hardmix.cli import main

    first, second = ctx.tmp / "first" / "tiny-bert", ctx.tmp / "second" / "tiny-bert"
    shutil.copytree(ctx.fixture("tiny_bert_dir"), first)
    shutil.copytree(first, second)
    model = BertModel.from_pretrained(second)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    model.save_pretrained(second)
    ctx.mp.chdir(first.parent)
    argv = train_text(ctx, text_config(ctx, model={"name_or_path": "tiny-bert"},
                                       train={"max_steps": 2, "stop_after_steps": 1}))
    assert main(argv) != 1
    ctx.protect(ctx.tmp / "run")
    ctx.mp.chdir(second.parent)
    ctx.vars["second"] = str(second.parent)
    return [*argv, "--resume"]


def stopped_vision_run(ctx: Ctx) -> Path:
    from hardmix.cli import main

    tree = image_tree(ctx.tmp / "images", rgb_classes(2, 8))
    cfg = vision_config(ctx, tree, train={"max_steps": 2, "stop_after_steps": 1})
    assert main(train_vision(ctx, cfg)) != 1
    ctx.protect(ctx.tmp / "run")
    return ctx.tmp / "run"


def altered_vision_run(ctx: Ctx, kind: str) -> Path:
    """A copy of the finished one-step vision run, unfinished (no ``results.json``, so ``--resume`` loads
    its checkpoint), whose checkpoint's query backbone is altered: ``partial`` keeps 3 of its tensors (the
    file a cut-short copy or a foreign tool leaves), ``reshaped`` gives its first convolution another
    shape. Valid checkpoints otherwise (header, version, CRC)."""
    import shutil

    import torch

    from hardmix.training.checkpoint import read_checkpoint_file, save_checkpoint

    run = ctx.tmp / f"{kind}-run"
    shutil.copytree(Path(ctx.fixture("vision_run")), run)
    (run / "results.json").unlink()
    path = run / "checkpoint.pt"
    state = read_checkpoint_file(path)
    model = state["model"]
    backbone = [k for k in model if k.startswith("encoder_q.backbone.")]
    if kind == "partial":
        for k in backbone[3:]:
            del model[k]
    else:
        first = next(k for k in backbone if model[k].ndim == 4)
        model[first] = torch.zeros(*model[first].shape[:-1], model[first].shape[-1] + 2)
    save_checkpoint(state, path, task="vision")
    ctx.vars.update(run=str(run), ckpt=str(path), backbone_tensors=str(len(backbone)))
    ctx.protect(run)
    return run


def altered_text_model(ctx: Ctx, kind: str) -> Path:
    """A copy of the tiny model folder whose ``model.safetensors`` holds 3 of its tensors (``partial``) or
    one of another shape (``reshaped``): a readable file that does not match the model's config."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    folder = ctx.tmp / f"{kind}-model"
    shutil.copytree(Path(ctx.fixture("tiny_bert_dir")), folder)
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    names = list(tensors)
    if kind == "partial":
        tensors = {k: tensors[k] for k in names[:3]}
    else:
        name = next(k for k in names if k.endswith("query.weight"))
        tensors[name] = torch.zeros(tensors[name].shape[0] // 2, tensors[name].shape[1])
    save_file(tensors, weights, metadata={"format": "pt"})
    ctx.vars.update({f"{kind}_model": str(folder), f"{kind}_weights": str(weights)})
    ctx.protect(folder)
    return folder


def text_run_with_partial_checkpoint(ctx: Ctx) -> list[str]:
    """``--resume`` of a text run stopped after 1 of 2 steps whose checkpoint lost one model tensor."""
    from hardmix.training.checkpoint import read_checkpoint_file, save_checkpoint

    run = previous_text_run(ctx)
    path = run / "checkpoint.pt"
    state = read_checkpoint_file(path)
    state["model"].pop(next(iter(state["model"])))
    save_checkpoint(state, path, task="text")
    ctx.vars["ckpt"] = str(path)
    ctx.protect(run)
    return ["train", "text", str(ctx.tmp / "config.yaml"), "--output", str(run), "--resume"]


def nothing_written(path: str) -> Callable[[Ctx, str], None]:
    """A check: the command's output ``path`` (a var of the case) does not exist."""
    return lambda c, err: _assert_equal(Path(c.vars[path]).exists(), False)


def lab_image(ctx: Ctx) -> list[str]:
    from PIL import Image

    tree = image_tree(ctx.tmp / "images", rgb_classes(2, 8))
    lab = Image.frombytes("LAB", (32, 32), bytes(range(256)) * 12)
    lab.save(tree / "train" / "c0" / "odd.tif")
    return train_vision(ctx, vision_config(ctx, tree))


def lab_image_pil(ctx: Ctx) -> list[str]:
    lab_image(ctx)
    cfg = vision_config(ctx, ctx.tmp / "images", data={"num_workers": 0, "pipeline": "pil"})
    return train_vision(ctx, cfg)


def link_loop(ctx: Ctx) -> list[str]:
    tree = image_tree(ctx.tmp / "images", rgb_classes(2, 8))
    (tree / "train" / "c0" / "again").symlink_to(tree / "train" / "c0", target_is_directory=True)
    return train_vision(ctx, vision_config(ctx, tree))


def json_onto_the_checkpoint(ctx: Ctx) -> list[str]:
    run = Path(ctx.fixture("vision_run"))
    ctx.protect(run)
    ctx.vars["ckpt"] = str(run / "checkpoint.pt")
    return knn(ctx, run, eval_images(ctx), "--json", str(run / "checkpoint.pt"))


def fifo_corpus(ctx: Ctx) -> list[str]:
    fifo = ctx.tmp / "fifo.txt"
    os.mkfifo(fifo)
    ctx.vars["fifo"] = str(fifo)
    return train_text(ctx, text_config(ctx, data={"train_file": str(fifo)}))


# --------------------------------------------------------------------------------------------- table
CASES: list[Case] = [
    # ---- config files
    Case("config-missing", "train text", "a config file that does not exist",
         lambda c: ["train", "text", str(c.tmp / "nope.yaml")],
         ("config file", "nope.yaml", "does not exist")),
    Case("config-empty", "train text", "an empty config file (every default: bert-base-uncased, offline)",
         lambda c: (c.mp.setenv("HF_HUB_OFFLINE", "1"), ["train", "text", str(c.write("empty.yaml", ""))])[1],
         ("wiki1m", "hardmix data download wiki1m", "HARDMIX_DATA")),
    Case("config-not-yaml", "train text", "a config file that is not YAML (an unclosed bracket)",
         lambda c: ["train", "text", str(c.write("bad.yaml", "train:\n  lr: [1, 2\n"))],
         ("{bad}", "line 3: invalid YAML", "expected ',' or ']'")),
    Case("config-not-utf8", "train text", "a config file in Latin-1",
         lambda c: ["train", "text", str(c.write("latin.yaml", b"output: caf\xe9\n"))],
         ("{latin}", "not UTF-8")),
    Case("config-is-a-folder", "train vision", "a folder given as the config",
         lambda c: ["train", "vision", str(c.tmp)], ("{tmp}", "not a file")),
    Case("config-not-mapping", "train vision", "a config file holding a list",
         lambda c: ["train", "vision", str(c.write("list.yaml", "- a\n- b\n"))],
         ("{list}", "must be a mapping")),
    Case("config-duplicate-key", "train text", "a config file giving `train.lr` twice (lines 2 and 4)",
         lambda c: ["train", "text", str(c.write("dup.yaml",
                                                 "train:\n  lr: 0.1\n  max_steps: 2\n  lr: 0.2\n"))],
         ("{dup}", "line 4", "'lr' is given twice (first on line 2)")),
    Case("config-seed-too-large", "train text", "`train.seed: 4294967296` (beyond the generators' 32 bits)",
         lambda c: train_text(c, text_config(c, train={"seed": 2**32})),
         ("train.seed", "above the maximum 4294967295")),
    Case("config-unknown-key", "train text", "an unknown key `train.bogus`", _text_unknown_key,
         ("{config}", "unknown key train.bogus", "known keys of train")),
    Case("config-unknown-section", "train vision", "an unknown section `optim`",
         lambda c: train_vision(c, vision_config(c, c.tmp, optim={"lr": 1})), ("unknown key optim",)),
    Case("config-wrong-type", "train text", "`train.lr: fast`",
         lambda c: train_text(c, text_config(c, train={"lr": "fast"})), ("train.lr", "expected a number")),
    Case("config-wrong-type-vision", "train vision", "`model.width: wide`",
         lambda c: train_vision(c, vision_config(c, c.tmp, model={"width": "wide"})),
         ("model.width", "expected an integer")),
    Case("config-out-of-range", "train text", "`train.batch_size: 1`",
         lambda c: train_text(c, text_config(c, train={"batch_size": 1})), ("train.batch_size", "minimum 2")),
    Case("config-out-of-range-vision", "train vision", "`loss.temperature: 0`",
         lambda c: train_vision(c, vision_config(c, c.tmp, loss={"temperature": 0})),
         ("loss.temperature", "below the minimum 0.0001")),
    Case("config-temperature-underflow", "train text", "`--set loss.temperature=1.0e-300` (it trained, then "
         "stopped on a NaN loss advising a lower `train.lr`)",
         lambda c: _text_set(c, "loss.temperature=1.0e-300"),
         ("loss.temperature", "below the minimum 0.0001")),
    Case("config-knn-k-above-bank", "train vision", "`eval.knn_k: 200` with `eval.knn_train_samples: 50` "
         "(it ran, every image of the bank voting: a score of another k)",
         lambda c: train_vision(c, vision_config(c, c.tmp, eval={"knn_k": 200, "knn_train_samples": 50})),
         ("eval.knn_k", "200 neighbours from a bank of eval.knn_train_samples=50")),
    Case("config-nan", "train text", "`--set train.weight_decay=.nan` (YAML's NaN)",
         lambda c: _text_set(c, "train.weight_decay=.nan"),
         ("train.weight_decay", "expected a finite number")),
    Case("config-bad-choice", "train text", "`train.precision: fp8`",
         lambda c: train_text(c, text_config(c, train={"precision": "fp8"})), ("train.precision", "fp8")),
    Case("strategy-unknown", "train text", "a strategy list naming `mixup` (not a strategy)",
         lambda c: train_text(c, text_config(c, loss={"strategies": [{"name": "mixup"}]})),
         ("loss.strategies[0]", "mixup")),
    Case("strategy-bad-argument", "train text", "`mixcse` with `lam: 1.5`",
         lambda c: train_text(c, text_config(c, loss={"strategies": [{"name": "mixcse", "lam": 1.5}]})),
         ("loss.strategies[0].lam",)),
    Case("strategy-unknown-argument", "train vision", "`mochi` with an unknown argument `n_hardest`",
         lambda c: train_vision(c, vision_config(c, c.tmp, loss={"strategies": [{"name": "mochi",
                                                                                 "n_hardest": 4}]})),
         ("loss.strategies[0]", "n_hardest")),
    Case("strategy-not-a-list", "train text", "`loss.strategies: 3`",
         lambda c: train_text(c, text_config(c, loss={"strategies": 3})), ("loss.strategies",)),
    # ---- --set
    Case("set-no-equals", "train text", "`--set train.max_steps` (no `=`)",
         lambda c: _text_set(c, "train.max_steps"), ("--set", "expected key=value")),
    Case("set-empty-key", "train text", "`--set =5`", lambda c: _text_set(c, "=5"),
         ("--set", "not a dotted name")),
    Case("set-bad-yaml", "train text", "`--set train.lr=[1,` (not YAML)",
         lambda c: _text_set(c, "train.lr=[1,"), ("--set train.lr", "cannot read value")),
    Case("set-through-a-value", "train text", "`--set train.lr.x=1` (`train.lr` is a number)",
         lambda c: _text_set(c, "train.lr.x=1"), ("train.lr is not a mapping",)),
    Case("set-unknown-key", "train text", "`--set train.bogus=1`", lambda c: _text_set(c, "train.bogus=1"),
         ("--set", "unknown key train.bogus")),
    Case("set-section-mapping", "train text", "`--set 'train={max_steps: 1}'` (a mapping for a section)",
         lambda c: train_text(c, text_config(c, train={"max_steps": 5, "lr": 0.002}), "--set",
                              "train={max_steps: 1}"),
         ("accepted: merged into `train` (its other keys kept: lr 0.002, batch 16); one step trains",),
         accepted=True, check=lambda c, err: (finished_one_step(c, err), _assert_equal(
             {k: yaml.safe_load((c.tmp / "run" / "config.yaml").read_text())["train"][k]
              for k in ("lr", "batch_size")}, {"lr": 0.002, "batch_size": 16}))[0]),
    Case("set-wrong-type", "train text", "`--set train.max_steps=many`",
         lambda c: _text_set(c, "train.max_steps=many"), ("train.max_steps", "expected an integer")),
    # ---- data roots
    Case("root-unset", "train vision", "`HARDMIX_DATA` unset, no default root, `data.dataset: cifar10`",
         lambda c: (no_data_root(c), train_vision(c, vision_config(c, "cifar10")))[1],
         ("cifar10", "{default_root}", "hardmix data download cifar10", "HARDMIX_DATA")),
    Case("root-unset-eval-text", "eval text", "`HARDMIX_DATA` unset, no default root",
         lambda c: (no_data_root(c), ["eval", "text", str(c.fixture("tiny_bert_dir"))])[1],
         ("senteval", "hardmix data download senteval")),
    Case("root-missing", "train text", "`HARDMIX_DATA` names a folder that does not exist",
         lambda c: (c.mp.setenv("HARDMIX_DATA", str(c.tmp / "nowhere")),
                    train_text(c, text_config(c, data={"train_file": "wiki/x.txt"})))[1],
         ("HARDMIX_DATA=", "nowhere", "does not exist", "unset it")),
    Case("root-is-a-file", "eval knn", "`HARDMIX_DATA` names a file",
         lambda c: (c.mp.setenv("HARDMIX_DATA", str(c.write("rootfile", "x"))),
                    knn(c, c.fixture("vision_run"), "cifar10"))[1],
         ("HARDMIX_DATA=", "rootfile", "is not a directory")),
    Case("root-unreadable", "train vision", "an image folder that cannot be listed (permission denied)",
         lambda c: (image_tree(c.tmp / "images", rgb_classes()),
                    raise_for(c, os, "scandir", c.tmp / "images", denied),
                    train_vision(c, vision_config(c, c.tmp / "images")))[2],
         ("images/train: Permission denied", "check its permissions")),
    Case("root-unreadable-corpus", "train text", "a corpus that cannot be opened (permission denied)",
         lambda c: (c.vars.update(corpus=str(c.fixture("tiny_corpus"))),
                    raise_for(c, __import__("builtins"), "open", Path(c.fixture("tiny_corpus")), denied),
                    train_text(c, text_config(c)))[2],
         ("{corpus}", "Permission denied")),
    # ---- corpora
    Case("corpus-missing", "train text", "`data.train_file` that does not exist",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.tmp / "none.txt")})),
         ("data.train_file", "none.txt", "does not exist")),
    Case("corpus-empty", "train text", "an empty corpus",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write("empty.txt", ""))})),
         ("{empty}", "no sentences")),
    Case("corpus-blank", "train text", "a corpus of blank and whitespace-only lines",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write("blank.txt",
                                                                                  "\n  \n\t\n"))})),
         ("{blank}", "no sentences")),
    Case("corpus-not-utf8", "train text", "a corpus with a Latin-1 line (line 3)",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "latin1.txt", b"one sentence .\ntwo sentences .\ncaf\xe9 au lait .\n"))})),
         ("{latin1}:3", "not valid UTF-8")),
    Case("corpus-huge-line", "train text", "a corpus of one 4 MB line",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "huge.txt", "word " * 800_000 + "\n"))})),
         ("{huge}: the corpus has 1 sentences", "lower train.batch_size")),
    Case("corpus-too-small", "train text", "5 sentences for a batch of 16",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "small.txt", "".join(f"sentence number {i} .\n" for i in range(5))))})),
         ("{small}: the corpus has 5 sentences", "fewer than one batch of 16", "lower train.batch_size")),
    Case("corpus-truncated-gzip", "train text", "a gzip corpus cut in the middle",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write("cut.gz", __import__(
             "gzip").compress(Path(c.fixture("tiny_corpus")).read_bytes())[:3000]))})),
         ("{cut}:", "not a complete gzip file", "compress it again")),
    Case("corpus-is-a-folder", "train text", "`data.train_file` naming a folder",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.tmp)})),
         ("is a folder", "data.train_file")),
    Case("corpus-old-mac-line-endings", "train text",
         "16 sentences ended by a lone carriage return (old Mac)",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "mac.txt", "".join(f"sentence {i} .\r" for i in range(16))))})),
         ("accepted: a lone CR ends a line (16 sentences), one step trains",), accepted=True,
         check=lambda c, err: (finished_one_step(c, err), _assert_in("16 sentences", err))[0]),
    Case("corpus-jsonl-bad-line", "train text", "a JSON lines corpus whose second line is cut short",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "notes.jsonl", '{"text": "one ."}\n{"text": \n'))})),
         ("{notes}:2", "not valid JSON"), check=no_step),
    Case("corpus-csv-no-column", "train text", "a CSV corpus without the `data.text_field` column",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "notes.csv", "id,body\n1,hello .\n"))})),
         ("{notes}", "no column 'text' (data.text_field)", "'body'"), check=no_step),
    Case("corpus-fifo", "train text", "`data.train_file` naming a FIFO",
         fifo_corpus, ("{fifo}", "not a regular file"), check=no_step),
    Case("corpus-blank-lines-skipped", "train text",
         "blank lines between 16 sentences", lambda c: train_text(c, text_config(c, data={
             "train_file": str(c.write("gaps.txt", "".join(f"\nsentence {i} .\n  \n" for i in range(16))))})),
         ("accepted: the blank lines are skipped (16 sentences), one step trains",), accepted=True,
         check=lambda c, err: (finished_one_step(c, err), _assert_in("16 sentences", err))[0]),
    # ---- image folders
    Case("images-no-classes", "train vision", "a training folder with no class folders",
         lambda c: ((c.tmp / "images" / "train").mkdir(parents=True),
                    c.vars.update(images=str(c.tmp / "images" / "train")),
                    train_vision(c, vision_config(c, c.tmp / "images")))[2],
         ("data.dataset", "{images}", "no class folders")),
    Case("images-empty-class", "train vision", "a class folder with no images",
         lambda c: vision_with(c, {"c0": ["rgb"] * 8, "c1": []}),
         ("data.dataset", "with no images", "c1")),
    Case("images-corrupt", "train vision", "a PNG whose data is garbage",
         lambda c: vision_with(c, {"c0": ["rgb"] * 7 + ["corrupt"], "c1": ["rgb"] * 8}),
         ("7.png", "data.skip_corrupt: true")),
    Case("images-zero-byte", "train vision", "a zero-byte PNG",
         lambda c: vision_with(c, {"c0": ["rgb"] * 8, "c1": ["empty"] + ["rgb"] * 7}),
         ("0.png", "data.skip_corrupt: true")),
    Case("images-non-image-file", "train vision", "a text file (`notes.txt`) among the images",
         lambda c: vision_with(c, {"c0": ["rgb"] * 8 + ["text"], "c1": ["rgb"] * 8}),
         ("accepted: files without an image extension are not images of the class; one step trains",),
         accepted=True, check=finished_one_step),
    Case("images-unlabeled", "train vision", "a folder with images at its top level and in nested folders, "
         "no class folders, `data.labels: false`", lambda c: unlabeled_images(c, labels=False),
         ("accepted: unlabeled, every image below it trains; one step trains",), accepted=True,
         check=finished_one_step),
    Case("images-unlabeled-labels-true", "train vision",
         "`data.labels: true` over images at the folder's top",
         lambda c: unlabeled_images(c, labels=True),
         ("data.labels: true", "{images}", "holds images at its top level")),
    Case("images-unlabeled-none", "train vision", "`data.labels: false` over a folder holding no image",
         lambda c: (c.write("images/a/notes.txt", "no image\n"),
                    c.vars.update(images=str(c.tmp / "images")),
                    train_vision(c, vision_config(c, c.tmp / "images", data={"labels": False})))[2],
         ("data.dataset", "{images}", "holds no images")),
    Case("images-unlabeled-val-all", "train vision", "`data.val_samples` as large as the unlabeled folder",
         lambda c: unlabeled_images(c, val_samples=12, labels=False),
         ("data.val_samples", "12 validation images of the 12 usable images", "{images}")),
    Case("images-gray-rgba", "train vision", "grayscale (L) and RGBA images among RGB ones",
         lambda c: vision_with(c, {"c0": ["gray"] * 4 + ["rgb"] * 4, "c1": ["rgba"] * 4 + ["rgb"] * 4}),
         ("accepted: converted to RGB; one step trains",), accepted=True, check=finished_one_step),
    Case("images-refused-mode", "train vision", "a CIE L*a*b* TIFF (`odd.tif`) among RGB PNGs",
         lab_image, ("odd.tif", "image mode LAB", "data.skip_corrupt: true"), check=no_step),
    Case("images-refused-mode-pil", "train vision",
         "the same folder decoded image by image during training (`data.pipeline: pil`)",
         lab_image_pil, ("odd.tif", "image mode LAB", "data.skip_corrupt: true"), check=no_step),
    Case("images-link-loop", "train vision", "a link in a class folder to that folder (a loop)",
         link_loop, ("c0/again links to", "a loop"), check=no_step),
    Case("images-eval-no-test-split", "train vision",
         "`eval.at_end: true` on a data set without `test/` or `val/`",
         lambda c: (c.vars.update(images=str(c.tmp / "images")), train_vision(c, vision_config(
             c, image_tree(c.tmp / "images", rgb_classes()), eval={"at_end": True},
             data={"num_workers": 0, "val_samples": 4})))[1],
         ("eval.dataset", "{images}", "has no 'test' or 'val' folder"), check=no_step),
    Case("images-one-class", "train vision", "a single class folder",
         lambda c: vision_with(c, {"c0": ["rgb"] * 16}),
         ("accepted: contrastive training needs no labels; one step trains",), accepted=True,
         check=finished_one_step),
    Case("images-one-class-knn", "eval knn", "an evaluation set of a single class",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c, {"c0": ["rgb"] * 6})),
         ("accepted: top-1 and top-5 are 100% with one class",), accepted=True,
         check=lambda c, err: _assert_in("top-1 100.00%, top-5 100.00%", err)),
    Case("images-missing-split-knn", "eval knn", "an evaluation folder without `test/` or `val/`",
         lambda c: knn(c, c.fixture("vision_run"), image_tree(c.tmp / "only-train", rgb_classes()))
         , ("only-train", "folder")),
    Case("images-missing-linear", "eval linear", "`--dataset` that does not exist",
         lambda c: linear(c, c.fixture("vision_run"), c.tmp / "nope"), ("nope", "does not exist")),
    Case("knn-k-zero", "eval knn", "`--k 0`",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c), "--k", "0"),
         ("--k: expected a positive number, got 0",)),
    Case("knn-k-beyond-bank", "eval knn", "`--k 500` with a bank of 12 images",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c))[:-2] + ["--k", "500"],
         ("accepted: the line prints the k used (k=12, of --k 500)",), accepted=True,
         check=lambda c, err: _assert_in("k-NN (k=12, of --k 500,", err)),
    Case("knn-temperature-zero", "eval knn", "`--temperature 0`",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c), "--temperature", "0"),
         ("--temperature: expected a positive number, got 0",)),
    Case("knn-batch-zero", "eval knn", "`--batch-size 0`",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c), "--batch-size", "0"),
         ("--batch-size: expected a positive number, got 0",)),
    Case("knn-no-samples", "eval knn", "`--max-train-samples 0`",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c), "--max-train-samples", "0"),
         ("--max-train-samples: expected a positive number, got 0",)),
    Case("knn-bad-device", "eval knn", "`--device gpu`",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c)) + ["--device", "gpu"],
         ("--device", "'gpu' is not a device")),
    Case("linear-epochs-zero", "eval linear", "`--epochs 0`",
         lambda c: linear(c, c.fixture("vision_run"), eval_images(c)) + ["--epochs", "0"],
         ("--epochs: expected a positive number, got 0",)),
    Case("linear-one-class", "eval linear", "an evaluation set of a single class",
         lambda c: linear(c, c.fixture("vision_run"), eval_images(c, {"c0": ["rgb"] * 6})),
         ("accepted: top-1 is 100% with one class",), accepted=True,
         check=lambda c, err: _assert_in("top-1 100.00%", err)),
    # ---- models
    Case("model-empty-name", "train text", "`model.name_or_path: \"\"`",
         lambda c: train_text(c, text_config(c, model={"name_or_path": ""})),
         ("model.name_or_path", "empty"), check=no_step),
    Case("model-max-length-beyond-positions", "train text",
         "`data.max_length: 100000` (the tiny model has 128 positions)",
         lambda c: train_text(c, text_config(c, data={"max_length": 100000})),
         ("data.max_length", "100000", "128 token positions"), check=no_step),
    Case("model-missing", "train text", "`model.name_or_path` naming a folder that does not exist",
         lambda c: train_text(c, text_config(c, model={"name_or_path": str(c.tmp / "nomodel") + "/"})),
         ("model.name_or_path", "nomodel", "is not a model folder")),
    Case("model-incomplete", "train text", "a model folder holding only `config.json`",
         lambda c: train_text(c, text_config(c, model={"name_or_path": str(_incomplete_model(c))})),
         ("model.name_or_path", "{half_model}")),
    Case("model-damaged-weights", "train text", "a model folder whose `model.safetensors` was cut in half",
         lambda c: train_text(c, text_config(c, model={"name_or_path": str(_damaged_model(c))})),
         ("model.name_or_path", "{damaged_model}", "its weights cannot be read", "damaged")),
    Case("model-hub-offline", "train text", "a Hub name that is not cached, with `HF_HUB_OFFLINE=1`",
         lambda c: (c.mp.setenv("HF_HUB_OFFLINE", "1"),
                    train_text(c, text_config(c, model={"name_or_path": "hardmix-tests/no-such-model"})))[1],
         ("model.name_or_path", "no-such-model", "offline")),
    Case("model-missing-eval", "eval text", "a model folder that does not exist",
         lambda c: ["eval", "text", str(c.tmp / "nomodel")], ("nomodel", "not found")),
    Case("model-incomplete-eval", "eval text", "a model folder holding only `config.json`",
         lambda c: ["eval", "text", str(_incomplete_model(c)), "--tasks", "sts"], ("{half_model}",)),
    Case("model-bad-tasks-eval", "eval text", "`--tasks sts,glue`",
         lambda c: ["eval", "text", str(c.fixture("tiny_bert_dir")), "--tasks", "sts,glue"],
         ("--tasks", "glue")),
    Case("model-missing-encode", "encode", "a model folder that does not exist",
         lambda c: encode(c, str(c.tmp / "nomodel"), b"a sentence .\n"), ("nomodel", "not found")),
    Case("model-incomplete-encode", "encode", "a model folder holding only `config.json`",
         lambda c: encode(c, str(_incomplete_model(c)), b"a sentence .\n"), ("{half_model}",)),
    Case("model-damaged-encode", "encode", "a model folder whose `model.safetensors` was cut in half (a "
         "traceback)", lambda c: encode(c, str(_damaged_model(c)), b"a sentence .\n"),
         ("{damaged_model}", "its weights cannot be read", "damaged")),
    Case("encode-onto-model-file", "encode", "`--output MODEL/config.json` (the model's own config was "
         "written over with the embeddings)",
         lambda c: (c.vars.update(model_config=str(_damaged_model(c) / "config.json")),
                    encode(c, c.vars["damaged_model"], b"a sentence .\n", "--output",
                           c.vars["model_config"]))[1],
         ("--output", "{model_config}", "this command's own input", "write elsewhere")),
    Case("encode-batch-zero", "encode", "`--batch-size 0`",
         lambda c: encode(c, str(c.fixture("tiny_bert_dir")), b"one .\n", "--batch-size", "0"),
         ("--batch-size: expected a positive number, got 0",)),
    Case("eval-text-max-length-zero", "eval text", "`--max-length 0`",
         lambda c: ["eval", "text", str(c.fixture("tiny_bert_dir")), "--max-length", "0"],
         ("--max-length: expected a positive number, got 0",)),
    Case("encode-not-utf8", "encode", "standard input that is not UTF-8",
         lambda c: encode(c, str(c.fixture("tiny_bert_dir")), b"caf\xe9\n"), ("standard input", "UTF-8")),
    Case("encode-blank-lines", "encode", "blank lines on standard input",
         lambda c: encode(c, str(c.fixture("tiny_bert_dir")), b"one .\n\ntwo .\n"),
         ("accepted: one row per line, blank lines included (3 rows)",), accepted=True,
         check=lambda c, err: _assert_equal(np.load(c.tmp / "emb.npy").shape[0], 3)),
    Case("encode-empty-input", "encode", "nothing on standard input",
         lambda c: encode(c, str(c.fixture("tiny_bert_dir")), b""),
         ("accepted: an empty (0, D) array",), accepted=True,
         check=lambda c, err: _assert_equal(np.load(c.tmp / "emb.npy").shape, (0, 32))),
    Case("encode-output-folder-missing", "encode", "`--output` in a folder that does not exist",
         lambda c: encode(c, str(c.fixture("tiny_bert_dir")), b"one .\n")[:-1]
         + [str(c.tmp / "no" / "e.npy")],
         ("e.npy", "No such file or directory")),
    Case("neighbours-unknown-query", "neighbours", "a query that is not an item of the listing",
         lambda c: neighbours_of(c, "nope.jpg"), ("QUERY 'nope.jpg'", "not an item of", "emb.paths.txt")),
    Case("neighbours-k-zero", "neighbours", "`-k 0`", lambda c: neighbours_of(c, "a.jpg", "-k", "0"),
         ("--k", "positive")),
    # ---- checkpoints
    Case("checkpoint-truncated", "eval knn", "a truncated checkpoint",
         lambda c: knn(c, checkpoint_file(c, "truncated"), eval_images(c)),
         ("{ckpt}", "not a readable hardmix checkpoint", "truncated", "start a new run")),
    Case("checkpoint-other-modality", "eval knn", "a text run's checkpoint",
         lambda c: knn(c, checkpoint_file(c, "text"), eval_images(c)),
         ("{ckpt}", "holds a text run's checkpoint, not a vision run's")),
    Case("checkpoint-other-version", "eval linear", "a checkpoint of format version 1",
         lambda c: linear(c, checkpoint_file(c, "v1"), eval_images(c)),
         ("{ckpt}", "version 1", "reads version 2")),
    Case("checkpoint-not-a-checkpoint", "eval linear", "a YAML file named checkpoint.pt",
         lambda c: linear(c, checkpoint_file(c, "notckpt"), eval_images(c)),
         ("{ckpt}", "not a readable hardmix checkpoint")),
    Case("checkpoint-code-pickle", "eval knn", "a pickle that would run a shell command when loaded",
         lambda c: knn(c, checkpoint_file(c, "exploit"), eval_images(c)),
         ("{ckpt}", "not a readable hardmix checkpoint"),
         check=lambda c, err: _assert_equal(Path(c.vars["marker"]).exists(), False)),
    Case("checkpoint-missing", "eval knn", "a run folder without checkpoint.pt",
         lambda c: knn(c, c.tmp, eval_images(c)), ("holds no checkpoint.pt",)),
    Case("checkpoint-resume-other-modality", "train text", "`--resume` on a vision run's folder",
         lambda c: (c.protect(Path(c.fixture("vision_run"))),
                    ["train", "text", str(config_file(c, text_config(c))), "--output",
                     str(c.fixture("vision_run")), "--resume"])[1],
         ("holds a vision run's checkpoint, not a text run's",)),
    # ---- weights: every command loads checkpoints and model folders through one key-by-key check
    Case("weights-partial-export", "export", "`export vision` of a checkpoint holding 3 of its backbone's "
         "tensors (it wrote them and said every key loaded)",
         lambda c: (c.vars.update(out=str(c.tmp / "b.pt")),
                    ["export", "vision", str(altered_vision_run(c, "partial")), str(c.tmp / "b.pt")])[1],
         ("{ckpt}", "encoder_q.backbone", "does not match the model", "tensors missing"),
         check=nothing_written("out")),
    Case("weights-reshaped-export", "export", "`export vision` of a checkpoint whose first convolution has "
         "another shape (a traceback)",
         lambda c: (c.vars.update(out=str(c.tmp / "b.pt")),
                    ["export", "vision", str(altered_vision_run(c, "reshaped")), str(c.tmp / "b.pt")])[1],
         ("{ckpt}", "does not match the model", "has shape"), check=nothing_written("out")),
    Case("weights-partial-knn", "eval knn", "a checkpoint holding 3 of its backbone's tensors",
         lambda c: knn(c, altered_vision_run(c, "partial"), eval_images(c)),
         ("{ckpt}", "does not match the model", "tensors missing")),
    Case("weights-partial-linear", "eval linear", "a checkpoint holding 3 of its backbone's tensors",
         lambda c: linear(c, altered_vision_run(c, "partial"), eval_images(c)),
         ("{ckpt}", "does not match the model", "tensors missing")),
    Case("weights-partial-encode-images", "encode", "`--images` with a checkpoint holding 3 of its "
         "backbone's tensors",
         lambda c: (c.vars.update(emb=str(c.tmp / "e.npy")),
                    ["encode", str(altered_vision_run(c, "partial")), "--images", str(eval_images(c)),
                     "--output", str(c.tmp / "e.npy")])[1],
         ("{ckpt}", "does not match the model", "tensors missing"), check=nothing_written("emb")),
    Case("weights-partial-resume-vision", "train vision", "`--resume` from a checkpoint holding 3 of its "
         "backbone's tensors",
         lambda c: (run := altered_vision_run(c, "partial"),
                    ["train", "vision", str(run / "config.yaml"), "--output", str(run), "--resume"])[1],
         ("--resume", "{ckpt}", "does not match the model", "tensors missing")),
    Case("weights-partial-resume-text", "train text", "`--resume` from a checkpoint that lost one tensor",
         text_run_with_partial_checkpoint, ("--resume", "{ckpt}", "does not match the model", "missing")),
    Case("weights-partial-model", "train text", "`model.name_or_path` whose `model.safetensors` holds 3 of "
         "the model's tensors (it trained from random weights in their place)",
         lambda c: train_text(c, text_config(c, model={"name_or_path": str(altered_text_model(c, "partial"))
                                                       })),
         ("model.name_or_path", "{partial_weights}", "does not match the model", "tensors missing"),
         check=lambda c, err: _assert_equal(sorted(p.name for p in (c.tmp / "run").glob("*.*")), [])),
    Case("weights-reshaped-model", "train text", "`model.name_or_path` whose weights hold a tensor of "
         "another shape (a traceback)",
         lambda c: train_text(c, text_config(c, model={"name_or_path": str(altered_text_model(c, "reshaped"))
                                                       })),
         ("model.name_or_path", "{reshaped_weights}", "does not match the model", "has shape")),
    Case("weights-partial-model-eval", "eval text", "a model folder whose weights hold 3 of its tensors "
         "(it scored random weights)",
         lambda c: ["eval", "text", str(altered_text_model(c, "partial")), "--tasks", "sts"],
         ("{partial_weights}", "does not match the model", "tensors missing")),
    Case("weights-partial-model-encode", "encode", "a model folder whose weights hold 3 of its tensors (it "
         "encoded with random weights)",
         lambda c: encode(c, str(altered_text_model(c, "partial")), b"a sentence .\n"),
         ("{partial_weights}", "does not match the model", "tensors missing"), check=nothing_written("emb")),
    # ---- output folders
    Case("output-existing", "train text", "`--output` holding a run, without `--resume`",
         lambda c: (previous_text_run(c), train_text(c, text_config(c, train={"max_steps": 2,
                                                                              "stop_after_steps": 1})))[1],
         ("{run}", "already holds a run", "--resume")),
    Case("output-holds-run-files", "train text",
         "`--output` holding a run killed before its first checkpoint, without `--resume`",
         lambda c: (killed_before_checkpoint(c, text_config(c)), c.protect(c.tmp / "run"),
                    train_text(c, text_config(c)))[2],
         ("{run}", "already holds a run", "--resume")),
    Case("resume-before-first-checkpoint", "train text",
         "`--resume` of a run killed before its first checkpoint",
         lambda c: (killed_before_checkpoint(c, text_config(c)),
                    train_text(c, text_config(c), "--resume"))[1],
         ("accepted: says it starts from step 0 (the cut metrics line dropped); one step trains",),
         accepted=True, check=lambda c, err: (
             finished_one_step(c, err), _assert_in("starting it from step 0", err),
             _assert_equal(len(read_lines(c.tmp / "run" / "metrics.jsonl")), 1))[0]),
    Case("resume-other-corpus", "train text", "`--resume` after the corpus's first sentence changed",
         resume_on_changed_corpus, ("--resume", "training data differ", "corpus sha256")),
    Case("resume-other-images", "train vision",
         "`--resume` after an image was added to the training folder",
         resume_on_changed_images, ("--resume", "training data differ", "images 16 -> 17")),
    Case("output-is-the-model-folder", "train text",
         "`--output` naming the run's own `model.name_or_path` (the run's files were written beside its "
         "weights)", _output_is_the_model, ("{model}", "the run's own model.name_or_path",
                                            "choose another --output"),
         check=lambda c, err: _assert_equal(sorted(p.name for p in Path(c.vars["model"]).iterdir()),
                                            c.vars["model_files"].split())),
    Case("output-is-the-image-folder", "train vision", "`--output` naming the run's own `data.dataset`",
         _output_is_the_images, ("{images}", "the run's own data.dataset", "choose another --output")),
    Case("resume-image-same-size", "train vision",
         "`--resume` after a training image was rewritten in place with other pixels at the same size, its "
         "modification time put back",
         lambda c: resume_on_an_image_rewritten_at_the_same_size(c, keep_mtime=True),
         ("--resume", "training data differ", "image content sha256")),
    Case("resume-image-same-size-touched", "train vision",
         "`--resume` after a training image was rewritten in place with other pixels at the same size",
         lambda c: resume_on_an_image_rewritten_at_the_same_size(c, keep_mtime=False),
         ("--resume", "training data differ", "image content sha256")),
    Case("resume-model-other-folder", "train text",
         "`--resume` of a run of a relative `model.name_or_path`, from another working folder holding "
         "another model of that name",
         resume_with_a_relative_model_from_another_folder,
         ("--resume", "inputs (model files, evaluation sets) differ", "here {second}",
          "from the folder it started in")),
    Case("output-read-only", "train text", "an `--output` that cannot be created (permission denied)",
         lambda c: (raise_for(c, os, "mkdir", c.tmp / "run", denied), train_text(c, text_config(c)))[1],
         ("{run}", "Permission denied")),
    Case("output-disk-full", "train text", "the disk fills while `--resume` writes (ENOSPC)",
         lambda c: (previous_text_run(c), c.mp.setattr(os, "fsync", _full_disk),
                    train_text(c, text_config(c, train={"max_steps": 2, "stop_after_steps": 1}),
                               "--resume"))[2],
         ("{run}/config.yaml: No space left on device", "free space"),
         check=lambda c, err: _assert_equal(list((c.tmp / "run").glob(".*.tmp")), [])),
    Case("output-is-a-file", "train text", "`--output` naming a file",
         lambda c: (c.protect(c.write("run", "a file, not a folder\n")), train_text(c, text_config(c)))[1],
         ("{run}", "File exists", "choose another path")),
    Case("output-disk-full-metrics", "train text", "the disk fills while `metrics.jsonl` is written (ENOSPC)",
         lambda c: (c.mp.setattr("hardmix.training.metrics.open_for_write", _full_disk_open),
                    train_text(c, text_config(c)))[1],
         ("{run}/metrics.jsonl: No space left on device", "free space"),
         check=lambda c, err: _assert_equal(sorted(p.name for p in (c.tmp / "run").iterdir()),
                                            ["config.yaml", "metrics.jsonl"])),  # the lock is released
    Case("output-json-onto-checkpoint", "eval knn", "`--json` naming the evaluated run's `checkpoint.pt`",
         json_onto_the_checkpoint, ("--json", "{ckpt}", "own input")),
    Case("output-json-folder-missing", "eval knn", "`--json` in a folder that does not exist",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c), "--json", str(c.tmp / "no" / "s.json")),
         ("s.json", "No such file or directory")),
    Case("export-unfinished", "export", "`export vision` of a run stopped at step 1 of 2",
         lambda c: ["export", "vision", str(stopped_vision_run(c)), str(c.tmp / "b.pt")],
         ("accepted: writes the backbone and says the run is unfinished (step 1 of 2)",), accepted=True,
         check=lambda c, err: _assert_in("unfinished run (step 1 of 2)", err)),
    Case("output-json-is-folder", "eval knn", "`--json` naming a folder",
         lambda c: knn(c, c.fixture("vision_run"), eval_images(c), "--json", str(c.tmp)),
         ("{tmp}", "Is a directory")),
    # ---- compare
    Case("compare-missing", "compare", "a spec file that does not exist",
         lambda c: ["compare", str(c.tmp / "nospec.yaml")], ("nospec.yaml", "does not exist")),
    Case("compare-not-mapping", "compare", "a spec holding a list",
         lambda c: compare_spec(c, "- a\n"), ("{spec}", "mapping")),
    Case("compare-unknown-key", "compare", "an unknown spec key `seed`",
         lambda c: compare_spec(c, good_spec(c, seed=[1])), ("seed",)),
    Case("compare-unknown-strategy", "compare", "a strategy list naming `mixup`",
         lambda c: compare_spec(c, good_spec(c, strategies={"none": [{"name": "none"}],
                                                            "m": [{"name": "mixup"}]})),
         ("mixup",)),
    Case("compare-bad-task-config", "compare", "a task config with `train.lr: fast`",
         lambda c: compare_spec(c, good_spec(c, tasks={"text": {"config": str(config_file(
             c, text_config(c, train={"lr": "fast"}), "bad-text.yaml")), "score": "stsb_dev"}})),
         ("train.lr", "expected a number")),
    Case("compare-jobs-zero", "compare", "`--jobs 0`",
         lambda c: compare_spec(c, good_spec(c)) + ["--jobs", "0"], ("--jobs", "positive number, got 0")),
    Case("compare-threads-zero", "compare", "`--threads 0`",
         lambda c: compare_spec(c, good_spec(c)) + ["--threads", "0"],
         ("--threads", "positive number, got 0")),
    Case("compare-existing-output", "compare", "`--output` holding a comparison, without `--resume`",
         lambda c: (c.write("cmp/spec.yaml", "seeds: [1]\n"), c.protect(c.tmp / "cmp"),
                    compare_spec(c, good_spec(c))[:-1])[2],
         ("{out}", "holds a comparison already", "--resume")),
    Case("compare-spec-in-output", "compare", "the spec written by hand as `OUT/spec.yaml`, where the "
         "comparison keeps its copy, with `--resume` (it was written over: its comments lost)",
         lambda c: (c.write("cmp/spec.yaml", "# my notes\n" + yaml.safe_dump(good_spec(c))),
                    c.protect(c.tmp / "cmp"), c.vars.update(out=str(c.tmp / "cmp")),
                    ["compare", str(c.tmp / "cmp" / "spec.yaml"), "--output", str(c.tmp / "cmp"),
                     "--resume"])[3],
         ("SPEC", "{spec}", "is where the comparison keeps its own copy of the spec",
          "outside the --output")),
    Case("compare-logs-link", "compare", "`OUT/logs` a link to a folder of the user's (cell logs were "
         "appended there)",
         lambda c: compare_through_link(c, "logs"), ("{out}/logs", "is a link", "not written"),
         check=nothing_added_beside),
    Case("compare-plots-link", "compare", "`OUT/plots` a link to a folder of the user's (plots were "
         "written there)",
         lambda c: compare_through_link(c, "plots"), ("{out}/plots", "is a link", "not written"),
         check=nothing_added_beside),
    Case("compare-cell-log-link", "compare", "`OUT/logs/<cell>.log` a link to a file of the user's (the "
         "command was appended to it)",
         lambda c: compare_through_link(c, "cell log"), ("{out}/logs/text-none-seed1.log", "is a link"),
         check=nothing_added_beside),
    # ---- data
    Case("data-unknown-name", "data", "`data download` of an unknown name",
         lambda c: ["data", "download", "nosuch", "--root", str(c.tmp)], ("nosuch", "hardmix data list")),
    Case("data-unreachable", "data", "`data download` from a mirror that refuses connections",
         lambda c: (c.mp.delenv("HARDMIX_OFFLINE", raising=False),  # online: the tests set it
                    ["data", "download", "bert-mini", "--root", str(c.tmp / "d"), "--quiet", "--base-url",
                     "http://127.0.0.1:9/"])[1], ("cannot connect",)),
    Case("data-offline", "data", "`data download` with `HARDMIX_OFFLINE=1`",
         lambda c: (c.mp.setenv("HARDMIX_OFFLINE", "1"),
                    ["data", "download", "bert-mini", "--root", str(c.tmp / "d"), "--quiet", "--base-url",
                     "http://127.0.0.1:9/"])[1], ("HARDMIX_OFFLINE=1 is set", "no connection is attempted")),
    Case("data-root-is-file", "data", "`data check --root` naming a file",
         lambda c: ["data", "check", "--root", str(c.write("f", "x"))], ("--root", "{f}", "not a folder")),
    Case("data-list-root-is-file", "data", "`data list --root` naming a file",
         lambda c: ["data", "list", "--root", str(c.write("f", "x"))], ("--root", "{f}", "not a folder")),
    Case("data-check-empty-root", "data", "`data check` of an empty data root",
         lambda c: ["data", "check", "--root", str(c.tmp)],
         ("accepted: says no data set is present there (exit 0)",), accepted=True),
]


def _incomplete_model(ctx: Ctx) -> Path:
    folder = ctx.tmp / "half-model"
    folder.mkdir(exist_ok=True)
    src = Path(ctx.fixture("tiny_bert_dir")) / "config.json"
    (folder / "config.json").write_bytes(src.read_bytes())
    ctx.vars["half_model"] = str(folder)
    ctx.protect(folder)
    return folder


def _damaged_model(ctx: Ctx) -> Path:
    """The tiny model with its weights file's bytes cut to its first half (a download cut short)."""
    import shutil

    folder = ctx.tmp / "damaged-model"
    shutil.copytree(Path(ctx.fixture("tiny_bert_dir")), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    ctx.vars["damaged_model"] = str(folder)
    ctx.protect(folder)
    return folder


def read_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def _assert_in(part: str, text: str) -> None:
    assert part in text, f"{part!r} not in {text!r}"


def _assert_equal(a: Any, b: Any) -> None:
    assert a == b, f"{a!r} != {b!r}"


# ------------------------------------------------- plug-ins behind a wall; the resolved cell ---------
def plugin(ctx: Ctx, module: str, source: str, entry: str, target: str = "Plugin") -> None:
    """``module`` (``source``) of an installed distribution ``case-plugins`` that names ``module:target``
    under the entry-point group as ``entry``; the strategy registry as this case's copy, plug-ins not
    loaded yet."""
    import textwrap

    from hardmix.strategies import base

    site = ctx.tmp / "site"
    info = site / "case_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: case-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hardmix.strategies]\n{entry} = {module}:{target}\n")
    ctx.mp.syspath_prepend(str(site))
    ctx.mp.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    ctx.mp.setattr(base, "_BROKEN", {})
    ctx.mp.setattr(base, "_ENTRY_POINTS_LOADED", False)


def plugin_strategy(name: str, extra_cosines: str, hook: str = "extra_cosines") -> str:
    """A plug-in module whose strategy ``name`` returns ``extra_cosines`` (an expression of ``ctx``) from
    the method ``hook``."""
    return f"""
        import dataclasses, math, torch
        from hardmix.strategies.base import Strategy

        @dataclasses.dataclass(frozen=True)
        class Plugin(Strategy):
            \"\"\"A hostile plug-in.\"\"\"
            name = {name!r}
            def {hook}(self, ctx):
                return {extra_cosines}
    """


IMPOSTOR = """
    import dataclasses, pathlib, torch
    from hardmix.strategies.base import Strategy, register_strategy

    pathlib.Path(__file__).with_name("imported").write_text("imported")

    @dataclasses.dataclass(frozen=True)
    class Plugin(Strategy):
        \"\"\"Copies MixCSE's module and class names, and registers itself as mixcse.\"\"\"
        name = "mixcse"
        def extra_cosines(self, ctx):
            return torch.full((ctx.cosines.shape[0], 4), 0.3), {}

    Plugin.__module__ = "hardmix.strategies.mixcse"
    Plugin.__qualname__ = Plugin.__name__ = "MixCSE"
    register_strategy(Plugin)
"""


def trained_the_built_in_mixcse(ctx: Ctx, err: str) -> None:
    """One step trained with MixCSE's own statistics, the plug-in never imported."""
    finished_one_step(ctx, err)
    assert not (ctx.tmp / "site" / "imported").exists(), "the plug-in was imported"
    rows = [json.loads(line) for line in read_lines(ctx.tmp / "run" / "metrics.jsonl")]
    assert any("mixcse/synthetic_sim" in r for r in rows), rows


def renaming_spec(ctx: Ctx, where: str) -> list[str]:
    spec = good_spec(ctx)
    if where == "strategy_args":
        spec["tasks"]["text"]["strategy_args"] = {"none": {"name": "mixcse"}}
    else:
        spec["tune"] = {"seeds": [101], "grid": {"none": {"none.name": ["mixcse"]}, "mixcse": {}},
                        "equal_budget": False}
    return compare_spec(ctx, spec)


CASES += [
    Case("plugin-copies-builtin-names", "train text",
         "`loss.strategies: [mixcse]` with a plug-in installed that copies MixCSE's module and class names "
         "and registers itself as `mixcse` (it replaced the built-in: loss 59.3 for 6.44)",
         lambda c: (plugin(c, "case_impostor", IMPOSTOR, "helper"),
                    train_text(c, text_config(c, loss={"strategies": ["mixcse"]})))[1],
         ("accepted: trains the built-in MixCSE; the plug-in is not even imported",), accepted=True,
         check=trained_the_built_in_mixcse),
    Case("plugin-writes-into-the-context", "train text",
         "a plug-in strategy that scales the core's cosines in place before returning its column (a wrong "
         "loss, trained silently)",
         lambda c: (plugin(c, "case_meddler", plugin_strategy(
             "meddler", "(ctx.cosines.mul_(0.5), ctx.cosines[:, :1].detach().clone(), {})[1:]"), "meddler"),
                    train_text(c, text_config(c, loss={"strategies": ["meddler"]})))[1],
         ("strategy 'meddler': extra_cosines wrote into the context's cosines in place",)),
    Case("plugin-integer-logits", "train text", "a plug-in strategy whose extra cosines are integers",
         lambda c: (plugin(c, "case_ints", plugin_strategy(
             "int_logits", "torch.full((ctx.cosines.shape[0], 2), 50), {}"), "int_logits"),
                    train_text(c, text_config(c, loss={"strategies": ["int_logits"]})))[1],
         ("strategy 'int_logits': extra_cosines", "dtype torch.int64", "a floating dtype")),
    Case("plugin-vector-statistic", "train text",
         "a plug-in strategy whose statistic is a vector (a traceback when the step was logged)",
         lambda c: (plugin(c, "case_vector_stat", plugin_strategy(
             "vector_stat", "ctx.cosines[:, :1].detach().clone(), {'sim': ctx.cosines[:, 0].detach()}"),
                           "vector_stat"),
                    train_text(c, text_config(c, loss={"strategies": ["vector_stat"]})))[1],
         ("strategy 'vector_stat': extra_cosines: statistic 'sim' is a tensor of shape (16,)",
          "expected a real scalar")),
    Case("plugin-old-extra-logits", "train text",
         "a plug-in strategy written for an older hardmix: `extra_logits` returning its columns divided by "
         "tau (the loss takes cosines from `extra_cosines` and divides every column itself)",
         lambda c: plugin_train(c, "case_old_hook", plugin_strategy(
             "old_logits", "ctx.anchors[:, :1].detach() * 0.0, {}", hook="extra_logits"), "old_logits"),
         ("strategy 'old_logits' is a broken plug-in", "defines extra_logits, a hook hardmix no longer calls",
          "extra_cosines(self, ctx)")),
    Case("ramp-start-beyond-the-batch", "train text",
         "MoCHi's `n_hard` ramping from 64 down to 4 on a batch of 16 (refused at step 0, mid-run)",
         lambda c: train_text(c, text_config(c, loss={"strategies": [
             {"name": "mochi", "n_hard": {"start": 64, "end": 4, "steps": 10}, "n_pair": 4, "n_query": 2}]})),
         ("loss.strategies[0].n_hard", "64 negatives needed per anchor")),
    Case("compare-stop-after-in-config-file", "compare",
         "`train.stop_after_steps: 1` in a task's config file, not its `set` (every cell stopped short: the "
         "comparison could never finish)",
         lambda c: compare_spec(c, good_spec(c) | {"tasks": {"text": {"config": str(config_file(
             c, text_config(c, eval={"at_end": True}, train={"max_steps": 2, "stop_after_steps": 1}),
             "stopping.yaml")), "score": "stsb_dev", "allow_selection_score": True}}}),
         ("{spec}", "tasks.text with strategy", "train.stop_after_steps: 1",
          "in the task's config file {stopping}", "not a key a comparison can set")),
    Case("compare-strategy-args-rename", "compare",
         "`strategy_args: {none: {name: mixcse}}` (the cells labelled `none` trained MixCSE)",
         lambda c: renaming_spec(c, "strategy_args"),
         ("tasks.text.strategy_args.none.name", "cannot change which strategy a label names")),
    Case("compare-grid-key-rename", "compare",
         "a tuning grid key `none.name: [mixcse]` (the tuning cells labelled `none` trained MixCSE)",
         lambda c: renaming_spec(c, "grid"),
         ("tune.grid.none.none.name", "cannot change which strategy a label names")),
]



# ----------------------------------------------------------- what is read, meaning, whole, finite -------
# (one block: fingerprints of every layout read, keys fixing a score's meaning on --resume, outputs written
# whole and their sets replaced together, non-finite numbers refused)
def full_disk_for(ctx: Ctx, *names: str) -> None:
    """A real full disk for the files named: their temporary file is opened on ``/dev/full``, so the
    kernel's own ``ENOSPC`` meets torch's and NumPy's writers as a full disk would."""
    from hardmix.utils import confine

    real = confine._temporary

    def temporary(target: Path) -> tuple[int, str]:
        fd, tmp = real(target)
        if target.name in names:
            os.close(fd)
            return os.open("/dev/full", os.O_WRONLY), tmp
        return fd, tmp

    ctx.mp.setattr(confine, "_temporary", temporary)


def encoded_before(ctx: Ctx) -> list[str]:
    """``emb.npy`` and ``emb.sentences.txt`` of a first ``encode -o`` (protected), then the command line of a
    second one of other sentences."""
    from hardmix.cli import main

    model = str(ctx.fixture("tiny_bert_dir"))
    assert main(encode(ctx, model, b"one .\ntwo .\n")) == 0
    ctx.protect(ctx.tmp / "emb.npy")
    ctx.protect(ctx.tmp / "emb.sentences.txt")
    full_disk_for(ctx, "emb.npy")
    return encode(ctx, model, b"three .\nfour .\nfive .\n")


def nan_weight_model(ctx: Ctx) -> str:
    """A copy of the tiny model whose first query weight holds a NaN."""
    from safetensors.torch import load_file, save_file

    folder = ctx.tmp / "nan-model"
    shutil.copytree(Path(ctx.fixture("tiny_bert_dir")), folder)
    tensors = load_file(folder / "model.safetensors")
    name = next(k for k in tensors if k.endswith("attention.self.query.weight"))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    ctx.vars["tensor"] = name.removeprefix("bert.")
    return str(folder)


def nan_weight_vision_run(ctx: Ctx) -> str:
    """A copy of the finished vision run whose query backbone's first convolution holds a NaN."""
    from hardmix.training.checkpoint import read_checkpoint_file, save_checkpoint

    run = ctx.tmp / "nan-run"
    shutil.copytree(Path(ctx.fixture("vision_run")), run)
    state = read_checkpoint_file(run / "checkpoint.pt")
    name = next(k for k, v in state["model"].items() if k.startswith("encoder_q.backbone.") and v.ndim == 4)
    state["model"][name].view(-1)[0] = float("nan")
    save_checkpoint(state, run / "checkpoint.pt", task="vision")
    ctx.vars["tensor"] = name.removeprefix("encoder_q.backbone.")
    ctx.protect(run)
    return str(run)


def neighbours_over(ctx: Ctx, array: np.ndarray, listing: bytes, *extra: str) -> list[str]:
    emb = ctx.tmp / "emb.npy"
    np.save(emb, array)
    (ctx.tmp / "emb.paths.txt").write_bytes(listing)
    ctx.vars["listing"] = str(ctx.tmp / "emb.paths.txt")
    ctx.protect(emb)
    return ["neighbours", str(emb), "a.jpg", *extra]


def dead_pid() -> int:
    """The id of a process that has ended."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def stale_checkpoint_temporary(ctx: Ctx) -> list[str]:
    """A text run stopped after 1 of 2 steps, holding the hidden temporary checkpoint of a writer killed by
    SIGKILL (its pid ended) and one of an older hardmix (no pid), then its ``--resume``."""
    previous_text_run(ctx)
    ctx.protected.clear()
    run = ctx.tmp / "run"
    left = [run / f".checkpoint.pt.{dead_pid()}-abcd1234.tmp", run / ".checkpoint.pt.x1y2z3w4.tmp"]
    for f in left:
        f.write_bytes(b"\0" * 1_000_000)
    ctx.vars["left"] = left[0].name
    return ["train", "text", str(ctx.tmp / "config.yaml"), "--output", str(run), "--resume"]


def removed_temporaries(ctx: Ctx, err: str) -> None:
    assert list((ctx.tmp / "run").glob(".*.tmp")) == [], list((ctx.tmp / "run").glob(".*.tmp"))
    _assert_in(f"removed 2 temporary files a killed run left in {ctx.tmp / 'run'} (2.0 MB): ", err)
    _assert_in(ctx.vars["left"], err)


def full_disk_checkpoint(ctx: Ctx) -> list[str]:
    previous_text_run(ctx)
    full_disk_for(ctx, "checkpoint.pt")
    ctx.vars["ckpt"] = str(ctx.tmp / "run" / "checkpoint.pt")
    return ["train", "text", str(ctx.tmp / "config.yaml"), "--output", str(ctx.tmp / "run"), "--resume"]


def corrupt_images_encoded(ctx: Ctx) -> list[str]:
    tree = image_tree(ctx.tmp / "photos", {"a": ["rgb", "corrupt", "rgb"], "b": ["rgb", "empty"]},
                      splits=("x",))
    ctx.vars.update(broken=str(tree / "x" / "a" / "1.png"), empty=str(tree / "x" / "b" / "1.png"))
    return ["encode", str(ctx.fixture("vision_run")), "--images", str(tree), "--output",
            str(ctx.tmp / "e.npy"), "--device", "cpu", "--no-cache"]


def skipped_listed(ctx: Ctx, err: str) -> None:
    skipped = (ctx.tmp / "e.skipped.txt").read_text().splitlines()
    _assert_equal(skipped, [ctx.vars["broken"], ctx.vars["empty"]])
    _assert_equal(len(np.load(ctx.tmp / "e.npy")), 3)
    for path in (ctx.vars["broken"], ctx.vars["empty"]):
        _assert_in(f"hardmix: skipped {path}: it cannot be decoded", err)


def resumed_with(ctx: Ctx, run: Path, task: str, *items: str) -> list[str]:
    """``--resume`` of ``run`` (protected) with ``--set`` items."""
    argv = ["train", task, str(run / "config.yaml"), "--output", str(run), "--resume"]
    for item in items:
        argv += ["--set", item]
    return argv


def renamed_arrow_resume(ctx: Ctx) -> list[str]:
    """A text run on a datasets folder whose arrow file has another name than ``data-*.arrow`` (its
    ``state.json`` lists it), stopped after 1 of 2 steps; then the folder saved again with other rows."""
    import datasets

    from hardmix.cli import main

    folder = ctx.tmp / "ds"
    sentences = Path(ctx.fixture("tiny_corpus")).read_text(encoding="utf-8").splitlines()

    def save(rows: list[str]) -> None:
        if folder.exists():
            shutil.rmtree(folder)
        datasets.Dataset.from_dict({"text": rows}).save_to_disk(str(folder))
        state = json.loads((folder / "state.json").read_text())
        (folder / state["_data_files"][0]["filename"]).rename(folder / "part-0.arrow")
        state["_data_files"][0]["filename"] = "part-0.arrow"
        (folder / "state.json").write_text(json.dumps(state))

    save(sentences)
    argv = train_text(ctx, text_config(ctx, data={"train_file": str(folder)},
                                       train={"max_steps": 2, "stop_after_steps": 1}))
    assert main(argv) != 1
    save(["a sentence that was not there ."] + sentences[1:])
    ctx.protect(ctx.tmp / "run")
    return [*argv, "--resume"]


CASES += [
    # item 1: every layout read is fingerprinted
    Case("resume-datasets-other-arrow-names", "train text",
         "`--resume` after a datasets folder whose arrow file is not named `data-*.arrow` was saved again "
         "with other rows (its fingerprint held no file: the run trained on)",
         renamed_arrow_resume, ("--resume", "training data differ", "corpus sha256")),
    # item 2: meaning fixed at the start
    Case("resume-meaning-dev-truncation", "train text",
         "`--resume --set eval.max_length=16` (`eval.*` could all change: the best dev score before and "
         "after were of two truncations)",
         lambda c: resumed_with(c, previous_text_run(c), "text", "eval.max_length=16"),
         ("--resume: eval.max_length was None in the run", "16 now", "the truncation of the STS-B dev")),
    Case("resume-meaning-selection", "train vision",
         "`--resume --set eval.selection=val_proxy_top1` of a run on labelled images (selecting on the k-NN)",
         lambda c: resumed_with(c, stopped_vision_run(c), "vision", "eval.selection=val_proxy_top1"),
         ("--resume: eval.selection was 'auto' in the run", "'val_proxy_top1' now", "the selection score")),
    Case("resume-meaning-selection-spelled-out", "train vision",
         "`--resume --set eval.selection=val_knn_top1` of a run of `auto` on labelled images",
         lambda c: (run := stopped_vision_run(c), c.protected.clear(),  # the resume continues it
                    resumed_with(c, run, "vision", "eval.selection=val_knn_top1",
                                 "train.stop_after_steps=2"))[2],
         ("accepted: `auto` resolves to val_knn_top1 there: one meaning",), accepted=True,
         check=lambda c, err: _assert_equal(json.loads((c.tmp / "run" / "results.json").read_text())["steps"],
                                            2)),
    # item 3: outputs written whole
    Case("encode-disk-full-keeps-previous", "encode",
         "a real full disk (`ENOSPC` from the kernel) while `encode -o` replaces a previous array (it was "
         "destroyed: \"15360 requested and 9184 written\")",
         encoded_before, ("{emb}: No space left on device", "free space")),
    Case("train-disk-full-checkpoint", "train text",
         "a real full disk while the checkpoint is written (torch's `RuntimeError: unexpected pos`, a "
         "traceback)",
         full_disk_checkpoint, ("{ckpt}: No space left on device", "free space"),
         check=lambda c, err: _assert_equal(list((c.tmp / "run").glob(".*.tmp")), [])),
    Case("train-stale-temporary-checkpoint", "train text",
         "`--resume` of a run folder holding the hidden temporary checkpoints a SIGKILL left (kept forever)",
         stale_checkpoint_temporary,
         ("accepted: removes them and says so (`removed 2 temporary files a killed run left in ...`)",),
         accepted=True, check=removed_temporaries),
    Case("neighbours-interrupted-encode", "neighbours",
         "an array whose `encode -o` was killed while it replaced the set (`EMB.incomplete` left)",
         lambda c: (c.write("emb.incomplete", b""),
                    neighbours_over(c, np.eye(3, dtype=np.float32), b"a.jpg\nb.jpg\nc.jpg\n"))[1],
         ("emb.incomplete is there", "may be of two runs", "encode again with -o")),
    # item 4: finite or refused
    Case("encode-nan-weight", "encode", "a model folder whose weights hold a NaN (NaN embeddings, exit 0)",
         lambda c: encode(c, nan_weight_model(c), b"a sentence .\n"),
         ("1 of its", "tensors are not finite", "{tensor}"), check=nothing_written("emb")),
    Case("encode-images-nan-weight", "encode", "`--images` with a run whose backbone holds a NaN weight",
         lambda c: (c.vars.update(emb=str(c.tmp / "e.npy")),
                    ["encode", nan_weight_vision_run(c), "--images", str(eval_images(c)), "--output",
                     str(c.tmp / "e.npy"), "--device", "cpu", "--no-cache"])[1],
         ("MODEL", "tensors are not finite", "{tensor}"), check=nothing_written("emb")),
    Case("neighbours-nan-row", "neighbours",
         "an array with a NaN row (ranked; faiss listed one image several times at -3.4e38)",
         lambda c: neighbours_over(c, np.array([[1, 0], [np.nan, 1], [0, 1]], np.float32),
                                   b"a.jpg\nb.jpg\nc.jpg\n"),
         ("emb.npy", "1 of its 3 rows are not finite", "row 1")),
    Case("neighbours-inf-row", "neighbours", "an array with an infinite row",
         lambda c: neighbours_over(c, np.array([[1, 0], [0, 1], [np.inf, 0]], np.float32),
                                   b"a.jpg\nb.jpg\nc.jpg\n"),
         ("emb.npy", "rows are not finite", "row 2")),
    Case("neighbours-zero-dimensions", "neighbours", "an array of shape (3, 0) (accepted)",
         lambda c: neighbours_over(c, np.zeros((3, 0), np.float32), b"a.jpg\nb.jpg\nc.jpg\n"),
         ("shape (3, 0)", "0 dimensions")),
    Case("neighbours-crlf-listing", "neighbours",
         "a listing with CRLF line ends (the message could not show the `\\r`)",
         lambda c: neighbours_over(c, np.eye(3, dtype=np.float32), b"a.jpg\r\nb.jpg\r\nc.jpg\r\n"),
         ("{listing}: line 1 ('a.jpg\\r') ends with \\r\\n (CRLF line ends, 3 of 3 lines)",)),
    Case("encode-images-corrupt", "encode",
         "`--images` over a folder holding a corrupt and an empty image (it stopped at the first)",
         corrupt_images_encoded,
         ("accepted: one row per readable image; each file skipped named and listed in `e.skipped.txt`",),
         accepted=True, check=skipped_listed),
]



# ===================================================================================================
# Hostile round 2026-12-06 (docs/hostile_round_2026-12-06.md): each case below was
# tried after the fixes of that issue; the refusals marked "(was: ...)" there failed on the code before.
# Kept together at the end of the table so that other additions merge cleanly.
# ===================================================================================================
def tsv_corpus(ctx: Ctx, name: str, rows: list[str], header: str = "id\ttext") -> Path:
    """A corpus ``name`` of a header and ``rows``, padded with 16 plain rows after them (enough for a
    batch of 16)."""
    lines = [header, *rows, *(f"{100 + i}\tsentence number {i} ." for i in range(16))]
    return ctx.write(name, "".join(line + "\n" for line in lines))


def mixed_images(ctx: Ctx, sub: str = "c0", nested_images: int = 4, **data: Any) -> list[str]:
    """``images/`` with 12 RGB PNGs at its top level and ``nested_images`` in ``images/<sub>/``."""
    root = ctx.tmp / "images"
    (root / sub).mkdir(parents=True)
    for i in range(12):
        (root / f"{i}.png").write_bytes(image("rgb", i))
    for i in range(nested_images):
        (root / sub / f"n{i}.png").write_bytes(image("rgb", 100 + i))
    ctx.vars["images"] = str(root)
    ctx.protect(root)
    return train_vision(ctx, vision_config(ctx, root, data=data))


def model_copy(ctx: Ctx) -> Path:
    model = ctx.tmp / "model"
    shutil.copytree(ctx.fixture("tiny_bert_dir"), model)
    ctx.protect(model)
    ctx.vars["model"] = str(model)
    return model


def vision_run_copy(ctx: Ctx, drop: str | None = None) -> Path:
    """A copy of the finished one-step vision run, less its file ``drop``."""
    run = ctx.tmp / "vrun"
    shutil.copytree(ctx.fixture("vision_run"), run)
    if drop:
        (run / drop).unlink()
    ctx.vars["vrun"] = str(run)
    return run


def checkpoint_without(ctx: Ctx, key: str) -> Path:
    """The finished vision run's checkpoint, saved again without its entry ``key``."""
    import torch

    from hardmix.training.checkpoint import save_checkpoint

    state = torch.load(Path(ctx.fixture("vision_run")) / "checkpoint.pt", map_location="cpu",
                       weights_only=True)
    del state[key]
    path = ctx.tmp / "nocfg" / "checkpoint.pt"
    path.parent.mkdir()
    save_checkpoint(state, path, task="vision")
    ctx.vars["ckpt"] = str(path)
    ctx.protect(path)
    return path


def resume_without_config(ctx: Ctx) -> list[str]:
    """An unfinished one-of-two-steps vision run, its checkpoint saved again without its config."""
    import torch

    from hardmix.cli import main
    from hardmix.training.checkpoint import save_checkpoint

    tree = image_tree(ctx.tmp / "images", rgb_classes(2, 8))
    cfg = vision_config(ctx, tree, train={"max_steps": 2, "stop_after_steps": 1})
    assert main(train_vision(ctx, cfg)) != 1
    path = ctx.tmp / "run" / "checkpoint.pt"
    state = torch.load(path, map_location="cpu", weights_only=True)
    del state["config"]
    save_checkpoint(state, path, task="vision")
    ctx.protect(ctx.tmp / "run")
    return train_vision(ctx, vision_config(ctx, tree, train={"max_steps": 2}), "--resume")


def encode_images_cmd(ctx: Ctx, model: Path | str, images: Path, out: Path | None = None) -> list[str]:
    out = out or ctx.tmp / "emb.npy"
    ctx.vars["emb"] = str(out)
    return ["encode", str(model), "--images", str(images), "--output", str(out), "--device", "cpu"]


def absent(rel: str) -> Callable[[Ctx, str], None]:
    """A check: nothing was written at ``rel`` in the case's folder."""
    return lambda ctx, err: _assert_equal((ctx.tmp / rel).exists(), False)


def said(part: str) -> Callable[[Ctx, str], None]:
    """A check: one step trained and the command said ``part``."""
    return lambda ctx, err: (finished_one_step(ctx, err), _assert_in(part, err))[0]


def noted_unfinished(ctx: Ctx, err: str) -> None:
    _assert_in("hardmix: note: ", err)
    _assert_in("is of an unfinished run", err)
    assert (ctx.tmp / "emb.npy").is_file() and (ctx.tmp / "emb.paths.txt").is_file()


def grid_spec(ctx: Ctx, values: list[Any]) -> dict[str, Any]:
    return good_spec(ctx) | {"tune": {"seeds": [101], "grid": {"none": {}, "mixcse": {"mixcse.lam": values}},
                                      "equal_budget": False}}


PLUG_EXCLUDE = """
    import dataclasses, torch
    from hardmix.strategies.base import Strategy

    @dataclasses.dataclass(frozen=True)
    class Plugin(Strategy):
        \"\"\"A hostile plug-in: excludes every negative but the first {keep} of each anchor.\"\"\"
        name = "excluder"
        def exclude(self, ctx):
            keep = torch.cumsum(ctx.negative_mask.long(), dim=1) <= {keep}
            return ctx.negative_mask & ~keep, {{}}
"""

PLUG_RAISES = """
    import dataclasses
    from hardmix.strategies.base import Strategy

    @dataclasses.dataclass(frozen=True)
    class Plugin(Strategy):
        \"\"\"A hostile plug-in whose hook raises.\"\"\"
        name = "raiser"
        def reweight(self, ctx):
            return {}["weights"]
"""


def plugin_train(ctx: Ctx, module: str, source: str, name: str) -> list[str]:
    plugin(ctx, module, source, name)
    return train_text(ctx, text_config(ctx, loss={"strategies": [name]}))


def compare_into(ctx: Ctx, spec: dict[str, Any], out: Path) -> list[str]:
    """``compare SPEC --output OUT`` for real (no ``--print-commands``): the task's data checked."""
    ctx.vars["out"] = str(out)
    return ["compare", str(ctx.write("spec.yaml", yaml.safe_dump(spec))), "--output", str(out),
            "--threads", "1"]


def compare_in_images(ctx: Ctx) -> list[str]:
    """A vision comparison whose ``--output`` lies inside its task's image folder."""
    images = image_tree(ctx.tmp / "images", rgb_classes(), ("train", "test"))
    ctx.protect(images)
    cfg = vision_config(ctx, images, eval={"at_end": True}, data={"num_workers": 0, "val_samples": 4})
    task = {"task": "vision", "config": str(config_file(ctx, cfg, "v.yaml")), "score": "val_knn_top1",
            "allow_selection_score": True}
    spec = {"seeds": [1], "baseline": "none", "strategies": {"none": "none", "hcl": [{"name": "hcl"}]},
            "tasks": {"img": task}}
    return compare_into(ctx, spec, images / "cmp")


def records_link(ctx: Ctx) -> list[str]:
    """A data root whose ``.hardmix`` folder is a link to a folder of the user's."""
    mine = ctx.tmp / "mine"
    ctx.write("mine/notes.txt", "mine\n")
    ctx.protect(mine)
    root = ctx.tmp / "root"
    root.mkdir()
    (root / ".hardmix").symlink_to(mine)
    ctx.vars["root"] = str(root)
    return ["data", "download", "wiki1m", "--root", str(root), "--base-url", "file:///nonexistent"]


CASES += [
    # ---- corpora
    Case("corpus-tsv-unpaired-quote", "train text",
         "a TSV corpus whose line 3 sentence starts with an unpaired quote (`\"Hello there .`): it swallowed "
         "the next record into it",
         lambda c: train_text(c, text_config(c, data={"train_file": str(tsv_corpus(
             c, "notes.tsv", ["1\tfine .", '2\t"Hello there .', '3\tworld ." she said']))})),
         ("{notes}:3", "a quoted field opens on this line and runs on to line 4",
          "a TSV record is one line, so records are never merged"), check=no_step),
    Case("corpus-csv-line-break", "train text", "a CSV corpus whose quoted sentence holds a line break",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "notes.csv", 'id,text\n1,"two\nlines ."\n' + "".join(f"{i},s {i} .\n" for i in range(16))))})),
         ("{notes}:2", "runs on to line 3", "a CSV record is one line"), check=no_step),
    Case("corpus-tsv-quoted-tab", "train text",
         "a TSV corpus with a pandas-quoted sentence holding a tab and doubled quotes, on its line",
         lambda c: train_text(c, text_config(c, data={"train_file": str(tsv_corpus(
             c, "notes.tsv", ['1\t"a\ttab and ""quotes"""']))})),
         ("accepted: one record a line, quoted as pandas writes it (17 sentences); one step trains",),
         accepted=True, check=said("17 sentences")),
    Case("corpus-tsv-crlf", "train text", "a TSV corpus with CRLF line ends",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "notes.tsv", "id\ttext\r\n" + "".join(f"{i}\tsentence {i} .\r\n" for i in range(16))))})),
         ("accepted: CRLF ends a record (16 sentences); one step trains",), accepted=True,
         check=lambda c, err: (finished_one_step(c, err), _assert_in("16 sentences", err))[0]),
    Case("corpus-csv-bom-header", "train text", "a CSV corpus whose header starts with a byte-order mark",
         lambda c: train_text(c, text_config(c, data={"train_file": str(c.write(
             "notes.csv", "\ufefftext,id\n" + "".join(f"sentence {i} .,{i}\n" for i in range(16))))})),
         ("accepted: the mark is not part of the column name (16 sentences); one step trains",),
         accepted=True, check=said("16 sentences")),
    # ---- image folders
    Case("images-mixed-top-and-class-folder", "train vision",
         "12 images at the folder's top and 4 in a sub-folder `c0/`, `data.labels` unset (class folders or "
         "nested photos? taken as unlabeled without a word)",
         lambda c: mixed_images(c), ("data.dataset", "{images}", "holds both images at its top level and "
                                     "sub-folders of images (c0)", "data.labels: false"), check=no_step),
    Case("images-mixed-labels-false", "train vision", "the same folder with `data.labels: false`",
         lambda c: mixed_images(c, labels=False),
         ("accepted: every image below it, unlabeled, the reason stated as data.labels: false; one step "
          "trains",), accepted=True,
         check=said("data.labels: false: the images of")),
    Case("images-top-and-empty-sub-folder", "train vision",
         "12 images at the folder's top and an empty sub-folder, `data.labels` unset",
         lambda c: mixed_images(c, sub="thumbs", nested_images=0),
         ("accepted: no sub-folder holds an image, so nothing is ambiguous: unlabeled; one step trains",),
         accepted=True, check=lambda c, err: (finished_one_step(c, err), _assert_in(
             "holds images at its top level: unlabeled", err))[0]),
    Case("images-labelled-labels-false", "train vision",
         "class folders with `data.labels: false` (the note said \"unlabeled (no class folders)\")",
         lambda c: (image_tree(c.tmp / "images", rgb_classes()), train_vision(c, vision_config(
             c, c.tmp / "images", data={"labels": False})))[1],
         ("accepted: the note names data.labels: false as the reason; one step trains",), accepted=True,
         check=lambda c, err: (said("data.labels: false: the images of")(c, err),
                               _assert_equal("no class folders" in err, False))[0]),
    Case("images-mixed-class-list", "train vision",
         "12 images at the top, a class folder, and `data.class_list` naming it",
         lambda c: (c.write("classes.txt", "c0\n"),
                    mixed_images(c, class_list=str(c.tmp / "classes.txt")))[1],
         ("data.class_list selects class folders", "holds images at its top level"), check=no_step),
    # ---- encode / eval of what is not what it seems
    Case("encode-output-inside-model", "encode", "`encode MODEL -o MODEL/emb.npy` (the model's runs then "
         "could not resume: its fingerprint changed)",
         lambda c: encode(c, str(model_copy(c)), b"one .\n", "--output", str(c.tmp / "model" / "emb.npy")),
         ("--output", "{model}/emb.npy is inside {model}, a folder this command reads (MODEL)"),
         check=absent("model/emb.npy")),
    Case("encode-images-output-inside-images", "encode",
         "`encode RUN --images F -o F/emb.npy` (the array written among the images)",
         lambda c: (c.protect(image_tree(c.tmp / "ims", rgb_classes(1, 2), ("test",))), encode_images_cmd(
             c, c.fixture("vision_run"), c.tmp / "ims" / "test", c.tmp / "ims" / "test" / "emb.npy"))[1],
         ("--output", "is inside", "this command reads")),
    Case("encode-text-model-images", "encode", "`encode TEXT_MODEL --images F` (the message asked whether "
         "it was a run folder)",
         lambda c: encode_images_cmd(c, c.fixture("tiny_bert_dir"),
                                     image_tree(c.tmp / "ims", rgb_classes(1, 2), ("test",)) / "test"),
         ("MODEL", "is a text model folder", "sentences from standard input")),
    Case("encode-vision-run-sentences", "encode", "`encode VISION_RUN < sentences` (the message named "
         "`hardmix eval text`)",
         lambda c: encode(c, str(c.fixture("vision_run")), b"one .\n"),
         ("a training run folder without a text model", "hardmix encode RUN --images FOLDER")),
    Case("encode-output-without-npy", "encode", "`encode MODEL -o emb` (no `.npy`: neighbours could not "
         "read what it wrote)",
         lambda c: encode(c, str(c.fixture("tiny_bert_dir")), b"one .\n", "--output", str(c.tmp / "emb")),
         ("--output", "must end in .npy"), check=absent("emb")),
    Case("encode-unfinished-vision-run", "encode", "`encode RUN --images F`, RUN without its results.json "
         "(an unfinished run: encoded without a word)",
         lambda c: encode_images_cmd(c, vision_run_copy(c, "results.json"),
                                     image_tree(c.tmp / "ims", rgb_classes(1, 2), ("test",)) / "test"),
         ("accepted: encoded, with a note that the run is unfinished, as export gives",), accepted=True,
         check=noted_unfinished),
    Case("encode-checkpoint-without-config", "encode",
         "`encode CKPT --images F`, a vision checkpoint without its config (a KeyError traceback)",
         lambda c: encode_images_cmd(c, checkpoint_without(c, "config"),
                                     image_tree(c.tmp / "ims", rgb_classes(1, 2), ("test",)) / "test"),
         ("{ckpt}", "holds no run config (no 'config' entry)")),
    Case("eval-knn-checkpoint-without-config", "eval knn",
         "`eval knn CKPT`, a vision checkpoint without its config (a KeyError traceback)",
         lambda c: knn(c, checkpoint_without(c, "config"), eval_images(c)),
         ("{ckpt}", "holds no run config (no 'config' entry)")),
    Case("resume-checkpoint-without-config", "train vision",
         "`--resume` of an unfinished run whose checkpoint lacks its config (a KeyError traceback)",
         lambda c: resume_without_config(c),
         ("--resume", "is not a complete hardmix checkpoint (no config)", "another --output")),
    # ---- config show: the command's own validation
    Case("config-show-spec-stop-after", "config show",
         "`config show` of a spec whose task config holds `train.stop_after_steps` (rendered; compare "
         "refuses it)",
         lambda c: ["config", "show", compare_spec(c, good_spec(c) | {"tasks": {"text": {"config": str(
             config_file(c, text_config(c, eval={"at_end": True}, train={"stop_after_steps": 1}),
                         "stopping.yaml")), "score": "stsb_dev", "allow_selection_score": True}}})[1]],
         ("train.stop_after_steps: 1", "not a key a comparison can set")),
    Case("config-show-knn-unlabeled", "config show",
         "`config show` of a vision config selecting on `val_knn_top1` with `data.labels: false` (rendered; "
         "train refuses it)",
         lambda c: ["config", "show", str(config_file(c, vision_config(
             c, image_tree(c.tmp / "images", rgb_classes()), data={"labels": False},
             eval={"selection": "val_knn_top1"})))],
         ("eval.selection: val_knn_top1 needs labelled images",)),
    Case("config-show-duplicate-grid", "config show", "`config show` of a spec whose grid lists 0.2 twice",
         lambda c: ["config", "show", compare_spec(c, grid_spec(c, [0.2, 0.1, 0.2]))[1]],
         ("tune.grid.mixcse.mixcse.lam: the value 0.2 is listed twice",)),
    # ---- the write gate
    Case("compare-output-inside-model", "compare", "`compare --output MODEL/cmp`, MODEL the task's model "
         "folder (its cells would write into what they read)",
         lambda c: compare_into(c, good_spec(c) | {"tasks": {"text": {"config": str(config_file(
             c, text_config(c, model={"name_or_path": str(model_copy(c))}, eval={"at_end": True}),
             "text.yaml")), "score": "stsb_dev", "allow_selection_score": True}}}, c.tmp / "model" / "cmp"),
         ("--output", "is inside tasks.text's model.name_or_path", "choose another --output"),
         check=absent("model/cmp")),
    Case("compare-output-inside-images", "compare", "`compare --output IMAGES/cmp`, IMAGES the task's "
         "image folder (the plots would have become training images)",
         lambda c: compare_in_images(c),
         ("--output", "is inside tasks.img's data.dataset", "choose another --output"),
         check=absent("images/cmp")),
    Case("train-output-inside-model", "train text", "`train text --output MODEL/run` (accepted before: the "
         "run became part of the model folder's fingerprint)",
         lambda c: ["train", "text", str(config_file(c, text_config(
             c, model={"name_or_path": str(model_copy(c))}))), "--output", str(c.tmp / "model" / "run")],
         ("--output", "is inside the run's model.name_or_path", "choose another --output")),
    Case("eval-knn-json-inside-run", "eval knn", "`eval knn RUN --json RUN/knn.json` (a run folder, not a "
         "data or model folder: its checkpoint is what is read)",
         lambda c: knn(c, vision_run_copy(c), eval_images(c), "--json", str(c.tmp / "vrun" / "knn.json")),
         ("accepted: the scores written beside the run's own files, which are unchanged",), accepted=True,
         check=lambda c, err: _assert_equal(sorted(json.loads((c.tmp / "vrun" / "knn.json").read_text())),
                                            ["top1", "top5"])),
    Case("data-records-folder-link", "data", "`data download --root R`, `R/.hardmix` a link to a folder of "
         "the user's (the downloads folder and the lock were written through it)",
         records_link, ("{root}/.hardmix", "is a link", "not written"),
         check=absent("mine/downloads")),
    # ---- the plug-in wall
    Case("plugin-writes-through-data", "train text",
         "a plug-in strategy that halves `ctx.cosines.data` in place (no version counter sees it)",
         lambda c: plugin_train(c, "case_data_meddler", plugin_strategy(
             "data_meddler", "(ctx.cosines.data.mul_(0.5), ctx.cosines[:, :1].detach().clone(), {})[1:]"),
             "data_meddler"),
         ("strategy 'data_meddler': extra_cosines wrote into the context's cosines in place",
          "not through its version counter"), check=no_step),
    Case("plugin-excludes-every-negative", "train text",
         "a plug-in strategy excluding every negative (trained on a loss of 0, reported success)",
         lambda c: plugin_train(c, "case_excluder0", PLUG_EXCLUDE.format(keep=0), "excluder"),
         ("strategy 'excluder': exclude left 16 of 16 anchors with no negative",), check=no_step),
    Case("plugin-keeps-one-negative", "train text",
         "a plug-in strategy excluding all negatives but one per anchor",
         lambda c: plugin_train(c, "case_excluder1", PLUG_EXCLUDE.format(keep=1), "excluder"),
         ("accepted: one negative per anchor is a loss; one step trains",), accepted=True,
         check=finished_one_step),
    Case("plugin-raises-in-hook", "train text",
         "a plug-in strategy whose `reweight` raises KeyError (a 20-line traceback)",
         lambda c: plugin_train(c, "case_raiser", PLUG_RAISES, "raiser"),
         ("strategy 'raiser': reweight raised KeyError: 'weights'",), check=no_step),
    # ---- comparison specs
    Case("compare-duplicate-grid-value", "compare", "a tuning grid `mixcse.lam: [0.1, 0.2, 0.1]`",
         lambda c: compare_spec(c, grid_spec(c, [0.1, 0.2, 0.1])),
         ("tune.grid.mixcse.mixcse.lam: the value 0.1 is listed twice",)),
    Case("compare-grid-int-and-float", "compare", "a tuning grid `mixcse.lam` listing 0.5 and 5e-1",
         lambda c: compare_spec(c, grid_spec(c, [0.5, 5e-1])),
         ("tune.grid.mixcse.mixcse.lam: the value 0.5 is listed twice",)),
]

# -------------------------------------------------------------------------------------------- the doc
HEADER = """# Reliability: what bad input gets

Generated from `tests/reliability/cases.py` (the invariants below and the case table of the bad-input
suite) by `python -m tests.reliability.cases`; `tests/reliability/test_doc.py` fails when this file differs
from it, when a function named here does not exist, or when a test named here is not in its file. Do not edit
by hand.

Held-out hostile rounds, tried from the command line and kept apart from this table: [Hostile round,
2026-12-05 (held out)](hostile_round_2026-12-05.md), 53 cases across the six invariants: 47 passed and 6
failed, the 6 fixed since, each with a case or a test.
[Hostile round, 2026-12-06](hostile_round_2026-12-06.md): 33 cases against corpora, image
folders, `encode`, `config show`, resume, the write gate, the plug-in wall and comparison specs, kept in
this table (its last block): 26 failed on the code before the fixes and 7 passed; all 33 pass now.
"""

CASES_INTRO = """## The cases

Every case runs the command line in-process (`hardmix.cli.main`) on a fresh folder and checks:

- **refused** cases exit with a non-zero status and print exactly one line, `hardmix: error: ...`, holding
  each listed part (`<...>` is the file of the case) and no traceback;
- **accepted** cases exit 0 and do what the note says;
- in both, every file that existed before (a previous run folder, a checkpoint, a model folder) is
  byte-identical afterwards.

Permission problems and a full disk are simulated by making the OS call raise (`PermissionError`,
`OSError(ENOSPC)`), since CI runs as root. The fuzz tests (`tests/reliability/test_fuzz.py`) add random
values of every typed key of the text and vision configs (a valid config, or a `ConfigError` naming the
key) and random corpus bytes (sentences, or a one-line `CorpusError` naming the file and line).
Resume after SIGKILL, SIGTERM, a non-finite loss, the run folder's lock and atomic checkpoints are tested in
`tests/training/test_engine.py`.

The rest of the suite, beyond this table:

- `tests/reliability/test_signals.py` (fault injection): a real SIGTERM, SIGUSR1 or SIGINT delivered at
  points drawn by a seeded generator (a training step, a periodic evaluation, the final evaluation, a
  checkpoint write, two SIGINTs in a row), in both modalities: each run stops with a line saying how to
  resume, exit 128 + the signal and no traceback, and its `--resume` equals an uninterrupted run (losses
  step for step, weights exactly).
- `tests/reliability/test_properties.py` (hypothesis, derandomized): a mapping given for a config section
  equals its keys given one by one and keeps the keys it does not name; a YAML key given twice is refused
  naming its line; a compare spec's `set` reads the same nested or dotted; any spec shape is a spec or one
  `ConfigError` line; a checkpoint, results record or metrics file damaged anywhere (cut, a flipped byte,
  zeroed bytes) is refused in one line (a checkpoint's CRC-32 is checked) or read whole.
- `tests/reliability/test_images.py`: each pixel mode PIL opens (grey, bi-level, palette with and without
  transparency, RGBA, LA, a PNG's transparent colour, CMYK, YCbCr, 16-bit grey, grey+alpha, RGB and RGBA,
  EXIF orientation) decodes to the RGB a NumPy conversion of the stored values gives (alpha composited over
  white, 16 bits by their high byte), and `I`, `F` and `LAB` are refused naming the file and mode; a folder
  scan refuses a link into a loop, a folder link out of the data set and one file under two names, and
  labels each image by the class folder it is listed under.
- `tests/reliability/test_run_folder.py`: every file of a run follows the umask.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _parts(case: Case) -> str:
    if case.accepted:
        return case.expect[0]
    parts = [p.replace("{", "<").replace("}", ">") for p in case.expect]
    return "refused: " + ", ".join(f"`{p}`" if "`" not in p else p for p in parts)


@dataclass(frozen=True)
class Invariant:
    """What hardmix keeps true whatever the input, where it is kept (``module:qualified name``, each
    importable), what uses it, and its tests (``file::test``)."""

    statement: str
    kept_by: tuple[str, ...]
    used_by: str
    tests: tuple[str, ...]


_INV = "tests/reliability/test_invariants.py::"
INVARIANTS = (
    Invariant("Writes stay where the user said: every file hardmix creates, appends to, replaces or deletes "
              "goes through one gate (`hardmix/utils/confine.py`), which resolves it inside the folder named "
              "for it and refuses, in one line naming the path, a link anywhere between that folder and the "
              "file or at the file itself; `tests/core/test_write_gate.py` reads the code (`ast`) and fails "
              "on any write call outside the gate; names from a spec are plain identifiers, unique after "
              "normalization; cleanup deletes only what hardmix wrote, by name; no command writes onto one "
              "of its inputs.",
              ("hardmix.utils.confine:confined", "hardmix.utils.confine:makedirs",
               "hardmix.utils.confine:open_for_write", "hardmix.utils.confine:atomic_write",
               "hardmix.utils.confine:remove_written", "hardmix.compare.spec:check_names",
               "hardmix.cli:check_outputs"),
              "every writer of hardmix: a run folder (config, metrics, tensorboard, checkpoints, results, "
              "`best/`), a comparison's cells, logs, plots, reports and tuning points (their folders, "
              "cleanup, `--retry-failed`, the spec copy), `hardmix data download` (work and temporary "
              "folders, archives and their extraction), the decode cache, `hardmix export`, `hardmix "
              "encode`, every command's output options",
              ("tests/core/test_write_gate.py::test_no_write_call_outside_the_gate",
               "tests/core/test_write_gate.py::test_a_write_call_added_anywhere_is_flagged",
               "tests/core/test_write_gate.py::test_every_write_through_a_link_or_outside_is_refused",
               _INV + "test_spec_names_are_refused_or_every_cell_stays_inside_the_output",
               _INV + "test_removing_what_hardmix_wrote_never_touches_anything_outside_its_folder",
               _INV + "test_a_link_planted_in_the_output_folder_is_refused_and_nothing_is_written_through_it",
               "tests/compare/test_spec_and_extension.py::"
               "test_a_finished_cell_s_cleanup_deletes_only_what_hardmix_wrote")),
    Invariant("A finished result is final and says what made it: `results.json` records the fingerprint of "
              "its config (machine-only settings such as cache folders, worker and thread counts left out), "
              "data, inputs and hardmix's version, files by their content (each read once per machine, its "
              "SHA-256 cached by path, size, mtime, inode and ctime), every file a loader reads among them "
              "(every corpus layout, image folder and STS set; a Hub name by the files of the snapshot it "
              "resolves to); `--resume` refuses other data or inputs than the run started with (an image "
              "rewritten at the same size, a relative model resumed from another folder, a Hub name's "
              "revision moved), or a key that fixes what its scores mean (`MEANING`, a task's "
              "`meaning_keys`), and of a finished run says so and never trains, with or without "
              "its checkpoint, and reports the folder it is in (copied or moved); a record it cannot read is "
              "refused, not trained over; before any new cell of a comparison trains, every finished cell's "
              "record is compared with what it would be made from now, and a mismatch, or a record whose "
              "data cannot be established, refuses naming `--rerun-mismatched`, which moves such cells "
              "aside, kept, and runs them again; `train.precision: auto` is resolved once per comparison and "
              "recorded in its spec copy; one paired test pools only cells whose fingerprints agree but for "
              "the seed.",
              ("hardmix.training.fingerprint:config_digest", "hardmix.training.fingerprint:content_digests",
               "hardmix.training.fingerprint:data_mismatch", "hardmix.training.fingerprint:inputs_mismatch",
               "hardmix.training.resume_checks:check_same_data",
               "hardmix.training.resume_checks:check_same_inputs",
               "hardmix.training.resume_checks:check_same_meaning", "hardmix.text.data:corpus_files",
               "hardmix.text.model_source:hub_snapshot", "hardmix.text.task:model_files",
               "hardmix.training.resume_checks:finished_already",
               "hardmix.training.resume_checks:where_it_is",
               "hardmix.compare.fingerprints:check_cells", "hardmix.compare.precision:cell_precision",
               "hardmix.compare.summary:check_fingerprints", "hardmix.compare.grid:check_same_config"),
              "`hardmix train --resume` (text, vision, every trainer on the engine), `hardmix compare` "
              "(`--resume`, `--rerun-mismatched`, `--report-only`)",
              (_INV + "test_the_config_fingerprint_changes_exactly_when_a_key_that_makes_the_result_does",
               _INV + "test_fault_injection_a_finished_run_is_never_trained_again",
               "tests/training/test_engine.py::test_resuming_a_finished_run_says_so_and_exits_0",
               "tests/core/test_content_digests.py::test_a_file_is_read_again_only_when_one_of_its_fields_changed",
               "tests/training/test_same_data_rule.py::"
               "test_a_record_with_more_entries_passes_a_comparison_but_not_a_resume",
               "tests/compare/test_fingerprints.py::"
               "test_an_extension_after_an_evaluation_file_changed_at_the_same_size_is_refused_before_any_cell_"
               "trains",
               "tests/compare/test_fingerprints.py::"
               "test_auto_precision_is_resolved_once_per_comparison_and_kept_in_its_spec_copy",
               "tests/training/test_read_is_fingerprinted.py::"
               "test_every_file_a_corpus_is_read_from_is_in_its_fingerprint_and_changes_it",
               "tests/training/test_read_is_fingerprinted.py::"
               "test_every_image_training_reads_is_in_its_fingerprint_and_changes_it",
               "tests/training/test_read_is_fingerprinted.py::"
               "test_a_hub_name_is_fingerprinted_by_the_snapshot_it_resolves_to",
               "tests/training/test_meaning_on_resume.py::"
               "test_a_change_of_any_meaning_key_is_named_and_of_no_other_eval_key")),
    Invariant("A comparison always finishes: a cell or tuning point that fails, diverges or scores NaN is a "
              "recorded result with its reason; tuning chooses among the other points; `--resume` does not "
              "retry a recorded failure (`--retry-failed` does); keys that cannot belong in a cell are "
              "refused at validation, on each cell's final config (its task's config file, `set`, "
              "`strategy_set`, `strategy_args` and tuning point merged), and no entry changes which strategy "
              "a label names; killing `hardmix compare` leaves no training process behind.",
              ("hardmix.compare.grid:Cell.record_failure", "hardmix.compare.tuning:tuning_table",
               "hardmix.compare.cell_keys:check_cell_key", "hardmix.compare.cell_keys:check_cell_config",
               "hardmix.compare.cell_keys:check_entry_arguments"),
              "`hardmix compare` (local jobs and `--launcher slurm`), `--status`, `--report-only`",
              (_INV + "test_tuning_chooses_among_the_points_that_scored_and_says_when_none_did",
               "tests/compare/test_spec_and_extension.py::"
               "test_a_diverging_tuning_point_is_a_recorded_result_and_the_comparison_finishes",
               "tests/compare/test_spec_and_extension.py::"
               "test_killing_the_comparison_leaves_no_training_process_behind",
               "tests/compare/test_spec_and_extension.py::"
               "test_the_final_config_of_every_cell_is_checked_whatever_made_it")),
    Invariant("Plug-ins are contained: a built-in strategy cannot be replaced (the built-ins are known by "
              "identity, captured when hardmix registers them, never by the names a class reports); a "
              "plug-in is imported only when a name that is not built in is looked up; a plug-in that fails "
              "to import, is not a strategy or names a taken strategy affects only its own name (one warning "
              "naming its entry point, listed as broken); every output a strategy hands the loss "
              "(exclusions, weights, extra logits, estimates, statistics) is checked for shape, dtype, "
              "device and finiteness where it enters the loss, naming the strategy; a strategy that writes "
              "into what the core or another strategy computed is refused; a ramp's every value is checked "
              "against the setup before the first step; two entries of one name keep their own statistics.",
              ("hardmix.strategies.base:strategy_classes", "hardmix.strategies.base:_load_entry_points",
               "hardmix.losses.composition:_checked", "hardmix.losses.composition:_called",
               "hardmix.losses.composition:_check_finite",
               "hardmix.strategies.schedule:Scheduled.check_steps"),
              "every strategy lookup (training, comparisons, `hardmix strategies`, `hardmix.losses`), every "
              "loss computation",
              (_INV + "test_any_set_of_plug_ins_leaves_the_built_ins_and_every_other_name_as_they_were",
               "tests/core/test_registry.py::"
               "test_a_plug_in_cannot_replace_a_built_in_and_a_broken_one_affects_only_its_name",
               "tests/core/test_registry.py::"
               "test_a_strategy_s_faulty_logits_are_stopped_where_they_enter_the_loss_naming_it",
               "tests/core/test_plugin_wall.py::test_a_plug_in_copying_mixcse_s_names_cannot_replace_it",
               "tests/core/test_plugin_wall.py::test_building_built_in_strategies_imports_no_plug_in",
               "tests/core/test_plugin_wall.py::"
               "test_every_output_a_strategy_hands_the_loss_is_checked_naming_it",
               "tests/core/test_plugin_wall.py::"
               "test_a_strategy_that_writes_into_what_the_core_computed_is_refused",
               "tests/core/test_plugin_wall.py::"
               "test_every_value_a_ramp_takes_during_the_run_is_checked_before_the_first_step")),
    Invariant("Downloads are verified, or not used: a file is placed only once its published or pinned "
              "checksum (else its first download's recorded SHA-256) verifies; kept partial bytes are used "
              "only when the whole file then verifies, else the file is fetched again; an unverified source "
              "is never resumed; two downloads into one root take a lock; `HARDMIX_OFFLINE=1` and "
              "`--no-download` attempt no connection, in hardmix or in a library it calls (transformers and "
              "the Hub client are switched offline before they read their settings; a comparison's cells "
              "inherit it).",
              ("hardmix.datasets.download:download_file", "hardmix.datasets.manager:fetch_source",
               "hardmix.utils.offline:libraries_offline"),
              "`hardmix data download`, the Hub stand-in for a missing model, every source in "
              "`hardmix/datasets/sources.py`, every command (`hardmix.cli.main`), the engine, text's model "
              "loading",
              (_INV + "test_a_kept_partial_download_is_used_only_when_the_whole_file_verifies",
               "tests/reliability/test_offline.py::test_a_hub_model_name_offline_attempts_no_connection",
               "tests/core/test_download.py::test_a_damaged_partial_file_of_an_unverified_source_is_never_resumed",
               "tests/core/test_download.py::test_two_downloads_into_one_root_take_a_lock",
               "tests/core/test_data_download.py::"
               "test_a_kept_file_nothing_verifies_is_fetched_again_and_recorded")),
    Invariant("Every value and every evaluation is checked before work: strategy and schedule numbers are "
              "finite and in range; a schedule that never activates its strategy is refused; a degenerate "
              "evaluation set (empty, one pair, constant gold scores, a pair with an empty side) is refused "
              "naming its file by training, `hardmix eval`, every STS scorer and `hardmix data check` (the "
              "same loaders); every checkpoint, exported backbone and model "
              "folder is loaded through one key-by-key check (export, evaluation, resume, encode, training's "
              "starting model: the `weights-*` cases), a partial or mismatched one refused in one line "
              "naming the file, and a model folder whose weights do not deserialize is refused naming it; a "
              "k-NN "
              "never has fewer images in its bank than its k; test images of a class the training split "
              "lacks are refused naming it.",
              ("hardmix.utils.errors:check_number",
               "hardmix.losses.contrastive:ContrastiveLoss.check_schedules",
               "hardmix.text.senteval_data:scorable", "hardmix.training.checkpoint:check_matching",
               "hardmix.training.checkpoint:load_matching", "hardmix.vision.evaluation:checked_backbone",
               "hardmix.text.model:pretrained_model", "hardmix.text.model:model_folder_errors",
               "hardmix.vision.evaluation:RunEvaluation"),
              "config validation of every command, `hardmix train` before its first step and `--resume`, "
              "`hardmix eval`, `hardmix encode`, `hardmix export vision`, `hardmix data check`",
              (_INV + "test_a_strategy_or_schedule_number_is_finite_in_range_or_refused_naming_its_key",
               "tests/reliability/test_fuzz.py::test_random_values_of_text_config_keys",
               "tests/text/test_senteval_data.py::"
               "test_a_degenerate_evaluation_set_is_refused_before_training_naming_the_file",
               "tests/text/test_senteval_data.py::"
               "test_data_check_refuses_a_degenerate_evaluation_set_naming_the_file",
               "tests/text/test_senteval_data.py::test_every_sts_scorer_refuses_a_degenerate_set",
               "tests/vision/test_trainer.py::test_a_partial_checkpoint_is_refused_key_by_key",
               "tests/vision/test_validation_split.py::"
               "test_a_k_nn_with_more_neighbours_than_its_bank_is_refused_before_training",
               "tests/vision/test_trainer.py::"
               "test_test_images_of_a_class_the_training_split_lacks_are_refused_naming_it")),
)


def render_invariants() -> list[str]:
    lines = ["## The six invariants", "",
             "Each is kept in one place (the functions named), used by every command it concerns, and tested "
             "over its inputs by property tests (hypothesis, derandomized) and, where a fault can break it, "
             "by fault injection.", ""]
    for i, inv in enumerate(INVARIANTS, 1):
        lines += [f"{i}. **{inv.statement.split(':')[0]}**:{inv.statement.split(':', 1)[1]}",
                  f"   - kept by: {', '.join(f'`{k}`' for k in inv.kept_by)}",
                  f"   - used by: {inv.used_by}",
                  f"   - tested by: {', '.join(f'`{t}`' for t in inv.tests)}"]
    return lines + [""]


def render() -> str:
    lines = [HEADER, *render_invariants(), CASES_INTRO, "| command | input tried | what it gets | case |",
             "|---|---|---|---|"]
    for case in CASES:
        lines.append(f"| `hardmix {case.command}` | {_cell(case.tried)} | {_cell(_parts(case))} | "
                     f"`{case.name}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC}")
