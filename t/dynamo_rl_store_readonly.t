#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A release that meets a demoted primary (issue 25, attack finding 6).  A
# claim runs in the store, but its answer comes after the timeout: 503,
# and a release of the claim is sent, so that the id is not used up.  The
# primary is demoted before the release reaches it: -READONLY, the store
# did not run it.  The connection is dropped and the primary found anew,
# as documented; the release must go to the next primary, not be thrown
# away (the id would be refused for the lease, 1 h).  The replica reaches
# Redis through the test's fake RESP server, which holds the claim's
# answer ("fault-hold-<x>") while the test demotes the primary by hand
# (REPLICAOF), the record surviving both ways.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf resp_proxy
	store_key /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(9);

my $p = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $r = Test::DynamoRL::Redis->new($t, port => 8389,
	args => [ '--replicaof', '127.0.0.1', $p->port() ])->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $p->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %A = (name => 'A', listen => 8080, api => 8070);

# a long heartbeat: the release is the only write after the demotion; the
# stall time (4 x timeout) leaves the test 1.5 s to demote the primary

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => 'redis://127.0.0.1:8390',
	params => 'timeout=500ms heartbeat=20s lease=1h'));

$t->run_fake_dynamo()->run();

###############################################################################

$t->wait_for(sub {
	$r->cmd('INFO', 'replication') =~ /master_link_status:up/
}, 10);

is(admit(\%A)->{status}, 200, 'admits through the fake server');

my $id = 'fault-hold-rel1';
my $key = store_key("a:$id");

# the claim runs, its answer is held: 503 at the timeout, the release sent

my $res = gen(\%A, $id);
is($res->{status} . ' ' . (reason($res) // '-'), '503 store_unavailable',
	'the claim answered late: 503');
is(($p->hgetall($key)->{st} // ''), 'a', 'the claim ran in the store');

# the primary is demoted: the replica takes over, the old primary follows;
# then the held answer goes, and the release after it meets -READONLY

$r->cmd('REPLICAOF', 'NO', 'ONE');
$p->cmd('REPLICAOF', '127.0.0.1', $r->port());

open my $fh, '>', "$PROXY/go-$id" or die "$!\n";
close $fh;

ok($t->wait_for(sub {
	$t->log_lines('error.log', qr/dynamo rl store: lost .*read-only/)
}, 5), 'the release met -READONLY: the connection dropped');

# the old primary is promoted again (the record came back from the other)

$t->wait_for(sub {
	$p->cmd('INFO', 'replication') =~ /master_link_status:up/
}, 10);

$p->cmd('REPLICAOF', 'NO', 'ONE');
$r->cmd('REPLICAOF', '127.0.0.1', $p->port());

is(admit(\%A)->{status}, 200, 'the primary back: admits');

ok($t->wait_for(sub { !$p->has_key($key) }, 5),
	'the release reached the primary: the record is gone');

$res = gen(\%A, $id);
is($res->{status}, 200, 'the id is usable once: 200');
is(forwarded($t, $id), 1, 'forwarded once');

is(gen(\%A, $id)->{status}, 409, 'then used: 409');

###############################################################################
