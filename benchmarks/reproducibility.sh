#!/usr/bin/env bash
# What a run's numbers depend on beyond its config: the quickstart's cells as recorded (vision `none` seed 1,
# 31 steps of benchmarks/configs/vision_step_cifar10.yaml, the CPU vision config they were run on; text `none`
# seed 1, 30 steps), in fp32, run as they are, twice, with two
# threads, and with PyTorch's CPU kernels limited to AVX2 (a processor without AVX-512: oneDNN only, then
# oneDNN, MKL and ATen's own kernels). Each run's records go to OUT/<name>/ (about 4 minutes of one core
# each on a 2-core AMD EPYC; docs/results.md, "What reproduces where", reads
# results/reproducibility_2026-12-03/).
#   HARDMIX_DATA=... bash benchmarks/reproducibility.sh OUT
set -u
out=${1:?usage: benchmarks/reproducibility.sh OUT}
cd "$(dirname "$0")/.."
AVX2_ALL="ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2"
common=(--set train.seed=1 --set train.precision=fp32 --set log.progress=false --set train.save_steps=0
        --set 'loss.strategies=[{name: none}]')
vision() {  # NAME THREADS [ENV...]
  local name=$1 threads=$2; shift 2
  env "$@" OMP_NUM_THREADS="$threads" hardmix train vision benchmarks/configs/vision_step_cifar10.yaml \
    --output "$out/$name" "${common[@]}" --set train.threads="$threads" --set data.max_samples=2000 \
    --set data.val_samples=500 --set eval.knn_train_samples=1000 --set eval.knn_test_samples=500 \
    > "$out/$name.log" 2>&1 && rm -rf "$out/$name/checkpoint.pt" "$out/$name/best"
}
text() {  # NAME THREADS [ENV...]
  local name=$1 threads=$2; shift 2
  env "$@" OMP_NUM_THREADS="$threads" hardmix train text configs/text/cpu_simcse.yaml \
    --output "$out/$name" "${common[@]}" --set train.threads="$threads" --set train.max_steps=30 \
    --set eval.eval_steps=10 --set eval.final_sts=true --set 'eval.sts_tasks=[STS-B]' \
    --set data.train_file=wiki/wiki1m-head-11914.txt > "$out/$name.log" 2>&1 \
    && rm -rf "$out/$name/checkpoint.pt" "$out/$name/best"
}
mkdir -p "$out"
vision a1 1 X=1
vision a2 1 X=1
vision t2 2 X=1
vision avx512core 1 ONEDNN_MAX_CPU_ISA=AVX512_CORE
vision avx2 1 ONEDNN_MAX_CPU_ISA=AVX2
vision avx2b 1 ONEDNN_MAX_CPU_ISA=AVX2
vision v_avx2all 1 $AVX2_ALL
text t_a1 1 X=1
text t_t2 2 X=1
text t_avx2all 1 $AVX2_ALL
