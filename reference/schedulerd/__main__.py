"""`python -m reference.schedulerd`: the scheduler process."""

from reference.schedulerd.main import main

main()
