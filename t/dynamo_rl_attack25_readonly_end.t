#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: a demoted primary answers a record's end with -READONLY.  The
# module leaves the connection, as documented ("a -READONLY reply (a
# demoted primary) drops the connection and finds the primary anew"), but
# the write that got the -READONLY is thrown away, although the store
# said plainly that it did not run it; the writes a lost connection had
# not seen answered go back to the pending queue and are sent on the next
# connection.  The record then stays "streaming" in the store for as long
# as the worker process lives (its heartbeat renews the lease of its
# records in flight): the attempts API never tells the attempt's end.
#
# Here the primary is demoted and promoted again by hand (REPLICAOF), the
# record surviving both ways; with Sentinel, the end reaches the demoted
# primary before the sentinels reconfigure it, the same way.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit start /;
use Test::DynamoRL::Redis qw/ replica_conf gen admit store_key wait_done /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5);

my $p = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $r = Test::DynamoRL::Redis->new($t, port => 8389,
	args => [ '--replicaof', '127.0.0.1', $p->port() ])->start();

my %A = (name => 'A', listen => 8080, api => 8070);

# a long heartbeat: the record's end is the first write after the demotion

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $p->url(),
	params => 'timeout=250ms heartbeat=20s lease=1h'));

$t->run_fake_dynamo()->run();

###############################################################################

$t->wait_for(sub {
	$r->cmd('INFO', 'replication') =~ /master_link_status:up/
}, 10);

admit(\%A);

my $key = store_key('a:ro-1');

my $s = start('POST', '/v1/completions', port => $A{listen},
	body => '{"model":"m","prompt":"p","stream":true}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'ro-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 20,
		'x-fake-interval-ms' => 100 ]);

$t->wait_for(sub {
	($r->hgetall($key)->{st} // '') eq 's'
}, 5);
is($r->hgetall($key)->{st}, 's', 'streaming, on the replica too');

# the primary is demoted: the replica takes over, the old primary follows

$r->cmd('REPLICAOF', 'NO', 'ONE');
$p->cmd('REPLICAOF', '127.0.0.1', $r->port());

# the stream ends: its end goes to the demoted primary

my $body = '';
$s->blocking(1);
1 while sysread($s, $body, 65536, length $body);
like($body, qr/\[DONE\]/, 'the stream ended whole');

$t->wait_for(sub {
	$t->log_lines('error.log', qr/dynamo rl store: lost .*read-only/)
}, 5);

# the old primary is promoted again (the record came back from the other)

$t->wait_for(sub {
	($p->cmd('INFO', 'replication') =~ /master_link_status:up/)
}, 10);

$p->cmd('REPLICAOF', 'NO', 'ONE');
$r->cmd('REPLICAOF', '127.0.0.1', $p->port());

is(admit(\%A)->{status}, 200, 'the primary back: admits');

my $a = wait_done(\%A, 'ro-1');
is($a->{state}, 'succeeded', 'the attempt is told succeeded');
is($p->hgetall($key)->{st}, 'u', 'the record ended in the store');

###############################################################################
