#!/usr/bin/env bash
# gpu_check: every GPU path of hardmix as one prepared command, for a machine with one CUDA GPU, in at
# most 6 minutes (a 15-minute lease, start-up included, with room for one rerun). Every figure is written
# as JSON, and everything printed goes to a log, under $OUT (9 files):
#   gpu_check.log  gpu_check.json (per stage: status, seconds, cap, headline figures; rewritten after
#   every stage)  loss_overhead.json  text_steps.json  vision_steps.json  profile.json  paths.json
#   training.json  distributed.json
#
# Usage
#   bash benchmarks/gpu_check.sh --prepare-data .gpu_data   # here, once: the data that travels (below)
#   bash benchmarks/gpu_check.sh                            # on the GPU machine (OUT is set there)
#   bash benchmarks/gpu_check.sh --dry                      # CPU, tiny sizes, a few minutes (CI runs it:
#                                                           # tests/test_gpu_check.py)
#   bash benchmarks/gpu_check.sh --only training,distributed   # some stages (names below)
# With the device tool: run(command="bash benchmarks/gpu_check.sh", carry=[".gpu_data"], timeout_s=420).
# OUT defaults to results/gpu_check (dry: results/gpu_check_dry; both git-ignored); WORK (run folders,
# caches; not brought back) to a fresh temporary folder. PYTHON picks the interpreter (default python3).
# The first run's files are kept in results/gpu_check_2026-12-06/ (docs/performance.md, "GPU check").
#
# Data to carry. ../shared does not travel: only the checkout and the folders named in carry (64 MiB in
# all). `--prepare-data .gpu_data` (benchmarks/gpu_data.py) copies from $HARDMIX_DATA/images/cifar10 the
# first 2,000 train and 500 test JPEGs of each class (sorted names) into .gpu_data/images/cifar10 (the
# ImageFolder layout with classes.txt; git-ignored): 20,000 + 5,000 images, 22.0 MiB of files, 36.8 MiB
# as a tar of 512-byte blocks (7.9 MiB gzipped); the checkout is 2.2 MiB. It also copies into
# .gpu_data/text the tokenizer and config of $HARDMIX_DATA/models/bert-mini-wiki-mlm (no weights) and
# the first 400 sentences of $HARDMIX_DATA/wiki/wiki1m-head-11914.txt (0.94 MiB in all), for the
# text_train case. The full mode reads it through HARDMIX_DATA=.gpu_data (GPU_DATA overrides). The
# BERT-base-shaped encoder of the step stages is random-init and its tokens random.
#
# Stages (full mode; each a subprocess with its own time cap, killed with its children at the cap;
# the caps sum to 345 s, 15 s being left of the 360 for the set-up; benchmarks/gpu_check.py CAPS; each
# writes its JSON as it goes, so a stage stopped at its cap keeps the cases it finished):
#   1 device_tests (25 s)  tests/core/test_devices.py: every loss path on CUDA in fp32 and under bf16
#                          autocast against float64 on the CPU; the MoCo step with MoCHi and the
#                          trainer's CPU step generator on CUDA (tests/vision/test_moco.py).
#   2 loss_overhead (30 s) benchmarks/loss_overhead.py --device cuda, every case at the papers' shapes
#                          (text B 64/1024/4096 D 768; vision B 256 D 128 K 16384/65536), 5 reps: time
#                          ratios and peak extra memory.
#   3 text_steps (40 s)    benchmarks/gpu_steps.py text: BERT-base-shaped encoder, bf16, max length 32:
#                          steps/s of floor, none, mixcse, mochi at batch 64, at batch 512, and as one of
#                          8 ranks (local 64, 512 gathered negatives); "did not fit" is recorded.
#   4 vision_steps (42 s)  benchmarks/gpu_steps.py vision: ResNet-50 at 224 px (B 256, K 16384) and
#                          ResNet-18 at 32 px (B 256, K 4096), bf16, channels-last, TensorAugment on the
#                          GPU: images/s of floor, none, mochi; the PIL path's rate with pinned memory.
#   5 profile (30 s)       benchmarks/gpu_paths.py profile: torch.profiler over the vision none step
#                          (ResNet-18/32 px) and the text none step (batch 64): top kernels and operators
#                          by time, kernels launched and host-device synchronizations per step.
#   6 paths (40 s)         benchmarks/gpu_paths.py paths: the cases text_train (the text trainer's bf16
#                          loop, 6 steps, random-init bert-mini shape on the carried tokenizer and
#                          sentences), linear_probe (the augmented features on CUDA against the CPU's),
#                          resume (a MoCHi run stopped half-way and resumed against an uninterrupted one:
#                          losses bitwise or within a relative 1e-3).
#   7 training (128 s)     benchmarks/gpu_training.py train: `python -m hardmix train vision` MoCo-v2,
#                          then MoCHi, same seed and epochs (planned for 65 s x 0.85 of training each at
#                          stage 4's ResNet-18 MoCHi rate; a run is stopped at 80 s), on the carried
#                          CIFAR-10 subset; k-NN top-1 of both and of the untrained network; proxy-task
#                          accuracy curves and whether the proxy task is mostly solved (MoCHi's premise).
#                          lr 0.03 per 256 and a queue of 256 (gpu_training.py FULL): at lr 0.3 the first
#                          GPU run's encoders collapsed (results/gpu_recipe_cpu_2026-12-06).
#                          Not ok (full mode) where a run's k-NN top-1 does not beat the untrained
#                          network's by 1 point (its JSON says which, by how much; --dry records it only).
#   8 distributed (10 s)   torchrun --nproc_per_node 2 (NCCL) only where 2 GPUs exist; else "skipped".
# The dry mode runs the same eight entry points with the same code at tiny sizes on the CPU, in one
# Python process (one interpreter start), with the data a fresh 32 + 8 images per class and 200
# sentences copied by the same helper; CUDA-only steps are skipped with a message (the CUDA test cases,
# the pinned memory check, the NCCL run).
#
# Time budget (full mode), measured on the first GPU run (2026-12-06, one H100 80GB HBM3; python
# benchmarks/gpu_budget.py; "GPU check" in docs/performance.md):
#   hard bound: 360 s (GPU_CHECK_SECONDS) from the script's start: the stages get what the set-up
#               (install, device query; each under `timeout`; measured 8 s) leaves, each at most its
#               cap, and a stage with under 5 s left is not run.
#   measured:   248.7 s (set-up 8, then the six stages of then in 240.7 s, text_steps stopped at its
#               35 s cap before its third group); the next run's stages projected from those figures
#               fit their caps (tests/test_gpu_check.py checks it).
#
# GPU-only branches of the code and the stage that exercises each:
#   bf16 autocast (AMP)     vision trainer train.amp (is_bf16_supported) [7]; loss paths under autocast
#                           [1]; text/vision steps under autocast [3, 4]. The text trainer's
#                           train.precision bf16 loop [6 text_train]; its fp16 GradScaler branch: NOT
#                           exercised.
#   channels-last           vision trainer train.channels_last (model and views) [7]; the steps [4];
#                           SplitBatchNorm on channels-last input [4, 6, 7]. The linear probe's augmented
#                           features (hardmix/vision/augmented_features.py: channels-last + autocast)
#                           [6 linear_probe].
#   CUDA top-k              MoCHi's selection (topk) and pair draws on the device [1, 2, 4, 6, 7].
#   CUDA loss paths         the loss's two paths, MoCHi's pair inner products in blocks of rows, CUDA
#                           generators [1, 2, 3]; the gathered in-batch loss on CUDA (as one rank of 8) [3].
#   tensor pipeline on GPU  TensorBatches/TensorAugment with the uint8 cache on the device [4, 5, 6, 7].
#   k-NN features on CUDA   frozen_forward (channels-last + bf16 autocast in eval) of the final and the
#                           untrained k-NN [6, 7].
#   CPU step generator      the vision trainer's per-step CPU generator with MoCHi's draws on CUDA [1, 7].
#   pinned memory           PilBatches(pin_memory=True), the PIL path on CUDA [4] (batches checked pinned).
#   NCCL                    init_process_group("nccl"), DDP device_ids, cross-rank key shuffle [8], only
#                           with 2 GPUs; with one GPU: NOT exercised (skipped, its config is built).
#   faiss-gpu               NOT exercised: the GPU machine has no faiss, and hardmix has no faiss GPU
#                           index (k-NN moves features to the CPU for faiss or torch; faiss_backend only
#                           takes CPU tensors).
#   CUDA RNG state          saved in checkpoints [7]; restored by --resume on CUDA [6 resume].
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
MODE=full
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry) MODE=dry; shift ;;
    --only) ONLY="${2:?--only needs a comma list of stages}"; shift 2 ;;
    --prepare-data)
      shift
      exec "$PY" benchmarks/gpu_data.py "${1:?--prepare-data needs a folder, e.g. .gpu_data}" "${@:2}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$MODE" = dry ]; then
  OUT="${OUT:-results/gpu_check_dry}"
else
  OUT="${OUT:-results/gpu_check}"
fi
WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}"
mkdir -p "$OUT" "$WORK"
OUT="$(cd "$OUT" && pwd)"
WORK="$(cd "$WORK" && pwd)"
export PYTHONUNBUFFERED=1 HARDMIX_CACHE="$WORK/cache"
# Everything below is printed and logged: a pipe into tee, not a process substitution, so that the
# log is complete when the script exits (and comes back even if the command is stopped).
check() {
  set -e
  echo "gpu_check ($MODE) at $(date -u '+%Y-%m-%d %H:%M:%S UTC') in $PWD," \
    "git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

  # hardmix importable: the dry mode uses what is installed; the full mode installs the checkout without
  # dependencies; where that fails (pyproject.toml needs setuptools >= 77, and nothing can be downloaded),
  # a sitecustomize.py on PYTHONPATH puts the checkout first on sys.path, so that hardmix (with
  # hardmix/text and hardmix/vision) imports from it in every process (python -m hardmix, pytest, torchrun's
  # workers), whatever their working directory.
  use_checkout() {
    mkdir -p "$WORK/site"
    printf '%s\n' '"""gpu_check.sh: hardmix from the checkout, not installed."""' 'import sys' \
      "sys.path.insert(0, '$PWD')" \
      >"$WORK/site/sitecustomize.py"
    # The tasks are found through entry points (hardmix.tasks, hardmix.cli): a dist-info beside it declares
    # pyproject.toml's, as an install would.
    "$PY" - "$WORK/site" <<'PYEOF'
import pathlib, sys, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path(sys.argv[1]) / "hardmix-0+checkout.dist-info"
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hardmix\nVersion: {project['version']}\n")
groups = project.get("entry-points", {})
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n"
    for group, eps in groups.items()))
PYEOF
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    echo "hardmix from the checkout through $WORK/site/sitecustomize.py"
  }
  importable() {  # finds the three packages without importing torch (a start of torch costs seconds)
    "$PY" -c "import importlib.util as u, sys
names = ('hardmix.cli', 'hardmix.text.model', 'hardmix.vision.task')
sys.exit(not all(u.find_spec(m) for m in names))" 2>/dev/null
  }
  if [ "$MODE" = full ]; then
    pip_e() { timeout 30 "$PY" -m pip install --quiet --no-deps --no-build-isolation --no-index "$@" -e .; }
    if pip_e >"$WORK/install.log" 2>&1 || pip_e --break-system-packages >>"$WORK/install.log" 2>&1; then
      echo "installed hardmix from the checkout (no dependencies)"
    else
      echo "pip install -e . failed:"; grep -m3 -i "error" "$WORK/install.log" || tail -3 "$WORK/install.log"
    fi
  fi
  importable || use_checkout
  importable || { echo "gpu_check: hardmix does not import" >&2; "$PY" -c "import hardmix.cli"; exit 1; }

  if [ "$MODE" = dry ]; then
    : "${HARDMIX_DATA:?--dry copies a tiny CIFAR-10 tree from \$HARDMIX_DATA/images/cifar10}"
    "$PY" benchmarks/gpu_data.py "$WORK/data" --train-per-class 32 --test-per-class 8 --sentences 200 | tail -1
    export HARDMIX_DATA="$WORK/data"
    ARGS=(--dry)
  else
    timeout 60 "$PY" -c "import torch, sys
sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device visible to torch (--dry on a CPU)')"
    if command -v nvidia-smi >/dev/null; then
      timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    fi
    export HARDMIX_DATA="${GPU_DATA:-$PWD/.gpu_data}"
    [ -d "$HARDMIX_DATA/images/cifar10/train" ] || echo "warning: no carried data in $HARDMIX_DATA" \
      "(bash benchmarks/gpu_check.sh --prepare-data .gpu_data, and carry it): the paths and" \
      "training stages and the pinned-memory check will fail"
    # The stages get what is left of the 6 minutes after the set-up (SECONDS: since the script started).
    ARGS=(--budget "$((${GPU_CHECK_SECONDS:-360} - SECONDS))")
  fi
  [ -n "$ONLY" ] && ARGS+=(--only "$ONLY")

  local rc=0
  "$PY" benchmarks/gpu_check.py --out "$OUT" --work "$WORK" "${ARGS[@]}" || rc=$?
  echo "gpu_check ($MODE) done at $(date -u '+%H:%M:%S UTC'), exit $rc;" \
    "files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  return "$rc"
}
set +e
check 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
