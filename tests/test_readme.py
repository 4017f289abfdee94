"""The README cannot drift from the code: its Python examples run as written, every ``hardmix`` command
it shows parses with the real command line and names files and data sets that exist, its test command is
the one CI runs, and the budgets it states (steps, evaluation interval, batch, images) are the configs'."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _config(path: str, overrides: dict | None = None) -> dict:
    """A config as YAML, with a compare spec's ``set`` overrides (dotted keys) applied."""
    cfg = yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))
    for key, value in (overrides or {}).items():
        *parents, leaf = key.split(".")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return cfg


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _stated(pattern: str) -> re.Match[str]:
    """The README's sentence matching ``pattern`` (whitespace-insensitive: sentences wrap)."""
    flat = re.sub(r"\s+", " ", _text())
    match = re.search(pattern, flat)
    assert match, f"README.md no longer states: {pattern}"
    return match


def _hardmix_commands() -> list[list[str]]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", _text(), flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("hardmix "):
                args = shlex.split(line)[1:]
                cut = [i for i, a in enumerate(args) if a in {"<", ">"}]  # shell redirections
                commands.append(args[: cut[0]] if cut else args)
    return commands


def test_readme_core_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", _text(), flags=re.S)
    assert blocks, "README.md has no python example"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102 - our own README
    synthetic = namespace["synthetic"]
    assert isinstance(synthetic, torch.Tensor) and synthetic.shape == (256, 1024 + 128, 128)
    assert torch.allclose(synthetic.norm(dim=-1), torch.ones(256, 1152), atol=1e-5)
    h1 = namespace["h1"]
    assert isinstance(h1, torch.Tensor) and h1.grad is not None and torch.isfinite(h1.grad).all()


def test_readme_python_training_example_runs(tmp_path, monkeypatch, data_root) -> None:
    """The README's ``hardmix.train`` example, as written (20 steps of the CPU MixCSE config)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", _text(), flags=re.S) if "hardmix.train(" in b)
    monkeypatch.chdir(tmp_path)  # the run folder lands here; the config is the repository's
    namespace: dict[str, object] = {}
    exec(compile(block.replace('"configs/', f'"{ROOT}/configs/'), str(README), "exec"), namespace)  # noqa: S102
    results = namespace["results"]
    assert results["steps"] == 20 and results["task"] == "text"
    assert (tmp_path / "runs" / "try" / "results.json").is_file()
    assert results["best_score"] is not None and "stsb_dev" in results["final_scores"]


def test_readme_commands_parse_and_name_what_exists() -> None:
    from hardmix.cli import build_parser
    from hardmix.datasets import DATASETS

    commands = _hardmix_commands()
    assert {c[0] for c in commands} >= {"data", "compare", "train", "eval"}, commands
    parser = build_parser()
    for args in commands:
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"README.md: `hardmix {' '.join(args)}` does not parse")
        for arg in args:
            if arg.startswith("configs/"):
                assert (ROOT / arg).is_file(), f"README.md names {arg}, which does not exist"
        if args[:2] == ["data", "download"]:
            unknown = [name for name in args[2:] if not name.startswith("-") and name not in DATASETS]
            assert not unknown, f"README.md downloads {unknown}: not in {sorted(DATASETS)}"


def test_readme_test_command_is_the_one_ci_runs() -> None:
    section = _text().split("## Tests", 1)[1]
    [command] = re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command.strip() in [line.strip() for line in ci], command


def test_readme_states_the_quickstart_comparison_as_configured() -> None:
    spec = _config("configs/compare/quickstart.yaml")
    text, vision = spec["tasks"]["text"], spec["tasks"]["vision"]
    cells = len(spec["strategies"]) * len(spec["tasks"]) * len(spec["seeds"])
    assert _number(_stated(r"It trains (\d+) short runs")[1]) == cells
    seeds = _stated(r"seeds (\d+) and (\d+) \(bert-mini")
    assert [int(seeds[1]), int(seeds[2])] == spec["seeds"]
    m = _stated(r"bert-mini for (\d+) steps of batch (\d+), selected on STS-B dev every (\d+) steps")
    base = _config(text["config"], text["set"])
    assert (int(m[1]), int(m[2]), int(m[3])) == (
        base["train"]["max_steps"], base["train"]["batch_size"], base["eval"]["eval_steps"])
    m = _stated(r"width-(\d+) CIFAR ResNet-18 on ([\d,]+) images for (\d+) epochs at (\d+) pixels, "
                r"selected on ([\d,]+) validation")
    base = _config(vision["config"], vision["set"])
    assert (int(m[1]), _number(m[2]), int(m[3]), int(m[4]), _number(m[5])) == (
        base["model"]["width"], base["data"]["max_samples"], base["train"]["epochs"],
        base["augment"]["crop_size"], base["data"]["val_samples"])


def test_readme_states_the_training_configs_as_configured() -> None:
    text = _config("configs/text/cpu_mixcse.yaml")
    m = _stated(r"batch (\d+), lr ([\d.e-]+), max length (\d+), tau ([\d.]+), lam ([\d.]+)\) "
                r"for (\d+) steps, scores STS-B dev every (\d+) steps")
    [mixcse] = text["loss"]["strategies"]
    assert (int(m[1]), float(m[2]), int(m[3]), float(m[4]), float(m[5]), int(m[6]), int(m[7])) == (
        text["train"]["batch_size"], text["train"]["lr"], text["data"]["max_length"],
        text["loss"]["temperature"], mixcse["lam"], text["train"]["max_steps"], text["eval"]["eval_steps"])

    vision = _config("configs/vision/cpu_mocov2_cifar10.yaml")
    m = _stated(r"It holds ([\d,]+) class-balanced CIFAR-10 training images out as a validation split .* "
                r"decodes ([\d,]+) of the others")
    assert _number(m[1]) == vision["data"]["val_samples"]
    images = _number(m[2])
    assert images == vision["data"]["max_samples"]
    m = _stated(r"for (\d+) epochs over them at (\d+) pixels \(([\d,]+) steps of batch (\d+), K (\d+), "
                r"m ([\d.]+), tau ([\d.]+)\), with crops of (\d+)-(\d+)% of the image and flips as its only "
                r"augmentations")
    batch = vision["train"]["batch_size"]
    epochs = vision["train"]["epochs"]
    assert (int(m[1]), int(m[2]), _number(m[3]), int(m[4]), int(m[5]), float(m[6]), float(m[7])) == (
        epochs, vision["augment"]["crop_size"], epochs * (images // batch), batch,
        vision["loss"]["queue_size"], vision["model"]["momentum"], vision["loss"]["temperature"])
    assert [int(m[8]) / 100, int(m[9]) / 100] == vision["augment"]["crop_scale"]
    aug = vision["augment"]
    assert aug["jitter_prob"] == aug["grayscale_prob"] == aug["blur_prob"] == 0.0  # beside the crops: flips
    m = _stated(r"on ([\d,]+) test images against ([\d,]+) training images")
    assert (_number(m[1]), _number(m[2])) == (
        vision["eval"]["knn_test_samples"], vision["eval"]["knn_train_samples"])
