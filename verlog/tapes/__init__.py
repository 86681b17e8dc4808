"""Episode tapes: the per-turn record (record.py) and what training, evaluation and play tape."""
