#!/bin/bash
# session 2026-12-07 (second), command A: next_command.sh of the first session (benchmarks/logs/gpu_2026-12-07/)
# less Dawn's bit tests (its kv row stays), to fit what device time is left after failed starts. vlog's bit tests on
# NVIDIA's compiler first; then vlog against log (8-bit AdamW, fp32 and bf16 params); Dawn's 8-bit row; the host
# path of a scheduled lr before (main's 5488de9, put beside as benchmarks/_old) and after.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
timeout 70 python3 -m pytest -q tests/test_qclosed.py tests/test_kernel_variants.py -k "vlog" > $OUT/tests_wgpu.txt 2>&1; tail -n 2 $OUT/tests_wgpu.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED" $OUT/kv_$tag.txt | head -n 40; sed -n '/^optimizer/,$p' $OUT/kv_$tag.txt | awk '{print $1, $2, $4, $(NF-2), $(NF-1), $NF}'; }
kv q8 100 --optimizers adamw8bit --precisions fp32,bf16 --variants default,+qvlog --budget-s 70
RLX_GPU_IMPLEMENTATION=dawn kv dawnq8 45 --optimizers adamw8bit --precisions fp32 --variants default,+qvlog --budget-s 20
hb() { timeout $2 python3 benchmarks/host_bench.py --floors-only --rounds 5 --steps 200 --tensors 20,148 --json $OUT/host_$1.json > $OUT/host_$1.txt 2>&1; grep -E "tensors (plain|checked|sched)" $OUT/host_$1.txt; }
[ -d benchmarks/_old/rlx_gpu ] && { echo "== before"; PYTHONPATH=$PWD/benchmarks/_old:$PYTHONPATH hb before 55; }
echo "== after"; hb after 55
