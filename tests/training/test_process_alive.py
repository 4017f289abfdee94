"""One liveness check and one lock reader (:mod:`hardmix.training.run_folder`) for the run lock and for
``hardmix compare``'s launcher: a lock check never reaps a child (its ``Popen`` still reads the child's
own exit status), the launcher's reaps its own ended job (no zombie looks alive), and a lock that cannot
be read names no live holder for either."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from hardmix.training.run_folder import LOCK, RunLock, lock_holder, process_alive
from hardmix.utils.errors import RunError

pytestmark = pytest.mark.skipif(not hasattr(os, "waitid"), reason="os.waitid (waits without reaping)")


def _ended_child(status: int) -> subprocess.Popen:
    """A child that has exited, not yet reaped: a zombie, as a finished job is until waited for."""
    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({status})"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    return proc


def test_a_lock_check_leaves_an_ended_child_to_the_popen_that_waits_on_it() -> None:
    proc = _ended_child(3)
    assert process_alive(proc.pid)  # a zombie: alive to os.kill, and left alone
    assert proc.wait() == 3  # its Popen still reads the failure (reaped behind its back: 0)


def test_the_launcher_reaps_its_own_ended_child() -> None:
    proc = _ended_child(0)
    assert not process_alive(proc.pid, reap=True)
    assert not process_alive(proc.pid)  # reaped: gone
    assert process_alive(os.getpid(), reap=True)  # alive, and not a child: as without reap


def test_no_pid_is_alive_below_one() -> None:
    assert not process_alive(0) and not process_alive(-1) and not process_alive(-1, reap=True)


@pytest.mark.parametrize("text", ["", "{", "[1]", '"x"', '{"pid": 5}', '{"host": "h"}',
                                  '{"pid": "x", "host": "h"}'])
def test_an_unreadable_lock_names_no_holder(tmp_path, text: str) -> None:
    (tmp_path / LOCK).write_text(text)
    assert lock_holder(tmp_path) is None
    RunLock(tmp_path).acquire()  # taken over, as a dead process's
    assert lock_holder(tmp_path) == (os.getpid(), socket.gethostname())


def test_a_lock_names_its_holder_and_a_live_one_is_refused(tmp_path) -> None:
    assert lock_holder(tmp_path) is None  # no lock
    (tmp_path / LOCK).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    assert lock_holder(tmp_path) == (os.getppid(), socket.gethostname())
    with pytest.raises(RunError, match="a run is in progress there"):
        RunLock(tmp_path).acquire()
