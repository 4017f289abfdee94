"""A new modality needs no change to the core: a third task, registered through the ``hardmix.tasks``
entry points by a package made here, trains through the engine and the command line."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

from hardmix.cli import main as cli
from hardmix.training import read_results
from hardmix.training.metrics import read_metrics

TINY_TASK = '''
from dataclasses import dataclass, field
import torch
from hardmix.losses import ContrastiveLoss
from hardmix.training import ConfigFacts, EvalSection, LogSection, LossSection, StepResult, Task, TrainSection

@dataclass
class TinyConfig:
    train: TrainSection = field(default_factory=TrainSection)
    loss: LossSection = field(default_factory=LossSection)
    eval: EvalSection = field(default_factory=EvalSection)
    log: LogSection = field(default_factory=LogSection)
    output: str = "runs/tiny"

class TinyFacts(ConfigFacts):
    """What a tiny config says: its report (the rest, the defaults)."""
    def report(self, results):
        return f"tiny: best {results['selection_metric']} {results['best_score']:.3f}"

class TinyTask(Task):
    """Two noisy views of Gaussian points, a linear encoder, the core's InfoNCE."""
    name, config_class, facts_class, selection_metric = "tiny", TinyConfig, TinyFacts, "alignment_score"

    def build(self):
        self.points = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
        self.net = torch.nn.Linear(8, 4)
        self.loss_fn = ContrastiveLoss(self.cfg.loss.temperature, self.cfg.loss.strategies)
    def model(self): return self.net
    def steps_for(self, epochs): return epochs * 256 // self.cfg.train.batch_size
    def configure_optimizers(self, total):
        opt = torch.optim.SGD(self.net.parameters(), lr=self.cfg.train.lr)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    def batches(self, start, stop):
        b = self.cfg.train.batch_size
        for step in range(start, stop):
            x = self.points[torch.randperm(256, generator=torch.Generator().manual_seed(step))[:b]]
            yield x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
    def train_step(self, batch, step):
        out = self.loss_fn.in_batch(self.net(batch[0]), self.net(batch[1]), step=step)
        return StepResult(out.loss, self.cfg.train.batch_size, out.stats)
    def evaluate(self):
        with torch.no_grad():
            z = torch.nn.functional.normalize(self.net(self.points), dim=1)
            noisy = torch.nn.functional.normalize(self.net(self.points + 0.1), dim=1)
        return {"alignment_score": float((z * noisy).sum(1).mean())}
'''


#: A task of an older hardmix's shape: its scores as a Task class method, which hardmix no longer calls.
OLD_SHAPED_TASK = TINY_TASK.replace("class TinyTask(Task):", """class TinyTask(Task):
    @classmethod
    def score_names(cls, cfg):
        return ["alignment_score"]
""")


def _install(tmp_path, monkeypatch, source: str) -> None:
    """A package ``tinytask`` of ``source`` whose metadata registers ``tiny = tinytask:TinyTask`` in
    ``hardmix.tasks``."""
    site = tmp_path / "site"
    (site / "tinytask").mkdir(parents=True)
    (site / "tinytask" / "__init__.py").write_text(source)
    info = site / "tinytask-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinytask\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hardmix.tasks]\ntiny = tinytask:TinyTask\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()


@pytest.fixture
def tiny_task_package(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, TINY_TASK)
    yield
    sys.modules.pop("tinytask", None)


@pytest.fixture
def old_shaped_task_package(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, OLD_SHAPED_TASK)
    yield
    sys.modules.pop("tinytask", None)


def test_a_third_task_trains_through_the_engine_and_the_cli(tiny_task_package, tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text("train: {batch_size: 32, lr: 0.5, epochs: 2, save_steps: 4, device: cpu}\n"
                      "loss: {temperature: 0.2, strategies: [{name: mixcse, lam: 0.2}]}\n"
                      "eval: {eval_steps: 4}\nlog: {log_steps: 1, progress: false}\n")
    out = tmp_path / "run"
    assert cli(["train", "tiny", str(config), "--output", str(out)]) == 0
    assert "tiny: best alignment_score" in capsys.readouterr().out  # its ConfigFacts' report
    record = read_results(out)
    assert record["task"] == "tiny" and record["steps"] == 16 and record["finished"]
    losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
    assert len(losses) == 16 and sum(losses[-4:]) < sum(losses[:4])
    assert [r["step"] for r in read_metrics(out) if "alignment_score" in r] == [4, 8, 12, 16]
    assert set(record["final_scores"]) == {"alignment_score"}
    assert cli(["train", "tiny", str(config), "--output", str(out), "--resume"]) == 0  # finished: no work


def test_a_task_of_the_older_shape_is_refused_in_one_line(old_shaped_task_package, tmp_path, capsys):
    """A plug-in that still defines a hook now asked of its ConfigFacts (``score_names``) would be silently
    ignored: it is refused when loaded, in one line naming the hook and where it goes, before any work."""
    config = tmp_path / "tiny.yaml"
    config.write_text("train: {batch_size: 32, epochs: 1, device: cpu}\n")
    assert cli(["train", "tiny", str(config), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "score_names -> ConfigFacts.score_names" in err, err
    assert not (tmp_path / "run").exists()


def test_the_core_imports_no_task():
    """No module of the core (hardmix/ less its modalities, hardmix/text/ and hardmix/vision/) imports
    hardmix.text or hardmix.vision, at the top or inside a function."""
    core = Path(__file__).resolve().parents[2] / "hardmix"
    modalities = (core / "text", core / "vision")
    assert all(m.is_dir() for m in modalities)
    offenders = []
    for path in core.rglob("*.py"):
        if path.is_relative_to(modalities[0]) or path.is_relative_to(modalities[1]):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            offenders += [f"{path.relative_to(core)}: {n}" for n in names
                          if n.startswith(("hardmix.text", "hardmix.vision"))]
    assert not offenders, offenders


def _methods(cls: type) -> set[str]:
    """The public methods ``cls`` defines itself (functions, class and static methods)."""
    return {n for n, v in vars(cls).items() if not n.startswith("_")
            and (inspect.isfunction(v) or isinstance(v, (classmethod, staticmethod)))}


def test_the_hooks_a_modality_implements_are_those_the_architecture_counts():
    """docs/architecture.md counts the task's hooks that text and vision implement and the facts they
    override; the counts are recomputed here from the classes."""
    from hardmix.text.task import TextFacts, TextTask
    from hardmix.training.task import ConfigFacts, Task
    from hardmix.vision.task import VisionFacts, VisionTask

    hooks, abstract = _methods(Task) - {"about"}, set(Task.__abstractmethods__)
    text, vision = (_methods(TextTask) & hooks) | abstract, (_methods(VisionTask) & hooks) | abstract
    facts = _methods(ConfigFacts)
    text_facts, vision_facts = _methods(TextFacts) & facts, _methods(VisionFacts) & facts
    both, both_facts = len(text | vision), len(text_facts | vision_facts)
    counted = (f"A new modality must implement the {len(abstract)} abstract hooks of the task and may "
               f"override the others: text implements {len(text)}, vision {len(vision)} ({both} between "
               f"them), and their facts override {len(text_facts)} and {len(vision_facts)} of the "
               f"{len(facts)} methods ({both_facts} between them).")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert counted in " ".join(doc.split()), counted
    assert not hooks & {"state_dict", "score_names", "data_fingerprint_of", "input_digest", "report"}
