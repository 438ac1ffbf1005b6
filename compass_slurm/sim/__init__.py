"""The trace-driven simulator: workloads in, the same Scheduler and policies as the daemon, metrics out."""
