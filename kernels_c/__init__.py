"""The C sources of the kernels, shipped as package data (build.py reads them from here)."""
