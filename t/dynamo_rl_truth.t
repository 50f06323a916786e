#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The attempts API tells the truth (issue 29): for each way a response can
# end, with proxy_buffering on and off, over HTTP/1.1 and HTTP/2, what the
# client received, how many times the upstream saw the request, and what
# the attempts API says afterwards.  The upstream is a small server of the
# test's own (16 MiB answers, SSE or JSON, errors in every form Dynamo
# sends, a 500 and a reset from a first server of two); the clients are
# raw sockets: one that stops reading (a 4k receive buffer, send_timeout
# 1s), and an HTTP/2 one that grants a 1000-byte window and never more.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Socket qw/ :all /;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ api call fork_server json_lines rl_conf
	rl_test /;
use Test::DynamoRL::H2;
use Test::DynamoRL::Redis;

###############################################################################

# the plan: the cells below, and two checks of the store's gateway

my $t = rl_test(600, 424 + 2, <<'EOF', has => [qw/ http proxy http_v2 /]);

%%RL_MAIN workers=1%%

worker_shutdown_timeout 1s;

http {
    %%RL_HTTP 4m%%

    %%RL_LOG_FORMAT rl attempt outcome status body_bytes uri%%

    upstream up {
        server 127.0.0.1:8081;
    }

    # the first server resets or answers 500; nginx would try the second

    upstream two {
        server 127.0.0.1:8082 max_fails=0;
        server 127.0.0.1:8081 backup;
    }

    # the first server is not listening: nothing written, a retry is fine

    upstream down {
        server 127.0.0.1:8083 max_fails=0;
        server 127.0.0.1:8081 backup;
    }

    # a re-send would find no server: nginx resets request_sent

    upstream gone {
        server 127.0.0.1:8082 max_fails=0;
        server 127.0.0.1:8083 backup;
    }

    server {
        listen 127.0.0.1:8080 sndbuf=32k;
        listen 127.0.0.1:8071 http2 sndbuf=32k;
        server_name localhost;

        access_log %%TESTDIR%%/rl.log rl;

        send_timeout 1s;

        location /on/ {
            dynamo_rl_plane request;
            proxy_buffering on;
            proxy_pass http://up/;
        }

        location /off/ {
            dynamo_rl_plane request;
            proxy_buffering off;
            proxy_pass http://up/;
        }

        location /ton/ {
            dynamo_rl_plane request;
            proxy_buffering on;
            proxy_read_timeout 1s;
            proxy_pass http://up/;
        }

        location /toff/ {
            dynamo_rl_plane request;
            proxy_buffering off;
            proxy_read_timeout 1s;
            proxy_pass http://up/;
        }

        location /two/ {
            dynamo_rl_plane request;
            dynamo_rl_methods POST PUT GET HEAD;
            proxy_next_upstream error timeout http_500 non_idempotent;
            proxy_pass http://two/;
        }

        location /gone/ {
            dynamo_rl_plane request;
            dynamo_rl_methods POST PUT GET HEAD;
            proxy_next_upstream error timeout http_500;
            proxy_pass http://gone/;
        }

        location /down/ {
            dynamo_rl_plane request;
            dynamo_rl_methods POST PUT GET HEAD;
            proxy_next_upstream error timeout http_500;
            proxy_pass http://down/;
        }
    }

    server {
        listen 127.0.0.1:8070;
        server_name localhost;

        location /rl/attempts/ {
            dynamo_rl_attempts_api;
        }
    }
}

EOF

my $d = $t->testdir();
my $uplog = "$d/upstream.log";

$t->run_daemon(\&upstream, port(8081), 'good', $uplog);
$t->run_daemon(\&upstream, port(8082), 'bad', $uplog);
$t->waitforsocket('127.0.0.1:' . port(8081));
$t->waitforsocket('127.0.0.1:' . port(8082));

$t->run();

my $BIG = 16 * 1024 * 1024;
my $n = 0;

###############################################################################

# a client that stops reading: 16 MiB does not fit in the socket buffers,
# send_timeout ends the response with most of it still in nginx

for my $proto (qw/ h1 h2 /) {
	for my $buf (qw/ on off /) {
		for my $kind (qw/ sse json /) {
			my $cell = "$proto $buf $kind stalled";
			my $id = 'stall-' . ++$n;

			my $got = $proto eq 'h1'
				? stall_h1("/$buf/v1/completions", $id, $kind, $BIG)
				: stall_h2("/$buf/v1/completions", $id, $kind, $BIG);

			my $a = settled($id);

			ok($got > 0 && $got < $BIG, "$cell: client got part")
				or diag("got $got");
			is(seen($id), 1, "$cell: upstream once");
			is($a->{state}, 'failed', "$cell: failed");
			is($a->{reason}, 'send_timeout', "$cell: send_timeout");
		}
	}
}

# the same answers, read whole: succeeded

for my $proto (qw/ h1 h2 /) {
	for my $buf (qw/ on off /) {
		for my $kind (qw/ sse json /) {
			my $cell = "$proto $buf $kind complete";
			my $id = 'whole-' . ++$n;
			my $size = 1024 * 1024;

			my ($status, $body) = $proto eq 'h1'
				? whole_h1("/$buf/v1/completions", $id, $kind, $size)
				: whole_h2("/$buf/v1/completions", $id, $kind, $size);

			my $a = settled($id);

			ok($status == 200 && length($body) >= $size
				&& ($kind ne 'sse' || $body =~ /data: \[DONE\]\n\n\z/),
				"$cell: client got all");
			is(seen($id), 1, "$cell: upstream once");
			is($a->{state}, 'succeeded', "$cell: succeeded");
			ok(!exists $a->{reason}, "$cell: no reason");
		}
	}
}

# the client goes away mid-stream (HTTP/1.1: closes; HTTP/2: RST_STREAM,
# or closes the connection): canceled/client_closed

for my $how (qw/ h1-close h2-rst h2-close /) {
	for my $buf (qw/ on off /) {
		my $cell = "$how $buf client abort";
		my $id = 'abort-' . ++$n;
		my ($s, $h, $sid);

		if ($how eq 'h1-close') {
			$s = IO::Socket::INET->new(
				PeerAddr => '127.0.0.1:' . port(8080))
				or die "connect: $!\n";
			syswrite($s, request("/$buf/v1/completions", $id, 'hang', 0));

		} else {
			$h = Test::DynamoRL::H2->new('127.0.0.1:' . port(8071))
				or die "h2: $!\n";
			$sid = $h->request("/$buf/v1/completions", '{"prompt":"p"}',
				'x-dynamo-attempt-id' => $id, 'x-up' => 'hang',
				'x-up-size' => 0);
		}

		ok(Test::DynamoRL::wait_for(sub {
			(api($id)->{json}{state} // '') eq 'streaming' }, 10),
			"$cell: streaming");

		if ($s) {
			close $s;

		} elsif ($how eq 'h2-rst') {
			$h->frame(3, 0, $sid, pack('N', 8));

		} else {
			CORE::close($h->{s});
		}

		my $a = settled($id);

		is($a->{state}, 'canceled', "$cell: canceled");
		is($a->{reason}, 'client_closed', "$cell: client_closed");
		is(seen($id), 1, "$cell: upstream once");

		$h->finish() if $h && $how eq 'h2-rst';
	}
}

# a request whose bytes reached the first of two servers (it resets the
# connection, or answers 500) is never sent to the second, whatever its
# method and proxy_next_upstream; its id is used up

for my $method (qw/ POST PUT GET /) {
	for my $bad (qw/ reset 500 /) {
		my $cell = "$method, first server $bad";
		my $id = 'two-' . ++$n;

		my ($status) = whole_h1('/two/v1/completions', $id, 'sse', 100,
			method => $method, headers => [ "X-Bad: $bad" ]);

		is($status, $bad eq 'reset' ? 502 : 500, "$cell: client status");
		is(seen($id), 1, "$cell: upstream once");
		is(scalar(grep { ($_->{id} // '') eq $id && $_->{server} eq 'good' }
			json_lines($uplog)), 0, "$cell: never the second server");

		# a GET is no attempt (item 9): nothing recorded, the id free

		if ($method eq 'GET') {
			is(api($id)->{status}, 404, "$cell: not recorded");
			next;
		}

		my $a = settled($id);

		is($a->{state}, 'failed', "$cell: failed");
		isnt($a->{reason} // '', 'not_forwarded', "$cell: id used up");

		($status) = whole_h1('/two/v1/completions', $id, 'sse', 100,
			method => $method);
		is($status, 409, "$cell: the id again: 409");
	}
}

# the first server resets, and a re-send would find no server: the id
# reached an upstream and stays used up

for my $method (qw/ POST PUT /) {
	my $cell = "$method, first server reset, second down";
	my $id = 'gone-' . ++$n;

	my ($status) = whole_h1('/gone/v1/completions', $id, 'sse', 100,
		method => $method, headers => [ 'X-Bad: reset' ]);

	is($status, 502, "$cell: 502");
	is(seen($id), 1, "$cell: upstream once");

	my $a = settled($id);

	is($a->{state}, 'failed', "$cell: failed");
	is($a->{reason}, 'upstream_status', "$cell: upstream_status (502)");

	($status) = whole_h1('/gone/v1/completions', $id, 'sse', 100,
		method => $method);
	is($status, 409, "$cell: the id again: 409");
}

# nothing written to the first server (not listening): the second one
# gets the request, once

for my $method (qw/ POST PUT /) {
	my $cell = "$method, first server down";
	my $id = 'down-' . ++$n;

	my ($status) = whole_h1('/down/v1/completions', $id, 'sse', 100,
		method => $method);

	is($status, 200, "$cell: 200");
	is(seen($id), 1, "$cell: upstream once");
	is(settled($id)->{state}, 'succeeded', "$cell: succeeded");
}

# one UUID, one attempt: an id in the UUID grammar is compared, stored
# and sent as request-id in its lower-case form

{
	my $upper = '55367DC5-8F2B-4C1E-9D3A-0A1B2C3D4E5F';
	my $lower = lc $upper;

	my ($status, undef, $r) = whole_h1('/off/v1/completions', $upper,
		'sse', 100);

	is($status, 200, 'UUID upper case: forwarded');
	is($r->{headers}{'x-dynamo-attempt-id'}, $lower,
		'UUID upper case: the lower-case id in the answer');

	my ($rec) = grep { lc($_->{id} // '') eq $lower } json_lines($uplog);
	is($rec->{id}, $lower, 'UUID upper case: lower case upstream');
	is($rec->{rid}, $lower, 'UUID upper case: request-id lower case');

	($status) = whole_h1('/off/v1/completions', $lower, 'sse', 100);
	is($status, 409, 'UUID lower case after upper case: 409');

	($status) = whole_h1('/off/v1/completions',
		'55367dc5-8F2B-4c1e-9D3A-0a1b2c3d4e5f', 'sse', 100);
	is($status, 409, 'UUID mixed case: 409');

	is(scalar(grep { lc($_->{id} // '') eq $lower } json_lines($uplog)), 1,
		'UUID: Dynamo saw the request id once');

	is(api($upper)->{json}{state}, 'succeeded',
		'UUID: attempts API by the upper-case id');
	is(api($lower)->{json}{attempt_id}, $lower,
		'UUID: attempts API names the lower-case id');

	# not a UUID: case matters, as before

	($status) = whole_h1('/off/v1/completions', 'Run-ABC', 'sse', 100);
	is($status, 200, 'not a UUID: Run-ABC forwarded');
	($status) = whole_h1('/off/v1/completions', 'run-abc', 'sse', 100);
	is($status, 200, 'not a UUID: run-abc is another attempt');
}

# in-stream errors in every form Dynamo sends, each followed by
# [DONE], through both buffering modes and both protocols: the client
# gets the whole stream, the attempt is failed with its reason

my $CHUNK = 'data: {"id":"c-1","choices":[{"index":0,"text":"a",'
	. '"finish_reason":null}]}' . "\n\n";
my $DONE = "data: [DONE]\n\n";

my @STREAMS = (
	[ 'error member', 'in_stream_error', $CHUNK
		. 'data: {"error":{"message":"m","type":"internal","code":500}}'
		. "\n\n" . $DONE ],
	[ 'error member, spaced', 'in_stream_error', $CHUNK
		. 'data: { "error" : { "message": "m" } }' . "\n\n" . $DONE ],
	[ 'error member after others', 'in_stream_error', $CHUNK
		. 'data: {"id":"c-1","object":"chunk","error":{"message":"m"}}'
		. "\n\n" . $DONE ],
	[ 'error member over two data lines', 'in_stream_error', $CHUNK
		. "data: {\"id\":\"c-1\",\ndata: \"error\":{\"message\":\"m\"}}"
		. "\n\n" . $DONE ],
	[ 'event: error', 'in_stream_error', $CHUNK
		. "event: error\n: backend failed\n\n" ],
	[ 'response.failed', 'in_stream_error',
		"event: response.created\ndata: {\"type\":\"response.created\"}"
		. "\n\nevent: response.failed\ndata: {\"type\":"
		. "\"response.failed\",\"response\":{\"status\":\"failed\"}}\n\n"
		. $DONE ],
	[ 'finish_reason abort', 'aborted', $CHUNK
		. 'data: {"id":"c-1","choices":[{"index":0,"text":"",'
		. '"finish_reason":"abort"}]}' . "\n\n" . $DONE ],
	[ 'nvext cancelled', 'aborted', $CHUNK
		. 'data: {"id":"c-1","choices":[{"index":0,"text":"",'
		. '"finish_reason":"stop"}],"nvext":{"detailed_finish_reason":'
		. '"cancelled"}}' . "\n\n" . $DONE ],
	[ 'generate abort', 'aborted',
		'data: {"text":"a","output_ids":[1],"meta_info":{"id":"r",'
		. '"finish_reason":{"type":"abort","message":"paused"}}}'
		. "\n\n" . $DONE ],
	[ 'stop, not cancelled', undef, $CHUNK
		. 'data: {"id":"c-1","choices":[{"index":0,"text":"",'
		. '"finish_reason":"stop"}],"nvext":{"detailed_finish_reason":'
		. '"stop"}}' . "\n\n" . $DONE ],
);

for my $proto (qw/ h1 h2 /) {
	for my $buf (qw/ on off /) {
		for my $st (@STREAMS) {
			my ($name, $reason, $body) = @$st;
			my $cell = "$proto $buf $name";
			my $id = 'ise-' . ++$n;
			my $hex = unpack('H*', $body);
			my ($status, $got);

			if ($proto eq 'h1') {
				($status, $got) = whole_h1("/$buf/v1/completions", $id,
					'raw', 0, headers => [ "X-Up-Body: $hex" ]);

			} else {
				my $h = Test::DynamoRL::H2->new(
					'127.0.0.1:' . port(8071)) or die "h2: $!\n";
				my $sid = $h->request("/$buf/v1/completions",
					'{"prompt":"p"}', 'x-dynamo-attempt-id' => $id,
					'x-up' => 'raw', 'x-up-body' => $hex);
				$h->pump(sub { $h->ended($sid) }, 10);
				($status, $got) = ($h->status($sid), $h->data($sid));
				$h->finish();
			}

			is($got, $body, "$cell: client got the whole stream");
			is(seen($id), 1, "$cell: upstream once");

			my $a = settled($id);

			is($a->{state}, $reason ? 'failed' : 'succeeded',
				"$cell: state");
			is($a->{reason}, $reason, "$cell: reason");
		}
	}
}

# the upstream ends the answer: closes short of its length, resets,
# closes a close-delimited stream before [DONE], or says nothing until
# proxy_read_timeout; failed, upstream_incomplete

for my $proto (qw/ h1 h2 /) {
	for my $buf (qw/ on off /) {
		for my $kind (qw/ trunc rst eof timeout /) {
			my $cell = "$proto $buf upstream $kind";
			my $id = 'up-' . ++$n;
			my $path = "/t$buf/v1/completions";
			my $up = $kind eq 'timeout' ? 'hang' : $kind;

			my ($status, $got) = $proto eq 'h1'
				? whole_h1($path, $id, $up, 0)
				: whole_h2($path, $id, $up, 0);

			unlike($got // '', qr/\[DONE\]/, "$cell: no [DONE] to the client");
			is(seen($id), 1, "$cell: upstream once");

			my $a = settled($id);

			is($a->{state}, 'failed', "$cell: failed");
			is($a->{reason}, $status && $status == 504 ? 'upstream_status'
				: 'upstream_incomplete', "$cell: reason");
		}
	}
}

# a client that accepts gzip: the frontend is asked for identity, the
# stream is read as it is and ends in [DONE]; the client's gzip is still
# nginx's to use toward it

for my $buf (qw/ on off /) {
	my $cell = "Accept-Encoding gzip, $buf";
	my $id = 'gzip-' . ++$n;

	my ($status, $body, $r) = whole_h1("/$buf/v1/completions", $id, 'gzip',
		0, headers => [ 'Accept-Encoding: gzip, deflate, br' ]);

	is($status, 200, "$cell: 200");
	like($body, qr/data: \[DONE\]\n\n\z/, "$cell: plain stream to the client");
	ok(!defined $r->{headers}{'content-encoding'},
		"$cell: no Content-Encoding");

	my ($rec) = grep { ($_->{id} // '') eq $id } json_lines($uplog);
	is($rec->{ae}, 'identity', "$cell: the frontend was asked identity");
	is(settled($id)->{state}, 'succeeded', "$cell: succeeded");
}

# a reload whose worker_shutdown_timeout cuts a stream that is still
# running: the gateway cut it, failed/gateway_shutdown, not canceled

for my $proto (qw/ h1 h2 /) {
	for my $buf (qw/ on off /) {
		my $cell = "$proto $buf reload, worker_shutdown_timeout";
		my $id = 'shut-' . ++$n;
		my ($s, $h, $sid, $got);

		if ($proto eq 'h1') {
			$s = IO::Socket::INET->new(
				PeerAddr => '127.0.0.1:' . port(8080))
				or die "connect: $!\n";
			syswrite($s, request("/$buf/v1/completions", $id, 'hang', 0));

			$got = '';
			my $sel = IO::Select->new($s);

			while ($buf eq 'off' && $got !~ /data: /) {
				last unless $sel->can_read(10);
				sysread($s, $got, 65536, length $got) or last;
			}

		} else {
			$h = Test::DynamoRL::H2->new('127.0.0.1:' . port(8071))
				or die "h2: $!\n";
			$sid = $h->request("/$buf/v1/completions", '{"prompt":"p"}',
				'x-dynamo-attempt-id' => $id, 'x-up' => 'hang',
				'x-up-size' => 0);
			$h->pump(sub { $h->data($sid) =~ /data: / }, 10)
				if $buf eq 'off';
			$got = $h->data($sid);
		}

		# proxy_buffering on holds the header and the first event back

		like($got, qr/data: /, "$cell: client got the first event")
			if $buf eq 'off';

		ok(Test::DynamoRL::wait_for(sub {
			(api($id)->{json}{state} // '') eq 'streaming' }, 10),
			"$cell: streaming");

		$t->reload();

		my $a = settled($id);

		is($a->{state}, 'failed', "$cell: failed");
		is($a->{reason}, 'gateway_shutdown', "$cell: gateway_shutdown");
		is(seen($id), 1, "$cell: upstream once");

		close $s if $s;
		$h->finish() if $h;
	}
}

###############################################################################

# the store's cells: a second gateway whose ledger is in Redis; the
# reasons go through the store's records

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $ts = Test::DynamoRL->new()->check_at_end();

$ts->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 4m%%

    dynamo_rl_store redis://127.0.0.1:8379 replica=T timeout=2s;

    upstream up {
        server 127.0.0.1:8081;
    }

    server {
        listen 127.0.0.1:8090 sndbuf=32k;
        server_name localhost;

        send_timeout 1s;

        # the gate is not tested here: it would refuse attempts until
        # the store's gate record is first read

        location /on/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_buffering on;
            proxy_pass http://up/;
        }

        location /off/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_buffering off;
            proxy_pass http://up/;
        }
    }

    server {
        listen 127.0.0.1:8092;
        server_name localhost;

        location /rl/attempts/ {
            dynamo_rl_attempts_api;
        }
    }
}

EOF

$ts->run();

# the worker process connects to the store after it starts: until then
# attempts are refused (503 store_unavailable), not what is tested here

Test::DynamoRL::wait_for(sub {
	api('store-probe', port => 8092)->{status} == 404 }, 10);

for my $buf (qw/ on off /) {
	my $cell = "store $buf";
	my $id = 'store-stall-' . ++$n;

	my $got = stall_h1("/$buf/v1/completions", $id, 'sse', $BIG,
		port => 8090, api => 8092);
	my $a = settled($id, port => 8092);

	ok($got > 0 && $got < $BIG, "$cell stalled: client got part");
	is(seen($id), 1, "$cell stalled: upstream once");
	is($a->{state}, 'failed', "$cell stalled: failed");
	is($a->{reason}, 'send_timeout', "$cell stalled: send_timeout");
	is($a->{replica}, 'T', "$cell stalled: the store's record");

	$id = 'store-ise-' . ++$n;

	my ($status, $body) = whole_h1("/$buf/v1/completions", $id, 'raw', 0,
		port => 8090, headers => [ 'X-Up-Body: ' . unpack('H*',
			$STREAMS[7][2]) ]);
	$a = settled($id, port => 8092);

	is($body, $STREAMS[7][2], "$cell $STREAMS[7][0]: the whole stream");
	is($a->{state}, 'failed', "$cell $STREAMS[7][0]: failed");
	is($a->{reason}, 'aborted', "$cell $STREAMS[7][0]: aborted");

	$id = 'store-ok-' . ++$n;

	($status) = whole_h1("/$buf/v1/completions", $id, 'sse', 1 << 20,
		port => 8090);
	$a = settled($id, port => 8092);

	is($status, 200, "$cell complete: 200");
	is($a->{state}, 'succeeded', "$cell complete: succeeded");
	ok(!exists $a->{reason}, "$cell complete: no reason");
}

{
	my $upper = '0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B';

	my ($status) = whole_h1('/off/v1/completions', $upper, 'sse', 100,
		port => 8090);
	is($status, 200, 'store UUID upper case: forwarded');

	($status) = whole_h1('/off/v1/completions', lc $upper, 'sse', 100,
		port => 8090);
	is($status, 409, 'store UUID lower case: 409 across the store');
	is(api($upper, port => 8092)->{json}{attempt_id}, lc $upper,
		'store UUID: found by either spelling');
}


###############################################################################

# the attempts API's record once it is terminal

sub settled {
	my ($id, %o) = @_;

	my $last = {};

	Test::DynamoRL::wait_for(sub {
		$last = api($id, %o)->{json};
		return ($last->{state} // 'accepted')
			!~ /^(?:accepted|streaming)$/;
	}, 30);

	return $last;
}

# how many requests with this attempt id the upstream servers saw

sub seen {
	my ($id) = @_;

	return scalar grep { ($_->{id} // '') eq $id } json_lines($uplog);
}

sub request {
	my ($path, $id, $kind, $size, %o) = @_;

	my $body = $o{body} // '{"prompt":"p"}';
	my $method = $o{method} // 'POST';

	return "$method $path HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\nX-Up: $kind\r\n"
		. "X-Up-Size: $size\r\n"
		. join('', map { "$_\r\n" } @{$o{headers} // []})
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body";
}

# HTTP/1.1 with a 4k receive buffer: reads the header and 64k, then
# nothing until the attempt is terminal; returns the bytes it read

sub stall_h1 {
	my ($path, $id, $kind, $size, %o) = @_;

	socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
	setsockopt($s, SOL_SOCKET, SO_RCVBUF, pack('i', 4096));
	connect($s, pack_sockaddr_in(port($o{port} // 8080),
		inet_aton('127.0.0.1')))
		or die "connect: $!\n";
	binmode $s;

	syswrite($s, request($path, $id, $kind, $size));

	my ($buf, $sel) = ('', IO::Select->new($s));

	while (length $buf < 65536 && $sel->can_read(10)) {
		sysread($s, $buf, 65536, length $buf) or last;
	}

	settled($id, port => $o{api} // 8070);
	close $s;

	my $head = index($buf, "\r\n\r\n");
	return $head < 0 ? 0 : length($buf) - $head - 4;
}

sub whole_h1 {
	my ($path, $id, $kind, $size, %o) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
		. port($o{port} // 8080))
		or die "connect: $!\n";
	binmode $s;

	syswrite($s, request($path, $id, $kind, $size, %o));

	my ($buf, $sel) = ('', IO::Select->new($s));

	while ($sel->can_read(10)) {
		sysread($s, $buf, 1 << 20, length $buf) or last;
	}

	my $r = Test::DynamoRL::parse_response($buf) // { status => 0 };

	return ($r->{status}, $r->{body} // '', $r);
}

# HTTP/2 with a 1000-byte stream window that is never given back

sub stall_h2 {
	my ($path, $id, $kind, $size) = @_;

	my $h = Test::DynamoRL::H2->new('127.0.0.1:' . port(8071),
		window => 1000)
		or die "h2: $!\n";

	my $sid = $h->request($path, '{"prompt":"p"}',
		'x-dynamo-attempt-id' => $id, 'x-up' => $kind,
		'x-up-size' => $size);

	$h->pump(sub { length $h->data($sid) >= 1000 }, 10);

	settled($id);
	$h->pump(sub { $h->ended($sid) }, 1);

	my $got = length $h->data($sid);
	$h->finish();

	return $got;
}

sub whole_h2 {
	my ($path, $id, $kind, $size) = @_;

	my $h = Test::DynamoRL::H2->new('127.0.0.1:' . port(8071))
		or die "h2: $!\n";

	my $sid = $h->request($path, '{"prompt":"p"}',
		'x-dynamo-attempt-id' => $id, 'x-up' => $kind,
		'x-up-size' => $size);

	$h->pump(sub { $h->ended($sid) }, 20);

	my @r = ($h->status($sid) // 0, $h->data($sid));
	$h->finish();

	return @r;
}

###############################################################################

# the upstream: one process per connection, every request recorded (the
# attempt id it carried, its method, its Accept-Encoding) before it is
# answered as X-Up says; the "bad" server answers X-Bad (reset or 500)

sub upstream {
	my ($port, $name, $log) = @_;

	fork_server($port, $name, sub { up_conn($_[0], $name, $log) });
}

sub up_conn {
	my ($c, $name, $log) = @_;

	binmode $c;
	local $SIG{PIPE} = 'IGNORE';

	my $buf = '';
	my $sel = IO::Select->new($c);

	until ($buf =~ /\r\n\r\n/) {
		return unless $sel->can_read(10);
		return unless sysread($c, $buf, 65536, length $buf);
	}

	my ($head, $rest) = split /\r\n\r\n/, $buf, 2;
	my ($line, @lines) = split /\r\n/, $head;
	my %h;

	for (@lines) {
		my ($k, $v) = /^([^:]*):[ \t]*(.*)$/ or next;
		$h{lc $k} = $v;
	}

	my $len = $h{'content-length'} // 0;

	while (length $rest < $len) {
		last unless $sel->can_read(10);
		last unless sysread($c, $rest, 65536, length $rest);
	}

	my ($method, $uri) = split / /, $line;

	open my $fh, '>>', $log or return;
	syswrite($fh, JSON::PP->new->canonical->encode({ server => $name,
		method => $method, uri => $uri,
		id => $h{'x-dynamo-attempt-id'}, rid => $h{'request-id'},
		ae => $h{'accept-encoding'} }) . "\n");
	close $fh;

	if ($name eq 'bad') {
		if (($h{'x-bad'} // 'reset') eq 'reset') {
			setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
			close $c;
			return;
		}

		return up_send($c, 500, 'application/json',
			'{"message":"boom","type":"Internal Server Error",'
			. '"code":500}');
	}

	my $kind = $h{'x-up'} // 'sse';
	my $size = $h{'x-up-size'} // 1024;

	if ($kind eq 'hang') {

		# a stream's header and first event, then nothing until nginx
		# closes the connection

		syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream"
			. "\r\nConnection: close\r\n\r\n"
			. 'data: {"id":"cmpl-1","choices":[{"index":0,"text":"a",'
			. '"finish_reason":null}]}' . "\n\n");
		1 while $sel->can_read(30) && sysread($c, my $x, 65536);
		return;
	}

	if ($kind eq 'json') {
		my $text = 'a' x $size;
		return up_send($c, 200, 'application/json',
			'{"id":"cmpl-1","object":"text_completion","choices":'
			. '[{"index":0,"text":"' . $text . '",'
			. '"finish_reason":"stop"}]}');
	}

	if ($kind =~ /^(?:trunc|rst|eof)$/) {

		# two events, then the upstream ends without [DONE]: closes
		# short of its Content-Length, resets, or closes a stream
		# delimited by the close

		my $events = ('data: {"id":"c-1","choices":[{"index":0,'
			. '"text":"a","finish_reason":null}]}' . "\n\n") x 2;

		syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream"
			. "\r\n" . ($kind eq 'eof' ? ''
				: 'Content-Length: ' . (length($events) + 100) . "\r\n")
			. "Connection: close\r\n\r\n$events");

		if ($kind eq 'rst') {
			setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
		}

		close $c;
		return;
	}

	if ($kind eq 'gzip') {

		# a gzip-capable frontend: compresses whenever it may

		my $body = 'data: {"id":"c-1","choices":[{"index":0,"text":"a",'
			. '"finish_reason":"stop"}]}' . "\n\ndata: [DONE]\n\n";

		return up_send($c, 200, 'text/event-stream', $body)
			unless ($h{'accept-encoding'} // '') =~ /gzip/;

		require IO::Compress::Gzip;
		my $gz;
		IO::Compress::Gzip::gzip(\$body => \$gz);

		return up_send($c, 200, "text/event-stream\r\n"
			. 'Content-Encoding: gzip', $gz);
	}

	if ($kind eq 'raw') {
		my $body = pack('H*', $h{'x-up-body'} // '');
		return up_send($c, 200, $h{'x-up-type'} // 'text/event-stream',
			$body);
	}

	my $event = 'data: {"id":"cmpl-1","object":"text_completion",'
		. '"choices":[{"index":0,"text":"' . ('a' x 900)
		. '","finish_reason":null}]}' . "\n\n";
	my $body = $event x (int($size / length $event) + 1)
		. "data: [DONE]\n\n";

	return up_send($c, 200, 'text/event-stream', $body);
}

sub up_send {
	my ($c, $status, $type, $body) = @_;

	my $data = "HTTP/1.1 $status X\r\nContent-Type: $type\r\n"
		. 'Content-Length: ' . length($body) . "\r\n"
		. "Connection: close\r\n\r\n$body";

	my $off = 0;

	while ($off < length $data) {
		my $w = syswrite($c, $data, length($data) - $off, $off);
		return unless $w;
		$off += $w;
	}
}

###############################################################################
