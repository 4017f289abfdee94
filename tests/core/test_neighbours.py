"""``hardmix neighbours EMBEDDINGS QUERY... [-k K]``: the k nearest other rows by cosine similarity, against
a NumPy brute force in float64, with faiss and without it (``--backend``, ``HARDMIX_NO_FAISS=1``); queries
by listed item and by ``#ROW``; bad inputs in one line naming the file or query; and text's ``encode -o``
writing the sentences beside the array, which neighbours then shows."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from hardmix.cli import main
from hardmix.commands.neighbours import listing_path, nearest_rows, parse_listing
from hardmix.utils.faiss_backend import faiss_module

N, D = 40, 16


@pytest.fixture
def embeddings(tmp_path) -> tuple[Path, np.ndarray, list[str]]:
    """40 random 16-d rows (not unit length) saved as ``emb.npy``, listed in ``emb.paths.txt``."""
    rng = np.random.default_rng(0)
    emb = (rng.standard_normal((N, D)) * rng.uniform(0.5, 3.0, (N, 1))).astype(np.float32)
    path = tmp_path / "emb.npy"
    np.save(path, emb)
    items = [f"photos/{'a' if i % 2 else 'b'}/img {i:02d}.jpg" for i in range(N)]
    (tmp_path / "emb.paths.txt").write_text("".join(f"{p}\n" for p in items), encoding="utf-8")
    return path, emb, items


def brute_force(emb: np.ndarray, row: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, rows) of the k rows most cosine-similar to ``row``, itself left out (float64)."""
    x = emb.astype(np.float64)
    sims = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (x[row] / np.linalg.norm(x[row]))
    others = np.array([i for i in range(len(x)) if i != row])
    order = others[np.argsort(-sims[others], kind="stable")][:k]
    return sims[order], order


def _blocks(out: str) -> list[tuple[str, list[tuple[int, float, str]]]]:
    """The printed blocks: (the query line, [(rank, similarity, item)])."""
    blocks = []
    for block in out.strip("\n").split("\n\n"):
        head, *rest = block.split("\n")
        rows = [(int(r), float(s), item) for r, s, item in (ln.split("\t", 2) for ln in rest)]
        blocks.append((head, rows))
    return blocks


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("hardmix: error:")]
    assert len(lines) == 1 and err.rstrip("\n").endswith(lines[0]), err
    return lines[0]


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
def test_nearest_rows_are_the_brute_force_ranking(backend, embeddings):
    if backend == "faiss" and faiss_module() is None:
        pytest.skip("faiss is not installed (or HARDMIX_NO_FAISS is set)")
    _, emb, _ = embeddings
    queries = [0, 7, 39, 7]
    sims, rows = nearest_rows(emb, queries, k=6, backend=backend)
    assert sims.shape == rows.shape == (4, 6) and sims.dtype == np.float32
    for q, s, r in zip(queries, sims, rows):
        want_s, want_r = brute_force(emb, q, 6)
        assert r.tolist() == want_r.tolist() and q not in r
        np.testing.assert_allclose(s, want_s, atol=1e-5)
    # more neighbours than other rows: all of them, in order
    sims, rows = nearest_rows(emb[:5], [2], k=10, backend=backend)
    assert rows.tolist() == [brute_force(emb[:5], 2, 4)[1].tolist()]


@pytest.mark.parametrize("how", ["auto", "numpy", "no-faiss-env", "faiss"])
def test_the_command_prints_rank_similarity_and_item(how, embeddings, capsys, monkeypatch):
    if how == "faiss" and faiss_module() is None:
        pytest.skip("faiss is not installed (or HARDMIX_NO_FAISS is set)")
    path, emb, items = embeddings
    if how == "no-faiss-env":  # read once per process: clear the cache around the change
        monkeypatch.setenv("HARDMIX_NO_FAISS", "1")
        faiss_module.cache_clear()
        assert faiss_module() is None
    backend = [] if how in ("auto", "no-faiss-env") else ["--backend", how]
    try:
        assert main(["neighbours", str(path), items[3], "#12", "-k", "5", *backend]) == 0
    finally:
        faiss_module.cache_clear()
    out = capsys.readouterr().out
    blocks = _blocks(out)
    assert [head for head, _ in blocks] == [f"query #3: {items[3]}", f"query #12: {items[12]}"]
    assert all(re.fullmatch(r"\d+\t-?\d\.\d{4}\t.*", ln) for ln in out.splitlines() if ln and ln[0] != "q")
    for (_, rows), q in zip(blocks, (3, 12)):
        want_s, want_r = brute_force(emb, q, 5)
        assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
        assert [r[2] for r in rows] == [items[i] for i in want_r]
        np.testing.assert_allclose([r[1] for r in rows], want_s, atol=1e-4)


def test_k_larger_than_the_other_rows_gives_them_all_with_a_note(embeddings, capsys):
    path, emb, items = embeddings
    assert main(["neighbours", str(path), "#0", "-k", "100"]) == 0
    captured = capsys.readouterr()
    ((_, rows),) = _blocks(captured.out)
    assert [r[2] for r in rows] == [items[i] for i in brute_force(emb, 0, N - 1)[1]]
    assert "-k 100" in captured.err and f"{N - 1} other rows" in captured.err


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", ["missing", "not-npy-name", "not-an-array", "one-dimensional", "no-listing",
                                  "two-listings", "short-listing", "unknown-query", "row-out-of-range",
                                  "k-zero"])
def test_bad_inputs_are_one_line_naming_the_file_or_query(case, embeddings, tmp_path, capsys):
    path, emb, items = embeddings
    target, queries, extra = str(path), ["#0"], []
    if case == "missing":
        target = str(tmp_path / "nope.npy")
        expect = (target, "does not exist")
    elif case == "not-npy-name":
        target = str(_write(tmp_path / "emb.csv", "1,2\n"))
        expect = (target, "not a .npy file")
    elif case == "not-an-array":
        target = str(_write(tmp_path / "text.npy", "not an array\n"))
        expect = (target, "not a NumPy .npy array")
    elif case == "one-dimensional":
        np.save(tmp_path / "flat.npy", np.arange(5.0))
        target = str(tmp_path / "flat.npy")
        expect = (target, "shape (5,)", "not (N, D)")
    elif case == "no-listing":
        listing_path(path, "paths").unlink()
        expect = (str(path), "emb.paths.txt", "emb.sentences.txt")
    elif case == "two-listings":
        _write(listing_path(path, "sentences"), "".join(f"s{i}\n" for i in range(N)))
        expect = ("emb.paths.txt", "emb.sentences.txt", "remove the stale one")
    elif case == "short-listing":
        _write(listing_path(path, "paths"), "".join(f"{p}\n" for p in items[:-1]))
        expect = (str(listing_path(path, "paths")), f"lists {N - 1} items", f"holds {N} rows")
    elif case == "unknown-query":
        queries = [items[1], "photos/a/nowhere.jpg"]
        expect = ("'photos/a/nowhere.jpg'", "not an item of", "emb.paths.txt", f"0 to {N - 1}")
    elif case == "row-out-of-range":
        queries = [f"#{N}"]
        expect = (f"'#{N}'", "not an item of")
    else:
        extra = ["-k", "0"]
        expect = ("--k", "positive", "got 0")
    assert main(["neighbours", target, *queries, *extra]) == 2
    captured = capsys.readouterr()
    line = _error_line(captured.err)
    assert captured.out == ""
    for part in expect:
        assert part in line, (part, line)


def test_python_api_refuses_bad_k_and_backend(embeddings, monkeypatch):
    _, emb, _ = embeddings
    with pytest.raises(ValueError, match="k: expected a positive number, got 0"):
        nearest_rows(emb, [0], k=0)
    with pytest.raises(ValueError, match="backend: expected one of"):
        nearest_rows(emb, [0], backend="annoy")
    monkeypatch.setenv("HARDMIX_NO_FAISS", "1")
    faiss_module.cache_clear()
    try:
        with pytest.raises(ValueError, match="faiss is not installed"):
            nearest_rows(emb, [0], backend="faiss")
    finally:
        faiss_module.cache_clear()


@pytest.mark.data
def test_text_encode_writes_the_sentences_beside_and_neighbours_shows_them(tiny_bert_dir, tmp_path,
                                                                            monkeypatch, capsys,
                                                                            one_torch_thread):
    from hardmix.text import encode

    sentences = ["a man plays a guitar .", "a man is playing the guitar .", "", "it rains in paris .",
                 "a cat\rsleeps .", "a man plays a guitar ."]
    stdin = "".join(f"{s}\n" for s in sentences).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    out = tmp_path / "emb.npy"
    assert main(["encode", str(tiny_bert_dir), "-o", str(out)]) == 0
    listing = tmp_path / "emb.sentences.txt"
    assert parse_listing(listing.read_bytes().decode("utf-8")) == sentences
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.npy", "emb.sentences.txt"]
    emb = np.load(out)
    np.testing.assert_allclose(emb, encode(tiny_bert_dir, sentences), atol=1e-5)
    capsys.readouterr()

    # a repeated sentence stands for its first row; its copy is its nearest neighbour
    assert main(["neighbours", str(out), "a man plays a guitar .", "a cat\rsleeps .", "-k", "3"]) == 0
    blocks = _blocks(capsys.readouterr().out)
    assert blocks[0][0] == "query #0: a man plays a guitar ."
    assert blocks[0][1][0][1] == pytest.approx(1.0, abs=1e-4) and blocks[0][1][0][2] == sentences[5]
    for (_, rows), q in zip(blocks, (0, 4)):
        assert [r[2] for r in rows] == [sentences[i] for i in brute_force(emb, q, 3)[1]]

    # the listing is checked like --output, before any work: a folder in its place refuses the command
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one .\n")))
    (tmp_path / "other.sentences.txt").mkdir()
    assert main(["encode", str(tiny_bert_dir), "-o", str(tmp_path / "other.npy")]) == 2
    assert "other.sentences.txt" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "other.npy").exists()
