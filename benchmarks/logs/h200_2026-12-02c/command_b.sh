#!/bin/bash
# session 2026-12-02c, command B: SOAP's first step with its switches (tc5, PERF_NOTES 71) and PANEL 1024 (73)
source .gl/gpu_env.sh || exit 1
timeout 175 python3 benchmarks/matrix_phases.py --only soap --first-only --wide 128:p1024,128:g0:p1024,128:s1e-7:p1024,128:g0:s1e-7:p1024 --rounds 2 --total 165 > $OUT/first_phases.txt 2>&1; tail -30 $OUT/first_phases.txt
