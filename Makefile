# Orrery's two commands: `make dev` runs everything on this machine,
# `make test` proves it. Both install what they need (PostgreSQL's server
# from the distribution's packages, Go modules through the module proxy).

SHELL := /bin/bash
GO    ?= go
BUF   := $(GO) run github.com/bufbuild/buf/cmd/buf@v1.75.0
SQLC  := $(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
SUDO  := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Directories `make generate` writes (see buf.gen.yaml and sqlc.yaml).
GENERATED := api/gen internal/store shard/internal/db

.PHONY: dev test generate check-generate postgres chromium bubblewrap apicheck build bench lint crdb-parse vendor-web screenshots

## dev: private PostgreSQL under .orrery/, migrations, example jobs, API on 127.0.0.1:8080
dev: postgres bubblewrap build
	@bin/orrery dev

## test: generated code up to date, lint, CockroachDB parse, vet, and every test against real PostgreSQL
test: postgres chromium bubblewrap apicheck check-generate lint crdb-parse
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...
	$(GO) test -count=1 -run '^$$' -bench CreateJob -benchtime 100x ./bench/

## build: the orrery binary in bin/
build:
	$(GO) build -o bin/orrery ./cmd/orrery

## generate: protobuf/Connect code and the OpenAPI document (buf, local plugins; tools/openapi) and SQL queries (sqlc)
generate:
	$(BUF) generate
	$(GO) run ./tools/openapi api/gen/openapi/openapi.yaml api/gen/openapi/openapi.json
	$(SQLC) generate

## check-generate: fail when the checked-in generated code differs from `make generate`
check-generate: generate
	@if ! git diff --quiet -- $(GENERATED) || [ -n "$$(git ls-files --others --exclude-standard -- $(GENERATED))" ]; then \
		echo "generated code is stale: run 'make generate' and commit the result"; \
		git status --short -- $(GENERATED); exit 1; fi

## lint: gofmt, buf lint on api/proto, staticcheck (pinned) on every Go package and on tools/crdbparse
lint:
	@unformatted=$$($$($(GO) env GOROOT)/bin/gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt'd (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(BUF) lint
	$(STATICCHECK) ./...
	cd tools/crdbparse && $(STATICCHECK) ./...

## crdb-parse: every migration (goose Up) and sqlc query parses with CockroachDB's own parser
## (a separate module in tools/crdbparse, so its dependencies stay out of go.mod; -v prints
## the allow-listed exceptions used)
crdb-parse:
	cd tools/crdbparse && $(GO) test -count=1 -v ./...

## postgres: install the PostgreSQL server from the distribution if its binaries are missing
postgres:
	@if [ -n "$$ORRERY_PG_BIN" ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null; then :; \
	else echo "installing PostgreSQL server (apt-get)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; fi

## bubblewrap: install Debian's bubblewrap (workers run command steps in its sandbox) if missing
bubblewrap:
	@if command -v bwrap >/dev/null; then :; \
	else echo "installing bubblewrap (apt-get)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bubblewrap >/dev/null; fi

## chromium: install Debian's chromium (the web UI's browser tests drive it headless) if missing
chromium:
	@if [ -n "$$ORRERY_CHROMIUM" ] || command -v chromium >/dev/null; then :; \
	else echo "installing chromium (apt-get)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; fi

## apicheck: the npm tools the API's test runs (Spectral, Redocly, Prism, openapi-typescript,
## openapi-fetch, TypeScript; versions in tools/apicheck/package-lock.json), with Node.js and npm
## from the distribution if missing. Test time only: nothing of it is built into Orrery.
apicheck:
	@command -v npm >/dev/null || { echo "installing Node.js and npm (apt-get)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm >/dev/null; }
	@if ! cmp -s tools/apicheck/package-lock.json tools/apicheck/node_modules/.orrery-lock; then \
		echo "installing the API tools (npm ci in tools/apicheck)"; \
		cd tools/apicheck && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.orrery-lock; fi

## vendor-web: refresh the web UI's vendored files from the npm registry (versions in webui/static/VENDORED.md)
HTMX_VERSION := 2.0.11
RAPIDOC_VERSION := 9.3.8
vendor-web:
	curl -fsSL https://registry.npmjs.org/htmx.org/-/htmx.org-$(HTMX_VERSION).tgz | tar -xzO package/dist/htmx.min.js > webui/static/htmx.min.js
	curl -fsSL https://registry.npmjs.org/htmx.org/-/htmx.org-$(HTMX_VERSION).tgz | tar -xzO package/LICENSE > webui/static/htmx.LICENSE
	curl -fsSL https://registry.npmjs.org/rapidoc/-/rapidoc-$(RAPIDOC_VERSION).tgz | tar -xzO package/dist/rapidoc-min.js > webui/static/rapidoc-min.js
	curl -fsSL https://registry.npmjs.org/rapidoc/-/rapidoc-$(RAPIDOC_VERSION).tgz | tar -xzO package/dist/rapidoc-min.js.LICENSE.txt > webui/static/rapidoc-min.js.LICENSE.txt
	curl -fsSL https://registry.npmjs.org/rapidoc/-/rapidoc-$(RAPIDOC_VERSION).tgz | tar -xzO package/LICENSE.txt > webui/static/rapidoc.LICENSE
	sha256sum webui/static/htmx.min.js webui/static/rapidoc-min.js

## screenshots: the web UI's main pages, as the browser test sees them, into docs/screenshots/
screenshots: postgres chromium
	ORRERY_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) test -count=1 -run TestWebUIInABrowser ./cmd/orrery/

## bench: the benchmarks behind BENCHMARKS.md (about 8 minutes)
bench: postgres
	$(GO) test -run '^$$' -bench CreateJob -benchtime 5000x ./bench/
	$(GO) test -run '^$$' -bench 'RiverBare|SteadyFires|MidnightStorm' -benchtime 1x -timeout 25m ./bench/
	$(GO) test -run '^$$' -bench TickCost -benchtime 300x -timeout 20m ./bench/
	$(GO) test -run '^$$' -bench WebUI -benchtime 20x ./bench/
