#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A smoke run of "make bench" (bench/all.sh with SMOKE=1), so that the
# benchmarks do not rot between the runs that record figures:
# snapshot-bench's short table, bench/admin.sh with one round of 1 s
# against a 1,000-worker snapshot, and bench/request.sh with SMOKE=1 (one
# round of 1 s runs of every variant, SSE through every gateway, the zone
# filled).  About 35 s, loopback only.
#
# Only that they run, check what they check (their own sanity checks stop
# them on any non-2xx answer, a wrong 409, a ledger state or an alert in a
# log) and print their summaries is tested here: no figure is compared
# with a target, since the machine is shared.  The figures are recorded
# with "make bench" (bench/results*.md).
#
# Then bench/request.sh with STORE=1 (what "make bench-store" runs), one
# round of 1 s runs of module, store, store-tls, store-repl and
# store-wait1, with a redis-server for the TLS variant that refuses
# --tls-port as one built without TLS does: store-tls is left out, with a
# line that says why, and the rest runs.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use File::Temp qw/ tempdir /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $REPO = abs_path(dirname(__FILE__) . '/..');
my $BUILD = $ENV{TEST_NGINX_MODULES} // "$REPO/build";
my $SO = "$BUILD/ngx_http_dynamo_rl_module.so";

# the benchmarks load the module into nginx themselves, without the
# harness's sanitizer or valgrind wrappers: they measure the release build

plan(skip_all => 'the benchmarks measure the release build, not a '
	. 'sanitizer or valgrind run')
	if $ENV{TEST_NGINX_PRELOAD} || $ENV{TEST_NGINX_VALGRIND};

# missing tools fail the file, as in the other files: make test installs
# them (make bench-deps)

for my $t (qw/ wrk h2load taskset curl /) {
	die "$t is missing: make bench-deps\n"
		unless grep { -x "$_/$t" } split /:/, $ENV{PATH};
}

die "lua-nginx-module is missing: make bench-deps\n"
	unless -f '/usr/lib/nginx/modules/ngx_http_lua_module.so';

die "the benchmarks need 2 CPUs\n" if cpus() < 2;

for my $t (qw/ redis-server redis-cli redis-benchmark openssl /) {
	die "$t is missing: make bench-deps\n"
		unless grep { -x "$_/$t" } split /:/, $ENV{PATH};
}

plan(tests => 19);

###############################################################################

# one run of bench/all.sh, what "make bench" runs, with SMOKE=1

my ($rc, $out) = run('env', 'SMOKE=1', "BUILD=$BUILD", "$REPO/bench/all.sh");

is($rc, 0, 'bench/all.sh SMOKE=1: exit 0') or diag($out);

# snapshot-bench: the rebuild against jansson's parse, the decision

like($out, qr/^SUMMARY rebuild\/parse\(10000\) = \d+\.\d+ /m,
	'snapshot-bench: rebuild/parse summary');
like($out, qr/^SUMMARY decision\(10000\)\/decision\(1\) = \d+\.\d+ random/m,
	'snapshot-bench: decision summary');

# admin.sh: both ratios of one round

for my $v ('same worker', 'random workers') {
	like($out, qr/^SUMMARY admin e2e 1000\/1, $v: rps ratio \d+\.\d+, gateway cpu\/req ratio \d+\.\d+$/m,
		"admin.sh: $v summary");
}

like($out, qr/^gwbig worker RSS after the run: \d+ kB$/m,
	'admin.sh: worker RSS');

# request.sh: every variant once, SSE, the zone

like($out, qr/^### Verdicts/m, 'request.sh: verdicts');
like($out, qr/^\| module\/plain \| \d+\.\d+ \| \d+\.\d+ \|/m,
	'request.sh: module/plain ratios');
like($out, qr/^\| module\/lua-ledger \| \d+\.\d+ \| \d+\.\d+ \|/m,
	'request.sh: module/lua-ledger ratios');
like($out, qr/^Lua in-flight counters after the run: lua 0, lua-ledger 0 /m,
	'request.sh: the Lua in-flight counters back to 0');
like($out, qr/^\| fresh zone, filled \| 128 bytes, client \| \d+ \| 0 \|/m,
	'request.sh: the zone filled, nothing in flight');

# all.sh: the verdicts of issues 3 and 7 gathered

like($out, qr/^\| index rebuild at 10,000 workers .* \| (met|\*\*MISSED\*\*) \|$/m,
	'all.sh: the rebuild verdict');
like($out, qr/^\| the same, a worker at random per call \| admin e2e .* \| (met|\*\*MISSED\*\*) \|$/m,
	'all.sh: the random-worker verdict');

# request.sh STORE=1, a redis-server without TLS for store-tls

my $dir = tempdir('dynamo-rl-bench-XXXXXX', TMPDIR => 1, CLEANUP => 1);

open my $fh, '>', "$dir/redis-server-no-tls" or die "$dir: $!\n";
print $fh <<'EOF';
#!/bin/sh
# redis-server as built without TLS: the TLS options are unknown
for a in "$@"; do
	if [ "$a" = --tls-port ]; then
		echo '*** FATAL CONFIG FILE ERROR (Redis 6.0.16) ***' >&2
		echo 'Reading the configuration file, at line 2' >&2
		echo ">>> 'tls-port \"6380\"'" >&2
		echo 'Bad directive or wrong number of arguments' >&2
		exit 1
	fi
done
exec redis-server "$@"
EOF
close $fh;
chmod 0755, "$dir/redis-server-no-tls";

($rc, $out) = run('env', 'SMOKE=1', 'STORE=1', 'H2=0', 'SSE_VARIANTS=',
	'CONNECTIONS=32', "MODULE=$SO",
	'VARIANTS=module store store-tls store-repl store-wait1',
	"REDIS_TLS_SERVER=$dir/redis-server-no-tls", "$REPO/bench/request.sh");

is($rc, 0, 'request.sh STORE=1, no TLS in redis-server: exit 0')
	or diag($out);
like($out, qr/^request\.sh: the store-tls variant left out: .* with --tls-port did not start: Bad directive or wrong number of arguments$/m,
	'store-tls left out, and why');
like($out, qr/^- store-tls: .* did not start: Bad directive/m,
	'the report says store-tls was left out');
unlike($out, qr/^\| store-tls \|/m, 'no store-tls row');
like($out, qr/^\| store \| \d+ \| \d+ \| \d+ \| \d+\.\d+ \|/m,
	'the store variant ran');
like($out, qr/^\| store-wait1 \| \d+ \| \d+ \| \d+ \| \d+\.\d+ \|/m,
	'the store-wait1 variant ran');

###############################################################################

sub run {
	my (@cmd) = @_;

	my $pid = open(my $fh, '-|') // die "fork: $!\n";

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		exec(@cmd) or die "exec $cmd[0]: $!\n";
	}

	local $/;
	my $text = <$fh> // '';
	close $fh;

	return ($? >> 8, $text);
}

sub cpus {
	open my $fh, '<', '/proc/cpuinfo' or return 1;
	return scalar grep { /^processor\s*:/ } <$fh>;
}

###############################################################################
