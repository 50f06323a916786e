#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The trusted listener as a browser sees it.  A listener that serves a
# valid document as text/html with <script> in it: the discovery plane
# answers application/json.  Every answer on the trusted planes and APIs
# carries X-Content-Type-Options: nosniff, and a worker's answer is
# sandboxed by its Content-Security-Policy.  Cross-site POSTs to the gate
# API and the admin plane, with each content type a page may send without
# a preflight and with Origin and Sec-Fetch-Site variants, over HTTP/1.1
# and HTTP/2: 403 cross_origin, nothing changed, nothing forwarded;
# requests without those headers, or from the listener's own origin, pass.
# A control byte in an invalid document reaches the error log escaped.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ curl_response json_error rl_conf time_limit /;

###############################################################################

time_limit(Test::DynamoRL::scale(300));

my $t = Test::DynamoRL->new()->has(qw/http proxy http_v2/);

my @TYPES = ('text/plain', 'application/x-www-form-urlencoded',
	'multipart/form-data; boundary=x');

my @CROSS = (
	[ 'Origin: http://evil.example' ],
	[ 'Origin: null' ],
	[ 'Origin: http://127.0.0.1:' . port(8090) . '.evil.example' ],
	[ 'Origin: https://127.0.0.1:' . port(8090) ],
	[ 'Sec-Fetch-Site: cross-site' ],
	[ 'Sec-Fetch-Site: same-site' ],
	[ 'Sec-Fetch-Site: cross-site',
		'Origin: http://127.0.0.1:' . port(8090) ],
	[ 'Origin: http://127.0.0.1:' . port(8090),
		'Origin: http://127.0.0.1:' . port(8090) ],
);

my @SAME = (
	[],
	[ 'Origin: http://127.0.0.1:' . port(8090) ],
	[ 'Sec-Fetch-Site: same-origin',
		'Origin: http://127.0.0.1:' . port(8090) ],
	[ 'Sec-Fetch-Site: none' ],
);

# per protocol: the gate 3 types x 8 variants x 2, 4 same-origin x 2;
# the admin plane 8 x 2, 2 x 2
my $XO = 2 * (@TYPES * @CROSS * 2 + @SAME * 2 + @CROSS * 2 + 2 * 2);

$t->plan(8 + 15 + $XO + 3);

$t->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%RL_MAIN%%

http {
    %%RL_HTTP 5m%%

    dynamo_rl_discovery /_rl_discovery valid=100s;

    # a listener that serves a valid document as text/html

    server {
        %%RL_LISTEN 8086%%

        location = /v1/rl/workers {
            default_type text/html;
            alias %%TESTDIR%%/workers.html;
        }

        location = /bad {
            default_type application/json;
            alias %%TESTDIR%%/bad.json;
        }
    }

    server {
        %%RL_LISTEN 8090 8099 http2%%

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8082;
        }

        location = /html/v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8086/v1/rl/workers;
        }

        location = /bad {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8086/bad;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        %%RL_DISCOVERY_FETCH%%

        %%RL_APIS gate attempts status metrics%%
    }
}

EOF

$t->run_fake_dynamo();

my $JS = JSON::PP->new->canonical;

$t->write_file('workers.html', default_doc());
$t->write_file('bad.json', qq({"protocol_version":1,"workers":[\x01]}));
$t->run();

###############################################################################

my $ID0 = '7587888160958628117';
my $W = '/v1/rl/workers';

my $r;

# a valid document served as text/html, <script> in a string

$r = get('/html/v1/rl/workers');
is($r->{status}, 200, 'html listener: status');
is($r->{headers}{'content-type'}, 'application/json',
	'html listener: application/json');
is($r->{headers}{'x-content-type-options'}, 'nosniff',
	'html listener: nosniff');
like($r->{body}, qr/<script>/, 'html listener: the document passed on');

# a control byte in an invalid document: escaped in the log line

$r = get('/bad');
is($r->{status}, 502, 'control byte: 502');
is($r->{headers}{'content-type'}, 'application/json',
	'control byte: application/json');

my @lines = $t->log_lines('error.log', qr/discovery document .* invalid/);
ok(@lines && !grep({ /[\x00-\x08\x0b-\x1f\x7f]/ } @lines),
	'control byte: no raw control byte in the log') or diag(@lines);
ok(grep({ /\\x01/ } @lines), 'control byte: written as \x01')
	or diag(@lines);

# nosniff on every trusted answer

my %answers = (
	'discovery 200' => [ 'GET', $W ],
	'discovery 405' => [ 'POST', $W ],
	'admin 200' => [ 'POST', "$W/$ID0/engine/pause_generation" ],
	'admin 404' => [ 'POST', "$W/7000/engine/pause_generation" ],
	'admin 400' => [ 'POST', "$W/x/engine/pause_generation" ],
	'gate GET' => [ 'GET', '/rl/gate' ],
	'attempts 404' => [ 'GET', '/rl/attempts/unknown' ],
	'status JSON' => [ 'GET', '/rl/status' ],
	'status HTML' => [ 'GET', '/rl/status?format=html' ],
	'metrics' => [ 'GET', '/metrics' ],
);

for my $name (sort keys %answers) {
	my ($method, $uri) = @{$answers{$name}};

	$r = $method eq 'GET' ? get($uri) : post($uri, '{}');
	is($r->{headers}{'x-content-type-options'}, 'nosniff',
		"nosniff: $name");

	next unless $name =~ /^admin/;

	is($r->{headers}{'content-security-policy'},
		"sandbox; default-src 'none'", "sandbox: $name");
}

is(post("$W/$ID0/engine/pause_generation", '{}')->{headers}{'content-type'},
	'text/plain; charset=utf-8', 'admin: the worker\'s type passed on');

is(get('/rl/gate')->{headers}{'content-type'}, 'application/json',
	'gate: application/json');

# cross-site POSTs to the gate API

for my $h2 (0, 1) {
	my $proto = $h2 ? 'h2' : 'h1';

	for my $type (@TYPES) {
		for my $cross (@CROSS) {
			my $name = "gate $proto $type, @$cross";
			my $epoch = gate()->{epoch};

			$r = post('/rl/gate', '{"action":"close","reason":"x"}',
				h2 => $h2, refused => 1,
				headers => [ "Content-Type: $type", @$cross ]);
			is(json_error($r), '403 cross_origin', "$name: refused");

			my $g = gate();
			ok($g->{state} eq 'open' && $g->{epoch} == $epoch,
				"$name: gate unchanged");
		}
	}

	for my $same (@SAME) {
		my $name = "gate $proto @$same";

		$r = post('/rl/gate', '{"action":"close","reason":"x"}', h2 => $h2,
			headers => $same);
		is(eval { decode_json($r->{body}) }->{state}, 'closed',
			"$name: closed");

		$r = post('/rl/gate', '{"action":"open"}', h2 => $h2,
			headers => $same);
		is(eval { decode_json($r->{body}) }->{state}, 'open',
			"$name: open");
	}

	# the admin plane

	for my $cross (@CROSS) {
		my $name = "admin $proto @$cross";
		my $n = worker_calls();

		$r = post("$W/$ID0/engine/pause_generation", '{}', h2 => $h2,
			refused => 1, headers => [ 'Content-Type: text/plain', @$cross ]);
		is(json_error($r), '403 cross_origin', "$name: refused");
		is(worker_calls(), $n, "$name: not forwarded");
	}

	for my $same (@SAME[0, 1]) {
		my $name = "admin $proto @$same";
		my $n = worker_calls();

		$r = post("$W/$ID0/engine/pause_generation", '{}', h2 => $h2,
			headers => $same);
		is($r->{status}, 200, "$name: allowed");
		is(worker_calls(), $n + 1, "$name: forwarded");
	}
}

is(scalar $t->log_lines('error.log', qr/\[warn\] .*cross-origin "POST"/
	. qr/ refused, origin "http:\/\/evil.example"/), 2 * (@TYPES + 1),
	'cross-origin: one line each, at warn (dynamo_rl_log_level)');

my ($denied) = get('/metrics')->{body}
	=~ /^dynamo_rl_denials_total\{plane="admin",reason="cross_origin"\} (\d+)/m;
is($denied, 2 * @CROSS, 'cross-origin: admin denials counted');

is(gate()->{state}, 'open', 'gate: open at the end');

###############################################################################

sub default_doc {
	my $ports = $JS->decode($t->read_file('fake/ports.json'));

	my @w = map { {
		namespace => 'dynamo', component => 'backend', endpoint => 'rl',
		instance_id => 1000 + $_,
		transport => { tcp => "127.0.0.1:9999/$_/rl" },
		request_plane_url => 'dyn://dynamo.backend.rl',
		system_url => "http://127.0.0.1:$ports->{workers}[$_]",
		model => '<script>alert(document.domain)</script>',
		routes => [ 'pause_generation' ],
	} } 0 .. 2;

	return $JS->encode({ protocol_version => 1, namespace => 'dynamo',
		workers => \@w });
}

sub worker_calls {
	return scalar grep { ($_->{uri} // '') =~ m!^/engine/! }
		@{$t->fake_records('worker-0')};
}

sub gate {
	my $res = get('/rl/gate');
	return eval { decode_json($res->{body}) } // {};
}

sub get {
	my ($uri, %o) = @_;
	return call('GET', $uri, undef, %o);
}

sub post {
	my ($uri, $body, %o) = @_;
	return call('POST', $uri, $body, %o);
}

sub call {
	my ($method, $uri, $body, %o) = @_;

	my @h = @{$o{headers} // []};

	undef $body if $o{h2} && $o{refused};

	return curl2($method, $uri, $body, @h) if $o{h2};

	my $req = "$method $uri HTTP/1.1\r\nHost: 127.0.0.1:" . port(8090)
		. "\r\nConnection: close\r\n";
	$req .= "$_\r\n" for @h;
	$req .= "Content-Type: application/json\r\n"
		if defined $body && !grep { /^Content-Type:/i } @h;
	$req .= defined $body ? 'Content-Length: ' . length($body)
		. "\r\n\r\n$body" : "\r\n";

	return parse_response(http($req, PeerAddr => '127.0.0.1:' . port(8090)))
		// { status => 0, headers => {}, body => '' };
}

# over HTTP/2, with curl: when nginx answers a POST before it has read the
# body, it ends the stream with RST_STREAM NO_ERROR (RFC 9113 8.1), and
# curl 7.88 then often fails with exit 92 without showing the answer (see
# dynamo_rl_http2.t): refusals go without a body there (call())

sub curl2 {
	my ($method, $uri, $body, @h) = @_;

	my @cmd = ('curl', '-sS', '-i', '--http2-prior-knowledge', '--max-time',
		Test::DynamoRL::scale(10), '-X', $method,
		'-H', 'Host: 127.0.0.1:' . port(8090));
	push @cmd, '-H', $_ for @h;
	push @cmd, '-H', 'Content-Type: application/json'
		if defined $body && !grep { /^Content-Type:/i } @h;
	push @cmd, '--data-binary', $body if defined $body;
	push @cmd, 'http://127.0.0.1:' . port(8099) . $uri;

	my ($r) = curl_response(@cmd);

	return $r // { status => 0, headers => {}, body => '' };
}

###############################################################################
