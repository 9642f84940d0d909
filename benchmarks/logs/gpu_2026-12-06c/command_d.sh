#!/bin/bash
# session 2026-12-06 (third), command D (inline, the same warm H100): Dawn's MARS f16 row over six rounds (command
# C's had warm-up rounds), then the host path at 20 and 148 tensors. Then (not kept: a throwaway copy of a profiling
# script) cProfile of 2000 scheduled steps at 20 tensors, whose figures PERF_NOTES 78 quotes.
source .gl/gpu_env.sh >/dev/null; export PYTHONUNBUFFERED=1; RLX_GPU_IMPLEMENTATION=dawn timeout 60 python3 -u benchmarks/kernel_variants.py --optimizers mars --precisions f16 --variants default --rounds 6 --budget-s 30 --json $OUT/kv_dawnmars6.json > $OUT/kv_dawnmars6.txt 2>&1; grep "of copy" $OUT/kv_dawnmars6.txt; python3 -c "import json;d=json.load(open('$OUT/kv_dawnmars6.json'));[print(r['variant'],r['runs_ms']) for r in d['rows'] if 'runs_ms' in r]"; timeout 150 python3 benchmarks/host_bench.py --rounds 5 --steps 200 --tensors 20,148 --json $OUT/host_bench.json > $OUT/host_bench.txt 2>&1; grep -E "tensors|torch|drop" $OUT/host_bench.txt | head -12
