"""One gate for every write (``hardmix/utils/confine.py``): the code holds no call that creates, appends
to, replaces or deletes a file anywhere else, and the gate refuses a link between the named folder and
the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hardmix.utils.confine import (
    OutsideError,
    makedirs,
    open_for_write,
    remove_written,
    replace,
    save_figure,
    write_text,
)
from tests.core.write_calls import write_calls, write_calls_under

ROOT = Path(__file__).resolve().parents[2]
GATE = "hardmix/utils/confine.py"


def test_no_write_call_outside_the_gate() -> None:
    outside = [str(w) for w in write_calls_under(ROOT, ("hardmix", "text", "vision")) if w.file != GATE]
    assert not outside, "write calls outside hardmix/utils/confine.py (route them through it):\n" + \
        "\n".join(outside)


def test_the_gate_itself_is_where_the_writes_are() -> None:
    found = {w.what for w in write_calls_under(ROOT, ("hardmix",)) if w.file == GATE}
    assert {"os.replace", "shutil.rmtree", "torch.save", ".savefig()", ".extractall()"} <= found


@pytest.mark.parametrize("source", [
    'open(p, "w")', 'open(p, "a", encoding="utf-8")', 'open(p, mode="wb")', "open(p, m)", 'open(p, "r+")',
    'Path(p).open("w")', "p.write_text('x')", "p.write_bytes(b'x')", "p.touch()", "p.mkdir()",
    "p.unlink()", "p.rmdir()", "p.rename(q)", "p.replace(q)", "fig.savefig(p)", "m.save_pretrained(p)",
    "im.save(p)", "t.extractall(p)", "import torch\ntorch.save(x, p)", "import numpy as np\nnp.save(p, a)",
    "import numpy as np\nnp.savez(p, a=a)", "import shutil\nshutil.copy(p, q)",
    "import shutil\nshutil.rmtree(p)", "from shutil import move\nmove(p, q)", "import os\nos.replace(p, q)",
    "import os\nos.remove(p)", "import os\nos.makedirs(p)", "import os\nos.open(p, os.O_WRONLY)",
    "import tarfile\ntarfile.open(p, 'w')", "import yaml\nyaml.safe_dump(d, f)", "import tempfile\n"
    "tempfile.mkstemp()", "from torch.utils.tensorboard import SummaryWriter",
    "import gzip\ngzip.open(p, 'wt')", "import os\nf = os.replace",
])
def test_a_write_call_added_anywhere_is_flagged(source: str) -> None:
    assert write_calls(source), f"not flagged: {source}"


@pytest.mark.parametrize("source", [
    "open(p)", 'open(p, "rb")', 'open(p, encoding="utf-8")', 'Path(p).open()', "s.replace('a', 'b')",
    "import dataclasses\ndataclasses.replace(c, x=1)", "import yaml\nyaml.safe_dump(d)",
    "import json\njson.dump(d, f)", "import shutil\nshutil.which('x')", "import os\nos.open(p, os.O_RDONLY)",
    "import numpy as np\nnp.load(p)", "import torch\ntorch.load(p)", "from hardmix.utils.confine import "
    "write_text\nwrite_text(t, p, r)",
])
def test_what_reads_is_not_flagged(source: str) -> None:
    assert not write_calls(source), f"flagged: {source}"


def test_the_checker_flags_a_write_added_to_a_real_module() -> None:
    module = (ROOT / "hardmix" / "compare" / "report.py").read_text(encoding="utf-8")
    assert not write_calls(module)
    added = write_calls(module + '\n\ndef leak(p):\n    with open(p, "a") as f:\n        f.write("x")\n')
    assert [w.what for w in added] == ["open"]


# ----------------------------------------------------------------------------------- the gate's refusals
@pytest.fixture()
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """``root`` holding ``logs -> outside/``, ``plots/x.png -> outside/precious.png`` and ``self -> .``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "precious.png").write_bytes(b"the user's")
    (root / "logs").symlink_to(outside)
    (root / "plots").mkdir()
    (root / "plots" / "x.png").symlink_to(outside / "precious.png")
    (root / "self").symlink_to(".")
    return root, outside


def _one_line(e: pytest.ExceptionInfo[OutsideError], path: Path) -> None:
    assert "\n" not in str(e.value) and str(path) in str(e.value)


@pytest.mark.parametrize("rel", ["logs/a.log", "plots/x.png", "self/a.txt", "self", "../outside/new.txt",
                                 "logs"])
def test_every_write_through_a_link_or_outside_is_refused(planted: tuple[Path, Path], rel: str) -> None:
    root, outside = planted
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    path = root / rel
    attempts = [lambda: write_text("x", path, root), lambda: open_for_write(path, root, "a"),
                lambda: makedirs(path / "sub", root), lambda: remove_written(path, root),
                lambda: replace(root / "plots", path, root)]
    for attempt in attempts:
        with pytest.raises(OutsideError) as e:
            attempt()
        _one_line(e, path if "sub" not in str(e.value) else path / "sub")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert os.path.islink(root / "logs") and os.path.islink(root / "plots" / "x.png")


def test_the_named_folder_itself_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "scratch"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    write_text("x", tmp_path / "out" / "logs" / "a.log", tmp_path / "out")
    assert (real / "logs" / "a.log").read_text() == "x"


def test_a_figure_goes_through_the_gate_with_the_bytes_savefig_writes(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig = plt.figure()
    fig.gca().plot([0, 1], [1, 0])
    fig.savefig(tmp_path / "direct.png", dpi=50)  # a test may write directly: the rule is for hardmix's code
    save_figure(fig, tmp_path / "gated.png", tmp_path, dpi=50)
    plt.close(fig)
    assert (tmp_path / "gated.png").read_bytes() == (tmp_path / "direct.png").read_bytes()


def test_matplotlib_s_cache_goes_under_hardmix_s_cache_folder_not_home(tmp_path: Path) -> None:
    """A comparison's plots made matplotlib write its font cache under ``$HOME`` (``~/.cache/matplotlib``),
    a folder the user never named; it now goes under hardmix's cache folder (``$HARDMIX_CACHE``), unless
    the user names one (``MPLCONFIGDIR``)."""
    import subprocess
    import sys

    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    unset = ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(HOME=str(home), HARDMIX_CACHE=str(cache), PYTHONPATH=str(ROOT))
    code = ("import hardmix.compare.plots as p, matplotlib; p.colours(['a', 'b']); "
            "print(matplotlib.get_cachedir())")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(cache / "matplotlib")
    assert not list(home.rglob("*")), sorted(home.rglob("*"))  # nothing written under $HOME
    mine = tmp_path / "mine"
    done = subprocess.run([sys.executable, "-c", code], env={**env, "MPLCONFIGDIR": str(mine)},
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == str(mine)
