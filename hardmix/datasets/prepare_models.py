"""Preparing a model folder from single files of the Hugging Face Hub (``bert-mini``).

The files are moved into ``out`` and a ``README.md`` names where they came from. The folder then loads
with ``AutoModel.from_pretrained(out)`` and ``AutoTokenizer.from_pretrained(out)`` (a BERT ``config.json``
and ``vocab.txt`` give the uncased WordPiece tokenizer), offline.
"""

from __future__ import annotations

from pathlib import Path

from hardmix.utils.confine import makedirs, replace, write_text


def prepare_model_files(files: dict[str, Path], out: Path, hub_name: str, root: Path) -> None:
    """Move the downloaded files (``{key: path}``, keys ``<model>/<file>``) into ``out``.

    Args:
        files: the downloaded files by source key.
        out: the folder to create.
        hub_name: the Hub repository they come from (written to ``README.md``).
        root: the data root, which the files and ``out`` lie in.
    """
    makedirs(out, root)
    for key, path in files.items():
        replace(path, out / Path(key).name, root)
    write_text(
        f"# {hub_name}\n\nDownloaded by `hardmix data download` from https://huggingface.co/{hub_name} "
        "(Turc et al. 2019, \"Well-Read Students Learn Better\"; Apache-2.0). 4 layers, hidden 256, 4 "
        "heads, uncased WordPiece vocabulary.\n", out / "README.md", root)
