"""A task that is slow to stop: it ignores SIGTERM for $SLOWSTOP_S seconds (default 2) before exiting."""
