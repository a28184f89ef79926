"""Values: scenes and their layout, case sets, kernel records, results and row keys.

Imports nothing of sectorbench's but other model modules and errors (SectorbenchError, the bottom
of the graph), and nothing outside numpy and the standard library (tests/test_architecture.py).
"""
