# Attention, from kernels to Transformers -- the two commands:
#   make book   set up, then build the rendered book (_build/html/index.html)
#   make test   set up, then run every test (unit, notebooks, grader, book build, browser)

PYTHON     ?= python3
VENV       ?= .venv
BIN        := $(VENV)/bin
# A loose range, the same for users and CI; set TORCH_SPEC to pin one (e.g. torch==2.13.0).
TORCH_SPEC ?= torch>=2.2
STAMP      := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: book instructor-book test setup web-assets browser lint strip bench gpu-check claims clean help

help:
	@echo "make book   - set up .venv and build the book into _build/html (Chinese: _build/html/zh_CN)"
	@echo "make test   - set up .venv and run every test"
	@echo "make instructor-book - the instructor's edition (solutions) in _build/instructor"
	@echo "make lint   - ruff over the package, tests and notebooks"
	@echo "make bench  - run the benchmarks (print ratios measured in one run, write JSON)"
	@echo "make gpu-check - on a CUDA machine: gpu tests, grading and every chapter on the GPU"
	@echo "make claims - execute the chapters and print every reading of the text (SEED_BASE=, THREADS=)"
	@echo "make clean  - remove the built book (keeps the execution cache)"

setup: $(STAMP) web-assets browser

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[book,dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (attention-course)" >/dev/null
	@touch $(STAMP)

web-assets:
	@bash scripts/fetch_web_assets.sh

browser:
	@bash scripts/install_browser.sh

# The English edition, then the Chinese one from the same sources and execution cache.
book: setup
	$(BIN)/jupyter-book build . -W --keep-going
	$(BIN)/python scripts/i18n.py build
	@$(BIN)/python scripts/check_claims.py --built
	@echo ""
	@echo "The book is at: $(CURDIR)/_build/html/index.html"
	@echo "中文版: $(CURDIR)/_build/html/zh_CN/index.html"

instructor-book: setup
	$(BIN)/python scripts/instructor_book.py

# The chapters run once, in the -W book build (tests/test_book_build.py); nbval runs the
# exercise notebooks, learner and solution versions.
test: setup
	$(BIN)/python -m pytest tests exercises --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=900 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check attention_course tests benchmarks scripts book exercises conftest.py

strip: $(STAMP)
	$(BIN)/python scripts/strip_outputs.py book exercises

bench: $(STAMP)
	$(BIN)/python benchmarks/attention_bench.py
	$(BIN)/python benchmarks/efficient_bench.py
	$(BIN)/python benchmarks/decoding_bench.py
	$(BIN)/python benchmarks/grading_bench.py

# Every reading the chapters' text makes, checked in a fresh run: e.g.
# make claims SEED_BASE=100 THREADS=4 PAGES="4 9"
claims: $(STAMP)
	$(BIN)/python scripts/check_claims.py $(PAGES) \
		$(if $(SEED_BASE),--seed-base $(SEED_BASE)) $(if $(THREADS),--threads $(THREADS))

gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py

clean:
	$(BIN)/jupyter-book clean . || rm -rf _build/html
