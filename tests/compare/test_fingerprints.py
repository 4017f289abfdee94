"""A comparison's cells checked against the data they would be made from now, before any cell trains
(tiny real runs): an evaluation file edited at the same size, records of an older hardmix (no fingerprint,
or the listing of an image folder instead of its content), ``--rerun-mismatched``; and
``train.precision: auto`` resolved once per comparison and recorded in its spec copy."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import yaml

from hardmix.cli import main as cli
from hardmix.compare.fingerprints import mismatched_cells
from hardmix.compare.grid import build_grid
from hardmix.compare.spec import parse_spec
from hardmix.training import read_results
from hardmix.utils.errors import ConfigError


@pytest.fixture
def own_senteval(tmp_path, senteval_root, monkeypatch):
    """A data root of its own holding a copy of STS-B dev (what selection scores), as HARDMIX_DATA."""
    root = tmp_path / "data"
    dev = root / "senteval" / "STS" / "STSBenchmark" / "sts-dev.csv"
    dev.parent.mkdir(parents=True)
    shutil.copyfile(senteval_root / "STS" / "STSBenchmark" / "sts-dev.csv", dev)
    monkeypatch.setenv("HARDMIX_DATA", str(root))
    return dev


@pytest.fixture
def text_spec(tmp_path, tiny_text_config):
    """A spec of tiny real text runs (2 steps, STS-B dev at the end): one strategy, one seed."""
    text = copy.deepcopy(tiny_text_config)
    text["train"].update(max_steps=2, save_steps=0)
    text["eval"].update(at_end=True)
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    return {"seeds": [1], "baseline": "none", "strategies": {"none": [{"name": "none"}]},
            "tasks": {"text": {"config": str(tmp_path / "text.yaml"), "score": "stsb_dev",
                               "allow_selection_score": True}}}


def _write(tmp_path, spec, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("hardmix: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_extension_after_an_evaluation_file_changed_at_the_same_size_is_refused_before_any_cell_trains(
        text_spec, own_senteval, tmp_path, capsys):
    """STS-B dev's first gold score edited in place at the same size, then a seed added: refused before
    anything trains (no new folder, no log, the finished cell byte-identical), in one line naming the cell,
    the part that differs and ``--rerun-mismatched``; that command moves the finished cell aside, whole,
    and runs both seeds on the data as they are now."""
    out = tmp_path / "cmp"
    assert cli(["compare", str(_write(tmp_path, text_spec)), "--output", str(out), "--threads", "1"]) == 0
    cell = out / "runs" / "text" / "none" / "seed1"
    before = _files(cell)
    dev = own_senteval.read_text(encoding="utf-8")
    edited = dev.replace("\t5.000\t", "\t4.000\t", 1)
    assert edited != dev and len(edited) == len(dev)
    own_senteval.write_text(edited, encoding="utf-8")

    grown = _write(tmp_path, {**text_spec, "seeds": [1, 2]}, "grown.yaml")
    capsys.readouterr()
    assert cli(["compare", str(grown), "--output", str(out), "--resume", "--threads", "1"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "text/none/seed1: its inputs (model files, evaluation sets) differ" in line, line
    assert "found before any cell trained" in line
    assert f"hardmix compare {grown} --output {out} --resume --rerun-mismatched" in line
    assert not (out / "runs" / "text" / "none" / "seed2").exists()
    assert not (out / "logs" / "text-none-seed2.log").exists()
    assert _files(cell) == before

    assert cli(["compare", str(grown), "--output", str(out), "--resume", "--threads", "1",
                "--rerun-mismatched"]) == 0
    err = capsys.readouterr().err
    moved = out / "superseded" / "text" / "none" / "mismatched" / "seed1"
    assert f"text/none/seed1 was not made from the data it would be made from now; it runs again (the " \
           f"earlier run was moved to {moved})" in err
    assert {p: v for p, v in _files(moved).items() if p.name != "cell.log"} == before  # kept, byte for byte
    assert (moved / "cell.log").is_file()
    records = [read_results(out / "runs" / "text" / "none" / f"seed{k}") for k in (1, 2)]
    assert all(r["finished"] for r in records)
    assert records[0]["fingerprint"] == records[1]["fingerprint"]
    assert records[0]["fingerprint"]["inputs"] != json.loads((moved / "results.json").read_text())[
        "fingerprint"]["inputs"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 2
    # the cell set aside is listed in the summary (it was in none), with why
    [row] = summary["superseded"]
    assert row["score"] is not None
    assert row == {"cell": "text/none/seed1", "point": None, "score": row["score"],
                   "why": "made from other inputs (--rerun-mismatched)"}
    assert "| text/none/seed1 |" in (out / "summary.md").read_text()


def test_an_interrupted_cell_s_checkpoint_is_checked_before_any_cell_trains(text_spec, own_senteval,
                                                                             tmp_path, capsys):
    """A cell to resume (its checkpoint, no record) whose evaluation data changed since it started: its
    resume would refuse, after other cells trained; the comparison refuses first, naming it."""
    out = tmp_path / "cmp"
    path = _write(tmp_path, text_spec)
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1", "--keep", "checkpoints"]) == 0
    cell = out / "runs" / "text" / "none" / "seed1"
    (cell / "results.json").unlink()  # as if stopped at its last checkpoint
    own_senteval.write_text(own_senteval.read_text(encoding="utf-8").replace("\t5.000\t", "\t4.000\t", 1),
                            encoding="utf-8")
    grown = _write(tmp_path, {**text_spec, "seeds": [1, 2]}, "grown.yaml")
    capsys.readouterr()
    assert cli(["compare", str(grown), "--output", str(out), "--resume", "--threads", "1"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "1 cell of this comparison was not made from the data it would be made from now" in line
    assert "text/none/seed1: its inputs (model files, evaluation sets) differ" in line, line
    assert not (out / "runs" / "text" / "none" / "seed2").exists()


def test_records_without_a_fingerprint_are_summarized_but_not_extended(text_spec, own_senteval, tmp_path,
                                                                       capsys):
    """Records made before fingerprints (none recorded): a report over them alone is still written, but
    cells are not added to them (their data cannot be established) until ``--rerun-mismatched`` runs them
    again."""
    out = tmp_path / "cmp"
    path = _write(tmp_path, text_spec)
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1"]) == 0
    results = out / "runs" / "text" / "none" / "seed1" / "results.json"
    record = json.loads(results.read_text())
    del record["fingerprint"]
    results.write_text(json.dumps(record))
    capsys.readouterr()
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    grown = _write(tmp_path, {**text_spec, "seeds": [1, 2]}, "grown.yaml")
    capsys.readouterr()
    assert cli(["compare", str(grown), "--output", str(out), "--resume", "--threads", "1"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "text/none/seed1: its record has no fingerprint (an older hardmix made it), so its data cannot " \
           "be established" in line and "--rerun-mismatched" in line
    assert not (out / "runs" / "text" / "none" / "seed2").exists()
    # --rerun-mismatched runs cells: with --report-only it is refused
    assert cli(["compare", str(grown), "--output", str(out), "--report-only", "--rerun-mismatched"]) == 2
    assert "--rerun-mismatched: runs cells again" in _one_error(capsys.readouterr().err)


def test_a_vision_record_of_the_image_listing_is_an_older_fingerprint(tmp_path, tiny_vision_config,
                                                                      vision_one_thread, capsys):
    """A vision record fingerprinted by its images' listing (paths and sizes: an older hardmix's, which an
    image rewritten at the same size kept) cannot establish its data: a folder of such records is still
    summarized, but a seed is not added to them."""
    config = tiny_vision_config(data={"max_samples": 64, "val_samples": 16, "num_workers": 0},
                                train={"max_steps": 1, "batch_size": 16, "save_steps": 0},
                                loss={"queue_size": 32}, eval={"at_end": True, "final_scores": ["knn_top1"]})
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump(config))
    spec = {"seeds": [1], "strategies": {"none": [{"name": "none"}]},
            "tasks": {"vision": {"config": str(tmp_path / "vision.yaml"), "score": "knn_top1"}}}
    out = tmp_path / "cmp"
    assert cli(["compare", str(_write(tmp_path, spec)), "--output", str(out), "--threads", "1"]) == 0
    assert mismatched_cells(build_grid(parse_spec(spec), out)) == []  # made as it would be made now
    results = out / "runs" / "vision" / "none" / "seed1" / "results.json"
    record = json.loads(results.read_text())
    data = record["fingerprint"]["data"]
    assert set(data) == {"images", "training images", "image content sha256"}
    old = {"images": data["images"], "training images": data["training images"],
           "image list sha256": "ab" * 32}  # what an older hardmix recorded
    results.write_text(json.dumps({**record, "fingerprint": {**record["fingerprint"], "data": old}}))
    capsys.readouterr()
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    grown = _write(tmp_path, {**spec, "seeds": [1, 2]}, "grown.yaml")
    capsys.readouterr()
    assert cli(["compare", str(grown), "--output", str(out), "--resume", "--threads", "1"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "vision/none/seed1: its record identifies its training data by image list sha256, images, " \
           "training images, not by image content sha256 (an older hardmix's fingerprint), so its data " \
           "cannot be established" in line, line
    assert not (out / "runs" / "vision" / "none" / "seed2").exists()


def test_auto_precision_is_resolved_once_per_comparison_and_kept_in_its_spec_copy(text_spec, own_senteval,
                                                                                  tmp_path, monkeypatch,
                                                                                  capsys):
    """``train.precision: auto`` is resolved where the comparison starts (fp32 on a CPU without native
    bf16) and recorded in ``DIR/spec.yaml``; extended on a machine where auto would choose bf16, the new
    cell runs the recorded fp32, so every cell of the comparison runs one precision. A spec naming another
    precision than the recorded one is refused, and so is a recorded bf16 for a strategy whose bf16 was not
    shown."""
    import hardmix.training.runtime as runtime

    config = yaml.safe_load((tmp_path / "text.yaml").read_text())
    config["train"]["precision"] = "auto"
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "cmp"
    monkeypatch.setattr(runtime, "cpu_bf16_flags", lambda: ())  # this machine: no native bf16
    assert cli(["compare", str(_write(tmp_path, text_spec)), "--output", str(out), "--threads", "1"]) == 0
    assert yaml.safe_load((out / "spec.yaml").read_text())["auto_precision"] == {"text": "fp32"}

    monkeypatch.setattr(runtime, "cpu_bf16_flags", lambda: ("avx512_bf16",))  # another machine: native bf16
    grown = _write(tmp_path, {**text_spec, "seeds": [1, 2]}, "grown.yaml")
    assert cli(["compare", str(grown), "--output", str(out), "--resume", "--threads", "1"]) == 0
    for seed in (1, 2):
        run = out / "runs" / "text" / "none" / f"seed{seed}"
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["precision"] == "fp32"
        assert read_results(run)["precision"] == "fp32"
    assert yaml.safe_load((out / "spec.yaml").read_text())["auto_precision"] == {"text": "fp32"}
    assert json.loads((out / "summary.json").read_text())["spec"]["auto_precision"] == {"text": "fp32"}

    other = _write(tmp_path, {**text_spec, "seeds": [1, 2], "auto_precision": {"text": "bf16"}}, "other.yaml")
    capsys.readouterr()
    assert cli(["compare", str(other), "--output", str(out), "--resume"]) == 2
    assert "auto_precision.text: bf16, but this comparison's text cells run fp32" in _one_error(
        capsys.readouterr().err)
    both = {**text_spec, "strategies": {"none": [{"name": "none"}], "mixcse": [{"name": "mixcse"}]},
            "auto_precision": {"text": "bf16"}}
    with pytest.raises(ConfigError, match=r"auto_precision\.text: this comparison's text cells run bf16"):
        build_grid(parse_spec(both), tmp_path / "elsewhere", check_data=False)
