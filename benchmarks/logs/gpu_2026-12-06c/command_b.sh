#!/bin/bash
# session 2026-12-06 (third), command B (run inline on the warm H100 right after A; recorded here as it ran): the
# 16-bit rows unpack4_f16 can reach (the Adam family, QHAdamW, LAMB, MARS), LAMB's with -hvec; LAMB and MARS f16 on
# Dawn
source .gl/gpu_env.sh >/dev/null; export PYTHONUNBUFFERED=1; kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED" $OUT/kv_$tag.txt | head -n 40; }; kv f16rows 150 --optimizers qhadamw,adamw,adam,lamb,mars --precisions f16,bf16 --variants default,-hvec --budget-s 110; RLX_GPU_IMPLEMENTATION=dawn kv dawnlamb 60 --optimizers lamb,mars --precisions f16 --variants default,-hvec --budget-s 40
