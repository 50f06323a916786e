# ngx_http_dynamo_rl_module: the single entry point for people and CI.
#
#   make            build build/ngx_http_dynamo_rl_module.so
#   make run        the gateway in front of the bundled fake Dynamo;
#                   REPLICAS=2: two gateways sharing a local redis-server;
#                   RUN_PORTS="8080:9090 8081:9091": rollout:trusted ports
#   make test       unit tests, fuzz smoke, the example alerting rules,
#                   the whole prove suite and test-filters
#   make test-filters  the request plane's tests against build/nofast,
#                   the module without its fast filter pair
#   make check      lint, cppcheck and test
#   make deb        build/libnginx-mod-http-dynamo-rl_<version>_<arch>.deb
#   make image      the gateway's image of the Containerfile (buildah)
#
# Never export CFLAGS: nginx's own -Werror comes from its configure.

SHELL      := /bin/bash
NGX_SRC    ?= /usr/share/nginx/src
NGX_BIN    ?= /usr/sbin/nginx
BUILD      := $(CURDIR)/build
NGX_BUILD  := $(BUILD)/nginx
MODULE     := $(BUILD)/ngx_http_dynamo_rl_module.so
SRCDIR     := $(CURDIR)/ngx_dynamo_rl_module

WARN       := -Wextra -Wmissing-prototypes -Wstrict-prototypes -Wshadow \
              -Wformat=2 -Wcast-align -Wvla -Wno-unused-parameter
CC_OPT     := -g -O2 -fstack-protector-strong -D_FORTIFY_SOURCE=2 $(WARN)
LD_OPT     := -Wl,-z,relro -Wl,-z,now

SOURCES    := config $(wildcard $(SRCDIR)/*.c $(SRCDIR)/*.h)

BUILD_DEBS := nginx-core nginx-dev libjansson-dev libssl-dev libhiredis-dev
TEST_DEBS  := $(BUILD_DEBS) curl clang libclang-rt-14-dev perl prometheus \
              chromium nghttp2-client nodejs libyaml-libyaml-perl faketime \
              redis-server redis-tools
RUN_DEBS   := $(BUILD_DEBS) curl perl redis-server

PROVE      ?= prove
PROVE_OPTS ?=
FUZZ_TIME  ?= 60
FUZZ_SMOKE_TIME ?= 30

.PHONY: all build deps run-deps unit-tests valgrind deb bench nginx-tests soak \
        bench-deps bench-request bench-store \
        bench-snapshot bench-body bench-body-e2e bench-admin test-deps run test unit fuzz fuzz-smoke lint \
        cppcheck check asan clean rules build-nofast test-filters image \
        image-name

all: build

build: $(MODULE)

deps:
	@util/apt-ensure $(BUILD_DEBS)

test-deps:
	@util/apt-ensure $(TEST_DEBS)

run-deps:
	@util/apt-ensure $(RUN_DEBS)

$(NGX_BUILD)/objs/Makefile: config
	@test -f $(NGX_SRC)/conf_flags || { echo "$(NGX_SRC) is missing:" \
	    "run 'make deps' (needs nginx-dev)" >&2; exit 1; }
	rm -rf $(NGX_BUILD)
	mkdir -p $(BUILD)
	cp -a $(NGX_SRC) $(NGX_BUILD)
	cd $(NGX_BUILD) && . ./conf_flags && ./configure \
	    "$${NGX_CONF_FLAGS[@]}" \
	    --with-cc-opt='$(CC_OPT) $(EXTRA_CC_OPT)' \
	    --with-ld-opt='$(LD_OPT) $(EXTRA_LD_OPT)' \
	    --add-dynamic-module=$(CURDIR) > $(BUILD)/configure.log 2>&1 \
	    || { tail -20 $(BUILD)/configure.log; exit 1; }

$(MODULE): $(NGX_BUILD)/objs/Makefile $(SOURCES)
	$(MAKE) -C $(NGX_BUILD) -f objs/Makefile modules
	cp $(NGX_BUILD)/objs/ngx_http_dynamo_rl_module.so $@.tmp
	@# a symbol left undefined shows only when nginx loads the module
	@printf 'load_module %s;\nevents {}\nhttp {}\n' $@.tmp \
	    > $(BUILD)/load-test.conf
	@$(if $(findstring address,$(EXTRA_CC_OPT)),\
	    ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD=$(ASAN_LIB)) \
	    $(NGX_BIN) -q -t -p $(BUILD)/ -c $(BUILD)/load-test.conf \
	    -e $(BUILD)/load-test.log || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

# C unit tests and fuzz harnesses compile the pure parsers against the
# configured nginx headers, without a running nginx

NGX_INCS = $(addprefix -I$(NGX_BUILD)/, src/core src/event \
           src/event/modules src/os/unix src/http src/http/modules \
           src/http/v2 objs) -I$(SRCDIR)
PURE     = $(SRCDIR)/ngx_http_dynamo_rl_parse.c \
           $(SRCDIR)/ngx_http_dynamo_rl_scan.c \
           $(SRCDIR)/ngx_http_dynamo_rl_resp.c \
           $(SRCDIR)/ngx_http_dynamo_rl_json.c
PURE_LIBS = -ljansson -lhiredis

UNITS    = $(patsubst t/unit/%.c,$(BUILD)/unit/%,$(wildcard t/unit/*.c))

$(BUILD)/unit/%: t/unit/%.c t/unit/*.h t/fuzz/body_oracle.h $(PURE) $(SRCDIR)/*.h \
             $(NGX_BUILD)/objs/Makefile
	@mkdir -p $(BUILD)/unit
	$(CC) -g -O1 -Wall -Werror $(WARN) $(NGX_INCS) -o $@ $< $(PURE) $(PURE_LIBS)

unit: $(UNITS)
	$(PROVE) -e '' $(UNITS)

FUZZERS := $(patsubst t/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard t/fuzz/fuzz_*.c))

$(BUILD)/fuzz/%: t/fuzz/%.c t/fuzz/body_oracle.h t/unit/uuid7.h $(PURE) $(SRCDIR)/*.h \
             $(NGX_BUILD)/objs/Makefile
	@mkdir -p $(BUILD)/fuzz
	clang -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined $(NGX_INCS) -o $@ $< $(PURE) \
	    $(PURE_LIBS)

fuzz: $(FUZZERS)
	@set -o pipefail; for f in $(FUZZERS); do n=$$(basename $$f); \
	    mkdir -p $(BUILD)/corpus/$$n; \
	    echo "== $$n ($(FUZZ_TIME)s)"; \
	    $$f -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
	        -artifact_prefix=$(BUILD)/fuzz/$$n- \
	        $(BUILD)/corpus/$$n t/fuzz/corpus/$$n > $(BUILD)/fuzz/$$n.log 2>&1 \
	        || { tail -40 $(BUILD)/fuzz/$$n.log; exit 1; }; \
	    grep -E '^(stat::number_of_executed_units|#[0-9]+.*DONE)' \
	        $(BUILD)/fuzz/$$n.log; \
	done

fuzz-smoke:
	$(MAKE) fuzz FUZZ_TIME=$(FUZZ_SMOKE_TIME)

test: test-deps bench-deps build $(UNITS) $(FUZZERS) $(BUILD)/snapshot-bench
	$(MAKE) fuzz-smoke
	$(MAKE) rules
	$(PROVE) $(PROVE_OPTS) -e '' $(UNITS)
	TEST_NGINX_MODULES=$(BUILD) $(PROVE) $(PROVE_OPTS) -I t/lib -r t/
	$(MAKE) test-filters

# the request plane's filter pair on top of the module's filter chain
# (ngx_http_dynamo_rl_plane_header_filter) takes a shortcut through it:
# build/nofast has the pair pass to the chain instead
# (NGX_HTTP_DYNAMO_RL_NOFAST), and the request plane's tests must pass on
# both paths; TEST_NGINX_NOFAST=1 tells t/dynamo_rl_filters.t which path
# to find in the debug log, about a minute

NOFAST_BUILD := $(CURDIR)/build/nofast
FILTER_TESTS := $(addprefix t/dynamo_rl_, filters.t request.t \
                request_id.t ledger.t verdict_attack.t body.t \
                body_attack.t http2.t compose.t store_attack.t sdk.t \
                truth.t)

build-nofast:
	$(MAKE) BUILD=$(NOFAST_BUILD) \
	    EXTRA_CC_OPT='-DNGX_HTTP_DYNAMO_RL_NOFAST=1' build

test-filters: build-nofast
	TEST_NGINX_NOFAST=1 TEST_NGINX_MODULES=$(NOFAST_BUILD) \
	    $(PROVE) $(PROVE_OPTS) -I t/lib $(FILTER_TESTS)

# the example alerting rules: syntax, then their promtool test cases

RULES := $(CURDIR)/examples/prometheus

rules:
	promtool check rules $(RULES)/dynamo-rl-alerts.yml
	cd $(RULES) && promtool test rules dynamo-rl-alerts.test.yml

# the whole suite with the module under AddressSanitizer and
# LeakSanitizer; util/lsan.supp names what nginx itself never frees

ASAN_BUILD := $(CURDIR)/build/asan
ASAN_LIB    = $(shell gcc -print-file-name=libasan.so)

asan: test-deps
	$(MAKE) BUILD=$(ASAN_BUILD) \
	    EXTRA_CC_OPT='-fsanitize=address -fno-omit-frame-pointer' \
	    EXTRA_LD_OPT='-fsanitize=address' build
	ASAN_OPTIONS=detect_leaks=1:detect_odr_violation=0:fast_unwind_on_malloc=0 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/util/lsan.supp:print_suppressions=0 \
	TEST_NGINX_PRELOAD=$(ASAN_LIB) TEST_NGINX_MODULES=$(ASAN_BUILD) \
	    $(PROVE) $(PROVE_OPTS) -I t/lib -r t/

# the whole suite with nginx under valgrind and valgrind.suppress

valgrind: test-deps build
	util/apt-ensure valgrind
	TEST_NGINX_VALGRIND=1 TEST_NGINX_MODULES=$(BUILD) \
	    $(PROVE) $(PROVE_OPTS) -I t/lib -r t/

lint:
	util/check-style
	util/check-layers
	util/check-directives

cppcheck: $(NGX_BUILD)/objs/Makefile
	cppcheck -q --enable=warning,portability,performance \
	    --error-exitcode=1 --inline-suppr --suppress=toomanyconfigs $(NGX_INCS) \
	    $(SRCDIR)/*.c

check: lint cppcheck test

# the build's output goes to build/run-build.log, shown only when it
# fails; Ctrl-C (130) is how make run ends, not an error of make's
run: run-deps
	@mkdir -p $(BUILD)
	@$(MAKE) --no-print-directory build > $(BUILD)/run-build.log 2>&1 \
	    || { tail -40 $(BUILD)/run-build.log; \
	         echo "make run: the build failed, $(BUILD)/run-build.log" >&2; \
	         exit 1; }
	@REPLICAS='$(REPLICAS)' RUN_PORTS='$(RUN_PORTS)' util/run-gateway \
	    || [ $$? -eq 130 ]

deb:
	util/build-deb

# the gateway's image (Containerfile): Debian 12, Debian's nginx and this
# module's package; examples/k8s/deployment.yaml names it.  IMAGE_OPTS
# for buildah bud, e.g. "--isolation chroot --pull=never" where no OCI
# runtime can start containers (util/image-smoke builds and runs it so)

VERSION    = $(shell sed -n 's/^\#define NGX_HTTP_DYNAMO_RL_VERSION  *"\(.*\)"$$/\1/p' \
             $(SRCDIR)/ngx_http_dynamo_rl_common.h)
IMAGE      ?= registry.example.com/dynamo-rl-gateway:$(VERSION)-debian12
IMAGE_OPTS ?=

image:
	@util/apt-ensure buildah
	buildah bud --layers $(IMAGE_OPTS) -t $(IMAGE) -f Containerfile .

image-name:
	@echo $(IMAGE)

# benchmarks: see bench/README.md; make test runs only their smoke
# (t/dynamo_rl_bench.t), never a measured series

$(BUILD)/snapshot-bench: bench/snapshot_bench.c $(PURE) $(SRCDIR)/*.h \
        $(NGX_BUILD)/objs/Makefile
	$(CC) -g -O2 -Wall -Werror $(WARN) $(NGX_INCS) -o $@ $< $(PURE) $(PURE_LIBS)

$(BUILD)/body-bench: bench/body_bench.c $(PURE) $(SRCDIR)/*.h \
        $(NGX_BUILD)/objs/Makefile
	$(CC) -g -O2 -Wall -Werror $(WARN) $(NGX_INCS) -o $@ $< $(PURE) $(PURE_LIBS)

bench-body: $(BUILD)/body-bench
	taskset -c 0 $<

bench-body-e2e: bench-deps build
	bench/body.sh

bench-snapshot: $(BUILD)/snapshot-bench
	taskset -c 0 $<

bench-admin: bench-deps build $(BUILD)/snapshot-bench
	bench/admin.sh

BENCH_DEBS := wrk nghttp2-client libnginx-mod-http-lua libnginx-mod-http-ndk \
              redis-server redis-tools lua-nginx-redis

bench-deps:
	@util/apt-ensure $(BENCH_DEBS)

bench-request: bench-deps build
	bench/request.sh

# the shared store (issue 13) beside the zone ledger and Lua with Redis,
# over TLS, with a replica and wait=1 (issue 25), at 32 connections and
# at one, about 10 minutes: bench/results-store.md
STORE_VARIANTS := plain module module-ledger-off store store-tls \
                  store-repl store-wait1 lua-ledger lua-redis \
                  plain-c1 module-c1 store-c1 store-tls-c1 store-repl-c1 \
                  store-wait1-c1 lua-redis-c1

bench-store: bench-deps build
	STORE=1 CONNECTIONS=32 H2=0 SSE_VARIANTS= \
	    VARIANTS="$(STORE_VARIANTS)" OUT=bench/results-store.md \
	    bench/request.sh > /dev/null

# all three, about 10 minutes: bench/results.md
bench: bench-deps build $(BUILD)/snapshot-bench
	BUILD=$(BUILD) bench/all.sh > /dev/null

# nginx's own proxy and upstream tests (nginx/nginx-tests at the pinned
# commit, never committed here) with and without the module, compared
# file by file: make nginx-tests NGINX_TESTS=<checkout>

NGINX_TESTS_DEBS := $(BUILD_DEBS) libnginx-mod-http-perl \
                    libio-socket-ssl-perl libprotocol-websocket-perl \
                    libcache-memcached-perl libcache-memcached-fast-perl \
                    memcached

nginx-tests: build
	@util/apt-ensure $(NGINX_TESTS_DEBS)
	NGINX_TESTS='$(NGINX_TESTS)' util/nginx-tests

# a bounded soak, loopback only (SOAK_SECONDS, default 600); never part of
# make test; figures in bench/results-soak.md

soak: run-deps build
	SOAK_SECONDS='$(SOAK_SECONDS)' bench/soak.sh

clean:
	rm -rf $(BUILD)
