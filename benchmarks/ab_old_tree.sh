#!/usr/bin/env bash
# The importable tree of an earlier commit, for benchmarks/ab.py's OLD checkout (and benchmarks/ab_arch.sh):
# rlx_gpu/, shaders/ (the package finds them beside itself), pyproject.toml and the matrix benchmark.
#
#     bash benchmarks/ab_old_tree.sh COMMIT DIR      # e.g. 4aa41c8^1 ab_old
#
# DIR (inside the worktree, untracked and not git-ignored, so a device run carries it) is made afresh; DIR/COMMIT
# names the commit. Do not commit it.
set -euo pipefail
commit=${1:?usage: ab_old_tree.sh COMMIT DIR}
dir=${2:?usage: ab_old_tree.sh COMMIT DIR}
rm -rf "$dir"
mkdir -p "$dir"
git archive "$commit" rlx_gpu shaders pyproject.toml benchmarks/muon_bench.py | tar -x -C "$dir"
git rev-parse "$commit" > "$dir/COMMIT"
echo "$dir: $(cat "$dir/COMMIT") ($(du -sh "$dir" | cut -f1))"
