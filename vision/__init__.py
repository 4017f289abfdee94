"""hardmix.vision: image encoders trained with MoCo-v2 / MoCHi (and any core strategy)."""
