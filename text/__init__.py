"""hardmix.text: sentence encoders trained with SimCSE / MixCSE (and any core strategy) on transformers."""
