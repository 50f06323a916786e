#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The composition matrix: every block nginx lets a configuration put inside
# a plane location keeps the plane and all of its policy, over HTTP/1.1
# and HTTP/2, with two worker processes.
#
# For each plane (request, discovery, admin) and each block (a nested
# location, an "if" block, a "limit_except" block), the rules of the plane
# are checked in the block: methods, canonical targets, X-Accel-* from a
# hostile upstream ignored; on the request plane also single use of
# attempt ids, routing pins removed and the closed gate; on the discovery
# plane the namespace scope; on the admin plane the snapshot checks.
# Then the ways a request comes back into a location: an error_page to a
# named and to a regular location after the upstream answered (never
# forwarded again, on each plane), a static error page (still served),
# and internal redirects into a plane location by error_page and by
# X-Accel-Redirect from a non-plane upstream (refused, never forwarded).
# Last, nginx -t refuses the admin plane where it has no path prefix.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;
use JSON::PP;
use Math::BigInt;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ curl_response json_error time_limit /;

###############################################################################

time_limit(Test::DynamoRL::scale(300));

my $t = Test::DynamoRL->new()->has(qw/http proxy rewrite http_v2/);

my $CURL = -x '/usr/bin/curl' ? '/usr/bin/curl' : undef;

my @BLOCKS = qw/ nested if limit_except /;

# per block and protocol: request 9, discovery 5, admin 7
my $MATRIX = scalar(@BLOCKS) * 2 * (9 + 5 + 7);

$t->plan($MATRIX + 5 + 27 + 6);

my $CONF = <<'EOF';

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    %%TEST_GLOBALS_HTTP%% dynamo_rl_zone zone=rl:20m;

    upstream frontend {
        server 127.0.0.1:8081;
        keepalive 4;
    }

    upstream listener {
        server 127.0.0.1:8082;
    }

    upstream hostile {
        server 127.0.0.1:8086;
    }

    # a hostile RL listener: a valid document, and X-Accel-Redirect on
    # every answer

    server {
        listen       127.0.0.1:8086;
        server_name  localhost;

        add_header X-Accel-Redirect /secret always;
        add_header X-Accel-Limit-Rate 1 always;

        location = /v1/rl/workers {
            default_type application/json;
            alias %%TESTDIR%%/workers.json;
        }
    }

    # an upstream of a location without a plane, which redirects into one

    server {
        listen       127.0.0.1:8087;
        server_name  localhost;

        location / {
            add_header X-Accel-Redirect $http_x_to always;
            return 200 "redirector";
        }
    }

    dynamo_rl_discovery /_rl_discovery valid=100s;

    %%BLOCKS%%

    # back into a location: error_page and internal redirects

    server {
        listen       127.0.0.1:8103;
        server_name  localhost;

        location /v1/completions {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
            proxy_intercept_errors on;
            error_page 500 502 503 = @fallback;
        }

        location /v1/chat/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
            proxy_intercept_errors on;
            error_page 500 502 503 /v1/completions;
        }

        location /v1/responses {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
            proxy_intercept_errors on;
            error_page 500 502 503 /errors/502.json;
        }

        location /errors/ {
            internal;
            root %%TESTDIR%%;
        }

        location @fallback {
            proxy_pass http://frontend;
        }

        location /mirrored/ {
            dynamo_rl_plane request;
            mirror /_mirror;
            proxy_pass http://frontend/v1/;
        }

        location = /_mirror {
            internal;
            proxy_pass http://frontend/v1/completions;
        }

        location /missing {
            error_page 404 = /v1/completions;
            return 404;
        }

        location /hop {
            proxy_pass http://127.0.0.1:8087;
        }

        location = /_rl_discovery {
            internal;
            proxy_pass http://listener/v1/rl/workers;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_intercept_errors on;
            error_page 500 502 503 504 = @again;
        }

        location @again {
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://listener;
            proxy_intercept_errors on;
            error_page 500 502 503 504 = @list;
        }

        location @list {
            proxy_pass http://listener;
        }
    }

    server {
        listen       127.0.0.1:8160;
        server_name  localhost;

        location = /rl/gate {
            dynamo_rl_gate_api;
        }
    }
}

EOF

# each plane in each block, a server of its own with an HTTP/1.1 and an
# HTTP/2 listener (port + 10); the block marks the requests it handles

my %PLANE = (
	request => [ 8100, '/v1/', '/v1/completions', 'GET', <<'EOF' ],
            dynamo_rl_plane request;
            proxy_pass http://frontend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
EOF
	discovery => [ 8120, '/v1/rl/', '/v1/rl/workers', 'POST', <<'EOF' ],
            dynamo_rl_plane discovery;
            dynamo_rl_namespace prefix=ns;
            proxy_pass http://hostile;
EOF
	admin => [ 8140, '/v1/rl/workers/', '/v1/rl/workers/7', 'GET', <<'EOF' ],
            dynamo_rl_plane admin;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
EOF
);

my $blocks = '';

for my $plane (qw/ request discovery admin /) {
	my ($port, $prefix, $nested, $except, $body) = @{$PLANE{$plane}};
	(my $inner = $body) =~ s/^.*dynamo_rl_(plane|namespace) .*\n//mg;

	my %block = (
		nested => "            location $nested {\n$inner"
			. "                add_header X-Block nested always;\n"
			. "            }\n",
		if => "            if (\$request_method) {\n"
			. "                add_header X-Block if always;\n"
			. "            }\n",
		limit_except => "            limit_except $except {\n"
			. "                allow 127.0.0.1;\n"
			. "                deny all;\n"
			. "                auth_basic rl;\n"
			. "                auth_basic_user_file %%TESTDIR%%/htpasswd;\n"
			. "            }\n",
	);

	$block{nested} =~ s/^            (\S)/                $1/mg;
	$block{nested} =~ s/^                (location|\})/            $1/mg;

	for my $i (0 .. $#BLOCKS) {
		my $p = $port + $i;

		$blocks .= "    server {\n"
			. "        listen       127.0.0.1:$p;\n"
			. "        listen       127.0.0.1:" . ($p + 10) . " http2;\n"
			. "        server_name  localhost;\n\n"
			. "        location $prefix {\n$body\n$block{$BLOCKS[$i]}"
			. "        }\n\n"
			. "        location = /_rl_discovery {\n"
			. "            internal;\n"
			. "            proxy_pass http://listener/v1/rl/workers;\n"
			. "        }\n\n"
			. "        location /secret {\n"
			. "            return 200 \"SECRET\";\n"
			. "        }\n"
			. "    }\n\n";
	}
}

$CONF =~ s/    %%BLOCKS%%\n/$blocks/;
$t->write_file_expand('nginx.conf', $CONF);

my $JS = JSON::PP->new->canonical->allow_bignum;

# the fake's workers, in three namespaces: whichever document the snapshot
# holds, the discovery plane's or the listener's, admits the same calls

$t->write_file('workers.json', doc(
	worker('ns', '7587888160958628117', 8091),
	worker('ns-abc', '9007199254740993', 8092),
	worker('ns2', '18446744073709551615', 8093),
));
$t->write_file('htpasswd', "rl:{PLAIN}secret\n");
$t->write_file('errors/502.json', qq({"static":"error page"}\n))
	if mkdir($t->testdir() . '/errors');

$t->run_fake_dynamo()->run();

# every call to worker 0 is answered by a hostile worker

$t->fake_set('worker-0.respond.json', $JS->encode({ status => 200,
	body => { status => 'ok', message => 'Engine paused' },
	headers => [ [ 'X-Accel-Redirect', '/secret' ],
		[ 'X-Accel-Limit-Rate', '1' ] ] }));

###############################################################################

my $ID0 = '7587888160958628117';
my $W = '/v1/rl/workers';
my $BODY = '{"model":"Qwen/Qwen3-0.6B","prompt":"hi","max_tokens":2}';

my %PORT = (
	request => { nested => 8100, if => 8101, limit_except => 8102 },
	discovery => { nested => 8120, if => 8121, limit_except => 8122 },
	admin => { nested => 8140, if => 8141, limit_except => 8142 },
);

my $r;

for my $block (@BLOCKS) {
	for my $h2 (0, 1) {
		request_plane($block, $h2);
		discovery_plane($block, $h2);
		admin_plane($block, $h2);
	}
}

# the gate, closed once for all the blocks

my $close = gate({ action => 'close', reason => 'compose', lease => '60s' });
is($close->{state}, 'closed', 'gate: closed');

for my $block (@BLOCKS) {
	my $n = frontend_count();
	$r = call($PORT{request}{$block}, 'POST', '/v1/completions',
		body => $BODY, headers => [ 'X-Dynamo-Attempt-Id' =>
			"gate-$block" ]);
	ok($r->{status} == 503
		&& ($r->{headers}{'x-dynamo-rl-reason'} // '') eq 'gate_closed'
		&& frontend_count() == $n, "gate: $block: 503, not forwarded")
		or diag(explain($r));
}

is(gate({ action => 'open' })->{state}, 'open', 'gate: open again');

###############################################################################

# error_page after the upstream answered, to a named location: the
# request is not forwarded a second time

my $n = frontend_count();

$r = upstream_500('/v1/completions', 'again-named');
is($r->{status}, 502, 'error_page named: 502');
is($r->{headers}{'x-dynamo-rl-reason'}, 'redirected',
	'error_page named: reason');
is(eval { decode_json($r->{body}) }->{code}, 502,
	'error_page named: flat error');
is(scalar frontend_with('again-named'), 1, 'error_page named: sent once');
is(scalar $t->log_lines('error.log', qr/\[error\].*request already/
	. qr/ forwarded, not again to "\/v1\/completions"/), 1,
	'error_page named: one error line');

# to a regular location of the same plane

$r = upstream_500('/v1/chat/completions', 'again-regular');
is($r->{status}, 500, 'error_page regular: the status error_page keeps');
is($r->{headers}{'x-dynamo-rl-reason'}, 'redirected',
	'error_page regular: reason');
is(scalar frontend_with('again-regular'), 1, 'error_page regular: sent once');

# a static error page still answers

$r = upstream_500('/v1/responses', 'again-static');
is($r->{status}, 500, 'error_page static: status kept');
isnt($r->{headers}{'x-dynamo-rl-reason'}, 'redirected',
	'error_page static: served');
is(scalar frontend_with('again-static'), 1, 'error_page static: sent once');

# a mirror of a plane request is not sent

$r = call(8103, 'POST', '/mirrored/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'mirrored' ]);
is($r->{status}, 200, 'mirror: the request itself');
ok($t->wait_for(sub { $t->log_lines('error.log', qr/\[error\].*background/
	. qr/ subrequest "\/_mirror" of a plane request not sent/) }),
	'mirror: refused, one error line');
is(scalar frontend_with('mirrored'), 1, 'mirror: sent once');

# an internal redirect into a plane location from outside one: the raw
# target is not the location's, so it is refused, never forwarded

$n = frontend_count();

$r = call(8103, 'POST', '/missing', body => $BODY);
is($r->{status}, 400, 'error_page into the plane: 400');
is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_path',
	'error_page into the plane: reason');

$r = call(8103, 'POST', '/hop', body => $BODY,
	headers => [ 'X-To' => '/v1/completions' ]);
is($r->{status}, 400, 'X-Accel-Redirect into the plane: 400');
is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_path',
	'X-Accel-Redirect into the plane: reason');
is(frontend_count(), $n, 'redirects into the plane: nothing forwarded');

$r = call(8103, 'POST', "/hop", body => '{}',
	headers => [ 'X-To' => "$W/$ID0/engine/pause_generation" ]);
is(json_error($r), '405 method',
	'X-Accel-Redirect into admin: refused, it is a GET now');
is(scalar @{$t->fake_records('worker-0')}, worker0_expected(),
	'X-Accel-Redirect into admin: not forwarded');

# the admin plane: a worker's 500 sent to a named location that would call
# the worker again

$t->fake_set('worker-1.respond.json', $JS->encode({ status => 500,
	body => { error => 'Handler error', message => 'boom' } }));

my $w1 = scalar @{$t->fake_records('worker-1')};

$r = call(8103, 'POST', "$W/9007199254740993/engine/flush_cache",
	body => '{}');
is($r->{status}, 502, 'admin error_page: 502');
is(eval { decode_json($r->{body}) }->{error}, 'redirected',
	'admin error_page: reason');
is(scalar @{$t->fake_records('worker-1')} - $w1, 1,
	'admin error_page: one call to the worker');

# the discovery plane: the listener's 500 sent to a named location

$t->fake_set('discovery.status', '500');

my $l = scalar @{$t->fake_records('listener')};

$r = call(8103, 'GET', $W);
is($r->{status}, 502, 'discovery error_page: 502');
is(eval { decode_json($r->{body}) }->{error}, 'redirected',
	'discovery error_page: reason');
is(scalar @{$t->fake_records('listener')} - $l, 1,
	'discovery error_page: one request to the listener');

$t->fake_unset('discovery.status');

###############################################################################

# nginx -t: the admin plane needs the prefix its paths start with

for my $loc ('~ ^/w/', '= /w/1/engine/x', '@admin') {
	my ($code, $out) = $t->nginx_t(<<"EOF");

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%% dynamo_rl_zone zone=rl:1m;
    dynamo_rl_discovery /_d;

    server {
        listen 127.0.0.1:8170;

        location $loc {
            dynamo_rl_plane admin;
            return 404;
        }
    }
}
EOF
	my $re = '\[emerg\] "dynamo_rl_plane" directive requires a prefix'
		. ' location.* in \S+:15$';
	like($out, qr/$re/m, "nginx -t: admin in \"$loc\"");
	isnt($code, 0, "nginx -t: \"$loc\" refused");
}

###############################################################################

sub request_plane {
	my ($block, $h2) = @_;

	my $port = $PORT{request}{$block} + ($h2 ? 10 : 0);
	my $name = "request $block" . ($h2 ? ' h2' : '');
	my $id = "compose-$block-$h2";

	# a first attempt: forwarded, through the block, with the policy on

	$r = call($port, 'POST', '/v1/completions', h2 => $h2, body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'X-Dynamo-Worker-Instance-Id' => '42',
			'x-dp-rank' => '1' ]);
	is($r->{status}, 200, "$name: forwarded");
	through($block, $port, 'POST', '/v1/completions', $h2, $r, $name);

	my @rec = frontend_with($id);
	is(scalar @rec, 1, "$name: sent once");
	ok(@rec && !grep({ /instance-id|dp-rank/ } keys %{$rec[0]{headers}}),
		"$name: routing pins removed");

	# the same id again

	# with the body policy on, the id is claimed once the body is read, so
	# the 409 comes after it, over HTTP/2 too; a GET is no attempt (issue
	# 29, item 9)

	$r = call($port, 'POST', '/v1/completions', h2 => $h2, body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);
	is($r->{status}, 409, "$name: reused id refused");
	is(scalar frontend_with($id), 1, "$name: reused id not forwarded");

	# a target whose raw bytes mean something else

	my $n = frontend_count();
	$r = call($port, 'POST', '/v1/completions/..%2Fcompletions', h2 => $h2,
		body => $BODY, refused => 1);
	ok($r->{status} == 400 && frontend_count() == $n,
		"$name: non-canonical target refused")
		or diag(explain($r));

	# the frontend asks for X-Accel-Redirect

	$r = call($port, 'POST', '/v1/completions', h2 => $h2, body => $BODY,
		headers => [ 'x-fake-scenario' => 'accel-redirect' ]);
	is($r->{body}, '{"upstream":"accel"}', "$name: X-Accel-Redirect ignored");

	# a method outside the plane's set

	$n = frontend_count();
	$r = call($port, 'PUT', '/v1/completions', h2 => $h2, body => $BODY,
		refused => 1);
	ok($r->{status} == 405 && frontend_count() == $n
		&& ($r->{headers}{allow} // '') =~ /POST/,
		"$name: PUT refused with 405") or diag(explain($r));
}

sub discovery_plane {
	my ($block, $h2) = @_;

	my $port = $PORT{discovery}{$block} + ($h2 ? 10 : 0);
	my $name = "discovery $block" . ($h2 ? ' h2' : '');

	$r = call($port, 'GET', $W, h2 => $h2);
	is($r->{status}, 200, "$name: status");
	through($block, $port, 'GET', $W, $h2, $r, $name);

	my $doc = eval { $JS->decode($r->{body}) } // {};
	is(join(',', map { $_->{namespace} } @{$doc->{workers} // []}),
		'ns,ns-abc', "$name: namespace scope, X-Accel-Redirect ignored")
		or diag($r->{body});

	$r = call($port, 'PUT', $W, h2 => $h2);
	is(json_error($r), '405 method', "$name: PUT refused");

	$r = call($port, 'GET', '/v1/rl/x/..%2Fworkers', h2 => $h2);
	is(json_error($r), '400 bad_path', "$name: non-canonical target");
}

sub admin_plane {
	my ($block, $h2) = @_;

	my $port = $PORT{admin}{$block} + ($h2 ? 10 : 0);
	my $name = "admin $block" . ($h2 ? ' h2' : '');

	my $w0 = scalar @{$t->fake_records('worker-0')};

	$r = call($port, 'POST', "$W/$ID0/engine/pause_generation", h2 => $h2,
		body => '{}');
	is($r->{status}, 200, "$name: allowed call");
	through($block, $port, 'POST', "$W/7000/engine/pause_generation", $h2,
		$r, $name);
	is($r->{body}, '{"message":"Engine paused","status":"ok"}',
		"$name: the worker's answer, X-Accel-Redirect ignored");

	my $fwd = $t->fake_records('worker-0');
	is(join(' ', map { "$_->{method} $_->{uri}" } @$fwd[$w0 .. $#$fwd]),
		'POST /engine/pause_generation', "$name: one call forwarded");

	$r = call($port, 'POST', "$W/7000/engine/pause_generation", h2 => $h2,
		body => '{}', refused => 1);
	is(json_error($r), '404 unknown_worker', "$name: unknown worker");

	$r = call($port, 'POST', "$W/$ID0/engine/start_profile", h2 => $h2,
		body => '{}', refused => 1);
	is(json_error($r), '403 route_not_advertised',
		"$name: route not advertised");

	$r = call($port, 'PUT', "$W/$ID0/engine/pause_generation", h2 => $h2,
		body => '{}', refused => 1);
	ok(json_error($r) eq '405 method'
		&& scalar @{$t->fake_records('worker-0')} == $w0 + 1,
		"$name: PUT refused, nothing more forwarded")
		or diag(explain($r));
}

###############################################################################

# the request went through the block: the "if" and the nested location add
# a header; the limit_except block asks for credentials

sub through {
	my ($block, $port, $method, $uri, $h2, $r, $name) = @_;

	if ($block ne 'limit_except') {
		return is($r->{headers}{'x-block'}, $block,
			"$name: through the block");
	}

	my $anon = call($port, $method, $uri, h2 => $h2, anonymous => 1,
		body => '{}', refused => 1);
	is($anon->{status}, 401, "$name: through the block");
}

sub worker0_expected {
	# the allowed calls of the matrix, one per block and protocol
	return scalar(@BLOCKS) * 2;
}

sub frontend_records {
	return grep { ($_->{method} // '') ne '' } @{$t->fake_records('frontend')};
}

sub frontend_count {
	return scalar frontend_records();
}

sub frontend_with {
	my ($id) = @_;
	return grep { ($_->{headers}{'x-dynamo-attempt-id'} // '') eq $id }
		frontend_records();
}

sub gate {
	my ($data) = @_;
	my $res = http_json('/rl/gate', json => $data,
		PeerAddr => '127.0.0.1:' . port(8160));
	return $res && $res->{json} // {};
}

# one request over HTTP/1.1 on a raw socket, or over HTTP/2 with curl;
# "refused": a request the gateway answers before it reads a body

# a generation on 8103, under attempt id $id, that the frontend answers
# with 500

sub upstream_500 {
	my ($uri, $id) = @_;

	return call(8103, 'POST', $uri, body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => 'status-500' ]);
}

sub call {
	my ($port, $method, $uri, %o) = @_;

	my @h = @{$o{headers} // []};
	my $body = $o{body};

	push @h, 'Authorization' => 'Basic cmw6c2VjcmV0' unless $o{anonymous};

	# when nginx answers a POST over HTTP/2 before it has read the body,
	# it ends the stream with RST_STREAM NO_ERROR (RFC 9113 8.1), and
	# curl 7.88 then often fails with exit 92 without showing the answer:
	# refusals go without a body there (see dynamo_rl_http2.t)

	undef $body if $o{h2} && $o{refused};

	return curl2($port, $method, $uri, $body, @h) if $o{h2};

	my $req = "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\n";

	while (my ($k, $v) = splice(@h, 0, 2)) {
		$req .= "$k: $v\r\n";
	}

	$req .= defined $body ? "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body" : "\r\n";

	return parse_response(http($req, PeerAddr => '127.0.0.1:' . port($port)))
		// { status => 0, headers => {}, body => '' };
}

sub curl2 {
	my ($port, $method, $uri, $body, @h) = @_;

	my @cmd = ($CURL // 'curl', '-sS', '-i', '--http2-prior-knowledge',
		'--path-as-is', '--max-time', Test::DynamoRL::scale(10),
		'-X', $method);

	while (my ($k, $v) = splice(@h, 0, 2)) {
		push @cmd, '-H', "$k: $v";
	}

	push @cmd, '-H', 'Content-Type: application/json',
		'--data-binary', $body if defined $body;

	push @cmd, 'http://127.0.0.1:' . port($port) . $uri;

	my ($r, $out) = curl_response(@cmd);

	if (!defined $r) {
		diag("@cmd: exit " . ($? >> 8) . ": " . ($out // ''));
		return { status => 0, headers => {}, body => '' };
	}

	diag("curl: $r->{protocol}, not HTTP/2") unless $r->{protocol} eq 'HTTP/2';

	return $r;
}

sub worker {
	my ($ns, $id, $port) = @_;

	return {
		namespace => $ns,
		component => 'backend',
		endpoint => 'rl',
		instance_id => Math::BigInt->new($id),
		transport => { tcp => "127.0.0.1:9999/$id/rl" },
		request_plane_url => "dyn://$ns.backend.rl",
		system_url => 'http://127.0.0.1:' . port($port),
		model => 'Qwen/Qwen3-0.6B',
		routes => [ 'pause_generation', 'resume_generation',
			'flush_cache' ],
		world_size => 1,
	};
}

sub doc {
	return '{"protocol_version":1,"namespace":"ns","workers":['
		. join(',', map { $JS->encode($_) } @_) . ']}';
}

###############################################################################
