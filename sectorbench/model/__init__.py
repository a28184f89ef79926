"""Values: scenes and their layout, case sets, kernel records, results and row keys.

Imports nothing of sectorbench's but other model modules, and nothing outside numpy and the standard library.
"""
