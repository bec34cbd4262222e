# Two commands do all set-up on a fresh Debian machine (Python 3.11, root):
#   make serve   - install into .venv and run the gateway on ./data with the shipped rules
#   make test    - install into .venv (+ Debian's prometheus for the e2e tests) and run every test
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
RULES   := $(wildcard rules/*.yml)
ARGS    ?=

.PHONY: serve test install bench clean

$(BIN)/metricsgw: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

install: $(BIN)/metricsgw

serve: install
	$(BIN)/metricsgw serve --storage.path=./data $(addprefix --rules.file=,$(RULES)) $(ARGS)

/usr/bin/prometheus:
	command -v prometheus >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus)

test: install /usr/bin/prometheus
	$(BIN)/pytest -q $(ARGS)

bench: install /usr/bin/prometheus
	$(BIN)/python -m bench.ingest $(ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache
