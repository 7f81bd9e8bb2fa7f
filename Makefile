# Two commands for a fresh Debian 12 machine, as root:
#   make demo   installs what is missing, builds, makes the demo data set,
#               builds the store, verifies it, loads it and prints throughput
#   make test   installs what is missing, builds, runs every test: unit tests,
#               again under ASan+UBSan, the loader's threading tests under
#               TSan, the end-to-end tests and the Python tests
# Everything else (build, install, fuzz, bench) is for developers.

SHELL := /bin/bash
JOBS  ?= $(shell nproc)
PY    ?= /usr/bin/python3
PREFIX ?= /usr/local

# Debian packages, by what asks for them. `make build` installs the build list
# only, and so does `make install` (and pip's `pip install .` needs no more:
# it reuses or builds the same library); `make demo` adds the demo list;
# `make test` adds the demo list (the tests make their images from the same
# photos) and the test list; `make fuzz` adds the fuzz list. `make deps`
# installs every list. `make deps-list` prints what each goal installs on a
# machine that has none of them, and what is missing on this one.
#
# build: a C compiler and make, CMake, pkg-config, and the libraries that
# CMakeLists.txt finds with pkg-config (all of them, in one place): LMDB,
# libjpeg-turbo, libpng, liburing, xxHash, libcurl, and OpenSSL's libcrypto
# (cachewarm's MD5s for ETags; libcurl4-openssl-dev does not pull it in).
BUILD_PKGS := build-essential cmake pkg-config \
              liblmdb-dev libturbojpeg0-dev libpng-dev liburing-dev libxxhash-dev \
              libcurl4-openssl-dev libssl-dev
# demo: the photographs mkdemo crops its images from
# (/usr/share/backgrounds/mate/nature) and Python for tools/demo.sh's report.
DEMO_PKGS := mate-backgrounds python3
# fuzz (tests/fuzz/run.sh, also a step of make test): clang with libFuzzer's
# runtime, and Python for tests/fuzz/make_seeds.sh.
FUZZ_PKGS := clang libclang-rt-dev python3
# docs (`make docs`, tools/docs.sh): Sphinx with MyST for the Markdown pages and Breathe for the
# C API from Doxygen's XML; the site's check in `make test` also renders every page in Chromium.
DOCS_PKGS := python3 python3-sphinx python3-myst-parser python3-breathe doxygen
# test (tests/run_all.sh and what it runs), beyond the demo, docs and fuzz lists:
#   libcriterion-dev     the C unit tests (CMake requires it with DLCACHE_TESTS=ON)
#   clang-format-14      tests/check_format.sh (the pinned version), with git ls-files
#   doxygen              tests/check_docs.sh: every public function, parameter and field documented
#   abigail-tools        tests/abi/check.sh (abidiff) and tests/abi/update.sh (abidw): the ABI
#   valgrind             tests/e2e/valgrind_tools.sh
#   lmdb-utils           mdb_stat in tests/e2e/store_foreign.sh
#   openssl              the certificates of tests/e2e/warm_gcs.sh and stream_gs_https.sh
#   curl ca-certificates tests/lib/warm.sh: curl uploads to s3rver; npm fetches it over https
#   python3-*            pytest and the Python tests; torch, torchvision, numpy, lmdb and
#                        PIL (tests/python, tests/e2e/*.py and build_gray.sh); venv with pip
#                        for tests/python/test_packaging.py
#   mypy                 tests/run_all.sh's types step over python/ and examples/
#   node and npm         s3rver for tests/e2e/warm_*.sh: checked as a command, since a
#                        NodeSource nodejs carries npm itself and conflicts with Debian's npm
#   chromium             the "site" step: every page of the documentation site rendered headless
#   slurm-wlm munge      tests/e2e/set_slurm.sh: docs/SETS.md's Slurm jobs on a one-node Slurm
#                        of its own (slurmctld, slurmd, munged, own config and key); their
#                        system services do not start without /etc/slurm/slurm.conf (a system
#                        munged may start, on its own socket, and is left alone)
TEST_PKGS := libcriterion-dev clang-format-14 doxygen abigail-tools git valgrind lmdb-utils openssl curl ca-certificates \
             python3 python3-pytest python3-venv python3-numpy python3-torch python3-torchvision \
             python3-pil python3-lmdb mypy slurm-wlm munge chromium $(FUZZ_PKGS) $(DOCS_PKGS)
# tokens (cachebuild --tokens --tokenizer): SentencePiece, optional at build like CUDA
# (cmake/spm.cmake builds libdlcache_spm.so where libsentencepiece-dev is found); spm_train and
# python3-sentencepiece train a tiny model and check the tokenization in the tests.
BUILD_PKGS += libsentencepiece-dev
TEST_PKGS += sentencepiece python3-sentencepiece

# $(call pkgs_for,GOALS): the packages those goals need, and "node" when they need npm.
pkgs_for = $(sort $(BUILD_PKGS) \
    $(if $(filter demo deps-demo deps,$1),$(DEMO_PKGS)) \
    $(if $(filter fuzz,$1),$(FUZZ_PKGS)) \
    $(if $(filter docs,$1),$(DOCS_PKGS)) \
    $(if $(filter test deps-test deps,$1),$(DEMO_PKGS) $(TEST_PKGS) node))
DEPS_PKGS := $(call pkgs_for,$(MAKECMDGOALS))

# missing_sh: shell code that sets $$missing to those of $(1) not installed here.
missing_sh = missing=$$(for p in $(filter-out node,$1); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	$(if $(filter node,$1),command -v npm >/dev/null || missing="$$missing nodejs npm";)

.PHONY: all packages deps deps-build deps-demo deps-test deps-list hooks build demo test docs install fuzz bench clean

all: build

# Install only what is missing, so a machine that has everything is not
# touched (and needs no root). `packages`, which build and fuzz run first,
# installs what the goals on the command line need (DEPS_PKGS), so `make test`
# installs once, before the build that needs Criterion.
packages deps deps-build deps-demo deps-test:
	@$(call missing_sh,$(DEPS_PKGS)) \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  if [ "$$(id -u)" != 0 ]; then echo "error: run as root (or install: $$missing)" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

deps-list:
	@$(foreach g,build demo test docs fuzz,\
	  echo "make $g installs on a bare Debian 12: $(patsubst node,nodejs npm,$(call pkgs_for,$g))"; \
	  $(call missing_sh,$(call pkgs_for,$g)) echo "  missing here:" $${missing:-nothing};)

# Warnings are errors for the developers' and CI's builds (make test), not for a user's.
# The tests are built when Criterion is there (AUTO); make test requires them.
WERROR ?= OFF
TESTS  ?= AUTO
test: WERROR = ON
test: TESTS = ON

# From a git checkout, the repository's hooks are .githooks/ (commit-msg: subjects of 72
# characters or fewer); set once, and never over a hooks path someone chose or over hooks
# already installed in the repository's own hooks folder (core.hooksPath would hide them).
hooks:
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -d .githooks ] && \
	    [ -z "$$(git config core.hooksPath)" ] && \
	    ! ls "$$(git rev-parse --git-common-dir)/hooks" 2>/dev/null | grep -qv '\.sample$$'; then \
	  git config core.hooksPath .githooks && echo "git: hooks from .githooks/ (core.hooksPath)"; \
	fi

build: packages hooks
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLCACHE_WERROR=$(WERROR) \
	      -DDLCACHE_TESTS=$(TESTS) >/dev/null
	cmake --build build -j $(JOBS)

# The demo builds what it runs (the library and the tools: no tests, whatever is installed) and
# sets nothing in git (the hooks are `make build`'s and `make test`'s): its output is a line per
# step and the summary; the build's own output goes to build/demo-build.log.
DEMO_TARGETS := dlcache cachebuild cacheinfo cachebench mkdemo
demo: packages
	@mkdir -p build
	@echo "== building the library and the tools (log: build/demo-build.log)"
	@{ cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLCACHE_WERROR=$(WERROR) && \
	   cmake --build build -j $(JOBS) --target $(DEMO_TARGETS); \
	 } >build/demo-build.log 2>&1 || { tail -n 30 build/demo-build.log; exit 1; }
	@bash tools/demo.sh

test: build
	bash tests/run_all.sh

# Debian's python3 reads /usr/lib/python3/dist-packages for packages of the
# system and /usr/local/lib/python3.X/dist-packages for local ones. Python is
# not in the build list: without it, X is Debian 12's 11.
PYDIR = $(if $(filter /usr,$(PREFIX)),lib/python3/dist-packages,lib/python3.$(shell $(PY) -c 'import sys; print(sys.version_info[1])' 2>/dev/null || echo 11)/dist-packages)

# The documentation site, build-docs/html (tools/docs.sh): the pages, the Python API from the
# docstrings (autodoc imports the package with the library just built), the C API from the headers.
docs: build
	bash tools/docs.sh

install: build
	cmake -S . -B build -DDLCACHE_PYTHON_DIR=$(PYDIR) >/dev/null
	cmake --install build --prefix $(PREFIX)

fuzz: packages
	bash tests/fuzz/run.sh $(FUZZ_SECONDS)

# The benchmarks that need no server and no GPU, on a small data set (tests/bench/run.sh says
# which; the other scripts of tests/bench/ say how to run them).
bench: build
	bash tests/bench/run.sh

clean:
	rm -rf build build-*
