#!/bin/bash
# Run in the next session (2026-12-07, second) as ../gpu_2026-12-07b/command_a.sh, less Dawn's bit tests (those ran
# inline after it): results there and in PERF_NOTES 79-80.
# Not run: in session 2026-12-07 no device machine started (every start failed; they took the device budget). The
# measurement PERF_NOTES 79 and 80 predict, ready for the next session (about 400 s on an H100 or H200):
#   8-bit's "vlog" code search: its bit tests on NVIDIA's compiler, then timed against "log" (the default), both
#   implementations; the host path of a scheduled lr before the change (main's 5488de9) and after it.
# Before the run, on the development machine (untracked, so it travels with the working tree; delete it after):
#   mkdir -p benchmarks/_old && git archive 5488de9 rlx_gpu shaders | tar -x -C benchmarks/_old
# Run: the device tool's `run` with carry [".gl", ".whl"] and `bash benchmarks/logs/gpu_2026-12-07/next_command.sh`.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
timeout 70 python3 -m pytest -q tests/test_qclosed.py tests/test_kernel_variants.py -k "vlog" > $OUT/tests_wgpu.txt 2>&1; tail -n 2 $OUT/tests_wgpu.txt
RLX_GPU_IMPLEMENTATION=dawn timeout 50 python3 -m pytest -q tests/test_qclosed.py -k "vlog" > $OUT/tests_dawn.txt 2>&1; tail -n 2 $OUT/tests_dawn.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED" $OUT/kv_$tag.txt | head -n 40; sed -n '/^optimizer/,$p' $OUT/kv_$tag.txt | awk '{print $1, $2, $4, $(NF-2), $(NF-1), $NF}'; }
kv q8 100 --optimizers adamw8bit --precisions fp32,bf16 --variants default,+qvlog --budget-s 70
RLX_GPU_IMPLEMENTATION=dawn kv dawnq8 45 --optimizers adamw8bit --precisions fp32 --variants default,+qvlog --budget-s 20
hb() { timeout $2 python3 benchmarks/host_bench.py --floors-only --rounds 5 --steps 200 --tensors 20,148 --json $OUT/host_$1.json > $OUT/host_$1.txt 2>&1; grep -E "tensors (plain|checked|sched)" $OUT/host_$1.txt; }
[ -d benchmarks/_old/rlx_gpu ] && { echo "== before"; PYTHONPATH=$PWD/benchmarks/_old:$PYTHONPATH hb before 55; }
echo "== after"; hb after 55
