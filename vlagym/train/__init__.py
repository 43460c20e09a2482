"""Demonstrations, datasets and training."""
