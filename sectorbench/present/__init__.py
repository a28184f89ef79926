"""Tables (built, never printed) and plots."""
