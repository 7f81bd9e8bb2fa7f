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

# Debian packages the build, the demo and the tests need.
DEB_PKGS := build-essential cmake pkg-config git curl ca-certificates \
            liblmdb-dev lmdb-utils libturbojpeg0-dev libpng-dev liburing-dev libxxhash-dev \
            libcriterion-dev libcurl4-openssl-dev \
            python3 python3-numpy python3-torch python3-torchvision python3-lmdb python3-pytest python3-venv \
            mate-backgrounds clang libclang-rt-dev clang-format-14 valgrind openssl libssl-dev

.PHONY: all deps build demo test install fuzz bench clean

all: build

# Install only what is missing, so a machine that has everything is not
# touched (and needs no root). Node is checked as a command: a NodeSource
# nodejs package carries npm itself and conflicts with Debian's npm package.
deps:
	@missing=$$(for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  if [ "$$(id -u)" != 0 ]; then echo "error: run as root (or install: $$missing)" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Warnings are errors for the developers' and CI's builds (make test), not for a user's.
# The tests are built when Criterion is there (AUTO); make test requires them.
WERROR ?= OFF
TESTS  ?= AUTO
test: WERROR = ON
test: TESTS = ON

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLCACHE_WERROR=$(WERROR) \
	      -DDLCACHE_TESTS=$(TESTS) >/dev/null
	cmake --build build -j $(JOBS)

demo: build
	bash tools/demo.sh

test: build
	bash tests/run_all.sh

# Debian's python3 reads /usr/lib/python3/dist-packages for packages of the
# system and /usr/local/lib/python3.X/dist-packages for local ones.
PYDIR = $(if $(filter /usr,$(PREFIX)),lib/python3/dist-packages,lib/python3.$(shell $(PY) -c 'import sys; print(sys.version_info[1])')/dist-packages)

install: build
	cmake -S . -B build -DDLCACHE_PYTHON_DIR=$(PYDIR) >/dev/null
	cmake --install build --prefix $(PREFIX)

fuzz: deps
	bash tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-*
