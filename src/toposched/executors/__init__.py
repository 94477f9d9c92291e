"""Executors: what actually runs a job's workers (`local`: processes on this machine)."""

# Nothing is imported here: `python -m toposched.executors.supervisor` imports this package first,
# and a package that imported the supervisor module would make runpy warn into every worker log.
