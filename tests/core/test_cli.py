"""The ``hardmix`` command line: version and the strategy listing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hardmix import __version__
from hardmix.cli import main


def test_version_via_the_installed_entry_point_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hardmix", "--version"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0
    assert out.stdout.strip() == f"hardmix {__version__}"


def test_strategies_lists_every_strategy_with_its_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategies"]) == 0
    text = capsys.readouterr().out
    for needle in (
        "mixcse:",
        "mochi:",
        "none:",
        "lam = 0.2",
        "stop_grad = True",
        "mode = 'clean'",
        "n_hard = 1024",
        "n_pair = 1024",
        "n_query = 128",
        "beta_max = 0.5",
    ):
        assert needle in text, needle


def test_no_command_prints_help_and_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: hardmix" in capsys.readouterr().out


def test_unknown_command_is_an_argparse_error() -> None:
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_a_folder_named_hardmix_in_the_working_directory_does_not_break_the_cli(tmp_path) -> None:
    """A clone of the repository named ``hardmix/`` (no ``__init__.py`` at its top) in the working directory
    becomes a namespace package ahead of an editable install; the command line still runs."""
    (tmp_path / "hardmix" / "docs").mkdir(parents=True)
    (tmp_path / "hardmix" / "README.md").write_text("a clone\n")
    for args, expected in ((["--version"], f"hardmix {__version__}"), (["strategies"], "mochi:")):
        out = subprocess.run([sys.executable, "-m", "hardmix", *args], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert expected in out.stdout


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["compare", "--help"], ["data", "--help"],
                                  ["train", "nosuchtask", "x.yaml"], ["eval", "text"]])
def test_help_and_argument_errors_load_no_torch(argv: list[str]) -> None:
    """``hardmix --help`` and argument errors answer without importing torch or a task (the heavy part of a
    start: seconds), so they return at once; ``compare``'s parser is registered without what runs it."""
    code = ("import sys\nfrom hardmix.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', sorted(m for m in ('torch', 'transformers', 'torchvision', 'hardmix.text.task',"
            " 'hardmix.vision.task', 'hardmix.compare.command') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in out.stdout, out.stdout + out.stderr
