# k8s-event-bridge: `make demo` shows it work, `make test` runs every test (CI calls it).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo demo-cluster test quick lint docs unit integration e2e control-plane bench bench-otlp soak model fuzz clean

# The venv from the lock (requirements/, `make lock`): the locked build tools, the locked test
# set (every file checked against its hash), then the local packages, editable, with nothing
# more (--no-deps, built by the locked setuptools); pip check fails if the lock misses something
# they need. A changed lock or pyproject reinstalls.
LOCKS := requirements/build.txt requirements/runtime.txt requirements/test.txt
$(BIN)/.installed: pyproject.toml consumer/pyproject.toml common/pyproject.toml sim/pyproject.toml $(LOCKS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements/build.txt
	$(BIN)/pip install --quiet --require-hashes -r requirements/test.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e ./common -e . -e ./consumer -e ./sim
	$(BIN)/pip check
	touch $@

# Compile the lock files again after a change of dependencies in a pyproject (tests/unit/
# test_lock.py fails until then): one universal resolution (Linux x86_64 and arm64, CPython
# 3.11+) with every file's hash, by a pinned uv. Pins still allowed are kept; to move them all
# to the newest, make lock LOCK_ARGS=--upgrade (or --upgrade-package NAME).
# runtime.txt: what the image runs, the bridge and consumer[all]. test.txt: that, at the same
# versions, plus the bridge's test extra and the simulator's (sim/) dependencies (CI). build.txt:
# pip and setuptools.
.PHONY: lock
UV_VERSION := 0.13.9
UV_COMPILE  = $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
              --custom-compile-command 'make lock' --no-emit-package k8s-event-bridge-common \
              --no-emit-package k8s-event-bridge \
              $(LOCK_ARGS)
lock:
	test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet 'uv==$(UV_VERSION)'
	$(UV_COMPILE) requirements/build.in -o requirements/build.txt
	$(UV_COMPILE) pyproject.toml consumer/pyproject.toml common/pyproject.toml --extra all \
	  -o requirements/runtime.txt
	$(UV_COMPILE) pyproject.toml consumer/pyproject.toml common/pyproject.toml sim/pyproject.toml \
	  --extra all --extra test \
	  -c requirements/runtime.txt -o requirements/test.txt

# the demo (sim/, k8s_event_sim.demo): make demo [DEMO_ARGS="--events 600 --quiet"]
demo: $(BIN)/.installed
	$(BIN)/k8s-event-bridge-demo $(DEMO_ARGS)

# the demo's show on a living cluster (docs/e2e.md): real scheduler, controller-manager and kwok
# write the Events. Needs the e2e binaries (make control-plane). make demo-cluster [K8S=oldest]
K8S ?= newest
demo-cluster: $(BIN)/.installed
	$(BIN)/python -m tests.e2e.demo_cluster --version $(K8S)

# build (once, cached outside the repo) what the e2e tier runs on, both Kubernetes versions (the
# newest with the living cluster and the node's kubelet and kube-proxy: docs/e2e.md), the Alertmanager the alerting subscriber's tests
# send to, the OpenTelemetry Collector the OTLP subscriber's tests send to, promtool (the alert
# rules' tests) and helm (the chart's), natsauth and the benchmark's Go reference (bench/goref)
control-plane:
	bash e2e/build-control-plane.sh --living --node newest
	bash e2e/build-control-plane.sh oldest
	bash e2e/build-alertmanager.sh
	bash e2e/build-otelcol.sh
	bash e2e/build-go-tool.sh promtool
	bash e2e/build-go-tool.sh helm
	bash e2e/build-go-tool.sh natsauth
	bash e2e/build-go-tool.sh goref

# the image the tests build and run (tools/image.py, docs/deploy.md "The image"): a Docker
# Engine of its own (Debian's docker.io, installed if missing) builds k8s-event-bridge:test on
# the official base, or on a STAND-IN from Debian's packages where that cannot be pulled
# (e2e/build-image-base.sh), saves it to ~/.cache/k8s-event-bridge/images/ and stops.
# make image [IMAGE_BASE=standin|<image>]
.PHONY: image
image: $(BIN)/.installed
	$(BIN)/python -m tools.image $(if $(IMAGE_BASE),--base $(IMAGE_BASE))

lint: $(BIN)/.installed
	$(BIN)/ruff format --check bridge common consumer sim tests tools fuzz soak bench
	$(BIN)/ruff check bridge common consumer sim tests tools fuzz soak bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m tools.configref --check
	$(BIN)/python -m tools.monitoring --check
	$(BIN)/python -m tools.natsperms --check
	$(BIN)/python -m tools.perftable --check

# the generated files: docs/configuration.md and config/*.yaml from the settings models, the
# dashboard, the PrometheusRule and the chart's copies of deploy/monitoring/, the NATS server
# config, the latest figures in docs/performance.md from bench/results/latest.json (lint checks them)
docs: $(BIN)/.installed
	$(BIN)/python -m tools.configref
	$(BIN)/python -m tools.monitoring
	$(BIN)/python -m tools.natsperms
	$(BIN)/python -m tools.perftable

# the fast loop: the linters and the unit tests that start no process (no Go build, no fuzzing:
# tests/unit/conftest.py fails an unmarked unit test that starts one), under 2 minutes
quick: lint
	$(BIN)/pytest -q tests/unit -m "not processes"

unit: $(BIN)/.installed
	$(BIN)/pytest tests/unit

integration: $(BIN)/.installed
	$(BIN)/pytest tests/integration

e2e: $(BIN)/.installed
	$(BIN)/pytest tests/e2e

# every check and every test (CI: .ci/run): lint and the tiers side by side, the Go builds in
# the background meanwhile, each tier started once what it runs is built (tools/testrun.py);
# ends with one line: N passed, N failed, N skipped. make test [TEST_ARGS="-x"]
test: $(BIN)/.installed
	$(BIN)/python -m tools.testrun

# the end-to-end benchmark (docs/performance.md): make bench [BENCH_ARGS="--quick"]
bench: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[bench,test]'
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# the OTLP subscriber's path side by side with the OpenTelemetry Collector's own k8s_events
# receiver on a real API server, through the same faults (docs/performance.md; needs the e2e
# binaries and otelcol, built and cached on first use): make bench-otlp [BENCH_ARGS="--quick"]
bench-otlp: $(BIN)/.installed
	$(BIN)/python -m bench.otlp $(BENCH_ARGS)

# the soak test (docs/soak.md): steady Events through a fault schedule, memory and every internal
# structure flat after warm-up, stream = truth; exits 1 on a failed check. CI runs 120 s of it
# (tests/integration/test_soak.py). make soak [SOAK_SECONDS=600] [SOAK_RATE=300]
SOAK_SECONDS ?= 600
SOAK_RATE    ?= 300
soak: $(BIN)/.installed
	$(BIN)/python -m soak.run --seconds $(SOAK_SECONDS) --rate $(SOAK_RATE)

# coverage-guided fuzzing of the decoders (fuzz/decoders.py); CI runs 15 s of it as a test
FUZZ_SECONDS ?= 300
fuzz: $(BIN)/.installed
	mkdir -p .fuzz-corpus && cp -n fuzz/corpus/* .fuzz-corpus/
	$(BIN)/python fuzz/decoders.py .fuzz-corpus -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048

# the Spin model of the delivery protocol, with the code's defaults (model/README.md)
model:
	command -v spin >/dev/null || (apt-get update -qq && apt-get install -y -qq spin gcc)
	cd model && ./run.sh S-base "" all && ./run.sh S-c2 "-DMAXCRASH=2 -DMAXCOMP=2 -DFILT1 -DFINALC" all \
	  && ./run.sh S-all "-DNV=4 -DMAXCRASH=2 -DMAXCOMP=2 -DFILT1 -DFINALC" all \
	  && ./run.sh D-base "-DDEL" all && ./run.sh D-c2 "-DDEL -DMAXCRASH=2 -DMAXCOMP=2 -DFILT1 -DFINALC" all \
	  && ! ./run.sh D-old "-DDEL -DGAPRULE=0" - \
	  && ./run.sh H2-del "-DNR=2 -DDEL -DNV=2 -DFILT1 -DFINALC" all \
	  && ! ./run.sh H2-plain-mono "-DNR=2 -DCKPT=1" mono  # D-old, H2-plain-mono: must fail

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
