#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25b: dynamo_rl_store_up is the AND over the worker processes
# that have the store (per-worker slots, kill(pid, 0) for those gone).  An
# old worker process that drains after a reload (a stream in flight) keeps
# its slot, and it never reconnects (no retry while exiting): a store that
# restarts during the drain leaves the gauge at 0 for as long as the old
# worker process's stream lasts, though the new worker process reconnected
# and admits.  The shipped DynamoRLStoreDown alert fires, and its runbook
# says "fix the store", though the store is back and the instance admits.
#
# Expected: dynamo_rl_store_up back to 1 once the worker processes that
# admit are connected again (the new one: generation admitted); observed:
# 0 while the old worker process drains.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ metrics time_limit forwarded start /;
use Test::DynamoRL::Redis qw/ replica_conf gen admit /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(6);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $rep = { listen => 8080, api => 8070 };

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => $redis->url(), params => 'timeout=250ms'));

$t->run_fake_dynamo()->run();

###############################################################################

is(admit($rep)->{status}, 200, 'admits');

# a 30 s stream in flight in the worker process, then a reload: it drains

my $s = start('POST', '/v1/completions', port => 8080,
	body => '{"prompt":"p"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'drain-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 150 ]);
$t->wait_for(sub { forwarded($t, 'drain-1') }, 10);

my @old = $t->worker_pids();

$t->reload();

$t->wait_for(sub {
	my @p = $t->worker_pids();
	return @p && !grep { my $o = $_; grep { $_ == $o } @p } @old;
}, 10);

my $m = {};
$t->wait_for(sub { ($m = metrics())->{dynamo_rl_store_up} }, 10);
is($m->{dynamo_rl_store_up}, 1, 'after the reload: up');

# the store restarts while the old worker process drains

$redis->restart();

is(admit($rep)->{status}, 200, 'the new worker process admits again');

$t->wait_for(sub { ($m = metrics())->{dynamo_rl_store_up} }, 10);

is($m->{dynamo_rl_store_up}, 1,
	'store back, the admitting worker connected: up');

ok(kill(0, @old), 'the old worker process still drains');

# the stream ends: the old worker process exits

$t->wait_for(sub { !kill(0, @old) }, 60);
close $s if $s;

$t->wait_for(sub { ($m = metrics())->{dynamo_rl_store_up} }, 10);
is($m->{dynamo_rl_store_up}, 1, 'the old worker process gone: up');

###############################################################################
