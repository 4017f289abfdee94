"""Every registered strategy, whatever it is: frozen and validated, documented (``hardmix strategies`` and
docs/strategies.md's parameter tables), pure, and a finite loss with gradients to the anchors only in both
modes. A strategy of another package, registered through the entry-point group ``hardmix.strategies``, is
listed, validated, trained in both modalities and compared with no change to hardmix."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from hardmix.losses import ContrastiveLoss
from hardmix.strategies import (
    available_strategies,
    base,
    build_strategies,
    describe_strategies,
)
from hardmix.text.config import build_text_config
from hardmix.utils.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "strategies.md"
NAMES = available_strategies()


def _small(name: str) -> dict:
    return {"name": name, **base.registry()[name].small}


def _yaml_default(value: object) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _documented_parameters(name: str) -> dict[str, str]:
    """``parameter -> default`` of the table in the section ``## name`` (a row may name several)."""
    section = DOC.read_text(encoding="utf-8").split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 2:
            continue
        names = re.findall(r"`(\w+)`", cells[0])
        defaults = [d.strip().strip("`").split(" (")[0] for d in cells[1].split(",")]
        found.update(zip(names, defaults))
    return found


@pytest.mark.parametrize("name", NAMES)
def test_frozen_validated_documented_and_round_trips(name: str) -> None:
    cls = base.registry()[name]
    strategy = build_one(_small(name))
    assert cls.name == name and dataclasses.is_dataclass(strategy) and (cls.kinds() or name == "none")
    for field in cls.params():
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(strategy, field.name, getattr(strategy, field.name))
        assert field.metadata.get("help"), f"{name}.{field.name} has no help line"
        assert f"  {field.name} = {field.default!r}  (" in describe_strategies()
    assert build_one(strategy.config()) == strategy
    documented = _documented_parameters(name)
    assert documented == {f.name: _yaml_default(f.default) for f in cls.params()}, name
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.no_such_argument: unknown argument"):
        build_text_config({"loss": {"strategies": [{**_small(name), "no_such_argument": 1}]}})


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(8, 6, generator=g, dtype=torch.float64)
    z2 = z1 + 0.5 * torch.randn(8, 6, generator=g, dtype=torch.float64)
    queue = torch.randn(16, 6, generator=g, dtype=torch.float64)
    return z1, z2, queue


@pytest.mark.parametrize("name", NAMES)
def test_both_modes_give_a_finite_deterministic_loss_and_pure_statistics(name: str) -> None:
    z1, z2, queue = _inputs(seed=3)
    loss_fn = ContrastiveLoss(0.1, _small(name), both_directions=None)
    before = copy.deepcopy(loss_fn.strategies)
    for mode in ("in_batch", "queue"):
        results = []
        for _ in range(2):
            a, b, k = (x.clone().requires_grad_(True) for x in (z1, z2, queue))
            gen = torch.Generator().manual_seed(5)
            if mode == "in_batch":
                out = loss_fn.in_batch(a, b, generator=gen)
            else:
                ids = torch.arange(8), torch.cat([torch.arange(4), torch.full((12,), -2)])
                out = loss_fn.queue(a, b, k, *ids, generator=gen)
            out.loss.backward()
            assert math.isfinite(float(out.loss.detach())) and torch.isfinite(a.grad).all()
            assert a.grad.abs().sum() > 0
            if mode == "queue":
                assert b.grad is None and k.grad is None  # the keys and the queue are constants
            stats = out.stats()
            assert all(math.isfinite(v) for v in stats.values())
            assert all(k == name or "/" not in k or k.startswith(f"{name}/") for k in stats), stats
            results.append((out.loss.detach(), a.grad, stats))
        assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
        assert results[0][2] == results[1][2]
    assert loss_fn.strategies == before  # nothing was kept between calls


# ---- a strategy of another package -------------------------------------------------------------------

PLUGIN = textwrap.dedent('''
    """A strategy of another package: one synthetic negative, the positive pulled towards the anchor."""
    from dataclasses import dataclass

    import torch.nn.functional as F

    from hardmix.utils.errors import check_number
    from hardmix.strategies.base import Strategy, arg


    @dataclass(frozen=True)
    class PulledPositive(Strategy):
        """One negative per anchor: SG(normalize(w h + (1 - w) h'))."""

        name = "pulled_positive"
        paper = "a test plug-in"
        weight: float = arg(0.5, "weight of the anchor, in (0, 1)")

        def __post_init__(self):
            check_number("weight", self.weight, 0.0, 1.0)

        def extra_cosines(self, ctx):
            mixed = F.normalize(self.weight * ctx.anchors + (1 - self.weight) * ctx.positives, dim=-1)
            cosines = (ctx.anchors * mixed.detach()).sum(1, keepdim=True)
            return cosines, {"synthetic_sim": cosines.detach().mean()}
''')


@pytest.fixture
def plugin_installed(tmp_path, monkeypatch):
    """``pulled_positive`` in a module of an installed distribution that names it under the entry-point
    group (a dist-info folder on sys.path and PYTHONPATH, for the runs ``hardmix compare`` starts)."""
    site = tmp_path / "site"
    (site / "hardmix_test_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "hardmix_test_plugin.py").write_text(PLUGIN)
    (site / "hardmix_test_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hardmix-test-plugin\nVersion: 0.1\n")
    (site / "hardmix_test_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[hardmix.strategies]\npulled_positive = hardmix_test_plugin:PulledPositive\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_ENTRY_POINTS_LOADED", False)
    return site


def test_a_strategy_registered_through_the_entry_point_group_is_listed_validated_trained_and_compared(
    plugin_installed, tmp_path, tiny_text_config, tiny_vision_config, capsys
):
    from hardmix.cli import main
    from hardmix.config.loader import build_config
    from hardmix.text.task import TextTask
    from hardmix.training import run_training
    from hardmix.training.metrics import read_metrics
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.task import VisionTask

    assert "pulled_positive" in available_strategies()
    assert main(["strategies"]) == 0 and "pulled_positive: One negative per anchor" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.weight: must be in \(0, 1\)"):
        build_text_config({"loss": {"strategies": [{"name": "pulled_positive", "weight": 2}]}})

    text = copy.deepcopy(tiny_text_config)
    text["train"]["max_steps"] = 3
    text["loss"]["strategies"] = [{"name": "pulled_positive", "weight": 0.3}]
    run_training(TextTask, build_text_config(text), tmp_path / "text")
    vision = tiny_vision_config(train={"epochs": 1}, data={"max_samples": 96},
                                loss={"strategies": [{"name": "pulled_positive"}]})
    run_training(VisionTask, build_config(VisionConfig, vision), tmp_path / "vision")
    for run in ("text", "vision"):
        rows = [r for r in read_metrics(tmp_path / run) if "loss" in r]
        assert rows and all("pulled_positive/synthetic_sim" in r for r in rows)

    text.update(eval={"eval_steps": 0, "at_end": True})
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    spec = {"seeds": [1], "baseline": "none",
            "strategies": {"none": [{"name": "none"}], "pulled": [{"name": "pulled_positive"}]},
            "tasks": {"text": {"config": str(tmp_path / "text.yaml"), "score": "stsb_dev",
                                  "allow_selection_score": True}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["compare", str(tmp_path / "spec.yaml"), "--output", str(tmp_path / "cmp")]) == 0
    summary = yaml.safe_load((tmp_path / "cmp" / "summary.json").read_text())
    assert set(summary["tasks"]["text"]["strategies"]) == {"none", "pulled"}


HIJACK = '''
from dataclasses import dataclass

from hardmix.strategies.base import Strategy


@dataclass(frozen=True)
class MixCSE(Strategy):
    """A plug-in that claims MixCSE's name."""

    name = "mixcse"
    paper = "none"

    def extra_cosines(self, ctx):
        raise AssertionError("the built-in was replaced")
'''


def test_a_plug_in_cannot_replace_a_built_in_and_a_broken_one_affects_only_its_name(tmp_path, monkeypatch,
                                                                                     capsys):
    """A plug-in class ``MixCSE`` with ``name = "mixcse"`` silently replaced the built-in.
    It is left out with one warning naming its distribution; a plug-in that fails to import is left out
    likewise; ``hardmix strategies`` lists both as broken, and every other strategy works as before."""
    from hardmix.cli import main
    from hardmix.losses import mixcse_loss
    from hardmix.strategies.mixcse import MixCSE

    site = tmp_path / "site"
    info = site / "evil_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "evil_plugin.py").write_text(HIJACK)
    (site / "broken_plugin.py").write_text("import a_module_that_does_not_exist\n")
    (site / "exiting_plugin.py").write_text("raise SystemExit(3)\n")  # hostile round: it ended hardmix
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[hardmix.strategies]\nmixcse = evil_plugin:MixCSE\nbroken = broken_plugin:Thing\n"
        "exiting = exiting_plugin:Thing\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_BROKEN", {})
    monkeypatch.setattr(base, "_ENTRY_POINTS_LOADED", False)
    with pytest.warns(UserWarning) as caught:
        names = available_strategies()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3
    assert any("'exiting' left out: evil-plugin: exiting_plugin:Thing failed to import (SystemExit: 3)" in m
               for m in messages), messages
    assert any("'mixcse' left out: evil-plugin: evil_plugin:MixCSE names the strategy 'mixcse', a built-in "
               "of hardmix (hardmix.strategies.mixcse)" in m for m in messages), messages
    assert any("'broken' left out: evil-plugin: broken_plugin:Thing failed to import (ModuleNotFoundError"
               in m for m in messages), messages
    assert base.registry()["mixcse"] is MixCSE and "broken" not in names
    h1, h2 = torch.randn(6, 8), torch.randn(6, 8)
    assert torch.isfinite(mixcse_loss(h1, h2, lam=0.2, temperature=0.05))  # the built-in, not the plug-in
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.name: strategy 'broken' is a broken "
                                          "plug-in: evil-plugin: "):
        build_strategies(["broken"])
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "mixcse: broken plug-in, not usable" in out and "broken: broken plug-in, not usable" in out
    assert out.count("\nmixcse: ") + out.startswith("mixcse: ") == 2  # the built-in and the broken plug-in


def _faulty(kind: str):
    """A registered strategy whose extra logits are of the wrong shape (``shape``) or NaN (``nan``)."""
    @dataclasses.dataclass(frozen=True)
    class Faulty(base.Strategy):
        """A test strategy with a defect."""

        name = f"faulty_{kind}"
        paper = "a test"

        def extra_cosines(self, ctx):
            b = ctx.anchors.shape[0]
            if kind == "shape":
                return ctx.anchors[: b - 1] @ ctx.anchors.T, {}
            return torch.full((b, 2), math.nan), {}

    return Faulty


@pytest.mark.parametrize("kind, message", [
    ("shape",
     r"strategy 'faulty_shape': extra_cosines returned a block of shape \(5, 6\), expected \(6, M\)"),
    ("nan", r"strategy 'faulty_nan': extra_cosines returned NaN or \+inf values from finite similarities"),
])
def test_a_strategy_s_faulty_logits_are_stopped_where_they_enter_the_loss_naming_it(
    kind, message, monkeypatch, tmp_path, tiny_text_config, capsys
):
    """A plug-in returning logits of the wrong shape gave a bare torch traceback, one
    returning NaN logits was stopped with advice to lower train.lr; both now name the strategy, in the
    loss and through ``hardmix train`` (one line, exit 2)."""
    from hardmix.cli import main
    from hardmix.utils.errors import StrategyOutputError

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(_faulty(kind))
    h1, h2 = torch.randn(6, 8), torch.randn(6, 8)
    with pytest.raises(StrategyOutputError, match=message):
        ContrastiveLoss(temperature=0.1, strategies=[{"name": f"faulty_{kind}"}]).in_batch(h1, h2)
    config = copy.deepcopy(tiny_text_config)
    config["train"]["max_steps"] = 2
    config["loss"]["strategies"] = [{"name": f"faulty_{kind}"}]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "text", str(tmp_path / "c.yaml"), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert re.search(message.replace(r"\(5, 6\)", r"\(\d+, \d+\)").replace(r"\(6, M\)", r"\(\d+, M\)"), err)
    assert "Traceback" not in err and "train.lr" not in err


WARMUP = r"loss\.strategies\[0\]\.warmup_epochs: must be a non-negative number, got "
NEVER = r"loss\.strategies \(mixcse\)\.warmup_"


@pytest.mark.parametrize("entry, message", [
    ({"warmup_epochs": math.inf}, WARMUP + "inf"),
    ({"warmup_epochs": math.nan}, WARMUP + "nan"),
    ({"lam": {"start": 0.1, "end": 0.3, "epochs": math.inf}}, r"loss\.strategies\[0\]\.lam: ramp epochs"),
    ({"warmup_steps": 4}, NEVER + r"steps: its warm-up ends at step 4, at or after the run's last \(4\), so "
                                  "mixcse would never act"),
    ({"warmup_epochs": 2.0}, NEVER + r"epochs: its warm-up ends at step \d+"),
])
def test_schedules_that_cannot_be_or_would_never_act_are_refused_naming_the_key(entry, message, tmp_path,
                                                                               tiny_text_config):
    """``.inf`` and ``.nan`` in schedule arguments (a traceback before), and a warm-up
    that keeps the strategy inactive for the whole run (a silent baseline before), refused naming the key
    before any step."""
    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    config = copy.deepcopy(tiny_text_config)
    config["train"]["max_steps"] = 4
    config["loss"]["strategies"] = [{"name": "mixcse", **entry}]
    with pytest.raises(ConfigError, match=message):
        run_training(TextTask, build_text_config(config), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
