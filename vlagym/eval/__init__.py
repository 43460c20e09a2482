"""Success-rate evaluation."""
