"""``python -m accounting.acceptance OUTDIR``: the GPU acceptance run (see :mod:`accounting.acceptance.cli`)."""

import sys

from accounting.acceptance.cli import main

if __name__ == "__main__":
    sys.exit(main())
