"""What a run pays at its start to fingerprint its images by content once their digests are cached:
:func:`hardmix.training.fingerprint.content_digests` over an image folder, each call in a fresh in-process
state (the cache file read again, as a new process does), median of 5 after one call that fills the cache.

    HARDMIX_CACHE=/tmp/digest_bench python benchmarks/digest_cache.py "$HARDMIX_DATA/images/cifar10/train"
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import hardmix.training.fingerprint as fingerprint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    paths = sorted(str(p) for p in args.folder.rglob("*") if p.is_file())
    fingerprint.content_digests(paths)  # fills the cache (reads every file once)
    seconds = []
    for _ in range(args.repeats):
        fingerprint._memory.clear()
        fingerprint._loaded.clear()
        start = time.perf_counter()
        fingerprint.content_digests(paths)
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"files": len(paths), "median_s": round(statistics.median(seconds), 3),
                      "seconds": [round(s, 3) for s in seconds]}))


if __name__ == "__main__":
    main()
