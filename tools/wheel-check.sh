#!/usr/bin/env bash
# The package works as users install it: build the wheel, install it into a fresh virtual
# environment (its dependencies from the package index), and run it from a directory
# outside the checkout, where nothing of the checkout is on the path.
#   PYTHON: the interpreter for the fresh environment; PIP: the pip that builds the wheel.
set -euo pipefail
PYTHON=${PYTHON:-python3}
PIP=${PIP:-$PYTHON -m pip}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sectorbench-wheel-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# From a clean copy of the tree: setuptools reuses a checkout's build/lib, where files of
# an earlier build would hide a package missing from pyproject.toml.
mkdir "$work/src"
tar -C "$root" --exclude=./.venv --exclude=./build --exclude=./.git --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=./results -cf - . | tar -C "$work/src" -xf -
$PIP wheel "$work/src" --no-deps --quiet -w "$work/dist"
wheel=$(ls "$work"/dist/sectorbench-*.whl)
for member in sectorbench/kernels_c/harness/sb_abi.h sectorbench/kernels_c/harness/registry.c sectorbench/kernels_c/sector/abi.h sectorbench/cli/app.py \
    $(cd "$root" && find sectorbench -name __init__.py); do
    "$PYTHON" -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' \
        "$wheel" "$member" || { echo "wheel-check: $member is not in $(basename "$wheel")"; exit 1; }
done
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$wheel"

mkdir "$work/elsewhere" && cd "$work/elsewhere"
export SECTORBENCH_CACHE="$work/cache"
unset PYTHONPATH SECTORBENCH_FAMILIES
sb="$work/venv/bin/sectorbench"
where=$("$work/venv/bin/python" -c 'import sectorbench; print(sectorbench.__file__)')
case "$where" in
    "$work"/venv/*) ;;
    *) echo "wheel-check: sectorbench was imported from $where, not from the wheel"; exit 1 ;;
esac
"$sb" kernels > kernels.txt
grep -q sse2_nosqrt kernels.txt || { cat kernels.txt; echo "wheel-check: kernels lists no sse2_nosqrt"; exit 1; }
"$sb" run -n 20 -m 500 --flags -O2 --repeat 2 --min-time 0.001 --save > run.txt
saved=(results/run-*.json)
[ -f "${saved[0]}" ] || { echo "wheel-check: run --save wrote nothing under ./results"; exit 1; }
echo "wheel-check: $(basename "$wheel") installs and runs outside the checkout ($((SECONDS - start)) s)"
