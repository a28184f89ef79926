# sectorbench: every target sets up its own virtual environment first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SB     := $(BIN)/sectorbench

.PHONY: run test bench verify clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

## run: the default benchmark (all kernels, -O2 and -O2 -ffast-math, the article's N x M)
run: $(STAMP)
	$(SB) run

## test: the test suite (correctness only, a few minutes)
test: $(STAMP)
	$(BIN)/python -m pytest

## bench: the article's scene and loop mode, both flag sets, saved under results/
bench: $(STAMP)
	$(SB) run --scene article --mode inline --mode call --repeat 7 --save

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
