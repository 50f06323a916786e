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

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;

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

plan(tests => 13);

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
