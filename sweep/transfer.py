"""``python -m sweep.transfer --study NAME``: does a study's front keep its order under serving load?

The command's home is the serving package (``sweep.serving``: what it boots, on what, resume, ``--dry-run``); this
module keeps its command line where it has always been."""

from __future__ import annotations

import sys

from sweep.serving import TransferArgs, main, parse_args

__all__ = ["TransferArgs", "main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
