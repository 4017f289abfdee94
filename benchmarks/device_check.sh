#!/usr/bin/env bash
# The GPU checks of the core, as one command for a machine with CUDA:
#   1. tests/core/test_devices.py: every loss path in float32 on CUDA against float64 on the CPU (the CUDA
#      paths differ: one strip in the fused in-batch loss, topk for the selection, torch instead of faiss
#      and NumPy for MoCHi's pair norms and repeated pairs, bf16 autocast);
#   2. benchmarks/loss_overhead.py --device cuda: time and peak extra GPU memory of each loss.
# Logs and the benchmark's JSON go to $OUT (default: benchmarks/results/device_check). It needs torch with
# CUDA, numpy, scipy, pyyaml and pytest already installed (the device machines' image has them) and
# installs hardmix itself without dependencies (or, if that fails, puts the checkout on PYTHONPATH).
# On the device machine: bash benchmarks/device_check.sh   (a few minutes, most of it the benchmark)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results/device_check}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

python3 -c "
import torch
assert torch.cuda.is_available(), 'device_check: no CUDA device visible to torch'
print('torch', torch.__version__, 'on', torch.cuda.get_device_name(0))
" | tee "$OUT/device.txt"

if ! python3 -m pip install --quiet --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1; then
  echo "pip install -e . failed (see $OUT/install.log); using PYTHONPATH"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

echo "== device tests"
python3 -m pytest -q -rs -p no:cacheprovider tests/core/test_devices.py 2>&1 | tee "$OUT/test_devices.log"

echo "== loss overhead on the GPU"
python3 benchmarks/loss_overhead.py --device cuda --output "$OUT/loss_overhead_cuda.json" 2>&1 \
  | tee "$OUT/loss_overhead_cuda.log"
