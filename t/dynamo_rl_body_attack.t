#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attacks on the request plane's body policy (dynamo_rl_body_policy,
# dynamo_rl_metadata_upload) and on the attempt identity a /generate body's
# rid carries.  Each "finding" is an assertion of the contract
# (DESIGN.md, "Control inputs in request bodies") that today's code breaks;
# the rest are attacks that held, kept as regression tests.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use IO::Select;
use IO::Socket::INET;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ record_with frontend_records rl_test
	raw resp chunked curl_h2 has_curl_h2 /;

###############################################################################

my $t = rl_test(300, undef, <<'EOF', has => [qw/ http proxy http_v2 /]);

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    client_max_body_size 8m;

    server {
        %%RL_LISTEN 8080 8085 http2%%

        dynamo_rl_metadata_upload https://up.example/rl/ s3://bucket/rl/;

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        # an error_page of the plane location into a named plane location

        location /v1/ep/ {
            dynamo_rl_plane request;
            client_max_body_size 200;
            error_page 400 413 = @fallback;

            proxy_pass http://frontend;
        }

        location @fallback {
            dynamo_rl_plane request;

            proxy_pass http://127.0.0.1:8090;
            proxy_read_timeout 5s;
        }

        # a plane location with blocks nginx puts inside it

        location /v1/nested/ {
            dynamo_rl_plane request;

            location /v1/nested/inner/ {
                proxy_pass http://frontend;
            }

            if ($http_x_branch) {
                proxy_pass http://frontend;
            }

            limit_except GET POST {
                deny all;
            }

            proxy_pass http://frontend;
        }
    }

    # small buffers: bodies in temp files, request buffering off

    server {
        %%RL_LISTEN 8084%%

        client_body_buffer_size 1k;

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_request_buffering off;
        }
    }

    %%RL_API_SERVER 8086 attempts%%
}

EOF

$t->run_fake_dynamo();
$t->run();

my ($r, $rec);
my $n = 0;

sub id { return 'atk-' . ++$n; }

###############################################################################

# finding 1: a ".." path segment that ends at "?" or "#" is not seen as one.
# The contract allows nvext.metadata_upload.url only with "no .. segment";
# in https://up.example/rl/..?x the path is /rl/.. (the query starts at
# "?"), which any URL library resolves to /, outside the prefix
# https://up.example/rl/.  The check only ends a segment at "/" or the end
# (ngx_http_dynamo_rl_upload_url_valid(), ngx_http_dynamo_rl_scan.c:966).

for my $url ('https://up.example/rl/..?x=1', 'https://up.example/rl/..#f',
	'https://up.example/rl/a/..?x')
{
	my $id = id();
	my $body = '{"prompt":"x","nvext":{"metadata_upload":{"url":"'
		. $url . '"}}}';

	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 403, "finding 1: upload $url: 403");
	ok(!fwd($id), "finding 1: upload $url: not forwarded");
}

# held: the prefix itself and a path under it pass

{
	my $id = id();
	my $body = '{"nvext":{"metadata_upload":{"url":"https://up.example/rl/run..1/x"}}}';
	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 200, 'upload: "run..1" is not a .. segment');
	is(fwd($id) && fwd($id)->{body}, $body, 'upload: forwarded as is');
}

# finding 2: a valid top-level object with more than 128 members is
# refused 400 bad_body ("too many members in an object the policy reads");
# the contract refuses only invalid JSON, duplicates and depth > 64, and
# forwards everything else byte for byte (ngx_http_dynamo_rl_scan.c:361,
# NGX_HTTP_DYNAMO_RL_BODY_MEMBERS in ngx_http_dynamo_rl_scan.h:25)

{
	my $id = id();
	my $body = '{' . join(',', map { "\"k$_\":$_" } 1 .. 129)
		. ',"prompt":"x"}';
	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 200, 'finding 2: 130 top-level members: forwarded');
	is(fwd($id) && fwd($id)->{body}, $body,
		'finding 2: 130 top-level members: byte for byte');

	$id = id();
	$body = '{"prompt":"x","nvext":{'
		. join(',', map { "\"f$_\":$_" } 1 .. 129) . '}}';
	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 200, 'finding 2: 129 nvext members: forwarded');
}

# held: escaped member names are compared after unescaping

for my $body (
	'{"\u006e\u0076ext":{"metadata_upload":{"url":"s3://evil/"}}}',
	'{"nvext":{"m\u0065tadata_upload":{"url":"s3://evil/"}}}',
	'{"nvext":{"metadata_upload":{"u\u0072l":"s3://evil/"}}}',
	'{"nvext":{"metadata_upload":{"url":"s3://bucket/rl/ok",'
		. '"\u0075rl":"s3://evil/"}}}',
	'{"nvext":{"metadata_upload":{"url":"s3://bucket/rl/\u002e./x"}}}',
	'{"nvext":{"metadata_upload":{"url":"s3://bucket/rl/x\u0000y"}}}',
	'{"nvext":{"metadata_upload":{"url":"s3://bucket/rl/x\u007f"}}}',
	'{"nvext":{"metadata_upload":{"url":"s3://bucket/rl/..\u002fx"}}}',
	'{"nvext":{"metadata_upload":{"url":["s3://bucket/rl/x"]}}}',
	'{"nvext":{"metadata_upload":"s3://bucket/rl/x"}}')
{
	my $id = id();
	$r = post('/v1/completions', $body, $id);
	ok($r->{status} == 403 || $r->{status} == 400,
		"escaped or odd upload $body: refused ($r->{status})");
	ok(!fwd($id), "escaped or odd upload $body: not forwarded");
}

# held: duplicates the policy must see, in every spelling

for my $body (
	'{"nvext":{},"nvext":{"metadata_upload":{"url":"s3://evil/"}}}',
	qq[{"\\ud83d\\ude00":1,"\xf0\x9f\x98\x80":2}],
	'{"nvext":{"dp_rank":1,"dp\u005frank":2}}',
	'{"rid":"a","r\u0069d":"b"}',
	'{"a\/b":1,"a/b":2}',
	qq[{"\\u00e9":1,"\xc3\xa9":2}])
{
	my $id = id();
	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 400, "duplicate $body: 400");
	ok(!fwd($id), "duplicate $body: not forwarded");
}

# held: bytes and grammar at the edges

for my $c (
	[ 'BOM', "\xef\xbb\xbf{\"prompt\":\"x\"}" ],
	[ 'raw NUL in a string', qq[{"prompt":"a\x00b"}] ],
	[ 'NUL after the object', qq[{"prompt":"a"}\x00] ],
	[ 'NUL escape in a name', '{"nv\u0000ext":{}}' ],
	[ 'overlong slash', qq[{"prompt":"\xc0\xaf"}] ],
	[ 'overlong nvext name', qq[{"nv\xc1\xa5xt":{}}] ],
	[ 'encoded surrogate', qq[{"prompt":"\xed\xa0\x80"}] ],
	[ 'above U+10FFFF', qq[{"prompt":"\xf4\x90\x80\x80"}] ],
	[ 'truncated UTF-8 at the end', qq[{"prompt":"\xe2\x82] ],
	[ 'lone low surrogate', '{"prompt":"\udc00"}' ],
	[ 'high then high', '{"prompt":"\ud800\ud800"}' ],
	[ 'leading zero in an array', '{"prompt":[1,2,3,4,5,6,7,8,9,01]}' ],
	[ 'leading zero, fast path', '{"prompt":[11111111,22222222,0333]}' ],
	[ 'double comma, fast path', '{"prompt":[1111111,,2222222,3]}' ],
	[ 'trailing comma', '{"prompt":[1,2,]}' ],
	[ 'trailing comma in an object', '{"prompt":1,}' ],
	[ 'plus sign', '{"n":+1}' ],
	[ 'hex', '{"n":0x10}' ],
	[ 'dot only', '{"n":1.}' ],
	[ 'exponent only', '{"n":1e}' ],
	[ 'Infinity', '{"n":Infinity}' ],
	[ 'minus only', '{"n":[-]}' ],
	[ 'single quotes', "{'prompt':'x'}" ],
	[ 'a comment', '{"prompt":"x"/**/}' ],
	[ 'vertical tab', "{\x0b\"prompt\":\"x\"}" ],
	[ 'form feed', "{\x0c\"prompt\":\"x\"}" ],
	[ 'NBSP', "{\xc2\xa0\"prompt\":\"x\"}" ],
	[ 'tRue', '{"b":tRue}' ],
	[ 'depth 65 of objects',
		('{"a":' x 65) . '1' . ('}' x 65) ],
	[ 'depth 65 mixed',
		'{"a":' . ('[{"b":' x 32) . '1' . ('}]' x 32) . '}' ],
	[ 'a control byte in a string', qq[{"prompt":"a\x1fb"}] ],
	[ 'bad escape', '{"prompt":"\x"}' ],
	[ 'short \u', '{"prompt":"\u12"}' ],
	[ 'an unterminated object', '{"prompt":"x"' ],
	[ 'two objects', '{}{}' ],
	[ 'whitespace only', "  \r\n" ],
	[ 'a string', '"x"' ],
	[ 'null', 'null' ])
{
	my ($name, $body) = @$c;
	my $id = id();
	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 400, "$name: 400");
	ok(!fwd($id), "$name: not forwarded");
}

for my $c (
	[ 'depth 64 of objects', ('{"a":' x 64) . '1' . ('}' x 64) ],
	[ 'depth 64 mixed, ends in an array',
		'{"a":' . ('[{"b":' x 31) . '[1]' . ('}]' x 31) . '}' ],
	[ 'numbers at the edges', '{"a":[-0,0,-0.0e-0,1E+400,-1e-400,'
		. '18446744073709551616,12345678901234567890123456789,'
		. '0.000000000000000000000000001,1e308]}' ],
	[ 'raw NUL escape in a value', '{"prompt":"a\u0000b"}' ],
	[ 'whitespace around', " \t\r\n{ \"prompt\" : \"x\" } \n\t" ],
	[ 'token array fast path edges', '{"prompt":[1,22,333,4444,55555,'
		. '666666,7777777,88888888,999999999,1,2,3,0,10,100,1.5,2e3,'
		. '-1,-0,9 ,8, 7]}' ],
	[ 'empty object', '{}' ])
{
	my ($name, $body) = @$c;
	my $id = id();
	$r = post('/v1/completions', $body, $id);
	is($r->{status}, 200, "$name: 200");
	is(fwd($id) && fwd($id)->{body}, $body, "$name: byte for byte");
}

# held: routing pins, however spelled and placed

for my $c (
	[ '{"nvext":{"dp\u005frank":1}}', '{"nvext":{}}' ],
	[ '{"nvext":{ "dp_rank" : 1 , "a":2 }}', '{"nvext":{ "a":2 }}' ],
	[ '{"nvext":{"a":2 , "dp_rank" : {"x":[1,{"y":2}]} }}',
		'{"nvext":{"a":2 }}' ],
	[ '{"nvext":{"backend_instance_id":1,"dp_rank":2,"a":[1],'
		. '"prefill_worker_id":3,"b":"c","decode_worker_id":4,'
		. '"prefill_dp_rank":5}}',
		'{"nvext":{"a":[1],"b":"c"}}' ],
	[ qq[{"nvext":{\n  "backend_instance_id": 18446744073709551615\n}}],
		qq[{"nvext":{\n  \n}}] ],
	[ '{"dp_rank":1,"nvext":{"x":{"dp_rank":1}}}',
		'{"dp_rank":1,"nvext":{"x":{"dp_rank":1}}}' ])
{
	my ($in, $out) = @$c;
	my $id = id();
	$r = post('/v1/completions', $in, $id);
	is($r->{status}, 200, "pins $in: 200");
	$rec = fwd($id);
	is($rec && $rec->{body}, $out, "pins $in: stripped");
	is($rec && $rec->{headers}{'content-length'}, length $out,
		"pins $in: Content-Length");
	ok(eval { decode_json($rec->{body}) }, "pins $in: still JSON");
}

# held: the same pins chunked one byte per chunk, and split at every byte

{
	my $in = '{"nvext":{"a":1,"dp_rank":2,"b":"\u00e9"},"p":[1,2]}';
	my $out = '{"nvext":{"a":1,"b":"\u00e9"},"p":[1,2]}';
	my $ok = 0;

	for my $at (1 .. length($in) - 1) {
		my $id = id();
		$r = chunked('/v1/completions',
			[ substr($in, 0, $at), substr($in, $at) ], $id);
		$rec = fwd($id);
		$ok++ if $r->{status} == 200 && $rec && $rec->{body} eq $out
			&& $rec->{headers}{'content-length'} == length $out;
	}

	is($ok, length($in) - 1, 'chunked split at every byte: pins removed');

	my $id = id();
	$r = chunked('/v1/completions', [ split //, $in ], $id);
	$rec = fwd($id);
	is($rec && $rec->{body}, $out, 'one byte per chunk: pins removed');
}

# held: Content-Encoding and Transfer-Encoding variants

for my $c (
	[ 'Content-Encoding', 'gzip', 415 ],
	[ 'Content-Encoding', 'GZIP', 415 ],
	[ 'Content-Encoding', 'identity, gzip', 415 ],
	[ 'Content-Encoding', 'x-gzip', 415 ],
	[ 'Content-Encoding', 'br', 415 ],
	[ 'content-encoding', 'deflate', 415 ],
	[ 'Content-Encoding', 'IDENTITY', 200 ])
{
	my ($name, $value, $status) = @$c;
	my $id = id();
	$r = post('/v1/completions', '{"nvext":{"metadata_upload":{}}}', $id,
		headers => [ $name => $value ]) if $status == 415;
	$r = post('/v1/completions', '{"prompt":"x"}', $id,
		headers => [ $name => $value ]) if $status == 200;
	is($r->{status}, $status, "$name: $value: $status");
	ok($status == 200 ? fwd($id) : !fwd($id), "$name: $value: forwarded "
		. ($status == 200 ? 'yes' : 'no'));
}

{
	my $id = id();
	$r = post('/v1/completions', '{"nvext":{"metadata_upload":{}}}', $id,
		headers => [ 'Content-Encoding' => 'identity',
			'Content-Encoding' => 'gzip' ]);
	is($r->{status}, 415, 'two Content-Encoding headers: 415');

	$id = id();
	$r = chunked('/v1/completions', [ '{"prompt":"x"}' ], $id,
		headers => [ 'Content-Encoding' => 'gzip' ]);
	is($r->{status}, 415, 'chunked gzip: 415');
	ok(!fwd($id), 'chunked gzip: not forwarded');
}

# held: a second, pipelined request in the body of a refused one is never
# parsed as a request of its own

for my $c (
	[ 'gzip', 'Content-Encoding: gzip' ],
	[ 'bad body', 'X-Nothing: 1' ])
{
	my ($name, $extra) = @$c;
	my $id = id();
	my $smuggled = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Dynamo-Attempt-Id: $id-smuggled\r\n"
		. "Content-Length: 58\r\n\r\n"
		. '{"nvext":{"metadata_upload":{"url":"s3://evil/x"}},"a":1}';
	my $body = $name eq 'gzip' ? $smuggled : "{$smuggled";
	my $req = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\n$extra\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n" . $body
		. "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\n\r\n";
	my $raw = http($req);
	my @st = ($raw // '') =~ m{^HTTP/1.1 (\d{3})}mg;
	ok(!fwd("$id-smuggled"), "pipelined after $name: body not a request");
	is($st[0], $name eq 'gzip' ? 415 : 400, "pipelined after $name: first");
}

# held: Expect: 100-continue with a refused encoding and a refused body

{
	my $id = id();
	my $body = '{"nvext":{"metadata_upload":{}}}';
	my $s = http("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nExpect: 100-continue\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n", start => 1);

	# the body goes once nginx has asked for it

	my $raw = '';
	my $sel = IO::Select->new($s);

	while ($raw !~ /\r\n\r\n/ && $sel->can_read(5)) {
		last unless sysread($s, $raw, 4096, length $raw);
	}

	syswrite($s, $body);
	$raw .= http_end($s);

	my @st = $raw =~ m{^HTTP/1.1 (\d{3})}mg;
	is("@st", '100 403', '100-continue: 100, then 403');
	ok(!fwd($id), '100-continue: not forwarded');

	$id = id();
	$raw = http("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nExpect: 100-continue\r\n"
		. "Content-Encoding: gzip\r\nX-Dynamo-Attempt-Id: $id\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n",
		body => $body);
	like($raw, qr{^HTTP/1.1 415}m, '100-continue, gzip: 415');
	ok(!fwd($id), '100-continue, gzip: not forwarded');

	# Transfer-Encoding and Content-Length together

	$id = id();
	$raw = http("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nTransfer-Encoding: chunked\r\n"
		. "Content-Length: 5\r\nX-Dynamo-Attempt-Id: $id\r\n\r\n"
		. "2\r\n{}\r\n0\r\n\r\n");
	like($raw, qr{^HTTP/1.1 400}m, 'TE and CL: 400');
	ok(!fwd($id), 'TE and CL: not forwarded');
}

# held: a refused body does not consume its id, in every refusal

for my $body (
	'{"nvext":{"metadata_upload":{"url":"s3://evil/"}}}',
	'{"x":',
	'{"a":1,"a":2}')
{
	my $id = id();
	$r = post('/v1/completions', $body, $id);
	ok($r->{status} >= 400, "refused $body: $r->{status}");
	is(ledger($id), 404, "refused $body: not in the ledger");
	$r = post('/v1/completions', '{"prompt":"x"}', $id);
	is($r->{status}, 200, "refused $body: id free again");
}

# rid on /generate

{
	my $id = id();
	$r = post('/generate', '{"r\u0069d":"other","text":"x"}', $id);
	is($r->{status}, 400, 'rid escaped, mismatch: 400');
	is($r->{headers}{'x-dynamo-rl-reason'}, 'rid_mismatch',
		'rid escaped, mismatch: reason');

	$id = id();
	$r = post('/generate', qq[{"rid":"$id\\u0000","text":"x"}], $id);
	is($r->{status}, 400, 'rid with NUL escape: 400');

	$id = id();
	$r = post('/generate', qq[{"rid":["$id"],"text":"x"}], $id);
	is($r->{status}, 400, 'rid as a list: 400');
	ok(!fwd($id), 'rid as a list: not forwarded');

	# the rid is the attempt id: a second body with the same rid is 409

	my $rid = id();
	$r = post('/generate', qq[{"rid":"$rid","text":"x"}], undef);
	is($r->{status}, 200, 'rid as attempt id: 200');
	is($r->{headers}{'x-dynamo-attempt-id'}, $rid, 'rid as attempt id: echoed');
	$r = post('/generate', qq[{"r\\u0069d":"$rid","text":"x"}], undef);
	is($r->{status}, 409, 'rid reused, escaped name: 409');
	$r = post('/generate', '{"text":"x"}', $rid);
	is($r->{status}, 409, 'rid reused as a header: 409');

	# an escaped rid equals its unescaped attempt id

	$id = id();
	(my $esc = $id) =~ s/a/\\u0061/g;
	$r = post('/generate', qq[{"rid":"$esc","text":"x"}], $id);
	is($r->{status}, 200, 'rid escaped, same id: 200');

	# a refused /generate body does not consume the rid

	$rid = id();
	$r = post('/generate', qq[{"rid":"$rid","nvext":{"metadata_upload":{}}}],
		undef);
	is($r->{status}, 403, 'rid with upload: 403');
	$r = post('/generate', qq[{"rid":"$rid","text":"x"}], undef);
	is($r->{status}, 200, 'rid with upload: rid still free');
}

# held: the request-id that goes with a rid, and the error shape there

{
	my $uuid = '0190b9c2-4f5e-7a1b-8c3d-123456789abc';
	$r = post('/generate', qq[{"rid":"$uuid","text":"x"}], undef,
		headers => [ 'request-id' => '11111111-1111-4111-8111-111111111111',
			'x-dynamo-request-id' => 'forged' ]);
	is($r->{status}, 200, 'rid UUID: 200');
	$rec = fwd($uuid);
	is($rec && $rec->{headers}{'request-id'}, $uuid,
		'rid UUID: it is the request-id upstream');
	ok($rec && !exists $rec->{headers}{'x-dynamo-request-id'},
		'rid UUID: client x-dynamo-request-id removed');

	my $rid = id();
	$r = post('/generate', qq[{"rid":"$rid","text":"x"}], undef,
		headers => [ 'request-id' => '11111111-1111-4111-8111-111111111111' ]);
	$rec = fwd($rid);
	like($rec && $rec->{headers}{'request-id'} // '',
		qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\z/,
		'rid not a UUID: a UUIDv7 minted as request-id');
	is($rec && $rec->{headers}{'x-request-id'}, $rid,
		'rid not a UUID: x-request-id is the rid');

	my $id = id();
	$r = post('/generate', '{"rid":"x","rid":"y"}', $id);
	is($r->{status}, 400, '/generate bad_body: 400');
	my $e = eval { decode_json($r->{body}) } // {};
	is(ref $e->{error} && $e->{error}{code}, 400,
		'/generate bad_body: nested error');
}

# bodies in temp files, request buffering off

{
	my $big = '{"prompt":[' . join(',', 1 .. 20000) . '],'
		. '"nvext":{"dp_rank":1,"x":2}}';
	(my $out = $big) =~ s/"dp_rank":1,//;

	my $id = id();
	$r = post('/v1/completions', $big, $id, port => 8084);
	is($r->{status}, 200, 'temp file: 200');
	$rec = fwd($id);
	ok($rec && $rec->{body} eq $out, 'temp file: pins removed');
	is($rec && $rec->{headers}{'content-length'}, length $out,
		'temp file: Content-Length');

	$id = id();
	$r = chunked('/v1/completions', [ split_every($big, 700) ], $id,
		port => 8084);
	$rec = fwd($id);
	ok($rec && $rec->{body} eq $out, 'temp file, chunked: pins removed');

	(my $denied = $big) =~ s/"dp_rank":1/"metadata_upload":{"url":"s3:\/\/x"}/;
	$id = id();
	$r = chunked('/v1/completions', [ split_every($denied, 333) ], $id,
		port => 8084);
	is($r->{status}, 403, 'temp file, chunked, denied: 403');
	ok(!fwd($id), 'temp file, chunked, denied: not forwarded');
}

# HTTP/2

SKIP: {
	skip 'no curl with HTTP/2', 4 unless has_curl_h2();

	my $id = id();
	my $up = '{"nvext":{"\u006detadata_upload":{"url":"s3://evil/"}}}';
	is((curl_h2($t, '/v1/completions', $up, $id))[0], 403,
		'h2: escaped upload 403');
	ok(!fwd($id), 'h2: not forwarded');

	my $in = '{"p":"' . ('x' x 70000) . '","nvext":{"prefill_dp_rank":0}}';
	(my $out = $in) =~ s/"prefill_dp_rank":0//;
	$id = id();
	is((curl_h2($t, '/v1/completions', $in, $id))[0], 200,
		'h2: big body 200');
	$rec = fwd($id);
	ok($rec && $rec->{body} eq $out, 'h2: big body, pin removed');
}

# finding 3: a body refused by nginx while the policy reads it (413 over
# client_max_body_size, 400 for bad chunked framing), when an error_page
# sends it to a named plane location, is forwarded there unscanned and
# unrecorded: the upstream (a raw listener here) gets the POST with the
# attempt id and "Content-Length: 51", the length of the part read so far
# (a whole JSON object with a denied metadata_upload url), but no body, and
# the client hangs until proxy_read_timeout.  The contract: a refused body
# is never forwarded; an error_page re-entry into a plane location is
# refused, never forwarded.  ngx_http_dynamo_rl_precontent_handler()
# (ngx_http_dynamo_rl_request.c:247-251) lets a request that passed the
# plane once go on when it has no upstream yet, and the body state it
# left (READING, then DONE) never refuses it again.

my $capture = IO::Socket::INET->new(LocalAddr => '127.0.0.1:' . port(8090),
	Listen => 8, ReuseAddr => 1, Proto => 'tcp')
	or die "cannot listen on " . port(8090) . ": $!\n";

for my $c (
	[ '413', [ '{"nvext":{"metadata_upload":{"url":"s3://evil/x"}}}',
		' ' x 400 ] ],
	[ '400', [ '{"nvext":{"metadata_upload":{"url":"s3://evil/x"}}}' ],
		"zz\r\n" ])
{
	my ($name, $parts, $tail) = @$c;
	my $id = id();
	my $req = "POST /v1/ep/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "Transfer-Encoding: chunked\r\nX-Dynamo-Attempt-Id: $id\r\n\r\n";
	my $body = join('', map { sprintf("%x\r\n%s\r\n", length, $_) }
		@$parts) . ($tail // "0\r\n\r\n");
	my $s = http($req, body => $body, start => 1);

	# the answer first: a connection to the upstream would come before it

	$r = resp(http_end($s, timeout => 10));

	my $got = '';
	my $sel = IO::Select->new($capture);

	if ($sel->can_read(0)) {
		my $u = $capture->accept();
		my $us = IO::Select->new($u);
		while ($us->can_read(1)) {
			last unless sysread($u, $got, 4096, length $got);
		}
		close $u;
	}

	is($got, '', "finding 3: error_page $name: nothing reaches an upstream");
	ok($r->{status} >= 400, "error_page $name: an error answer");
}

# held: a body the policy refuses itself is answered by the module, not
# by error_page

{
	my $id = id();
	$r = post('/v1/ep/completions',
		'{"nvext":{"metadata_upload":{"url":"s3://evil/x"}}}', $id);
	is($r->{status}, 403, 'error_page: policy refusal 403');
	ok(!fwd($id), 'error_page: policy refusal not forwarded');
	$id = id();
	$r = post('/v1/ep/completions', '{"a":1,"a":2}', $id);
	is($r->{status}, 400, 'error_page: bad_body 400');
	ok(!fwd($id), 'error_page: bad_body not forwarded');
}

# nested location, if, limit_except inside a plane location

for my $c (
	[ '/v1/nested/inner/completions', [] ],
	[ '/v1/nested/completions', [ 'X-Branch' => '1' ] ],
	[ '/v1/nested/completions', [] ])
{
	my ($uri, $h) = @$c;
	my $id = id();
	$r = post($uri, '{"nvext":{"metadata_upload":{"url":"s3://evil/"}}}',
		$id, headers => $h);
	is($r->{status}, 403, "$uri @$h: upload 403");
	ok(!fwd($id), "$uri @$h: not forwarded");

	$id = id();
	$r = post($uri, '{"nvext":{"dp_rank":1}}', $id, headers => $h);
	$rec = fwd($id);
	is($rec && $rec->{body}, '{"nvext":{}}', "$uri @$h: pin removed");
}

sub split_every {
	my ($s, $k) = @_;
	return unpack("(a$k)*", $s);
}

done_testing();

###############################################################################

sub post {
	my ($uri, $body, $id, %o) = @_;

	my @h = @{$o{headers} // []};
	push @h, 'X-Dynamo-Attempt-Id' => $id if defined $id;

	return call('POST', $uri, body => $body, headers => \@h,
		port => $o{port});
}

sub call {
	my ($method, $uri, %o) = @_;

	my $port = $o{port} // 8080;
	my $raw = http(raw($method, $uri, headers => $o{headers},
		body => $o{body}), PeerAddr => '127.0.0.1:' . port($port),
		timeout => 20);

	return resp($raw);
}

sub fwd {
	my ($id) = @_;
	return record_with($t, 'x-dynamo-attempt-id', $id);
}

sub ledger {
	my ($id) = @_;
	my $raw = http_get("/rl/attempts/$id",
		PeerAddr => '127.0.0.1:' . port(8086));
	return resp($raw)->{status};
}

###############################################################################
