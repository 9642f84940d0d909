#!/bin/bash
# session 2026-12-07 (fourth), command L: issue 25's rows on the H200 (none measured there since 2026-12-02): every
# default row the issue names on GPT-2 124M with torch's and bitsandbytes' steps beside (kernel_variants.py, one
# variant: the defaults), the host path against its floors and torch (1, 20, 148 tensors; the drop-in on GPT-2
# small's shapes), and Dawn's quantized edge tests on NVIDIA.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/card_l.txt
t() { local tag=$1 s=$2; shift 2; timeout $s python3 -m pytest -q "$@" > $OUT/tests_$tag.txt 2>&1; echo "$tag: $(tail -n 1 $OUT/tests_$tag.txt)"; grep -E "^E  .*(param|state of|differ)|^FAILED" $OUT/tests_$tag.txt | head -n 8; }
timeout 230 python3 -u benchmarks/kernel_variants.py --optimizers adamw,adamw8bit,adamw4bit,lamb,mars,adafactor --precisions fp32,bf16,f16,bf16-master --variants default --rounds 2 --budget-s 200 --json $OUT/kv_rows.json > $OUT/kv_rows.txt 2>&1; sed -n '/^optimizer/,$p' $OUT/kv_rows.txt | head -n 40
timeout 200 python3 benchmarks/host_bench.py --rounds 5 --tensors 1,20,148 --gpt2 --json $OUT/host.json > $OUT/host.txt 2>&1; tail -n 30 $OUT/host.txt
RLX_GPU_IMPLEMENTATION=dawn t q_dawn 60 tests/test_quantized_edges.py
