"""A small HTTP service task: hello, health, metrics and an optional CPU cost per request."""
