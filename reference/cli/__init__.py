"""The `minborg` command line. `fast` is the entry point: it answers the everyday commands with the
standard library alone (`http`, `views`, `help`, `complete`, `plain`) and hands every other command
to `app`, the full typer command line, whose command groups live in `jobs`, `lifecycle` (cell, image), `allocs`, `quotas`,
`users`, `faux`, `watch` and `demo`. Nothing is imported here, so the fast path stays fast."""
