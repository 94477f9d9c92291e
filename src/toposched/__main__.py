"""`python -m toposched` runs the command line."""

from toposched.cli.main import main

main()
