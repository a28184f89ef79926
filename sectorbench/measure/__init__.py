"""Timing: scenes -> builds -> workers -> rounds.

The TimedLoop protocol (a C row, a Python peer and a broadphase alike), the worker (parent
side) and its server (the worker process), typed requests and replies, and the one splitter
of shapes among threads.
"""
