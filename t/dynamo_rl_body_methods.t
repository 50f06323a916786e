#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for bodies on methods other than POST and PUT (DESIGN.md "Identity
# and priority the gateway assigns", issue 27): a GET, PATCH or DELETE
# that carries a body, with Content-Length, chunked or in HTTP/2 DATA
# frames, goes through the body policy as a POST does, so that a client's
# nvext.cache_salt and agent_hints priorities never reach the frontend,
# byte for byte against what the fake frontend received; a GET without a
# body is forwarded as before; and "nginx -t" refuses dynamo_rl_tenant or
# dynamo_rl_priority with "dynamo_rl_body_policy off".

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ output record_with rl_test /;

###############################################################################

my $t = rl_test(undef, undef, <<'EOF', has => [qw/ http proxy http_v2 /]);

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 4%%

    server {
        %%RL_LISTEN 8080 8085 http2%%

        dynamo_rl_tenant tenant-a;
        dynamo_rl_priority 5;

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }

        location /v1/patch/ {
            dynamo_rl_plane request;
            dynamo_rl_methods GET HEAD POST PATCH DELETE;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my ($r, $rec);

my $IN = '{"nvext":{"cache_salt":"s","agent_hints":{"priority":9,'
	. '"strict_priority":1,"osl":2}},"prompt":[1,22,333]}';
my $OUT = '{"nvext":{"agent_hints":{"osl":2}},"prompt":[1,22,333]}';

# a GET with a Content-Length

$r = raw('GET', '/v1/models', 'get-cl', $IN);
$rec = record_with($t, 'x-dynamo-attempt-id', 'get-cl');
is($rec && $rec->{body}, $OUT, 'GET, Content-Length: removed byte for byte');
is($rec && $rec->{headers}{'content-length'}, length $OUT,
	'GET, Content-Length: its Content-Length');
is($rec && $rec->{headers}{'x-tenant-id'}, 'tenant-a',
	'GET, Content-Length: the gateway\'s tenant');

# a GET, chunked

$r = raw('GET', '/v1/models', 'get-chunked', $IN, 'chunked');
$rec = record_with($t, 'x-dynamo-attempt-id', 'get-chunked');
is($rec && $rec->{body}, $OUT, 'GET, chunked: removed byte for byte');
ok($rec && !$rec->{headers}{'transfer-encoding'},
	'GET, chunked: forwarded with a length');

# PATCH and DELETE where dynamo_rl_methods allows them

$r = raw('PATCH', '/v1/patch/x', 'patch', $IN);
$rec = record_with($t, 'x-dynamo-attempt-id', 'patch');
is($rec && $rec->{body}, $OUT, 'PATCH: removed byte for byte');

$r = raw('DELETE', '/v1/patch/x', 'delete', $IN, 'chunked');
$rec = record_with($t, 'x-dynamo-attempt-id', 'delete');
is($rec && $rec->{body}, $OUT, 'DELETE, chunked: removed byte for byte');

# a GET's body that is no JSON object is refused, as a POST's is

$r = raw('GET', '/v1/models', 'get-bad', '{"nvext":');
is($r->{status}, 400, 'GET, bad body: 400');
is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_body',
	'GET, bad body: reason');
ok(!record_with($t, 'x-dynamo-attempt-id', 'get-bad'),
	'GET, bad body: not forwarded');

# a GET without a body, and with an empty one, is forwarded as before

$r = raw('GET', '/v1/models', 'get-none');
is($r->{status}, 200, 'GET, no body: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'get-none');
is($rec && $rec->{body}, '', 'GET, no body: forwarded');

$r = raw('GET', '/v1/models', 'get-empty', '');
is($r->{status}, 200, 'GET, Content-Length: 0: 200');

# HTTP/2: a GET with DATA frames, and one without

SKIP: {
	skip 'no curl with HTTP/2', 5 unless curl_h2();

	my ($status) = curl_h2('GET', '/v1/models', $IN, 'h2-get');
	$rec = record_with($t, 'x-dynamo-attempt-id', 'h2-get');
	is($rec && $rec->{body}, $OUT, 'http2 GET: removed byte for byte');
	is($rec && $rec->{headers}{'content-length'}, length $OUT,
		'http2 GET: its Content-Length');

	($status) = curl_h2('PATCH', '/v1/patch/x', $IN, 'h2-patch');
	$rec = record_with($t, 'x-dynamo-attempt-id', 'h2-patch');
	is($rec && $rec->{body}, $OUT, 'http2 PATCH: removed byte for byte');

	($status) = curl_h2('GET', '/v1/models', undef, 'h2-none');
	is($status, 200, 'http2 GET, no body: 200');
	$rec = record_with($t, 'x-dynamo-attempt-id', 'h2-none');
	is($rec && $rec->{body}, '', 'http2 GET, no body: forwarded');
}

# nginx -t: what the gateway assigns needs the body policy

for my $c (
	[ 'dynamo_rl_tenant t;', 'dynamo_rl_tenant', 'nvext.cache_salt' ],
	[ 'dynamo_rl_priority 1;', 'dynamo_rl_priority',
		'nvext.agent_hints.priority' ],
	[ 'dynamo_rl_tenant "";', 'dynamo_rl_tenant', 'nvext.cache_salt' ],
)
{
	my ($snippet, $name, $member) = @$c;

	my ($code, $out) = $t->nginx_t(conf($snippet, 'off'));

	is($code, 1, "nginx -t: $snippet with the body policy off fails");
	my $message = qq{"$name" requires "dynamo_rl_body_policy on": }
		. "a body's $member would reach the frontend";

	like($out, qr/\[emerg\] \Q$message\E in /,
		"nginx -t: $snippet, message") or diag($out);
}

my ($code, $out) = $t->nginx_t(conf('dynamo_rl_tenant off;', 'off'));
is($code, 0, 'nginx -t: the body policy off, nothing assigned')
	or diag($out);

done_testing();

###############################################################################

sub conf {
	my ($snippet, $policy) = @_;

	return <<"EOF";

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%
    $snippet
    server {
        listen 127.0.0.1:8080;
        location / {
            dynamo_rl_plane request;
            dynamo_rl_ledger off;
            dynamo_rl_gate off;
            dynamo_rl_body_policy $policy;
            proxy_pass http://127.0.0.1:8081;
        }
    }
}

EOF
}

sub raw {
	my ($method, $uri, $id, $body, $chunked) = @_;

	my $head = "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\n";

	if (!defined $body) {
		$body = '';

	} elsif ($chunked) {
		$head .= "Transfer-Encoding: chunked\r\n";
		$body = join('', map { sprintf("%x\r\n%s\r\n", length, $_) }
			substr($body, 0, 10), substr($body, 10)) . "0\r\n\r\n";

	} else {
		$head .= 'Content-Length: ' . length($body) . "\r\n";
	}

	return parse_response(http($head . "\r\n", body => $body,
		PeerAddr => '127.0.0.1:' . port(8080), timeout => 20));
}

sub curl_h2 {
	my ($method, $uri, $body, $id) = @_;

	return system('curl --version 2>/dev/null | grep -q HTTP2') == 0
		unless defined $method;

	my @data;

	if (defined $body) {
		$t->write_file('h2.body', $body);
		@data = ('--data-binary', '@' . $t->testdir() . '/h2.body');
	}

	my $head = output('curl', '-sS', '--http2-prior-knowledge',
		'-X', $method, '-o', '/dev/null', '-D', '-',
		'-H', 'content-type: application/json',
		'-H', "x-dynamo-attempt-id: $id", @data,
		'http://127.0.0.1:' . port(8085) . $uri);

	my ($status) = $head =~ m{^HTTP/2 (\d{3})}m;

	return ($status, $head);
}

###############################################################################
