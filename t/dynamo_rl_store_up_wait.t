#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: with wait=1 and the store's only replica gone, every claim is
# refused (503 store_unavailable, as documented: "wait=1 makes the store
# unavailable (503) whenever no replica is attached"), yet
# dynamo_rl_store_up stays 1 (the connection to the primary is fine), so
# the shipped DynamoRLStoreDown alert never fires while the request plane
# refuses every generation; no rule of the dynamo-rl-store group watches
# claims refused for want of replicas.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ metrics time_limit forwarded /;
use Test::DynamoRL::Redis qw/ replica_conf reason gen admit status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(8);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $replica = Test::DynamoRL::Redis->new($t, port => 8389,
	args => [ '--replicaof', '127.0.0.1', $redis->port() ])->start();

my $rep = { listen => 8080, api => 8070 };

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => $redis->url(), params => 'timeout=250ms wait=1'));

$t->run_fake_dynamo()->run();

###############################################################################

is(admit($rep)->{status}, 200, 'wait=1 with a replica: admits');

# the only replica goes away

$replica->stop();

$t->wait_for(sub {
	my $r = $redis->cmd('INFO', 'replication');
	return $r =~ /connected_slaves:0/;
}, 10);

my @st = map { gen($rep, "nrep-$_")->{status} } 1 .. 5;
is(join(',', @st), '503,503,503,503,503', 'no replica: every claim 503');
is(reason(gen($rep, 'nrep-6')), 'store_unavailable', 'store_unavailable');
is(scalar(grep { forwarded($t, "nrep-$_") } 1 .. 6), 0, 'none forwarded');

my $m = {};

$t->wait_for(sub {
	$m = metrics();
	return ($m->{dynamo_rl_store_up} // 1) == 0;
}, 5);

is($m->{dynamo_rl_store_up}, 0,
	'a store that refuses every claim (wait=1) is not reported up');

is(reason(gen($rep, 'nrep-7')), 'store_unavailable', 'still refused');

# the refusals are counted, and the status does not say "up" either

cmp_ok($m->{'dynamo_rl_store_operations_total{op="claim",result="error"}'}
	// 0, '>=', 6, 'the refused claims counted: op claim, result error');
is(status($rep)->{store}{up} ? 1 : 0, 0, 'status: store not up');

###############################################################################
