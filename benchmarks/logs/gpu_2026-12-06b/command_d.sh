#!/bin/bash
# session 2026-12-06 (second), command D (run inline on the warm machine right after C; recorded here as it ran):
# the variants of the rows command B left below a target (QHAdamW and LAMB in float16, 8-bit AdamW: its code
# search and map reads knocked out), then every elementwise 16-bit row on Dawn
source .gl/gpu_env.sh >/dev/null && export PYTHONUNBUFFERED=1 && timeout 100 python3 -u benchmarks/kernel_variants.py --optimizers qhadamw,lamb,adamw8bit --precisions f16,fp32 --variants default,off,+wide,-full,-f16round,ept4,+qcalc,x-search,x-maps --budget-s 70 --json $OUT/kv_variants.json > $OUT/kv_variants.txt 2>&1; sed -n '/^copy/,$p' $OUT/kv_variants.txt | cut -c1-400; RLX_GPU_IMPLEMENTATION=dawn timeout 90 python3 -u benchmarks/kernel_variants.py --variants default --optimizers sgd,lion,adam,rmsprop,adagrad,nadamw,radam,qhadamw,sophiah --precisions bf16,f16 --budget-s 60 --json $OUT/kv_dawn16.json > $OUT/kv_dawn16.txt 2>&1; grep "of copy" $OUT/kv_dawn16.txt
