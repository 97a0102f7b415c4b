"""`python -m pipedeck.console` runs the CLI (as the `pipedeck` script does)."""

from .cli import main

main()
