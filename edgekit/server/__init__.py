"""KServe v2 / Open Inference Protocol server with dynamic batching, metrics and report collection."""
