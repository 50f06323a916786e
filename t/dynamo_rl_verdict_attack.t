#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attacks on the request plane's verdicts (the gate, the body policy and
# the ledger deciding, the precontent handler answering once through
# ngx_http_dynamo_rl_refuse()) and on the request plane's filter pair on
# top of the module's chain: response paths through error_page (static,
# named, =200), proxy_intercept_errors, return in an if block, nginx's own
# 413, auth_request, mirror, proxy_next_upstream, X-Accel-Redirect in an
# if block, keepalive pipelining, SSE and HTTP/2 client aborts, two worker
# processes, post_action, a body still arriving while the gate closes,
# and the shared store's claim pending while the client goes away (Redis
# behind the harness's fake RESP server).
#
# Assertions under "# finding N" failed on the code they were written
# against (5ed126b and before; the file:line references are of
# that code): each is what DESIGN.md promises, and each holds since the
# fixes that followed.  The rest are attacks that held, kept as
# regression tests.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ rl_test call attempt hold start json api
	flat read_until forwarded json_lines metrics /;
use Test::DynamoRL::Redis qw/ admit replica_conf resp_proxy store_key /;

###############################################################################

my $t = rl_test(180, 71 + 4 + 3 + 10 + 2 + 5 + 2 + 3, <<'EOF2');

%%RL_MAIN workers=2%%

http {
    %%RL_HTTP 1m%%
    %%RL_FRONTEND%%
    upstream two {
        server 127.0.0.1:8081;
        server 127.0.0.1:8081;
    }

    %%RL_ACCESS_LOG attempt outcome status deny uri%%

    server {
        %%RL_LISTEN 8080%%

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend;

            proxy_intercept_errors on;
            error_page 502 =200 /ok.json;
            error_page 504 = @fallback;
            error_page 500 = @retry;

            if ($http_x_block) {
                return 418;
            }

            if ($http_x_branch) {
                set $branch 1;
            }
        }

        location /u/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend/v1/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }

        location /small/ {
            dynamo_rl_plane request;
            client_max_body_size 1k;
            proxy_pass http://frontend/v1/;
        }

        location /m/ {
            dynamo_rl_plane request;
            mirror /mirror;
            proxy_pass http://frontend/v1/;
        }

        location /a/ {
            dynamo_rl_plane request;
            auth_request /auth;
            proxy_pass http://frontend/v1/;
        }

        location /n/ {
            dynamo_rl_plane request;
            proxy_pass http://two/v1/;
            proxy_next_upstream error timeout http_502 non_idempotent;
        }

        location /pa/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend/v1/;
            post_action @retry;
        }

        location = /ok.json { root %%TESTDIR%%; }

        location @fallback {
            default_type application/json;
            return 200 '{"fallback":true}';
        }

        location @retry { proxy_pass http://frontend; }

        location = /mirror {
            internal;
            proxy_pass http://frontend/v1/completions;
        }

        location = /auth { internal; return 401; }

        location = /secret { return 200 'SECRET'; }
    }

    server {
        %%RL_LISTEN 8090 http2%%

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
            proxy_buffering off;
        }
    }

    %%RL_API_SERVER 8070%%
}

EOF2

$t->write_file('ok.json', '{"static":true}');
$t->run_fake_dynamo()->run();

# a replica with a store, behind the fake RESP server, whose claims can
# be held unanswered ("fault-stall-<x>" in the attempt id) for timeout

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %S = (name => 'S', listen => 8180, api => 8170);

my $conf = replica_conf(%S, store => 'redis://127.0.0.1:8390',
	params => 'timeout=1s heartbeat=500ms gate_poll=100ms gate_stale=5s');
$conf =~ s/(listen 127\.0\.0\.1:8180;)/$1 listen 127.0.0.1:8190 http2;/
	or die "no listen in the replica's configuration\n";

my $ts = Test::DynamoRL->new()->check_at_end();
$ts->write_file_expand('nginx.conf', $conf);
$ts->run();

my $P = '{"prompt":"p"}';

###############################################################################

# an upstream's error answered by an error page of the operator's: the
# attempt is judged by what the upstream answered ("failed: upstream
# non-2xx"), whatever status the error page gives the client

my $m_ep = metrics();
my $r = attempt('ep-static', $P, headers => [ 'x-fake-scenario' => 'status-502' ]);
is($r->{status}, 200, 'error_page =200: the static page answers');
is(forwarded($t, 'ep-static'), 1, 'error_page =200: forwarded once');

# finding 1: an upstream 502 (or 504) that proxy_intercept_errors and
# error_page turn into a 200 (error_page 502 =200 /static, or
# error_page 504 = @named with "return 200") is recorded "succeeded", in
# the attempts API, $dynamo_rl_outcome and the counters: DESIGN.md says
# "failed: upstream non-2xx".  ledger.c:734 ngx_http_dynamo_rl_ledger_finish()
# judges r->headers_out.status, the status of the error page the request
# was redirected to, never r->upstream's (the filter pair in module.c
# reaches the redirected response through get_ctx() and settles it)

my $rec = wait_done('ep-static');
is($rec->{state}, 'failed',
	'finding 1: upstream 502 behind error_page =200 is failed');
is(logged('ep-static')->{outcome}, 'failed',
	'finding 1: $dynamo_rl_outcome of it is failed');

$r = attempt('ep-named', $P, headers => [ 'x-fake-scenario' => 'status-504' ]);
is($r->{status}, 200, 'error_page to a named return: answered');
is(forwarded($t, 'ep-named'), 1, 'error_page to a named return: forwarded once');

$rec = wait_done('ep-named');
is($rec->{state}, 'failed',
	'finding 1: upstream 504 behind a named location\'s return 200 is failed');

# an error page that would forward again: refused, never sent twice;
# the counters are read once both attempts above are counted (with two
# worker processes, the other one may answer the read first)

my $m0 = counted($m_ep, failed => 2);
$r = attempt('ep-retry', $P, headers => [ 'x-fake-scenario' => 'status-500' ]);
my $m1 = counted($m0);
is($r->{status}, 502, 'error_page to a proxying location: 502');
is($r->{headers}{'x-dynamo-rl-reason'}, 'redirected',
	'error_page to a proxying location: reason');
ok(flat($r, 502, 'Bad Gateway'), 'error_page to a proxying location: flat');
is($r->{headers}{'x-dynamo-attempt-id'}, 'ep-retry',
	'error_page to a proxying location: the id echoed');
is(forwarded($t, 'ep-retry'), 1, 'error_page to a proxying location: forwarded once');

$rec = wait_done('ep-retry');
is($rec->{state}, 'failed', 'refused after its upstream: record failed');

# finding 2: the record of that attempt has no status although the client
# was answered 502 ("status": HTTP status sent to the client), and the
# access log's $dynamo_rl_outcome and the requests counter say "rejected"
# for an attempt that reached Dynamo and whose record is "failed".
# request.c:272 refuses the redirected request through refuse() and
# deny(), which set deny_reason; ledger.c:1164 (ledger_header) and
# ledger.c:722 (ledger_finish) then skip it, so the record is ended only
# by ngx_http_dynamo_rl_ledger_abandon() at the pool's cleanup
# (ledger.c:973, no status), and status.c:607 counts it as rejected

is($rec->{status}, 502,
	'finding 2: the record holds the status sent to the client');
is(logged('ep-retry')->{outcome}, $rec->{state},
	'finding 2: $dynamo_rl_outcome is the record\'s terminal state');
is(delta($m0, $m1, 'failed') . '/' . delta($m0, $m1, 'rejected'), '1/0',
	'finding 2: the metrics count that forwarded attempt as failed');

# a refusal by access control (auth_request) consumes no attempt id

$m0 = metrics();
$r = attempt('auth-1', $P, uri => '/a/completions');
$m1 = counted($m0);
is($r->{status}, 401, 'auth_request: 401');

# finding 3: a request that auth_request refused (401), never admitted,
# never recorded, never forwarded, is logged and counted as a "failed"
# attempt (and so would be one refused by allow/deny, limit_except or
# limit_req): ledger.c:722-756 ngx_http_dynamo_rl_ledger_finish() settles
# ctx->outcome for every request-plane context, admitted or not, so
# status.c:623-628's own rule ("no verdict: refused before the module
# decided (allow/deny, auth)" -> rejected) is never reached

is(logged('auth-1')->{outcome}, 'rejected',
	'finding 3: refused by auth_request: $dynamo_rl_outcome rejected');
is(delta($m0, $m1, 'failed') . '/' . delta($m0, $m1, 'rejected'), '0/1',
	'finding 3: refused by auth_request: counted as rejected, not failed');

is(forwarded($t, 'auth-1'), 0, 'auth_request: nothing forwarded');

# finding 4: the flat error of a 401 says "type":"Bad Request", and so
# does the module's own 415 unsupported_encoding: common.c:483-542
# ngx_http_dynamo_rl_status_type(), "the canonical reason phrase,
# Dynamo's type", has no 401, 411 or 415, and answers
# "Bad Request" for every 4xx it does not list (common.c:540)

ok(flat($r, 401, 'Unauthorized'),
	'finding 4: a 401 on the request plane has type Unauthorized');

$r = attempt('auth-1', $P);
is($r->{status}, 200, 'auth_request: the id is still free');
is(forwarded($t, 'auth-1'), 1, 'auth_request: then forwarded once');

# the module's own 415: status and reason right, the type is not

my $m_refused = metrics();
$r = attempt('enc-1', $P, headers => [ 'Content-Encoding' => 'gzip' ]);
is($r->{status}, 415, 'content coding: 415');
is($r->{headers}{'x-dynamo-rl-reason'}, 'unsupported_encoding',
	'content coding: reason');
ok(flat($r, 415, 'Unsupported Media Type'),
	'finding 4: the module\'s own 415 has type Unsupported Media Type');
is(forwarded($t, 'enc-1'), 0, 'content coding: not forwarded');

# finding 5: nginx's own 413 of a declared body (Content-Length) over
# client_max_body_size on the request plane is nginx's HTML page, without
# the attempt id; the same 413 of a chunked body gets the flat shape and
# the id.  nginx sends it from the find-config phase, before the module's
# PREACCESS handler creates the context (request.c:126), and module.c:493
# gives the flat shape and the id only to a request with a context

$r = call('POST', '/small/completions', body => '{"prompt":"' . ('x' x 2048) . '"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'big-1' ]);
is($r->{status}, 413, 'declared body too large: 413');
ok(flat($r, 413, 'Payload Too Large'),
	'finding 5: nginx\'s 413 on the request plane has the flat shape');
is($r->{headers}{'x-dynamo-attempt-id'}, 'big-1',
	'finding 5: nginx\'s 413 on the request plane echoes the attempt id');
is(forwarded($t, 'big-1'), 0, 'declared body too large: not forwarded');

# finding 6: a "return" in an if block of a request-plane location
# answers without the attempt id ("comes back on the response, headers
# are sent even on errors"; "if blocks inherit the plane and all of its
# policy"): it runs in the rewrite phase, before request.c:126 creates
# the context, and module.c:493 echoes only a context's id

$r = attempt('if-ret', $P, headers => [ 'x-block' => 1 ]);
is($r->{status}, 418, 'return in an if block: its status');
is($r->{headers}{'x-dynamo-attempt-id'}, 'if-ret',
	'finding 6: return in an if block echoes the attempt id');

# post_action after a whole answer: never forwarded again (held); the
# counters are read once the three refusals before it (415, 413, 418)
# are counted: each was answered before its body was read, so that its
# log phase waits for the client's close (lingering close)

$m0 = counted($m_refused, rejected => 3);
$r = attempt('post-1', $P, uri => '/pa/completions');
is($r->{status}, 200, 'post_action: the answer');
is(wait_done('post-1')->{state}, 'succeeded', 'post_action: record succeeded');
my $post = logged('post-1');
$m1 = counted($m0);
is(forwarded($t, 'post-1'), 1, 'post_action: forwarded once, not again');

# finding 7: but the succeeded attempt is logged and counted as a
# refusal: $dynamo_rl_outcome "rejected", $status 502, deny reason
# "redirected", requests_total{outcome="rejected"} and
# denials_total{reason="redirected"} up by one, succeeded not counted.
# post_action is an internal redirect after the response; request.c:252-275
# (the passed branch) refuses it through refuse() and deny()
# (common.c:476), which set deny_reason and a 502 status on a request
# whose answer was already sent, and status.c:601-607 then counts the
# request as rejected

is($post->{outcome} . ' ' . $post->{deny}, 'succeeded ',
	'finding 7: post_action: $dynamo_rl_outcome succeeded, no deny reason');
is(delta($m0, $m1, 'succeeded') . '/' . delta($m0, $m1, 'rejected'), '1/0',
	'finding 7: post_action: counted as succeeded, not rejected');

# the frontend's X-Accel-Redirect in an if block that inherits the plane

$r = attempt('accel-if', $P,
	headers => [ 'x-branch' => 1, 'x-fake-scenario' => 'accel-redirect' ]);
is($r->{status}, 200, 'X-Accel-Redirect in an if block: 200');
unlike($r->{body}, qr/SECRET/, 'X-Accel-Redirect in an if block: not honoured');

# mirror: the background subrequest of a plane request is never sent

$r = attempt('mir-1', $P, uri => '/m/completions');
is($r->{status}, 200, 'mirror: the request itself');
ok($t->wait_for(sub { logged('mir-1')->{outcome} }, 5), 'mirror: logged');
is(forwarded($t, 'mir-1'), 1, 'mirror: the generation reached Dynamo once');

# proxy_next_upstream non_idempotent: never sent to a second server

$r = attempt('nu-1', $P, uri => '/n/completions',
	headers => [ 'x-fake-scenario' => 'no-response' ]);
is($r->{status}, 502, 'next upstream: 502');
is(forwarded($t, 'nu-1'), 1, 'next upstream: forwarded once');
is(wait_done('nu-1')->{state}, 'failed', 'next upstream: failed');

# keepalive pipelining: a refused duplicate, then a fresh attempt

my $pipe = pipelined(
	raw_post('pipe-1', $P, 'keep-alive') . raw_post('pipe-1', $P, 'keep-alive')
	. raw_post('pipe-2', $P, 'close'));
is(scalar @$pipe, 3, 'pipelined: three answers');
is($pipe->[0]{status}, 200, 'pipelined: the first is forwarded');
is($pipe->[1]{status}, 409, 'pipelined: the duplicate is refused');
is($pipe->[1]{headers}{'x-should-retry'}, 'false',
	'pipelined: the duplicate is not to be retried');
ok(!defined $pipe->[1]{headers}{'retry-after'},
	'pipelined: the duplicate has no Retry-After');
is($pipe->[2]{headers}{'x-dynamo-attempt-id'}, 'pipe-2',
	'pipelined: the next one has its own id');
is(forwarded($t, 'pipe-1') . '/' . forwarded($t, 'pipe-2'), '1/1',
	'pipelined: each id forwarded once');

# SSE terminal detection on the filter pair

is(stream('sse-ok', 'split-done'), 'succeeded', 'sse: [DONE] split: succeeded');
is(stream('sse-err', 'error-frame'), 'failed', 'sse: error frame: failed');
is(stream('sse-cut', 'abrupt'), 'failed', 'sse: cut short: failed');

# a client that goes away mid-stream

my $s = start('POST', '/u/completions', body => '{"prompt":"p","stream":true}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'sse-gone', 'x-fake-scenario' => 'slow',
		'x-fake-events' => 100 ]);
ok(read_until($s, qr/data:/, 5) =~ /data:/, 'sse abort: a first event');
close $s;
is(wait_done('sse-gone')->{state}, 'canceled', 'sse abort: canceled');

# HTTP/2: an answer, and a client gone mid-stream

SKIP: {
	skip 'no curl', 4 unless `curl --version 2>/dev/null` =~ /nghttp2/;

	my $out = h2('h2-ok', '{"prompt":"p"}', 5);
	like($out, qr/^x-dynamo-attempt-id: h2-ok\r?$/mi, 'http2: the id echoed');
	is(wait_done('h2-ok')->{state}, 'succeeded', 'http2: succeeded');

	h2('h2-gone', '{"prompt":"p","stream":true}', 1,
		'x-fake-scenario: slow', 'x-fake-events: 100');
	is(wait_done('h2-gone')->{state}, 'canceled', 'http2 abort: canceled');
	is(forwarded($t, 'h2-gone'), 1, 'http2 abort: forwarded once');
}

# HTTP/2: a client gone while its body is on the way: counted while the
# body comes, then out of the drain, nothing forwarded, the id unused

SKIP: {
	skip 'no curl', 4 unless `curl --version 2>/dev/null` =~ /nghttp2/;

	my $port = port(8090);
	open my $up, '-|', 'sh', '-c', 'printf \'{"prompt":\'; sleep 3'
		. ' | curl -s --http2-prior-knowledge -m 1.5 -X POST -T -'
		. ' -H "X-Dynamo-Attempt-Id: h2-body" -H "Content-Type: application/json"'
		. " http://127.0.0.1:$port/v1/completions" or die "curl: $!\n";

	ok(wait_gate(sub { $_[0]{in_flight} == 1 }), 'http2 mid-body: in flight');
	{ local $/; my $discard = <$up>; }
	close $up;
	ok(wait_gate(sub { $_[0]{in_flight} == 0 }), 'http2 mid-body: drained');
	is(forwarded($t, 'h2-body'), 0, 'http2 mid-body: nothing forwarded');
	is(attempt('h2-body', $P)->{status}, 200, 'http2 mid-body: the id unused');
}

# the store's claim pending while the client goes away (HTTP/1.1 close,
# HTTP/2 stream gone): nothing forwarded, the drain empties, and the
# claim is released, so that the id passes afterwards, once

is(admit(\%S)->{status}, 200, 'store: a replica that admits');

$s = start('POST', '/v1/completions', port => 8180, body => $P,
	headers => [ 'X-Dynamo-Attempt-Id' => 'fault-stall-h1' ]);
claim_sent('fault-stall-h1');
close $s;

# each claim is held by its own stall, not behind the other's

is(admit(\%S)->{status}, 200, 'store: admits again after the first stall');

SKIP: {
	skip 'no curl', 2 unless `curl --version 2>/dev/null` =~ /nghttp2/;

	# the stream goes once its claim is with the store

	my $port = port(8190);
	my $pid = open my $curl, '-|', 'curl', '-s', '-i',
		'--http2-prior-knowledge', '-m', '10',
		'-H', 'X-Dynamo-Attempt-Id: fault-stall-h2',
		'-H', 'Content-Type: application/json', '--data-binary', $P,
		"http://127.0.0.1:$port/v1/completions" or die "curl: $!\n";

	claim_sent('fault-stall-h2');
	kill 'TERM', $pid;

	my $out = do { local $/; <$curl> } // '';
	close $curl;

	unlike($out, qr/^HTTP\/2 200/m, 'store, http2 gone: no answer of 200');
}

is(admit(\%S)->{status}, 200, 'store: admits again after the stalls');

for my $id (qw/ fault-stall-h1 fault-stall-h2 /) {
	is(forwarded($t, $id), 0, "store, $id: not forwarded while pending");

	ok($t->wait_for(sub { (json(call('GET', '/rl/gate', port => 8170))
		->{in_flight} // -1) == 0 }, 10), "store, $id: drained");

	ok($t->wait_for(sub { !$redis->has_key(store_key("a:$id")) }, 10),
		"store, $id: the claim released");

	is(attempt($id, $P, port => 8180)->{status}, 200,
		"store, $id: the id passes afterwards");
	is(forwarded($t, $id), 1, "store, $id: forwarded once");
}

# the gate: refusals with Retry-After, not recorded, not forwarded

my $g = gate_post('{"action":"close","reason":"attack","lease":"120s"}');
is($g->{state}, 'closed', 'gate: closed with a lease');

$r = attempt('gate-1', $P);
is($r->{status} . ' ' . ($r->{headers}{'x-dynamo-rl-reason'} // ''),
	'503 gate_closed', 'gate closed: refused');
ok(($r->{headers}{'retry-after'} // 0) > 100
	&& $r->{headers}{'retry-after'} <= 120, 'gate closed: Retry-After is the lease');
is(api('gate-1')->{status}, 404, 'gate closed: not recorded');

gate_post('{"action":"open"}');
gate_post('{"action":"close","reason":"attack"}');

$r = attempt('gate-2', $P);
is($r->{headers}{'retry-after'}, 5, 'gate closed without a lease: Retry-After 5');
is(forwarded($t, 'gate-1') + forwarded($t, 'gate-2'), 0,
	'gate closed: nothing forwarded');

gate_post('{"action":"open"}');

# a body still arriving as the gate closes: counted in the drain from the
# start, so the close waits for it

$s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
	or die "connect: $!\n";
my $body = '{"prompt":"' . ('y' x 100) . '"}';
print $s "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
	. "Connection: close\r\nX-Dynamo-Attempt-Id: slow-body\r\n"
	. 'Content-Length: ' . length($body) . "\r\n\r\n" . substr($body, 0, 20);

ok(wait_gate(sub { $_[0]{in_flight} == 1 }), 'body on the way: in flight');
gate_post('{"action":"close","reason":"mid-body"}');
is(gate()->{in_flight}, 1, 'closed mid-body: the drain waits for it');

print $s substr($body, 20);
my $raw = read_until($s, qr/\r\n\r\n.*\}\s*$/s, 5);
close $s;

my $status = $raw =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
ok($status == 200 || $status == 503, 'closed mid-body: answered');
is(forwarded($t, 'slow-body'), $status == 200 ? 1 : 0,
	'closed mid-body: forwarded only if admitted');
ok(wait_gate(sub { $_[0]{in_flight} == 0 }), 'closed mid-body: drained');

gate_post('{"action":"open"}');

# two worker processes: one id sent eight times at once, forwarded once

my @race = map { start('POST', '/v1/completions', body => $P,
	headers => [ 'X-Dynamo-Attempt-Id' => 'race-1' ]) } 1 .. 8;
my %st;
$st{resp_status(read_until($_, qr/\}\s*$/, 5))}++ for @race;
close $_ for @race;
is(($st{200} // 0) . '/' . ($st{409} // 0), '1/7',
	'two workers, one id eight times: one 200, seven 409');
is(forwarded($t, 'race-1'), 1, 'two workers, one id eight times: forwarded once');

# two worker processes: every held attempt is in the drain, all leave

my @held = map { hold("held-$_") } 1 .. 4;
ok(wait_gate(sub { $_[0]{in_flight} == 4 }), 'two workers: four in flight');
close $_ for @held;
ok(wait_gate(sub { $_[0]{in_flight} == 0 }), 'two workers: drained');

# after all of the above, nothing is left in the drain

is(gate()->{in_flight}, 0, 'no drain count leaked');

###############################################################################

sub gate {
	return json(call('GET', '/rl/gate', port => 8070));
}

sub gate_post {
	return json(call('POST', '/rl/gate', port => 8070, body => shift));
}

# the metrics once the request just answered is counted since $m0 (or,
# given outcome => how many, those): its log phase, where it is, comes
# after its response

sub counted {
	my ($m0, %want) = @_;
	my $m1;

	$t->wait_for(sub {
		$m1 = metrics();

		if (%want) {
			return !grep { delta($m0, $m1, $_) < $want{$_} } keys %want;
		}

		my $n = 0;
		$n += delta($m0, $m1, $_) for qw/ succeeded failed canceled rejected /;
		return $n >= 1;
	}, 5);

	return $m1;
}

sub delta {
	my ($m0, $m1, $outcome) = @_;
	my $k = 'dynamo_rl_requests_total{plane="request",outcome="'
		. $outcome . '"}';
	return ($m1->{$k} // 0) - ($m0->{$k} // 0);
}

sub wait_gate {
	my ($cond) = @_;
	my $last;
	my $ok = $t->wait_for(sub { $last = gate(); $cond->($last) }, 10);
	diag('gate: ' . encode_json($last)) unless $ok;
	return $ok;
}

# the attempts API's record once it has ended

sub wait_done {
	my ($id) = @_;

	my $rec = {};

	$t->wait_for(sub {
		$rec = api($id)->{json};
		return defined $rec->{state}
			&& $rec->{state} ne 'accepted' && $rec->{state} ne 'streaming';
	}, 10);

	return $rec;
}

# the access log's line of an attempt id (the last one), waited for

sub logged {
	my ($id) = @_;

	my $line = {};

	$t->wait_for(sub {
		my @l = grep { ($_->{attempt} // '') eq $id }
			json_lines($t->testdir() . '/rl.log');
		$line = $l[-1] // {};
		return @l > 0;
	}, 5);

	return $line;
}

# the fake RESP server has read the claim of an attempt id (its command
# log names the command's first keys: the gate's, then the attempt's)

sub claim_sent {
	my ($id) = @_;

	my $log = "$PROXY/commands.log";

	ok($t->wait_for(sub {
		open my $fh, '<', $log or return 0;
		return scalar grep { /^EVALSHA .*\ba:\Q$id\E\b/ } <$fh>;
	}, 10), "store, $id: the claim sent");
}

sub resp_status {
	my ($raw) = @_;
	return ($raw // '') =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
}

sub raw_post {
	my ($id, $body, $conn) = @_;

	return "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: $conn\r\nX-Dynamo-Attempt-Id: $id\r\n"
		. "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body";
}

# every answer on one connection, in order (each with Content-Length)

sub pipelined {
	my ($req) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
		or die "connect: $!\n";
	print $s $req;

	my $buf = '';
	my $sel = IO::Select->new($s);

	while ($sel->can_read(5)) {
		my $n = sysread($s, $buf, 65536, length $buf);
		last unless $n;
	}

	my @r;

	while ($buf =~ s{\A(HTTP/1\.1 (\d+)[^\r]*\r\n(.*?)\r\n\r\n)}{}s) {
		my ($status, $head) = ($2, $3);
		my %h = map { /^([^:]+):\s*(.*)$/ ? (lc $1 => $2) : () }
			split /\r\n/, $head;
		my $len = $h{'content-length'} // 0;
		my $b = substr($buf, 0, $len, '');
		push @r, { status => $status, headers => \%h, body => $b };
	}

	return \@r;
}

# a stream through the unbuffered location, read to its end: the state

sub stream {
	my ($id, $scenario) = @_;

	call('POST', '/u/completions', body => '{"prompt":"p","stream":true}',
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => $scenario ]);

	return wait_done($id)->{state};
}

sub h2 {
	my ($id, $body, $max, @headers) = @_;

	my @cmd = ('curl', '-s', '-i', '--http2-prior-knowledge',
		'-m', $max, '-H', "X-Dynamo-Attempt-Id: $id",
		'-H', 'Content-Type: application/json',
		map({ ('-H', $_) } @headers), '--data-binary', $body,
		'http://127.0.0.1:' . port(8090) . '/v1/completions');

	open my $fh, '-|', @cmd or return '';
	local $/;
	my $out = <$fh> // '';
	close $fh;

	return $out;
}

###############################################################################
