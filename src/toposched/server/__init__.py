"""The standalone server: a wall-clock driver of the scheduler core, with a store and REST API."""
