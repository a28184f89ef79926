"""The C side as Python sees it: the build (the only place that runs the compiler), one cffi
loader, what the machine code says, and the environment's fingerprint.
"""
