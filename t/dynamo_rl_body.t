#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the body policy of the request plane (dynamo_rl_body_policy,
# dynamo_rl_metadata_upload): every row of the policy's table through nginx
# to the fake Dynamo, over Content-Length and chunked bodies, HTTP/1.1 and
# HTTP/2, in memory and in temp files, with proxy_request_buffering on and
# off; a refused body is never forwarded and does not consume its attempt
# id; on /generate the body's rid is the attempt's identity.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ chunked curl_h2 has_curl_h2 record_with rl_test
	split_at /;

###############################################################################

my $t = rl_test(300, 133, <<'EOF', has => [qw/ http proxy http_v2 /]);

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    client_max_body_size 8m;

    # rollout clients: the defaults, one upload destination allowed

    server {
        %%RL_LISTEN 8080 8085 http2%%

        dynamo_rl_metadata_upload s3://bucket/rl/ file:///var/rl/;

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE unbuffered%%
        }

        location /v1/chat/ {
            dynamo_rl_plane request;
            dynamo_rl_metadata_upload off;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }

    # the policy off, routing pins kept, bodies not buffered

    server {
        %%RL_LISTEN 8083%%

        location /v1/ {
            dynamo_rl_plane request;
            dynamo_rl_body_policy off;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }

        location ~ ^/(generate|v1/none)$ {
            dynamo_rl_plane request;

            proxy_pass http://127.0.0.1:8087;
        }

        location /v1/chat/ {
            dynamo_rl_plane request;
            dynamo_rl_strip_routing_headers off;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }

    server {
        %%RL_LISTEN 8084%%

        location /v1/ {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
            proxy_request_buffering off;
        }
    }

    %%RL_API_SERVER 8086 attempts%%
}

EOF

$t->run_fake_dynamo()->run();

my $JSON = JSON::PP->new->canonical;

###############################################################################

my ($r, $rec);

# rows of the table: bodies refused with 400 bad_body, nothing forwarded

my @BAD = (
	[ 'not JSON', '{"model":"m",' ],
	[ 'an array', '[{"model":"m"}]' ],
	[ 'two objects', '{"model":"m"}{"model":"m"}' ],
	[ 'empty', '' ],
	[ 'top-level duplicate', '{"model":"m","prompt":"a","prompt":"b"}' ],
	[ 'escaped duplicate',
		'{"nvext":{},"n\u0076ext":{"metadata_upload":{"url":"x"}}}' ],
	[ 'duplicate in nvext',
		'{"nvext":{"dp_rank":1,"d\u0070_rank":2}}' ],
	[ 'invalid UTF-8', qq[{"prompt":"\xc0\xaf"}] ],
	[ 'lone surrogate', '{"prompt":"\ud800"}' ],
	[ 'depth 65', '{"a":' . ('[' x 64) . (']' x 64) . '}' ],
	[ 'NaN', '{"temperature":NaN}' ],
);

for my $bad (@BAD) {
	my ($name, $body) = @$bad;
	my $id = "bad-$name";
	$id =~ s/[^A-Za-z0-9._:-]/-/g;

	$r = call('POST', '/v1/completions', body => $body,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);

	is($r->{status}, 400, "$name: 400");
	is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_body', "$name: reason");
	ok(!record_with($t, 'x-dynamo-attempt-id', $id), "$name: not forwarded");
}

my $e = json($r);
is_deeply([ sort keys %{$e // {}} ], [ qw/ code message type / ],
	'bad_body: flat error on /v1/');
is($e && $e->{code}, 400, 'bad_body: code');

ok(scalar $t->log_lines('error.log',
	qr/\[info\] .*dynamo rl: request body refused: nesting deeper than 64/),
	'bad_body: an info line with the reason');

# depth 64 passes

$r = call('POST', '/v1/completions',
	body => '{"a":' . ('[' x 63) . (']' x 63) . '}');
is($r->{status}, 200, 'depth 64: forwarded');

# a refused body does not consume its attempt id

$r = call('POST', '/v1/completions', body => '{"x":',
	headers => [ 'X-Dynamo-Attempt-Id' => 'keep-1' ]);
is($r->{status}, 400, 'refused body: 400');
is($r->{headers}{'x-dynamo-attempt-id'}, 'keep-1', 'refused body: id echoed');

$r = http_get('/rl/attempts/keep-1', PeerAddr => '127.0.0.1:' . port(8086));
like($r, qr{^HTTP/1.1 404}, 'refused body: not in the ledger');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'keep-1' ]);
is($r->{status}, 200, 'refused body: the id is still free');

# Content-Encoding

$r = call('POST', '/v1/completions', body => "\x1f\x8b\x08\x00",
	headers => [ 'X-Dynamo-Attempt-Id' => 'gz-1',
		'Content-Encoding' => 'gzip' ]);
is($r->{status}, 415, 'gzip: 415');
is($r->{headers}{'x-dynamo-rl-reason'}, 'unsupported_encoding',
	'gzip: reason');
ok(!record_with($t, 'x-dynamo-attempt-id', 'gz-1'), 'gzip: not forwarded');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'Content-Encoding' => 'Identity' ]);
is($r->{status}, 200, 'identity: forwarded');

# metadata_upload

my %UPLOAD = (
	'outside the prefixes' => [ 's3://other/rl/x', 403 ],
	'a prefix of the prefix' => [ 's3://bucket/r', 403 ],
	'.. segment' => [ 's3://bucket/rl/../secret', 403 ],
	'percent' => [ 's3://bucket/rl/%2e%2e/x', 403 ],
	'backslash' => [ 's3://bucket/rl\\\\..\\\\x', 403 ],
	'control byte' => [ 's3://bucket/rl/a\\nb', 403 ],
	'escaped ..' => [ 's3://bucket/rl/\\u002e\\u002e/x', 403 ],
	'allowed' => [ 's3://bucket/rl/run-1/', 200 ],
	'escaped slash allowed' => [ 's3:\\/\\/bucket\\/rl\\/run-2', 200 ],
	'file allowed' => [ 'file:///var/rl/x', 200 ],
);

for my $name (sort keys %UPLOAD) {
	my ($url, $status) = @{$UPLOAD{$name}};
	my $id = "up-$name";
	$id =~ s/[^A-Za-z0-9._:-]/-/g;
	my $body = '{"prompt":"x","nvext":{"extra_fields":["worker_id"],'
		. '"metadata_upload":{"url":"' . $url . '"}}}';

	$r = call('POST', '/v1/completions', body => $body,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);

	is($r->{status}, $status, "upload $name: $status");

	if ($status == 403) {
		is($r->{headers}{'x-dynamo-rl-reason'}, 'metadata_upload_denied',
			"upload $name: reason");
		ok(!record_with($t, 'x-dynamo-attempt-id', $id),
			"upload $name: not forwarded");

	} else {
		$rec = record_with($t, 'x-dynamo-attempt-id', $id);
		is($rec && $rec->{body}, $body, "upload $name: forwarded as is");
	}
}

for my $body (
	'{"nvext":{"metadata_upload":{}}}',
	'{"nvext":{"metadata_upload":null}}',
	'{"nvext":{"metadata_upload":{"url":1}}}',
	'{"nvext":{"metadata\u005fupload":{"url":"s3://x/"}}}')
{
	$r = call('POST', '/v1/completions', body => $body);
	is($r->{status}, 403, "upload $body: 403");
}

$r = call('POST', '/v1/chat/completions',
	body => '{"nvext":{"metadata_upload":{"url":"s3://bucket/rl/x"}}}');
is($r->{status}, 403, 'upload with dynamo_rl_metadata_upload off: 403');

# routing pins: removed with every other byte kept, Content-Length set

my $PINNED = '{"model":"m", "nvext": {"backend_instance_id": 7, '
	. '"extra_fields": ["completion_token_ids"], "dp_rank":1,'
	. '"prefill_worker_id":2,"decode_worker_id":3,"prefill_dp_rank":0},'
	. '"prompt":[1,2,3]}';
my $STRIPPED = '{"model":"m", "nvext": {'
	. '"extra_fields": ["completion_token_ids"]},'
	. '"prompt":[1,2,3]}';

$r = call('POST', '/v1/completions', body => $PINNED,
	headers => [ 'X-Dynamo-Attempt-Id' => 'pins-1' ]);
is($r->{status}, 200, 'pins: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'pins-1');
is($rec && $rec->{body}, $STRIPPED, 'pins: removed byte for byte');
is($rec && $rec->{headers}{'content-length'}, length $STRIPPED,
	'pins: Content-Length set');

$r = call('POST', '/v1/chat/completions', body => $PINNED,
	headers => [ 'X-Dynamo-Attempt-Id' => 'pins-kept' ],
	port => port(8083));
$rec = record_with($t, 'x-dynamo-attempt-id', 'pins-kept');
is($rec && $rec->{body}, $PINNED, 'pins kept with strip off');

$r = call('POST', '/v1/completions', body => '{"x":',
	headers => [ 'X-Dynamo-Attempt-Id' => 'policy-off' ],
	port => port(8083));
ok(record_with($t, 'x-dynamo-attempt-id', 'policy-off'),
	'policy off: forwarded unread');

# chunked bodies: a denied member split across chunks, pins removed

my $DENIED = '{"prompt":"x","nvext":{"metadata_upload":'
	. '{"url":"s3://evil/x"}}}';

$r = chunked('/v1/completions', [ split_at($DENIED, 30, 33, 40) ],
	'chunk-denied');
is($r->{status}, 403, 'chunked: denied across chunks');
ok(!record_with($t, 'x-dynamo-attempt-id', 'chunk-denied'),
	'chunked: not forwarded');

$r = chunked('/v1/completions', [ split_at($PINNED, 10, 40, 41, 90) ],
	'chunk-pins');
is($r->{status}, 200, 'chunked: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'chunk-pins');
is($rec && $rec->{body}, $STRIPPED, 'chunked: pins removed');
is($rec && $rec->{headers}{'content-length'}, length $STRIPPED,
	'chunked: Content-Length');
ok($rec && !$rec->{headers}{'transfer-encoding'}, 'chunked: not chunked');

# a 2 MB token array: in a temp file, forwarded byte-identical

my $BIG = '{"model":"m","prompt":[' . join(',', map { $_ * 7 % 50000 }
	1 .. 350000) . '],"max_tokens":1}';
ok(length $BIG > 2_000_000, 'big: over 2 MB');

$r = call('POST', '/v1/completions', body => $BIG,
	headers => [ 'X-Dynamo-Attempt-Id' => 'big-1' ]);
is($r->{status}, 200, 'big: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'big-1');
ok($rec && $rec->{body} eq $BIG, 'big: forwarded byte-identical');

(my $BIG_PINNED = $BIG) =~ s/"max_tokens":1/"max_tokens":1,"nvext":{"dp_rank":3}/;
(my $BIG_STRIPPED = $BIG) =~ s/"max_tokens":1/"max_tokens":1,"nvext":{}/;

$r = call('POST', '/v1/completions', body => $BIG_PINNED,
	headers => [ 'X-Dynamo-Attempt-Id' => 'big-pins' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'big-pins');
ok($rec && $rec->{body} eq $BIG_STRIPPED, 'big: pins removed from a file');

(my $BIG_DENIED = $BIG) =~ s/"max_tokens":1/"max_tokens":1,"nvext":{"metadata_upload":{"url":"s3:\/\/x"}}/;

$r = call('POST', '/v1/completions', body => $BIG_DENIED,
	headers => [ 'X-Dynamo-Attempt-Id' => 'big-denied' ]);
is($r->{status}, 403, 'big: denied at the end of a file');

# proxy_request_buffering off: the policy still reads the whole body

$r = call('POST', '/v1/completions', body => $BIG,
	headers => [ 'X-Dynamo-Attempt-Id' => 'nobuf-big' ],
	port => port(8084));
$rec = record_with($t, 'x-dynamo-attempt-id', 'nobuf-big');
ok($rec && $rec->{body} eq $BIG, 'unbuffered: big body forwarded');

$r = chunked('/v1/completions', [ split_at($PINNED, 10, 40) ],
	'nobuf-pins', port => 8084);
$rec = record_with($t, 'x-dynamo-attempt-id', 'nobuf-pins');
is($rec && $rec->{body}, $STRIPPED, 'unbuffered: chunked pins removed');

$r = chunked('/v1/completions', [ split_at($DENIED, 30, 33) ],
	'nobuf-denied', port => 8084);
is($r->{status}, 403, 'unbuffered: denied');
ok(!record_with($t, 'x-dynamo-attempt-id', 'nobuf-denied'),
	'unbuffered: not forwarded');

# HTTP/2: the body in several DATA frames

SKIP: {
	skip 'no curl with HTTP/2', 5 unless has_curl_h2();

	my $pad = '"pad":"' . ('x' x 70000) . '",';
	(my $h2_denied = $DENIED) =~ s/^\{/{$pad/;
	(my $h2_pinned = $PINNED) =~ s/^\{/{$pad/;
	(my $h2_stripped = $STRIPPED) =~ s/^\{/{$pad/;

	my ($status, $head) = curl_h2($t, '/v1/completions', $h2_denied,
		'h2-denied');
	is($status, 403, 'h2: denied across DATA frames');
	like($head, qr/x-dynamo-rl-reason: metadata_upload_denied/i,
		'h2: reason');
	ok(!record_with($t, 'x-dynamo-attempt-id', 'h2-denied'),
		'h2: not forwarded');

	($status) = curl_h2($t, '/v1/completions', $h2_pinned, 'h2-pins');
	is($status, 200, 'h2: 200');
	$rec = record_with($t, 'x-dynamo-attempt-id', 'h2-pins');
	ok($rec && $rec->{body} eq $h2_stripped, 'h2: pins removed');
}

# /generate: the body's rid is the attempt's identity

my $GEN = '{"rid":"slime-7","input_ids":[1,2,3],'
	. '"sampling_params":{"max_new_tokens":4}}';

$r = call('POST', '/generate', body => $GEN);
is($r->{status}, 200, 'rid: 200');
is($r->{headers}{'x-dynamo-attempt-id'}, 'slime-7', 'rid: the attempt id');
$rec = record_with($t, 'x-dynamo-attempt-id', 'slime-7');
ok($rec, 'rid: upstream attempt header');
is($rec && $rec->{headers}{'x-request-id'}, 'slime-7',
	'rid: upstream x-request-id');
is($rec && $rec->{body}, $GEN, 'rid: body unchanged');

$r = call('POST', '/generate', body => $GEN);
is($r->{status}, 409, 'rid: used once only');

$r = call('POST', '/generate', body => '{"rid":"slime-8","input_ids":[1]}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'other-8' ]);
is($r->{status}, 400, 'rid mismatch: 400');
is($r->{headers}{'x-dynamo-rl-reason'}, 'rid_mismatch', 'rid mismatch: reason');
ok(!record_with($t, 'x-dynamo-attempt-id', 'other-8'),
	'rid mismatch: not forwarded');

$r = call('POST', '/generate', body => '{"rid":"same-9","input_ids":[1]}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'same-9' ]);
is($r->{status}, 200, 'rid equal to the header: 200');

$r = call('POST', '/generate', body => '{"rid":"other-8","input_ids":[1]}');
is($r->{status}, 200, 'rid of a refused attempt: still free');

for my $rid ('1', '["a","b"]', '"a b"', '""', '"' . ('x' x 129) . '"') {
	$r = call('POST', '/generate', body => qq({"rid":$rid,"input_ids":[1]}));
	is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_attempt_id',
		"rid $rid: bad_attempt_id");
}

$r = call('POST', '/v1/completions',
	body => '{"rid":"not-an-id here","prompt":"x"}');
is($r->{status}, 200, 'rid on another route: not read');

# errors in the route's shape: nested on /generate, flat on /v1/

$r = call('POST', '/generate', body => '{"rid":"shape-1",');
$e = json($r);
is($r->{status}, 400, 'generate bad_body: 400');
is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_body', 'generate: reason');
is(join(',', sort keys %{$e // {}}), 'error', 'generate: nested');
is(join(',', sort keys %{$e && ref $e->{error} ? $e->{error} : {}}),
	'code,message,type', 'generate: message, type, code');
is($e && ref $e->{error} && $e->{error}{code}, 400, 'generate: code');

$r = call('POST', '/generate', body => '{"rid":"x y"}');
is(json($r) && ref json($r)->{error} && json($r)->{error}{type},
	'Bad Request', 'generate bad rid: nested');

$r = parse_response(http("PUT /generate HTTP/1.1\r\nHost: localhost\r\n"
	. "Connection: close\r\nContent-Length: 2\r\n\r\n{}"));
is($r->{status}, 405, 'generate 405');
is(json($r) && ref json($r)->{error} && json($r)->{error}{code}, 405,
	'generate 405: nested');

# nginx's own error (502: nothing listens) in the route's shape

$r = call('POST', '/generate', body => '{"input_ids":[1]}', port => port(8083));
is($r->{status}, 502, 'generate 502');
is(json($r) && ref json($r)->{error} && json($r)->{error}{code}, 502,
	'generate 502: nested');

$r = call('POST', '/v1/none', body => '{}', port => port(8083));
is(json($r) && json($r)->{code}, 502, 'v1 502: flat');

# Dynamo's own errors pass through in their shape

$r = call('POST', '/generate', body => '{"input_ids":[1]}',
	headers => [ 'X-Fake-Scenario' => 'status-503' ]);
is(json($r) && ref json($r)->{error} && json($r)->{error}{code}, 503,
	'generate upstream 503: nested from the fake');
ok(!$r->{headers}{'x-dynamo-rl-reason'}, 'generate upstream 503: no reason');

$r = call('POST', '/generate', body => '{"rid":"engine-5","input_ids":[1]}');
is(json($r) && json($r)->{meta_info}{id}, 'engine-5',
	'generate: the engine id is the rid');

###############################################################################

sub call {
	my ($method, $uri, %o) = @_;

	my @h = @{$o{headers} // []};
	my $head = '';

	while (my ($k, $v) = splice(@h, 0, 2)) {
		$head .= "$k: $v\r\n";
	}

	my $raw = http_post($uri, $o{body}, headers => $head,
		PeerAddr => '127.0.0.1:' . ($o{port} // port(8080)),
		timeout => 20);

	return parse_response($raw);
}

sub json {
	my ($r) = @_;
	return eval { decode_json($r->{body}) };
}


###############################################################################
