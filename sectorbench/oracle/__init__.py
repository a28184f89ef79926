"""Exact arithmetic shared by every family's oracle, and the independent Fraction reference."""
