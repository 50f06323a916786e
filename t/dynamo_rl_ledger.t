#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the attempt ledger, through nginx to the fake Dynamo frontend:
# every terminal state produced for real and read back through the
# attempts API and $dynamo_rl_outcome (succeeded: plain, SSE, a split
# "data: [DONE]"; failed: an in-stream error frame, upstream 503 and 529,
# 502 with the upstream down, 504, an upstream that closes mid-stream;
# canceled: the client goes away, over HTTP/1.1 and HTTP/2), the in-flight
# states, single use (in flight, finished, across two worker processes),
# refusals that are not recorded, expiry, reload, the attempts API's
# errors, and, in a second nginx with a small 48k zone, eviction order,
# exhaustion and in-flight records that are never evicted.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call flat forwarded
	frontend_records frontend_requests is_false is_true iso_ms json raw
	read_until rl_conf rl_test start /;

###############################################################################

my $t = rl_test(300, 359, <<'EOF');

%%RL_MAIN workers=2 connections=1024%%

http {
    %%RL_HTTP 1m%%

    %%RL_LOG_FORMAT rl attempt outcome deny status body_bytes pid uri%%

    %%RL_FRONTEND 8%%

    # rollout clients, over HTTP/1.1 and HTTP/2 (prior knowledge)

    server {
        %%RL_LISTEN 8080 8071 http2%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_PROXY_KEEPALIVE unbuffered%%

        %%RL_REQUEST_PLANE%%

        # finished attempts live for one second here

        location /ttl/ {
            dynamo_rl_plane request;
            dynamo_rl_attempt_ttl 1s;
            proxy_pass http://frontend/v1/;
        }

        location /timeout/ {
            dynamo_rl_plane request;
            proxy_read_timeout 1s;
            proxy_pass http://frontend/v1/;
        }

        # SSE through proxy_buffering on, into a temporary file

        location /buffered/ {
            dynamo_rl_plane request;
            proxy_buffering on;
            proxy_buffer_size 1k;
            proxy_buffers 2 1k;
            proxy_busy_buffers_size 1k;
            limit_rate 40k;
            proxy_pass http://frontend/v1/;
        }

        location /noledger/ {
            dynamo_rl_plane request;
            dynamo_rl_ledger off;
            proxy_pass http://frontend/v1/;
        }

        # nothing listens there

        location /down/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8072/v1/;
        }

        %%RL_NOT_FOUND%%
    }

    # one listening socket per worker process: the kernel spreads the
    # connections of a burst over both

    server {
        %%RL_LISTEN 8073 reuseport%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_REQUEST_PLANE keepalive unbuffered%%
    }

    # trusted network

    %%RL_API_SERVER 8070 attempts%%
}

EOF

$t->run_fake_dynamo()->run();

# helpers read the fake's records through this path, not through $t: a
# named sub that closed over $t would keep it alive past the END checks


###############################################################################

my $ISO = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my (%expect, $r, $a, $s, $t0, $n);

###############################################################################

# answers that pass through whole: the attempt, its uri and body, the
# fake frontend's scenario; the record's state and whether it streamed;
# then the parts of the answer (a header, the body, or the body before
# de-chunking) with what each must match

for my $c (

	# succeeded: a plain JSON answer

	[ 'ok-plain', '/v1/completions', $BODY, undef, 'succeeded', 0,
		[ 'content-length', qr/^\d+$/, 'not chunked' ] ],

	# succeeded: SSE that ends with data: [DONE]

	[ 'ok-sse', '/v1/chat/completions', $CHAT, undef, 'succeeded', 1,
		[ body => qr/data: \[DONE\]\n\n\z/, 'ends with [DONE]' ] ],

	# succeeded: "data: [DO" and "NE]" in two chunks, 100 ms apart

	[ 'ok-split', '/v1/completions', $BODY, 'split-done', 'succeeded', 1,
		[ raw_body =>
			qr/data: \[DO\r\n[0-9a-f]+\r\nNE\]\n\n\r\n0\r\n\r\n\z/,
			'the marker reached the client in two chunks' ] ],

	# failed: an in-stream error frame, then [DONE]

	[ 'fail-frame', '/v1/completions', $BODY, 'error-frame', 'failed', 1,
		[ body => qr/data: \{"error":.*\n\ndata: \[DONE\]\n\n\z/s,
			'error frame and [DONE] passed through' ] ],
)
{
	my ($id, $uri, $body, $scenario, $state, $stream, @parts) = @$c;

	$r = attempt($id, 'POST', $uri, body => $body,
		headers => [ defined $scenario
			? ('x-fake-scenario' => $scenario) : () ]);

	is($r->{status}, 200, "$id: status");

	for my $p (@parts) {
		my ($part, $re, $what) = @$p;

		like($part =~ /body$/ ? $r->{$part} : $r->{headers}{$part} // '',
			$re, "$id: $what");
	}

	finished($id, $r, $state, 200, $stream);
}

# failed: the frontend's own errors pass through

for my $code (503, 529) {
	my $id = "fail-$code";

	$r = attempt($id, 'POST', '/v1/completions', body => $BODY,
		headers => [ 'x-fake-scenario' => "status-$code" ]);

	is($r->{status}, $code, "$id: status passed through");
	is(json($r)->{code}, $code, "$id: frontend body");
	finished($id, $r, 'failed', $code, 0);
}

# failed: no upstream at all, 502 in the flat shape

$r = attempt('fail-502', 'POST', '/down/completions', body => $BODY);

is($r->{status}, 502, 'fail-502: status');
ok(flat($r, 502, 'Bad Gateway'), 'fail-502: flat body') or diag($r->{body});
finished('fail-502', $r, 'failed', 502, 0);

# failed: the frontend does not answer within proxy_read_timeout

$r = attempt('fail-504', 'POST', '/timeout/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'hang' ]);

is($r->{status}, 504, 'fail-504: status');
ok(flat($r, 504, 'Gateway Timeout'), 'fail-504: flat body')
	or diag($r->{body});
finished('fail-504', $r, 'failed', 504, 0);

# failed: the frontend closes the connection in the middle of the stream

$r = attempt('fail-abrupt', 'POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'abrupt' ]);

is($r->{status}, 200, 'fail-abrupt: status');
ok($r->{incomplete}, 'fail-abrupt: the client saw no last chunk');
like($r->{body}, qr/^data: \{/, 'fail-abrupt: first events passed');
finished('fail-abrupt', $r, 'failed', 200, 1);

# the same through proxy_buffering on: the client is slower than the
# frontend, and the stream goes through a temporary file

$r = attempt('buf-sse', 'POST', '/buffered/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'split-done',
		'x-fake-events' => 60 ]);

is($r->{status}, 200, 'buf-sse: status');
like($r->{body}, qr/data: \[DONE\]\n\n\z/, 'buf-sse: ends with [DONE]');
finished('buf-sse', $r, 'succeeded', 200, 1);

$r = attempt('buf-frame', 'POST', '/buffered/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'error-frame' ]);

is($r->{status}, 200, 'buf-frame: status');
finished('buf-frame', $r, 'failed', 200, 1);

ok(scalar $t->log_lines('error.log', qr/\[warn\] .*an upstream response is/
	. qr/ buffered to a temporary file/), 'buffered: a temporary file');

# HEAD and GET generate nothing and are no attempts (issue 29, item 9):
# forwarded, the id returned, nothing recorded, the id still free

$r = attempt('ok-head', 'HEAD', '/v1/models');

is($r->{status}, 200, 'ok-head: status');
is($r->{raw_body}, '', 'ok-head: no body');
is($r->{headers}{'x-dynamo-attempt-id'}, 'ok-head', 'ok-head: id returned');
is(api('ok-head')->{status}, 404, 'ok-head: not recorded');

$r = attempt('ok-head', 'GET', '/v1/models');

is($r->{status}, 200, 'ok-head GET: status');
is(api('ok-head')->{status}, 404, 'ok-head GET: not recorded');

$r = attempt('ok-head', 'POST', '/v1/completions', body => $BODY);

is($r->{status}, 200, 'ok-head: the id is free for a generation');

# the whole response reached a client that keeps its end open: nginx
# lingers on the connection of a POST, for lingering_timeout

$s = start('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'ok-linger' ]);

$r = parse_response(read_until($s, undef, 10)) // {};
is($r->{status}, 200, 'ok-linger: the whole response');
$t0 = time();

ok(Test::DynamoRL::wait_for(sub {
	(api_record('ok-linger')->{state} // '') eq 'succeeded' }, 2),
	'ok-linger: succeeded while the client lingers');

close $s;

$a = wait_done('ok-linger');
is($a->{state}, 'succeeded', 'ok-linger: succeeded');

cmp_ok(iso_ms($a->{ended}) // 0, '<=', $t0 * 1000 + 500,
	'ok-linger: ended when the response was complete');

# dynamo_rl_ledger off: not recorded, an id can be used twice

for (1 .. 2) {
	$r = attempt('no-ledger', 'POST', '/noledger/completions',
		body => $BODY);
	is($r->{status}, 200, "ledger off: request $_");
}

is(forwarded($t, 'no-ledger'), 2, 'ledger off: forwarded twice');
is(api('no-ledger')->{status}, 404, 'ledger off: not in the ledger');

###############################################################################

# in flight: "accepted" before the response header, then canceled when
# the client goes away

$s = start('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'hang',
		'X-Dynamo-Attempt-Id' => 'cancel-hang' ]);
$t0 = time();

ok(wait_forwarded('cancel-hang'), 'accepted: request reached the frontend');

$a = api_record('cancel-hang');
is($a->{state}, 'accepted', 'accepted: state');
ok(exists $a->{status} && !defined $a->{status}, 'accepted: status null');
ok(exists $a->{ended} && !defined $a->{ended}, 'accepted: ended null');
ok(is_false($a->{stream}), 'accepted: stream false');
is($a->{bytes_sent}, 0, 'accepted: nothing sent');
like($a->{started}, $ISO, 'accepted: started');
ok(defined $a->{duration_ms} && $a->{duration_ms} >= 0
	&& $a->{duration_ms} <= (time() - $t0) * 1000 + 1500,
	'accepted: duration so far');

close $s;

ok(wait_closed('cancel-hang'), 'canceled before the header: frontend saw'
	. ' the close');
$a = wait_state('cancel-hang', 'canceled');
is($a->{state}, 'canceled', 'canceled before the header: state');
is($a->{status}, 499, 'canceled before the header: status 499');
ok(is_false($a->{stream}), 'canceled before the header: stream false');
times_ok('canceled before the header', $a);

# in flight: "streaming" once the header is sent; a duplicate meanwhile;
# then canceled

$s = start('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'cancel-stream' ]);

like(read_until($s, qr/data: \{/, 10), qr/data: \{/,
	'streaming: first event');

$a = api_record('cancel-stream');
is($a->{state}, 'streaming', 'streaming: state');
is($a->{status}, 200, 'streaming: status 200');
ok(is_true($a->{stream}), 'streaming: stream true');
ok(exists $a->{ended} && !defined $a->{ended}, 'streaming: ended null');
ok($a->{duration_ms} >= 0, 'streaming: duration so far');

$r = attempt('cancel-stream', 'POST', '/v1/chat/completions', body => $CHAT);

conflict('duplicate in flight', $r, 'cancel-stream');

$a = api_record('cancel-stream');
is($a->{state}, 'streaming', 'duplicate in flight: the first one streams on');

close $s;

canceled_ok('canceled stream', 'cancel-stream');
is(forwarded($t, 'cancel-stream'), 1, 'duplicate in flight: forwarded once');

# canceled over HTTP/2: curl goes away in the middle of the stream

SKIP: {
	my $curl = curl();
	skip 'no HTTP/2 client: apt-get install -y curl (with nghttp2)', 12
		unless $curl;

	my $out = $t->testdir() . '/h2-ok.out';

	system($curl, '-s', '--http2-prior-knowledge', '-m', '20',
		'-o', $out, '-D', "$out.h",
		'-H', 'X-Dynamo-Attempt-Id: h2-ok',
		'-H', 'Content-Type: application/json', '--data-binary', $CHAT,
		'http://127.0.0.1:' . port(8071) . '/v1/chat/completions');

	like($t->read_file('h2-ok.out.h'), qr/^HTTP\/2 200/,
		'h2: a whole stream over HTTP/2');
	$a = wait_state('h2-ok', 'succeeded');
	is($a->{state}, 'succeeded', 'h2: complete stream succeeded');

	$out = $t->testdir() . '/h2-cancel.out';

	my $pid = fork() // die "fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>&', \*STDERR;
		{
			exec($curl, '-s', '-N', '--http2-prior-knowledge',
				'-m', '30', '-o', $out,
				'-H', 'X-Dynamo-Attempt-Id: h2-cancel',
				'-H', 'x-fake-scenario: slow',
				'-H', 'x-fake-events: 100',
				'-H', 'x-fake-interval-ms: 200',
				'-H', 'Content-Type: application/json',
				'--data-binary', $CHAT, 'http://127.0.0.1:'
				. port(8071) . '/v1/chat/completions');
		}

		POSIX::_exit(127);
	}

	ok(Test::DynamoRL::wait_for(sub {
		-s $out && $t->read_file('h2-cancel.out') =~ /data: \{/ }, 10),
		'h2: first event received');

	$a = api_record('h2-cancel');
	is($a->{state}, 'streaming', 'h2: streaming while curl reads');

	kill 'TERM', $pid;
	waitpid($pid, 0);

	canceled_ok('h2', 'h2-cancel');
}

###############################################################################

# duplicates after completion: 409, flat, header echoed, never forwarded

for my $id (qw/ ok-plain fail-503 cancel-hang /) {
	$r = attempt($id, 'POST', '/v1/completions', body => $BODY);

	conflict("duplicate of finished $id", $r, $id);
	is(forwarded($t, $id), 1, "duplicate of finished $id: forwarded once");
}

# an id minted here is recorded without a lookup, and is single use too

$r = call('POST', '/v1/completions', body => $BODY);
my $minted = $r->{headers}{'x-dynamo-attempt-id'} // '';
like($minted, qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/, 'minted: an id');
is(api_record($minted)->{state}, 'succeeded', 'minted: recorded');

$r = attempt($minted, 'POST', '/v1/completions', body => $BODY);
conflict('duplicate of a minted id', $r, $minted);
is(forwarded($t, $minted), 1, 'duplicate of a minted id: forwarded once');

# a duplicate of a finished attempt does not change its record

$a = api_record('ok-plain');
is($a->{state}, 'succeeded', 'duplicate: the record is unchanged');

# 20 requests with one id on 20 connections, spread over two worker
# processes, all written before any is read: one forwarded, 19 refused

{
	my @s = map { IO::Socket::INET->new(Proto => 'tcp',
		PeerAddr => '127.0.0.1:' . port(8073), Timeout => 5) } 1 .. 20;
	my $req = raw('POST', '/v1/completions', body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => 'dup-race',
			'x-fake-scenario' => 'slow', 'x-fake-events' => 3,
			'x-fake-interval-ms' => 100 ]);

	is(scalar(grep { defined } @s), 20, 'race: 20 connections');

	syswrite($_, $req) for grep { defined } @s;

	my @r = map { parse_response(read_until($_, undef, 10)) // {} }
		grep { defined } @s;

	my %status;
	$status{$_->{status} // 'none'}++ for @r;

	is($status{200} // 0, 1, 'race: one 200');
	is($status{409} // 0, 19, 'race: 19 409s');
	is(scalar(grep { ($_->{headers}{'x-dynamo-attempt-id'} // '')
		eq 'dup-race' } @r), 20, 'race: the id on every response');
	is(scalar(grep { ($_->{status} // 0) == 409
		&& flat($_, 409, 'Conflict') } @r), 19,
		'race: flat 409 bodies');
	is(forwarded($t, 'dup-race'), 1, 'race: the frontend saw the id once');
}

###############################################################################

# refused before the ledger: not recorded, the id stays free

my @refused = (
	[ 'two ids', 'refused-two', 'POST', '/v1/completions', 400,
		[ 'X-Dynamo-Attempt-Id' => 'refused-two',
			'X-Dynamo-Attempt-Id' => 'refused-two' ] ],
	[ '405', 'refused-405', 'DELETE', '/v1/completions', 405,
		[ 'X-Dynamo-Attempt-Id' => 'refused-405' ] ],
	[ 'bad path', 'refused-path', 'POST', '/v1//completions', 400,
		[ 'X-Dynamo-Attempt-Id' => 'refused-path' ] ],
);

for my $case (@refused) {
	my ($name, $id, $method, $uri, $code, $headers) = @$case;

	$r = call($method, $uri, body => $BODY, headers => $headers);
	is($r->{status}, $code, "refused $name: $code");

	$a = api($id);
	is($a->{status}, 404, "refused $name: not in the ledger");

	$r = attempt($id, 'POST', '/v1/completions', body => $BODY);
	is($r->{status}, 200, "refused $name: the id is free");
	is(forwarded($t, $id), 1, "refused $name: forwarded once, afterwards");
}

###############################################################################

# expiry: dynamo_rl_attempt_ttl 1s

$r = attempt('ttl-1', 'POST', '/ttl/completions', body => $BODY);
is($r->{status}, 200, 'ttl: status');

$a = wait_done('ttl-1');
is($a->{state}, 'succeeded', 'ttl: recorded');

$r = attempt('ttl-1', 'POST', '/ttl/completions', body => $BODY);
is($r->{status}, 409, 'ttl: refused while it lives');

my $ended = iso_ms($a->{ended});

ok(Test::DynamoRL::wait_for(sub { api('ttl-1')->{status} == 404 }, 10),
	'ttl: 404 once expired');
my $gone = time() * 1000;

cmp_ok($gone - $ended, '>=', 900, 'ttl: not before the ttl passed');

$r = attempt('ttl-1', 'POST', '/ttl/completions', body => $BODY);
is($r->{status}, 200, 'ttl: the id can be used again');
is(forwarded($t, 'ttl-1'), 2, 'ttl: forwarded again');
is(wait_done('ttl-1')->{state}, 'succeeded', 'ttl: recorded again');

###############################################################################

# bytes_sent counts this request's body on a keep-alive connection

{
	my $req = raw('POST', '/v1/completions', body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => 'ka-1',
			'Connection' => 'keep-alive' ]);
	$req .= raw('POST', '/v1/completions', body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => 'ka-2' ]);

	$s = http($req, start => 1);
	my $both = read_until($s, undef, 10);
	close $s;

	my @bodies = $both =~ /\r\n\r\n(\{.*?\})(?=HTTP\/1\.1 |\z)/sg;

	is(scalar @bodies, 2, 'keep-alive: two responses');

	my $a1 = wait_done('ka-1');
	my $a2 = wait_done('ka-2');

	is($a1->{bytes_sent}, length($bodies[0] // ''),
		'keep-alive: first bytes_sent');

	is($a2->{bytes_sent}, length($bodies[1] // ''),
		'keep-alive: second bytes_sent is its own body');
}

###############################################################################

# reload: the zone, and the finished records in it, survive

my $before = api_record('ok-sse');

# ... and an attempt in flight across the reload ends in the old worker;
# the stream lasts 2 s, scaled under valgrind, where a reload is slower

$s = start('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 10,
		'x-fake-interval-ms' => Test::DynamoRL::scale(200),
		'X-Dynamo-Attempt-Id' => 'reload-stream' ]);

my $head = read_until($s, qr/data: \{/, 10);

$t->reload();
ok(!$t->reload_failed(), 'reload: accepted');

is(api_record('reload-stream')->{state}, 'streaming',
	'reload: in flight across the reload');

$r = parse_response($head . read_until($s, undef, 10)) // {};
close $s;

like($r->{body}, qr/data: \[DONE\]\n\n\z/, 'reload: the stream completed');
is(wait_done('reload-stream')->{state}, 'succeeded',
	'reload: finished by the old worker, seen by the new ones');

$a = api_record('ok-sse');
is($a->{state}, 'succeeded', 'reload: record survives');
is($a->{started}, $before->{started}, 'reload: same started');
is($a->{ended}, $before->{ended}, 'reload: same ended');
is($a->{bytes_sent}, $before->{bytes_sent}, 'reload: same bytes_sent');

$r = attempt('ok-sse', 'POST', '/v1/chat/completions', body => $CHAT);
conflict('reload: duplicate', $r, 'ok-sse');
is(forwarded($t, 'ok-sse'), 1, 'reload: still forwarded once');

$r = attempt('after-reload', 'POST', '/v1/completions', body => $BODY);
is($r->{status}, 200, 'reload: new attempts recorded');
is(wait_done('after-reload')->{state}, 'succeeded',
	'reload: new attempt in the ledger');

###############################################################################

# the attempts API

for my $case ([ 'a%20b', 'space' ], [ 'a' x 129, '129 bytes' ],
	[ '', 'empty' ], [ 'a%2Fb', 'encoded slash' ], [ 'a%22b', 'quote' ])
{
	my ($id, $name) = @$case;

	$a = api($id);
	is($a->{status}, 400, "api $name: 400");
	is(join(',', sort keys %{$a->{json}}), 'error,message',
		"api $name: error shape");
	is($a->{json}{error}, 'bad_attempt_id', "api $name: bad_attempt_id");
}

$a = api('a' x 128);
is($a->{status}, 404, 'api 128 bytes: a valid id');

$a = api('never-used');
is($a->{status}, 404, 'api unknown: 404');
is($a->{headers}{'content-type'}, 'application/json', 'api unknown: json');
is(join(',', sort keys %{$a->{json}}), 'error,message',
	'api unknown: error shape');
is($a->{json}{error}, 'unknown_attempt', 'api unknown: unknown_attempt');

$r = call('POST', '/rl/attempts/ok-plain', body => '{}', port => 8070);
is($r->{status}, 405, 'api POST: 405');
is($r->{headers}{allow}, 'GET, HEAD', 'api POST: Allow');
is(json($r)->{error}, 'method', 'api POST: error');

$r = call('DELETE', '/rl/attempts/ok-plain', port => 8070);
is($r->{status}, 405, 'api DELETE: 405');

my $get = api('ok-plain');
$r = call('HEAD', '/rl/attempts/ok-plain', port => 8070);

is($r->{status}, 200, 'api HEAD: 200');
is($r->{headers}{'content-length'}, length($get->{body}),
	'api HEAD: length of the GET body');
is($r->{body}, '', 'api HEAD: no body');
is($r->{headers}{'content-type'}, 'application/json', 'api HEAD: json');

###############################################################################

# a second nginx with the minimal zone, 8 pages: eviction and exhaustion

my $m = Test::DynamoRL->new();

$m->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%RL_MAIN connections=2048%%

http {
    %%RL_HTTP 48k%%

    %%RL_FRONTEND 4%%

    server {
        %%RL_LISTEN 8074%%

        %%RL_REQUEST_PLANE keepalive unbuffered%%

        %%RL_APIS attempts%%
    }
}

EOF

$m->run();

my $SMALL = 8074;

# fill with finished attempts until the first one goes

my ($i, $capacity) = (0);

while ($i < 2000) {
	$i++;
	$r = attempt(sprintf('a%04d', $i), 'POST', '/v1/completions',
		body => $BODY, port => $SMALL);
	last if $r->{status} != 200;
	next if $i == 1;

	if (api('a0001', port => $SMALL)->{status} == 404) {
		$capacity = $i - 1;
		last;
	}
}

ok($capacity, 'small zone: the oldest record went when it was full')
	or diag("request $i: $r->{status}");
$capacity //= 0;
diag("a 48k zone held $capacity finished attempts of 5-byte ids");
cmp_ok($capacity, '>=', 100, 'small zone: at least 100 records in 48k');

# ten more: the ten oldest go, in order, and nothing else

my $last = $i + 10;

for my $j ($i + 1 .. $last) {
	attempt(sprintf('a%04d', $j), 'POST', '/v1/completions',
		body => $BODY, port => $SMALL);
}

my @present = grep { api(sprintf('a%04d', $_), port => $SMALL)->{status}
	== 200 } 1 .. $last;

is(scalar @present, $capacity, 'eviction: still full');
is($present[0], 12, 'eviction: the 11 oldest went first');
is($present[-1], $last, 'eviction: the newest stays');
is(scalar @present, $present[-1] - $present[0] + 1,
	'eviction: no gap among the survivors');

# in-flight records, then pressure: they stay

my @hold = map { start('POST', '/v1/completions', body => $BODY,
	port => $SMALL, headers => [ 'x-fake-scenario' => 'hang',
		'X-Dynamo-Attempt-Id' => "hold-$_" ]) } 1 .. 3;

ok(wait_forwarded(map { "hold-$_" } 1 .. 3), 'hold: three in flight');

for my $j (1 .. $capacity + 20) {
	attempt(sprintf('b%04d', $j), 'POST', '/v1/completions',
		body => $BODY, port => $SMALL);
}

is(scalar(grep { api(sprintf('a%04d', $_), port => $SMALL)->{status}
	== 200 } 1 .. $last), 0, 'pressure: every older finished record went');
is(join(' ', map { api_record("hold-$_", port => $SMALL)->{state} // 'none' }
	1 .. 3), 'accepted accepted accepted',
	'pressure: in-flight records never evicted');
is(api('b' . sprintf('%04d', $capacity + 20), port => $SMALL)->{status}, 200,
	'pressure: the newest finished record is there');

# exhaustion: in-flight attempts take every record, one by one

my (@x, $refused);

for my $j (1 .. $capacity + 10) {
	my $id = sprintf('x%04d', $j);

	my $c = start('POST', '/v1/completions', body => $BODY,
		port => $SMALL, headers => [ 'x-fake-scenario' => 'hang',
			'X-Dynamo-Attempt-Id' => $id ]);

	# either the frontend gets it, or nginx answers at once

	my $sel = IO::Select->new($c);
	my $got = Test::DynamoRL::wait_for(sub {
		return 'answer' if $sel->can_read(0);
		return 'forwarded' if forwarded($t, $id);
	}, 10, 0.01) // 'nothing';

	if ($got ne 'forwarded') {
		$refused = parse_response(read_until($c, undef, 10)) // {};
		$refused->{id} = $id;
		last;
	}

	push @x, $c;
}

ok($refused, 'exhaustion: a request was refused')
	or diag('all ' . @x . ' forwarded');
$refused //= { headers => {} };

is(scalar @x, $capacity - 3, 'exhaustion: every record was in flight');
is($refused->{status}, 503, 'exhaustion: 503');
ok(flat($refused, 503, 'Service Unavailable'), 'exhaustion: flat body')
	or diag($refused->{body});
is(json($refused)->{message}, 'attempt ledger is full',
	'exhaustion: message');
is($refused->{headers}{'x-dynamo-attempt-id'}, $refused->{id},
	'exhaustion: attempt id echoed');
is(forwarded($t, $refused->{id} // ''), 0, 'exhaustion: not forwarded');
is(api($refused->{id}, port => $SMALL)->{status}, 404,
	'exhaustion: not recorded');

my @crit = $m->log_lines('error.log', qr/\[crit\]/);

is(scalar @crit, 1, 'exhaustion: one crit line');
like($crit[0] // '', qr/attempt ledger is full in dynamo_rl zone "rl"/,
	'exhaustion: the line names the zone');

$n = frontend_requests($t);
$r = attempt('full-2', 'POST', '/v1/completions', body => $BODY,
	port => $SMALL);

is($r->{status}, 503, 'exhaustion: the next one 503 too');
is(frontend_requests($t), $n, 'exhaustion: frontend record count unchanged');
is(scalar $m->log_lines('error.log', qr/\[crit\]/), 2,
	'exhaustion: one crit line per refusal');
is(api_record('hold-1', port => $SMALL)->{state}, 'accepted',
	'exhaustion: the in-flight records are there');

# the clients go away: the records finish, and there is room again

close $_ for @x, @hold;

ok(wait_state('hold-3', 'canceled', port => $SMALL)->{state} eq 'canceled'
	&& wait_state(sprintf('x%04d', scalar @x), 'canceled',
		port => $SMALL)->{state} eq 'canceled',
	'exhaustion: canceled once the clients went');

my @held = ((map { "hold-$_" } 1 .. 3),
	(map { sprintf('x%04d', $_) } 1 .. @x));

is(scalar(grep { wait_state($_, 'canceled', port => $SMALL)->{state}
	eq 'canceled' } @held), scalar @held, 'exhaustion: all canceled');

$r = attempt('after-full', 'POST', '/v1/completions', body => $BODY,
	port => $SMALL);
is($r->{status}, 200, 'exhaustion: room again once they finished');
is(scalar(grep { api($_, port => $SMALL)->{status} == 404 } @held), 1,
	'exhaustion: one finished record made room');

$m->stop();

is(scalar $m->log_lines('error.log', qr/\[(?:alert|emerg)\]/), 0,
	'small zone: no alerts');
is(scalar $m->log_lines('error.log', qr/\[crit\]/), 2,
	'small zone: no other crit line');

###############################################################################

# $dynamo_rl_outcome and $body_bytes_sent in the access log

$t->stop();

my %log;

for my $line (split /\n/, $t->read_file('rl.log')) {
	my $l = decode_json($line);
	push @{$log{$l->{attempt}}}, $l;
}

for my $id (sort keys %expect) {
	my $e = $expect{$id};
	my $l = ($log{$id} // [])->[0] // {};

	is(join(' ', $l->{outcome} // '-', $l->{status} // '-',
		$l->{body_bytes} // '-'),
		"$e->{state} $e->{status} $e->{bytes}",
		"log $id: outcome, status, bytes");
}

is(join(' ', map { $_->{outcome} } @{$log{'cancel-hang'} // []}),
	'canceled rejected', 'log cancel-hang: canceled, then rejected');

my ($dup) = grep { $_->{status} eq '409' } @{$log{'cancel-stream'} // []};
is($dup && "$dup->{outcome} $dup->{deny}", 'rejected duplicate_attempt',
	'log duplicate: rejected, duplicate_attempt');

is(join(' ', map { $_->{outcome} } @{$log{'h2-cancel'} // []}),
	curl() ? 'canceled' : '', 'log h2-cancel: canceled');

my @race = @{$log{'dup-race'} // []};
is(scalar(grep { $_->{outcome} eq 'succeeded' } @race), 1,
	'log race: one succeeded');
is(scalar(grep { $_->{outcome} eq 'rejected'
	&& $_->{deny} eq 'duplicate_attempt' } @race), 19,
	'log race: 19 rejected');
is(scalar(keys %{{ map { $_->{pid} => 1 } @race }}), 2,
	'log race: both worker processes took part');

###############################################################################



# a request with a client attempt id, timed

sub attempt {
	my ($id, $method, $uri, %o) = @_;

	my $t0 = time();
	my $r = call($method, $uri, %o,
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			@{$o{headers} // []} ]);

	$r->{t0} = $t0;
	$r->{t1} = time();

	return $r;
}



sub api_record {
	my ($id, %o) = @_;

	my $r = api($id, %o);
	return $r->{status} == 200 ? $r->{json} : { http => $r->{status} };
}

# polls until the record is in that state; returns the last record

sub wait_state {
	my ($id, $state, %o) = @_;

	my $a;

	Test::DynamoRL::wait_for(sub {
		$a = api_record($id, %o);
		return ($a->{state} // '') eq $state;
	}, 10);

	return $a;
}

# polls until the record is in a terminal state, or is not there

sub wait_done {
	my ($id, %o) = @_;

	my $a;

	Test::DynamoRL::wait_for(sub {
		$a = api_record($id, %o);
		return ($a->{state} // '') !~ /^(?:accepted|streaming)$/;
	}, 10);

	return $a;
}

# the record of a finished attempt, every field, against what the client
# got; remembered for the access log checks

sub finished {
	my ($id, $r, $state, $status, $stream) = @_;

	my $name = "$id record";

	# nginx writes the record in the log phase, after the client closed

	my $a = wait_done($id);

	# "reason" only when it has one (not_forwarded, worker_exited)

	is(join(',', sort grep { $_ ne 'reason' } keys %$a),
		'attempt_id,bytes_sent,duration_ms,'
		. 'ended,request_id,started,state,status,stream',
		"$name: fields");
	is($a->{attempt_id}, $id, "$name: attempt_id");
	is($a->{state}, $state, "$name: state");
	is($a->{status}, $status, "$name: status");
	ok($stream ? is_true($a->{stream}) : is_false($a->{stream}),
		"$name: stream " . ($stream ? 'true' : 'false'));
	ok(($a->{bytes_sent} // 0) > 0, "$name: bytes_sent > 0");
	is($a->{bytes_sent}, length($r->{raw_body}),
		"$name: bytes_sent is what the client got");
	is($r->{headers}{'x-dynamo-attempt-id'}, $id, "$name: id on response");
	times_ok($name, $a);

	my $started = iso_ms($a->{started}) // 0;
	ok($started >= ($r->{t0} - 1) * 1000
		&& $started <= ($r->{t1} + 1) * 1000,
		"$name: started while the client waited");

	$expect{$id} = { state => $state, status => $status,
		bytes => $a->{bytes_sent} // '' };
}

# a stream the client went away from: the frontend saw the close, and
# the record of $id is canceled, with the status, the bytes sent and the
# times of what had streamed

sub canceled_ok {
	my ($name, $id) = @_;

	ok(wait_closed($id), "$name: frontend saw the close");

	my $a = wait_state($id, 'canceled');

	is($a->{state}, 'canceled', "$name: state");
	is($a->{status}, 200, "$name: status");
	ok(is_true($a->{stream}), "$name: stream true");
	ok($a->{bytes_sent} > 0, "$name: bytes sent");
	times_ok($name, $a);
}

sub times_ok {
	my ($name, $a) = @_;

	like($a->{started} // '', $ISO, "$name: started RFC 3339 in ms");
	like($a->{ended} // '', $ISO, "$name: ended RFC 3339 in ms");

	my ($s, $e) = map { iso_ms($_ // '') } @$a{qw/ started ended /};

	ok(defined $s && defined $e && defined $a->{duration_ms}
		&& $a->{duration_ms} == $e - $s && $e >= $s,
		"$name: duration_ms is ended - started");
}


# 409 in Dynamo's flat shape, with the id echoed

sub conflict {
	my ($name, $r, $id) = @_;

	is($r->{status}, 409, "$name: 409");
	ok(flat($r, 409, 'Conflict'), "$name: flat body") or diag($r->{body});
	is($r->{headers}{'x-dynamo-attempt-id'}, $id, "$name: id echoed");
	is($r->{headers}{'x-should-retry'}, 'false', "$name: not to retry");
}








sub wait_forwarded {
	my (@ids) = @_;

	return Test::DynamoRL::wait_for(sub {
		my %seen = map { ($_->{headers}{'x-request-id'} // '') => 1 }
			grep { !exists $_->{event} } @{frontend_records($t)};
		return !grep { !$seen{$_} } @ids;
	}, 10);
}

sub wait_closed {
	my ($id) = @_;

	return Test::DynamoRL::wait_for(sub {
		scalar grep { ($_->{event} // '') eq 'client_closed'
			&& ($_->{'x-request-id'} // '') eq $id }
			@{frontend_records($t)};
	}, 10);
}


# curl, if it speaks HTTP/2

sub curl {
	for my $dir (split /:/, $ENV{PATH} // '/usr/bin') {
		my $curl = "$dir/curl";
		next unless -x $curl;
		return `$curl -V 2>/dev/null` =~ /^Features:.*\bHTTP2\b/m
			? $curl : undef;
	}

	return undef;
}

###############################################################################
