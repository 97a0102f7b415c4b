"""The operator surface: the `pipedeck` command line (and later the console)."""
