#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25b: dynamo_rl_ready is documented to answer the probe "as the
# request plane would answer generation" (docs/operations.md, Readiness).
# With wait=1 and the store's only replica gone, every claim is refused
# (503 store_unavailable) and dynamo_rl_store_up is 0, yet dynamo_rl_ready
# keeps answering 200 {"ready":true}: it looks only at the connection's
# state, not at the refusals the up gauge now counts.  A Kubernetes
# readiness probe on it keeps the replica in the Service while every
# generation sent to it fails.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ call metrics time_limit forwarded /;
use Test::DynamoRL::Redis qw/ replica_conf reason gen admit /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $replica = Test::DynamoRL::Redis->new($t, port => 8389,
	args => [ '--replicaof', '127.0.0.1', $redis->port() ])->start();

my $rep = { listen => 8080, api => 8070 };

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => $redis->url(), params => 'timeout=250ms wait=1',
	http => 'server { %%RL_LISTEN 8088%% '
		. 'location = /ready { dynamo_rl_ready; } }'));

$t->run_fake_dynamo()->run();

###############################################################################

is(admit($rep)->{status}, 200, 'wait=1 with a replica: admits');

$replica->stop();

$t->wait_for(sub {
	my $r = $redis->cmd('INFO', 'replication');
	return $r =~ /connected_slaves:0/;
}, 10);

my @st = map { gen($rep, "rdy-$_")->{status} } 1 .. 5;
is(join(',', @st), '503,503,503,503,503', 'no replica: every claim 503');

my $m = {};

$t->wait_for(sub {
	$m = metrics();
	return ($m->{dynamo_rl_store_up} // 1) == 0;
}, 5);

is($m->{dynamo_rl_store_up}, 0, 'the up gauge says the store refuses');

# the probe, right after a refused claim

is(reason(gen($rep, 'rdy-6')), 'store_unavailable', 'still refused');

my $r = call('GET', '/ready', port => 8088);
is($r->{status}, 503, 'dynamo_rl_ready: not ready while every claim is '
	. 'refused') or diag($r->{body});

###############################################################################
