# Orrery's two commands: `make dev` runs everything on this machine,
# `make test` proves it. Both install what they need (PostgreSQL's server
# from the distribution's packages, Go modules through the module proxy).

SHELL := /bin/bash
GO    ?= go
BUF   := $(GO) run github.com/bufbuild/buf/cmd/buf@v1.75.0
SQLC  := $(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1
SUDO  := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: dev test generate check-generate postgres build bench lint

## dev: private PostgreSQL under .orrery/, migrations, example jobs, API on 127.0.0.1:8080
dev: postgres build
	@bin/orrery dev

## test: generated code up to date, vet, and every test against real PostgreSQL
test: postgres check-generate
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -run '^$$' -bench CreateJob -benchtime 100x ./bench/

## build: the orrery binary in bin/
build:
	$(GO) build -o bin/orrery ./cmd/orrery

## generate: protobuf/Connect code (buf, local plugins) and SQL queries (sqlc)
generate:
	$(BUF) generate
	$(SQLC) generate

## check-generate: fail when the checked-in generated code differs from `make generate`
check-generate: generate
	@if ! git diff --quiet -- api/gen engine/store || [ -n "$$(git ls-files --others --exclude-standard -- api/gen engine/store)" ]; then \
		echo "generated code is stale: run 'make generate' and commit the result"; \
		git status --short -- api/gen engine/store; exit 1; fi

## postgres: install the PostgreSQL server from the distribution if its binaries are missing
postgres:
	@if [ -n "$$ORRERY_PG_BIN" ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null; then :; \
	else echo "installing PostgreSQL server (apt-get)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; fi

## bench: the benchmarks behind BENCHMARKS.md (about 8 minutes)
bench: postgres
	$(GO) test -run '^$$' -bench CreateJob -benchtime 5000x ./bench/
	$(GO) test -run '^$$' -bench 'RiverBare|SteadyFires|MidnightStorm' -benchtime 1x -timeout 25m ./bench/
	$(GO) test -run '^$$' -bench TickCost -benchtime 300x -timeout 20m ./bench/
