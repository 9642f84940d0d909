#!/usr/bin/env bash
# The two set-up-and-run commands of the README:
#   ./run.sh demo [args]   trains the spiral demo with a GPU optimizer (examples/train_spirals.py)
#   ./run.sh test [args]   checks every shipped shader (rlx-gpu check-shaders --validator all), then runs
#                          the test suite (pytest over pytest-xdist workers: RLX_GPU_TEST_WORKERS, default one a
#                          core up to 4; then the tests marked serial, alone; GPU tests on whatever adapter is
#                          found) on wgpu-native, then
#                          its GPU tests (-m gpu: the rest does not touch an implementation) on Dawn where Dawn
#                          finds an adapter (on Debian 12 as root: after installing Mesa 25 from
#                          bookworm-backports; elsewhere the reason is printed and Dawn is skipped)
#   ./run.sh docs [args]   builds the documentation site into site/ (mkdocs, warnings are errors; args to mkdocs)
#   ./run.sh lint [args]   ruff check over the repository (the rules: pyproject.toml's [tool.ruff]; args to ruff)
# Each creates .venv (or $RLX_GPU_VENV) with the package installed, and where no Vulkan driver is
# present on Debian/Ubuntu and we are root, installs the CPU one (mesa-vulkan-drivers: llvmpipe).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in demo|test|docs|lint) ;; *) echo "usage: ./run.sh demo|test|docs|lint [args...]" >&2; exit 2 ;; esac

have_icd() { compgen -G "/usr/share/vulkan/icd.d/*.json" >/dev/null || compgen -G "/etc/vulkan/icd.d/*.json" >/dev/null; }
if [ "$(uname -s)" = Linux ] && ! have_icd; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "run.sh: no Vulkan driver found; installing the CPU one (libvulkan1 mesa-vulkan-drivers)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libvulkan1 mesa-vulkan-drivers >/dev/null
  else
    echo "run.sh: no Vulkan driver found; as root run: apt-get install -y libvulkan1 mesa-vulkan-drivers" >&2
  fi
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/rlx-gpu-runtime}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR" 2>/dev/null || true

venv=${RLX_GPU_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
stamp="$venv/.rlx_gpu-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q -e ".[test,check,examples,dawn]"
  touch "$stamp"
fi
py="$venv/bin/python"
# Whether Dawn finds an adapter (Dawn needs a newer lavapipe than Debian 12's Mesa 22.3: it needs
# shaderUniform*ArrayDynamicIndexing); prints the reason when not.
dawn_probe() {
  RLX_GPU_IMPLEMENTATION=dawn "$py" -c "import rlx_gpu; d = rlx_gpu.get_device(); print('run.sh: Dawn finds', d.name)" \
    2>&1 | grep -v "artificially reduced" | tail -1
  return "${PIPESTATUS[0]}"
}
dawn_ready() {
  local why
  why=$(dawn_probe) && { echo "$why" >&2; return 0; }
  if [ "$(id -u)" = 0 ] && grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release && command -v apt-get >/dev/null; then
    echo "run.sh: Dawn finds no adapter ($why); installing Mesa 25 from bookworm-backports" >&2
    echo "deb http://deb.debian.org/debian bookworm-backports main" > /etc/apt/sources.list.d/backports.list
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports \
      mesa-vulkan-drivers >/dev/null
    why=$(dawn_probe) && { echo "$why" >&2; return 0; }
  fi
  echo "run.sh: SKIPPING the Dawn run: Dawn finds no adapter here ($why). Dawn needs a Vulkan/Metal/D3D12" \
       "driver it accepts (on Linux without a GPU: Mesa >= 25's lavapipe, e.g. Debian 12's bookworm-backports)" >&2
  return 1
}

case "$what" in
  demo) exec "$py" examples/train_spirals.py "$@" ;;
  test) "$venv/bin/rlx-gpu" check-shaders --validator all --quiet
        rc=0
        # pytest-xdist: one worker a core, at most 4 (each holds a device and torch: ~1 GB); RLX_GPU_TEST_WORKERS=0
        # runs the suite in this process; the tests marked serial (timing against a control: the soak) then run
        # alone, in one process
        workers=${RLX_GPU_TEST_WORKERS:-$(n=$(nproc 2>/dev/null || echo 1); echo $(( n < 4 ? n : 4 )))}
        suite() {  # suite IMPLEMENTATION MARKS [args]: both passes; pytest's 5 (nothing selected) only if both are
          local impl=$1 marks=$2 a=0 b=0; shift 2
          RLX_GPU_IMPLEMENTATION=$impl "$py" -m pytest -n "$workers" --dist worksteal -m "$marks not serial" "$@" || a=$?
          RLX_GPU_IMPLEMENTATION=$impl "$py" -m pytest -m "$marks serial" "$@" || b=$?
          if [ "$a" = 5 ] && [ "$b" = 5 ]; then return 5; fi
          for x in "$a" "$b"; do [ "$x" = 0 ] || [ "$x" = 5 ] || return "$x"; done
        }
        echo "run.sh: the test suite on wgpu-native ($workers workers)" >&2
        suite wgpu-native "" "$@" || rc=$?
        if [ -n "${RLX_GPU_REQUIRE_DAWN:-}" ] || dawn_ready; then  # (CI: a Dawn without adapter fails the run)
          echo "run.sh: the GPU tests on Dawn ($workers workers)" >&2
          suite dawn "gpu and" "$@" || rc=$?
        fi
        exit "$rc" ;;
  docs) "$py" -c "import mkdocs_gen_files, mkdocs_literate_nav, mkdocstrings_handlers.python, material" 2>/dev/null \
          || "$py" -m pip install -q -e ".[docs]"
        NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true "$venv/bin/mkdocs" build --strict "$@"
        echo "run.sh: the site is in site/: open $(pwd)/site/index.html" ;;
  lint) "$py" -c "import ruff" 2>/dev/null || "$py" -m pip install -q -e ".[check]"
        exec "$py" -m ruff check . "$@" ;;
esac
