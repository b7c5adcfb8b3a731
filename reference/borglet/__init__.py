"""The borglet: runs, isolates, restarts and reports the tasks of one machine."""
