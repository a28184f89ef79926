# sectorbench: every target first sets up its own virtual environment (.venv) from nothing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SB     := $(BIN)/sectorbench

# The CI gate's scene: small enough for a CI job, large enough that samples are >= 10 ms.
GATE_RUN := run -n 300 -m 30000 --flags -O2 --repeat 15

.PHONY: run test lint wheel-check bench bench-article bench-aabr bench-scale bench-verify verify mutation baseline regress gate-selftest gate-power clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,plot]'
	touch $(STAMP)

## run: the default benchmark (all kernels, -O2 and -O2 -ffast-math, the article's N x M)
run: $(STAMP)
	$(SB) run

## test: the test suite on every core (correctness only; no timing assertions; C warnings are errors there)
##       The package's bytecode is written first: the suite starts ~300 Python processes (build
##       workers, CLI runs), and under PYTHONDONTWRITEBYTECODE each compiled the package again.
test: $(STAMP)
	$(BIN)/python -m compileall -q sectorbench > /dev/null
	$(BIN)/python -m pytest -n auto --durations=15

## lint: ruff's lint rules and format check (configured in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check sectorbench tests tools
	$(BIN)/ruff format --check sectorbench tests tools

## wheel-check: build the wheel, install it into a fresh environment, run it outside the checkout
wheel-check: $(STAMP)
	PYTHON=$(PYTHON) PIP=$(BIN)/pip bash tools/wheel-check.sh

# make bench's kernels: the article's SSE2 pair, the compiler's best scalar, the limit, the peers.
BENCH_KERNELS := sse2,sse2_nosqrt,bittrick,avx2_nosqrt,avx2_nosqrt_fma,avx512_nosqrt,avx512_nosqrt_b4,numpy,numba,numba_parallel

## bench: kernels at this CPU's limit: the default scene at -O3 -march=native and -O2, with the
##        numpy and numba peers, on 1 thread and all; cycles/test and % of the bound derived from
##        each kernel's machine code (llvm-mca); the JSON is saved under results/
bench: $(STAMP)
	$(SB) run --flags "-O3 -march=native" --flags -O2 --kernels $(BENCH_KERNELS) --threads 1 --threads all --repeat 7 --save

## bench-article: the article's experiment on this machine (its data, its call loop, its flag
##        pairs) and the flags x kernels matrix; both saved under results/
bench-article: $(STAMP)
	$(SB) compare --preset article --save
	$(SB) compare --save

## bench-aabr: the aabr crossover (BCS against scans and hill, 4 .. 1024 vertices, random and
##             coherent rotations) -> results/bench-aabr-<date>.json and .png
bench-aabr: $(STAMP)
	$(BIN)/python tools/bench_aabr.py

## bench-scale: game scale: broadphases vs brute force vs kdtree, 10k x 1M with peak
##              memory, scaling in N, M and cone size; saved as results/bench-scale-<UTC>.json
bench-scale: $(STAMP)
	$(BIN)/python tools/bench_scale.py

## bench-verify: verify --cases 1000000 on 1 and 2 local processes (interleaved rounds): the speedup
##               and cases per second per core -> results/bench-verify-<UTC>.json (docs/verify.md)
bench-verify: $(STAMP)
	$(BIN)/python tools/bench_verify.py

## verify: every default kernel of both families against the exact oracle
verify: $(STAMP)
	$(SB) verify --flags -O2 --flags "-O2 -ffast-math"
	$(SB) verify --family triangle --flags -O2 --flags "-O2 -ffast-math"
	$(SB) verify --family aabr --flags -O2 --flags "-O2 -ffast-math"

## mutation: verify's mutation score on tests/data's mutants (all caught) and correct variants (all pass)
mutation: $(STAMP)
	$(BIN)/python tools/mutation.py

## baseline: record the timing baseline the gate compares against
baseline: $(STAMP)
	$(SB) $(GATE_RUN) --json results/baseline.json --force

## regress: run again and gate against the committed baseline (machine-independent ratios)
regress: $(STAMP)
	$(SB) $(GATE_RUN) --baseline results/baseline.json --normalize overhead --markdown results/regress.md --force

## gate-selftest: the gate catches -O0 against -O2 and stays quiet on identical builds, 5 times
gate-selftest: $(STAMP)
	SB=$(SB) bash tools/gate-selftest.sh

## gate-power: with a CPU hog on every core, the same-job A/B gate on a kernel made slower by a
##             little added work (10 trials), on identical code (10 trials), and the instruction
##             gate on the same change (10 trials) -> results/gate-power-<UTC>.json (a benchmark)
gate-power: $(STAMP)
	$(BIN)/python tools/gate_power.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
	find sectorbench tests tools -name __pycache__ -type d -prune -exec rm -rf {} +
