# idem_keys. The two commands a newcomer needs: `make demo` and `make test`. Both install what is missing.
# PG_CONFIG picks the PostgreSQL major that install, demo, package and bench build for (scripts/pg_major.sh
# derives the rest). `make test` covers every supported major; PG_MAJORS narrows it (PG_MAJORS=18 make test).
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
export PATH := $(HOME)/.cargo/bin:$(PATH)
export PG_CONFIG PG_MAJORS

DEMO_DIR  ?= /tmp/idem_keys-demo
DEMO_PORT ?= 25329

.PHONY: demo stop test setup install portable portable-test pgtest regress isolation upgrade lifecycle package package-test crash worker failover e2e http powertools pgbouncer drivers ha scaleout citus bench bench-smoke regress-bless clean

setup:
	@bash scripts/setup.sh

install: setup
	cargo pgrx install --release --pg-config $(PG_CONFIG)
	PG_CONFIG=$(PG_CONFIG) bash scripts/install_proxy.sh

# A throwaway cluster with the extension, then the story: double tap, replay, mismatch, dead inverter, sweep.
demo: install
	@bash scripts/cluster.sh stop $(DEMO_DIR)
	@rm -rf $(DEMO_DIR)
	@bash scripts/cluster.sh start $(DEMO_DIR) $(DEMO_PORT)
	@bash scripts/demo.sh $(DEMO_DIR) $(DEMO_PORT)

stop:
	@bash scripts/cluster.sh stop $(DEMO_DIR)
	@echo "demo server stopped"

# Everything, against real PostgreSQL servers of each major (15 here, 17 and 18 in Debian roots of their
# own). Each stage prints how long it took, per major.
test: setup
	@bash scripts/test.sh

# Stages of `make test`, runnable alone.
pgtest regress isolation upgrade lifecycle crash worker failover e2e http powertools pgbouncer drivers ha scaleout citus: setup
	@bash scripts/test.sh $@
# The portable edition's own stage (the file itself is `make portable`).
portable-test: setup
	@bash scripts/test.sh portable
package-test: setup
	@bash scripts/test.sh package
# The portable edition: dist/idem_keys_portable.sql, for servers that cannot load the extension (docs/portable.md).
portable:
	@python3 scripts/portable.py
# Installable artefacts without Rust on the target: dist/*.deb (one per major), tarballs, the PGXN zip.
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
