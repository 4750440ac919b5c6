"""Hand a package to other serving systems (Triton model repository, KServe InferenceService)."""
