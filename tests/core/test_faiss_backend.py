"""faiss as an optional backend (the vision trainer's k-NN): found once, hidden on request."""

from __future__ import annotations

import pytest

from hardmix.utils.faiss_backend import faiss_module

needs_faiss = pytest.mark.skipif(faiss_module() is None, reason="faiss is not installed (hardmix[faiss])")


@needs_faiss
def test_hardmix_no_faiss_environment_variable_hides_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARDMIX_NO_FAISS", "1")
    faiss_module.cache_clear()
    try:
        assert faiss_module() is None
    finally:
        monkeypatch.delenv("HARDMIX_NO_FAISS")
        faiss_module.cache_clear()


def test_a_broken_faiss_install_falls_back_to_torch_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def broken_import(name, *args, **kwargs):
        if name == "faiss":
            raise OSError("libgomp.so.1: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken_import)
    faiss_module.cache_clear()
    try:
        with pytest.warns(UserWarning, match="libgomp"):
            assert faiss_module() is None
    finally:
        monkeypatch.setattr(builtins, "__import__", real_import)
        faiss_module.cache_clear()
