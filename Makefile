# Cohort's developer entry points. Every target sets up .venv (and Debian's PostgreSQL for the tests)
# when missing or outdated, and is quick when nothing changed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cohort-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?= --durations=20

.PHONY: demo test test-all bench ui lint format system-deps kafka-jars clean

$(STAMP): pyproject.toml pipelines/tasks/kafka_arrow.c pipelines/formats/flat_json.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# Debian packages the tests need: the PostgreSQL server (initdb/pg_ctl), Java for Spark and Kafka, Maven to resolve
# Kafka's jars, Chromium for the UI test.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
		echo "installing Debian's postgresql"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; \
	fi
	@if ! command -v java >/dev/null; then \
		echo "installing a Java runtime for Spark"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	fi
	@if ! command -v mvn >/dev/null; then \
		echo "installing Maven to resolve the test broker's jars (harness/kafka/pom.xml)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq maven >/dev/null; \
	fi
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "installing Debian's chromium for the Dagster UI test"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# The Apache Kafka the tests run against (harness/kafka/pom.xml) and Spark's own Kafka source (harness/spark_kafka/
# pom.xml, for benchmarks/peers.py and the JVM reading path's tests): Maven copies the pinned jars into
# ~/.cache/cohort/{kafka-jars,spark-kafka-jars}/<pom hash>/ once (Maven's own cache is ~/.m2); a no-op when cached.
kafka-jars: $(STAMP) system-deps
	@$(PY) -m harness.kafka_broker >/dev/null
	@$(PY) -m harness.spark_kafka >/dev/null
	@$(PY) -m harness.spark_s3 >/dev/null

demo: $(STAMP)
	$(PY) -m cohort.demo

# `make test` is what CI runs: everything but the long scenarios marked `slow`; `make test-all` runs them too. Both
# run on Apache Kafka (tests/fixtures/kafka.py; COHORT_TEST_BOOTSTRAP=host:port for a Kafka of your own).
test: $(STAMP) system-deps kafka-jars
	$(PY) -m ruff check .
	$(PY) tools/typecheck.py
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP) system-deps kafka-jars
	$(PY) -m ruff check .
	$(PY) tools/typecheck.py
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP) system-deps kafka-jars
	@for b in benchmarks/[a-z]*.py; do m=$$(basename $$b .py); case $$m in brokers|peer_cases|peer_rows|freshness_run|soak_location) continue;; esac; echo "== benchmarks.$$m"; $(PY) -m benchmarks.$$m || exit 1; done

ui: $(STAMP)
	$(PY) -m cohort.devtools.ui

# tools/typecheck.py: mypy on the product packages under their `cohort.` names (paths shown as the repository's).
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) tools/typecheck.py
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
