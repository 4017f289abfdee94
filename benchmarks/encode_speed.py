"""``hardmix.vision.encode`` against the k-NN's own feature pass, on the same images and backbone.

    python benchmarks/encode_speed.py RUN_FOLDER IMAGE_FOLDER [--repeats 5]

Times, interleaved, ``encode(RUN, FOLDER)`` (listing, decoding, features in chunks) and what the k-NN
evaluation does with the same images (``load_tensors`` then ``extract_features``), both without the decode
cache and on one torch thread, and prints the median seconds of each and their ratio as a Markdown row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from hardmix.vision import encode
from hardmix.vision.data import ImageList, load_tensors
from hardmix.vision.encoding import image_paths, load_encoder
from hardmix.vision.evaluation import eval_geometry, extract_features


def knn_pass(run: Path, folder: Path) -> float:
    t0 = time.perf_counter()
    net, cfg = load_encoder(run)
    paths = image_paths(folder)
    resolution, crop = eval_geometry(cfg)
    images = ImageList(folder, paths, torch.zeros(len(paths), dtype=torch.long), [])
    tensors = load_tensors(images, None, resolution, cache_dir="", skip_corrupt=True)
    extract_features(net, tensors.images, cfg.augment.mean, cfg.augment.std, 256, "cpu", crop, progress=False)
    return time.perf_counter() - t0


def encode_pass(run: Path, folder: Path) -> float:
    t0 = time.perf_counter()
    encode(run, folder, batch_size=256, device="cpu", skip_corrupt=True, cache_dir="", progress=False)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("images", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"knn": [], "encode": []}
    for _ in range(args.repeats):
        times["knn"].append(knn_pass(args.run, args.images))
        times["encode"].append(encode_pass(args.run, args.images))
    k, e = statistics.median(times["knn"]), statistics.median(times["encode"])
    n = len(image_paths(args.images))
    print("| images | k-NN feature pass (s) | encode (s) | encode / k-NN |\n|---|---|---|---|")
    print(f"| {n} | {k:.2f} | {e:.2f} | {e / k:.2f} |")
    print("runs (s): " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(times["knn"], times["encode"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
