"""The simulator: a discrete-event engine, trace readers, workload generator and metrics."""
