"""The `toposched` command line."""
