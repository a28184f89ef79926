"""The one cffi loader: the C interface every build's library is loaded through, in a worker
(measure/server.py) and in the query API's process alike."""

from __future__ import annotations

from functools import cache


@cache
def _parsed(cdef: str):
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi


def interface():
    """The C interface (cffi, from the headers as they are now): parsed once a process, and
    once for every worker by the fork server (measure/forkserver.py)."""
    from .build import cdef_source  # here, not above: a worker's start imports only what it uses

    return _parsed(cdef_source())
