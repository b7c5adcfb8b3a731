"""`python -m harness`: run the conformance suite."""

import sys

from harness.cli import main

sys.exit(main())
