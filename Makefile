# MCC: two commands set up a fresh machine: `make demo` and `make test`.
# The first run installs the Debian packages it needs, builds Cyclone DDS with Security, TCP and
# iceoryx into .venv/cyclone (about 3 minutes on 2 cores), builds cyclonedds-python and the bus's
# native core against it, and installs the rest from PyPI: about 6 minutes in all.
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
CYCLONE := $(abspath $(VENV))/cyclone
STAMP   := $(VENV)/.installed
NATIVE  := $(VENV)/.native
export CYCLONEDDS_HOME := $(CYCLONE)

.PHONY: demo test bench lint types clean interop interop-rti system wheels images

system:
	@native/system-packages.sh

$(STAMP): pyproject.toml setup.py native/Cargo.toml native/build-cyclone.sh $(wildcard native/patches/*.patch)
	@native/system-packages.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	native/build-cyclone.sh $(CYCLONE)
	# cyclonedds-python from source against that Cyclone: one Cyclone library per process
	LDFLAGS="-Wl,-rpath,$(CYCLONE)/lib" $(PY) -m pip install --quiet --no-cache-dir \
	    --force-reinstall --no-deps --no-binary cyclonedds cyclonedds==11.0.1
	$(PY) -m pip install --quiet -e '.[dev]'
	# Every Python of the venv loads that Cyclone, whatever it imports first.
	echo "import os; os.environ.setdefault('CYCLONEDDS_HOME', '$(CYCLONE)')" \
	    > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/mcc-cyclone.pth"
	touch $(STAMP)

$(NATIVE): $(STAMP) src/mcc/bus/_native.c src/mcc/tracking/_jpda.c src/mcc/tracking/_ekf.c \
    idl/mcc.idl
	$(PY) setup.py --quiet build_ext --inplace
	touch $(NATIVE)

demo: $(NATIVE)
	$(VENV)/bin/mcc demo

test: system $(NATIVE)
	$(PY) -m pytest $(PYTEST_ARGS)

# The wheels a host needs, into dist/ (docs/deploy.md, "Installing"): MCC, and cyclonedds-python
# with the Cyclone DDS of .venv/cyclone (Security, TCP, iceoryx, iox-roudi) inside it. 10 s.
wheels: $(STAMP)
	$(PY) native/build-wheels.py $(CYCLONE) dist

# The images of deploy/ (docs/deploy.md, "Containers"), from those wheels, on a Debian base image
# made here with mmdebstrap (no registry); podman's flags live in src/mcc/lab/podman.py.
images: system wheels
	$(PY) -m mcc.lab images --dist dist

bench: $(NATIVE)
	$(VENV)/bin/mcc bench all --net host,netns --json benchmarks/results/perftest.json --record

lint: $(NATIVE)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

types: $(NATIVE)
	$(PY) -m mcc.types.generate

# The foreign peers (docs/interop.md): Cyclone C, and Fast DDS 2.x with types from fastddsgen
# and glue from `python -m mcc.types.foreign`, both generated from the unedited idl/mcc.idl.
interop:
	cmake -S interop/c -B build/interop -DCMAKE_BUILD_TYPE=Release
	cmake --build build/interop
	cmake -S interop/fastdds -B build/interop-fastdds -DCMAKE_BUILD_TYPE=Release \
	    -DMCC_PYTHON=$(abspath $(PY))
	cmake --build build/interop-fastdds -j2

# RTI Connext through rticonnextdds-connector (proprietary licence: never a dependency of MCC).
# Install it yourself into the venv first: .venv/bin/pip install rticonnextdds-connector
interop-rti:
	$(PY) -m pytest -m rti tests/interop/test_rti.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache src/mcc/bus/_native.*.so \
	    src/mcc/tracking/_jpda.*.so src/mcc/tracking/_ekf.*.so
