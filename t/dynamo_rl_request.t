#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the request plane, through nginx to the fake Dynamo frontend:
# attempt identity (minted UUIDv7, client ids, bad ids never forwarded),
# the upstream header names, routing headers, methods and 405, canonical
# request targets, the embedded variables in an access log, unbuffered
# SSE, X-Accel-* from the frontend, no re-send of a POST, and the close of
# the upstream connection when the client goes away.

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
use Test::DynamoRL::Fixture qw/ call flat frontend_records
	frontend_requests json raw read_until record_with rl_test /;

###############################################################################

my $t = rl_test(300, 284, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_LOG_FORMAT rl attempt plane deny outcome status uri%%

    %%RL_FRONTEND 8%%

    # the same frontend twice: a failed GET goes on to the "next" server

    upstream frontend_twice {
        server 127.0.0.1:8081 max_fails=0;
        server 127.0.0.1:8081 max_fails=0;
        keepalive 8;
    }

    # rollout clients, as in the product's configuration

    server {
        %%RL_LISTEN 8080%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_REQUEST_PLANE keepalive unbuffered%%

        location /secret {
            return 200 "SECRET";
        }

        %%RL_NOT_FOUND%%
    }

    # other attempt header names

    server {
        %%RL_LISTEN 8083%%

        dynamo_rl_attempt_header X-Trace-Id;
        dynamo_rl_attempt_upstream_header off;

        %%RL_REQUEST_PLANE keepalive unbuffered%%

        location /v1/models {
            dynamo_rl_plane request;
            dynamo_rl_attempt_header X-Request-Id;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE unbuffered%%
        }

        location /v1/chat/ {
            dynamo_rl_plane request;
            dynamo_rl_attempt_upstream_header X-Upstream-Id;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE unbuffered%%
        }
    }

    # routing headers kept, and a POST-only location

    server {
        %%RL_LISTEN 8084%%

        location /v1/ {
            dynamo_rl_plane request;
            dynamo_rl_strip_routing_headers off;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE unbuffered%%
        }

        location /v1/completions {
            dynamo_rl_plane request;
            dynamo_rl_methods POST;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE unbuffered%%
        }
    }

    # an upstream nginx would retry on: "error timeout" is the default

    server {
        %%RL_LISTEN 8085%%

        location /v1/ {
            dynamo_rl_plane request;

            proxy_pass http://frontend_twice;
            %%RL_PROXY_KEEPALIVE unbuffered%%
            proxy_next_upstream error timeout;
        }

        location /v1/completions {
            dynamo_rl_plane request;

            proxy_pass http://frontend_twice;
            %%RL_PROXY_KEEPALIVE unbuffered%%
            proxy_next_upstream error timeout non_idempotent;
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

# helpers below read the fake's records through this path, not through $t:
# a named sub that closed over $t would keep it alive past Test::More's
# END check, and the harness's own two tests would then break the plan


###############################################################################

my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}$/x;

my @ROUTING = qw/
	x-dynamo-worker-instance-id X-Dynamo-Prefill-Instance-Id
	X-DYNAMO-DP-RANK x-Dynamo-Prefill-Dp-Rank X-Worker-Instance-Id
	x-PREFILL-instance-id X-Dp-Rank X-DATA-PARALLEL-RANK x-prefill-dp-rank
/;

my $BODY = '{"model":"m","prompt":"hello there"}';

my ($r, $rec, $id, $n);

# minted id: on the response, and upstream under both names

my $t0 = time();
$r = call('POST', '/v1/completions', body => $BODY);
my $t1 = time();

is($r->{status}, 200, 'minted: status');
is(json($r)->{object}, 'text_completion', 'minted: upstream body');
$id = $r->{headers}{'x-dynamo-attempt-id'};
like($id, $UUID7, 'minted: UUIDv7 on the response');
is($r->{headers}{'x-request-id'}, $id, 'minted: frontend echoed x-request-id');

$rec = record_with($t, 'x-dynamo-attempt-id', $id);
ok($rec, 'minted: frontend received x-dynamo-attempt-id');
is($rec->{headers}{'x-request-id'}, $id, 'minted: frontend x-request-id');
is($rec->{uri}, '/v1/completions', 'minted: frontend uri');
is($rec->{body}, $BODY, 'minted: frontend body');

my $ms = uuid_ms($id);
ok($ms >= int(($t0 - 2) * 1000) && $ms <= int(($t1 + 2) * 1000),
	'minted: timestamp within seconds of now');

my $id2 = call('POST', '/v1/completions', body => $BODY)
	->{headers}{'x-dynamo-attempt-id'};
like($id2, $UUID7, 'minted: second id');
isnt($id2, $id, 'minted: two requests, two ids');

# ids minted in one millisecond are still distinct: the requests are
# written on 50 connections at once, so that one event loop iteration
# of the single worker mints many of them

my @ids = burst_ids(50);

is(scalar(grep { defined && /$UUID7/ } @ids), 50, 'burst: 50 UUIDv7 ids');
is(scalar(keys %{{ map { $_ => 1 } grep { defined } @ids }}), 50,
	'burst: all distinct');

my %per_ms;
$per_ms{uuid_ms($_)}++ for grep { defined } @ids;
my ($busiest) = sort { $b <=> $a } values %per_ms;
ok(($busiest // 0) >= 2, 'burst: some ids share a millisecond')
	or diag("ids per millisecond: @{[ sort values %per_ms ]}");

my $now = time() * 1000;
is(scalar(grep { defined && abs(uuid_ms($_) - $now) > 5000 } @ids), 0,
	'burst: timestamps within seconds of now');

# client ids

for my $cid ('abc.DEF_1:2-3', 'a', 'Z' x 128, '0.1:2_3-' x 16) {
	my $name = 'client id ' . (length $cid > 20
		? substr($cid, 0, 8) . '... (' . length($cid) . ' bytes)'
		: $cid);

	$r = call('POST', '/v1/completions', body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => $cid ]);

	is($r->{status}, 200, "$name: status");
	is($r->{headers}{'x-dynamo-attempt-id'}, $cid, "$name: returned");

	$rec = record_with($t, 'x-dynamo-attempt-id', $cid);
	ok($rec, "$name: forwarded unchanged");
	is($rec && $rec->{headers}{'x-request-id'}, $cid,
		"$name: forwarded as x-request-id");
}

# the header name is case-insensitive

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-DYNAMO-attempt-ID' => 'lower-case-1' ]);
is($r->{headers}{'x-dynamo-attempt-id'}, 'lower-case-1',
	'client id: header name in any case');
ok(record_with($t, 'x-request-id', 'lower-case-1'),
	'client id: any case, forwarded');

# bad client ids: 400 in the flat shape, a minted id, one info line, and
# nothing forwarded

my @bad = (
	[ 'empty', [ 'X-Dynamo-Attempt-Id' => '' ] ],
	[ 'too-long', [ 'X-Dynamo-Attempt-Id' => 'a' x 129 ] ],
	[ 'space', [ 'X-Dynamo-Attempt-Id' => 'abc def' ] ],
	[ 'tab', [ 'X-Dynamo-Attempt-Id' => "abc\tdef" ] ],
	[ 'utf8', [ 'X-Dynamo-Attempt-Id' => "abc\xc3\xa9" ] ],
	[ 'latin1', [ 'X-Dynamo-Attempt-Id' => "abc\xe9" ] ],
	[ 'slash', [ 'X-Dynamo-Attempt-Id' => 'a/b' ] ],
	[ 'quote', [ 'X-Dynamo-Attempt-Id' => 'a"b' ] ],
	[ 'two', [ 'X-Dynamo-Attempt-Id' => 'one',
		'X-Dynamo-Attempt-Id' => 'two' ] ],
	[ 'two-cases', [ 'X-Dynamo-Attempt-Id' => 'same',
		'x-dynamo-attempt-id' => 'same' ] ],
);

for my $case (@bad) {
	my ($name, $headers) = @$case;

	$n = frontend_requests($t);

	$r = call('POST', "/v1/completions?case=$name", body => $BODY,
		headers => $headers);

	bad_request("bad id $name", $r, 'minted id on the response');
	is(scalar $t->log_lines('error.log', qr/\[info\] .*dynamo rl: invalid/
		. qr/ client attempt id.*case=$name HTTP/), 1,
		"bad id $name: one info line");
	is(frontend_requests($t), $n, "bad id $name: nothing forwarded");
}

# CR and LF cannot reach the module: nginx itself refuses a bare CR in a
# value, and a bare LF ends the header line

$n = frontend_requests($t);

$r = call('POST', '/v1/completions?case=cr', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => "abc\rdef" ]);

is($r->{status}, 400, 'bare CR: 400 from nginx');
is(scalar $t->log_lines('error.log',
	qr/\[info\] .*client sent invalid header line/), 1,
	'bare CR: invalid header line logged');
is(frontend_requests($t), $n, 'bare CR: nothing forwarded');

$r = call('POST', '/v1/completions?case=lf', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => "lf-id\nInjected: 1" ]);

is($r->{status}, 200, 'bare LF: a header line of its own');
$rec = record_with($t, 'x-dynamo-attempt-id', 'lf-id');
ok($rec, 'bare LF: the id before the LF');
ok(!grep({ /[\r\n]/ } map { ref $_ ? @$_ : $_ } values %{$rec->{headers}}),
	'bare LF: no CR or LF forwarded in a value');

is(scalar(grep { grep { /[\r\n]/ } map { ref $_ ? @$_ : $_ }
	values %{$_->{headers} // {}} } @{$t->fake_records('frontend')}), 0,
	'no CR or LF ever forwarded in a header value');

# a client x-request-id is replaced by the attempt id

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Request-Id' => 'evil', 'x-request-id' => 'evil2' ]);
$id = $r->{headers}{'x-dynamo-attempt-id'};
$rec = record_with($t, 'x-dynamo-attempt-id', $id);

is($rec && $rec->{headers}{'x-request-id'}, $id,
	'client x-request-id: replaced by the attempt id');
is($r->{headers}{'x-request-id'}, $id, 'client x-request-id: echo is the id');

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'with-rid-1',
		'X-Request-Id' => 'evil' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'with-rid-1');
is($rec && $rec->{headers}{'x-request-id'}, 'with-rid-1',
	'client x-request-id: replaced by the client attempt id');

# other header names: X-Trace-Id, nothing else upstream

$r = call('POST', '/v1/completions', body => $BODY, port => 8083);
$id = $r->{headers}{'x-trace-id'};

is($r->{status}, 200, 'X-Trace-Id: status');
like($id, $UUID7, 'X-Trace-Id: id on the response');
ok(!exists $r->{headers}{'x-dynamo-attempt-id'},
	'X-Trace-Id: no X-Dynamo-Attempt-Id on the response');

$rec = record_with($t, 'x-trace-id', $id);
ok($rec, 'X-Trace-Id: forwarded');
ok($rec && !exists $rec->{headers}{'x-dynamo-attempt-id'},
	'X-Trace-Id: no x-dynamo-attempt-id upstream');
ok($rec && !exists $rec->{headers}{'x-request-id'},
	'X-Trace-Id: upstream header off, no x-request-id upstream');

$r = call('POST', '/v1/completions', body => $BODY, port => 8083,
	headers => [ 'X-Trace-Id' => 'trace-1' ]);
is($r->{headers}{'x-trace-id'}, 'trace-1', 'X-Trace-Id: client id returned');
ok(record_with($t, 'x-trace-id', 'trace-1'), 'X-Trace-Id: client id forwarded');

$n = frontend_requests($t);
$r = call('POST', '/v1/completions', body => $BODY, port => 8083,
	headers => [ 'X-Trace-Id' => 'bad id' ]);
is($r->{status}, 400, 'X-Trace-Id: bad client id 400');
like($r->{headers}{'x-trace-id'}, $UUID7, 'X-Trace-Id: minted on the 400');
is(frontend_requests($t), $n, 'X-Trace-Id: bad id not forwarded');

$r = call('POST', '/v1/chat/completions', body => $BODY, port => 8083);
$id = $r->{headers}{'x-trace-id'};
$rec = record_with($t, 'x-trace-id', $id);

like($id, $UUID7, 'X-Upstream-Id: id on the response as X-Trace-Id');
is($rec && $rec->{headers}{'x-upstream-id'}, $id,
	'X-Upstream-Id: second name upstream');
ok($rec && !exists $rec->{headers}{'x-request-id'},
	'X-Upstream-Id: no x-request-id upstream');

# the attempt header is x-request-id itself: the frontend's echo does not
# make a second one

$r = call('GET', '/v1/models', port => 8083);
$id = $r->{headers}{'x-request-id'};
$rec = record_with($t, 'x-request-id', $id // '') // { headers => {} };

is($r->{status}, 200, 'X-Request-Id as attempt header: status');
like($id, $UUID7, 'X-Request-Id as attempt header: one id on the response');
ok(!exists $rec->{headers}{'x-trace-id'}
	&& !exists $rec->{headers}{'x-dynamo-attempt-id'},
	'X-Request-Id as attempt header: the only name upstream');

# routing headers are stripped, whatever their case; others pass

my @filler = map { ("X-Filler-$_" => "f$_") } 1 .. 25;

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ (map { ($_ => 'pin-1') } @ROUTING),
		'x-tenant-id' => 'tenant-a',
		'traceparent' => '00-0af7651916cd43dd8448eb211c80319c-'
			. 'b7ad6b7169203331-01',
		'X-Dp-Rank-Hint' => 'kept',
		@filler ]);
$id = $r->{headers}{'x-dynamo-attempt-id'};
$rec = record_with($t, 'x-dynamo-attempt-id', $id) // { headers => {} };

is($r->{status}, 200, 'strip: status');

for my $name (@ROUTING) {
	ok(!exists $rec->{headers}{lc $name}, "strip: $name removed");
}

ok(!exists $rec->{headers}{'x-tenant-id'},
	'strip: x-tenant-id removed, only the gateway assigns one');
like($rec->{headers}{traceparent}, qr/^00-0af7/, 'strip: traceparent passes');
is($rec->{headers}{'x-dp-rank-hint'}, 'kept', 'strip: similar name passes');
is(scalar(grep { defined $rec->{headers}{"x-filler-$_"}
	&& $rec->{headers}{"x-filler-$_"} eq "f$_" } 1 .. 25), 25,
	'strip: 25 other headers pass, in a list of many parts');
is($rec->{headers}{'x-request-id'}, $id, 'strip: attempt id upstream');

# ... unless dynamo_rl_strip_routing_headers is off

$r = call('POST', '/v1/chat/completions', body => $BODY, port => 8084,
	headers => [ (map { ($_ => 'pin-2') } @ROUTING),
		'x-tenant-id' => 'tenant-b', 'X-Other' => 'other' ]);
$id = $r->{headers}{'x-dynamo-attempt-id'};
$rec = record_with($t, 'x-dynamo-attempt-id', $id) // { headers => {} };

is($r->{status}, 200, 'strip off: status');
is(scalar(grep { ($rec->{headers}{lc $_} // '') eq 'pin-2' } @ROUTING), 9,
	'strip off: all nine routing headers pass');
is($rec->{headers}{'x-other'}, 'other', 'strip off: others pass');
ok(!exists $rec->{headers}{'x-tenant-id'},
	'strip off: x-tenant-id removed all the same');

# methods outside the plane's set: 405 with Allow, nothing forwarded

for my $method (qw/ DELETE PUT PATCH OPTIONS /) {
	$n = frontend_requests($t);
	$r = call($method, "/v1/completions?m=$method", body => $BODY);

	is($r->{status}, 405, "$method: 405");
	is($r->{headers}{allow}, 'GET, HEAD, POST', "$method: Allow");
	ok(flat($r, 405, 'Method Not Allowed'), "$method: flat body")
		or diag($r->{body});
	like($r->{headers}{'x-dynamo-attempt-id'}, $UUID7,
		"$method: attempt id on the 405");
	is(frontend_requests($t), $n, "$method: nothing forwarded");
}

$n = frontend_requests($t);
$r = call('GET', '/v1/completions', port => 8084);

is($r->{status}, 405, 'dynamo_rl_methods POST: GET is 405');
is($r->{headers}{allow}, 'POST', 'dynamo_rl_methods POST: Allow');
ok(flat($r, 405, 'Method Not Allowed'), 'dynamo_rl_methods POST: flat body');
is(frontend_requests($t), $n, 'dynamo_rl_methods POST: nothing forwarded');

$r = call('HEAD', '/v1/completions', port => 8084);

is($r->{status}, 405, 'dynamo_rl_methods POST: HEAD is 405');
is($r->{headers}{allow}, 'POST', 'dynamo_rl_methods POST: HEAD Allow');
is($r->{body}, '', 'dynamo_rl_methods POST: HEAD without body');

$r = call('POST', '/v1/completions', body => $BODY, port => 8084);
is($r->{status}, 200, 'dynamo_rl_methods POST: POST passes');

# canonical request targets only

for my $target ('/v1/x/..%2Fcompletions', '/v1//completions',
	'/v1/./completions', '/v1/%63ompletions', '/v1/completions%2F',
	'/v1/x/../completions', '/v1/chat%2Fcompletions',
	'/v1/completions%3Fa=b')
{
	$n = frontend_requests($t);
	$r = call('POST', $target, body => $BODY);

	bad_request("target $target", $r, 'attempt id');
	is(frontend_requests($t), $n, "target $target: nothing forwarded");
}

is(scalar $t->log_lines('error.log', qr/\[info\] .*dynamo rl: non-canonical/
	. qr/ request target "\/v1\/\/completions"/), 1,
	'target: info line names the raw target');

# "..%2F..%2F" leaves the plane: nginx normalises it to /x, location /

for my $target ('/v1/completions/..%2F..%2Fx', '/v1/completions%2f..%2f..%2fx')
{
	$n = frontend_requests($t);
	$r = call('POST', $target, body => $BODY);

	is($r->{status}, 404, "target $target: location / 404");
	ok(!exists $r->{headers}{'x-dynamo-attempt-id'},
		"target $target: not a plane location");
	is(frontend_requests($t), $n, "target $target: nothing forwarded");
}

# a query string on a canonical path is forwarded as it came

$r = call('POST', '/v1/completions?a=1&b=two', body => $BODY);
$id = $r->{headers}{'x-dynamo-attempt-id'};
$rec = record_with($t, 'x-dynamo-attempt-id', $id);

is($r->{status}, 200, 'query: status');
is($rec && $rec->{uri}, '/v1/completions?a=1&b=two', 'query: forwarded');

# the absolute form is canonical: its path is compared

$r = call('POST', 'http://localhost/v1/completions?abs=1', body => $BODY);
$id = $r->{headers}{'x-dynamo-attempt-id'};
$rec = record_with($t, 'x-dynamo-attempt-id', $id);

is($r->{status}, 200, 'absolute form: status');
is($rec && $rec->{uri}, '/v1/completions?abs=1', 'absolute form: forwarded');

# an upstream error passes through, with the attempt id

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'status-503' ]);
$id = $r->{headers}{'x-dynamo-attempt-id'};

is($r->{status}, 503, 'upstream 503: status');
ok(flat($r, 503, 'Service Unavailable'), 'upstream 503: frontend body');
like($id, $UUID7, 'upstream 503: attempt id');
is($r->{headers}{'x-request-id'}, $id, 'upstream 503: echo');

# a refusal before the body arrived: the body is discarded, and the
# connection serves the next request

my $s = http("POST /v1/completions?case=early HTTP/1.1\r\n"
	. "Host: localhost\r\nX-Dynamo-Attempt-Id: bad id\r\n"
	. "Content-Type: application/json\r\n"
	. 'Content-Length: ' . length($BODY) . "\r\n\r\n", start => 1);

like(read_until($s, qr/"code":400\}/, 10), qr/^HTTP\/1\.1 400 /,
	'early 400: sent before the body');

syswrite($s, $BODY . raw('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'after-early-400' ]));

like(read_until($s, undef, 10), qr/^HTTP\/1\.1 200 /,
	'early 400: next request on the connection');
close $s;

ok(record_with($t, 'x-dynamo-attempt-id', 'after-early-400'),
	'early 400: next request forwarded');
is(scalar(grep { $_->{uri} =~ /case=early/ } @{frontend_records($t)}), 0,
	'early 400: refused request not forwarded');

# 500 pipelined requests on one connection: every id is distinct, past
# a refill of the per-process random bytes (409 ids each)

$s = http(join('', map { "DELETE /v1/completions?p=$_ HTTP/1.1\r\n"
	. "Host: localhost\r\n\r\n" } 1 .. 499) . raw('DELETE',
	'/v1/completions?p=500'), start => 1);
my @piped = read_until($s, undef, 30) =~ /^X-Dynamo-Attempt-Id: (\S+)\r$/mg;
close $s;

is(scalar @piped, 500, 'pipelined: 500 responses with an id');
is(scalar(grep { /$UUID7/ } @piped), 500, 'pipelined: all UUIDv7');
is(scalar(keys %{{ map { $_ => 1 } @piped }}), 500, 'pipelined: all distinct');

# HEAD and GET of /v1/models

$r = call('GET', '/v1/models');
$id = $r->{headers}{'x-dynamo-attempt-id'};

is($r->{status}, 200, 'GET /v1/models: status');
is(json($r)->{object}, 'list', 'GET /v1/models: body');
like($id, $UUID7, 'GET /v1/models: attempt id');
ok(record_with($t, 'x-request-id', $id), 'GET /v1/models: id upstream');

$r = call('HEAD', '/v1/models');
$id = $r->{headers}{'x-dynamo-attempt-id'};

is($r->{status}, 200, 'HEAD /v1/models: status');
is($r->{body}, '', 'HEAD /v1/models: no body');
like($id, $UUID7, 'HEAD /v1/models: attempt id');
$rec = record_with($t, 'x-request-id', $id);
is($rec && $rec->{method}, 'HEAD', 'HEAD /v1/models: forwarded as HEAD');

# X-Accel-* from the frontend do not steer nginx, nor reach the client

$t0 = time();
$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'accel-redirect' ]);

is($r->{status}, 200, 'accel: status');
is($r->{body}, '{"upstream":"accel"}', 'accel: upstream body, not followed');
unlike($r->{body}, qr/SECRET/, 'accel: /secret not served');
is(scalar(grep { /^x-accel-/ } keys %{$r->{headers}}), 0,
	'accel: no X-Accel-* header to the client');
like($r->{headers}{'x-dynamo-attempt-id'}, $UUID7, 'accel: attempt id');
ok(time() - $t0 < 5, 'accel: X-Accel-Limit-Rate not honoured');

# a POST that reached the frontend is never re-sent

$r = call('POST', '/v1/chat/completions', body => $BODY, port => 8085,
	headers => [ 'x-fake-scenario' => 'no-response',
		'X-Dynamo-Attempt-Id' => 'no-resend-post' ]);

is($r->{status}, 502, 'no re-send: POST without response 502');
is($r->{headers}{'x-dynamo-attempt-id'}, 'no-resend-post',
	'no re-send: attempt id on the 502');
is(records_with('x-request-id', 'no-resend-post'), 1,
	'no re-send: POST reached the frontend once');

ok(flat($r, 502, 'Bad Gateway'), 'no re-send: 502 in the flat shape');

# nor a GET, which nginx itself would re-send (issue 29; that the same
# upstream does follow a server that took no byte is in dynamo_rl_truth.t)

$r = call('GET', '/v1/models', port => 8085,
	headers => [ 'x-fake-scenario' => 'no-response',
		'X-Dynamo-Attempt-Id' => 'resend-get' ]);

is($r->{status}, 502, 'no re-send: GET without response 502');
is(records_with('x-request-id', 'resend-get'), 1,
	'no re-send: GET reached the frontend once');

# ... and an operator's non_idempotent does not re-send generation either

$r = call('POST', '/v1/completions', body => $BODY, port => 8085,
	headers => [ 'x-fake-scenario' => 'no-response',
		'X-Dynamo-Attempt-Id' => 'no-resend-non-idempotent' ]);

is($r->{status}, 502, 'non_idempotent: POST without response 502');

is(records_with('x-request-id', 'no-resend-non-idempotent'), 1,
	'non_idempotent: POST reached the frontend once');

###############################################################################

# SSE passes through unbuffered: the first event arrives while the
# frontend still produces the others (5 events, 300 ms apart)

$s = http(raw('POST', '/v1/chat/completions',
	body => '{"messages":[{"role":"user","content":"hi"}],"stream":true}',
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 5,
		'x-fake-interval-ms' => 300 ]), start => 1);
$t0 = time();

my $buf = read_until($s, qr/data: \{/, 10);
my $first = time() - $t0;

like($buf, qr/^HTTP\/1\.1 200 /, 'sse: status');
like($buf, qr/\r\nContent-Type: text\/event-stream\r\n/i, 'sse: content type');
like($buf, qr/\r\nX-Dynamo-Attempt-Id: [0-9a-f-]{36}\r\n/i, 'sse: attempt id');
ok($buf =~ /data: \{/ && $first < 1.0, 'sse: first event within 1 s')
	or diag("first event after $first s");
unlike($buf, qr/\[DONE\]/, 'sse: stream not complete at the first event');
my $early = () = $buf =~ /data: \{/g;
cmp_ok($early, '<', 5, 'sse: later events not yet produced');

$buf .= read_until($s, undef, 10);
close $s;

$r = parse_response($buf);
my $events = () = $r->{body} =~ /^data: \{/mg;

is($events, 5, 'sse: five events');
like($r->{body}, qr/data: \[DONE\]\n\n\z/, 'sse: ends with data: [DONE]');
ok(!$r->{incomplete}, 'sse: chunked stream complete');
ok(time() - $t0 >= 1.0, 'sse: the stream took the frontend\'s time');

# a client that goes away closes the upstream connection: the frontend
# sees the close, before a response and during a stream

$s = http(raw('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'hang',
		'X-Dynamo-Attempt-Id' => 'gone-hang' ]), start => 1);

ok(wait_record(sub { !$_[0]{event}
	&& ($_[0]{headers}{'x-request-id'} // '') eq 'gone-hang' }),
	'disconnect hang: request reached the frontend');
close $s;
ok(wait_record(sub { ($_[0]{event} // '') eq 'client_closed'
	&& ($_[0]{'x-request-id'} // '') eq 'gone-hang' }),
	'disconnect hang: frontend saw the close');

$s = http(raw('POST', '/v1/chat/completions',
	body => '{"messages":[{"role":"user","content":"hi"}],"stream":true}',
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'gone-stream' ]), start => 1);

like(read_until($s, qr/data: \{/, 10), qr/data: \{/,
	'disconnect stream: first event');
close $s;
ok(wait_record(sub { ($_[0]{event} // '') eq 'client_closed'
	&& ($_[0]{'x-request-id'} // '') eq 'gone-stream' }),
	'disconnect stream: frontend saw the close');

###############################################################################

# the variables in the access log

$t->stop();

my %log = map { $_->{uri} => $_ } map { decode_json($_) }
	grep { /\S/ } split /\n/, $t->read_file('rl.log');

my $ok_line = $log{'/v1/completions?a=1&b=two'} // {};
my $ok_id = $ok_line->{attempt} // '';
my ($q_id) = grep { !exists $_->{event}
	&& ($_->{headers}{'x-request-id'} // '') eq $ok_id }
	@{$t->fake_records('frontend')};

like($ok_line->{attempt}, $UUID7, 'log ok: $dynamo_rl_attempt_id');
ok($q_id, 'log ok: the id the frontend received');
is($ok_line->{plane}, 'request', 'log ok: $dynamo_rl_plane');
is($ok_line->{deny}, '', 'log ok: $dynamo_rl_deny_reason empty');
is($ok_line->{status}, '200', 'log ok: status');

is($ok_line->{outcome}, 'succeeded', 'log ok: $dynamo_rl_outcome');

like(($log{'/v1/completions?case=space'} // {})->{attempt}, $UUID7,
	'log bad id: minted id');

# the lines of refused requests: the uri, the name, and each field with
# its value

my %what = (plane => 'plane', deny => 'deny reason', outcome => 'outcome',
	status => 'status');

for my $c (
	[ '/v1/completions?case=space', 'log bad id', plane => 'request',
		deny => 'bad_attempt_id', outcome => 'rejected', status => '400' ],
	[ '/v1//completions', 'log bad path',
		deny => 'bad_path', status => '400' ],
	[ '/v1/completions?m=DELETE', 'log 405',
		status => '405', deny => 'method', outcome => 'rejected' ],
)
{
	my ($uri, $name, @fields) = @$c;

	my $line = $log{$uri} // {};

	while (my ($field, $value) = splice(@fields, 0, 2)) {
		is($line->{$field}, $value, "$name: $what{$field}");
	}
}

my $none_line = $log{'/v1/completions/..%2F..%2Fx'} // {};

is($none_line->{status}, '404', 'log outside the plane: status');
is($none_line->{plane}, '', 'log outside the plane: no plane');
is($none_line->{attempt}, '', 'log outside the plane: no attempt id');




# a request refused with 400: the status, the flat JSON error, and the
# attempt id minted for it ("$name: $minted")

sub bad_request {
	my ($name, $r, $minted) = @_;

	is($r->{status}, 400, "$name: 400");
	is($r->{headers}{'content-type'}, 'application/json',
		"$name: content type");
	ok(flat($r, 400, 'Bad Request'), "$name: flat body")
		or diag($r->{body});
	like($r->{headers}{'x-dynamo-attempt-id'}, $UUID7, "$name: $minted");
}

sub uuid_ms {
	my ($uuid) = @_;

	(my $hex = $uuid) =~ s/-//g;
	return hex(substr($hex, 0, 8)) * 65536 + hex(substr($hex, 8, 4));
}



sub records_with {
	my ($name, $value) = @_;

	return scalar grep { !exists $_->{event}
		&& ($_->{headers}{$name} // '') eq $value }
		@{frontend_records($t)};
}


sub wait_record {
	my ($match) = @_;

	return Test::DynamoRL::wait_for(sub {
		scalar grep { $match->($_) } @{frontend_records($t)};
	}, 10);
}


# DELETE on $n connections at once: one event loop iteration of the
# worker mints many ids; returns the ids on the 405 responses

sub burst_ids {
	my ($n) = @_;

	my @s = map { IO::Socket::INET->new(Proto => 'tcp',
		PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5) } 1 .. $n;
	my $req = raw('DELETE', '/v1/completions');

	syswrite($_, $req) for grep { defined } @s;

	return map { defined $_
		? (parse_response(read_until($_, undef, 10)) // {})
			->{headers}{'x-dynamo-attempt-id'}
		: undef } @s;
}

###############################################################################
