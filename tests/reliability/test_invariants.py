"""The reliability invariants (``docs/reliability.md``), each tested where it is kept: property tests
(hypothesis, derandomized) over the inputs of the one function or class that keeps it, and fault
injection for "a finished result is final" and "a comparison always finishes"."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardmix.cli import main as cli
from hardmix.compare.grid import build_grid
from hardmix.compare.spec import parse_spec
from hardmix.compare.tuning import best_points, tuning_cells
from hardmix.training.config import key_in
from hardmix.training.fingerprint import FREE_OF_RESULT, config_digest
from hardmix.training.results import SCHEMA_VERSION
from hardmix.training.run_folder import LOCK
from hardmix.utils.confine import OutsideError, confined, remove_written
from hardmix.utils.errors import ConfigError, RunError

PROPS = settings(max_examples=25, deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


def _snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root`` (links as their target text, files as their bytes), links not followed."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = ("link", os.readlink(p)) if p.is_symlink() else \
                ("dir", None) if p.is_dir() else ("file", p.read_bytes())
    return out


@pytest.fixture(scope="module")
def text_config_file(tmp_path_factory: pytest.TempPathFactory, tiny_bert_dir: Path,
                     tiny_corpus: Path) -> Path:
    """A tiny text config (4 steps, STS-B dev at the end) as a file a spec can name."""
    cfg = {"model": {"name_or_path": str(tiny_bert_dir), "pooling": "cls"},
           "data": {"train_file": str(tiny_corpus), "max_length": 32},
           "loss": {"temperature": 0.05, "strategies": [{"name": "none"}]},
           "train": {"batch_size": 16, "lr": 1e-3, "max_steps": 4, "device": "cpu", "seed": 1,
                     "save_steps": 0, "precision": "fp32", "threads": 1},
           "eval": {"eval_steps": 0, "at_end": True}, "log": {"log_steps": 1, "progress": False}}
    path = tmp_path_factory.mktemp("invariants") / "text.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


# ------------------------------------------------------------- 1. writes stay where the user said
names = st.one_of(st.text(max_size=12), st.sampled_from(["../x", "/abs/dir", "a/b", ".", "..", "runs", "Ab",
                                                         "ab", "a-b", "a_b", "~", "seed1", "tune"]))


@PROPS
@given(task=names, strategy=names)
def test_spec_names_are_refused_or_every_cell_stays_inside_the_output(
        text_config_file: Path, tmp_path_factory: pytest.TempPathFactory, task: str, strategy: str) -> None:
    spec = {"seeds": [1], "strategies": {strategy: [{"name": "none"}]},
            "tasks": {task: {"task": "text", "config": str(text_config_file), "score": "stsb_dev",
                             "allow_selection_score": True}}}
    try:
        parsed = parse_spec(spec)
    except ConfigError as e:
        assert "\n" not in str(e) and str(e)
        return
    out = tmp_path_factory.mktemp("out")
    for cell in build_grid(parsed, out, check_data=False):
        confined(cell.run_dir, out)  # independent of the names: the folder, resolved, is under --output
        assert cell.run_dir.resolve().relative_to(out.resolve()).parts[:2] == ("runs", task)


#: Entries of a tree: inside the root, and links from inside to outside (a file, a folder, a loop).
TREE = {"keep.txt": "file", "run/checkpoint.pt": "file", "run/best/model.bin": "file", "run/sub/x": "file",
        "run/out_file": "link:../../outside/precious.txt", "run/out_dir": "link:../../outside",
        "run/best/out_dir": "link:../../../outside", "run/self": "link:."}
targets = st.sampled_from(["run/checkpoint.pt", "run/best", "run/sub", "run/out_file", "run/out_dir",
                           "run/out_dir/precious.txt", "run/out_dir/deep", "run/best/out_dir", "run/self",
                           "run/self/best", "run/../../outside", "run/missing", "run", ".."])


@PROPS
@given(order=st.lists(targets, min_size=1, max_size=4))
def test_removing_what_hardmix_wrote_never_touches_anything_outside_its_folder(
        tmp_path_factory: pytest.TempPathFactory, order: list[str]) -> None:
    base = tmp_path_factory.mktemp("tree")
    root, outside = base / "root", base / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "precious.txt").write_text("the user's")
    (outside / "deep" / "more.txt").write_text("the user's too")
    for rel, kind in TREE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            p.write_text(rel)
        else:
            p.symlink_to(kind.removeprefix("link:"))
    before = _snapshot(outside)

    def through_a_link_or_outside(p: Path) -> bool:
        """Outside the root by name, or a link anywhere from the root down to ``p`` (``p`` included)."""
        given, top = os.path.abspath(p), os.path.abspath(root)
        if given != top and not given.startswith(top + os.sep):
            return True
        parts = Path(given).relative_to(top).parts
        return any(os.path.islink(Path(top, *parts[:i + 1])) for i in range(len(parts)))

    for rel in order:
        path = root / rel
        refused = through_a_link_or_outside(path)
        try:
            remove_written(path, root)
        except OutsideError:
            assert refused, f"{rel}: refused though it lies inside the root"
            continue
        assert not refused, f"{rel}: removed though it resolves outside the root"
        assert not os.path.lexists(path)
    assert _snapshot(outside) == before


def test_a_link_planted_in_the_output_folder_is_refused_and_nothing_is_written_through_it(
        text_config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "users_files"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("keep me")
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "runs").symlink_to(elsewhere)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"seeds": [1], "strategies": {"none": [{"name": "none"}]}, "tasks": {
        "text": {"config": str(text_config_file), "score": "stsb_dev", "allow_selection_score": True}}}))
    before = _snapshot(elsewhere)
    assert cli(["compare", str(spec), "--output", str(out), "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a link" in err and str(out / "runs") in err
    assert _snapshot(elsewhere) == before


# ------------------------------------------------------ 2. a finished result is final and says what made it
sections = st.dictionaries(st.sampled_from(["train", "loss", "eval", "log", "data", "output"]),
                           st.dictionaries(st.sampled_from(["lr", "seed", "threads", "save_steps", "device",
                                                            "temperature", "log_steps", "at_end"]),
                                           st.integers(0, 3), min_size=1, max_size=4), min_size=1, max_size=4)


@PROPS
@given(config=sections, data=st.data())
def test_the_config_fingerprint_changes_exactly_when_a_key_that_makes_the_result_does(
        config: dict[str, Any], data: st.DataObject) -> None:
    keys = [(s, k) for s, v in config.items() for k in v]
    section, key = data.draw(st.sampled_from(keys))
    edited = copy.deepcopy(config)
    edited[section][key] += 1
    free = key_in(section, FREE_OF_RESULT) or key_in(f"{section}.{key}", FREE_OF_RESULT)
    assert (config_digest(config, FREE_OF_RESULT) == config_digest(edited, FREE_OF_RESULT)) == free
    assert config_digest(config) != config_digest(edited)


@pytest.fixture(scope="module")
def finished_run(text_config_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step text run that kept its checkpoint (``--resume`` of it must never train)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cli(["train", "text", str(text_config_file), "--output", str(out), "--set",
                "train.save_steps=2"]) == 0
    return out


DAMAGE = ["checkpoint gone", "metrics cut", "metrics gone", "config gone", "stray lock", "best gone",
          "results cut", "results not json"]


@PROPS
@given(damage=st.lists(st.sampled_from(DAMAGE), min_size=1, max_size=3, unique=True))
def test_fault_injection_a_finished_run_is_never_trained_again(
        finished_run: Path, text_config_file: Path, tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str], damage: list[str]) -> None:
    run = tmp_path_factory.mktemp("copy") / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    results = (run / "results.json").read_bytes()
    for how in damage:
        if how == "checkpoint gone":
            (run / "checkpoint.pt").unlink(missing_ok=True)
        elif how == "metrics cut" and (run / "metrics.jsonl").exists():
            text = (run / "metrics.jsonl").read_bytes()
            (run / "metrics.jsonl").write_bytes(text[: len(text) // 2])
        elif how == "metrics gone":
            (run / "metrics.jsonl").unlink(missing_ok=True)
        elif how == "config gone":
            (run / "config.yaml").unlink(missing_ok=True)
        elif how == "stray lock":
            (run / LOCK).write_text("12345\n")
        elif how == "best gone":
            shutil.rmtree(run / "best", ignore_errors=True)
        elif how == "results cut":
            (run / "results.json").write_bytes(results[: len(results) // 3])
        elif how == "results not json":
            (run / "results.json").write_bytes(b"\x00garbage")
    damaged = (run / "results.json").read_bytes()
    capsys.readouterr()
    code = cli(["train", "text", str(text_config_file), "--output", str(run), "--resume"])
    err = capsys.readouterr().err.strip()
    if damaged == results:  # its record says finished: final, whatever else is gone
        assert code == 0 and "finished already" in err
    else:  # a record that cannot be read is never written over by a retrained run
        assert code == 2 and len(err.splitlines()) == 1 and "results.json" in err
    assert (run / "results.json").read_bytes() == damaged
    assert not (run / "checkpoint.pt").exists() or "checkpoint gone" not in damage


# ------------------------------------------------------------------ 3. a comparison always finishes
outcomes = st.one_of(st.floats(0, 100, allow_nan=False), st.sampled_from(["nan", "failed", "pending"]))


def _record(run_dir: Path, seed: int, score: float | None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps({
        "version": SCHEMA_VERSION, "finished": True, "final_scores": {"stsb_dev": score}, "steps": 4,
        "total_steps": 4, "wall_seconds": 1.0, "best_step": None, "seed": seed, "run_dir": str(run_dir),
        "interrupted": False, "task": "text", "strategies": [], "samples_per_second": 1.0,
        "selection_metric": "stsb_dev", "best_score": score, "last_score": score, "last_score_step": 4,
        "task_info": {}, "versions": {}, "world_size": 1}))


@PROPS
@given(cells=st.lists(outcomes, min_size=6, max_size=6))
def test_tuning_chooses_among_the_points_that_scored_and_says_when_none_did(
        text_config_file: Path, tmp_path_factory: pytest.TempPathFactory, cells: list[Any]) -> None:
    spec = parse_spec({"seeds": [1], "strategies": {"none": [{"name": "none"}]},
                       "tasks": {"text": {"config": str(text_config_file), "score": "stsb_dev",
                                          "allow_selection_score": True}},
                       "tune": {"seeds": [101, 102],
                                "grid": {"none": {"loss.temperature": [0.05, 0.1, 0.2]}}}})
    out = tmp_path_factory.mktemp("tune")
    grid = tuning_cells(spec, out, check_data=False)
    assert [(c.point_index, c.seed) for c in grid] == [(p, s) for p in range(3) for s in (101, 102)]
    for cell, outcome in zip(grid, cells):
        if outcome == "failed":
            cell.record_failure(2, out / "no-log", out)
        elif outcome == "nan":
            _record(cell.run_dir, cell.seed, None)
        elif outcome != "pending":
            _record(cell.run_dir, cell.seed, float(outcome))
    # Independently: a point is chosen when both its seeds scored; the first of the best means.
    means = [None if any(isinstance(o, str) for o in cells[2 * p: 2 * p + 2]) else
             (cells[2 * p] + cells[2 * p + 1]) / 2 for p in range(3)]
    if "pending" in cells:
        assert best_points(spec, grid) is None
    elif all(m is None for m in means):
        with pytest.raises(RunError, match="every point of none on text failed"):
            best_points(spec, grid)
    else:
        best = max(range(3), key=lambda p: (means[p] is not None, means[p] or -math.inf, -p))
        assert best_points(spec, grid) == {("text", "none"): {"loss.temperature": [0.05, 0.1, 0.2][best]}}


# ------------------------------------------------------------------------- 4. plug-ins are contained
PLUGIN_KINDS = ["fine", "built-in name", "fails to import", "not a strategy", "no hook"]


@PROPS
@given(kinds=st.lists(st.sampled_from(PLUGIN_KINDS), min_size=1, max_size=4),
       builtin=st.sampled_from(["mixcse", "mochi", "none", "dcl"]))
def test_any_set_of_plug_ins_leaves_the_built_ins_and_every_other_name_as_they_were(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, kinds: list[str],
        builtin: str) -> None:
    import warnings

    from hardmix.strategies import base

    site = tmp_path_factory.mktemp("site")
    tag = site.name.replace("-", "_")  # module names unique to this example
    builtins = base.registry()
    lines, expect_ok, expect_broken = [], set(), set()
    for i, kind in enumerate(kinds):
        module, entry = f"plugin_{tag}_{i}", f"plug_{tag}_{i}"
        name = builtin if kind == "built-in name" else entry
        hook = "" if kind == "no hook" else "    def extra_cosines(self, ctx):\n        return None, {}\n"
        body = {"fails to import": "import a_module_that_does_not_exist\n",
                "not a strategy": "class Plugin:\n    name = 'x'\n"}.get(kind, (
                    "import dataclasses\nfrom hardmix.strategies.base import Strategy\n\n"
                    f"@dataclasses.dataclass(frozen=True)\nclass Plugin(Strategy):\n    name = {name!r}\n"
                    f"    paper = 'a test'\n\n{hook}"))
        (site / f"{module}.py").write_text(body)
        lines.append(f"{entry if kind != 'built-in name' else builtin} = {module}:Plugin")
        (expect_ok if kind == "fine" else expect_broken).add(entry if kind != "built-in name" else builtin)
    info = site / "some_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: some-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hardmix.strategies]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_BROKEN", {})
    monkeypatch.setattr(base, "_ENTRY_POINTS_LOADED", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = set(base.available_strategies())
    assert {n: base.registry()[n] for n in builtins} == builtins  # no built-in replaced
    assert names == set(builtins) | expect_ok
    assert set(base.broken_plugins()) == expect_broken
    assert len([w for w in caught if "some-plugins" in str(w.message)]) == len(kinds) - len(expect_ok)
    monkeypatch.undo()


# ------------------------------------------------------------------- 5. downloads are verified, or not used
@pytest.fixture(scope="module")
def served_file(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    import hashlib

    from tests.core.http_server import LocalServer

    folder = tmp_path_factory.mktemp("srv")
    payload = bytes(range(256)) * 400
    (folder / "data.tar").write_bytes(payload)
    with LocalServer(folder) as srv:
        yield srv, payload, hashlib.sha256(payload).hexdigest()


@PROPS
@given(kept=st.one_of(st.integers(0, 102_400).map(lambda n: ("prefix", n, None)),
                      st.tuples(st.just("flipped"), st.integers(1, 102_400), st.integers(0, 102_399)),
                      st.binary(min_size=1, max_size=300).map(lambda b: ("foreign", 0, b)),
                      st.just(("longer", 0, None))),
       cut=st.one_of(st.none(), st.integers(1, 90_000)))
def test_a_kept_partial_download_is_used_only_when_the_whole_file_verifies(
        served_file: Any, tmp_path_factory: pytest.TempPathFactory, kept: tuple[str, int, Any],
        cut: int | None) -> None:
    from hardmix.datasets.download import download_file

    srv, payload, sha256 = served_file
    dest = tmp_path_factory.mktemp("dl") / "data.tar"
    part = dest.with_name("data.tar.part")
    kind, n, extra = kept
    if kind == "prefix":
        part.write_bytes(payload[:n])
    elif kind == "flipped":
        damaged = bytearray(payload[:n])
        damaged[extra % n] ^= 0xFF
        part.write_bytes(bytes(damaged))
    elif kind == "foreign":
        part.write_bytes(extra)
    else:
        part.write_bytes(payload + b"more")
    if cut is not None:
        srv.state.cut_after["data.tar"] = cut
    digest = download_file(f"{srv.url}/data.tar", dest, sha256=sha256, retries=3, progress=False)
    assert dest.read_bytes() == payload and digest.sha256 == sha256 and not part.exists()


# ------------------------------------------------- 6. every value and every evaluation is checked before work
def _numeric_arguments() -> list[tuple[str, str]]:
    import dataclasses

    from hardmix.strategies.base import available_strategies, registry

    out, classes = [], registry()
    for name in available_strategies():
        for f in dataclasses.fields(classes[name]):
            if isinstance(f.default, (int, float)) and not isinstance(f.default, bool):
                out.append((name, f.name))
        if name in ("mochi", "mixcse"):
            out += [(name, "warmup_steps"), (name, "warmup_epochs")]
    return out


numbers = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, 1, 0.5, 1e308, -1e-9, 10**12]),
                    st.floats(-10, 10, allow_nan=False), st.integers(-5, 200))


@PROPS
@given(argument=st.sampled_from(_numeric_arguments()), value=numbers)
def test_a_strategy_or_schedule_number_is_finite_in_range_or_refused_naming_its_key(
        argument: tuple[str, str], value: float) -> None:
    from hardmix.training.api import load_config_for

    strategy, key = argument
    cfg = {"model": {"name_or_path": "m"}, "data": {"train_file": "c.txt", "max_length": 32},
           "loss": {"strategies": [{"name": strategy, key: value}]},
           "train": {"batch_size": 16, "lr": 0.001, "max_steps": 100, "seed": 1, "save_steps": 0}}
    try:
        built = load_config_for("text", cfg)
    except ConfigError as e:  # a value that is not a finite number is named; else the entry's key at fault
        named = f"loss.strategies[0].{key}" if not math.isfinite(value) else "loss.strategies[0]."
        assert str(e).startswith(named) and "\n" not in str(e), str(e)
        return
    assert math.isfinite(value) and built.loss.strategies, f"{strategy}.{key} = {value} accepted"
