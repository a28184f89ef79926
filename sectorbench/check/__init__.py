"""Correctness: verify (every kernel against the exact oracle, every loop as run calls it) and
the mutation score.
"""
