#!/bin/bash
# session 2026-12-07, command C (cut to ~400 s: failed starts took most of the device budget): the
# host path before this session's change (main's 5488de9, its rlx_gpu and shaders copied untracked to
# benchmarks/_old for this run only) and after it; 8-bit's "vlog" code search: its bit tests on NVIDIA, then against
# "log" (the default) on both implementations; on an H200, LAMB, MARS and AdamW 16-bit at their defaults
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
hb() { timeout $2 python3 benchmarks/host_bench.py --floors-only --rounds 5 --steps 200 --tensors 20,148 --json $OUT/host_$1.json > $OUT/host_$1.txt 2>&1; grep -E "tensors (plain|checked|sched)" $OUT/host_$1.txt; }
echo "== before"; PYTHONPATH=$PWD/benchmarks/_old:$PYTHONPATH hb before 60
echo "== after"; hb after 60
T="tests/test_qclosed.py tests/test_kernel_variants.py"
timeout 70 python3 -m pytest -q $T -k "vlog" > $OUT/tests_wgpu.txt 2>&1; tail -n 2 $OUT/tests_wgpu.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED" $OUT/kv_$tag.txt | head -n 40; sed -n '/^optimizer/,$p' $OUT/kv_$tag.txt | awk '{print $1, $2, $4, $(NF-2), $(NF-1), $NF}'; }
kv q8 90 --optimizers adamw8bit --precisions fp32,bf16 --variants default,+qvlog --budget-s 60
RLX_GPU_IMPLEMENTATION=dawn kv dawnq8 45 --optimizers adamw8bit --precisions fp32 --variants default,+qvlog --budget-s 20
grep -q H200 $OUT/card.txt || exit 0
kv reducing16 60 --optimizers lamb,mars,adamw --precisions bf16,f16 --variants default --budget-s 40
