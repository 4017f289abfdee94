"""One schema for the loader, for editors and for users (``docs/config.md``): every shipped config (text,
vision, compare) validates against ``hardmix config schema``'s JSON Schema; what the loader refuses that a
schema can say (an unknown key, a wrong type, a value out of range, a bad choice) the schema refuses too;
what only the loader checks is the list ``docs/config.md`` keeps, each entry exercised here; ``hardmix
config show`` prints the resolved config, each value with its origin."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from hardmix.cli import main as cli
from hardmix.commands.config import config_class, schema_of
from hardmix.compare.spec import parse_spec
from hardmix.config.loader import YAML11_FLOAT, apply_overrides, build_config, load_yaml
from hardmix.training.config import plain_config
from hardmix.utils.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("text", "vision", "compare")
DOC = ROOT / "docs" / "config.md"


def as_editors_read(data: Any) -> Any:
    """A config as a YAML 1.2 reader (the editors') reads it: ``3e-5`` a number, where PyYAML (YAML 1.1)
    reads a string that the loader then reads as the number."""
    if isinstance(data, dict):
        return {k: as_editors_read(v) for k, v in data.items()}
    if isinstance(data, list):
        return [as_editors_read(v) for v in data]
    if isinstance(data, str) and YAML11_FLOAT.match(data.strip()):
        return float(data)
    return data


@pytest.fixture(scope="module")
def validators() -> dict[str, jsonschema.Draft7Validator]:
    out = {}
    for kind in KINDS:
        schema = schema_of(kind)
        jsonschema.Draft7Validator.check_schema(schema)
        out[kind] = jsonschema.Draft7Validator(schema)
    return out


def schema_errors(validators: dict[str, jsonschema.Draft7Validator], kind: str,
                  data: dict[str, Any]) -> list[str]:
    errors = validators[kind].iter_errors(as_editors_read(data))
    return [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def loader_error(kind: str, data: dict[str, Any]) -> str | None:
    """The loader's error for ``data`` (None: it reads it)."""
    try:
        if kind == "compare":
            parse_spec(data)
        else:
            build_config(config_class(kind), data)
    except ConfigError as e:
        return str(e)
    return None


SHIPPED = sorted((kind, path) for kind in KINDS for path in (ROOT / "configs" / kind).glob("*.yaml"))


@pytest.mark.parametrize("kind, path", SHIPPED, ids=[f"{k}/{p.name}" for k, p in SHIPPED])
def test_every_shipped_config_validates_against_its_schema(validators, kind, path):
    assert schema_errors(validators, kind, load_yaml(path)) == []


def test_every_kind_ships_configs():
    assert {kind for kind, _ in SHIPPED} == set(KINDS)


def _base(kind: str) -> dict[str, Any]:
    """A valid config of each kind (a comparison's task config found from anywhere)."""
    if kind == "text":
        return load_yaml(ROOT / "configs/text/cpu_mixcse.yaml")
    if kind == "vision":
        return load_yaml(ROOT / "configs/vision/cpu_mocov2_cifar10.yaml")
    spec = load_yaml(ROOT / "configs/compare/quickstart.yaml")
    for task in spec["tasks"].values():
        task["config"] = str(ROOT / task["config"])
    return spec


def _changed(kind: str, sets: list[str], drop: str | None = None) -> dict[str, Any]:
    data = apply_overrides(_base(kind), sets)
    if drop:
        *path, leaf = drop.split(".")
        node = data
        for part in path:
            node = node[part]
        del node[leaf]
    return data


#: Configs the loader refuses for what a schema can say: the schema refuses them too.
REFUSED_BY_BOTH = [
    ("text", ["train.bogus=1"], None),  # an unknown key
    ("text", ["optim={lr: 1}"], None),  # an unknown section
    ("text", ["train.cpu_threads=2"], None),  # an older hardmix's key
    ("text", ["train.lr=fast"], None),  # a wrong type
    ("text", ["train.batch_size=1"], None),  # out of range
    ("text", ["train.lr=0"], None),  # out of range (exclusive)
    ("text", ["train.precision=fp8"], None),  # a bad choice (Literal)
    ("text", ["model.pooling=max"], None),  # a bad choice (metadata)
    ("text", ["eval.sts_tasks=STS-B"], None),  # a list given as a string
    ("text", ["loss.strategies=mixup"], None),  # an unknown strategy
    ("text", ["loss.strategies=[{name: mixcse, lamb: 0.2}]"], None),  # an unknown argument
    ("text", ["loss.strategies=[{name: mixcse, lam_end: 0.3}]"], None),  # an old argument
    ("text", ["loss.strategies=[{name: mixcse, lam: {start: 0.1, end: 0.3}}]"], None),  # a ramp's length
    ("text", ["loss.strategies=[{name: mixcse, warmup_steps: -1}]"], None),  # a warm-up's range
    ("vision", ["augment.crop_size=4"], None),
    ("vision", ["augment.jitter=[0.4, 0.4]"], None),  # a tuple's length
    ("vision", ["eval.selection=best"], None),
    ("vision", ["eval.final_scores=[knn_top3]"], None),
    ("vision", ["data.pipeline=gpu"], None),
    ("compare", ["colour=1"], None),
    ("compare", ["seeds=[-1]"], None),
    ("compare", ["seeds=[1, 1]"], None),
    ("compare", ["seeds=[]"], None),
    ("compare", ["jobs=0"], None),
    ("compare", ["strategies=null"], None),
    ("compare", ["strategies.bad=[{name: mixup}]"], None),
    ("compare", ["tasks.text.allow_selection_score='yes'"], None),
    ("compare", ["tasks.text.name=x"], None),  # the name is the mapping's key, not a key of the task
    ("compare", ["tasks.text.strategies=[]"], None),
    ("compare", ["tune={seeds: [101], grid: {none: {}}, budget: 3}"], None),
    ("compare", ["tune={seeds: [101], grid: {none: {loss.temperature: 0.1}}}"], None),
    ("compare", [], "tasks"),  # a required key
    ("compare", [], "tasks.text.config"),
]


@pytest.mark.parametrize("kind, sets, drop", REFUSED_BY_BOTH,
                         ids=[f"{k}:{s or d}" for k, s, d in REFUSED_BY_BOTH])
def test_what_the_loader_refuses_and_a_schema_can_say_the_schema_refuses(validators, kind, sets, drop):
    data = _changed(kind, sets, drop)
    assert loader_error(kind, data), "the loader reads it"
    assert schema_errors(validators, kind, data), "the schema accepts it"


def test_the_base_configs_pass_both():
    for kind in KINDS:
        assert loader_error(kind, _base(kind)) is None


#: What only the loader checks, by the name ``docs/config.md`` lists it under: a config the schema accepts
#: and the loader refuses, with a part of the loader's message.
LOADER_ONLY = {
    "train.stop_after_steps": ("text", ["train.max_steps=5", "train.stop_after_steps=6"], "beyond"),
    "strategy arguments": ("text", ["loss.strategies=[{name: mixcse, lam: 1.5}]"], "lam: must be in (0, 1)"),
    "strategy warm-up": ("text", ["loss.strategies=[{name: mixcse, warmup_steps: 2, warmup_epochs: 1}]"],
                         "not both"),
    "composition": ("text", ["loss.strategies=[hcl, dcl]"], "keep one"),
    "negatives": ("text", ["train.batch_size=8",
                           "loss.strategies=[{name: mochi, n_hard: 16, n_pair: 16, n_query: 8}]"],
                  "n_hard: 16 negatives needed"),
    "queue and directions": ("text", ["loss.queue_size=64", "loss.strategies=mixcse"], "loss.queue_size"),
    "data.text_field": ("text", ["data.text_field=' '"], "data.text_field"),
    "eval.sts_bootstrap": ("text", ["eval.sts_bootstrap=1"], "eval.sts_bootstrap"),
    "eval.sts_tasks": ("text", ["eval.sts_tasks=[STS-B, STS-B]"], "eval.sts_tasks"),
    "augment": ("vision", ["augment.crop_scale=[0.9, 0.2]"], "augment.crop_scale"),
    "model.bn_splits": ("vision", ["model.bn_splits=3"], "model.bn_splits"),
    "model.final_momentum": ("vision", ["model.momentum_schedule=cosine", "model.final_momentum=0.9"],
                             "model.final_momentum"),
    "eval.knn_k": ("vision", ["eval.knn_train_samples=100"], "eval.knn_k"),
    "queue strategies": ("vision", ["loss.strategies=[{name: mixcse, second_direction: true}]"],
                         "second_direction"),
    "names": ("compare", ["strategies={none: [{name: none}], ../x: [{name: mixcse}]}"], "not a plain name"),
    "baseline": ("compare", ["baseline=simcse"], "baseline"),
    "strategy_set": ("compare", ["strategy_set={none: {lr: 0.1}}"], "expected a dotted config key"),
    "cell keys": ("compare", ["tasks.text.set={train.seed: 3}"], "not a key a comparison can set"),
    "tasks.*.strategies": ("compare", ["tasks.text.strategies=[mixcse]"], "baseline 'none' must be among"),
    "tune": ("compare", ["tune={seeds: [1], grid: {none: {}, mixcse: {}, mochi: {}}}"],
             "also an evaluation seed"),
    "tasks.*.config": ("compare", ["tasks.text.config=nowhere.yaml"], "not found"),
}


@pytest.mark.parametrize("name", sorted(LOADER_ONLY))
def test_what_only_the_loader_checks_passes_the_schema_and_not_the_loader(validators, name):
    kind, sets, message = LOADER_ONLY[name]
    data = _changed(kind, sets)
    assert schema_errors(validators, kind, data) == []
    error = loader_error(kind, data)
    assert error is not None and message in error, error


def test_docs_list_what_only_the_loader_checks():
    """``docs/config.md``'s list, "What only the loader checks", names each entry of :data:`LOADER_ONLY`,
    and nothing else."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## What only the loader checks", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \*\*(.+?)\*\*", section, flags=re.M)
    assert sorted(listed) == sorted(LOADER_ONLY)


def test_config_schema_prints_json(capsys):
    for kind in KINDS:
        assert cli(["config", "schema", kind]) == 0
        schema = json.loads(capsys.readouterr().out)
        assert schema == schema_of(kind) and schema["additionalProperties"] is False


def test_the_schema_carries_types_ranges_choices_defaults_and_help():
    train = schema_of("text")["properties"]["train"]["properties"]
    assert train["batch_size"] == {"type": "integer", "minimum": 2, "default": 64,
                                   "description": train["batch_size"]["description"]}
    assert "SimCSE: 64" in train["batch_size"]["description"]
    assert train["precision"]["enum"] == ["auto", "fp32", "bf16", "fp16"]
    mochi = schema_of("vision")["properties"]["loss"]["properties"]["strategies"]
    assert "mochi" in json.dumps(mochi) and "n_hard" in json.dumps(mochi)
    task = schema_of("compare")["properties"]["tasks"]["additionalProperties"]
    assert task["required"] == ["config"] and "name" not in task["properties"]


def test_config_show_prints_the_resolved_config_with_each_value_s_origin(tmp_path, capsys):
    path = ROOT / "configs/text/cpu_mochi.yaml"
    assert cli(["config", "show", str(path), "--set", "train.lr=1e-4"]) == 0
    out = capsys.readouterr().out
    for line in ("lr: 0.0001 +# --set", "batch_size: 64 +# file", "batch_size: 128 +# default",
                 "warmup_ratio: 0.0 +# default", r"strategies: \[\{name: mochi, n_hard: 16, .*\}\] +# file"):
        assert re.search(rf"^  {line}$", out, flags=re.M), line
    shown = yaml.safe_load(out)  # the comments aside, the output is the resolved config
    cfg = build_config(config_class("text"), load_yaml(path), ["train.lr=1e-4"])
    assert shown == plain_config(cfg)
    assert plain_config(build_config(config_class("text"), shown)) == shown

    assert cli(["config", "show", str(ROOT / "configs/compare/quickstart.yaml")]) == 0
    spec = yaml.safe_load(capsys.readouterr().out)
    assert spec["tasks"]["text"]["seeds"] == [1, 2] and spec["tasks"]["text"]["task"] == "text"

    (tmp_path / "empty.yaml").write_text("{}\n")  # every task reads it: the task must be named
    assert cli(["config", "show", str(tmp_path / "empty.yaml")]) == 2
    assert "name its task with --task" in capsys.readouterr().err
    assert cli(["config", "show", str(tmp_path / "empty.yaml"), "--task", "vision"]) == 0
    assert "bn_splits: 8" in capsys.readouterr().out


def test_one_loader_and_one_naming_scheme():
    """The loader's coercion is defined once (the comparison spec's hand-written parser is gone), and the
    sections of both modalities are named ``*Section``, the whole configs ``TextConfig`` and
    ``VisionConfig``."""
    from tests.core.test_said_once import _defined_where

    where = _defined_where()
    assert where["_coerce"] == where["_from_dict"] == ["hardmix/config/loader.py"]
    assert not {"_parse_tune", "_parse_seeds", "TASK_KEYS"} & set(where)
    old_names = {"TextTrainConfig", "DataConfig", "AugmentConfig", "ModelConfig", "LossConfig", "TrainConfig",
                 "EvalConfig"}
    assert not old_names & set(where)
    for kind in ("text", "vision"):
        cls = config_class(kind)
        assert cls.__name__ == f"{kind.title()}Config"
        cfg = cls()
        sections = {type(getattr(cfg, f)).__name__ for f in ("model", "data", "loss", "train", "eval", "log")}
        assert all(name.endswith("Section") for name in sections), sections
