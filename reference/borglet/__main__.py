"""Entry point for `python -m reference.borglet`."""

from reference.borglet.cli import main

if __name__ == "__main__":
    main()
