"""`python -m reference.master`: run one master replica."""

from reference.master.cli import main

main()
