"""The model card (``README.md``) that :func:`hardmix.text.model.export_model` writes beside the weights,
as sentence-transformers writes one: YAML front matter for the Hugging Face Hub (``base_model``, tags,
``library_name``), then the base model, the mixing strategy, the scores and the run's config.

Example:
    >>> card = model_card({"model": "bert-base-uncased", "strategies": [{"name": "mixcse", "lam": 0.2}],
    ...                    "stsb_dev": 0.81, "step": 250}, base_model="bert-base-uncased", pooling="cls",
    ...                    dim=768, sentence_transformers=True)
    >>> card.splitlines()[1], "| stsb_dev | 0.8100 |" in card
    ('base_model: bert-base-uncased', True)
"""

from __future__ import annotations

from typing import Any

import yaml


def _strategy_line(strategies: Any) -> str:
    if not strategies:
        return "none (SimCSE: in-batch InfoNCE)"
    items = strategies if isinstance(strategies, list) else [strategies]
    parts = []
    for s in items:
        if isinstance(s, dict):
            params = ", ".join(f"{k}={v}" for k, v in s.items() if k != "name")
            parts.append(f"{s.get('name')}({params})" if params else str(s.get("name")))
        else:
            parts.append(str(s))
    return " + ".join(parts)


def model_card(
    meta: dict[str, Any],
    base_model: str | None,
    pooling: str,
    dim: int,
    sentence_transformers: bool,
    config: dict[str, Any] | None = None,
) -> str:
    """The card's Markdown text.

    Args:
        meta: what the trainer passed to the export (``model``: the configured name, ``strategies``,
            ``step``, scores such as ``stsb_dev``) and any other entries.
        base_model: the model the weights were loaded from (the Hub name or folder actually used).
        pooling: the evaluation pooling; dim: the embedding size.
        sentence_transformers: whether the folder carries sentence-transformers' files.
        config: the run's resolved config (``config.yaml``), when there is one.
    """
    strategies = meta.get("strategies")
    names = [s.get("name") if isinstance(s, dict) else str(s)
             for s in (strategies if isinstance(strategies, list) else [strategies] if strategies else [])]
    tags = ["hardmix", "sentence-similarity", "feature-extraction", *sorted({n for n in names if n})]
    front: dict[str, Any] = {"base_model": base_model, "tags": tags, "pipeline_tag": "sentence-similarity"}
    if sentence_transformers:
        front["library_name"] = "sentence-transformers"
        tags.insert(0, "sentence-transformers")
    scores = {k: v for k, v in meta.items() if isinstance(v, float) and k not in ("lam", "temperature")}
    scores.update(meta.get("scores") or {})
    asked = meta.get("model")
    configured = f" (configured as `{asked}`)" if asked and asked != base_model else ""
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             "# Sentence encoder trained with hardmix", "",
             f"A contrastive sentence encoder (embedding size {dim}, pooling `{pooling}`) trained with "
             "hardmix (feature-space hard-negative mixing) from the base model below.", "",
             "## Training", "",
             f"- base model: `{base_model}`" + configured,
             f"- mixing strategy: {_strategy_line(strategies)}"]
    if "step" in meta:
        lines.append(f"- exported at step {meta['step']}")
    lines += ["", "## Scores", ""]
    if scores:
        lines += ["| metric | value |", "|---|---|", *(f"| {k} | {v:.4f} |" for k, v in scores.items())]
    else:
        lines.append("No score was recorded with this export.")
    lines += ["", "## Usage", "", "```python"]
    if sentence_transformers:
        lines += ["from sentence_transformers import SentenceTransformer", "",
                  'model = SentenceTransformer("path/to/this/folder")',
                  'embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."])']
    else:
        lines += ["from hardmix.text import encode", "",
                  'embeddings = encode("path/to/this/folder", ["A man is playing a guitar."])']
    lines += ["```", ""]
    if config:
        lines += ["## Config", "", "```yaml", yaml.safe_dump(config, sort_keys=False).strip(), "```", ""]
    return "\n".join(lines)
