"""Small single-purpose Gymnasium wrappers."""
