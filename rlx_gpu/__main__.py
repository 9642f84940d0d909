"""``python -m rlx_gpu``: the ``rlx-gpu`` command (:mod:`rlx_gpu.tools.cli`)."""
import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
