#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for what only the gateway assigns on the request plane (issue 27,
# DESIGN.md "Identity and priority the gateway assigns"): a client's
# x-tenant-id and priority headers, in every case and spelling and
# repeated, over HTTP/1.1 and HTTP/2, never reach the frontend, and
# dynamo_rl_tenant / dynamo_rl_priority send the gateway's own; nvext's
# cache salt (while a tenant is assigned), routing constraints and router
# parameters (with the routing pins) and agent_hints' priorities (always)
# are removed from the body byte for byte, first, last, alone, nested,
# escaped, split across chunks and HTTP/2 DATA frames; an operator's
# dynamo_rl_strip_headers and dynamo_rl_strip_nvext; the ledger's tenant;
# and "nginx -t" on every bad argument.

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

my $t = rl_test(300, undef, <<'EOF', has => [qw/ http proxy http_v2 map /]);

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    client_max_body_size 8m;

    # the tests' stand-in for a trusted source (a certificate, a header
    # that auth_request set)
    map $http_x_test_team $rl_tenant {
        a        tenant-a;
        b        "tenant b";
        default  "";
    }

    server {
        %%RL_LISTEN 8080 8085 http2%%
        underscores_in_headers on;

        dynamo_rl_tenant $rl_tenant;
        dynamo_rl_priority 5;
        dynamo_rl_strip_headers X-Evil x_other x-dynamo-attempt-id;
        dynamo_rl_strip_nvext extra.deep.a agent_hints.osl;

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }

        location /v1/chat/ {
            dynamo_rl_plane request;
            dynamo_rl_strip_routing_headers off;
            dynamo_rl_tenant off;
            dynamo_rl_priority "";
            dynamo_rl_strip_nvext agent_hints;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }

    # the defaults: nothing assigned, the client's own removed

    server {
        %%RL_LISTEN 8083%%
        underscores_in_headers on;

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }

    %%RL_API_SERVER 8086 attempts%%
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my ($r, $rec, $n);

# headers: every case and spelling, each twice

my @CLIENT = (
	'X-Tenant-Id' => 'evil-1', 'x-tenant-id' => 'evil-2',
	'X_TENANT_ID' => 'evil-3', 'x_Tenant-id' => 'evil-4',
	'X-Dynamo-Request-Priority' => '2147483647',
	'x_dynamo_request_priority' => '99',
	'X-DYNAMO-REQUEST-STRICT-PRIORITY' => '4294967295',
	'x-dynamo-request-strict_priority' => '7',
	'X-Evil' => '1', 'x_evil' => '2', 'X-Other' => '3', 'x_other' => '4',
	'X-Kept' => 'kept',
);

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ @CLIENT, 'X-Test-Team' => 'a',
		'X-Dynamo-Attempt-Id' => 'h-1' ]);
is($r->{status}, 200, 'headers: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'h-1');
is_deeply(assigned($rec), [ 'x-dynamo-request-priority: 5',
	'x-tenant-id: tenant-a' ], 'headers: the gateway\'s own, once each');
is($rec && $rec->{headers}{'x-kept'}, 'kept', 'headers: others pass');
is($rec && $rec->{headers}{'x-dynamo-attempt-id'}, 'h-1',
	'headers: the attempt header is never stripped');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ @CLIENT, 'X-Test-Team' => 'b',
		'X-Dynamo-Attempt-Id' => 'h-2' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'h-2');
is_deeply(assigned($rec), [ 'x-dynamo-request-priority: 5',
	'x-tenant-id: tenant b' ], 'headers: a tenant from a map');

# an empty tenant sends none; the client's are removed all the same

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ @CLIENT, 'X-Dynamo-Attempt-Id' => 'h-3' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'h-3');
is_deeply(assigned($rec), [ 'x-dynamo-request-priority: 5' ],
	'headers: empty tenant, none sent');

# "off" and "": none sent; an operator's headers inherited

$r = call('POST', '/v1/chat/completions', body => '{"prompt":"x"}',
	headers => [ @CLIENT, 'X-Test-Team' => 'a',
		'X-Dynamo-Attempt-Id' => 'h-4' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'h-4');
is_deeply(assigned($rec), [], 'headers: off and empty, none sent');

# the defaults: removed, nothing sent, the operator's of another server pass

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ @CLIENT, 'X-Test-Team' => 'a',
		'X-Dynamo-Attempt-Id' => 'h-5' ], port => port(8083));
$rec = record_with($t, 'x-dynamo-attempt-id', 'h-5');
is_deeply(assigned($rec), [ 'x-evil: 1', 'x-other: 3', 'x_evil: 2',
	'x_other: 4' ], 'headers: defaults, none sent, no dynamo_rl_strip_headers');

# a GET has no body: headers all the same

$r = call('GET', '/v1/models',
	headers => [ @CLIENT, 'X-Test-Team' => 'a',
		'X-Dynamo-Attempt-Id' => 'h-6' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'h-6');
is_deeply(assigned($rec), [ 'x-dynamo-request-priority: 5',
	'x-tenant-id: tenant-a' ], 'headers: GET');

# HTTP/2

SKIP: {
	skip 'no curl with HTTP/2', 3 unless has_curl_h2();

	my @h;
	my @c = @CLIENT;

	while (my ($k, $v) = splice(@c, 0, 2)) {
		push @h, "$k: $v";
	}

	my ($status) = curl_h2($t, '/v1/completions', '{"prompt":"x"}', 'h2-1',
		@h, 'X-Test-Team: a');
	is($status, 200, 'http2: 200');
	$rec = record_with($t, 'x-dynamo-attempt-id', 'h2-1');
	is_deeply(assigned($rec), [ 'x-dynamo-request-priority: 5',
		'x-tenant-id: tenant-a' ], 'http2: the gateway\'s own');
	is($rec && $rec->{headers}{'x-kept'}, 'kept', 'http2: others pass');
}

# bodies: [ name, location, team, body, forwarded ]

my $T = '"prompt":[1,22,333,4444,55555,666666,7777777,0,1.5e3,-2]';

my @BODY = (

	# the cache salt, while a tenant is assigned: alone, first, last

	[ 'salt alone', '/v1/completions', 'a',
		'{"nvext":{"cache_salt":"theirs"}}',
		'{"nvext":{}}' ],
	[ 'salt first', '/v1/completions', 'a',
		'{' . $T . ', "nvext": {"cache_salt": "theirs", "extra_fields":'
		. ' ["worker_id"]}}',
		'{' . $T . ', "nvext": {"extra_fields": ["worker_id"]}}' ],
	[ 'salt last', '/v1/completions', 'a',
		'{"nvext":{"annotations":["a"] , "cache_salt":"s"},' . $T . '}',
		'{"nvext":{"annotations":["a"]},' . $T . '}' ],
	[ 'salt without a tenant', '/v1/completions', '',
		'{"nvext":{"cache_salt":"mine"}}',
		'{"nvext":{"cache_salt":"mine"}}' ],
	[ 'salt at the top level is not nvext\'s', '/v1/completions', 'a',
		'{"cache_salt":"top","nvext":{}}',
		'{"cache_salt":"top","nvext":{}}' ],

	# routing constraints and router, with the pins

	[ 'routing_constraints nested', '/v1/completions', '',
		'{"nvext":{"routing_constraints":{"required_taints":["gpu=x"],'
		. '"preferred_taints":{"gpu=y":2.0}},"dp_rank":1,"x":1}}',
		'{"nvext":{"x":1}}' ],
	[ 'router last', '/v1/completions', '',
		'{"nvext":{"x":1,"router":{"ttft_target":50,"itl_target":5}}}',
		'{"nvext":{"x":1}}' ],
	[ 'routing kept with strip off', '/v1/chat/completions', '',
		'{"nvext":{"router":{"ttft_target":1},"routing_constraints":{}}}',
		'{"nvext":{"router":{"ttft_target":1},"routing_constraints":{}}}' ],

	# agent_hints' priorities, always; the rest of agent_hints passes

	[ 'priorities', '/v1/completions', '',
		'{"nvext":{"agent_hints":{"priority":10,"latency_sensitivity":0.5,'
		. '"strict_priority":1}}}',
		'{"nvext":{"agent_hints":{"latency_sensitivity":0.5}}}' ],
	[ 'priority alone', '/v1/completions', '',
		'{"nvext":{"agent_hints":{"priority":-3}},' . $T . '}',
		'{"nvext":{"agent_hints":{}},' . $T . '}' ],
	[ 'priority elsewhere kept', '/v1/completions', '',
		'{"priority":1,"nvext":{"priority":2,"x":{"agent_hints":'
		. '{"priority":3}}}}',
		'{"priority":1,"nvext":{"priority":2,"x":{"agent_hints":'
		. '{"priority":3}}}}' ],
	[ 'agent_hints not an object', '/v1/completions', '',
		'{"nvext":{"agent_hints":null}}',
		'{"nvext":{"agent_hints":null}}' ],
	[ 'every one, escaped', '/v1/completions', 'a',
		'{"n\u0076ext":{"cache\u005fsalt":"s","agent\u005fhints":'
		. '{"\u0070riority":1,"speculative_prefill":true,'
		. '"strict_priorit\u0079":2},"route\u0072":{},' . $T . '}}',
		'{"n\u0076ext":{"agent\u005fhints":'
		. '{"speculative_prefill":true},' . $T . '}}' ],

	# the operator's paths: agent_hints.osl, extra.deep.a

	[ 'operator path', '/v1/completions', '',
		'{"nvext":{"extra":{"deep":{"b":[1,2],"a":{"c":1}}},'
		. '"agent_hints":{"osl":64,"priority":1}}}',
		'{"nvext":{"extra":{"deep":{"b":[1,2]}},"agent_hints":{}}}' ],
	[ 'operator path, not nvext\'s', '/v1/completions', '',
		'{"extra":{"deep":{"a":1}}}',
		'{"extra":{"deep":{"a":1}}}' ],
	[ 'operator path over a built-in one', '/v1/chat/completions', '',
		'{"nvext":{"x":1,"agent_hints":{"priority":1,"osl":2}}}',
		'{"nvext":{"x":1}}' ],
	[ 'defaults keep osl', '/v1/completions', '',
		'{"nvext":{"agent_hints":{"osl":64,"priority":1}}}',
		'{"nvext":{"agent_hints":{"osl":64}}}', port(8083) ],
);

for my $b (@BODY) {
	my ($name, $uri, $team, $body, $expect, $port) = @$b;
	my $id = 'b-' . ++$n;

	$r = call('POST', $uri, body => $body, port => $port,
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			$team ? ('X-Test-Team' => $team) : () ]);
	is($r->{status}, 200, "$name: 200");

	$rec = record_with($t, 'x-dynamo-attempt-id', $id);
	is($rec && $rec->{body}, $expect, "$name: forwarded byte for byte");
	is($rec && $rec->{headers}{'content-length'}, length $expect,
		"$name: Content-Length");
}

# a repeated priority in agent_hints is a duplicate: refused

$r = call('POST', '/v1/completions',
	body => '{"nvext":{"agent_hints":{"priority":1,"pr\u0069ority":9}}}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'dup-1' ]);
is($r->{status}, 400, 'duplicate priority: 400');
ok(!record_with($t, 'x-dynamo-attempt-id', 'dup-1'),
	'duplicate priority: not forwarded');

# split across chunks, at every byte of the members removed

my $SPLIT = '{"nvext":{"cache_salt":"s","agent_hints":{"priority":1,'
	. '"osl":2},"router":{}},' . $T . '}';
my $SPLIT_OUT = '{"nvext":{"agent_hints":{}},' . $T . '}';

my $ok = 0;

for my $at (1 .. 60) {
	$r = chunked('/v1/completions', [ split_at($SPLIT, $at, $at + 7) ],
		"chunk-$at", headers => [ 'X-Test-Team' => 'a' ]);
	$rec = record_with($t, 'x-dynamo-attempt-id', "chunk-$at");
	$ok++ if $rec && $rec->{body} eq $SPLIT_OUT
		&& $rec->{headers}{'content-length'} == length $SPLIT_OUT
		&& !$rec->{headers}{'transfer-encoding'};
}

is($ok, 60, 'chunked: removed wherever the chunks split');

# HTTP/2 DATA frames of 16k: the members removed straddle a frame's end

SKIP: {
	skip 'no curl with HTTP/2', 4 unless has_curl_h2();

	my $head = '{"prompt":[' . join(',', (7) x 8180);
	my $body = $head . '],"nvext":{"agent_hints":{"priority":1,"osl":2},'
		. '"cache_salt":"s","x":[1,2]}}';
	my $out = $head . '],"nvext":{"agent_hints":{},"x":[1,2]}}';

	ok(length($head) < 16384 && length($head) + 40 > 16384,
		'http2: the members straddle 16384');

	my ($status) = curl_h2($t, '/v1/completions', $body, 'h2-body',
		'X-Test-Team: a');
	is($status, 200, 'http2 body: 200');
	$rec = record_with($t, 'x-dynamo-attempt-id', 'h2-body');
	ok($rec && $rec->{body} eq $out, 'http2 body: removed byte for byte');
	is($rec && $rec->{headers}{'content-length'}, length $out,
		'http2 body: Content-Length');
}

# a 2 MB token array with the members at both ends: identical otherwise

my $BIG = join(',', map { $_ * 7 % 50000 } 1 .. 350000);

$r = call('POST', '/v1/completions',
	body => '{"nvext":{"agent_hints":{"priority":1}},"prompt":[' . $BIG
		. '],"n\u0076ext2":{},"x":{"router":1}}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'big-1' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'big-1');
ok($rec && $rec->{body} eq '{"nvext":{"agent_hints":{}},"prompt":[' . $BIG
	. '],"n\u0076ext2":{},"x":{"router":1}}', 'big: token array identical');

# the ledger: the tenant the gateway assigned

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'X-Tenant-Id' => 'evil', 'X-Test-Team' => 'b',
		'X-Dynamo-Attempt-Id' => 'led-1' ]);
is(ledger('led-1')->{tenant}, 'tenant b', 'ledger: the assigned tenant');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'X-Tenant-Id' => 'evil',
		'X-Dynamo-Attempt-Id' => 'led-2' ]);
ok(!exists ledger('led-2')->{tenant}, 'ledger: none assigned, none shown');

# nginx -t: every bad argument

for my $c (
	[ 'dynamo_rl_strip_headers "x evil";',
		'invalid header name "x evil": a header name is a token of RFC'
		. ' 9110 (letters, digits and !#$%&\'*+-.^_`|~)' ],
	[ 'dynamo_rl_strip_headers x-a "";',
		'invalid header name "": a header name is a token of RFC 9110'
		. ' (letters, digits and !#$%&\'*+-.^_`|~)' ],
	[ 'dynamo_rl_strip_headers x:a;',
		'invalid header name "x:a": a header name is a token of RFC 9110'
		. ' (letters, digits and !#$%&\'*+-.^_`|~)' ],
	[ 'dynamo_rl_strip_nvext a-b;',
		'invalid nvext path "a-b": it is not member names of [A-Za-z0-9_]'
		. ' joined by "."' ],
	[ 'dynamo_rl_strip_nvext "";',
		'invalid nvext path "": it has an empty member name' ],
	[ 'dynamo_rl_strip_nvext a..b;',
		'invalid nvext path "a..b": it has an empty member name' ],
	[ 'dynamo_rl_strip_nvext a.;',
		'invalid nvext path "a.": it has an empty member name' ],
	[ 'dynamo_rl_strip_nvext .a;',
		'invalid nvext path ".a": it has an empty member name' ],
	[ 'dynamo_rl_strip_nvext a.b.c.d.e;',
		'invalid nvext path "a.b.c.d.e": it has more than 4 member names' ],
	[ 'dynamo_rl_strip_nvext a.b.c.d e.f.g;',
		'invalid nvext path "e.f.g": it names more than 4 objects beside the'
		. ' built-in ones' ],
	[ 'dynamo_rl_strip_nvext "a b";',
		'invalid nvext path "a b": it is not member names of [A-Za-z0-9_]'
		. ' joined by "."' ],
	[ 'dynamo_rl_tenant a; dynamo_rl_tenant b;',
		'"dynamo_rl_tenant" directive is duplicate' ],
	[ 'dynamo_rl_priority $no_such_variable;',
		'unknown "no_such_variable" variable' ],
	[ 'dynamo_rl_priority 1; dynamo_rl_priority off;',
		'"dynamo_rl_priority" directive is duplicate' ],
	[ 'dynamo_rl_tenant;',
		'invalid number of arguments in "dynamo_rl_tenant" directive' ],
	[ 'dynamo_rl_priority 1 2;',
		'invalid number of arguments in "dynamo_rl_priority" directive' ],
	[ 'dynamo_rl_strip_headers;',
		'invalid number of arguments in "dynamo_rl_strip_headers"'
		. ' directive' ],
	[ 'dynamo_rl_strip_nvext;',
		'invalid number of arguments in "dynamo_rl_strip_nvext" directive' ],

	# 10 built-in rules, 54 more

	[ 'dynamo_rl_strip_nvext ' . join(' ', map { "p$_" } 1 .. 55) . ';',
		'invalid nvext path "p55": it is past the 64 rules a location may'
		. ' have' ],
)
{
	my ($snippet, $message) = @$c;

	my ($code, $out) = $t->nginx_t(<<"EOF");

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%
    server {
        listen 127.0.0.1:8080;
        location / {
            dynamo_rl_plane request;
            dynamo_rl_ledger off;
            dynamo_rl_gate off;
            $snippet
            proxy_pass http://127.0.0.1:8081;
        }
    }
}

EOF

	is($code, 1, "nginx -t: $snippet fails");
	like($out, qr/\[emerg\] \Q$message\E(?: in |$)/m, "nginx -t: $snippet")
		or diag($out);
}

my ($code, $out) = $t->nginx_t(<<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%
    dynamo_rl_tenant off;
    dynamo_rl_strip_nvext a.b.c.d agent_hints.x metadata_upload.y;
    server {
        listen 127.0.0.1:8080;
        dynamo_rl_strip_headers "!#$%&'*+-.^_`|~0aZ";
        location / {
            dynamo_rl_plane request;
            dynamo_rl_ledger off;
            dynamo_rl_gate off;
            dynamo_rl_tenant "$host-x";
            dynamo_rl_priority off;
            proxy_pass http://127.0.0.1:8081;
        }
    }
}

EOF

is($code, 0, 'nginx -t: every directive, valid') or diag($out);

done_testing();

###############################################################################

# the tenant and priority headers the frontend received, as "name: value"
# (any spelling of the names), sorted

sub assigned {
	my ($rec) = @_;

	return [ 'no record' ] unless $rec;

	my @h;

	for my $name (sort keys %{$rec->{headers}}) {
		next unless $name =~ /^x[-_](tenant[-_]id
			|dynamo[-_]request[-_](strict[-_])?priority
			|evil|other)$/x;

		my $v = $rec->{headers}{$name};
		push @h, map { "$name: $_" } ref $v ? @$v : ($v);
	}

	return \@h;
}

sub ledger {
	my ($id) = @_;

	my $raw = http_get("/rl/attempts/$id",
		PeerAddr => '127.0.0.1:' . port(8086));
	my ($body) = $raw =~ /\r\n\r\n(.*)\z/s;

	return eval { decode_json($body) } // {};
}

sub call {
	my ($method, $uri, %o) = @_;

	my @h = @{$o{headers} // []};
	my $head = '';

	while (my ($k, $v) = splice(@h, 0, 2)) {
		$head .= "$k: $v\r\n";
	}

	my $raw;

	if ($method eq 'GET') {
		$raw = http("GET $uri HTTP/1.0\r\nHost: localhost\r\n$head\r\n",
			PeerAddr => '127.0.0.1:' . ($o{port} // port(8080)));

	} else {
		$raw = http_post($uri, $o{body}, headers => $head,
			PeerAddr => '127.0.0.1:' . ($o{port} // port(8080)),
			timeout => 20);
	}

	return parse_response($raw);
}

###############################################################################
