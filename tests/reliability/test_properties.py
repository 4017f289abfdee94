"""Property tests (hypothesis, derandomized: CI draws the same examples every time) over config values,
compare-spec shapes and corrupted run records: a mapping given for a section merges into it exactly as
the same keys given one by one; a key given twice in YAML is refused naming its line; a spec's ``set``
reads the same nested or dotted; a damaged checkpoint, results record or metrics file is refused in one
line or read as what it holds, never a traceback or a silently different record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hardmix.compare.spec import parse_spec
from hardmix.config.loader import DuplicateKeyError, apply_overrides, merge_mappings, safe_load_unique
from hardmix.training.api import load_config_for
from hardmix.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from hardmix.training.config import plain_config
from hardmix.training.metrics import MetricsLog, read_metrics
from hardmix.training.results import read_results, write_results
from hardmix.utils.errors import ConfigError

PROPS = settings(max_examples=25, deadline=None, database=None, derandomize=True)

#: Keys of the text config's ``train`` section and values of each (valid and not).
TRAIN_VALUES = {
    "max_steps": st.one_of(st.integers(-2, 10**6), st.none(), st.just("many")),
    "lr": st.one_of(st.floats(1e-7, 1.0), st.just(0), st.just(float("nan"))),
    "seed": st.one_of(st.integers(0, 2**32 + 5), st.just(-1)),
    "batch_size": st.integers(0, 512),
    "save_steps": st.integers(-1, 10**4),
    "threads": st.one_of(st.none(), st.integers(0, 8)),
}
train_mappings = st.fixed_dictionaries({}, optional=TRAIN_VALUES)


def _base() -> dict[str, Any]:
    return {"model": {"name_or_path": "m"}, "data": {"train_file": "c.txt", "max_length": 32},
            "train": {"batch_size": 16, "lr": 0.001, "max_steps": 10, "seed": 1, "save_steps": 0}}


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _outcome(overrides: list[str]) -> Any:
    try:
        return plain_config(load_config_for("text", _base(), overrides))
    except ConfigError as e:
        return ("refused", str(e).split(":")[0] if str(e).startswith("--set") else str(e))


@PROPS
@given(section=train_mappings)
def test_a_mapping_for_a_section_equals_its_keys_one_by_one(section: dict[str, Any]) -> None:
    nested = _outcome([f"train={_flow(section)}"])
    dotted = _outcome([f"train.{k}={_flow(v)}" for k, v in section.items()])
    assert type(nested) is type(dotted)
    if isinstance(nested, dict):
        assert nested == dotted
        for key in ("batch_size", "lr", "max_steps", "seed", "save_steps"):  # keys not named are kept
            expected = section.get(key, _base()["train"][key])
            assert nested["train"][key] == expected, key
    else:
        assert nested[0] == dotted[0] == "refused"


@PROPS
@given(base=st.dictionaries(st.sampled_from("abcd"), st.one_of(st.integers(), st.dictionaries(
    st.sampled_from("xyz"), st.integers(), max_size=3)), max_size=4),
    update=st.dictionaries(st.sampled_from("abcd"), st.one_of(st.integers(), st.dictionaries(
        st.sampled_from("xyz"), st.integers(), max_size=3)), max_size=4))
def test_merge_keeps_every_key_not_named(base: dict[str, Any], update: dict[str, Any]) -> None:
    merged = merge_mappings(base, update)
    for key in base.keys() - update.keys():
        assert merged[key] == base[key]
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            assert merged[key] == {**base[key], **value}
        else:
            assert merged[key] == value
    assert apply_overrides(base, [f"{k}={_flow(v)}" for k, v in update.items()]) == merged


@PROPS
@given(keys=st.lists(st.sampled_from(["lr", "seed", "max_steps", "batch_size", "epochs"]), min_size=1,
                     max_size=6),
       depth=st.integers(0, 2))
def test_a_key_given_twice_is_refused_naming_its_line(keys: list[str], depth: int) -> None:
    indent = "  " * depth
    head = "".join(f"{'  ' * i}s{i}:\n" for i in range(depth))
    text = head + "".join(f"{indent}{k}: {i}\n" for i, k in enumerate(keys))
    seen: dict[str, int] = {}
    duplicate = None
    for i, k in enumerate(keys):
        line = depth + i + 1
        if k in seen:
            duplicate = (k, seen[k], line)
            break
        seen[k] = line
    if duplicate is None:
        data = safe_load_unique(text)
        for _ in range(depth):
            data = next(iter(data.values()))
        assert list(data) == keys
    else:
        with pytest.raises(DuplicateKeyError, match=rf"line {duplicate[2]}: the key '{duplicate[0]}' is "
                                                    rf"given twice \(first on line {duplicate[1]}\)"):
            safe_load_unique(text)


# -------------------------------------------------------------------------------------- spec shapes
@PROPS
@given(section=st.fixed_dictionaries({}, optional={"max_steps": st.integers(1, 100), "lr": st.floats(1e-5, 1),
                                                    "warmup_steps": st.integers(0, 100)}),
       shape=st.sampled_from(["nested", "dotted", "mixed"]))
def test_a_spec_set_reads_the_same_nested_or_dotted(tmp_path_factory: pytest.TempPathFactory,
                                                   section: dict[str, Any], shape: str) -> None:
    folder = tmp_path_factory.mktemp("spec")
    (folder / "text.yaml").write_text(yaml.safe_dump(_base()))
    items = list(section.items())
    if shape == "nested":
        sets: dict[str, Any] = {"train": dict(items)}
    elif shape == "dotted":
        sets = {f"train.{k}": v for k, v in items}
    else:
        half = len(items) // 2
        sets = {"train": dict(items[:half]), **{f"train.{k}": v for k, v in items[half:]}}
    spec = parse_spec({"seeds": [1], "baseline": "none", "strategies": {"none": [{"name": "none"}]},
                       "tasks": {"text": {"config": str(folder / "text.yaml"), "score": "stsb_dev",
                                          "set": sets}}}, source=folder / "spec.yaml")
    cfg = plain_config(load_config_for("text", folder / "text.yaml", spec.tasks["text"].overrides))
    assert cfg["train"] == {**plain_config(load_config_for("text", _base()))["train"], **section}


spec_values = st.recursive(st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=4), st.booleans()),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=8)


@PROPS
@given(spec=st.dictionaries(st.sampled_from(["seeds", "baseline", "strategies", "tasks", "extra"]),
                            spec_values, max_size=5))
def test_any_spec_shape_is_a_spec_or_a_config_error(spec: dict[str, Any]) -> None:
    try:
        parse_spec(spec)
    except ConfigError as e:
        assert "\n" not in str(e) and str(e)


# ---------------------------------------------------------------------------------- corrupted records
@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder's records: a real (small) checkpoint, a results record and a metrics file."""
    import torch

    run = tmp_path_factory.mktemp("records")
    save_checkpoint({"step": 3, "total_steps": 5, "config": {"train": {"seed": 1}},
                     "model": {"w": torch.arange(12.0).reshape(3, 4)}}, run / "checkpoint.pt", task="text")
    write_results({"task": "text", "steps": 3, "total_steps": 5, "finished": False}, run)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n"
                                               for s in range(1, 6)))
    return run


damage = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("zeros"), st.floats(0, 1, exclude_max=True)),
)


def _damaged(data: bytes, how: tuple[str, float]) -> bytes:
    kind, where = how
    i = int(where * len(data))
    if kind == "truncate":
        return data[:i]
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    return data[:i] + b"\0" * min(64, len(data) - i) + data[i + 64:]


@PROPS
@given(how=damage)
def test_a_damaged_checkpoint_is_refused_or_read_whole(records: Path, how: tuple[str, float],
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch

    original = load_checkpoint(records / "checkpoint.pt", task="text")
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint.pt"
    path.write_bytes(_damaged((records / "checkpoint.pt").read_bytes(), how))
    try:
        state = load_checkpoint(path, task="text")
    except CheckpointError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    # read: the damage hit bytes the zip format does not read (padding, a comment); the record is whole
    assert set(state) == set(original) and state["step"] == original["step"]
    assert torch.equal(state["model"]["w"], original["model"]["w"])


@PROPS
@given(how=damage)
def test_a_damaged_results_record_is_refused_in_one_line_or_read(
        records: Path, how: tuple[str, float], tmp_path_factory: pytest.TempPathFactory) -> None:
    run = tmp_path_factory.mktemp("results")
    data = _damaged((records / "results.json").read_bytes(), how)
    (run / "results.json").write_bytes(data)
    try:
        record = read_results(run)
    except ValueError as e:
        assert "\n" not in str(e) and "results.json" in str(e)
        return
    assert isinstance(record, dict)


@PROPS
@given(cut=st.integers(0, 200), keep=st.integers(0, 6))
def test_a_metrics_file_cut_anywhere_resumes_with_its_whole_lines(
        records: Path, cut: int, keep: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    run = tmp_path_factory.mktemp("metrics")
    data = (records / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").write_bytes(data[: min(cut, len(data))])
    MetricsLog(run / "metrics.jsonl", True, keep_until=keep).close()
    kept = read_metrics(run / "metrics.jsonl")
    whole = []
    for line in data[: min(cut, len(data))].decode().split("\n"):
        try:
            whole.append(json.loads(line))
        except ValueError:
            pass  # blank, or cut
    assert kept == [r for r in whole if r["step"] <= keep]
