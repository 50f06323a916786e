#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The discovery plane and the refresh subrequest at the boundary (issue 12,
# defects 2, 5, 6 and three of "also seen"):
#
# - a refresh that fails gives exactly one well-formed 503
#   discovery_unavailable and nothing before it, over HTTP/1.1 keep-alive
#   (a second request on the connection parses) and HTTP/2, whatever is
#   done to the subrequest: error_page to a regular and to a named
#   location with the listener down, X-Accel-Redirect from the listener
#   (with and without a valid document), a listener 500 intercepted into
#   an error_page or passed as is, a body cut short, a stalled body, a 101;
#   the error log names the real failure;
# - Upgrade is never honoured: a listener's or a worker's 101 is a 502 in
#   JSON, on the discovery plane, for a refresh and on the admin plane, and
#   no byte is tunnelled either way;
# - a cut-short or stalled listener body on the discovery plane is a 502
#   discovery_invalid in JSON, never a silent close, buffered or not;
# - a subrequest never acts on its main request's context (a mirror into
#   the attempts API once turned the discovery plane's policy off);
# - a system_url that names an upstream{} group is refused (no_system_url);
# - an instance_id that is not an exact u64 (42.0, 4.2e1, -0, "42") names
#   no worker: 404 unknown_worker, and a worker with the exact id is not
#   ambiguous with it.
#
# The listener and the worker are one small daemon here ("rogue"), which
# misbehaves by URI and records what it receives; loopback only.

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
use Test::DynamoRL::Fixture qw/ fork_server rl_conf /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my @KIDS;

$SIG{ALRM} = sub { kill 'KILL', @KIDS; die "test timed out\n" };
alarm(240);

my $t = Test::DynamoRL->new()->has(qw/http proxy rewrite http_v2/);

unless (system('nghttp --version >/dev/null 2>&1') == 0) {
	plan(tests => 1);
	fail('nghttp (util/apt-ensure nghttp2-client)');
	exit 1;
}

$t->plan(87);

my $DIR = $t->testdir();

$t->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%RL_MAIN%%

http {
    %%RL_HTTP 5m%%

    log_format rl '$uri $status $dynamo_rl_deny_reason';
    access_log %%TESTDIR%%/rl.log rl;

    upstream frontend {
        server 127.0.0.1:8071;
    }

    server {
        %%RL_LISTEN 8080 8083 http2%%

        # traps: what a refresh's subrequest must never pass on

        error_page 502 504 /err.json;

        location = /err.json {
            internal;
            return 200 '{"status":"ok","forged":"error_page"}\n';
        }

        location = /forged {
            internal;
            return 200 '{"status":"ok","forged":"accel"}\n';
        }

        location @forged {
            return 200 '{"status":"ok","forged":"named"}\n';
        }

        location = /ping {
            return 200 'pong';
        }

        # admin locations, each refreshing from its own discovery location

        location /down/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/down valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /named/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/named valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /accel/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/accel valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /acceldoc/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/acceldoc valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /l500/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/l500 valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /l500plain/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/l500plain valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /short/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/short valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /stall/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/stall valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /upgrade/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/upgrade valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location /w/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_d/ok valid=0 max_size=64k;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        %%RL_DISCOVERY_SOURCE /_d/down http://127.0.0.1:8079/v1/rl/workers%%

        location = /_d/named {
            internal;
            error_page 502 = @forged;
            proxy_pass http://127.0.0.1:8079/v1/rl/workers;
        }

        %%RL_DISCOVERY_SOURCE /_d/accel http://127.0.0.1:8071/accel%%

        %%RL_DISCOVERY_SOURCE /_d/acceldoc http://127.0.0.1:8071/acceldoc%%

        location = /_d/l500 {
            internal;
            proxy_intercept_errors on;
            error_page 500 /err.json;
            proxy_pass http://127.0.0.1:8071/500;
        }

        %%RL_DISCOVERY_SOURCE /_d/l500plain http://127.0.0.1:8071/500%%

        %%RL_DISCOVERY_SOURCE /_d/short http://127.0.0.1:8071/short%%

        location = /_d/stall {
            internal;
            proxy_read_timeout 1s;
            proxy_pass http://127.0.0.1:8071/stall;
        }

        %%RL_DISCOVERY_SOURCE /_d/upgrade http://127.0.0.1:8071/upgrade%%

        %%RL_DISCOVERY_SOURCE /_d/ok http://127.0.0.1:8071/ok%%

        # the discovery plane

        location = /dp/short {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8071/short;
        }

        location = /dp/short-nb {
            dynamo_rl_plane discovery;
            proxy_buffering off;
            proxy_pass http://127.0.0.1:8071/short;
        }

        location = /dp/stall {
            dynamo_rl_plane discovery;
            proxy_read_timeout 1s;
            proxy_pass http://127.0.0.1:8071/stall;
        }

        location = /dp/stall-nb {
            dynamo_rl_plane discovery;
            proxy_buffering off;
            proxy_read_timeout 1s;
            proxy_pass http://127.0.0.1:8071/stall;
        }

        location = /dp/upgrade {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8071/upgrade;
        }

        location = /dp/mirror {
            dynamo_rl_plane discovery;
            dynamo_rl_namespace exact=dynamo;
            mirror /rl/attempts/none;
            proxy_pass http://127.0.0.1:8071/scoped;
        }

        %%RL_APIS attempts%%
    }
}

EOF

$t->run_daemon(\&rogue, port(8071), "$DIR/rogue.log");
$t->waitforsocket('127.0.0.1:' . port(8071)) or die "no rogue listener\n";
$t->run();

###############################################################################

my $JS = JSON::PP->new->canonical;
my $ADMIN = '42/engine/flush_cache';

# a failed refresh, composition by composition: one 503, nothing before
# it, the connection still usable; the error log names the failure

my @FAILED = (
	[ 'down', 'error_page to a regular location, listener down',
		qr/refresh from "\/_d\/down" failed: status 502/ ],
	[ 'named', 'error_page to a named location, listener down',
		qr/refresh from "\/_d\/named" failed: status 502/ ],
	[ 'accel', 'X-Accel-Redirect from the listener',
		qr/refresh from "\/_d\/accel" failed: it was redirected to "\/forged"/ ],
	[ 'acceldoc', 'X-Accel-Redirect with a valid document',
		qr/refresh from "\/_d\/acceldoc" failed: it was redirected/ ],
	[ 'l500', 'listener 500 intercepted into an error_page',
		qr/refresh from "\/_d\/l500" failed: status 500/ ],
	[ 'l500plain', 'listener 500 passed as is',
		qr/refresh from "\/_d\/l500plain" failed: status 500/ ],
	[ 'short', 'listener body cut short',
		qr/refresh from "\/_d\/short" failed: the listener's answer ended/ ],
	[ 'stall', 'listener body stalled',
		qr/refresh from "\/_d\/stall" failed: the listener timed out/ ],
);

for my $c (@FAILED) {
	my ($loc, $name, $log) = @$c;

	my ($first, $second) = keepalive("POST /$loc/$ADMIN", 'GET /ping');

	like($first->{raw}, qr/\AHTTP\/1\.1 503 /,
		"$name: the 503 comes first, nothing before it");
	is(deny_of($first), 'discovery_unavailable',
		"$name: 503 discovery_unavailable in JSON");
	like($second->{raw} // '', qr/\AHTTP\/1\.1 200 [^\r]*\r\n.*\r\n\r\npong\z/s,
		"$name: the next request on the connection parses");
	ok($t->wait_for(sub { scalar $t->log_lines('error.log', $log) }, 5),
		"$name: the error log names the failure");
}

unlike($t->read_file('error.log'), qr/0 bytes exceed max_size/,
	'no "0 bytes exceed max_size" for a failure that is not a size');

# the same over HTTP/2: two requests on one connection

for my $loc (qw/ down accel short /) {
	my $r = h2("/$loc/$ADMIN", "/$loc/43/engine/flush_cache");

	is(join(' ', $r->{exit}, $r->{codes}), '0 503 503',
		"http2 $loc: two 503s on one connection");
	ok($r->{exact}, "http2 $loc: DATA is exactly the announced bodies")
		or diag($r->{out});
	is($r->{errors}, 'discovery_unavailable discovery_unavailable',
		"http2 $loc: each body is the JSON 503");
}

# a 101 from the listener, to a client that asked for an upgrade: for a
# refresh and on the discovery plane, a JSON answer and no tunnel

my $UP = "Upgrade: websocket\r\nConnection: Upgrade\r\n";

for my $c ([ "POST /upgrade/$ADMIN", 503, 'discovery_unavailable',
		'refresh' ],
	[ 'GET /dp/upgrade', 502, 'discovery_invalid', 'discovery plane' ])
{
	my ($req, $status, $error, $name) = @$c;

	my $r = tunnel_try($req, 'listener');

	like($r->{raw}, qr/\AHTTP\/1\.1 $status /,
		"101, $name: $status, nothing before it");
	is(deny_of($r), $error, "101, $name: $error in JSON");
	unlike($r->{raw}, qr/TUNNEL-FROM/,
		"101, $name: no byte of the listener's stream");
	ok($r->{seen} && $r->{seen} !~ /CLIENT-TO-UPSTREAM/,
		"101, $name: no byte of the client reaches the listener")
		or diag(explain($r));
}

ok(scalar $t->log_lines('error.log',
	qr/refresh from "\/_d\/upgrade" failed: the listener answered 101/),
	'101, refresh: the error log says why');

# cut short and stalled on the discovery plane: 502 discovery_invalid,
# buffered or not, and the connection goes on

for my $c ([ 'short', 'ended' ], [ 'short-nb', 'ended' ],
	[ 'stall', 'timed out' ], [ 'stall-nb', 'timed out' ])
{
	my ($loc, $why) = @$c;

	my ($first, $second) = keepalive("GET /dp/$loc", 'GET /ping');

	like($first->{raw}, qr/\AHTTP\/1\.1 502 /, "dp $loc: 502, not a close");
	is(deny_of($first), 'discovery_invalid', "dp $loc: discovery_invalid");
	like($first->{json}{message} // '', qr/$why before the document was complete/,
		"dp $loc: the message says why");
	like($second->{raw} // '', qr/\AHTTP\/1\.1 200 .*pong\z/s,
		"dp $loc: the next request on the connection parses");
}

my $h2 = h2('/dp/short');
is(join(' ', $h2->{exit}, $h2->{codes}, $h2->{exact}, $h2->{errors}),
	'0 502 1 discovery_invalid', 'http2 dp short: 502 discovery_invalid');

# a mirror subrequest into the attempts API (404 unknown_attempt) leaves
# the discovery plane's scope in force

my ($m) = keepalive('GET /dp/mirror');
is($m->{status}, 200, 'mirror: the document passes');
is(join(' ', map { $_->{namespace} } @{$m->{json}{workers} // []}),
	'dynamo', 'mirror: the out-of-scope worker is still removed');
ok($t->wait_for(sub {
	grep { /^\/dp\/mirror 200 -$/ } $t->log_lines('rl.log', qr/^\/dp\/mirror /)
}, 5), 'mirror: no deny reason on the discovery request');

# from here on, refreshes succeed: the admin plane proper

my ($ok) = keepalive("POST /w/$ADMIN");
is(join(' ', $ok->{status}, $ok->{body}), '200 {"status":"ok"}',
	'a valid refresh: the call is forwarded');

# a worker's 101: a JSON 502, no tunnel

my $w = tunnel_try("POST /w/42/engine/upgrade", 'worker');
like($w->{raw}, qr/\AHTTP\/1\.1 502 /, 'worker 101: 502');
is($w->{headers}{'content-type'} // '', 'application/json',
	'worker 101: JSON');
is($w->{json}{error} // '', 'upgrade_refused',
	'worker 101: the body says the upgrade was refused');
unlike($w->{raw}, qr/TUNNEL-FROM/, 'worker 101: no byte of its stream');
ok($w->{seen} && $w->{seen} !~ /CLIENT-TO-UPSTREAM/,
	'worker 101: no byte of the client reaches the worker');

# a system_url naming the upstream{} group "frontend"

for my $id (43, 44, 45) {
	my $before = rogue_count('/engine/flush_cache');
	my ($r) = keepalive("POST /w/$id/engine/flush_cache");

	is(deny_of($r), 'no_system_url', "upstream group, worker $id: refused");
	is(rogue_count('/engine/flush_cache'), $before,
		"upstream group, worker $id: nothing forwarded");
}

ok(scalar $t->log_lines('error.log',
	qr/denied, no_system_url: instance "43"/),
	'upstream group: the denial is logged');

# instance ids that are not exact u64s name no worker

my ($r77) = keepalive('POST /w/77/engine/flush_cache');
is(join(' ', $r77->{status}, deny_of($r77)), '404 unknown_worker',
	'77.0, 7.7e1, "77": 404 unknown_worker');

my ($r0) = keepalive('POST /w/0/engine/flush_cache');
is(join(' ', $r0->{status}, deny_of($r0)), '404 unknown_worker',
	'-0: 404 unknown_worker');

my ($r78) = keepalive('POST /w/78/engine/flush_cache');
is($r78->{status}, 200, '78 and "78": the exact one is not ambiguous');

###############################################################################

sub deny_of {
	my ($r) = @_;
	return 'none' unless $r && ref $r->{json} eq 'HASH';
	return $r->{json}{error} // 'none';
}

# requests on one keep-alive connection, each read to its end by
# Content-Length; a response that does not parse ends the series

sub keepalive {
	my (@reqs) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
		Proto => 'tcp', Timeout => 5) or die "cannot connect: $!\n";

	my (@out, $buf);
	$buf = '';

	for my $req (@reqs) {
		my $body = $req =~ /^POST/ ? '{}' : '';
		syswrite($s, "$req HTTP/1.1\r\nHost: localhost\r\n"
			. "Content-Type: application/json\r\n"
			. 'Content-Length: ' . length($body) . "\r\n\r\n$body");

		my $r = read_response($s, \$buf, 10);
		push @out, $r;
		last unless $r->{status};
	}

	close $s;

	return @out;
}

sub read_response {
	my ($s, $buf, $secs) = @_;

	my $deadline = time() + $secs;
	my $sel = IO::Select->new($s);
	my ($head, $len);

	for (;;) {
		if (!defined $head && $$buf =~ /\r\n\r\n/) {
			($head) = $$buf =~ /\A(.*?\r\n\r\n)/s;
			($len) = $head =~ /\r\nContent-Length: (\d+)\r\n/i;
			$len //= 0;
		}

		last if defined $head && length($$buf) >= length($head) + $len;

		my $left = $deadline - time();
		last if $left <= 0 || !$sel->can_read($left);
		last unless sysread($s, $$buf, 65536, length $$buf);
	}

	my $n = defined $head ? length($head) + $len : length $$buf;
	my $raw = substr($$buf, 0, $n, '');

	return parsed($raw);
}

sub parsed {
	my ($raw) = @_;

	my $r = parse_response($raw) // { status => 0, headers => {} };
	$r->{raw} = $raw;
	$r->{json} = eval { $JS->decode($r->{body}) } if defined $r->{body};

	return $r;
}

# a request with Upgrade to a 101: read what comes back, then write to
# the would-be tunnel; "seen" is what the listener or worker read after
# its 101

sub tunnel_try {
	my ($req, $who) = @_;

	my $case = 'c' . int(rand(1e9));

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
		Proto => 'tcp', Timeout => 5) or die "cannot connect: $!\n";

	local $SIG{PIPE} = 'IGNORE';

	syswrite($s, "$req HTTP/1.1\r\nHost: localhost\r\n$UP"
		. "X-Case: $case\r\n"
		. "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");

	my $buf = '';
	my $r = read_response($s, \$buf, 5);

	syswrite($s, "CLIENT-TO-UPSTREAM\r\n\r\n");

	my $sel = IO::Select->new($s);
	my $more = '';
	my $deadline = time() + 2;

	while ((my $left = $deadline - time()) > 0) {
		last unless $sel->can_read($left);
		last unless sysread($s, $more, 65536, length $more);
	}

	close $s;

	$r->{raw} .= $buf . $more;

	my $seen = $t->wait_for(sub {
		my ($e) = grep { ($_->{event} // '') eq 'tunnel' } rogue_records();
		$e;
	}, 10);

	$r->{seen} = $seen ? "[$seen->{data}]" : undef;

	truncate("$DIR/rogue.log", 0);

	return $r;
}

sub rogue_records {
	open my $fh, '<', "$DIR/rogue.log" or return;
	return map { eval { $JS->decode($_) } // () } <$fh>;
}

sub rogue_count {
	my ($path) = @_;
	return scalar grep { ($_->{uri} // '') eq $path } rogue_records();
}

# nghttp over h2c, one connection, several URIs (POST but on the
# discovery plane): exit status, the status codes, whether the DATA
# received is exactly what the Content-Lengths announced, and the "error"
# of each JSON body

sub h2 {
	my (@uris) = @_;

	open my $b, '>', "$DIR/h2.body" or die "cannot write: $!\n";
	print $b '{}';
	close $b;

	my @cmd = ('nghttp', '-v', '-t', '20',
		$uris[0] =~ m!^/dp/! ? () : ('-d', "$DIR/h2.body"),
		map { 'http://127.0.0.1:' . port(8083) . $_ } @uris);

	my $pid = open(my $fh, '-|', @cmd) or die "cannot run nghttp: $!\n";
	push @KIDS, $pid;
	my $out = do { local $/; <$fh> } // '';
	close $fh;
	my $exit = $? >> 8;
	@KIDS = grep { $_ != $pid } @KIDS;

	my $cl = 0;
	$cl += $_ for $out =~ /recv \(stream_id=\d+\) content-length: (\d+)/g;

	my $data = 0;
	$data += $_ for $out =~ /recv DATA frame <length=(\d+)/g;

	return {
		exit => $exit,
		codes => join(' ', $out =~ /recv \(stream_id=\d+\) :status: (\d+)/g),
		exact => $cl == $data ? 1 : 0,
		errors => join(' ', $out =~ /\{"error":"([a-z_]+)"/g),
		out => $out,
	};
}

###############################################################################

# the listener and the worker: by URI, a valid document (/ok, /scoped), an
# X-Accel-Redirect (/accel, /acceldoc), a 500 (/500), a body cut short
# (/short) or stalled (/stall), a 101 (/upgrade, /engine/upgrade), and
# {"status":"ok"} for /engine/flush_cache

sub rogue {
	my ($port, $log) = @_;

	fork_server($port, 'rogue', sub { rogue_conn($_[0], $port, $log) });
}

sub rogue_record {
	my ($log, $obj) = @_;

	open my $fh, '>>', $log or return;
	syswrite($fh, JSON::PP->new->canonical->encode($obj) . "\n");
	close $fh;
}

sub rogue_conn {
	my ($c, $port, $log) = @_;

	my $sel = IO::Select->new($c);
	my $buf = '';
	my $deadline = time() + 10;

	while ($buf !~ /\r\n\r\n/) {
		my $left = $deadline - time();
		return if $left <= 0 || !$sel->can_read($left);
		return unless sysread($c, $buf, 65536, length $buf);
	}

	my ($line) = $buf =~ /\A([^\r\n]*)/;
	my ($uri) = $line =~ /^\S+ (\S+)/;
	my ($len) = $buf =~ /\r\nContent-Length: (\d+)/i;
	my ($body) = $buf =~ /\r\n\r\n(.*)\z/s;

	while (length($body) < ($len // 0)) {
		last unless $sel->can_read(5);
		last unless sysread($c, $body, 65536, length $body);
	}

	rogue_record($log, { uri => $uri, upgrade => $buf =~ /^Upgrade:/mi
		? 1 : 0 });

	my $json = "Content-Type: application/json\r\n";

	if ($uri eq '/ok' || $uri eq '/acceldoc' || $uri eq '/scoped') {
		my $doc = $uri eq '/scoped' ? scoped() : fleet($port);
		my $accel = $uri eq '/acceldoc'
			? "X-Accel-Redirect: /forged\r\n" : '';

		rogue_send($c, "HTTP/1.1 200 OK\r\n$json$accel"
			. 'Content-Length: ' . length($doc)
			. "\r\nConnection: close\r\n\r\n$doc");

	} elsif ($uri eq '/accel') {
		rogue_send($c, "HTTP/1.1 200 OK\r\nX-Accel-Redirect: /forged\r\n"
			. "Content-Length: 0\r\nConnection: close\r\n\r\n");

	} elsif ($uri eq '/500') {
		my $b = '{"status":"ok","forged":"500"}';
		rogue_send($c, "HTTP/1.1 500 Internal Server Error\r\n$json"
			. 'Content-Length: ' . length($b)
			. "\r\nConnection: close\r\n\r\n$b");

	} elsif ($uri eq '/short' || $uri eq '/stall') {
		rogue_send($c, "HTTP/1.1 200 OK\r\n$json"
			. "Content-Length: 4096\r\nConnection: close\r\n\r\n"
			. '{"protocol_version":1,"workers":[');

		if ($uri eq '/stall') {
			my $x = '';
			1 while $sel->can_read(10) && sysread($c, $x, 65536);
		}

	} elsif ($uri eq '/upgrade' || $uri eq '/engine/upgrade') {
		rogue_send($c, "HTTP/1.1 101 Switching Protocols\r\n"
			. "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
			. "TUNNEL-FROM-UPSTREAM\n");

		my $got = '';
		my $until = time() + 4;

		while ((my $left = $until - time()) > 0) {
			last unless $sel->can_read($left);
			last unless sysread($c, $got, 65536, length $got);
		}

		rogue_record($log, { event => 'tunnel', data => $got });

	} elsif ($uri eq '/engine/flush_cache') {
		my $b = '{"status":"ok"}';
		rogue_send($c, "HTTP/1.1 200 OK\r\n$json"
			. 'Content-Length: ' . length($b)
			. "\r\nConnection: close\r\n\r\n$b");

	} else {
		rogue_send($c, "HTTP/1.1 404 Not Found\r\n"
			. "Content-Length: 0\r\nConnection: close\r\n\r\n");
	}
}

sub rogue_send {
	my ($c, $data) = @_;

	while (length $data) {
		my $n = syswrite($c, $data);
		return unless $n;
		substr($data, 0, $n, '');
	}
}

sub entry {
	my ($id, $url, $ns, @routes) = @_;

	return '{"namespace":"' . $ns . '","component":"backend",'
		. '"endpoint":"rl","instance_id":' . $id . ','
		. '"transport":{"tcp":"127.0.0.1:9999/1/rl"},'
		. '"request_plane_url":"dyn://dynamo.backend.rl",'
		. '"system_url":"' . $url . '","model":"Qwen/Qwen3-0.6B",'
		. '"routes":[' . join(',', map { "\"$_\"" } @routes) . '],'
		. '"world_size":1}';
}

sub fleet {
	my ($port) = @_;

	my $self = "http://127.0.0.1:$port";

	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',',
			entry(42, $self, 'dynamo', 'flush_cache', 'upgrade'),
			entry(43, 'http://frontend', 'dynamo', 'flush_cache'),
			entry(44, 'http://FrontEnd/', 'dynamo', 'flush_cache'),
			entry(45, "http://frontend:$port", 'dynamo',
				'flush_cache'),
			entry('77.0', $self, 'dynamo', 'flush_cache'),
			entry('7.7e1', $self, 'dynamo', 'flush_cache'),
			entry('"77"', $self, 'dynamo', 'flush_cache'),
			entry('-0', $self, 'dynamo', 'flush_cache'),
			entry(78, $self, 'dynamo', 'flush_cache'),
			entry('"78"', $self, 'dynamo', 'flush_cache'))
		. ']}';
}

sub scoped {
	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. entry(1, 'http://127.0.0.1:1', 'dynamo', 'flush_cache') . ','
		. entry(2, 'http://127.0.0.1:1', 'other', 'flush_cache') . ']}';
}

###############################################################################
