"""Small shared utilities: atomic checkpoints, progress bars, config validation, RNG state."""
