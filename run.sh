#!/usr/bin/env bash
# The two set-up-and-run commands of the README:
#   ./run.sh demo [args]   trains the spiral demo with a GPU optimizer (examples/train_spirals.py)
#   ./run.sh test [args]   checks every shipped shader (rlx-gpu check-shaders --validator all), then runs
#                          the test suite (pytest; GPU tests on whatever adapter is found)
#   ./run.sh docs [args]   builds the documentation site into site/ (mkdocs, warnings are errors; args to mkdocs)
# Each creates .venv (or $RLX_GPU_VENV) with the package installed, and where no Vulkan driver is
# present on Debian/Ubuntu and we are root, installs the CPU one (mesa-vulkan-drivers: llvmpipe).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in demo|test|docs) ;; *) echo "usage: ./run.sh demo|test|docs [args...]" >&2; exit 2 ;; esac

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
  "$venv/bin/python" -m pip install -q -e ".[test,check,examples]"
  touch "$stamp"
fi
py="$venv/bin/python"
case "$what" in
  demo) exec "$py" examples/train_spirals.py "$@" ;;
  test) "$venv/bin/rlx-gpu" check-shaders --validator all --quiet
        "$py" -m pytest "$@" ;;
  docs) "$py" -c "import mkdocs_gen_files, mkdocstrings_handlers.python, material" 2>/dev/null \
          || "$py" -m pip install -q -e ".[docs]"
        NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true "$venv/bin/mkdocs" build --strict "$@"
        echo "run.sh: the site is in site/: open $(pwd)/site/index.html" ;;
esac
