"""`python -m reference.cli`: the full command line."""

from reference.cli.app import main

main()
