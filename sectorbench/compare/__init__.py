"""Comparing measurements: statistics, the regression gate (baseline, same-job A/B,
instruction counts) and exports to the formats CI dashboards read.
"""
