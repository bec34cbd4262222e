# Two commands do all set-up on a fresh Debian machine (Python 3.11, root):
#   make serve   - install into .venv and run the gateway on ./data with the shipped rules
#   make test    - install into .venv (+ the Debian packages the e2e tests run) and run every test (CI: .ci/run)
#   make test-fast - the tests that start no real process (tests/lanes.py), in a minute or two
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
# Only relabel rules go to --rules.file; rules/alerts/ is Prometheus rule files for a ruler (vmalert, Prometheus).
RULES   := $(wildcard rules/relabel/*.yml)
ARGS    ?=

.PHONY: serve test test-fast install bytecode debs bench clean

$(BIN)/metricsgw: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

install: $(BIN)/metricsgw

# Every process of the gateway imports ~150 modules at each start; where PYTHONDONTWRITEBYTECODE is set (containers,
# CI images) nothing caches their bytecode and each start compiles them again (~0.1 s of CPU a process). Compiled
# here once, as pip does for an installed wheel; a changed source is still compiled again, in memory.
bytecode: install
	$(BIN)/python -m compileall -q -j 0 metricsgw testkit bench >/dev/null

# jemalloc gives freed memory back where glibc's arenas keep it (--server.allocator); the gateway runs without it too
serve: bytecode
	@[ -e /usr/share/doc/libjemalloc2/copyright ] || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libjemalloc2) || echo "libjemalloc2 not installed: running on glibc's allocator"
	$(BIN)/metricsgw serve --storage.path=./data $(addprefix --rules.file=,$(RULES)) $(ARGS)

# The real servers and clients the end-to-end tests and bench/ run (package: one binary it installs).
DEB_PACKAGES := prometheus:/usr/bin/prometheus \
                prometheus-node-exporter:/usr/bin/prometheus-node-exporter \
                prometheus-alertmanager:/usr/bin/prometheus-alertmanager \
                victoria-metrics:/usr/bin/vmalert \
                openssl:/usr/bin/openssl \
                libjemalloc2:/usr/share/doc/libjemalloc2/copyright \
                chromium:/usr/bin/chromium
MISSING_DEBS = $(strip $(foreach p,$(DEB_PACKAGES),$(if $(wildcard $(lastword $(subst :, ,$(p)))),,$(firstword $(subst :, ,$(p))))))

debs:
	@missing="$(MISSING_DEBS)"; [ -z "$$missing" ] || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing)

test: bytecode debs
	$(BIN)/pytest -q $(ARGS)

# No debs: the tests that run Prometheus, vmalert, promtool... are the e2e ones this lane leaves out.
test-fast: bytecode
	$(BIN)/pytest -q -m "not e2e" $(ARGS)

bench: bytecode debs
	$(BIN)/python -m bench.ingest $(ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache
