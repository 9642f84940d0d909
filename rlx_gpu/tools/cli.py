"""The ``rlx-gpu`` command (also ``python -m rlx_gpu``): ``rlx-gpu <command> [args]``, ``rlx-gpu --help``,
``rlx-gpu --version``. Each command has its own ``--help``."""
import sys

# command: (module with main(argv), one line)
COMMANDS = {
    "info": ("rlx_gpu.tools.info", "adapters, the one chosen and why, limits, features, validators, versions"),
    "bench": ("rlx_gpu.tools.bench", "time every optimizer against the copy rate, torch and the NumPy twin"),
    "check-shaders": ("rlx_gpu.tools.check", "validate WGSL files (the package's or yours) with naga, wgpu and Tint"),
}


def describe(doc: str) -> str:
    """The first paragraph of a docstring as plain text on one line (reST ``double backticks`` dropped): what an
    ``argparse`` description of a script or command should say, never cut mid-sentence."""
    para = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(para.replace("``", "").split())


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: rlx-gpu <command> [args]     (rlx-gpu <command> --help for a command's options)", "",
             "commands:"]
    lines += [f"  {name:{width}s}  {line}" for name, (_, line) in COMMANDS.items()]
    lines += ["", "options:", "  -h, --help     this text", "  --version      rlx_gpu's version and its runtime's"]
    return "\n".join(lines)


def version() -> str:
    """``rlx-gpu <version> (<the implementation in use's parts and versions>)``, e.g. ``(wgpu-py 0.32.0,
    wgpu-native 29.0.1.1)`` or ``(wgpudawn 0.32.0.4, dawn 20261009.190412)``."""
    from .. import __version__
    from ..runtime import implementation
    try:
        parts = implementation.versions()
    except Exception:  # (the implementation is not installed: still say our own version, and why)
        return f"rlx-gpu {__version__} ({implementation.implementation()}: not installed)"
    return f"rlx-gpu {__version__} (" + ", ".join(f"{k} {v}" for k, v in parts.items()) + ")"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    from ..runtime import implementation
    try:
        implementation.implementation()  # (a bad RLX_GPU_IMPLEMENTATION: one clear line, for every command)
    except ValueError as e:
        print(f"rlx-gpu: {e}", file=sys.stderr)
        return 2
    if argv[0] == "--version":
        print(version())
        return 0
    if argv[0] not in COMMANDS:
        print(f"rlx-gpu: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    import importlib
    return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
