#!/usr/bin/env bash
# wgpu-native and Dawn side by side (issue 23), written for the GPU machine (shared/device/README.md):
#   here, once:  EXTRA_WHEELS="wgpudawn==0.32.0.4" bash ../shared/device/prepare.sh
#   there:       source .gl/gpu_env.sh && bash benchmarks/h200_implementations.sh bench          (<= 8 min)
#                source .gl/gpu_env.sh && bash benchmarks/h200_implementations.sh suite wgpu-native
#                source .gl/gpu_env.sh && bash benchmarks/h200_implementations.sh suite dawn
# bench: `rlx-gpu info` (both implementations, Dawn's subgroup-matrix configs); then one `rlx-gpu bench
# --implementation both` (each implementation in a child process, the rows merged, each naming its implementation):
# AdamW, SGD-momentum, LAMB and 8-bit AdamW in fp32, bf16 and f16 on GPT-2 124M, the host rows, torch's fused CUDA
# optimizers in the same runs; then the host rows on Dawn with skip_validation (RLX_GPU_DAWN_SKIP_VALIDATION=1)
# and without, alternating. suite: the test suite on one implementation (wgpu-native: all of it; Dawn: its GPU
# tests, as ./run.sh does), the pass counts last. Everything goes to $OUT (or .), a short table to stdout.
set -uo pipefail
out=${OUT:-.}
bench=(python3 -m rlx_gpu bench --no-numpy --no-latency --repeats 5 --copy-mb 1024 --sets gpt2-124m)
case "${1:-}" in
  bench)
    python3 -m rlx_gpu info --json > "$out/h200_info.json" 2> "$out/h200_info.log"
    python3 -m rlx_gpu info 2>/dev/null | grep -E "implementation|adapters|subgroup matrices|toggles|\*"
    timeout 330 "${bench[@]}" --implementation both --optimizers adamw,sgd,lamb,adamw8bit --precisions fp32,bf16,f16 \
      --host-rows --json "$out/h200_implementations.json" 2> "$out/h200_implementations.log" \
      | tee "$out/h200_implementations.txt"
    for round in 1 2; do  # (alternating: Dawn's host rows without and with skip_validation)
      for skip in 0 1; do
        RLX_GPU_DAWN_SKIP_VALIDATION=$skip timeout 60 "${bench[@]}" --implementation dawn --optimizers sgd \
          --sets single:4096 --copy-mb 64 --no-host --host-rows --json "$out/h200_dawn_skip${skip}_round${round}.json" \
          2>> "$out/h200_dawn_skip.log" | grep "host step" | sed "s/^/skip_validation=$skip round $round: /"
      done
    done ;;
  suite)
    impl=${2:?usage: h200_implementations.sh suite wgpu-native|dawn}
    marks=(); [ "$impl" = dawn ] && marks=(-m gpu)
    RLX_GPU_IMPLEMENTATION=$impl RLX_GPU_REQUIRE_ADAPTER=1 timeout 570 python3 -m pytest -q -p no:cacheprovider \
      "${marks[@]}" > "$out/h200_suite_$impl.txt" 2>&1
    echo "exit status $?"; tail -25 "$out/h200_suite_$impl.txt" ;;
  *) echo "usage: h200_implementations.sh bench | suite wgpu-native|dawn" >&2; exit 2 ;;
esac
