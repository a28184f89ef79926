"""Write a seeded game scene's float32 columns as raw files DIR/<column>.f32 (for
tools/broadphase_phases.c).  Usage: python tools/dump_scene.py DIR N M [SEED]"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sectorbench.families import scene_kinds as scenes


def main() -> int:
    if len(sys.argv) not in (4, 5):
        print(__doc__.splitlines()[-1], file=sys.stderr)
        return 2
    out, n, m = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) == 5 else 1
    scene = scenes.generate("game", n, m, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("cx", "cy", "ux", "uy", "r2", "cos_theta"):
        np.ascontiguousarray(scene.column(name)[:n], dtype=np.float32).tofile(out / f"{name}.f32")
    for name in ("px", "py"):
        np.ascontiguousarray(scene.column(name)[:m], dtype=np.float32).tofile(out / f"{name}.f32")
    print(f"game {n} x {m}, seed {seed}: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
