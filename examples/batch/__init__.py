"""A batch task that computes for a while and exits."""
