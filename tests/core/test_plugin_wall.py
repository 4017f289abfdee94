"""Plug-ins behind a wall: the built-ins are known by identity, a plug-in is imported only
for a name that is not built in, every output a strategy hands the core is checked where it enters the loss
(naming the strategy), a strategy cannot write into what the core or another strategy computed, a ramp is
checked at every value it takes, and two entries of one list never share their statistics.

Each test failed on the code before this change (the plug-in replaced ``mixcse``: loss 59.3 instead of
6.44; building ``mixcse`` imported every plug-in; the defects below gave bare torch errors, a silently wrong
loss, or an error in mid-run)."""

from __future__ import annotations

import dataclasses
import math
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from hardmix.losses import ContrastiveLoss
from hardmix.strategies import MixCSE, base
from hardmix.strategies.build import build_strategies
from hardmix.utils.errors import ConfigError, StrategyArgumentError, StrategyOutputError

from ._reference import mixcse_loss_np

TAU = 0.05


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, entry: str,
            target: str) -> None:
    """``module`` (``source``) in an installed distribution ``wall-test`` that names ``module:target``
    under the entry-point group as ``entry``; the registry as this test's copy, the plug-ins not loaded."""
    site = tmp_path / "site"
    info = site / "wall_test-0.1.dist-info"
    info.mkdir(parents=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wall-test\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hardmix.strategies]\n{entry} = {module}:{target}\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_BROKEN", {})
    monkeypatch.setattr(base, "_ENTRY_POINTS_LOADED", False)


def views(seed: int = 0, b: int = 8, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z1, z2 = (torch.randn(b, d, generator=g, dtype=torch.float64) for _ in range(2))
    return z1, z2


# ---------------------------------------------------------------------------------- built-ins by identity
IMPOSTOR = '''
import dataclasses, torch
from hardmix.strategies.base import Strategy, register_strategy

@dataclasses.dataclass(frozen=True)
class Impostor(Strategy):
    """Copies MixCSE's module and class names, then registers itself under ``mixcse``."""
    name = "mixcse"
    def extra_cosines(self, ctx):
        return torch.full((ctx.cosines.shape[0], 4), 0.3, dtype=ctx.cosines.dtype), {}

Impostor.__module__ = "hardmix.strategies.mixcse"
Impostor.__qualname__ = Impostor.__name__ = "MixCSE"
{register}
'''


@pytest.mark.parametrize("how", ["decorator", "registry write"])
def test_a_plug_in_copying_mixcse_s_names_cannot_replace_it(how, tmp_path, monkeypatch):
    """A plug-in that copies MixCSE's module and class names onto its own class replaced the built-in
    ``mixcse`` with no warning (the loss went from 6.44 to 59.3); registering itself, or writing into the
    registry, it is now left out with one warning naming its entry point, and ``mixcse`` is the built-in:
    its loss is MixCSE's equation."""
    register = {"decorator": "register_strategy(Impostor)",
                "registry write": "import hardmix.strategies.base as b\nb._REGISTRY['mixcse'] = Impostor",
                }[how]
    module = f"impostor_{how.split()[0]}"
    install(tmp_path, monkeypatch, module, IMPOSTOR.replace("{register}", register), "helper", "Impostor")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = base.available_strategies()
    messages = [str(w.message) for w in caught if "plug-in" in str(w.message)]
    assert len(messages) == 1 and "strategy plug-in 'helper' left out: wall-test:" in messages[0], messages
    assert "'mixcse'" in messages[0] and "built-in" in messages[0] and "\n" not in messages[0]
    assert "mixcse" in names and "helper" in base.broken_plugins()
    assert base.registry()["mixcse"] is MixCSE and base.lookup("mixcse") is MixCSE
    assert base._REGISTRY["mixcse"] is MixCSE  # restored, for whoever reads it
    [built] = build_strategies(["mixcse"])
    assert type(built) is MixCSE
    z1, z2 = views()
    loss = float(ContrastiveLoss(TAU, "mixcse").in_batch(z1, z2).loss)
    assert loss == pytest.approx(mixcse_loss_np(z1.numpy(), z2.numpy(), 0.2, TAU, True), rel=1e-10)


# ------------------------------------------------------------------------------------ imported when asked
MARKED = '''
import dataclasses, pathlib, torch
from hardmix.strategies.base import Strategy

pathlib.Path({marker!r}).write_text("imported")

@dataclasses.dataclass(frozen=True)
class Lazy(Strategy):
    """A plug-in whose import leaves a mark."""
    name = "lazy_plugin"
    def extra_cosines(self, ctx):
        return ctx.cosines[:, :1].detach().clone(), {{}}
'''


def test_building_built_in_strategies_imports_no_plug_in(tmp_path, monkeypatch, tiny_text_config):
    """Building ``none`` or ``mixcse`` imported every installed plug-in (``registry()`` loaded them all):
    a plug-in is now imported only when a name that is not built in is looked up; the listing imports them."""
    from hardmix.compare.spec import parse_spec
    from hardmix.config.loader import build_config
    from hardmix.text.task import TextTask

    marker = tmp_path / "imported"
    install(tmp_path, monkeypatch, "lazy_plugin_mod", MARKED.format(marker=str(marker)), "lazy_plugin",
            "Lazy")
    build_strategies(["none", {"name": "mixcse", "lam": 0.3}, {"name": "mochi", "warmup_steps": 2}])
    ContrastiveLoss(TAU, "mixcse").in_batch(*views())
    cfg = build_config(TextTask.config_class, {**tiny_text_config, "loss": {"strategies": ["mixcse"]}})
    TextTask.about(cfg).auto_bf16()
    (tmp_path / "c.yaml").write_text("{}\n")
    parse_spec({"seeds": [1], "strategies": {"none": ["none"], "m": [{"name": "mixcse"}]},
                "tasks": {"text": {"config": str(tmp_path / "c.yaml")}},
                "tune": {"seeds": [9], "grid": {"none": {}, "m": {"mixcse.lam": [0.1]}},
                         "equal_budget": False}})
    assert not marker.exists() and not base._ENTRY_POINTS_LOADED
    with pytest.raises(ConfigError, match=r"unknown strategy 'nope'"):
        build_strategies(["nope"])  # a name not built in: the plug-ins are loaded to look for it
    assert marker.exists() and base.lookup("lazy_plugin").__name__ == "Lazy"


# ------------------------------------------------------------------------- outputs checked at the boundary
def _defect(kind: str) -> type[base.Strategy]:
    """A strategy named ``defect_<kind>`` whose output has one defect."""
    inf, nan = math.inf, math.nan

    def hook(ctx):  # noqa: ANN001, ANN202
        b, n = ctx.cosines.shape
        ok = ctx.cosines[:, :2].detach().clone()
        return {
            "int_logits": (torch.full((b, 2), 50), {}),
            "list": [ok, {}],
            "shape": (ok[: b - 1], {}),
            "meta_device": (torch.empty(b, 2, device="meta"), {}),
            "posinf_logits": (ok.index_fill(1, torch.tensor([0]), inf), {}),
            "stat_vector": (ok, {"sim": ok[:, 0]}),
            "stat_nan": (ok, {"sim": torch.tensor(nan)}),
            "stat_float_nan": (ok, {"sim": nan}),
            "stat_text": (ok, {"sim": "high"}),
            "float_mask": (torch.zeros(b, n), {}),
            "nan_weights": (torch.zeros(b, n, dtype=ctx.cosines.dtype).index_put((torch.tensor([0]),) * 2,
                                                                                 torch.tensor(nan)), {}),
            "estimate_shape": (torch.zeros(b - 1, dtype=ctx.cosines.dtype), {}),
            "estimate_inf": (torch.full((b,), inf, dtype=ctx.cosines.dtype), {}),
        }[kind]

    method = {"float_mask": "exclude", "nan_weights": "reweight", "estimate_shape": "estimator",
              "estimate_inf": "estimator"}.get(kind, "extra_cosines")
    body = {method: (lambda self, ctx, *a: hook(ctx)), "__doc__": "A defect.", "name": f"defect_{kind}",
            "__annotations__": {}}
    return dataclasses.dataclass(frozen=True)(type(f"Defect_{kind}", (base.Strategy,), body))


DEFECTS = [
    ("int_logits", r"extra_cosines returned a block of dtype torch\.int64, expected a floating dtype"),
    ("list", r"extra_cosines returned list, expected None or \(tensor, statistics mapping\)"),
    ("shape", r"extra_cosines returned a block of shape \(7, 2\), expected \(8, M\)"),
    ("meta_device", r"extra_cosines returned a block on meta, expected cpu"),
    ("posinf_logits", r"extra_cosines returned NaN or \+inf values from finite similarities"),
    ("stat_vector", r"extra_cosines: statistic 'sim' is a tensor of shape \(8,\)"),
    ("stat_nan", r"extra_cosines: statistic 'sim' is NaN or infinite from finite similarities"),
    ("stat_float_nan", r"extra_cosines: statistic 'sim' is NaN or infinite"),
    ("stat_text", r"extra_cosines: statistic 'sim' is a str, expected a real scalar"),
    ("float_mask", r"exclude returned a block of dtype torch\.float32, expected torch\.bool"),
    ("nan_weights", r"reweight returned NaN or \+inf values from finite similarities"),
    ("estimate_shape", r"estimator returned a block of shape \(7,\), expected \(8,\)"),
    ("estimate_inf", r"estimator returned NaN or \+inf values"),
]


@pytest.mark.parametrize("mode", ["in_batch", "queue"])
@pytest.mark.parametrize("kind, message", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_every_output_a_strategy_hands_the_loss_is_checked_naming_it(kind, message, mode, monkeypatch):
    """Integer logits were used as numbers, a float exclusion mask, a statistic that is a vector or a
    string gave bare torch errors (or one at logging time), NaN weights on masked entries and a NaN
    statistic passed unseen, an estimate of the wrong shape was broadcast: each is now refused where it
    enters the loss, naming the strategy and the hook."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(_defect(kind))
    loss_fn = ContrastiveLoss(TAU, [f"defect_{kind}"])
    g = torch.Generator().manual_seed(1)
    q, k, queue = (torch.randn(8, 6, generator=g) for _ in range(3))
    with pytest.raises(StrategyOutputError, match=rf"^strategy 'defect_{kind}': {message}"):
        if mode == "in_batch":
            loss_fn.in_batch(q, k)
        else:
            loss_fn.queue(q, k, queue)


# ---------------------------------------------------------------------------------- nothing written into
@dataclasses.dataclass(frozen=True)
class Meddler(base.Strategy):
    """Writes into one of the context's tensors (``target``), then returns a good column."""

    name = "meddler"
    target: str = "cosines"

    def extra_cosines(self, ctx):  # noqa: ANN001, ANN201
        with torch.no_grad():
            if self.target == "unnormalized.anchors":
                ctx.unnormalized.anchors.mul_(2.0)
            elif self.target == "anchors (a view)":
                ctx.anchors[:, :1].zero_()
            elif self.target == "negative_mask":
                ctx.negative_mask.fill_(True)
            else:
                getattr(ctx, self.target).mul_(0.5)
        return ctx.cosines[:, :1].detach().clone(), {}


@pytest.mark.parametrize("mode, target", [
    ("in_batch", "cosines"), ("in_batch", "anchors (a view)"), ("in_batch", "positives"),
    ("in_batch", "candidates"), ("in_batch", "negative_mask"), ("in_batch", "unnormalized.anchors"),
    ("queue", "cosines"), ("queue", "positive_cosines"), ("queue", "candidates"),
])
def test_a_strategy_that_writes_into_what_the_core_computed_is_refused(mode, target, monkeypatch):
    """A strategy that scaled ``ctx.cosines`` in place changed the core's InfoNCE term (and every later
    strategy's input) without a word: the loss of ``[mixcse, meddler]`` was not MixCSE's plus a column. The
    context's tensors' version counters are compared around every call, so such a write is refused naming
    the strategy, its hook and the tensor."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(Meddler)
    # in-batch, the candidates are the positives themselves
    field = {"anchors (a view)": "anchors", "candidates": "(positives|candidates)"}.get(target, target)
    loss_fn = ContrastiveLoss(TAU, [MixCSE(), Meddler(target)])
    g = torch.Generator().manual_seed(2)
    q, k, queue = (torch.randn(8, 6, generator=g) for _ in range(3))
    q.requires_grad_(True)
    wrote = rf"^strategy 'meddler': extra_cosines wrote into the context's {field} in place"
    with pytest.raises(StrategyOutputError, match=wrote):
        if mode == "in_batch":
            loss_fn.in_batch(q.clone(), k)
        else:
            loss_fn.queue(q.clone(), k, queue)


def test_the_checks_leave_every_built_in_s_loss_and_gradient_unchanged():
    """The checks add comparisons only: MixCSE's loss and gradient are its NumPy equation's, and a loss
    under ``torch.inference_mode`` (no version counters) is computed as before."""
    z1, z2 = views(3)
    z1.requires_grad_(True)
    out = ContrastiveLoss(TAU, {"name": "mixcse", "lam": 0.3}).in_batch(z1, z2)
    out.loss.backward()
    want = mixcse_loss_np(z1.detach().numpy(), z2.numpy(), 0.3, TAU, True)
    assert float(out.loss.detach()) == pytest.approx(want, rel=1e-10)
    with torch.inference_mode():
        again = ContrastiveLoss(TAU, {"name": "mixcse", "lam": 0.3}).in_batch(z1.detach(), z2)
    assert float(again.loss) == float(out.loss.detach())


# ------------------------------------------------------------------------------ every value of a ramp
def test_a_ramp_is_checked_against_the_setup_at_its_start_not_only_its_end(tiny_text_config):
    """MoCHi with ``n_hard`` ramping from 64 down to 4 passed the check of a batch of 16 (only its final 4
    was compared) and failed at step 0; the most any value of the run needs is compared now."""
    from hardmix.config.loader import build_config
    from hardmix.text.task import TextTask

    ramp = {"name": "mochi", "n_hard": {"start": 64, "end": 4, "steps": 10}, "n_pair": 4, "n_query": 2}
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.n_hard: 64 negatives needed per anchor"):
        build_strategies([ramp]).check_setup(15, "15 in-batch negatives")
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.n_hard: 64 negatives needed per anchor"):
        build_config(TextTask.config_class, {**tiny_text_config, "loss": {"strategies": [ramp]}})
    ramped_filter = [{"name": "false_negative_filter", "top_k": {"start": 6, "end": 1, "steps": 5}},
                     {"name": "mochi", "n_hard": 8, "n_pair": 4, "n_query": 2}]
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[1\]\.n_hard: 14 negatives needed per anchor "
                                          r"\(8 plus the 6 the other strategies exclude first\)"):
        build_strategies(ramped_filter).check_setup(12, "12 in-batch negatives")


def test_two_ramps_are_checked_together_at_every_corner():
    """``n_hard`` 8 -> 64 with ``n_pair`` 100 -> 10 was accepted (each start was checked with the other's
    end) and refused at step 0, mid-run: 100 mixtures of pairs among 8 (28 exist). Every corner is checked
    when the strategy is built."""
    spec = {"name": "mochi", "n_hard": {"start": 8, "end": 64, "steps": 10},
            "n_pair": {"start": 100, "end": 10, "steps": 10}, "n_query": 2}
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.n_pair: ramp 100 mixtures of distinct "
                                          r"pairs need as many pairs among n_hard=8 \(28 exist\) "
                                          r"\(n_hard=8, n_pair=100\)"):
        build_strategies([spec])


@dataclasses.dataclass(frozen=True)
class PowerOfTwo(base.Strategy):
    """A test strategy whose argument must be a power of two (not an interval)."""

    name = "power_of_two"
    width: int = 2

    def __post_init__(self) -> None:
        if self.width < 1 or self.width & (self.width - 1):
            raise StrategyArgumentError("width", f"must be a power of two, got {self.width}")

    def extra_cosines(self, ctx):  # noqa: ANN001, ANN201
        return ctx.cosines[:, : self.width].detach().clone(), {}


def test_every_value_a_ramp_takes_during_the_run_is_checked_before_the_first_step(monkeypatch):
    """A ramp of ``width`` from 2 to 8 passes its corners, but takes 3 at step 1: that value was refused in
    mid-run; the run's every step is checked before the first (``check_schedules``, which the engine calls
    once the steps are known), naming the argument and the step."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(PowerOfTwo)
    loss_fn = ContrastiveLoss(TAU, [{"name": "power_of_two", "width": {"start": 2, "end": 8, "steps": 6},
                                     "warmup_steps": 2}])
    loss_fn.check_schedules(3)  # steps 0-2: the warm-up, then width 2
    with pytest.raises(ConfigError, match=r"^loss\.strategies \(power_of_two\)\.width: ramp must be a power "
                                          r"of two, got 3 \(width=3 at step 3\)$"):
        loss_fn.check_schedules(100)


# ------------------------------------------------------------------------------- entries share nothing
def test_two_entries_of_one_name_keep_their_own_statistics_and_schedules():
    """Two ``mixcse`` entries shared one statistics key: the second's values overwrote the first's. Each
    entry now reports under its own label (``mixcse[0]``, ``mixcse[1]``), each equal to what that entry
    alone reports on the same inputs; two scheduled entries keep their own schedule values."""
    z1, z2 = views(5)
    both = ContrastiveLoss(TAU, [{"name": "mixcse", "lam": 0.1}, {"name": "mixcse", "lam": 0.6}])
    both = both.in_batch(z1, z2)
    for i, lam in enumerate((0.1, 0.6)):
        alone = ContrastiveLoss(TAU, [{"name": "mixcse", "lam": lam}]).in_batch(z1, z2)
        alone = alone.strategy_stats["mixcse"]
        assert {k: float(v) for k, v in both.strategy_stats[f"mixcse[{i}]"].items()} == \
            {k: float(v) for k, v in alone.items()}
    assert "mixcse" not in both.strategy_stats
    ramps = ContrastiveLoss(TAU, [{"name": "mixcse", "lam": {"start": 0.1, "end": 0.5, "steps": 4}},
                                  {"name": "mixcse", "lam": {"start": 0.3, "end": 0.3, "steps": 4}}])
    stats = ramps.in_batch(z1, z2, step=2).stats()
    assert stats["mixcse[0]/lam"] == pytest.approx(0.3) and stats["mixcse[1]/lam"] == pytest.approx(0.3)
    stats = ramps.in_batch(z1, z2, step=1).stats()
    assert stats["mixcse[0]/lam"] == pytest.approx(0.2) and stats["mixcse[1]/lam"] == pytest.approx(0.3)
    assert np.isfinite(stats["loss"])


# ------------------------------------------------------------------------- the built-ins pass unguarded
def test_only_strategies_that_are_not_built_in_pass_the_guards(monkeypatch):
    """Every built-in passed the plug-in guards on every call (the MoCHi step cost 1.17x MoCo-v2's against
    1.03x without them). A built-in, known by identity, now enters the loss as it is: the guards
    run for the others only, a subclass of a built-in included, which is checked exactly as before."""
    from hardmix.losses import composition

    calls: list[str] = []
    checked = composition._checked
    monkeypatch.setattr(composition, "_checked", lambda out, hook, *a, **k: calls.append(hook) or
                        checked(out, hook, *a, **k))
    z1, z2 = views(4)
    builtin = ContrastiveLoss(TAU, [MixCSE(lam=0.3)]).in_batch(z1, z2)
    assert calls == [] and MixCSE.builtin()
    assert float(builtin.loss) == pytest.approx(mixcse_loss_np(z1.numpy(), z2.numpy(), 0.3, TAU, True),
                                                rel=1e-10)

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))

    @dataclasses.dataclass(frozen=True)
    class Derived(MixCSE):
        name = "derived_mixcse"

        def extra_cosines(self, ctx):  # noqa: ANN001, ANN201
            block, stats = super().extra_cosines(ctx)
            return block.masked_fill(torch.ones_like(block, dtype=torch.bool), math.nan), stats

    base.register_strategy(Derived)
    assert not Derived.builtin()
    with pytest.raises(StrategyOutputError, match=r"^strategy 'derived_mixcse': extra_cosines returned NaN"):
        ContrastiveLoss(TAU, [Derived(lam=0.3)]).in_batch(z1, z2)
    assert calls == ["strategy 'derived_mixcse': extra_cosines"]


# ------------------------------------------------ writes the version counter misses; empty rows; raises
@dataclasses.dataclass(frozen=True)
class DataMeddler(base.Strategy):
    """Writes through ``.data`` (a tensor sharing the storage with its own version counter), then returns a
    good column."""

    name = "data_meddler"
    target: str = "cosines"

    def extra_cosines(self, ctx):  # noqa: ANN001, ANN201
        getattr(ctx, self.target).data.mul_(0.5)
        return ctx.cosines[:, :1].detach().clone(), {}


@pytest.mark.parametrize("mode, target", [("in_batch", "cosines"), ("in_batch", "anchors"),
                                          ("queue", "positive_cosines"), ("queue", "candidates")])
def test_a_write_through_data_is_refused_naming_the_tensor(mode, target, monkeypatch):
    """``ctx.cosines.data.mul_(0.5)`` bumps no version counter: the wall let it through (a wrong loss,
    trained silently). The context's contents are now compared too, read once with the loss."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(DataMeddler)
    loss_fn = ContrastiveLoss(TAU, [MixCSE(), DataMeddler(target)])
    g = torch.Generator().manual_seed(2)
    q, k, queue = (torch.randn(8, 6, generator=g) for _ in range(3))
    q.requires_grad_(True)
    field = "(positives|candidates)" if (mode, target) == ("in_batch", "candidates") else target
    with pytest.raises(StrategyOutputError, match=rf"^strategy 'data_meddler': extra_cosines wrote into the "
                                                  rf"context's {field} in place \(not through its version"):
        if mode == "in_batch":
            loss_fn.in_batch(q.clone(), k)
        else:
            loss_fn.queue(q.clone(), k, queue)


@dataclasses.dataclass(frozen=True)
class ExcludeAll(base.Strategy):
    """Excludes every negative of the anchors in ``rows`` (all when None)."""

    name = "exclude_all"
    rows: int | None = None

    def exclude(self, ctx):  # noqa: ANN001, ANN201
        mask = ctx.negative_mask.clone()
        if self.rows is not None:
            mask[self.rows:] = False
        return mask, {}


@pytest.mark.parametrize("mode", ["in_batch", "queue"])
@pytest.mark.parametrize("rows, left", [(None, 8), (3, 3)])
def test_an_exclusion_that_leaves_an_anchor_with_no_negative_is_refused(rows, left, mode, monkeypatch):
    """Excluding every negative gave a loss of exactly 0 (only the positive in each row's logsumexp), and
    the run trained nothing and reported success; each anchor left with no negative is now refused, naming
    the strategy and counting the anchors. Keeping one negative per anchor is fine."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(ExcludeAll)
    g = torch.Generator().manual_seed(4)
    q, k, queue = (torch.randn(8, 6, generator=g) for _ in range(3))
    loss_fn = ContrastiveLoss(TAU, [ExcludeAll(rows)])
    run = (lambda fn: fn.in_batch(q, k)) if mode == "in_batch" else (lambda fn: fn.queue(q, k, queue))
    with pytest.raises(StrategyOutputError, match=rf"^strategy 'exclude_all': exclude left {left} of 8 "
                                                  r"anchors with no negative \(anchor 0 first\)"):
        run(loss_fn)
    assert float(run(ContrastiveLoss(TAU, ["false_negative_filter"])).loss) > 0


@dataclasses.dataclass(frozen=True)
class Raiser(base.Strategy):
    """Raises from inside its hook, as a broken plug-in does."""

    name = "raiser"

    def extra_cosines(self, ctx):  # noqa: ANN001, ANN201
        return {}["missing\nkey"]


def test_a_plug_in_s_exception_is_one_error_naming_the_strategy_and_the_hook(monkeypatch):
    """A plug-in that raised gave its own 20-line traceback through the trainer; it is now one
    StrategyOutputError naming the strategy, the hook and the exception, on one line."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_strategy(Raiser)
    q, k = views(5)
    with pytest.raises(StrategyOutputError) as err:
        ContrastiveLoss(TAU, ["raiser"]).in_batch(q, k)
    assert str(err.value) == "strategy 'raiser': extra_cosines raised KeyError: 'missing\\nkey'"
    assert isinstance(err.value.__cause__, KeyError)


# ---- the hooks of an older hardmix ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _OldColumns(base.Strategy):
    """Extra columns as an older hardmix took them: logits, already divided by tau."""

    name = "old_columns_test"

    def extra_logits(self, ctx):  # noqa: ANN001, ANN201
        return ctx.anchors[:, :1].detach() / 0.1, {}


@dataclasses.dataclass(frozen=True)
class _OldEstimator(base.Strategy):
    """An estimator as an older hardmix called it: without the temperature."""

    name = "old_estimator_test"

    def estimator(self, ctx, positive_logits, negative_logits):  # noqa: ANN001, ANN201
        return torch.logsumexp(negative_logits, dim=1) - positive_logits, {}


def test_a_strategy_with_the_hooks_of_an_older_hardmix_is_refused_in_one_line() -> None:
    """The loss now takes cosines from ``extra_cosines`` and divides every column by tau itself, and calls
    ``estimator`` with the temperature: a strategy written for the older hooks would have been silently
    left out (``extra_logits`` is no hook now) or failed inside the loss. It is refused where it is built or
    handed to the loss, naming the class and the hook, and cannot be registered."""
    with pytest.raises(ConfigError, match=r"^strategies: _OldColumns defines extra_logits, a hook hardmix no "
                                          r"longer calls: return the extra negatives' cosines"):
        ContrastiveLoss(0.1, [_OldColumns()])
    with pytest.raises(ConfigError, match=r"^strategies: _OldEstimator\.estimator takes \(ctx, "
                                          r"positive_logits, negative_logits\)"):
        ContrastiveLoss(0.1, [_OldEstimator()])
    for cls in (_OldColumns, _OldEstimator):
        with pytest.raises(ValueError, match=cls.__name__) as caught:
            base.register_strategy(cls)
        assert "\n" not in str(caught.value)
    assert "old_columns_test" not in base.registry() and "old_estimator_test" not in base.registry()
