"""faiss as an optional backend (``pip install "hardmix[faiss]"``): found once, used where it is faster.

The core never requires faiss. Callers ask :func:`faiss_module` and fall back to torch when it is None
(the vision trainer's k-NN evaluation).
Setting the environment variable ``HARDMIX_NO_FAISS=1`` (read once, at the first call) makes hardmix
ignore an installed faiss: for comparisons, or where faiss's OpenMP runtime conflicts with torch's.
"""

from __future__ import annotations

import functools
import os
import warnings
from types import ModuleType


@functools.lru_cache(maxsize=1)
def faiss_module() -> ModuleType | None:
    """The ``faiss`` module, or None when it is not installed or ``HARDMIX_NO_FAISS`` is set (not 0)."""
    if os.environ.get("HARDMIX_NO_FAISS", "") not in ("", "0"):
        return None
    try:
        import faiss
    except ImportError:
        return None
    except Exception as error:  # installed but broken (a missing shared library, say): use torch
        warnings.warn(f"faiss is installed but does not import ({error!r}); hardmix uses torch", stacklevel=2)
        return None
    return faiss
