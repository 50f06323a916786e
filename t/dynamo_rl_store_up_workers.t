#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: dynamo_rl_store_up is one gauge for the instance, written by
# whichever worker process last changed its own connection's state.  At
# the store's maxclients, after the connections were cut, one worker
# process gets back in and the other is refused on every reconnect: half
# the generations are refused with 503 store_unavailable, and the gauge
# (and the status) say the store is up, so DynamoRLStoreDown never fires.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ metrics time_limit /;
use Test::DynamoRL::Redis qw/ replica_conf reason gen admit status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(10);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $rep = { listen => 8080, api => 8070 };

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => $redis->url(), params => 'timeout=250ms', workers => 2));

$t->run_fake_dynamo()->run();

###############################################################################

admit($rep);

# both worker processes connected, and the test's own client

$t->wait_for(sub {
	($redis->cmd('INFO', 'clients') =~ /connected_clients:(\d+)/)[0] >= 3
}, 10);

# room for the test's client and one more; the others are cut off

$redis->cmd('CONFIG', 'SET', 'maxclients', 2);
$redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');

$t->wait_for(sub {
	$t->log_lines('error.log', qr/dynamo rl store: connected to/) >= 3
}, 10);

# generations on fresh connections, spread over both worker processes

my %seen;
my $i = 0;

$t->wait_for(sub {
	my $r = gen($rep, 'mc-' . ++$i);
	$seen{$r->{status} . ' ' . (reason($r) // '-')}++;
	return $i >= 40;
}, 20);

ok($seen{'200 -'}, 'one worker process admits');
ok($seen{'503 store_unavailable'},
	'the other refuses: 503 store_unavailable');

diag(join ', ', map { "$_: $seen{$_}" } sort keys %seen);

my $m = metrics();

isnt($m->{dynamo_rl_store_up}, 1,
	'a worker process refusing every claim: the store is not reported up');
is(status($rep)->{store}{up} ? 1 : 0, 0, 'status: store not up');
cmp_ok($m->{'dynamo_rl_store_operations_total{op="claim",result="unavailable"}'}
	// 0, '>=', 1, 'the refused claims counted: op claim, result unavailable');

$redis->cmd('CONFIG', 'SET', 'maxclients', 10000);

ok(admit($rep)->{status} == 200, 'room again: admits');

# both worker processes connected again: up

$t->wait_for(sub { (metrics()->{dynamo_rl_store_up} // 0) == 1 }, 10);
is(metrics()->{dynamo_rl_store_up}, 1, 'room again: both connected, up');

# a worker process that exited does not count for ever: one cut off
# again, then nginx reloaded with one worker process; the old ones exit,
# and the new one takes the room the old connected one leaves

$redis->cmd('CONFIG', 'SET', 'maxclients', 2);
$redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');

$t->wait_for(sub { (metrics()->{dynamo_rl_store_up} // 1) == 0 }, 10);
is(metrics()->{dynamo_rl_store_up}, 0, 'cut off again: not up');

my @old = $t->worker_pids();

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => $redis->url(), params => 'timeout=250ms', workers => 1));
$t->reload();

$t->wait_for(sub { !grep { kill 0, $_ } @old }, 20);
is(scalar(grep { kill 0, $_ } @old), 0, 'reloaded: the old workers exited');

$t->wait_for(sub { (metrics()->{dynamo_rl_store_up} // 0) == 1 }, 10);
is(metrics()->{dynamo_rl_store_up}, 1,
	'the one worker process connected: up, the exited ones not counted');

$redis->cmd('CONFIG', 'SET', 'maxclients', 10000);

###############################################################################
