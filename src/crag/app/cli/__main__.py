"""`python -m crag.app.cli`: the `crag` command."""

import sys

from crag.app.cli import main

if __name__ == "__main__":  # imported (a test importing every module), it runs nothing
    sys.exit(main())
