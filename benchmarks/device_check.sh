#!/usr/bin/env bash
# The core's GPU checks only: stages 1 and 2 of benchmarks/gpu_check.sh (the device tests of every loss
# path on CUDA against float64 on the CPU, and benchmarks/loss_overhead.py --device cuda), with their
# logs and JSON under $OUT (default results/device_check). The whole GPU check, and what each
# stage exercises: benchmarks/gpu_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT="${OUT:-results/device_check}"
exec bash benchmarks/gpu_check.sh --only device_tests,loss_overhead "$@"
