"""`python -m irqlab` is the `irqlab` command (the tests use it to avoid PATH issues)."""

from irqlab.cli import main

main()
