"""Fuzzing: random values of every typed config key (a valid config, or a ConfigError naming the key) and
random corpus bytes (sentences, or a one-line CorpusError naming the file and line); never another
exception."""

from __future__ import annotations

import dataclasses
import gzip
import math
import re
import tempfile
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardmix.training.api import load_config_for, resolve_task
from hardmix.training.config import plain_config
from hardmix.utils.errors import ConfigError

FUZZ = settings(max_examples=40, deadline=None, database=None, derandomize=True)  # the same examples in CI


def typed_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted names of every leaf key of a config dataclass (``train.lr``, ``loss.strategies``, ...)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out += typed_keys(tp, f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


TEXT_KEYS = typed_keys(resolve_task("text").config_class)
VISION_KEYS = typed_keys(resolve_task("vision").config_class)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, -1, 0.5, 1e-9, "", "cpu", "fp16", "none", "mixcse", "cls", "3e-5"]),
    st.text(max_size=6),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.dictionaries(st.sampled_from(["name", "lam", "n_hard", "x"]), scalars, max_size=3),
    st.lists(st.dictionaries(st.sampled_from(["name", "lam", "n_hard", "stop_grad", "x"]),
                             scalars, max_size=3), max_size=2),
)


def _nested(key: str, value: Any) -> dict[str, Any]:
    data: Any = value
    for part in reversed(key.split(".")):
        data = {part: data}
    return data


def _check_one_value(task: str, key: str, value: Any) -> None:
    try:
        cfg = load_config_for(task, _nested(key, value))
    except ConfigError as e:
        message = str(e)
        assert "\n" not in message, message
        assert key in message, f"{key}={value!r}: the error does not name the key: {message}"
        return
    # accepted: a number the config holds is finite (a NaN learning rate would train NaN)
    plain = plain_config(cfg)
    held = plain
    for part in key.split("."):
        held = held[part]
    assert not _non_finite(held), f"{key}={value!r} accepted as {held!r}"


def _non_finite(obj: Any) -> bool:
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_non_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_non_finite(v) for v in obj)
    return False


@FUZZ
@given(key=st.sampled_from(TEXT_KEYS), value=values)
def test_random_values_of_text_config_keys(key: str, value: Any) -> None:
    _check_one_value("text", key, value)


@FUZZ
@given(key=st.sampled_from(VISION_KEYS), value=values)
def test_random_values_of_vision_config_keys(key: str, value: Any) -> None:
    _check_one_value("vision", key, value)


@pytest.mark.parametrize("task, key", [("text", "train.lr"), ("text", "train.weight_decay"),
                                       ("vision", "train.lr"), ("vision", "model.momentum")])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_is_refused_naming_the_key(task: str, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=re.escape(key) + ".*finite"):
        load_config_for(task, _nested(key, value))
    with pytest.raises(ConfigError, match=re.escape(key) + ".*finite"):
        text = ".nan" if math.isnan(value) else str(value).replace("inf", ".inf")
        load_config_for(task, None, [f"{key}={text}"])


# ------------------------------------------------------------------------------------------- corpora
lines = st.one_of(
    st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=30),
    st.sampled_from([b"", b"   ", b"\r", b"\xef\xbb\xbfbom", b"caf\xe9", b"\xff\xfe", b"ok ."]),
)
corpora = st.one_of(
    st.binary(max_size=300),
    st.lists(lines, max_size=12).map(lambda ls: b"\n".join(ls)),
)


def _read(data: bytes, gz: str, tokenizer: Any) -> None:
    from hardmix.text.data import CorpusError, iter_sentences, read_corpus

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "corpus.txt"
        if gz == "gzip":
            data = gzip.compress(data)
        elif gz == "broken-gzip":
            data = gzip.compress(data)[: max(2, len(data) // 2)]
        path.write_bytes(data)
        try:
            sentences = [s for _, s in iter_sentences(path)]
        except CorpusError as e:
            message = str(e)
            assert "\n" not in message, message
            assert re.match(re.escape(str(path)) + r":\d+: ", message), message
            return
        assert all(s.strip() and "\n" not in s for s in sentences)
        try:
            corpus = read_corpus(path, tokenizer, max_length=16)
        except CorpusError as e:
            assert not sentences, e  # only "no sentences" may fail once every line decoded
            assert str(e).startswith(f"{path}: no sentences"), e
            return
        assert len(corpus) == len(sentences)


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


@FUZZ
@given(data=corpora, gz=st.sampled_from(["plain", "plain", "gzip", "broken-gzip"]))
def test_random_corpus_bytes(tokenizer: Any, data: bytes, gz: str) -> None:
    _read(data, gz, tokenizer)


def test_a_truncated_gzip_corpus_names_the_file_and_line(tmp_path: Path) -> None:
    from hardmix.text.data import CorpusError, iter_sentences

    path = tmp_path / "c.txt.gz"
    path.write_bytes(gzip.compress(b"".join(b"sentence %d .\n" % i for i in range(2000)))[:300])
    with pytest.raises(CorpusError, match=re.escape(str(path)) + r":\d+: not a complete gzip file"):
        list(iter_sentences(path))
