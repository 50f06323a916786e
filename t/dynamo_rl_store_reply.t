#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Replies a store (or anything on its path) should never send (issue 24,
# items 3 and 4).  Replica F reaches Debian's redis-server through the
# fake RESP server of the test's own (Test::DynamoRL::Redis::resp_proxy):
#
# - a batch of one claim answered [ok, epoch] instead of [[ok, epoch]]:
#   503 store_unavailable, nothing forwarded, one error line; the claim,
#   which ran in Redis, is released, so that the retry passes once;
# - a claim answered "$2000000000" and its bytes 64 KB every 5 ms: the
#   worker process drops the connection once the reply passes 1 MB (one
#   error line), its memory does not grow by the megabytes sent, and it
#   reconnects by itself;
# - a claim answered one byte every 0.5 s: 503 at the timeout, and the
#   connection is dropped once no whole reply came for the stall time
#   (4 x timeout, 1 s at least), so that the next claims pass within
#   seconds, not after the drip;
# - a claim whose connection is lost before its answer reaches Redis
#   after the release sent on the next connection (item 5): the late
#   claim finds the release's mark and records nothing, so that the
#   retry passes once.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf resp_proxy /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(18);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %F = (name => 'F', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%F,
	store => 'redis://127.0.0.1:8390',
	params => 'timeout=250ms heartbeat=500ms gate_poll=100ms'
		. ' gate_stale=2s'));

$t->run_fake_dynamo()->run();

###############################################################################

my ($r, $off);

is(admit(\%F)->{status}, 200, 'F admits through the fake server');

# a reply of the wrong shape

$off = -s $t->testdir() . '/error.log';

$r = gen(\%F, 'fault-shape-1');
is($r->{status}, 503, 'shape: 503');
is(reason($r), 'store_unavailable', 'shape: store_unavailable');
is(forwarded($t, 'fault-shape-1'), 0, 'shape: not forwarded');

is(scalar(lines($off, qr/\[error\].*answered\ a\ batch\ of\ 1\ claim\ with
	\ a\ reply\ of\ another\ shape/x)), 1, 'shape: one error line');

my $again;
Test::DynamoRL::wait_for(sub {
	$again = gen(\%F, 'fault-shape-1');
	return $again->{status} != 503;
}, 10);

is($again->{status}, 200, 'shape: the id was released, the retry passes');
is(forwarded($t, 'fault-shape-1'), 1, 'shape: forwarded once');

# a huge reply, trickled

my $worker = ($t->worker_pids())[0];
my $rss = rss($worker);

$off = -s $t->testdir() . '/error.log';

$r = gen(\%F, 'fault-huge-1');
is($r->{status}, 503, 'huge: 503');

ok(Test::DynamoRL::wait_for(sub {
	lines($off, qr/reply larger than 1M/) }, 5),
	'huge: the connection dropped past 1 MB');

cmp_ok(rss($worker) - $rss, '<', 16 * 1024, 'huge: the worker grew by less'
	. ' than 16 MB') or diag('grew by ' . (rss($worker) - $rss) . ' kB');

is(admit(\%F)->{status}, 200, 'huge: F reconnects and admits');

# a reply dripped

$off = -s $t->testdir() . '/error.log';

my $began = time();
$r = gen(\%F, 'fault-drip-1');
is($r->{status}, 503, 'drip: 503 at the timeout');

my $ok = Test::DynamoRL::wait_for(sub {
	gen(\%F, 'after-drip-' . int(time() * 1000))->{status} == 200 }, 6);
my $took = time() - $began;

ok($ok && $took < 5, 'drip: claims pass again within seconds')
	or diag("took $took s");

ok(lines($off, qr/no reply in time/), 'drip: the connection dropped');

# a claim that reaches the store after its release: the release, sent on
# the next connection, goes first; the claim comes late and must not use
# up the id

$r = gen(\%F, 'fault-late-1');
is($r->{status}, 503, 'late: 503, the connection lost before the answer');

ok(Test::DynamoRL::wait_for(sub { -e "$PROXY/late-fault-late-1" }, 10),
	'late: the claim reached the store after its release');

$r = gen(\%F, 'fault-late-1');
is($r->{status}, 200, 'late: the retry passes, the id was not used up');
is(forwarded($t, 'fault-late-1'), 1, 'late: forwarded once');

###############################################################################

sub lines {
	my ($from, $re) = @_;
	return grep { /$re/ } split /\n/,
		substr($t->read_file('error.log'), $from);
}

sub rss {
	my ($pid) = @_;

	open my $fh, '<', "/proc/$pid/status" or return 0;
	my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+)/m;

	return $kb // 0;
}

###############################################################################
