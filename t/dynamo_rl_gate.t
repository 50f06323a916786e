#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the refresh gate, through nginx to the fake Dynamo frontend,
# with two worker processes: the state the gate API reports; close with a
# reason and a lease while a stream is in flight (new requests get 503
# with Retry-After in the flat shape and are never recorded nor
# forwarded, the stream finishes, in_flight drains to exactly 0), open;
# the epoch on every change; lease expiry (fail closed, in the gate API,
# status and metrics) and renew; in_flight back to exactly 0 after every
# kind of end; both worker processes see one gate; bad bodies, methods,
# and a reload that keeps the gate.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call flat forwarded
	frontend_records is_false is_true iso_ms metrics raw read_until resp
	rl_test start /;

###############################################################################

my $t = rl_test(300, 255, <<'EOF');

%%RL_MAIN workers=2 connections=1024%%

http {
    %%RL_HTTP 1m%%

    %%RL_LOG_FORMAT rl attempt deny outcome status pid port uri%%

    %%RL_FRONTEND 8%%

    %%RL_PROXY_KEEPALIVE unbuffered%%

    # rollout clients; on 8073 the kernel spreads the connections over
    # both worker processes

    server {
        %%RL_LISTEN 8080 8073 reuseport%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_REQUEST_PLANE%%

        # nothing listens there

        location /down/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8072/v1/;
        }

        %%RL_NOT_FOUND%%
    }

    # trusted network

    server {
        %%RL_LISTEN 8070 8074 reuseport%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_APIS%%
    }
}

EOF

$t->run_fake_dynamo()->run();

my $ACCESS_LOG = $t->testdir() . '/rl.log';

###############################################################################

my $ISO = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}$/x;

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my ($r, $g, $s, $buf, $epoch, $t0);

###############################################################################

# the state of a fresh zone: every field

$r = gate_get();
$g = $r->{json};

is($r->{status}, 200, 'GET: status');
is($r->{headers}{'content-type'}, 'application/json', 'GET: content type');
ok(ref $g eq 'HASH', 'GET: a JSON object') or diag($r->{body});
ok(!grep({ !exists $g->{$_} } qw/ state reason epoch in_flight
	lease_expires expired /), 'GET: state, reason, epoch, in_flight,'
	. ' lease_expires, expired')
	or diag($r->{body});
is($g->{state}, 'open', 'GET: state open');
ok(exists $g->{reason} && !defined $g->{reason}, 'GET: reason null');
like($g->{epoch}, qr/^\d+$/, 'GET: epoch an integer');
is($g->{in_flight}, 0, 'GET: in_flight 0');
ok(exists $g->{lease_expires} && !defined $g->{lease_expires},
	'GET: lease_expires null');
ok(is_false($g->{expired}), 'GET: expired false');

$epoch = $g->{epoch};

$r = call('HEAD', '/rl/gate', port => 8070);
is($r->{status}, 200, 'HEAD: status');
is($r->{body}, '', 'HEAD: no body');

# the gate is open: requests pass

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'before-close' ]);
is($r->{status}, 200, 'open: request passes');
is(drained(), 0, 'open: in_flight back to 0');

###############################################################################

# close while a stream is in flight

$s = start('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 10,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'drain-stream' ]);

$buf = read_until($s, qr/data: \{/, 10);
like($buf, qr/^HTTP\/1\.1 200 .*data: \{/s, 'drain: the stream started');

$t0 = time();
$r = gate_post({ action => 'close', reason => 'weights v2', lease => '120s' });
$g = $r->{json};

is($r->{status}, 200, 'close: status');
is($g->{state}, 'closed', 'close: state closed');
is($g->{reason}, 'weights v2', 'close: reason');
is($g->{epoch}, $epoch + 1, 'close: epoch + 1');
like($g->{lease_expires}, $ISO, 'close: lease_expires');
ok(abs((iso_ms($g->{lease_expires}) // 0) - ($t0 + 120) * 1000) < 3000,
	'close: lease_expires 120 s from now')
	or diag($g->{lease_expires});
ok(is_false($g->{expired}), 'close: not expired');
cmp_ok($g->{in_flight}, '>=', 1, 'close: the stream in flight');

$epoch = $g->{epoch};

$g = gate();
is($g->{state}, 'closed', 'closed: GET state');
is($g->{epoch}, $epoch, 'closed: GET epoch');
is(join(' ', map { metrics()->{qq/dynamo_rl_gate_state{state="$_"}/} // '-' }
	qw/ open closed expired /), '0 1 0', 'closed: gate state closed');
cmp_ok($g->{in_flight}, '>=', 1, 'closed: in_flight >= 1 while it streams');

# new requests: 503 in the flat shape, Retry-After, the attempt id; never
# recorded, never forwarded

for my $case ([ 'gated-1', '/v1/completions', $BODY ],
	[ 'gated-2', '/v1/chat/completions', $CHAT ])
{
	my ($id, $uri, $body) = @$case;

	$r = call('POST', $uri, body => $body,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);

	is($r->{status}, 503, "$id: 503");
	is($r->{headers}{'content-type'}, 'application/json',
		"$id: content type");
	ok(flat($r, 503, 'Service Unavailable'), "$id: flat body")
		or diag($r->{body});
	like($r->{headers}{'retry-after'} // '', qr/^[1-9]\d*$/,
		"$id: Retry-After in seconds");
	cmp_ok($r->{headers}{'retry-after'} // 999, '<=', 120,
		"$id: Retry-After within the lease");
	is($r->{headers}{'x-dynamo-attempt-id'}, $id, "$id: attempt id");
	is(api($id)->{status}, 404, "$id: not in the ledger");
	is(forwarded($t, $id), 0, "$id: not forwarded");
}

# a minted id: the same

$r = call('POST', '/v1/completions', body => $BODY);
my $minted = $r->{headers}{'x-dynamo-attempt-id'};

is($r->{status}, 503, 'gated minted: 503');
like($minted, $UUID7, 'gated minted: attempt id');
is(api($minted // 'none')->{status}, 404, 'gated minted: not in the ledger');

# the stream finishes normally, then the drain completes

cmp_ok(gate()->{in_flight}, '>=', 1, 'drain: still in flight');

$buf .= read_until($s, undef, 15);
close $s;

$r = parse_response($buf) // {};
like($r->{body}, qr/data: \[DONE\]\n\n\z/, 'drain: stream ended with [DONE]');
is(scalar(() = $r->{body} =~ /^data: \{/mg), 10, 'drain: all ten events');

is(wait_done('drain-stream')->{state}, 'succeeded', 'drain: succeeded');
is(drained(), 0, 'drain: in_flight drains to exactly 0');
is(gate()->{state}, 'closed', 'drain: the gate stays closed');

# open: requests pass again

$r = gate_post({ action => 'open' });
$g = $r->{json};

is($r->{status}, 200, 'open: status');
is($g->{state}, 'open', 'open: state');
ok(!defined $g->{reason}, 'open: reason null');
ok(!defined $g->{lease_expires}, 'open: lease_expires null');
ok(is_false($g->{expired}), 'open: expired false');
is($g->{epoch}, $epoch + 1, 'open: epoch + 1');

$epoch = $g->{epoch};

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'after-open' ]);
is($r->{status}, 200, 'after open: request passes');
is(forwarded($t, 'after-open'), 1, 'after open: forwarded');
is(wait_done('after-open')->{state}, 'succeeded', 'after open: recorded');
is(drained(), 0, 'after open: in_flight 0');

###############################################################################

# the epoch moves on every change: close, renew, close again, open

$r = gate_post({ action => 'close', reason => 'e1', lease => '10m' });
is($r->{json}{epoch}, $epoch + 1, 'epoch: close');
$r = gate_post({ action => 'renew' });
is($r->{json}{epoch}, $epoch + 2, 'epoch: renew');
$r = gate_post({ action => 'close', reason => 'e2' });
is($r->{json}{epoch}, $epoch + 3, 'epoch: close again');
is($r->{json}{reason}, 'e2', 'epoch: close again, new reason');
ok(!defined $r->{json}{lease_expires}, 'epoch: close again, no lease');
$r = gate_post({ action => 'open' });
is($r->{json}{epoch}, $epoch + 4, 'epoch: open');
is(gate()->{epoch}, $epoch + 4, 'epoch: GET agrees');

$epoch += 4;

# a reason of exactly 128 bytes is accepted

$r = gate_post({ action => 'close', reason => 'r' x 128 });
is($r->{status}, 200, 'reason 128 bytes: accepted');
is($r->{json}{reason}, 'r' x 128, 'reason 128 bytes: kept');
$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

# a reason is JSON text: quotes, backslashes, UTF-8 come back unchanged

my $odd = "a \"q\" \\ \x{e9}\x{4e2d} </b>";

$r = gate_post({ action => 'close', reason => $odd });
is($r->{json}{reason}, $odd, 'reason with quotes and UTF-8: round trip');
is(gate()->{reason}, $odd, 'reason with quotes and UTF-8: GET');
$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

###############################################################################

# lease expiry: the gate stays closed, "expired": true everywhere

$r = gate_post({ action => 'close', reason => 'short lease', lease => '1s' });
is($r->{status}, 200, 'lease 1s: closed');
ok(is_false($r->{json}{expired}), 'lease 1s: not yet expired');

my $first_expiry = iso_ms($r->{json}{lease_expires}) // 0;

$g = Test::DynamoRL::wait_for(sub {
	my $x = gate();
	return is_true($x->{expired}) ? $x : undef;
}, 10) // {};

ok(is_true($g->{expired}), 'lease 1s: expired true');
is($g->{state}, 'closed', 'lease 1s: still closed');
is($g->{reason}, 'short lease', 'lease 1s: reason kept');
is(iso_ms($g->{lease_expires} // ''), $first_expiry,
	'lease 1s: lease_expires unchanged');
is($g->{epoch}, $epoch + 1, 'lease 1s: expiry is not a change of epoch');

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'gated-expired' ]);
is($r->{status}, 503, 'expired: requests still 503');
ok(flat($r, 503, 'Service Unavailable'), 'expired: flat body');
like($r->{headers}{'retry-after'} // '', qr/^[1-9]\d*$/,
	'expired: Retry-After');
is(forwarded($t, 'gated-expired'), 0, 'expired: not forwarded');
is(api('gated-expired')->{status}, 404, 'expired: not recorded');

$r = call('GET', '/rl/status', port => 8070);
my $st = eval { decode_json($r->{body}) } // {};
ok(is_true($st->{gate}{expired}), 'expired: true in status');
is($st->{gate}{state}, 'closed', 'expired: closed in status');

my $m = metrics();
is($m->{dynamo_rl_gate_lease_expired}, 1, 'expired: 1 in metrics');
is($m->{dynamo_rl_gate_closed}, 1, 'expired: closed in metrics');
is(join(' ', map { $m->{qq/dynamo_rl_gate_state{state="$_"}/} // '-' }
	qw/ open closed expired /), '0 0 1', 'expired: gate state expired');

# renew after expiry: not expired, the lease moves on

$t0 = time();
$r = gate_post({ action => 'renew' });
$g = $r->{json};

is($r->{status}, 200, 'renew: status');
is($g->{state}, 'closed', 'renew: still closed');
ok(is_false($g->{expired}), 'renew: expired false');
cmp_ok(iso_ms($g->{lease_expires} // '') // 0, '>', $first_expiry,
	'renew: lease_expires moved');
ok(abs((iso_ms($g->{lease_expires} // '') // 0) - ($t0 + 1) * 1000) < 1500,
	'renew: one more lease from now');
is($g->{epoch}, $epoch + 2, 'renew: epoch + 1');
is($g->{reason}, 'short lease', 'renew: reason kept');

# renew with a new lease

$t0 = time();
$r = gate_post({ action => 'renew', lease => '120s' });
$g = $r->{json};

is($r->{status}, 200, 'renew 120s: status');
ok(is_false($g->{expired}), 'renew 120s: expired false');
ok(abs((iso_ms($g->{lease_expires} // '') // 0) - ($t0 + 120) * 1000) < 3000,
	'renew 120s: lease_expires 120 s from now');
is($g->{epoch}, $epoch + 3, 'renew 120s: epoch + 1');
ok(is_false(gate()->{expired}), 'renew 120s: GET not expired');

$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

# renew on an open gate, and without any lease: 400, nothing changes

$r = gate_post({ action => 'renew' }, case => 'renew-open');
bad_body('renew on open', $r, 'renew-open');
is(gate()->{epoch}, $epoch, 'renew on open: epoch unchanged');
is(gate()->{state}, 'open', 'renew on open: still open');

gate_post({ action => 'close', reason => 'no lease' });
$epoch++;

$r = gate_post({ action => 'renew' }, case => 'renew-no-lease');
bad_body('renew without a lease', $r, 'renew-no-lease');
$g = gate();
is($g->{epoch}, $epoch, 'renew without a lease: epoch unchanged');
ok(!defined $g->{lease_expires}, 'renew without a lease: still no lease');

$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

###############################################################################

# in_flight returns to exactly 0 after every kind of end

# success

$r = call('POST', '/v1/completions', body => $BODY);
is($r->{status}, 200, 'end success: 200');
is(drained(), 0, 'end success: in_flight 0');

# upstream 503

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'status-503' ]);
is($r->{status}, 503, 'end upstream 503: 503');
ok(!exists $r->{headers}{'retry-after'}, 'end upstream 503: not the gate');
is(drained(), 0, 'end upstream 503: in_flight 0');

# the client goes away in the middle of a stream

$s = start('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'abort-stream' ]);

like(read_until($s, qr/data: \{/, 10), qr/data: \{/, 'end abort: streaming');
cmp_ok(gate()->{in_flight}, '>=', 1, 'end abort: in flight');
close $s;

is(wait_done('abort-stream')->{state}, 'canceled', 'end abort: canceled');
is(drained(), 0, 'end abort: in_flight 0');

# the client goes away before the response header

$s = start('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'hang',
		'X-Dynamo-Attempt-Id' => 'abort-hang' ]);

ok(Test::DynamoRL::wait_for(sub { forwarded($t, 'abort-hang') }, 10),
	'end abort before header: forwarded');
cmp_ok(gate()->{in_flight}, '>=', 1, 'end abort before header: in flight');
close $s;

is(wait_done('abort-hang')->{state}, 'canceled',
	'end abort before header: canceled');
is(drained(), 0, 'end abort before header: in_flight 0');

# upstream down

$r = call('POST', '/down/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'down-1' ]);
is($r->{status}, 502, 'end upstream down: 502');
is(drained(), 0, 'end upstream down: in_flight 0');

# 409: an id used before

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'after-open' ]);
is($r->{status}, 409, 'end duplicate: 409');
is(drained(), 0, 'end duplicate: in_flight 0');

# 400: a bad attempt id

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'bad id' ]);
is($r->{status}, 400, 'end bad id: 400');
is(drained(), 0, 'end bad id: in_flight 0');

# 405

$r = call('DELETE', '/v1/completions');
is($r->{status}, 405, 'end 405: 405');
is(drained(), 0, 'end 405: in_flight 0');

# 503 from the gate

gate_post({ action => 'close', reason => 'end-gate' });

$r = call('POST', '/v1/completions', body => $BODY);
is($r->{status}, 503, 'end gate 503: 503');
is(drained(), 0, 'end gate 503: in_flight 0');

$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

# several at once, of every kind

{
	my @s = (
		start('POST', '/v1/completions', body => $BODY),
		start('POST', '/v1/completions', body => $BODY,
			headers => [ 'x-fake-scenario' => 'status-503' ]),
		start('POST', '/down/completions', body => $BODY),
		start('POST', '/v1/completions', body => $BODY,
			headers => [ 'X-Dynamo-Attempt-Id' => 'after-open' ]),
		start('POST', '/v1/completions', body => $BODY,
			headers => [ 'X-Dynamo-Attempt-Id' => 'a b' ]),
		start('PUT', '/v1/completions', body => $BODY),
		start('POST', '/v1/completions', body => $BODY,
			headers => [ 'x-fake-scenario' => 'slow',
				'x-fake-events' => 3,
				'x-fake-interval-ms' => 100 ]),
	);

	my @st = map { (parse_response(http_end($_)) // {})->{status} // 0 } @s;
	is("@st", '200 503 502 409 400 405 200', 'mixed: statuses');
	is(drained(), 0, 'mixed: in_flight 0');
}

###############################################################################

# two worker processes see one gate

$r = gate_post({ action => 'close', reason => 'two workers', lease => '60s' });
$epoch = $r->{json}{epoch};

{
	my @s = map { start('POST', "/v1/completions?w=$_", body => $BODY,
		port => 8073, headers => [ 'X-Dynamo-Attempt-Id' => "w2-$_" ]) }
		1 .. 40;

	my @st = map { (parse_response(http_end($_)) // {})->{status} // 0 } @s;

	is(scalar(grep { $_ == 503 } @st), 40, 'two workers: all 40 got 503');
	is(scalar(grep { forwarded($t, "w2-$_") } 1 .. 40), 0,
		'two workers: none forwarded');

	my @lines = wait_log(sub { $_[0]{uri} =~ /\?w=\d+$/ }, 40);
	my %pids = map { $_->{pid} => 1 } @lines;

	is(scalar @lines, 40, 'two workers: 40 logged');
	is(scalar(grep { $_->{deny} eq 'gate_closed' } @lines), 40,
		'two workers: all refused by the gate');
	cmp_ok(scalar keys %pids, '>=', 2,
		'two workers: both processes refused');

	# the gate API as each process sees it

	@s = map { http("GET /rl/gate?p=$_ HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\n\r\n", start => 1,
		PeerAddr => '127.0.0.1:' . port(8074)) } 1 .. 20;

	my @g = map { eval { decode_json((parse_response(http_end($_))
		// {})->{body}) } // {} } @s;

	is(scalar(grep { ($_->{state} // '') eq 'closed'
		&& ($_->{epoch} // -1) == $epoch
		&& ($_->{reason} // '') eq 'two workers' } @g), 20,
		'two workers: every GET the same state and epoch');

	@lines = wait_log(sub { $_[0]{uri} =~ /^\/rl\/gate\?p=\d+$/ }, 20);
	%pids = map { $_->{pid} => 1 } @lines;
	cmp_ok(scalar keys %pids, '>=', 2,
		'two workers: both processes answered');
}

is(drained(), 0, 'two workers: in_flight 0');

$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

{
	my @s = map { start('POST', "/v1/completions?o=$_", body => $BODY,
		port => 8073) } 1 .. 20;
	my @st = map { (parse_response(http_end($_)) // {})->{status} // 0 } @s;

	is(scalar(grep { $_ == 200 } @st), 20, 'two workers: open, all 200');
}

is(drained(), 0, 'two workers open: in_flight 0');

###############################################################################

# bad bodies: 400 bad_body, a reason, one info line, nothing changes

my @bad = (
	[ 'not-json', 'nope' ],
	[ 'truncated', '{"action":"open"' ],
	[ 'duplicate-keys', '{"action":"open","action":"close"}' ],
	[ 'array', '[{"action":"open"}]' ],
	[ 'string', '"open"' ],
	[ 'number', '1' ],
	[ 'unknown-action', '{"action":"toggle"}' ],
	[ 'action-case', '{"action":"Open"}' ],
	[ 'action-number', '{"action":1}' ],
	[ 'no-action', '{"reason":"x"}' ],
	[ 'unknown-member', '{"action":"open","force":true}' ],
	[ 'missing-reason', '{"action":"close"}' ],
	[ 'empty-reason', '{"action":"close","reason":""}' ],
	[ 'reason-number', '{"action":"close","reason":5}' ],
	[ 'reason-129', '{"action":"close","reason":"' . ('x' x 129) . '"}' ],
	[ 'reason-on-open', '{"action":"open","reason":"x"}' ],
	[ 'lease-abc', '{"action":"close","reason":"x","lease":"abc"}' ],
	[ 'lease-0s', '{"action":"close","reason":"x","lease":"0s"}' ],
	[ 'lease-8d', '{"action":"close","reason":"x","lease":"8d"}' ],
	[ 'lease-169h', '{"action":"close","reason":"x","lease":"169h"}' ],
	[ 'lease-negative', '{"action":"close","reason":"x","lease":"-5s"}' ],
	[ 'lease-number', '{"action":"close","reason":"x","lease":120}' ],
	[ 'lease-null', '{"action":"close","reason":"x","lease":null}' ],
	[ 'lease-on-open', '{"action":"open","lease":"10s"}' ],
);

for my $case (@bad) {
	my ($name, $body) = @$case;

	$r = gate_post($body, case => $name);
	bad_body($name, $r, $name);
}

my $BIG = '{"action":"close","reason":"x","pad":"' . ('a' x 5000) . '"}';

# over 4k with a Content-Length: refused before the body is read

$r = gate_post($BIG, case => 'over-4k');

is($r->{status}, 400, 'over-4k: 400');
ok(bad_json($r), 'over-4k: {"error":"bad_body","message":...}')
	or diag($r->{body});

is(info_lines('over-4k'), 1, 'over-4k: one info line');

# over 4k without a Content-Length: the body is read, then refused

$r = raw_gate("Transfer-Encoding: chunked\r\n\r\n" . chunked($BIG),
	'over-4k-chunked');
bad_body('over-4k-chunked', $r, 'over-4k-chunked');

# an empty body, with a Content-Length of 0 or chunked: not JSON either

{
	my $off = -s $t->testdir() . '/error.log';

	$r = gate_post('', case => 'empty');
	bad_body('empty', $r, 'empty');

	$r = raw_gate("Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		'empty-chunked');
	bad_body('empty-chunked', $r, 'empty-chunked');

	# the master logs a crash once it reaped the process

	my @crashed = crashes_since($off, 2);
	is(scalar @crashed, 0,
		'empty bodies: no worker process crashed')
		or diag(join "\n", @crashed);

}

# nothing above changed the gate

$g = gate();
is($g->{state}, 'open', 'bad bodies: still open');
is($g->{epoch}, $epoch, 'bad bodies: epoch unchanged');

# exactly 4k is fine

my $exact = '{"action":"close","reason":"4k"}';
$exact .= ' ' x (4096 - length $exact);

$r = gate_post($exact, case => 'exactly-4k');
is($r->{status}, 200, 'exactly 4k: accepted');
is($r->{json}{state}, 'closed', 'exactly 4k: closed');

$r = gate_post({ action => 'open' });
$epoch = $r->{json}{epoch};

# other methods

for my $method (qw/ PUT DELETE PATCH /) {
	$r = call($method, "/rl/gate?m=$method", port => 8070,
		body => '{"action":"close","reason":"x"}');
	$r->{json} = eval { decode_json($r->{body}) } // {};

	is($r->{status}, 405, "$method: 405");
	is($r->{headers}{allow}, 'GET, HEAD, POST', "$method: Allow");
	is($r->{json}{error}, 'method', "$method: JSON error");
}

is(gate()->{epoch}, $epoch, 'methods: epoch unchanged');

###############################################################################

# the gate survives a reload

$r = gate_post({ action => 'close', reason => 'across reload',
	lease => '10m' });
$g = $r->{json};

$t->reload();

my $after = gate();

is($after->{state}, 'closed', 'reload: still closed');
is($after->{epoch}, $g->{epoch}, 'reload: same epoch');
is($after->{reason}, 'across reload', 'reload: same reason');
is($after->{lease_expires}, $g->{lease_expires}, 'reload: same lease');

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'after-reload' ]);
is($r->{status}, 503, 'reload: requests 503');
is(forwarded($t, 'after-reload'), 0, 'reload: not forwarded');

$r = gate_post({ action => 'open' });
is($r->{json}{epoch}, $g->{epoch} + 1, 'reload: open, epoch + 1');

$r = call('POST', '/v1/completions', body => $BODY);
is($r->{status}, 200, 'reload: open, request passes');
is(drained(), 0, 'reload: in_flight 0');




sub chunked {
	my ($data) = @_;

	my $out = '';

	while (length $data) {
		my $part = substr($data, 0, 1000, '');
		$out .= sprintf("%x\r\n%s\r\n", length $part, $part);
	}

	return "${out}0\r\n\r\n";
}

sub gate_get {
	my $r = call('GET', '/rl/gate', port => 8070);
	$r->{json} = eval { decode_json($r->{body}) };
	return $r;
}

sub gate {
	return gate_get()->{json} // {};
}

# POST to the gate API: a hash is encoded, a string is sent as it is

sub gate_post {
	my ($data, %o) = @_;

	my $body = ref $data ? JSON::PP->new->utf8->canonical->encode($data)
		: $data;
	my $uri = '/rl/gate' . (defined $o{case} ? "?case=$o{case}" : '');

	my $r = call('POST', $uri, port => 8070, body => $body);
	$r->{json} = eval { decode_json($r->{body}) };

	return $r;
}

# a POST to the gate API with these headers and body, sent as they are

sub raw_gate {
	my ($rest, $case) = @_;

	my $r = resp(http("POST /rl/gate?case=$case HTTP/1.1\r\n"
		. "Host: localhost\r\nConnection: close\r\n"
		. "Content-Type: application/json\r\n$rest",
		PeerAddr => '127.0.0.1:' . port(8070)));
	$r->{json} = eval { decode_json($r->{body}) };

	return $r;
}

# a refused gate request, checked in full

sub bad_body {
	my ($name, $r, $case) = @_;

	is($r->{status}, 400, "$name: 400");
	ok(bad_json($r), "$name: {\"error\":\"bad_body\",\"message\":...}")
		or diag($r->{body});
	is(info_lines($case), 1, "$name: one info line");
}

sub bad_json {
	my ($r) = @_;

	my $j = $r->{json};

	return ref $j eq 'HASH' && join(',', sort keys %$j) eq 'error,message'
		&& ($j->{error} // '') eq 'bad_body'
		&& !ref $j->{message} && length($j->{message} // '')
		&& ($r->{headers}{'content-type'} // '') eq 'application/json';
}

sub info_lines {
	my ($case) = @_;

	my $re = qr/\[info\] .*dynamo rl gate: .*/
		. qr/"POST \/rl\/gate\?case=\Q$case\E /;

	return scalar(() = $t->log_lines('error.log', $re));
}

# "exited on signal" lines of error.log after $off, waiting up to $secs

sub crashes_since {
	my ($off, $secs) = @_;

	my @lines;

	Test::DynamoRL::wait_for(sub {
		open my $fh, '<', $t->testdir() . '/error.log' or return;
		seek($fh, $off, 0);
		@lines = grep { /exited on signal/ } <$fh>;
		chomp @lines;
		return scalar @lines;
	}, $secs);

	return @lines;
}



# polls until the record is in a terminal state, or is not there

sub wait_done {
	my ($id) = @_;

	my $a = {};

	Test::DynamoRL::wait_for(sub {
		my $r = api($id);
		$a = $r->{status} == 200 ? $r->{json}
			: { http => $r->{status} };
		return ($a->{state} // '') !~ /^(?:accepted|streaming)$/;
	}, 10);

	return $a;
}

# in_flight once it reached 0, or its last value after 10 s: the log
# phase runs when the connection is done, after a lingering close

sub drained {
	my $n;

	Test::DynamoRL::wait_for(sub {
		$n = gate()->{in_flight};
		return defined $n && $n == 0;
	}, 10);

	return $n;
}



sub access_log {
	open my $fh, '<', $ACCESS_LOG or return ();
	return map { decode_json($_) } grep { /\S/ } <$fh>;
}

# waits until $n access-log lines match, returns them

sub wait_log {
	my ($match, $n) = @_;

	my @lines;

	Test::DynamoRL::wait_for(sub {
		@lines = grep { $match->($_) } access_log();
		return @lines >= $n;
	}, 10);

	return @lines;
}

###############################################################################
