"""On-device latency benchmarks: harness, statistics, device fingerprint, reports, comparison."""
