"""``hardmix compare --launcher``: the spec's ``launcher:`` block, the SLURM job a cell becomes (checked
without SLURM), real tiny comparisons through submitit's local executor, and ``--status`` for every state
(a cell made to fail, one killed, one preempted and requeued by submitit), ``--resume`` of what is left."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hardmix.cli import main as cli
from hardmix.compare.launcher import launcher_for
from hardmix.compare.spec import parse_spec
from hardmix.compare.status import read_records
from hardmix.training import read_results

pytest.importorskip("submitit")


@pytest.fixture
def text_spec(tmp_path, tiny_text_config):
    """A spec of tiny real text runs (STS-B dev at the end), one seed, two strategies."""
    text = copy.deepcopy(tiny_text_config)
    text["train"].update(max_steps=4, save_steps=0, threads=1)
    text["eval"].update(at_end=True)
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    return {
        "seeds": [1],
        "baseline": "none",
        "strategies": {"none": [{"name": "none"}], "mixcse": [{"name": "mixcse", "lam": 0.2}]},
        "launcher": {"time": 30, "cpus_per_task": 1},
        "tasks": {"text": {"config": str(tmp_path / "text.yaml"), "score": "stsb_dev",
                           "allow_selection_score": True}},  # tiny runs: the dev score only
    }


def _write(spec: dict, path: Path) -> str:
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.mark.parametrize(
    "block, message",
    [
        ({"launcher": {"gpus": 8}}, "launcher.gpus: unknown key"),
        ({"launcher": {"time": "two days"}}, "launcher.time: expected minutes or [D-]HH:MM[:SS]"),
        ({"launcher": {"nodes": 0}}, "launcher.nodes: expected an integer >= 1"),
        ({"launcher": {"mem_gb": -1}}, "launcher.mem_gb: expected a positive number"),
        ({"launcher": {"sbatch": ["--qos=high"]}}, "launcher.sbatch: expected a mapping"),
        ({"tasks": {"text": {"launcher": {"partition": 3}}}},
         "tasks.text.launcher.partition: expected a name"),
    ],
)
def test_the_launcher_block_is_validated_naming_the_key(text_spec, tmp_path, block, message, capsys):
    spec = copy.deepcopy(text_spec)
    for key, value in block.items():
        if key == "tasks":
            spec["tasks"]["text"].update(value["text"])
        else:
            spec[key] = value
    path = _write(spec, tmp_path / "spec.yaml")
    assert cli(["compare", path, "--output", str(tmp_path / "cmp"), "--status"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_task_s_launcher_block_is_merged_over_the_spec_s(text_spec):
    spec = copy.deepcopy(text_spec)
    spec["launcher"] = {"partition": "gpu", "gpus_per_node": 8, "time": "1-00:00:00",
                        "sbatch": {"qos": "high"}}
    spec["tasks"]["text"]["launcher"] = {"nodes": 2, "time": 90, "sbatch": {"constraint": "a100"}}
    parsed = parse_spec(spec)
    ls = launcher_for(parsed, "text")
    assert (ls.partition, ls.nodes, ls.gpus_per_node, ls.processes_per_node, ls.time) == ("gpu", 2, 8, 8, 90)
    assert ls.sbatch == {"qos": "high", "constraint": "a100"}
    del spec["tasks"]["text"]["launcher"]
    assert launcher_for(parse_spec(spec), "text").time == 1440


def test_the_slurm_job_of_a_cell_is_described_without_slurm(text_spec, tmp_path, capsys):
    spec = copy.deepcopy(text_spec)
    spec["launcher"] = {
        "partition": "gpu", "account": "lab", "gpus_per_node": 8, "cpus_per_task": 10, "mem_gb": 400,
        "time": "2-00:00:00", "signal_delay_s": 180, "sbatch": {"qos": "high"},
        "setup": ["source /opt/venv/bin/activate"],
    }
    spec["tasks"]["text"]["launcher"] = {"nodes": 2}
    spec["strategies"] = {"none": [{"name": "none"}]}
    path, out = _write(spec, tmp_path / "spec.yaml"), tmp_path / "cmp"
    assert cli(["compare", path, "--output", str(out), "--launcher", "slurm", "--print-commands"]) == 0
    script = capsys.readouterr().out
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?$", script, flags=re.M))
    assert {k: sbatch[k] for k in ("partition", "account", "nodes", "ntasks-per-node", "gpus-per-node",
                                   "cpus-per-task", "mem", "time", "signal", "qos", "job-name")} == {
        "partition": "gpu", "account": "lab", "nodes": "2", "ntasks-per-node": "8", "gpus-per-node": "8",
        "cpus-per-task": "10", "mem": "400GB", "time": "2880", "signal": "USR2@180", "qos": "high",
        "job-name": "hardmix-text-none-seed1",
    }
    assert "requeue" in sbatch  # a preempted job goes back to the queue
    assert "source /opt/venv/bin/activate" in script and re.search(r"^srun .*submitit\.core\._submit", script,
                                                                     flags=re.M)
    train = re.search(r"^# command: each process runs (hardmix train .*?) \(--resume", script, flags=re.M)
    assert train is not None
    assert train.group(1).startswith(f"hardmix train text {tmp_path / 'text.yaml'} --output {out}/runs/text/")
    assert "train.seed=1" in train.group(1) and "train.threads=10" in train.group(1)
    # Submitting needs srun: without it a one-line error, nothing written.
    if not any((Path(d) / "srun").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        assert cli(["compare", path, "--output", str(tmp_path / "cmp2"), "--launcher", "slurm"]) == 2
        err = capsys.readouterr().err
        assert "srun" in err and len(err.strip().splitlines()) == 1


def test_without_submitit_the_error_names_the_extra_and_help_works(text_spec, tmp_path):
    path = _write(text_spec, tmp_path / "spec.yaml")
    blocked = ("import sys; sys.modules['submitit'] = None; from hardmix.cli import main; "
               "sys.exit(main(sys.argv[1:]))")
    helped = subprocess.run([sys.executable, "-c", blocked, "compare", "--help"], capture_output=True,
                            text=True)
    assert helped.returncode == 0 and "--launcher" in helped.stdout and "--status" in helped.stdout
    done = subprocess.run([sys.executable, "-c", blocked, "compare", path, "--output", str(tmp_path / "c"),
                           "--launcher", "slurm"], capture_output=True, text=True)
    assert done.returncode == 2  # one error line (beside the exact test's floor, printed at validation)
    errors = [ln for ln in done.stderr.splitlines() if not ln.startswith("hardmix: warning: exact test")]
    assert errors == ["hardmix: error: --launcher slurm needs submitit: pip install 'hardmix[cluster]'"]


def test_submitit_s_local_executor_runs_a_comparison(text_spec, tmp_path, capsys):
    """Each cell a job of 2 processes (as 2 GPUs of a node): submitit's torchrun variables join them."""
    spec = copy.deepcopy(text_spec)
    spec["launcher"]["tasks_per_node"] = 2
    path, out = _write(spec, tmp_path / "spec.yaml"), tmp_path / "cmp"
    assert cli(["compare", path, "--output", str(out), "--launcher", "submitit-local", "--wait"]) == 0
    printed = capsys.readouterr().out
    assert "mixcse" in printed and "report:" in printed
    records = read_records(out)
    assert set(records) == {"text/none/seed1", "text/mixcse/seed1"}
    assert all(r["launcher"] == "submitit-local" for r in records.values())
    summary = json.loads((out / "summary.json").read_text())
    for strategy in ("none", "mixcse"):
        record = read_results(out / "runs" / "text" / strategy / "seed1")
        assert record["finished"] and record["steps"] == 4 and record["world_size"] == 2
        seeds = summary["tasks"]["text"]["strategies"][strategy]["seeds"]
        assert seeds["1"] == record["final_scores"]["stsb_dev"]
    assert cli(["compare", path, "--output", str(out), "--status"]) == 0
    status = capsys.readouterr().out
    assert re.search(r"^text/none/seed1 +finished$", status, flags=re.M)
    assert "finished 2, running 0, queued 0, failed 0, missing 0 (of 2)" in status


def _states(path: str, out: Path, capsys) -> dict[str, tuple[str, str]]:
    assert cli(["compare", path, "--output", str(out), "--status"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines()[:-1]:
        label, state, *detail = line.split(None, 2)
        rows[label] = (state, detail[0] if detail else "")
    return rows


def _wait(cond, what: str, timeout: float = 420.0) -> None:
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.3)


def _holder(run_dir: Path) -> int:
    return int(json.loads((run_dir / ".lock").read_text())["pid"])


def test_status_follows_failed_killed_and_preempted_cells_and_resume_finishes_them(
        text_spec, tmp_path, capsys):
    spec = copy.deepcopy(text_spec)
    spec["seeds"] = [1, 2, 3]
    spec["strategies"] = {"none": [{"name": "none"}]}
    spec["tasks"]["text"]["set"] = {"train.max_steps": 50, "train.epochs": 2, "train.save_steps": 1}
    path, out = _write(spec, tmp_path / "spec.yaml"), tmp_path / "cmp"
    runs = {s: out / "runs" / "text" / "none" / f"seed{s}" for s in (1, 2, 3)}
    assert _states(path, out, capsys) == {f"text/none/seed{s}": ("missing", "") for s in (1, 2, 3)}
    runs[1].mkdir(parents=True)
    (runs[1] / "checkpoint.pt").write_bytes(b"not a checkpoint")  # seed 1 is made to fail
    assert cli(["compare", path, "--output", str(out), "--launcher", "submitit-local"]) == 0
    capsys.readouterr()
    jobs = {label: r["job_id"] for label, r in read_records(out).items()}
    assert len(jobs) == 3
    # Seeds 2 and 3 run: seed 2 is killed (a node lost), seed 3 preempted (SLURM's USR2 to the job's process).
    _wait(lambda: all((runs[s] / "checkpoint.pt").is_file() and (runs[s] / ".lock").is_file()
                      for s in (2, 3)), "seeds 2 and 3 to checkpoint")
    now = _states(path, out, capsys)
    assert now["text/none/seed2"][0] == now["text/none/seed3"][0] == "running"
    os.kill(_holder(runs[2]), signal.SIGKILL)
    engine = _holder(runs[3])
    job_process = int(Path(f"/proc/{engine}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(job_process, signal.SIGUSR2)
    _wait(lambda: all(s[0] not in ("running", "queued") for s in _states(path, out, capsys).values()),
          "every job to end")
    final = _states(path, out, capsys)
    assert final["text/none/seed1"][0] == "failed" and "checkpoint.pt" in final["text/none/seed1"][1]
    assert final["text/none/seed2"][0] == "failed"
    assert final["text/none/seed3"] == ("finished", "")
    log3 = (out / "logs" / "text-none-seed3.log").read_text()
    assert "stopped by SIGUSR1" in log3 and "resumed" in log3  # checkpointed, requeued, resumed
    assert read_results(runs[3])["steps"] == 50
    # --resume submits only what failed (seed 1 once its cause is gone; seed 2 resumes from its checkpoint).
    (runs[1] / "checkpoint.pt").unlink()
    step2 = json.loads((runs[2] / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert cli(["compare", path, "--output", str(out), "--launcher", "submitit-local", "--resume",
                "--wait"]) == 0
    again = {label: r["job_id"] for label, r in read_records(out).items()}
    assert again["text/none/seed3"] == jobs["text/none/seed3"]
    assert all(again[f"text/none/seed{s}"] != jobs[f"text/none/seed{s}"] for s in (1, 2))
    assert f"resumed {runs[2]} at step" in (out / "logs" / "text-none-seed2.log").read_text()
    assert 0 < step2 < 50 and all(read_results(r)["finished"] for r in runs.values())
    capsys.readouterr()
    assert {s[0] for s in _states(path, out, capsys).values()} == {"finished"}


def test_a_requeued_job_clears_the_lock_its_killed_run_left_on_another_node(tmp_path):
    from hardmix.compare.launcher import clear_own_lock

    run, records = tmp_path / "run", tmp_path / "jobs.json"
    run.mkdir()
    lock = run / ".lock"
    lock.write_text(json.dumps({"pid": 4242, "host": "node-17"}))
    records.write_text(json.dumps({"text/none/seed1": {"job_id": "981"}}))
    assert not clear_own_lock(run, records, "text/none/seed1", "982") and lock.is_file()  # another job's
    assert not clear_own_lock(run, records, "text/none/seed2", "981") and lock.is_file()  # another cell's
    assert clear_own_lock(run, records, "text/none/seed1", "981") and not lock.exists()  # its own
    assert not clear_own_lock(run, records, "text/none/seed1", "981")  # no lock: nothing to do


def test_a_launcher_that_cannot_submit_leaves_no_comparison_behind(text_spec, tmp_path, capsys):
    """``--launcher slurm`` where nothing can be submitted (no ``sbatch`` here): one line naming the failure,
    and the folder is left as it was (no ``spec.yaml``, no ``logs/``), so a plain rerun, here or with another
    launcher, is not refused as "holds a comparison already"."""
    path = _write(text_spec, tmp_path / "spec.yaml")
    out = tmp_path / "cmp"
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(tmp_path / "no-bin")  # no sbatch to be found
    try:
        errors = []
        for _ in range(2):  # the rerun meets the same failure, not "holds a comparison already"
            assert cli(["compare", path, "--output", str(out), "--launcher", "slurm"]) != 0
            errors.append(capsys.readouterr().err.strip().splitlines()[-1])
            assert not (out / "spec.yaml").exists() and not (out / "logs").exists()
    finally:
        os.environ["PATH"] = env_path
    assert errors[0].startswith("hardmix: error:") and errors[1] == errors[0]
    assert "holds a comparison already" not in errors[1]


def test_every_tuning_cell_has_its_own_log_and_job_and_status_reads_it(text_spec, tmp_path):
    """--status looked for a tuning cell's log under the evaluation cell's name ("no log
    line"), and under --launcher slurm every tuning point of a strategy and seed shared one log file and
    job name. One name per cell, from its label, in both."""
    from hardmix.compare import launcher
    from hardmix.compare.grid import cell_log
    from hardmix.compare.status import cell_state
    from hardmix.compare.tuning import tuning_cells

    spec = copy.deepcopy(text_spec)
    spec["tune"] = {"seeds": [101], "grid": {"none": {"loss.temperature": [0.05, 0.1]},
                                             "mixcse": {"mixcse.lam": [0.1, 0.4]}}}
    parsed = parse_spec(spec)
    out = tmp_path / "cmp"
    cells = tuning_cells(parsed, out, check_data=False)
    logs = [cell_log(c, out) for c in cells]  # the one name, for the local runner and the launcher alike
    jobs = [launcher.slurm_parameters(launcher_for(parsed, "text"), c)["job_name"] for c in cells]
    assert len(set(logs)) == len(set(jobs)) == len(cells) == 4
    assert {p.parent for p in logs} == {out / "logs"}
    assert jobs[0] == "hardmix-tune-text-none-point0-seed101"
    logs[1].parent.mkdir(parents=True)
    logs[1].write_text("$ hardmix train ...\nhardmix: error: the last line\n")
    assert cell_state(cells[1], out, None).detail == "hardmix: error: the last line"
