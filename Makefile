# KernelForge: `make up` runs the product on this machine; `make test` runs the lint checks
# (ruff, ruff format, mypy) and every test.
# Both work on a fresh clone: they create .venv and install the pinned requirements first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up test lint format system-deps sandbox-deps install

install: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .  # the kforge command
	touch $(STAMP)

# Debian's bubblewrap: every untrusted child (candidates, uploaded models) runs inside it.
sandbox-deps:
	@command -v bwrap >/dev/null 2>&1 || [ -n "$$KF_BWRAP" ] || { \
		echo "installing: bubblewrap (the sandbox for untrusted code)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bubblewrap; }

# Debian's chromium for the browser test, and a compose CLI to validate docker/compose.yml.
system-deps: sandbox-deps
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

up: $(STAMP) sandbox-deps
	$(BIN)/python manage.py up

test: lint system-deps
	$(BIN)/pytest

# mypy covers the packages below webapp/ (Django is not checked: no django-stubs plugin).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy kernels harness agents workers

format: $(STAMP)
	$(BIN)/ruff format .
