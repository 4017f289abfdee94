"""``train.precision: auto`` resolved once per comparison and recorded in its spec copy (tiny real runs)."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import yaml

from hardmix.cli import main as cli
from hardmix.compare.grid import build_grid
from hardmix.compare.spec import parse_spec
from hardmix.errors import ConfigError
from hardmix.training import read_results


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
