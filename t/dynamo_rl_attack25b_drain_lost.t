#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25b: an old worker process that drains after a reload never
# reconnects to the store (no retry while exiting).  Its connection is
# lost once (here CLIENT KILL, as a store's restart or a network blip
# would): the new worker process reconnects, the old one does not; its
# own heartbeat in {prefix}:live stops, so the other processes end its
# stream's record as replica_lost while the stream goes on, and its own
# end of the record, kept for a store it no longer talks to, is lost at
# exit.  The attempts API says replica_lost for an attempt that completed.
#
# Expected: the record streaming while the stream lasts, then succeeded (the
# old worker process reconnects to write what it owes, as it does before
# it exits); observed: replica_lost while still streaming, and after.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit forwarded start attempt_record
	read_until /;
use Test::DynamoRL::Redis qw/ replica_conf admit /;

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

# a 20 s stream in flight in the worker process, then a reload: it drains

my $s = start('POST', '/v1/completions', port => 8080,
	body => '{"prompt":"p"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'lost-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 100 ]);
$t->wait_for(sub { forwarded($t, 'lost-1') }, 10);

my @old = $t->worker_pids();

$t->reload();

$t->wait_for(sub {
	my @p = $t->worker_pids();
	return @p && !grep { my $o = $_; grep { $_ == $o } @p } @old;
}, 10);

# every connection to the store is lost once

$redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal');

is(admit($rep)->{status}, 200, 'the new worker process admits again');

# a few seconds on (the silence is 6 heartbeats, 3 s), still streaming

my $rec = {};
$t->wait_for(sub {
	$rec = attempt_record('lost-1');
	return ($rec->{state} // '') ne 'streaming';
}, 8);

ok(kill(0, @old), 'the old worker process still streams');
is($rec->{state}, 'streaming', 'the record streaming while it streams')
	or diag(explain($rec));

# the stream ends, the old worker process exits

my $body = read_until($s, qr/\[DONE\]|0\r\n\r\n/, 40);
$t->wait_for(sub { !kill(0, @old) }, 30);

like($body, qr/\[DONE\]/, 'the client got the whole stream');

$rec = attempt_record('lost-1');
is($rec->{state}, 'succeeded', 'the stream completed: the record succeeded')
	or diag(explain($rec));

close $s if $s;

###############################################################################
