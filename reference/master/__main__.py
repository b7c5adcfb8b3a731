"""`python -m reference.master`: run one master replica."""

from reference.master.cli import main

if __name__ == "__main__":  # not when a spawned child (the lease keeper) imports it
    main()
