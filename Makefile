# idem_keys. The two commands a newcomer needs: `make demo` and `make test`. Both install what is missing.
PG_CONFIG ?= /usr/bin/pg_config
PG_MAJOR  := $(shell $(PG_CONFIG) --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
PGXS_DIR   = $(shell $(PG_CONFIG) --pkglibdir)/pgxs/src/test
export PATH := $(HOME)/.cargo/bin:$(PATH)
export PG_CONFIG

DEMO_DIR  ?= /tmp/idem_keys-demo
DEMO_PORT ?= 25329

.PHONY: demo stop test setup install pgtest regress isolation upgrade lifecycle package package-test crash worker e2e bench bench-smoke regress-bless clean

setup:
	@bash scripts/setup.sh

install: setup
	cargo pgrx install --release --pg-config $(PG_CONFIG)

# A throwaway cluster with the extension, then the story: double tap, replay, mismatch, dead inverter, sweep.
demo: install
	@bash scripts/cluster.sh stop $(DEMO_DIR)
	@rm -rf $(DEMO_DIR)
	@bash scripts/cluster.sh start $(DEMO_DIR) $(DEMO_PORT)
	@bash scripts/demo.sh $(DEMO_DIR) $(DEMO_PORT)

stop:
	@bash scripts/cluster.sh stop $(DEMO_DIR)
	@echo "demo server stopped"

# Everything, against real PostgreSQL $(PG_MAJOR) servers. Each stage prints how long it took.
test: setup
	@bash scripts/test.sh

# Stages of `make test`, runnable alone.
pgtest regress isolation upgrade lifecycle crash worker e2e: setup
	@bash scripts/test.sh $@
package-test: setup
	@bash scripts/test.sh package
# Installable artefacts without Rust on the target: dist/*.deb, a tarball, the PGXN zip with META.json.
package: setup
	@bash scripts/package.sh
# The full side-by-side benchmark (long; writes docs/benchmarks.md and docs/bench/*.png) and its smoke run.
bench: install
	@bash bench/run.sh
bench-smoke: install
	@bash bench/run.sh --smoke

# Accept the current outputs of the golden-file tests as expected (review the diff before committing).
regress-bless: setup
	@BLESS=1 bash scripts/test.sh regress isolation

clean:
	cargo clean
	rm -rf dist
	rm -rf tests/pg_regress/results tests/pg_regress/regression.*
