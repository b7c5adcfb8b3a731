"""Entry point for `python -m examples.batch`."""

import sys

from examples.batch.job import main

if __name__ == "__main__":
    sys.exit(main())
