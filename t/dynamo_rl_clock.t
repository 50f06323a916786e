#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Wall-clock steps (issue 12, defect 8): nginx runs with libfaketime
# (Debian faketime) in LD_PRELOAD, its wall clock read from a file that
# the test rewrites, CLOCK_MONOTONIC left alone
# (FAKETIME_DONT_FAKE_MONOTONIC=1).  Attempt ttls, the gate's lease and
# duration_ms run on the monotonic clock:
#
# - an 11-minute forward step frees no used id within its ttl (a reused
#   id is still refused with 409 and nothing is forwarded), and does not
#   end a 120 s lease;
# - a 71-minute backward step during an attempt gives a duration_ms of the
#   attempt's real length, with "ended" minus "started" equal to it, and
#   does not stretch a 3 s lease, which ends on time;
# - a short ttl still frees an id once it has run out.
#
# Times shown to people stay wall-clock ISO 8601: "time" follows the
# stepped clock; "started" and "lease_expires" are as the wall clock read
# when they were recorded, and "ended" is "started" plus the duration.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ call clock_is faketime json raw rl_test
	set_clock step_times /;

###############################################################################

my $t = rl_test(Test::DynamoRL::scale(120), 24, <<'EOF');

%%RL_MAIN faketime%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND%%
    %%RL_PROXY_KEEPALIVE unbuffered%%

    server {
        %%RL_LISTEN 8080%%

        location /v1/ {
            dynamo_rl_plane request;
            dynamo_rl_attempt_ttl 10m;
            proxy_pass http://frontend;
        }
    }

    server {
        %%RL_LISTEN 8084%%

        location /v1/ {
            dynamo_rl_plane request;
            dynamo_rl_attempt_ttl 2s;
            dynamo_rl_gate off;
            proxy_pass http://frontend;
        }
    }

    %%RL_API_SERVER 8083 attempts gate status%%
}

EOF

# nginx's wall clock only; nginx passes the FAKETIME_* variables to its
# worker processes through "env"

faketime($t);

$t->run_fake_dynamo()->run();

###############################################################################

ok(clock_is(0, port => 8083), 'nginx wall clock: real time to begin with');

# an attempt, finished, within its 10m ttl

my $r = complete('clock-1');
is($r->{status}, 200, 'clock-1: forwarded');

my $a = api('clock-1');
is($a->{state}, 'succeeded', 'clock-1: succeeded');

# a gate closed with a 120 s lease

my $g = gate_post({ action => 'close', reason => 'clock', lease => '120s' });
is($g->{state}, 'closed', 'gate: closed with a 120 s lease');

my $lease_expires = $g->{lease_expires} // 'none';

###############################################################################

# 11 minutes forward

set_clock($t, '+660');
ok(clock_is(660, port => 8083), 'nginx wall clock: 11 minutes ahead');

$g = gate();
is(join(',', $g->{state} // '', $g->{expired} ? 'expired' : 'running'),
	'closed,running', 'forward step: the lease still runs');
cmp_ok($g->{lease_remaining_ms} // 0, '>', 100000,
	'forward step: about 120 s of lease left');
is($g->{lease_expires}, $lease_expires,
	'forward step: lease_expires as the wall clock read at the close');

$g = gate_post({ action => 'open' });
is($g->{state}, 'open', 'gate: opened');

$r = complete('clock-1');
is($r->{status}, 409, 'forward step: a used id within its ttl refused');
is(forwarded('clock-1'), 1, 'forward step: clock-1 forwarded once only');

$a = api('clock-1');
is($a->{state}, 'succeeded', 'forward step: clock-1 still known');

###############################################################################

# an attempt of about 2 s, and a 3 s lease, across 71 minutes backward

my $s = http(raw('POST', '/v1/chat/completions',
	body => '{"messages":[{"role":"user","content":"hi"}],'
		. '"stream":true}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'clock-2',
		'x-fake-scenario' => 'slow',
		'x-fake-events' => 8,
		'x-fake-interval-ms' => 250 ]), start => 1);

my $t0 = time();

ok(Test::DynamoRL::wait_for(sub {
	(api('clock-2')->{state} // '') eq 'streaming'
}, 10), 'clock-2: streaming');

$g = gate_post({ action => 'close', reason => 'clock', lease => '3s' });
my $lease_start = time();
is($g->{state}, 'closed', 'gate: closed with a 3 s lease');

set_clock($t, '-3600');
ok(clock_is(-3600, port => 8083), 'nginx wall clock: an hour behind');

$r = parse_response(http_end($s));
my $real = time() - $t0;
is($r->{status}, 200, 'backward step: clock-2 answered');

$a = api('clock-2');
is($a->{state}, 'succeeded', 'backward step: clock-2 succeeded');

step_times($a, $real);

my $expired = Test::DynamoRL::wait_for(sub { gate()->{expired} }, 15, 0.1);
my $took = time() - $lease_start;

ok($expired && $took < 10, 'backward step: the 3 s lease ended on time ('
	. sprintf('%.1f', $took) . ' s)');

###############################################################################

# a ttl that runs out still frees the id

$r = complete('short-1', port => 8084);
is($r->{status}, 200, 'short ttl: forwarded');

ok(Test::DynamoRL::wait_for(sub {
	call('GET', '/rl/attempts/short-1', port => 8083)->{status} == 404
}, 10), 'short ttl: expired after 2 s');

$r = complete('short-1', port => 8084);
is($r->{status}, 200, 'short ttl: the id is free again');

###############################################################################

sub complete {
	my ($id, %o) = @_;

	return call('POST', '/v1/completions', port => $o{port} // 8080,
		body => '{"prompt":"p","max_tokens":1}',
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);
}

sub forwarded {
	my ($id) = @_;

	return scalar grep {
		my $h = $_->{headers} // {};
		grep { lc($_) eq 'x-dynamo-attempt-id' && ($h->{$_} // '') eq $id }
			keys %$h;
	} @{$t->fake_records('frontend')};
}

sub api {
	my ($id) = @_;

	return json(call('GET', "/rl/attempts/$id", port => 8083));
}

sub gate {
	return json(call('GET', '/rl/gate', port => 8083));
}

sub gate_post {
	my ($data) = @_;

	return json(call('POST', '/rl/gate', port => 8083,
		body => encode_json($data)));
}

###############################################################################
