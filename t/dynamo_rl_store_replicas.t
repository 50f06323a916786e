#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The store with a replica (issue 25), Debian's redis-server started by
# the test: a primary P and a replica R of it, one gateway with wait=1.
#
# - wait=1 with R attached: the claims are forwarded;
# - R detached (REPLICAOF NO ONE): a claim is refused 503
#   store_unavailable, nothing forwarded, one warning naming the replicas
#   that had it, and the id released: the retry once R is back is
#   forwarded; a claim answered NOSCRIPT (SCRIPT FLUSH) passes too;
# - P turned into a replica of R while the gateway runs (a demoted
#   primary): the claims are refused 503 (-READONLY), never forwarded,
#   the gateway drops the connection and reconnects, and does not use P
#   while its ROLE is a replica's; once P is a primary again, the claims
#   pass without a reload.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf status
	store_key store_lines wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(24);

my $p = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $r = Test::DynamoRL::Redis->new($t, port => 8380,
	args => [ '--replicaof', '127.0.0.1', $p->port() ])->start();

my %A = (name => 'A', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $p->url(),
	params => 'wait=1 timeout=' . Test::DynamoRL::scale(1) . 's'
		. ' gate_poll=100ms gate_stale=2s'));
$t->run_fake_dynamo()->run();

###############################################################################

sub replicas {
	my ($server) = @_;

	my $info = $server->cmd('INFO', 'replication');
	my $n = () = ($info // '') =~ /^slave\d+:.*state=online/mg;
	my ($link) = ($info // '') =~ /^master_link_status:(\w+)/m;

	return ($n // 0, $link // '');
}

sub attached {
	return Test::DynamoRL::wait_for(sub { (replicas($p))[0] == 1 }, 10);
}

my ($res, $off);

ok(attached(), 'R is a replica of P');
is(admit(\%A)->{status}, 200, 'the gateway is up');

# wait=1, R attached: forwarded

$res = gen(\%A, 'wait-1');
is($res->{status}, 200, 'wait=1, a replica: 200');
is(forwarded($t, 'wait-1'), 1, 'wait=1, a replica: forwarded');

# R detached: refused, nothing forwarded, released

$r->cmd('REPLICAOF', 'NO', 'ONE');
ok(Test::DynamoRL::wait_for(sub { (replicas($p))[0] == 0 }, 10),
	'R detached');

$off = -s $t->testdir() . '/error.log';

$res = gen(\%A, 'wait-2');
is($res->{status}, 503, 'wait=1, no replica: 503');
is(reason($res), 'store_unavailable', 'wait=1, no replica: store_unavailable');
is(forwarded($t, 'wait-2'), 0, 'wait=1, no replica: nothing forwarded');
is(scalar(grep { /had the claims on 0 of 1 replicas/ }
	store_lines($t, $off, 'warn')), 1, 'wait=1, no replica: one warning');

ok(Test::DynamoRL::wait_for(sub {
	($p->hgetall(store_key('a:wait-2'))->{st} // '') ne 'a' }, 10),
	'wait=1, no replica: the claim released');

# R back: the retry of the same id passes

$r->cmd('REPLICAOF', '127.0.0.1', $p->port());
ok(attached(), 'R attached again');

$res = gen(\%A, 'wait-2');
is($res->{status}, 200, 'wait=1, the replica back: the retry is 200')
	or diag(explain($res));
is(forwarded($t, 'wait-2'), 1, 'wait=1, the replica back: forwarded once');

# the scripts flushed: the claims pass (one answered NOSCRIPT goes again
# as EVAL with a WAIT of its own; the first WAIT's reply finds nothing
# held)

$p->cmd('SCRIPT', 'FLUSH');

$res = gen(\%A, 'wait-3');
is($res->{status}, 200, 'wait=1, NOSCRIPT: 200');
is(forwarded($t, 'wait-3'), 1, 'wait=1, NOSCRIPT: forwarded once');

# P demoted: a replica of R; -READONLY, refused, reconnects

$off = -s $t->testdir() . '/error.log';
my $reconnects = status(\%A)->{store}{reconnects};

$r->cmd('REPLICAOF', 'NO', 'ONE');
$p->cmd('REPLICAOF', '127.0.0.1', $r->port());
ok(Test::DynamoRL::wait_for(sub { (replicas($p))[1] eq 'up' }, 10),
	'P is a replica of R');

$res = gen(\%A, 'ro-1');
is($res->{status}, 503, 'P demoted: 503');
is(forwarded($t, 'ro-1'), 0, 'P demoted: nothing forwarded');

# ROLE: the replica is not used again (no "connected"), nor forwarded to

my $st = wait_status(\%A, sub {
	my $s = $_[0]{store};
	!$s->{up} && $s->{reconnects} >= $reconnects + 3 });
ok(!$st->{store}{up} && $st->{store}{reconnects} >= $reconnects + 3,
	'P demoted: down, its ROLE refused at each reconnect');

$res = gen(\%A, 'ro-3');
is($res->{status}, 503, 'P demoted: 503 again');
is(scalar(grep { /connected to/ } store_lines($t, $off, 'notice')), 0,
	'P demoted: never connected to as a store');

# P a primary again, R its replica: the gateway follows without a reload

$p->cmd('REPLICAOF', 'NO', 'ONE');
$r->cmd('REPLICAOF', '127.0.0.1', $p->port());
attached();

ok(attached(), 'P a primary again, R its replica');

my $last = {};
ok(Test::DynamoRL::wait_for(sub {
	$last = gen(\%A, 'ro-2');
	$last->{status} == 200 }, 10), 'P a primary again: the claims pass')
	or diag(explain($last));
is(scalar(grep { /read-only/ } store_lines($t, $off, 'error')), 1,
	'P a primary again: after one read-only line');

###############################################################################
