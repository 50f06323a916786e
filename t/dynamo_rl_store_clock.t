#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A wall-clock step during an attempt with the shared store, as
# t/dynamo_rl_clock.t does it in the zone: nginx runs with libfaketime,
# its wall clock read from a file that the test rewrites, CLOCK_MONOTONIC
# left alone; Debian's redis-server, started by the test, keeps its own
# clock.  An SSE attempt of about 2 s, with the clock set an hour back
# while it streams: the record in the store has the attempt's real length
# as duration_ms (not a wrapped difference of two wall-clock readings),
# and "ended" is "started" plus it.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ clock_is faketime raw set_clock step_times
	time_limit /;
use Test::DynamoRL::Redis qw/ admit replica_conf wait_done wait_state /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(9);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my %A = (name => 'A', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => 'redis://127.0.0.1:8379',
	params => 'timeout=' . Test::DynamoRL::scale(1) . 's'
		. ' heartbeat=500ms gate_poll=100ms gate_stale=2s',
	env => [ qw/ FAKETIME_TIMESTAMP_FILE FAKETIME_NO_CACHE
		FAKETIME_DONT_FAKE_MONOTONIC / ]));

# nginx's wall clock only: redis-server was started without it

faketime($t);

$t->run_fake_dynamo()->run();

###############################################################################

ok(clock_is(0, port => $A{api}), 'nginx wall clock: real time to begin with');

# once the replica has created the gate record in the store

is(admit(\%A)->{status}, 200, 'the replica admits');

my $s = http(raw('POST', '/v1/chat/completions',
	body => '{"messages":[{"role":"user","content":"hi"}],'
		. '"stream":true}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'sclock-1',
		'x-fake-scenario' => 'slow',
		'x-fake-events' => 8,
		'x-fake-interval-ms' => 250 ]),
	start => 1, PeerAddr => '127.0.0.1:' . port($A{listen}));

my $t0 = time();

is(wait_state(\%A, 'sclock-1', 'streaming')->{state}, 'streaming',
	'sclock-1: streaming, in the store');

set_clock($t, '-3600');
ok(clock_is(-3600, port => $A{api}), 'nginx wall clock: an hour behind');

my $r = parse_response(http_end($s));
my $real = time() - $t0;
is($r->{status}, 200, 'backward step: sclock-1 answered');

my $a = wait_done(\%A, 'sclock-1');
is($a->{state}, 'succeeded', 'backward step: sclock-1 succeeded');

step_times($a, $real);

###############################################################################
