#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: a store that is connected but refuses every claim (-OOM:
# maxmemory reached under the recommended "noeviction") makes the request
# plane answer 503 store_unavailable to every generation (as documented),
# yet dynamo_rl_store_up stays 1, so the shipped DynamoRLStoreDown alert
# ("every generation request is refused with 503") never fires, and no
# other rule of the dynamo-rl-store group watches claims refused with an
# error (DynamoRLStoreSlow counts timeouts only).

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

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(9);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379,
	args => [ '--maxmemory-policy', 'noeviction' ])->start();

my $rep = { listen => 8080, api => 8070 };

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => $redis->url(), params => 'timeout=1s'));

$t->run_fake_dynamo()->run();

###############################################################################

is(admit($rep)->{status}, 200, 'the store admits');
is(metrics()->{dynamo_rl_store_up}, 1, 'up while it admits');

# the store is full: every write is refused with -OOM

my $info = $redis->cmd('INFO', 'memory');
my ($mem) = $info =~ /used_memory:(\d+)/;
$redis->cmd('CONFIG', 'SET', 'maxmemory', $mem - 1024);

my @st = map { gen($rep, "oom-$_")->{status} } 1 .. 5;
is(join(',', @st), '503,503,503,503,503', 'every claim refused: 503');

my $m = {};
$t->wait_for(sub {
	$m = metrics();
	return ($m->{dynamo_rl_store_up} // 1) == 0;
}, 5);

is($m->{dynamo_rl_store_up}, 0,
	'the store that refuses every claim is not reported up');

is(reason(gen($rep, 'oom-last')), 'store_unavailable', 'store_unavailable');

# the refusals are counted, and the status does not say "up" either

cmp_ok($m->{'dynamo_rl_store_operations_total{op="claim",result="error"}'}
	// 0, '>=', 5, 'the refused claims counted: op claim, result error');
is(status($rep)->{store}{up} ? 1 : 0, 0, 'status: store not up');

# room again: the next claim is admitted and the store is up again

$redis->cmd('CONFIG', 'SET', 'maxmemory', 0);

is(admit($rep)->{status}, 200, 'room again: admits');

$t->wait_for(sub { (metrics()->{dynamo_rl_store_up} // 0) == 1 }, 5);
is(metrics()->{dynamo_rl_store_up}, 1, 'room again: up');

###############################################################################
