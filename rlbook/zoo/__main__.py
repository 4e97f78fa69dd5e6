"""Command line for the zoo: ``python -m rlbook.zoo {list,build,eval} ...`` (the same as ``rlbook zoo ...``;
its parser and its work are ``rlbook.cli.prepare_zoo``)."""

from __future__ import annotations

import sys

from rlbook.cli import prepare_zoo, run_prepared


def main(argv: list[str] | None = None) -> int:
    """``python -m rlbook.zoo ...``: a mistake in the arguments exits with status 2 and one line on stderr."""
    return run_prepared("python -m rlbook.zoo", prepare_zoo, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
