"""The ``rlx-gpu`` command: ``rlx-gpu bench ...`` and ``rlx-gpu check-shaders ...`` (each with ``--help``)."""
import sys

COMMANDS = {"bench": "rlx_gpu.bench", "check-shaders": "rlx_gpu.check"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: rlx-gpu {{{','.join(COMMANDS)}}} [args]   (rlx-gpu <command> --help for more)", file=sys.stderr)
        return 2
    import importlib
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
