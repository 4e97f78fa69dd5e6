"""``python -m rlbook COMMAND ...``: the ``rlbook`` command line (``rlbook.cli``)."""

import sys

from rlbook.cli import main

if __name__ == "__main__":
    sys.exit(main())
