"""Every command on bad input: a non-zero exit, one ``hardmix: error:`` line naming what to fix, no
traceback, nothing that existed damaged; legitimately accepted input succeeds (the table: ``cases.py``)."""

from __future__ import annotations

import pytest
import torch

from hardmix.cli import main
from tests.reliability.cases import CASES, Case, Ctx

FIXTURES = ("tiny_bert_dir", "tiny_corpus", "tiny_text_config", "vision_run")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):  # noqa: ANN001, ANN202 (pytest fixtures)
    monkeypatch.chdir(tmp_path)  # default outputs (runs/...) land in the case's folder
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never the network
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case, tmp_path, monkeypatch, request, capsys) -> None:  # noqa: ANN001 (fixtures)
    for name in FIXTURES:  # built before a case changes the environment (HARDMIX_DATA, HOME)
        request.getfixturevalue(name)
    ctx = Ctx(tmp_path / "case", monkeypatch, request)
    ctx.tmp.mkdir()
    argv = case.setup(ctx)
    capsys.readouterr()  # what the setup printed (a previous run) is not the case's
    try:
        status = main(argv)
    except SystemExit as e:  # argparse
        status = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 (what would reach the user as a traceback)
        pytest.fail(f"hardmix {' '.join(argv)}: uncaught {type(e).__name__} (a traceback): {e}")
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if case.accepted:
        assert status == 0, err
    else:
        assert status != 0, err
        lines = [ln for ln in err.splitlines() if ln.startswith("hardmix: error:")]
        assert len(lines) == 1, err
        assert err.rstrip("\n").endswith(lines[0]), f"the message goes on after its line: {err!r}"
        for part in case.expect:
            assert part.format(**ctx.vars) in lines[0], f"{part.format(**ctx.vars)!r} not in {lines[0]!r}"
    if case.check is not None:
        case.check(ctx, err)
    assert not ctx.damaged(), f"changed or removed: {ctx.damaged()}"


def test_the_table_names_each_case_once() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert {"train text", "train vision", "eval text", "eval knn", "eval linear", "encode", "compare",
            "data"} <= {c.command for c in CASES}
