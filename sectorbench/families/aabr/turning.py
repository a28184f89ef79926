"""Turning sectors: the box of a sector of fixed (r, theta) whose facing angle phi turns,
looked up by facing angle — the BCS idea for a sector ("Turning sectors" in docs/findings/2026-11-21-aabr.md).

A sector has its apex at 0, radius r, half-angle theta and faces phi; r, theta and phi
are float32 values, and the ideal sector is defined by them.  Its tight box is the box
of the apex, the arc ends E1 = r (cos(phi - theta), sin(phi - theta)) and E2 = r (cos(phi
+ theta), sin(phi + theta)), and each axis point (+-r, 0), (0, +-r) whose direction is
strictly inside (phi - theta, phi + theta).

The table (build_table, once per theta, in double): the facing angles where a side's
candidate changes — alpha +- theta (an axis point enters or leaves), alpha + pi (E1 and
E2 swap) and alpha +- theta +- pi/2 (an arc end crosses the apex), for the four axis
directions alpha — rounded to float32 keys; each record's codes (0 apex, 1 E1, 2 E2,
3 the side's axis point) are taken at its interval's midpoint.  At run time (lookup_box,
float32 as the C kernels compute: ct = fl(cos theta), st = fl(sin theta), ux = fl(cos
phi), uy = fl(sin phi)): binary search on phi, then only the 4 coded candidates.

Rounding can only make the box larger if every side moves outward by PAD_LOOKUP * r:
each arc-end coordinate carries <= 5 r 2^-24 of rounding, and a key rounded by <= 2^-22
rad may pick a neighbouring candidate, which (all candidates being r-Lipschitz in phi and
equal at the breakpoint) costs <= 8 r 2^-24 more; r 2^-20 = 16 units covers both (the
prototype measured that r 2^-21 is not enough for the lookup: /work/proto/bcs/REPORT.md,
section 6).  The direct computation (direct_box) needs PAD_DIRECT.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
TWO_PI = 2 * np.pi
AXES = np.array([0.0, np.pi / 2, np.pi, 1.5 * np.pi])  # +x, +y, -x, -y
#: Outward pads, as multiples of r (exact powers of two): see the module's docstring.
PAD_LOOKUP = 2.0**-20
PAD_DIRECT = 2.0**-21
#: A side "contains" the ideal box only if it lies at least this far (times r) outside the
#: float64 ideal box, whose error is about 2^-52 r: a sound containment test.
SLACK = 2.0**-48


def build_table(theta) -> tuple[np.ndarray, np.ndarray]:
    """float32 keys (key[0] = 0, ascending, then +inf) and uint8 codes (records x 4)."""
    th = float(theta)
    offsets = (th, -th, 0.0, np.pi, th + np.pi / 2, th - np.pi / 2, -th + np.pi / 2, -th - np.pi / 2)
    breaks = np.unique([(a + o) % TWO_PI for a in AXES for o in offsets])
    keys = np.unique(np.concatenate([[0.0], breaks]).astype(F32))
    keys = keys[keys.astype(np.float64) < TWO_PI]
    ends = np.concatenate([keys.astype(np.float64), [TWO_PI]])
    codes = np.zeros((len(keys), 4), np.uint8)
    for i, phi in enumerate((ends[:-1] + ends[1:]) / 2):
        candidates = np.array([[0.0, 0.0], [np.cos(phi - th), np.sin(phi - th)], [np.cos(phi + th), np.sin(phi + th)]])
        for k in range(4):
            direction = np.array([np.cos(AXES[k]), np.sin(AXES[k])]).round()
            inside = abs((AXES[k] - phi + np.pi) % TWO_PI - np.pi) < th
            codes[i, k] = 3 if inside else int(np.argmax(candidates @ direction))
    return np.concatenate([keys, [np.inf]]).astype(F32), codes


def kernel_inputs(phi):
    """phi as float32 and its float32 cos and sin (computed in double)."""
    phi = np.asarray(phi, F32)
    return phi, np.cos(phi.astype(np.float64)).astype(F32), np.sin(phi.astype(np.float64)).astype(F32)


def _ends(r, ct, st, ux, uy):
    """E1, E2 in float32, each operation rounded as the C code rounds it (no FMA)."""
    e1x, e1y = r * (ux * ct + uy * st), r * (uy * ct - ux * st)
    e2x, e2y = r * (ux * ct - uy * st), r * (uy * ct + ux * st)
    return e1x, e1y, e2x, e2y


def lookup_box(keys, codes, r, theta, phi):
    """(maxX, maxY, minX, minY) per facing angle: record by binary search, 4 candidates."""
    r, theta = F32(r), F32(theta)
    ct, st = F32(np.cos(float(theta))), F32(np.sin(float(theta)))
    phi, ux, uy = kernel_inputs(phi)
    record = np.searchsorted(keys, phi, side="right") - 1  # last key <= phi
    e1x, e1y, e2x, e2y = _ends(r, ct, st, ux, uy)
    zero = np.zeros_like(e1x)
    pad = F32(float(r) * PAD_LOOKUP)
    sides = []
    for k, (ex1, ex2, axis) in enumerate(((e1x, e2x, r), (e1y, e2y, r), (e1x, e2x, -r), (e1y, e2y, -r))):
        choice = np.stack([zero, ex1, ex2, np.full_like(e1x, axis)])[codes[record, k], np.arange(len(phi))]
        sides.append(choice + pad if k < 2 else choice - pad)
    return np.stack(sides, axis=1).astype(F32)


def direct_box(r, theta, phi):
    """The box computed directly in float32: arc ends, four axis tests u.axis > ct."""
    r, theta = F32(r), F32(theta)
    ct, st = F32(np.cos(float(theta))), F32(np.sin(float(theta)))
    phi, ux, uy = kernel_inputs(phi)
    e1x, e1y, e2x, e2y = _ends(r, ct, st, ux, uy)
    zero = F32(0)
    mx, my = np.maximum(np.maximum(e1x, e2x), zero), np.maximum(np.maximum(e1y, e2y), zero)
    nx, ny = np.minimum(np.minimum(e1x, e2x), zero), np.minimum(np.minimum(e1y, e2y), zero)
    mx, my = np.where(ux > ct, r, mx), np.where(uy > ct, r, my)
    nx, ny = np.where(-ux > ct, -r, nx), np.where(-uy > ct, -r, ny)
    pad = F32(float(r) * PAD_DIRECT)
    return np.stack([mx + pad, my + pad, nx - pad, ny - pad], axis=1).astype(F32)


def tight_box(r, theta, phi):
    """The ideal sector's tight box in float64 (error about 2^-52 r)."""
    r, th = float(r), float(theta)
    ph = np.asarray(phi, F32).astype(np.float64)
    e1, e2 = ph - th, ph + th  # exact in double for float32 inputs
    x1, y1, x2, y2 = r * np.cos(e1), r * np.sin(e1), r * np.cos(e2), r * np.sin(e2)
    mx, my = np.maximum(0.0, np.maximum(x1, x2)), np.maximum(0.0, np.maximum(y1, y2))
    nx, ny = np.minimum(0.0, np.minimum(x1, x2)), np.minimum(0.0, np.minimum(y1, y2))
    inside = np.abs((AXES[:, None] - ph[None, :] + np.pi) % TWO_PI - np.pi) < th
    mx, my = np.where(inside[0], r, mx), np.where(inside[1], r, my)
    nx, ny = np.where(inside[2], -r, nx), np.where(inside[3], -r, ny)
    return np.stack([mx, my, nx, ny], axis=1)


def excess(box, r, theta, phi) -> np.ndarray:
    """How far each side lies outside the tight box, in units of r 2^-24 (negative: the
    box cuts the sector)."""
    outward = np.array([1.0, 1.0, -1.0, -1.0])
    return (box.astype(np.float64) - tight_box(r, theta, phi)) * outward / (float(r) * 2.0**-24)


def contains(box, r, theta, phi) -> np.ndarray:
    """Per side: the box contains the sector, soundly (by more than SLACK r)."""
    return excess(box, r, theta, phi) > SLACK * 2.0**24


def cuts(box, r, theta, phi) -> np.ndarray:
    """Per side: the box surely cuts the sector (lies inside by more than SLACK r)."""
    return excess(box, r, theta, phi) < -SLACK * 2.0**24
