#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# dynamo_rl_ready, a readiness probe that knows the store (issue 25).
# Replica S (dynamo_rl_store, two worker processes) starts while its
# store, Debian's redis-server, is not running:
#
# - the old probe, a location with "return 200", says ready at once,
#   while a generation request gets 503 and is not forwarded: traffic
#   sent in that window fails; dynamo_rl_ready answers 503 store_down;
# - redis-server starts: dynamo_rl_ready answers 200 (polled), and
#   generation is admitted;
# - a closed gate leaves the replica ready (generation gets 503
#   gate_closed from every replica alike);
# - redis-server stops: dynamo_rl_ready answers 503 store_down within
#   $LOST seconds, and generation gets 503 again;
# - 405 with Allow for POST, HEAD, and HTTP/2.
#
# Replica Z (no store, two worker processes) is ready from the start,
# closed gate or not.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ call curl_response forwarded json is_true
	is_false rl_conf time_limit /;
use Test::DynamoRL::Redis qw/ gen reason /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy http_v2/)->plan(50);
my $tz = Test::DynamoRL->new()->check_at_end();

# the store is set up, not started

my $redis = Test::DynamoRL::Redis->new($t, port => 8379);

# how long a lost store may take to show (its connection closes at once)

my $LOST = 2;

# and a store that hangs: gate_stale and a second

my $HUNG = 3;

# when the last wait_ready() first saw its status

my $FIRST;

my $PARAMS = 'timeout=250ms heartbeat=250ms gate_poll=100ms gate_stale=2s';

$t->write_file_expand('nginx.conf',
	conf(8080, 8070, 8075, "dynamo_rl_store redis://127.0.0.1:8379"
		. " replica=S $PARAMS;"));
$t->run_fake_dynamo()->run();

$tz->write_file_expand('nginx.conf', conf(8180, 8170, 8175, ''));
$tz->run();

my %S = (listen => 8080, api => 8070);
my %Z = (listen => 8180, api => 8170);

###############################################################################

# no store: ready from the start, the gate open

{
	my $r = ready(\%Z);
	is($r->{status}, 200, 'no store: ready');
	is_deeply(json($r), { ready => JSON::PP::true, store => JSON::PP::false,
		gate => 'open' }, 'no store: the body');
	is($r->{headers}{'content-type'}, 'application/json',
		'no store: JSON');
}

# the store not running yet: the old probe passes traffic that fails

{
	my $r = call('GET', '/healthz', port => $S{api});
	is($r->{status}, 200, 'store not started: "return 200" says ready');

	$r = gen(\%S, 'early-1');
	is($r->{status}, 503, 'store not started: generation gets 503');
	is(reason($r), 'store_unavailable', 'store not started: the reason');
	is(forwarded($t, 'early-1'), 0, 'store not started: not forwarded');

	$r = ready(\%S);
	is($r->{status}, 503, 'store not started: not ready');
	is(json($r)->{error}, 'store_down', 'store not started: store_down');
	like(json($r)->{message}, qr/not connected to the shared store/,
		'store not started: the message');
	is($r->{headers}{'retry-after'}, 1, 'store not started: Retry-After');

	is(scalar(grep { $_ != 503 } map { ready(\%S)->{status} } 1 .. 10), 0,
		'store not started: no worker process ready');
}

# the store starts: ready, on every worker process, and generation admitted

$redis->start();

my $start = time();

ok(wait_ready(\%S, 200), 'store started: ready');
note(sprintf('ready %.2fs after the store started (10 in a row %.2fs)',
	$FIRST - $start, time() - $start));

{
	my $r = ready(\%S);
	my $j = json($r);

	is($r->{status}, 200, 'store up: 200');
	ok(is_true($j->{ready}) && is_true($j->{store}), 'store up: the body');
	is($j->{gate}, 'open', 'store up: the gate open');
	ok(defined $j->{gate_age_ms} && $j->{gate_age_ms} <= 2000,
		'store up: the gate read within gate_stale');

	$r = gen(\%S, 'up-1');
	is($r->{status}, 200, 'store up: generation admitted');
	is(forwarded($t, 'up-1'), 1, 'store up: forwarded');
}

# a closed gate is the fleet's: the replica stays ready

{
	my $r = call('POST', '/rl/gate', port => $S{api},
		body => '{"action":"close","reason":"refresh","lease":"60s"}');
	is($r->{status}, 200, 'gate: closed');

	my ($closed, $unready) = (0, 0);

	Test::DynamoRL::wait_for(sub {
		my $r = ready(\%S);
		$unready++ if $r->{status} != 200;
		$closed++ if (json($r)->{gate} // '') eq 'closed';
		return $closed >= 10;
	}, 10);

	is($closed, 10, 'gate closed: seen by the probe');
	is($unready, 0, 'gate closed: ready throughout');

	$r = gen(\%S, 'closed-1');
	is($r->{status}, 503, 'gate closed: generation gets 503');
	is(reason($r), 'gate_closed', 'gate closed: the reason');

	$r = call('POST', '/rl/gate', port => $S{api},
		body => '{"action":"open"}');
	is($r->{status}, 200, 'gate: opened');
}

# methods and HTTP/2

{
	my $r = call('POST', '/ready', port => $S{api}, body => '{}');
	is($r->{status}, 405, 'POST: 405');
	is($r->{headers}{allow}, 'GET, HEAD', 'POST: Allow');
	is(json($r)->{error}, 'method', 'POST: the error');

	$r = call('HEAD', '/ready', port => $S{api});
	is($r->{status}, 200, 'HEAD: 200');
	is($r->{body}, '', 'HEAD: no body');

	($r) = curl_response('curl', '-sS', '-i', '--http2-prior-knowledge',
		'http://127.0.0.1:' . port(8075) . '/ready');
	is($r->{status}, 200, 'HTTP/2: 200');
	ok(is_true(json($r)->{ready}), 'HTTP/2: ready');

	($r) = curl_response('curl', '-sS', '-i', '--http2-prior-knowledge',
		'-X', 'DELETE', 'http://127.0.0.1:' . port(8075) . '/ready');
	is($r->{status}, 405, 'HTTP/2: DELETE 405');
}

# a store that hangs (CLIENT PAUSE, the connections stay open): unready
# within gate_stale (2s) and $HUNG in all, ready again once it answers

{
	$redis->pause(6000);
	$start = time();

	my %reasons;

	ok(Test::DynamoRL::wait_for(sub {
		my $r = ready(\%S);
		$reasons{json($r)->{error} // ''}++ if $r->{status} == 503;
		return $r->{status} == 503;
	}, $HUNG), "store paused: unready within ${HUNG}s");
	note(sprintf('unready %.2fs after the store paused: %s',
		time() - $start, join(', ', sort keys %reasons)));

	ok(!grep({ !/^(?:store_down|gate_stale)$/ } keys %reasons),
		'store paused: store_down or gate_stale')
		or diag(join ', ', keys %reasons);

	ok(wait_ready(\%S, 200), 'store paused: ready again after the pause');
}

# the store stops: unready within $LOST seconds, and generation refused

$redis->stop();

$start = time();

ok(wait_ready(\%S, 503, $LOST), "store stopped: unready within ${LOST}s");
note(sprintf('unready %.2fs after the store stopped (10 in a row %.2fs)',
	$FIRST - $start, time() - $start));

{
	my $r = ready(\%S);
	is(json($r)->{error}, 'store_down', 'store stopped: store_down');

	$r = gen(\%S, 'late-1');
	is($r->{status}, 503, 'store stopped: generation gets 503');
	is(forwarded($t, 'late-1'), 0, 'store stopped: not forwarded');

	is(call('GET', '/healthz', port => $S{api})->{status}, 200,
		'store stopped: "return 200" still says ready');
}

# no store: a closed gate leaves it ready too

{
	my $r = call('POST', '/rl/gate', port => $Z{api},
		body => '{"action":"close","reason":"refresh","lease":"60s"}');
	is($r->{status}, 200, 'no store: gate closed');

	$r = ready(\%Z);
	is($r->{status}, 200, 'no store, gate closed: ready');
	is(json($r)->{gate}, 'closed', 'no store, gate closed: shown');
}

# configuration errors, nginx -t

for my $c (
	[ 'without a zone', '', 'location = /r { dynamo_rl_ready; }',
		'"dynamo_rl_ready" directive requires "dynamo_rl_zone" before it' ],
	[ 'after another handler', 'dynamo_rl_zone zone=rl:1m;',
		'location = /r { dynamo_rl_status; dynamo_rl_ready; }',
		'"dynamo_rl_ready" directive is duplicate' ],
	[ 'in server', 'dynamo_rl_zone zone=rl:1m;', 'dynamo_rl_ready;',
		'"dynamo_rl_ready" directive is not allowed here' ],
	[ 'with an argument', 'dynamo_rl_zone zone=rl:1m;',
		'location = /r { dynamo_rl_ready on; }',
		'invalid number of arguments in "dynamo_rl_ready" directive' ])
{
	my ($name, $zone, $server, $want) = @$c;

	my ($code, $out) = $tz->nginx_t(<<"EOF");
%%TEST_GLOBALS%%
events { }
http {
    %%TEST_GLOBALS_HTTP%%
    $zone
    server { listen 127.0.0.1:8090; $server }
}
EOF

	ok($code != 0 && index($out, $want) >= 0, "nginx -t: $name")
		or diag($out);
}

###############################################################################

sub ready {
	my ($rep) = @_;
	return call('GET', '/ready', port => $rep->{api});
}

# ten answers in a row with the status, each on a new connection (either
# worker process may take it)

sub wait_ready {
	my ($rep, $status, $seconds) = @_;

	my $n = 0;

	return Test::DynamoRL::wait_for(sub {
		$n = ready($rep)->{status} == $status ? $n + 1 : 0;
		$FIRST = time() if $n == 1;
		return $n >= 10;
	}, $seconds // 10);
}

sub conf {
	my ($listen, $api, $h2, $store) = @_;

	return rl_conf(<<"EOF");

%%RL_MAIN workers=2%%

http {
    %%RL_HTTP 4m%%

    $store

    %%RL_FRONTEND 16%%
    %%RL_PROXY_KEEPALIVE%%

    server {
        %%RL_LISTEN $listen%%

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
        }
    }

    server {
        %%RL_LISTEN $api $h2 http2%%

        location = /healthz {
            return 200;
        }

        location = /ready {
            dynamo_rl_ready;
        }

        %%RL_APIS gate status%%
    }
}

EOF
}

###############################################################################
