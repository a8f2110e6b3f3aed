"""tt-mlir through the TT PJRT plugin in compile-only mode: stages, system descriptors, artifacts."""
