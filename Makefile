# Each target creates and uses .venv by itself, from a bare Python >= 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
TF     := $(VENV)/.installed-tf
# setuptools' editable install warns that a folder named like a package may shadow it: here
# the folders are the packages (flat layout), so the note says nothing; keep it off the output
QUIET_BUILD := PYTHONWARNINGS=ignore::UserWarning

.PHONY: demo test test-slow lint bench validate validate-published validate-llm plan-check schema tour-plot screenshots clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "trainscale needs Python >= 3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(QUIET_BUILD) $(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,bench]'
	touch $@

# run-real and its tests need TensorFlow (CPU build here; see pyproject's tf-gpu extra),
# and pyspark for real.engine: spark (with a Java runtime: .ci/run installs one)
$(TF): $(STAMP)
	$(QUIET_BUILD) $(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,bench,tf-cpu,spark]'
	touch $@

demo: $(STAMP)
	$(BIN)/simulate scenarios/library/resnet50-v100-scaling.yaml

# the default run (and CI, .ci/run) leaves out the tests marked slow: the longest real
# runs and the largest Keras builds, about 10 minutes, run by `make test-slow`. The
# tests that start no TensorFlow process run on every core (pytest-xdist); those marked
# real run one at a time, as their timings assume a machine of their own
test: $(TF)
	$(BIN)/python -m pytest -q -m "not slow and not real" -n auto
	$(BIN)/python -m pytest -q -m "not slow and real"

test-slow: $(TF)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check trainscale sim scenarios real reports results commands workloads measured engines costing planner tests tools
	$(BIN)/mypy
	$(BIN)/lint-imports

# how fast simulate is at scale (minutes; not in CI): tests/benchmarks/results.jsonl and
# docs/performance.md; `$(BIN)/python tools/bench.py --help` for one case at a time
bench: $(STAMP)
	$(BIN)/python tools/bench.py

# the README tour's plot: docs/img/parameter-servers-vs-ring.png (seconds)
tour-plot: $(STAMP)
	$(BIN)/python tools/tour_plot.py

# the plan's and the report's pages as a person sees them, for docs/planning.md and
# docs/reports.md: docs/img/plan-*.png and report-*.png (a minute; needs Chromium)
screenshots: $(STAMP)
	$(BIN)/python tools/screenshots.py

# the simulator against real runs on this machine (minutes; not in CI): docs/validation.md
validate: $(TF)
	$(BIN)/python tools/validate.py

# the simulator against published GPU-cluster measurements, catalog alone (minutes, CPU):
# docs/validation-published.md
validate-published: $(STAMP)
	$(BIN)/python tools/validate_published.py

# the transformer layouts against published training runs (seconds, CPU):
# docs/validation-llm.md
validate-llm: $(STAMP)
	$(BIN)/python tools/validate_published.py --llm

# a plan against this machine: calibrate for its candidates, plan, run its first five with
# run-real and check the plan's order (minutes; docs/planning.md). PLAN and ARGS choose:
# make plan-check PLAN=scenarios/plans/digits-mlp.yaml ARGS="--repeats 4 --out runs/plan-check"
PLAN ?= scenarios/plans/digits-mlp.yaml
ARGS ?= --repeats 4 --out runs/plan-check
plan-check: $(TF)
	$(BIN)/python tools/plan_check.py $(PLAN) $(ARGS)

schema: $(STAMP)
	$(BIN)/python -m scenarios.schema > scenarios/.schema.json.tmp
	mv scenarios/.schema.json.tmp scenarios/schema.json

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache *.egg-info
