#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The bad-input and fault cases of the reliability note (section 5), each
# test named by its case id, for the cases that no other test file asserts
# (docs/reliability.md maps every id to its test), adapted to DESIGN.md:
# the admin plane is {location}{instance_id}/engine/{route}, the deny
# reasons are DESIGN's, and a failed refresh fails closed at once (there is
# no max_stale).  Plus the regression case R1 that started the note: no
# request target, however encoded, makes a worker (or the frontend) receive
# a request line other than the canonical one, or an extra header; every
# record of every worker is checked at the end of the file.
#
# Besides the fake Dynamo, two small daemons live in this file: "chaos", a
# frontend and worker system server that misbehaves on demand (huge
# headers, an SSE stream with send timestamps, a reset after event 3, 101
# Switching Protocols, X-Accel-Redirect, a redirect to a metadata address,
# no answer at all) and records every request head byte for byte; and a
# fast keep-alive discovery listener that rotates over documents in a
# directory.  Both listen on loopback only and end with the test.
#
# Nothing here waits by sleeping: every wait is for a condition (a record,
# a log line, a process state), with a deadline.

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Path qw/ make_path /;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Math::BigInt;
use POSIX qw/ WNOHANG /;
use Socket qw/ SOL_SOCKET SO_LINGER /;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ fork_server read_until rl_conf time_limit
	vllm_routes worker /;

###############################################################################

time_limit(900);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(307);

# Under make asan, two changes to AddressSanitizer's defaults:
#
# - a quarantine of freed memory bounded to 16 MB (256 MB by default), so
#   that D14 measures whether resident memory grows, not how the
#   quarantine fills: a D14 round frees about 16 kB (measured with the
#   default quarantine), so its 1 000 warm-up rounds alone fill it, and
#   the tests before D14 free more;
# - SIGSEGV left to the kernel, so that L4's deliberate SIGSEGV kills the
#   worker process as in a normal build (ASan's handler would report it
#   and exit with code 1).  A real crash still fails the file, as an
#   "exited on signal" alert, only without ASan's stack trace.

$t->asan_options('quarantine_size_mb=16', 'thread_local_quarantine_size_kb=64',
	'handle_segv=0');

my $DIR = $t->testdir();

make_path("$DIR/fast");

$t->write_file_expand('nginx.conf', main_conf());
$t->run_fake_dynamo();
$t->run_daemon(\&chaos, port(8070), "$DIR/chaos.log");
$t->run_daemon(\&fast_listener, port(8071), "$DIR/fast");
$t->waitforsocket('127.0.0.1:' . port($_)) or die "no daemon on $_\n"
	for 8070, 8071;
$t->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;
my $JSU = JSON::PP->new->utf8->canonical->allow_bignum;

my $W = '/v1/rl/workers';

my @VLLM = vllm_routes();

# the fleet of the main server: fake workers 0..2, the chaos worker, a
# worker whose system server is down, and one with hostile routes

my $IDA = '7587888160958628117';	# fake worker 0, the vLLM routes
my $IDB = '9007199254740993';		# fake worker 1
my $IDC = '4242';			# chaos
my $IDD = '4343';			# nothing listens on its system_url
my $IDE = '4444';			# fake worker 2, hostile routes

my $LONG = 'r' . ('0123456789' x 13);	# 131 bytes, in the grammar

my @CHAOS_ROUTES = ('flush_cache', 'sse', 'rst', 'hang', 'accel', 'upgrade',
	'redirect', 'bigheader', $LONG);

my @HOSTILE = ('.', '..', 'a%2Fb', 'a b', "a\r\nb", "\x{ff41}", 'a/../b',
	'-a', 'a//b', '/a', 'a/');

my %ADVERTISED = (
	worker0 => { map { $_ => 1 } @VLLM },
	worker1 => { map { $_ => 1 } 'flush_cache', 'control/start_profile',
		'liveness_probe' },
	worker2 => { map { $_ => 1 } 'liveness_probe', 'a/b', $LONG },
	chaos => { map { $_ => 1 } @CHAOS_ROUTES },
);

my $FLEET = doc(
	worker(id => $IDA, w => 0),
	worker(id => $IDB, w => 1,
		routes => [ 'flush_cache', 'control/start_profile' ]),
	worker(id => $IDC, url => 'http://127.0.0.1:' . port(8070),
		routes => [ @CHAOS_ROUTES ]),
	worker(id => $IDD, url => 'http://127.0.0.1:' . port(8099),
		routes => [ 'flush_cache' ]),
	worker(id => $IDE, w => 2,
		routes => [ 'liveness_probe', @HOSTILE, 'a/b', $LONG ]),
);

$t->fake_set('discovery.json', $FLEET);

my $r;

my $CASE = 0;

###############################################################################

# generation plane

my $BODY = '{"model":"m","prompt":"hello"}';
my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}\z/x;

# G4: attempt ids with bytes the grammar excludes, that nginx lets through

for my $c ([ 'semicolon', 'a;b' ], [ 'comma', 'a,b' ],
	[ 'literal %0d%0a', 'a%0d%0ab' ], [ 'DEL', "a\x7fb" ],
	[ 'byte 0x80', "a\x80b" ], [ 'byte 0xff', "a\xffb" ],
	[ 'control 0x01', "a\x01b" ], [ 'equals', 'a=b' ])
{
	my ($name, $id) = @$c;

	$r = request(target => '/v1/completions', body => $BODY,
		headers => "X-Dynamo-Attempt-Id: $id\r\n");

	is(join(' ', $r->{status}, $r->{json}{type} // '-',
		$r->{log}{deny} || '-', scalar @{$r->{fwd}}),
		'400 Bad Request bad_attempt_id 0',
		"G4: attempt id with $name: 400, nothing forwarded");
}

# G5: NUL in the value, and an obs-fold continuation line: nginx refuses
# them before the module

for my $c ([ 'NUL', "X-Dynamo-Attempt-Id: ab\x00cd\r\n" ],
	[ 'obs-fold', "X-Dynamo-Attempt-Id: ab\r\n cd\r\n" ])
{
	my ($name, $h) = @$c;

	$r = request(target => '/v1/completions', body => $BODY, headers => $h,
		nolog => 1);

	ok(refused($r, 400), "G5: attempt id with $name: 400 from nginx,"
		. ' nothing forwarded') or diag(fwd_summary($r), $r->{raw});
}

# G7: the underscore variant is not a header nginx passes on

$r = request(target => '/v1/completions', body => $BODY,
	headers => "X_Dynamo_Attempt_Id: client-underscore\r\n"
		. "X_Attempt_Id: client-underscore-2\r\n");

my $minted = $r->{headers}{'x-dynamo-attempt-id'} // '';

ok($r->{status} == 200 && $minted =~ $UUID7,
	'G7: underscore variant ignored, the module mints an id');

my @front = grep { $_->{who} eq 'frontend' } @{$r->{fwd}};

ok(@front == 1 && ($front[0]{headers}{'x-request-id'} // '') eq $minted
	&& !grep({ /_/ } keys %{$front[0]{headers}}),
	'G7: upstream sees the minted id and no underscore name')
	or diag(explain(\@front));

# G8: a generation-plane target that normalises into the admin plane, or
# out of every plane, of the same server

for my $target (
	"/v1/completions/..%2F..%2Fv1/rl/workers/$IDA/engine/flush_cache",
	"/v1/completions/..%2f..%2fv1%2frl%2fworkers%2f$IDA%2fengine%2f"
		. 'flush_cache',
	"/v1/completions/%2e%2e/%2e%2e/v1/rl/workers/$IDA/engine/flush_cache")
{
	$r = request(target => $target);

	ok(denied($r, 400, 'bad_path') && $r->{log}{plane} eq 'admin',
		"G8: $target: admin plane 400 bad_path, nothing forwarded")
		or diag(fwd_summary($r), $r->{raw});
}

$r = request(target => '/v1/completions/..%2F..%2Fadmin/w1/engine/flush');

ok($r->{status} == 404 && !@{$r->{fwd}} && $r->{log}{plane} eq '',
	'G8: ..%2F..%2Fadmin: out of every plane, 404, nothing forwarded')
	or diag(fwd_summary($r), $r->{raw});

# G9: an admin-plane target that normalises into the generation plane

for my $target (
	"$W/$IDA/engine/flush_cache/../../../../../completions",
	"$W/$IDA/engine/%2e%2e/%2e%2e/%2e%2e/%2e%2e/completions",
	"$W/$IDA/engine/flush_cache/..%2f..%2f..%2f..%2f..%2fcompletions")
{
	$r = request(target => $target, body => $BODY);

	ok($r->{status} == 400 && ($r->{json}{type} // '') eq 'Bad Request'
		&& $r->{log}{plane} eq 'request'
		&& $r->{log}{deny} eq 'bad_path'
		&& !@{$r->{fwd}},
		"G9: $target: request plane 400 bad_path, nothing forwarded")
		or diag(fwd_summary($r), $r->{raw});
}

# G10: TRACE, which nginx refuses itself, on each plane

for my $target ('/v1/completions', "$W/$IDA/engine/flush_cache", $W) {
	$r = request(method => 'TRACE', target => $target, nolog => 1);

	ok(refused($r, 405), "G10: TRACE $target: 405, nothing forwarded")
		or diag(fwd_summary($r), $r->{raw});
}

# G11: a body over client_max_body_size (1k here), by length and chunked;
# a chunked body with a bad chunk size

$r = request(target => '/v1/completions', body => 'x' x 2048);
ok($r->{status} == 413 && !@{$r->{fwd}},
	'G11: Content-Length over client_max_body_size: 413, nothing forwarded')
	or diag(fwd_summary($r), $r->{raw});

$r = request(raw => chunked_request('/v1/completions',
	"800\r\n" . ('x' x 2048) . "\r\n0\r\n\r\n"));
ok($r->{status} == 413 && !@{$r->{fwd}},
	'G11: chunked body over client_max_body_size: 413, nothing forwarded')
	or diag(fwd_summary($r), $r->{raw});

$r = request(raw => chunked_request('/v1/completions',
	"zz\r\nabc\r\n0\r\n\r\n"));
ok($r->{status} == 400 && !@{$r->{fwd}},
	'G11: bad chunk size: 400, nothing forwarded')
	or diag(fwd_summary($r), $r->{raw});

# G12: framing that nginx refuses

for my $c (
	[ 'Content-Length with Transfer-Encoding', 400,
		"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
		"2\r\n{}\r\n0\r\n\r\n", '1.1' ],
	[ 'Transfer-Encoding: xchunked', 501,
		"Transfer-Encoding: xchunked\r\n", "2\r\n{}\r\n0\r\n\r\n",
		'1.1' ],
	[ 'Transfer-Encoding: chunked, identity', 501,
		"Transfer-Encoding: chunked, identity\r\n",
		"2\r\n{}\r\n0\r\n\r\n", '1.1' ],
	[ 'Transfer-Encoding on HTTP/1.0', 400,
		"Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n",
		'1.0' ],
	[ 'two Content-Length values', 400,
		"Content-Length: 2\r\nContent-Length: 3\r\n", '{}x', '1.1' ],
	[ 'Content-Length: -1', 400, "Content-Length: -1\r\n", '{}', '1.1' ])
{
	my ($name, $status, $h, $body, $v) = @$c;

	for my $target ('/v1/completions', "$W/$IDC/engine/flush_cache") {
		$r = request(nolog => 1, raw => "POST $target HTTP/$v\r\n"
			. "Host: localhost\r\nConnection: close\r\n"
			. "Content-Type: application/json\r\n$h\r\n$body");

		ok(refused($r, $status), "G12: $name, $target: $status from"
			. ' nginx, nothing forwarded')
			or diag(fwd_summary($r), $r->{raw});
	}
}

# G14: the frontend accepts and never answers: 504 at proxy_read_timeout,
# and the upstream connection is closed

$r = request(target => '/v1/completions', body => $BODY,
	headers => "x-fake-scenario: hang\r\n"
		. "X-Dynamo-Attempt-Id: g14-hang\r\n");

is(join(' ', $r->{status}, $r->{json}{type} // '-', $r->{log}{outcome}),
	'504 Gateway Timeout failed', 'G14: no headers from the frontend: 504');

ok($t->wait_for(sub { grep { ($_->{event} // '') eq 'client_closed'
	&& ($_->{'x-request-id'} // '') eq 'g14-hang' }
	@{$t->fake_records('frontend')} }, 10),
	'G14: the upstream connection was closed');

# G15: SSE events 20 ms apart pass one by one, in order, without delay.
# The frontend sends each event only once the client has acknowledged the
# one before (through a FIFO): a gateway that held back an event would
# stall the stream, whatever the load of the machine; the added latency
# is measured from the send time each event carries

{
	my $case = 'g15-sse';
	my $fifo = "$DIR/g15.fifo";

	POSIX::mkfifo($fifo, 0600) or die "mkfifo: $!\n";
	sysopen(my $ackw, $fifo, POSIX::O_RDWR()) or die "$fifo: $!\n";

	my $sock = http(raw_req('/v1/chat/completions', case => $case,
		body => $BODY, headers => "x-chaos: sse\r\n"
			. "x-chaos-events: 50\r\nx-chaos-interval-ms: 20\r\n"
			. "x-chaos-ack: $fifo\r\n"),
		PeerAddr => '127.0.0.1:' . port(8083), start => 1);

	my ($buf, $pos, @ev) = ('', 0);
	my $sel = IO::Select->new($sock);
	my $deadline = time() + 30;

	while (time() < $deadline && $buf !~ /\r\n0\r\n\r\n\z/) {
		last unless $sel->can_read($deadline - time());
		last unless sysread($sock, $buf, 65536, length $buf);

		my $now = time();

		pos($buf) = $pos;

		while ($buf =~ /data: \{"i":(\d+),"t":([\d.]+)\}\n\n/g) {
			push @ev, [ $1, $now - $2 ];
			$pos = pos($buf);
			syswrite($ackw, "$1\n");
		}
	}

	close $sock;
	close $ackw;

	my @delays = sort { $a <=> $b } map { $_->[1] } @ev;
	my $median = @delays ? $delays[int(@delays / 2)] : 99;

	note(sprintf('G15: added latency: median %.2f ms, slowest %.2f ms',
		$median * 1000, (@delays ? $delays[-1] : 99) * 1000));

	is(join(',', map { $_->[0] } @ev), join(',', 1 .. 50),
		'G15: 50 events, in order, each one passed on before the'
		. ' frontend wrote the next');
	is(scalar(chaos_events('ack_timeout', $case)), 0,
		'G15: the frontend never waited for an event held back');
	cmp_ok($median * 1000, '<=', 5,
		'G15: median added latency within 5 ms');
	cmp_ok(scalar(grep { $_ <= 0.005 } @delays), '>=', 40,
		'G15: at least 40 of 50 events within 5 ms')
		or diag(join ' ', map { sprintf '%.1f', $_ * 1000 } @delays);
}

# G16: the frontend resets the connection after event 3, once the client
# has it: a reset discards whatever nginx has not read yet, which, on a
# slow run (valgrind), can be the events themselves

POSIX::mkfifo("$DIR/g16.fifo", 0600) or die "mkfifo: $!\n";

$r = request(port => 8083, target => '/v1/completions', body => $BODY,
	ack => "$DIR/g16.fifo", headers => "x-chaos: rst\r\n"
		. "X-Dynamo-Attempt-Id: g16-rst\r\n"
		. "x-chaos-ack: $DIR/g16.fifo\r\n");

is(join(',', $r->{body} =~ /data: \{"i":(\d+)/g), '1,2,3',
	'G16: events 1 to 3 reached the client');
ok($r->{status} == 200 && $r->{incomplete}
	&& $r->{raw} !~ /\r\n0\r\n\r\n\z/,
	'G16: the stream ends without the last chunk');
is(scalar(grep { $_->{who} eq 'chaos' } @{$r->{fwd}}), 1,
	'G16: sent to the frontend once, not retried');
ok(scalar(grep { /\[error\].*(?:reset by peer|prematurely closed)/ }
	@{$r->{err}}), 'G16: the reset is logged')
	or diag(@{$r->{err}});
is(join(' ', $r->{log}{attempt} // '', $r->{log}{outcome} // ''),
	'g16-rst failed', 'G16: the access log names the attempt, failed');

ok(scalar(grep { /\[error\].*g16-rst/ } @{$r->{err}}),
	'G16: the error-log line names the attempt id');

# G17: a client that goes away mid-stream: the upstream connection is
# closed at once, the attempt is canceled, no descriptor is left behind

{
	my @pids = $t->worker_pids();

	g17_cycle('g17-warm');

	my $fd0 = fds(@pids);
	my @lat;

	push @lat, g17_cycle("g17-$_") for 1 .. 10;

	# the stream would last 10 s: a close within 2 s is the client's; the
	# median says how quickly, without the machine's stalls

	my @sorted = sort { $a <=> $b } map { $_ // 99 } @lat;

	is(scalar(grep { defined && $_ < 2 } @lat), 10,
		'G17: upstream closed after the client went away, 10 times'
		. ' of 10')
		or diag(join ' ', map { defined ? sprintf('%.3f', $_) : 'none' }
			@lat);
	note(sprintf('G17: client close to upstream close: median %.1f ms,'
		. ' slowest %.1f ms', $sorted[4] * 1000, $sorted[-1] * 1000));

	cmp_ok($sorted[4] * 1000, '<', 100,
		'G17: median time to the upstream close under 100 ms')
		or diag(join ' ', map { sprintf('%.3f', $_) } @sorted);

	# the header went out before: nginx logs its status, not 499; the
	# outcome says what happened

	is(join(' ', map { my $c = "g17-$_"; my $l = $t->wait_for(sub {
		(grep { $_->{case} eq $c } access_log())[0] }, 5) // {};
		($l->{status} // '-') . '/' . ($l->{outcome} // '-') } 1 .. 10),
		join(' ', ('200/canceled') x 10),
		'G17: logged with the outcome canceled, each');

	ok($t->wait_for(sub { fds(@pids) <= $fd0 }, 5),
		'G17: no descriptor growth after 10 aborted streams')
		or diag('fds ' . fds(@pids) . " > $fd0");
}

# G18: the frontend redirects into the admin plane of the same server

$r = request(port => 8083, target => '/v1/completions', body => $BODY,
	headers => "x-chaos: accel\r\n"
		. "x-chaos-target: $W/$IDA/engine/flush_cache\r\n");

is(join(' ', $r->{status}, $r->{body}), '200 {"upstream":"accel"}',
	'G18: X-Accel-Redirect into the admin plane not followed');
is(fwd_summary($r), 'chaos /v1/completions',
	'G18: no worker saw a request');
ok(!grep({ /^x-accel-/ } keys %{$r->{headers}}),
	'G18: no X-Accel-* header reaches the client');

# G19: absolute form with a hostile host: the configured frontend, the
# configured Host

$r = request(raw => "POST http://evil.example/v1/completions HTTP/1.1\r\n"
	. "Host: evil.example\r\nConnection: close\r\nX-Case: %CASE%\r\n"
	. "Content-Type: application/json\r\n"
	. 'Content-Length: ' . length($BODY) . "\r\n\r\n$BODY");

@front = grep { $_->{who} eq 'frontend' } @{$r->{fwd}};

is(join(' ', $r->{status}, scalar @front,
	$front[0] ? $front[0]{headers}{host} : '-'), '200 1 frontend',
	'G19: absolute form to the configured frontend, Host not evil.example');

# G20: a frontend header larger than proxy_buffer_size

$r = request(port => 8083, target => '/v1/completions', body => $BODY,
	headers => "x-chaos: bigheader\r\n");

is(join(' ', $r->{status}, $r->{json}{type} // '-', $r->{log}{outcome}),
	'502 Bad Gateway failed', 'G20: too big header: 502 in the flat shape');
ok(!exists $r->{headers}{'x-big'} && $r->{raw} !~ /bbbbbbbb/,
	'G20: no part of the upstream header sent');
ok(scalar(grep { /\[error\].*upstream sent too big header/ } @{$r->{err}}),
	'G20: logged');

###############################################################################

# discovery plane

# a document-level failure: 502 discovery_invalid on the discovery plane,
# 503 discovery_unavailable on the admin plane, one cause line each

sub doc_refused {
	my ($id, $name, $doc, $cause) = @_;

	$t->fake_set('discovery.json', $doc);

	my $res = request(method => 'GET', target => $W);
	my @e = grep { /\[error\]/ } @{$res->{err}};

	ok($res->{status} == 502 && ($res->{json}{error} // '') eq
		'discovery_invalid' && @e == 1 && $e[0] =~ $cause,
		"$id: $name: discovery plane 502, one error line")
		or diag($res->{status}, ' ', $res->{body}, @{$res->{err}});

	$res = request(target => "$W/$IDA/engine/flush_cache");
	@e = grep { /\[error\]/ } @{$res->{err}};

	# the cause at error, the denial at warn (dynamo_rl_log_level)

	ok(denied($res, 503, 'discovery_unavailable') && @e == 1
		&& grep({ $_ =~ $cause } @e) == 1
		&& grep({ /\[warn\].*denied, discovery_unavailable/ }
			@{$res->{err}}) == 1,
		"$id: $name: admin 503 discovery_unavailable at once, nothing"
		. ' forwarded') or diag(fwd_summary($res), $res->{raw},
			@{$res->{err}});
}

my $INVALID = qr/discovery document .*is invalid/;

# D2: protocol_version values the other tests do not try

for my $v ('1e400', '18446744073709551617', '-1', '01', '0x1', '[1]') {
	doc_refused('D2', "protocol_version $v",
		'{"protocol_version":' . $v . ',"namespace":"dynamo","workers":'
		. '[' . $JSU->encode(worker(id => $IDA, w => 0)) . ']}',
		$INVALID);
}

# D3: a byte-order mark, a raw NUL, \u0000 in strings

doc_refused('D3', 'UTF-8 BOM', "\xef\xbb\xbf$FLEET", $INVALID);
doc_refused('D3', 'raw NUL between tokens',
	substr($FLEET, 0, 20) . "\x00" . substr($FLEET, 20), $INVALID);
(my $nul = $FLEET) =~ s/"Qwen\/Qwen3-0.6B"/"Qwen\x00"/;
doc_refused('D3', 'raw NUL in a string', $nul, $INVALID);
($nul = $FLEET) =~ s/"Qwen\/Qwen3-0.6B"/"Qwen\\u0000"/;
doc_refused('D3', '\u0000 in a string', $nul, $INVALID);
my $ns = '"namespace":"dyn\\u0000amo","workers"';
($nul = $FLEET) =~ s/"namespace":"dynamo","workers"/$ns/;
doc_refused('D3', '\u0000 in the top-level namespace', $nul, $INVALID);

# D5: 100 000 nested arrays: refused quickly, no crash

for my $c ([ 'top level', '[' x 100000 ],
	[ 'inside workers',
		'{"protocol_version":1,"workers":[' . ('[' x 100000) ])
{
	my ($name, $doc) = @$c;

	$t->fake_set('discovery.json', $doc);

	my @pids = $t->worker_pids();

	for my $plane ('discovery', 'admin') {
		my $cpu0 = cpu(@pids);
		my $t0 = time();

		$r = $plane eq 'discovery'
			? request(method => 'GET', target => $W)
			: request(target => "$W/$IDA/engine/flush_cache");

		my $took = time() - $t0;
		my $used = cpu(@pids) - $cpu0;

		note(sprintf("D5: $name, $plane plane: %.0f ms of worker CPU,"
			. ' %.0f ms', $used * 1000, $took * 1000));

		ok(($plane eq 'discovery' ? $r->{status} == 502
			: denied($r, 503, 'discovery_unavailable'))
			&& $used < 0.05 + 1e-9 && $took < 5,
			"D5: 100 000 nested [ $name, $plane plane: refused,"
			. ' under 50 ms of CPU')
			or diag($r->{status}, ' ', $r->{body});
	}

	is(join(' ', $t->worker_pids()), join(' ', @pids),
		"D5: $name: the same worker processes, none crashed");
}

# D6: a document of 8 MiB, twice the default max_size: refused before it
# is parsed, and the worker processes do not keep the memory

{
	my $big = $FLEET . (' ' x (8 * 1024 * 1024));

	$t->fake_set('discovery.json', $big);

	my @pids = $t->worker_pids();

	# once for warm-up of the buffers nginx itself keeps

	request(method => 'GET', target => $W);

	my $rss0 = rss_kb(@pids);

	$r = request(method => 'GET', target => $W);

	ok($r->{status} == 502 && ($r->{json}{error} // '') eq
		'discovery_invalid', 'D6: 8 MiB: discovery plane 502');

	$r = request(target => "$W/$IDA/engine/flush_cache");

	ok(denied($r, 503, 'discovery_unavailable')
		&& grep({ /exceed max_size/ } @{$r->{err}}),
		'D6: 8 MiB: admin 503, max_size logged')
		or diag(@{$r->{err}});

	my $grow = rss_kb(@pids) - $rss0;

	note("D6: worker RSS +$grow kB");

	cmp_ok($grow, '<', 1024, 'D6: worker RSS unchanged');
}

$t->fake_set('discovery.json', $FLEET);

# D8: routes outside the grammar are dropped, the worker's other routes
# stay usable, and no encoding reaches a dropped one

$r = request(target => "$W/$IDE/engine/liveness_probe");

is(join(' ', $r->{status}, fwd_summary($r)),
	'200 worker2 /engine/liveness_probe',
	'D8: the worker with hostile routes stays usable');
is(scalar(grep { /\[warn\].*advertises 11 route\(s\) outside the route/ }
	@{$r->{err}}), 1, 'D8: 11 hostile routes, logged once')
	or diag(@{$r->{err}});

for my $route ('a/b', $LONG) {
	$r = request(target => "$W/$IDE/engine/$route");

	is(join(' ', $r->{log}{deny} || '-', fwd_summary($r)),
		"- worker2 /engine/$route",
		'D8: ' . substr($route, 0, 12) . ': in the grammar, allowed'
		. ' (DESIGN: "/" separates segments, no length limit)');
}

for my $target ('.', '%2e', '..', '%2e%2e', 'a%2Fb', 'a%252Fb', 'a%20b',
	'a%0d%0ab', '%ef%bd%81', 'a/../b', 'a/%2e%2e/b', '-a', 'a//b', '/a',
	'a/', '%2Fa')
{
	$r = request(target => "$W/$IDE/engine/$target");

	ok($r->{status} >= 400 && !@{$r->{fwd}},
		"D8: $target: refused, nothing forwarded")
		or diag(fwd_summary($r), $r->{raw});
}

# D9: system_url values the other tests do not try; the forms DESIGN
# accepts (a name without a port, bracketed IPv6, https) are allowed

my $P99 = port(8099);

$t->fake_set('discovery.json', doc(
	worker(id => $IDA, w => 0),
	worker(id => 5001, url => 'file:///etc'),
	worker(id => 5002, url => 'http://127.0.0.1:' . port(8091) . '#f'),
	worker(id => 5003, url => 'http://127.0.0.1:0'),
	worker(id => 5004, url => 'http://127.0.0.1:65536'),
	worker(id => 5005, url => 'http://127.0.0.1:' . port(8091) . '/?q'),
	worker(id => 5006, url => 'http://127.0.0.1:' . port(8091) . ' '),
	worker(id => 5007, url => 'http://127.0.0.1:' . port(8091)
		. "\r\nX-Injected: 1"),
	worker(id => 5008, url => 'http://a@10.0.0.1:1'),
	worker(id => 5009, url => 'http://127.0.0.1:' . port(8091) . '@evil'),
	worker(id => 5011, url => 'http://hostworker'),
	worker(id => 5012, url => "http://[::1]:$P99"),
	worker(id => 5013, url => "https://127.0.0.1:$P99"),
	worker(id => 5014, url => 'http:///engine'),
	worker(id => 5015, url => 'http://[::1%25lo]:1'),
));

for my $id (5001 .. 5009, 5014, 5015) {
	$r = request(target => "$W/$id/engine/flush_cache");

	ok(denied($r, 503, 'no_system_url'),
		"D9: worker $id: 503 no_system_url, nothing forwarded")
		or diag(fwd_summary($r), $r->{raw});
}

# a host name that is an upstream{} group's (issue 12): refused, as
# proxy_pass would send the call to that group without a resolver

$r = request(target => "$W/5011/engine/flush_cache");

ok(denied($r, 503, 'no_system_url'),
	'D9: a host name that names an upstream{} group: 503 no_system_url,'
	. ' nothing forwarded') or diag(fwd_summary($r), $r->{raw});

for my $c ([ 5012, "http://[::1]:$P99" ], [ 5013, "https://127.0.0.1:$P99" ]) {
	$r = request(target => "$W/$c->[0]/engine/flush_cache");

	is(join(' ', $r->{status}, $r->{log}{deny} || '-',
		$r->{log}{system_url}, scalar @{$r->{fwd}}), "502 - $c->[1] 0",
		"D9: $c->[1]: allowed by DESIGN (nothing listens: 502)");
}

$t->fake_set('discovery.json', $FLEET);

# D10: the listener is unreachable: the discovery plane answers 502 with
# a reason (the admin side is in dynamo_rl_admin.t)

$r = request(port => 8084, method => 'GET', target => $W);

is(join(' ', $r->{status}, $r->{json}{error} // '-', $r->{log}{deny} || '-'),
	'502 discovery_invalid discovery_invalid',
	'D10: listener unreachable: discovery plane 502 with a reason');

$r = request(port => 8084, target => "$W/$IDA/engine/flush_cache");

ok(denied($r, 503, 'discovery_unavailable'),
	'D10: listener unreachable: admin 503 at once (no max_stale)');

# D11: a document larger than the zone could hold: nginx -t sizes the zone
# for max_size (here 16k in a 96k zone), so it is refused as over
# max_size, an error in the log and no alert, and the older snapshot is
# not used either (fail closed)

{
	my $m = Test::DynamoRL->new();

	$m->write_file_expand('nginx.conf', small_zone_conf());
	$m->run();

	my $small = doc(worker(id => $IDA, w => 0));
	my $big = doc(map { worker(id => 9000 + $_, w => 0) } 1 .. 120);

	$t->fake_set('discovery.json', $small);

	my $res = request(port => 8088, target => "$W/$IDA/engine/flush_cache",
		nolog => 1);

	is(join(' ', $res->{status}, fwd_summary($res)),
		'200 worker0 /engine/flush_cache',
		'D11: small document stored');

	$t->fake_set('discovery.json', $big);

	cmp_ok(length $big, '>', 32768,
		'D11: the big document exceeds max_size and the zone');

	my $off = -s $m->testdir() . '/error.log';

	$res = request(port => 8088, target => "$W/9001/engine/flush_cache",
		nolog => 1);

	is(join(' ', $res->{status}, $res->{json}{error} // '-',
		scalar @{$res->{fwd}}), '503 discovery_unavailable 0',
		'D11: big document: admin 503 discovery_unavailable');

	my @lines = grep { !/\[debug\]/ } do {
		open my $fh, '<', $m->testdir() . '/error.log';
		seek($fh, $off, 0);
		<$fh>;
	};

	is(scalar(grep { /\[error\].*discovery document from "\/_rl_discovery"/
		&& / \d+ bytes exceed max_size 16384/ } @lines), 1,
		'D11: one error line naming max_size') or diag(@lines);

	$res = request(port => 8088, target => "$W/$IDA/engine/flush_cache",
		nolog => 1);

	is(join(' ', $res->{status}, $res->{json}{error} // '-',
		scalar @{$res->{fwd}}), '503 discovery_unavailable 0',
		'D11: the older snapshot is not used (fail closed)');

	$res = request(port => 8088, method => 'GET', target => $W,
		nolog => 1);

	ok($res->{status} == 502 || $res->{status} == 200,
		'D11: big document: the discovery plane answers')
		or diag($res->{raw});

	$t->fake_set('discovery.json', $small);

	$res = request(port => 8088, target => "$W/$IDA/engine/flush_cache",
		nolog => 1);

	is($res->{status}, 200, 'D11: a document that fits is stored again');

	$m->stop();

	is(join('', $m->log_lines('error.log',
		qr/\[(?:alert|emerg)\]|exited on signal/)), '',
		'D11: no alert in that nginx');

	$t->fake_set('discovery.json', $FLEET);
}

# D12: snapshot swaps under concurrent admin calls and discovery reads, on
# two worker processes: no response mixes two generations

{
	my $a_url = 'http://127.0.0.1:' . port(8091);
	my $b_url = 'http://127.0.0.1:' . port(8092);

	my $doc_a = doc(worker(id => 777, w => 0, routes => [ 'flush_cache' ]));
	my $doc_b = doc(worker(id => 777, w => 1,
		routes => [ 'liveness_probe' ]));

	fast_set($doc_a, $doc_b);

	my $m0 = mark();
	my $f0 = fast_fetches();

	my @kids = map { client(\&d12_client, $_) } 1 .. 6;
	waitpid($_, 0) for @kids;

	my @res = map { d12_results($_) } 1 .. 6;
	my @adm = grep { $_->[0] eq 'admin' } @res;
	my @dis = grep { $_->[0] eq 'discovery' } @res;

	my %st;
	$st{$_->[2]}++ for @adm;

	is(scalar @adm, 6 * 200, 'D12: 1200 admin calls answered');
	is(join(' ', grep { $_ != 200 && $_ != 403 } sort keys %st), '',
		'D12: admin calls all 200 or 403');

	my $fetches = fast_fetches() - $f0;

	note("D12: $fetches snapshot swaps, " . ($st{200} // 0) . ' calls'
		. ' allowed, ' . ($st{403} // 0) . ' refused');

	cmp_ok($fetches, '>', 50, 'D12: the snapshot swapped meanwhile');

	my @fwd = since($m0);
	my @mixed = grep {
		!($_->{who} eq 'worker0' && $_->{uri} eq '/engine/flush_cache'
		|| $_->{who} eq 'worker1'
			&& $_->{uri} eq '/engine/liveness_probe')
	} @fwd;

	is(scalar @mixed, 0, 'D12: every call reached the worker of its route'
		. ' in the same generation') or diag(explain(\@mixed));
	is(scalar @fwd, $st{200} // 0, 'D12: one forward per allowed call');

	my %gen;

	for my $l (grep { $_->{case} =~ /^d12-/ && $_->{engine_path} }
		access_log())
	{
		my $pair = "$l->{system_url}$l->{engine_path}";
		$gen{$l->{generation}}{$pair} = 1;
	}

	my @split = grep { keys %{$gen{$_}} > 1 } keys %gen;
	my @wrong = grep { $_ ne "$a_url/engine/flush_cache"
		&& $_ ne "$b_url/engine/liveness_probe" } map { keys %$_ }
		values %gen;

	ok(!@split && !@wrong, 'D12: each generation has one target, from one'
		. ' document') or diag(explain(\%gen));

	my %want = map { $_ => 1 } $JS->encode($JSU->decode($doc_a)),
		$JS->encode($JSU->decode($doc_b));

	is(scalar(grep { !$want{$_->[3]} } @dis), 0,
		'D12: ' . scalar(@dis)
		. ' discovery reads, each one whole document')
		or diag(explain([ grep { !$want{$_->[3]} } @dis ]));
}

# D14: the same snapshot refreshed 10 000 times: resident memory, open
# descriptors and the zone's free pages stay flat.  A valid=0 refresh is
# skipped within the millisecond of the last one, so each round is a
# discovery read (validated and stored, as any refresh) and an admin call
# (which indexes the new generation, and is refused)

{
	fast_set(doc(worker(id => 888, w => 0, routes => [ 'flush_cache' ])));

	my @pids = $t->worker_pids();
	my $f0 = fast_fetches();
	my $g0 = generation(8085);
	my $sock = ka_connect(8085);
	my %st;

	my $run = sub {
		my ($n) = @_;

		for (1 .. $n) {
			for my $req ("GET $W HTTP/1.1\r\n"
				. "Host: localhost\r\nX-Case: d14\r\n\r\n",
				"POST $W/888/engine/nope HTTP/1.1\r\n"
				. "Host: localhost\r\nX-Case: d14\r\n"
				. "Content-Length: 2\r\n\r\n{}")
			{
				my $status = ka_request($sock, $req) // 0;
				$st{$status}++;
				$sock = ka_connect(8085) unless $status;
			}
		}
	};

	my $t0 = time();

	$run->(1000);

	my $rss1 = rss_kb(@pids);
	my $fd1 = fds(@pids);
	my $free1 = free_pages(8085);

	$run->(9000);

	my $took = time() - $t0;

	my $rss2 = rss_kb(@pids);
	my $fd2 = fds(@pids);
	my $free2 = free_pages(8085);

	note(sprintf('D14: %.1f s; RSS %d kB, then %d kB; descriptors %d,'
		. ' then %d; free pages %d, then %d', $took, $rss1, $rss2,
		$fd1, $fd2, $free1, $free2));

	is(join(' ', map { "$_:$st{$_}" } sort keys %st), '200:10000 403:10000',
		'D14: 10 000 discovery reads and 10 000 refused admin calls');
	cmp_ok(fast_fetches() - $f0, '>=', 10000, 'D14: 10 000 fetches');
	cmp_ok(generation(8085) - $g0, '>=', 10000,
		'D14: 10 000 snapshots stored');

	# Under valgrind, RSS is mostly memcheck's: shadow memory and its own
	# arenas, 180 MB where nginx alone has 14 MB.  It rose by about 140 kB
	# per 1 000 rounds there (also with valgrind's queue of freed blocks
	# bounded to 2 MB), while the same rounds leave it flat in the normal
	# and the ASan builds: nginx's memory is not what it would measure.

	SKIP: {
		skip 'D14: under valgrind, RSS is valgrind\'s own memory', 1
			if $ENV{TEST_NGINX_VALGRIND};

		cmp_ok($rss2 - $rss1, '<', 1024, 'D14: RSS flat after warm-up');
	}

	# no more than the upstream keep-alive caches could move

	cmp_ok($fd2 - $fd1, '<=', 2, 'D14: open descriptors flat');
	is($free2, $free1, 'D14: zone free pages flat');

	ok(!$t->log_lines('error-8085.log', qr/\[(?:alert|crit|emerg)\]/),
		'D14: no alert or crit');

	close $sock;
}

###############################################################################

# admin plane

my $CC = "$W/$IDC/engine";
my $CHAOS_HOST = '127.0.0.1:' . port(8070);

# A1: the worker sees exactly the advertised path, and Host is the
# system_url's authority

$r = request(target => "$CC/flush_cache");

my @ch = grep { $_->{who} eq 'chaos' } @{$r->{fwd}};

is(join(' ', $r->{status}, scalar @{$r->{fwd}}, $ch[0] ? $ch[0]{line} : '-'),
	'200 1 POST /engine/flush_cache HTTP/1.1',
	'A1: allowed: request line exactly /engine/flush_cache');
is($ch[0] ? $ch[0]{headers}{host} : '-', $CHAOS_HOST,
	'A1: Host is the system_url authority');

# A13: absolute form naming another host, and Host: evil.example

$r = request(raw => "POST http://evil.example$CC/flush_cache HTTP/1.1\r\n"
	. "Host: evil.example\r\nConnection: close\r\nX-Case: %CASE%\r\n"
	. "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");

@ch = grep { $_->{who} eq 'chaos' } @{$r->{fwd}};

is(join(' ', $r->{status}, scalar @{$r->{fwd}},
	$ch[0] ? "$ch[0]{line} $ch[0]{headers}{host}" : '-'),
	"200 1 POST /engine/flush_cache HTTP/1.1 $CHAOS_HOST",
	'A13: absolute form: the worker of the snapshot, Host not evil');
is($r->{log}{system_url}, "http://$CHAOS_HOST",
	'A13: $dynamo_rl_system_url from the snapshot');

# A3 to A12: targets that must be refused, with the status and reason of
# DESIGN (bad_path: any "%", "//", "." or ".." segment, backslash, query;
# then unknown_worker, route_not_advertised); nginx refuses some first

my @A = (
	[ 'A3', "$W/999/engine/flush_cache", 404, 'unknown_worker' ],
	[ 'A3', "$W/W1/engine/flush_cache", 400, 'bad_path' ],
	[ 'A3', "$W/../engine/flush_cache", 400, 'bad_path', 'request' ],
	[ 'A3', "$W/%2e%2e/engine/flush_cache", 400, 'bad_path', 'request' ],
	[ 'A3', "$W/$IDC%2F../engine/flush_cache", 400, 'bad_path' ],
	[ 'A3', "$W/..%2F$IDC/engine/flush_cache", 400, 'bad_path', 'request' ],
	[ 'A4', "$CC/flush_cache%2Fx", 400, 'bad_path' ],
	[ 'A4', "$CC/flush_cache%2fx", 400, 'bad_path' ],
	[ 'A4', "$CC/%2Fflush_cache", 400, 'bad_path' ],
	[ 'A4', "$CC/flush_cache%5cx", 400, 'bad_path' ],
	[ 'A4', "$CC/flush_cache\\x", 400, 'bad_path' ],
	[ 'A5', "$CC/../../secret", 400, 'bad_path' ],
	[ 'A5', "$CC/%2e%2e/%2e%2e/secret", 400, 'bad_path' ],
	[ 'A5', "$CC/..%2f..%2fsecret", 400, 'bad_path' ],
	[ 'A5', "$CC/./flush_cache", 400, 'bad_path' ],
	[ 'A5', "$CC/%2E/flush_cache", 400, 'bad_path' ],
	[ 'A5', "$CC/.%2e/flush_cache", 400, 'bad_path' ],
	[ 'A5', "$CC/..;/flush_cache", 400, 'bad_path' ],
	[ 'A6', "$W//$IDC//engine//flush_cache", 400, 'bad_path' ],
	[ 'A6', "/$CC/flush_cache", 400, 'bad_path' ],
	[ 'A7', "$CC/flush_cache%00", 400 ],
	[ 'A7', "$CC/flush_cache%00.json", 400 ],
	[ 'A8', "$CC/fl%c0%afush_cache", 400, 'bad_path' ],
	[ 'A8', "$CC/%ef%bc%8fflush_cache", 400, 'bad_path' ],
	[ 'A8', "$CC/flush_cache%e2%80%8b", 400, 'bad_path' ],
	[ 'A8', "$CC/fl\xc0\xafush_cache", 400, 'bad_path' ],
	[ 'A8', "$CC/flush_cache\xe2\x80\x8b", 400, 'bad_path' ],
	[ 'A9', "$CC/flush_cache;jsessionid=1", 400, 'bad_path' ],
	[ 'A9', "$CC/flush_cache;a=b/", 400, 'bad_path' ],
	[ 'A9', "$CC/flush_cache..;/x", 400, 'bad_path' ],
	[ 'A10', "$CC/flush_cache?x=1", 400, 'bad_path' ],
	[ 'A10', "$CC/flush_cache?", 400, 'bad_path' ],
	[ 'A10', "$CC/flush_cache%3Fx=1", 400, 'bad_path' ],
	[ 'A10', "$CC/flush_cache#f", 400, 'bad_path' ],
	[ 'A10', "$CC/flush_cache%23f", 400, 'bad_path' ],
	[ 'A11', "$CC/flush_cache/", 400, 'bad_path' ],
	[ 'A11', "$CC/FLUSH_CACHE", 403, 'route_not_advertised' ],
	[ 'A11', "$CC/Flush_cache", 403, 'route_not_advertised' ],
	[ 'A11', "$CC/flush", 403, 'route_not_advertised' ],
	[ 'A11', "$W/0$IDC/engine/flush_cache", 400, 'bad_path' ],
	[ 'A12', "$CC/flush_cache%0d%0aX-Injected:%201", 400, 'bad_path' ],
	[ 'A12', "$CC/flush_cache%20HTTP/1.1%0d%0aHost:%20evil%0d%0a%0d%0aGET"
		. '%20/smuggled', 400, 'bad_path' ],
	[ 'A12', "$CC/flush_cache%09", 400, 'bad_path' ],
);

for my $c (@A) {
	my ($id, $target, $status, $reason, $plane) = @$c;

	$r = request(target => $target);

	my $ok = defined $reason
		? $r->{status} == $status && $r->{log}{deny} eq $reason
			&& $r->{log}{plane} eq ($plane // 'admin')
			&& !@{$r->{fwd}}
			&& ($plane || ($r->{json}{error} // '') eq $reason)
		: refused($r, $status);

	(my $name = $target) =~ s/([^\x21-\x7e])/sprintf '\\x%02x', ord $1/ge;

	ok($ok, "$id: $name: $status " . ($reason // 'from nginx')
		. ($plane ? " on the $plane plane" : '')
		. ', nothing forwarded')
		or diag(fwd_summary($r), "\n", $r->{raw});
}

# A14: a 9 kB path, 10 000 segments; a long path within the limits costs
# no more than a short one

for my $c ([ '9 kB path', "$CC/" . ('a' x 9000) ],
	[ '10 000 segments', "$W/$IDC/engine" . ('/x' x 10000) ])
{
	$r = request(target => $c->[1], nolog => 1);

	ok(refused($r, 414),
		"A14: $c->[0]: 414 from nginx, nothing forwarded");
}

{
	my @pids = $t->worker_pids();
	my $cpu0 = cpu(@pids);

	$r = request(target => "$CC/" . join('/', ('x') x 3900), nolog => 1);

	my $used = cpu(@pids) - $cpu0;

	note(sprintf('A14: 3 900 segments: %.0f ms of worker CPU',
		$used * 1000));

	ok($r->{status} == 403 && $r->{json}{error} eq 'route_not_advertised'
		&& !@{$r->{fwd}} && $used < 0.05 + 1e-9,
		'A14: 3 900 segments within the header buffer: 403, under 50 ms'
		. ' of CPU');
}

# A16: the worker's system server is down; it accepts and never answers:
# 502 and 504, one attempt, no other worker

$r = request(target => "$W/$IDD/engine/flush_cache");

is(join(' ', $r->{status}, $r->{log}{deny} || '-', scalar @{$r->{fwd}}),
	'502 - 0', 'A16: system server down: 502, no other worker tried');

$r = request(target => "$CC/hang");

is(join(' ', $r->{status}, fwd_summary($r)), '504 chaos /engine/hang',
	'A16: no answer: 504 after proxy_read_timeout, sent once');
ok($t->wait_for(sub { chaos_events('closed', $r->{log}{case} // 'none') },
	5), 'A16: the connection to the worker was closed');

# A17: a worker answering 101 Switching Protocols, with and without an
# Upgrade from the client, and one sending X-Accel-Redirect

for my $c ([ 'a17-upgrade', "Upgrade: websocket\r\nConnection: Upgrade\r\n",
		'client asked for an upgrade' ],
	[ 'a17-unasked', '', 'unasked' ])
{
	my ($case, $h, $name) = @$c;

	my $m0 = mark();

	my $sock = http("POST $CC/upgrade HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Case: $case\r\n$h"
		. "Content-Type: application/json\r\n"
		. "Content-Length: 2\r\n\r\n{}", start => 1);

	my $t0 = time();
	my $got = read_until($sock, qr/\r\n\r\n/, 5);

	# whatever came back, the client now tries to talk through a tunnel

	local $SIG{PIPE} = 'IGNORE';
	syswrite($sock, "CLIENT-TO-WORKER\r\n\r\n");
	$got .= read_for($sock, 10);
	my $took = time() - $t0;
	close $sock;

	my $tun = $t->wait_for(sub {
		my @e = chaos_events('tunnel', $case);
		@e ? \@e : undef;
	}, 10);
	my @c = grep { $_->{who} eq 'chaos' } since($m0);

	ok(@c == 1 && !exists $c[0]{headers}{upgrade}
		&& !exists $c[0]{headers}{connection},
		"A17: 101, $name: the worker got no Upgrade or Connection"
		. ' header');
	ok($tun && ($tun->[0]{data} // '') !~ /CLIENT-TO-WORKER/,
		"A17: 101, $name: no tunnel, the client's bytes never reach the"
		. ' worker') or diag(explain($tun));
	ok($took < 8 && $got !~ /TUNNEL-FROM-WORKER/,
		"A17: 101, $name: nothing of the worker's stream reaches the"
		. ' client, connection closed') or diag($took, ' s: ', $got);

	unlike($got, qr/^HTTP\/1\.1 101 /,
		"A17: 101, $name: not passed to the client as a switch"
		. ' of protocols');
}

$r = request(target => "$CC/accel");

is(join(' ', $r->{status}, $r->{body}, fwd_summary($r)),
	'200 {"upstream":"accel"} chaos /engine/accel',
	'A17: X-Accel-Redirect from a worker not followed');

$r = request(target => "$CC/accel", headers =>
	"x-chaos-target: $W/$IDA/engine/flush_cache\r\n");

is(fwd_summary($r), 'chaos /engine/accel',
	'A17: X-Accel-Redirect into the admin plane: no other worker called');

# A18: a redirect to a metadata address is passed through without its
# Location (a worker's own URL never leaves the gateway), never followed

$r = request(target => "$CC/redirect");

is(join(' ', $r->{status}, $r->{headers}{location} // '-', fwd_summary($r)),
	'302 - chaos /engine/redirect',
	'A18: 302 passed through without its Location, not followed');

# A19: Content-Length with Transfer-Encoding on the admin plane is in G12;
# a second request pipelined after an allowed call is judged on its own

{
	my $m0 = mark();

	my $raw = http("POST $CC/flush_cache HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Case: a19-1\r\nContent-Length: 2\r\n\r\n{}"
		. "POST $CC/control/sleep HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Case: a19-2\r\nContent-Length: 2\r\n\r\n{}"
		. "POST $CC/flush_cache%0d%0aX:1 HTTP/1.1\r\n"
		. "Host: localhost\r\n"
		. "X-Case: a19-3\r\nConnection: close\r\nContent-Length: 2\r\n"
		. "\r\n{}");

	is(join(' ', $raw =~ m!HTTP/1\.1 (\d{3}) !g), '200 403 400',
		'A19: pipelined: each request judged on its own');
	is(join(' ', map { "$_->{who} $_->{line}" } since($m0)),
		'chaos POST /engine/flush_cache HTTP/1.1',
		'A19: pipelined: only the allowed one forwarded');
}

###############################################################################

# R1, the regression case of the note's section 2.2: request splitting
# through "proxy_pass" with variables.  No request target, however
# encoded, gets a worker (or the frontend) a request line other than the
# canonical one, or a header the client did not send; every target below
# names the chaos worker, which records the request heads byte for byte

my $ABS = 'http://127.0.0.1:' . port(8080);

my @R1 = (
	[ "$CC/flush_cache", 'allow' ],
	[ "$ABS$CC/flush_cache", 'allow' ],
	[ "http://evil.example$CC/flush_cache", 'allow' ],
	[ "$CC/$LONG", 'allow' ],
	[ "$CC/flush_cache%0d%0aX-Injected:%201" ],
	[ "$CC/flush_cache%0D%0AX-Injected:%201" ],
	[ "$CC/flush_cache%0aX-Injected:%201" ],
	[ "$CC/flush_cache%0dX-Injected:%201" ],
	[ "$CC/flush%0d%0a_cache" ],
	[ "$CC/%0d%0aflush_cache" ],
	[ "$CC/flush_cache%0d%0a" ],
	[ "$W/$IDC%0d%0aX-Injected:%201/engine/flush_cache" ],
	[ "$W/$IDC/engine%0d%0aX-Injected:%201/flush_cache" ],
	[ "$CC/flush_cache%20HTTP/1.1%0d%0aHost:%20evil%0d%0a%0d%0aGET"
		. '%20/smuggled' ],
	[ "$CC/flush_cache%20HTTP/1.1%0d%0aX-Injected:%201%0d%0aContent-Length:"
		. "%200%0d%0a%0d%0aPOST%20/engine/upgrade%20HTTP/1.1%0d%0a" ],
	[ "$CC/flush_cache%20" ],
	[ "$CC/flush_cache%09" ],
	[ "$CC/flush_cache%0b" ],
	[ "$CC/flush_cache%0c" ],
	[ "$CC/flush_cache%00X-Injected:%201" ],
	[ "$CC/flush_cache%3F%0d%0aX-Injected:%201" ],
	[ "$CC/flush_cache%23%0d%0aX-Injected:%201" ],
	[ "$CC/flush_cache?x=%0d%0aX-Injected:%201" ],
	[ "$CC/flush_cache?%0d%0a" ],
	[ "$CC/flush_cache#%0d%0aX-Injected:%201" ],
	[ "$CC/flush_cache%250d%250aX-Injected:%25201" ],
	[ "$CC/flush_cache%25%30%64%25%30%61X-Injected:%201" ],
	[ "$CC/flush_cache%%30d%%30a" ],
	[ "$CC/flush_cache%e5%98%8a%e5%98%8dX-Injected:%201" ],
	[ "$CC/flush_cache%c0%8d%c0%8aX-Injected:%201" ],
	[ "$CC/flush_cache%c4%8d%c4%8a" ],
	[ "$CC/flush_cache%u000d%u000a" ],
	[ "$CC/flush_cache\\r\\nX-Injected:\\x201" ],
	[ "$CC/flush_cache%5cr%5cnX-Injected:%201" ],
	[ "$CC/flush_cache/..%2f..%2f..%2f%0d%0aX-Injected:%201" ],
	[ "$CC/flush_cache%2f%2e%2e%2fupgrade" ],
	[ "$CC/sse%0d%0a%0d%0aPOST%20/engine/upgrade" ],
	[ "$ABS$CC/flush_cache%0d%0aHost:%20evil" ],
	[ "http://evil.example$CC/flush_cache%0d%0aX-Injected:%201" ],
	[ "http://evil.example%0d%0aX-Injected:%201$CC/flush_cache" ],
	[ "http://user\@evil.example$CC/flush_cache" ],
	[ "$CC/flush_cache" . ('%0d%0a' x 1300) ],
	[ "$CC/" . ('%0d%0aX-Injected:%201' x 600) ],
	[ "$CC/" . ('a' x 9000) ],
);

# raw bytes in the request line itself: nginx refuses them first

my @R1_RAW = (
	"$CC/flush_cache X-Injected: 1",
	"$CC/flush_cache\tX-Injected: 1",
	"$CC/flush_cache\rX-Injected: 1",
	"$CC/flush_cache\x00",
	"$CC/flush_cache\x0b",
	"$CC/flush_cache\x7f",
	"$CC/flush_cache\x80\x8d\x8a",
);

for my $c (@R1) {
	my ($target, $want) = @$c;

	$r = request(target => $target, nolog => 1);

	(my $name = substr($target, 0, 90)) =~ s/^\Q$ABS\E/ABS/;
	$name .= '...' if length $target > 90;

	if (($want // '') eq 'allow') {
		ok($r->{status} == 200 && @{$r->{fwd}} == 1
			&& $r->{fwd}[0]{who} eq 'chaos'
			&& $r->{fwd}[0]{line}
				=~ m!^POST /engine/(\S+) HTTP/1\.1\z!
			&& $ADVERTISED{chaos}{$1},
			"R1: $name: forwarded, the canonical request line")
			or diag(fwd_summary($r), "\n", $r->{raw});
		next;
	}

	ok($r->{status} >= 400 && !@{$r->{fwd}},
		"R1: $name: refused, nothing forwarded")
		or diag(fwd_summary($r), "\n", $r->{raw});
}

for my $target (@R1_RAW) {
	$r = request(raw => "POST $target HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Length: 2\r\n\r\n{}",
		nolog => 1);

	(my $name = $target) =~ s/([^\x21-\x7e])/sprintf '\\x%02x', ord $1/ge;

	ok($r->{status} == 400 && !@{$r->{fwd}},
		"R1: raw $name: 400, nothing forwarded")
		or diag(fwd_summary($r), "\n", $r->{raw});
}

# HTTP/0.9 and HTTP/1.0 forms of an injected target

for my $req ("GET $CC/flush_cache%0d%0aX-Injected:%201\r\n",
	"POST $CC/flush_cache%0d%0aX-Injected:%201 HTTP/1.0\r\n"
		. "Content-Length: 2\r\n\r\n{}",
	"POST $CC/flush_cache HTTP/1.0\r\nHost: evil\r\nX-Case: %CASE%\r\n"
		. "Content-Length: 2\r\n\r\n{}")
{
	$r = request(raw => $req, nolog => 1);

	my $allowed = $req =~ /^POST \S+flush_cache HTTP/;

	(my $name = $req) =~ s/\r\n.*//s;

	my $f = $r->{fwd}[0];

	ok($allowed ? @{$r->{fwd}} == 1
		&& $f->{line} eq 'POST /engine/flush_cache HTTP/1.1'
		&& $f->{headers}{host} eq $CHAOS_HOST : !@{$r->{fwd}},
		"R1: $name: " . ($allowed ? 'the canonical request line'
		: 'nothing forwarded'))
		or diag(fwd_summary($r), "\n", $r->{raw});
}

# the same on the request plane, in front of the chaos frontend: a target
# is refused, or forwarded with its path and query exactly as sent

for my $c (
	[ '/v1/completions%0d%0aX-Injected:%201' ],
	[ '/v1/completions%20HTTP/1.1%0d%0aHost:%20evil%0d%0a%0d%0aGET%20/x' ],
	[ '/v1/completions#%0d%0aX-Injected:%201' ],
	[ '/v1/completions%23%0d%0aX-Injected:%201' ],
	[ '/v1/completions%e5%98%8a%e5%98%8dX-Injected:%201' ],
	[ '/v1/completions/..%2f%0d%0aX-Injected:%201' ],
	[ 'http://evil.example/v1/completions%0d%0aX-Injected:%201' ],
	[ '/v1/completions?x=%0d%0aX-Injected:%201', 'allow' ],
	[ '/v1/completions?x=%0d%0a%0d%0aGET%20/smuggled%20HTTP/1.1', 'allow' ],
	[ 'http://evil.example/v1/completions?%0d%0a', 'allow' ])
{
	my ($target, $want) = @$c;

	$r = request(port => 8083, target => $target, body => $BODY,
		headers => "X-Dynamo-Attempt-Id: r1-" . ++$CASE . "\r\n",
		nolog => 1);

	(my $q = $target) =~ s{^http://[^/]*}{};

	ok(($want // '') eq 'allow'
		? $r->{status} == 200 && @{$r->{fwd}} == 1
			&& $r->{fwd}[0]{line} eq "POST $q HTTP/1.1"
		: $r->{status} == 400 && !@{$r->{fwd}},
		"R1: request plane $target: " . (($want // '') eq 'allow'
		? 'forwarded as sent' : '400, nothing forwarded'))
		or diag(fwd_summary($r), "\n", $r->{raw});
}

###############################################################################

# lifecycle: slowloris, reload under load, failed reloads, a new zone, a
# worker process killed during a refresh

$t->fake_set('discovery.json', $FLEET);

# L5: 200 connections sending their headers a byte at a time: each is
# closed at client_header_timeout (2s here), and other clients are served
# as quickly as before

{
	my $target = "$W/$IDA/engine/flush_cache";

	my @base = map { timed_admin(8086, $target) } 1 .. 20;

	my @slow = grep { defined } map {
		IO::Socket::INET->new(Proto => 'tcp',
			PeerAddr => '127.0.0.1:' . port(8086))
	} 1 .. 200;

	my $text = "POST $target HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Filler: " . ('z' x 100) . "\r\n";
	my $start = time();
	my %open = map { fileno($_) => [ $_, 0, undef ] } @slow;

	my $kid = client(sub {
		open my $out, '>', "$DIR/l5.lat" or die "$!\n";
		print $out map { timed_admin(8086, $target) . "\n" } 1 .. 40;
	});

	my $sel = IO::Select->new(@slow);
	my $next = $start;

	local $SIG{PIPE} = 'IGNORE';

	while (grep { !defined $_->[2] } values %open) {
		last if time() > $start + 10;

		if (time() >= $next) {
			for my $o (grep { !defined $_->[2] } values %open) {
				syswrite($o->[0], substr($text, $o->[1]++, 1));
			}

			$next += 0.5;
		}

		for my $s ($sel->can_read(0.05)) {
			my $n = sysread($s, my $buf, 4096);
			next if $n;
			$open{fileno $s}[2] = time() - $start;
			$sel->remove($s);
		}
	}

	waitpid($kid, 0);

	my @lat = sort { $a <=> $b } do {
		open my $fh, '<', "$DIR/l5.lat" or ();
		grep { /\S/ } map { chomp; $_ } <$fh>;
	};

	my @closed = grep { defined } map { $_->[2] } values %open;
	my ($first, $last) = (sort { $a <=> $b } @closed)[0, -1];

	is(scalar @closed, 200, 'L5: all 200 slow connections closed');
	note(sprintf('L5: slow connections closed after %.1f s to %.1f s',
		$first // -1, $last // -1));

	ok(defined $first && $first > 1.5 && $last < 6,
		'L5: closed at client_header_timeout');
	is(scalar(grep { $_ > 0 } @lat), 40,
		'L5: 40 other calls answered meanwhile');

	# starved clients would wait for the slow ones' timeout, 2 s

	my $med = $lat[20] // 99;
	my $base = (sort { $a <=> $b } @base)[10];

	note(sprintf('L5: other calls: median %.0f ms (%.0f ms before),'
		. ' slowest %.0f ms', $med * 1000, $base * 1000,
		($lat[-1] // 0) * 1000));

	cmp_ok($med, '<', 0.1, 'L5: their median under 100 ms');
	cmp_ok($lat[-1] // 99, '<', 1.5,
		'L5: their slowest under client_header_timeout');

	close $_ for @slow;
}

# L1: a reload with 50 SSE streams open and generation requests flowing:
# no request fails, every stream completes on its old worker process, and
# the old processes exit

{
	my @old = $t->worker_pids();

	my @streams = map { http(raw_req('/v1/chat/completions',
		case => "l1-sse-$_", body => $BODY,
		headers => "x-chaos: sse\r\nx-chaos-events: 40\r\n"
			. "x-chaos-interval-ms: 50\r\n"),
		PeerAddr => '127.0.0.1:' . port(8083), start => 1) } 1 .. 50;

	my @first = map { read_until($_, qr/data: \{/, 10) } @streams;

	is(scalar(grep { /data: \{/ } @first), 50, 'L1: 50 streams started');

	unlink "$DIR/l1.stop";

	my @kids = map { client(\&l1_client, $_) } 1 .. 4;

	$t->wait_for(sub { -s "$DIR/l1.1" && -s "$DIR/l1.4" }, 10);

	$t->write_file_expand('nginx.conf', main_conf());
	$t->reload();

	ok(!$t->reload_failed(), 'L1: reloaded');

	$t->write_file('l1.stop', '');
	waitpid($_, 0) for @kids;

	my @st = map { my $i = $_; open my $fh, '<', "$DIR/l1.$i";
		map { chomp; $_ } <$fh> } 1 .. 4;

	note('L1: ' . scalar(@st) . ' requests across the reload');

	cmp_ok(scalar @st, '>', 100, 'L1: requests across the reload');
	is(scalar(grep { $_ ne '200' } @st), 0, 'L1: none failed')
		or diag(join ' ', grep { $_ ne '200' } @st);

	my @done = map { $first[$_] . read_until($streams[$_],
		qr/\r\n0\r\n\r\n\z/, 20) } 0 .. 49;

	is(scalar(grep { /data: \[DONE\]\n\n\r\n0\r\n\r\n\z/ && (() =
		/data: \{"i"/g) == 40 } @done), 50,
		'L1: all 50 streams complete, 40 events each');

	my %served = map { $_->{pid} => 1 } grep { $_->{case} =~ /^l1-sse-/ }
		access_log();

	ok(!grep({ my $p = $_; !grep { $_ == $p } @old } keys %served),
		'L1: the streams were served by the old processes');

	ok($t->wait_for(sub { !grep { alive($_) } @old }, 12),
		'L1: old worker processes exited');

	close $_ for @streams;
}

# L2: reloads with an invalid module directive, or a discovery location
# that is not one: refused, the old configuration keeps serving

for my $c ([ 'dynamo_rl_plane outside a location', 'plane',
		qr/"dynamo_rl_plane" directive is not allowed here/ ],
	[ 'a discovery source that is not a location', 'discovery',
		qr/invalid discovery location "_rl_discovery"/ ])
{
	my ($name, $bad, $re) = @$c;

	$t->allow_log(qr/\[emerg\].*$re/);

	my @pids = $t->worker_pids();

	$t->write_file_expand('nginx.conf', main_conf(bad => $bad));
	$t->reload();

	ok($t->reload_failed() && $t->log_lines('error.log', $re),
		"L2: $name: reload refused, emerg logged");

	$r = request(target => "$W/$IDA/engine/flush_cache");

	is(join(' ', $r->{status}, fwd_summary($r), $t->worker_pids()),
		"200 worker0 /engine/flush_cache @pids",
		"L2: $name: the old configuration serves on");
}

$t->write_file_expand('nginx.conf', main_conf());

# L3: a reload that changes the zone's size: a new, empty zone; the admin
# plane fails closed until its first good refresh

{
	$r = request(port => 8086, target => "$W/$IDA/engine/flush_cache");
	is($r->{status}, 200, 'L3: valid=60s snapshot taken');

	$t->fake_set('discovery.status', '500');

	$t->write_file_expand('nginx.conf', main_conf(zone => '28m'));
	$t->reload();

	ok(!$t->reload_failed(), 'L3: reloaded with zone=rl:28m');

	$r = request(port => 8086, target => "$W/$IDA/engine/flush_cache");

	ok(denied($r, 503, 'discovery_unavailable'),
		'L3: new zone, listener failing: 503, the old snapshot is'
		. ' gone');

	my $st = eval { decode_json(parse_response(http_get('/rl/status',
		PeerAddr => '127.0.0.1:' . port(8086)))->{body}) } // {};

	is($st->{snapshot}{age_ms}, undef, 'L3: status: no snapshot');

	$t->fake_unset('discovery.status');

	$r = request(port => 8086, target => "$W/$IDA/engine/flush_cache");

	is(join(' ', $r->{status}, fwd_summary($r)),
		'200 worker0 /engine/flush_cache',
		'L3: allowed after a good refresh');
}

# L4: a worker process killed (SIGSEGV) while it leads a refresh: the
# master starts another, and the next call is right within a second

{
	$t->fake_set('discovery.delay_ms', '3000');

	my $fetches = @{$t->fake_records('listener')};
	my $off = -s "$DIR/error.log";

	my $lead = http(raw_req("$W/$IDA/engine/flush_cache", case => 'l4-lead',
		body => '{}'), start => 1);

	$t->wait_for(sub { @{$t->fake_records('listener')} > $fetches }, 10);

	my ($pid) = map {
		/\[debug\] (\d+)#\d+: \*\d+ dynamo rl discovery: refresh from/
		? $1 : ()
	} err_since($off);

	ok($pid, 'L4: the refreshing worker process') or diag(err_since($off));

	$pid //= 0;

	$t->allow_log(qr/worker process $pid exited on signal 11/);
	$t->allow_log(qr/shared memory zone "rl" was locked by $pid/);

	my @before = $t->worker_pids();

	kill 'SEGV', $pid if $pid;

	ok($t->wait_for(sub { my @p = $t->worker_pids();
		@p == 2 && !grep { $_ == $pid } @p }, 10),
		'L4: the master started another worker process');

	close $lead;

	$t->fake_unset('discovery.delay_ms');

	my $t0 = time();
	$r = request(target => "$W/$IDA/engine/flush_cache", nolog => 1);
	my $took = time() - $t0;

	# not after the dead leader's flight would time out (60 s)

	note(sprintf('L4: the next call took %.0f ms', $took * 1000));

	ok($r->{status} == 200 && fwd_summary($r) eq
		'worker0 /engine/flush_cache' && $took < 5,
		'L4: the next call allowed and forwarded at once')
		or diag($r->{raw}, @{$r->{err}});

	my @g = $t->log_lines('error.log',
		qr/worker process $pid exited on signal 11/);

	is(scalar @g, 1, 'L4: the crash is logged by the master');
}

###############################################################################

# R1, at the end: every request any worker received in this whole file,
# from the fake's records and the chaos daemon's raw heads: the request
# line is exactly "/engine/<a route that worker advertised>", and every
# header is one the client sent or nginx adds

{
	my %allowed = map { $_ => 1 } qw/ host content-length content-type
		x-case x-chaos-target /;

	# a request line, header lines, the empty line: nothing else

	my $HEAD = qr/\A[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n\z/;

	my (@bad, $n);

	for my $w (0 .. 2) {
		for my $rec (@{$t->fake_records("worker-$w")}) {
			$n++;

			my @h = keys %{$rec->{headers}};
			my @v = map { ref $_ ? @$_ : $_ }
				values %{$rec->{headers}};
			my $host = $rec->{headers}{host} // '';

			push @bad, { worker => $w, rec => $rec }
				unless $rec->{uri} =~ m!^/engine/(.+)\z!s
				&& $ADVERTISED{"worker$w"}{$1}
				&& !grep({ !$allowed{$_} } @h)
				&& !grep({ /[\r\n\x00]/ } @v)
				&& !grep({ ref $rec->{headers}{$_} } @h)
				&& ($host eq '127.0.0.1:' . port(8091 + $w)
					|| $w == 0 && $host eq 'hostworker');
		}
	}

	for my $rec (grep { !$_->{event} && $_->{line} =~ m!^\S+ /engine/! }
		chaos_records())
	{
		$n++;

		my ($line, @lines) = split /\r\n/, $rec->{raw};
		my @names = map { /^([!#\$%&'*+.^_`|~0-9A-Za-z-]+): [^\r\n]*\z/
			? lc $1 : '<bad line>' } @lines;

		push @bad, { chaos => $rec }
			unless $line =~ m!^POST /engine/(\S+) HTTP/1\.1\z!
			&& $ADVERTISED{chaos}{$1}
			&& $rec->{raw} =~ $HEAD
			&& !grep({ !$allowed{$_} } @names)
			&& @names == keys %{{ map { $_ => 1 } @names }}
			&& ($rec->{headers}{host} // '') eq $CHAOS_HOST
			&& length $rec->{body}
				== ($rec->{headers}{'content-length'} // 0);
	}

	note("R1: $n worker requests checked");

	ok($n > 100 && !@bad, 'R1: every worker request of this file: the'
		. ' canonical line of an advertised route, no extra header')
		or diag(explain(\@bad));

	my @front = grep { !$_->{event} && $_->{line} !~ m!^\S+ /engine/! }
		chaos_records();

	my @fbad = grep {
		$_->{line} !~ m!^POST\ /v1/[A-Za-z0-9/._-]+(?:\?\S*)?
			\ HTTP/1\.1\z!x
		|| $_->{raw} !~ $HEAD
		|| grep({ /^x-injected$/i } keys %{$_->{headers}})
	} @front;

	ok(@front > 50 && !@fbad, 'R1: every request of the chaos frontend:'
		. ' one request line, no injected header')
		or diag(explain(\@fbad));

	my @fake = grep { !$_->{event} } @{$t->fake_records('frontend')};

	note('R1: ' . scalar(@front) . ' requests of the chaos frontend, '
		. scalar(@fake) . ' of the fake frontend checked');

	ok(!grep({ my $h = $_->{headers}; grep({ /^x-injected$/ } keys %$h)
		|| grep({ /[\r\n]/ } map { ref $_ ? @$_ : $_ } values %$h)
		|| $_->{uri} =~ /[\r\n ]/ } @fake),
		'R1: every request of the fake frontend: no injected header or'
		. ' line');
}

###############################################################################

alarm(0);

###############################################################################

# the main configuration; "zone" changes the zone's size, "bad" breaks it
# for L2

sub main_conf {
	my (%o) = @_;

	my $zone = $o{zone} // '24m';

	my $extra = ($o{bad} // '') eq 'plane'
		? "\n    dynamo_rl_plane admin;\n" : '';

	my $source = ($o{bad} // '') eq 'discovery'
		? '_rl_discovery' : '/_rl_discovery';

	return rl_conf(<<"EOF");

%%TEST_GLOBALS%%

worker_processes 2;
worker_rlimit_core 0;
worker_shutdown_timeout 10s;
working_directory %%TESTDIR%%;

events {
    worker_connections 2048;
}

http {
    %%RL_HTTP $zone%%
$extra
    %%RL_LOG_FORMAT cases case status port pid plane deny outcome attempt system_url engine_path generation uri msec%%

    access_log %%TESTDIR%%/cases.log cases;

    %%RL_UPSTREAMS 8%%

    upstream chaos_front {
        server 127.0.0.1:8070;
        keepalive 4;
    }

    upstream fast_listener {
        server 127.0.0.1:8071;
        keepalive 4;
    }

    # D9: a system_url that names this upstream, without a port

    upstream hostworker {
        server 127.0.0.1:8091;
    }

    %%RL_PROXY_KEEPALIVE%%

    # every plane in one server: a target that normalises into another
    # plane must not get there (G8, G9), and the admin plane sits next to
    # a frontend that could redirect into it

    server {
        %%RL_LISTEN 8080%%

        location /v1/ {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            proxy_buffering off;
            proxy_read_timeout 2s;
            client_max_body_size 1k;
        }

        %%RL_DISCOVERY_PLANE%%

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;

            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream off;
            proxy_read_timeout 2s;
        }

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_APIS attempts status%%

        location /secret {
            return 200 "SECRET";
        }

        %%RL_NOT_FOUND error%%
    }

    # the chaos daemon as the frontend, next to an admin plane

    server {
        %%RL_LISTEN 8083%%

        location /v1/ {
            dynamo_rl_plane request;

            proxy_pass http://chaos_front;
            proxy_buffering off;
            proxy_read_timeout 5s;
        }

        %%RL_ADMIN_LOCATION /_rl_discovery valid=0%%

        %%RL_DISCOVERY_FETCH rl_listener%%

        location /secret {
            return 200 "SECRET";
        }
    }

    # the listener is down: nothing listens on 8099

    server {
        %%RL_LISTEN 8084%%

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8099;
        }

        %%RL_ADMIN_DOWN%%
    }

    # the fast listener, kept alive: swaps and many refreshes (D12, D14)

    server {
        %%RL_LISTEN 8085%%

        # 10 000 requests: no debug log for them, one connection for all

        error_log %%TESTDIR%%/error-8085.log info;
        keepalive_requests 100000;

        # the discovery plane and the status show this source's snapshot
        dynamo_rl_discovery /_rl_fast;

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_fast;
            proxy_pass http://fast_listener;
        }

        %%RL_ADMIN_LOCATION /_rl_fast valid=0%%

        location = /_rl_fast {
            internal;
            proxy_pass http://fast_listener/v1/rl/workers;
        }

        %%RL_APIS status%%
    }

    # valid=60s, and a short client_header_timeout (L3, L5)

    server {
        %%RL_LISTEN 8086%%

        client_header_timeout 2s;

        %%RL_ADMIN_LOCATION $source valid=60s%%

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_APIS status%%
    }
}

EOF
}

###############################################################################


sub doc {
	my (@workers) = @_;

	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',', map { $JSU->encode($_) } @workers) . ']}';
}

###############################################################################

# requests: raw bytes to a port; the result has the parsed response (or
# status 0), "raw", "json", the access-log entry ("log", by X-Case), the
# new non-debug error-log lines ("err"), and everything any upstream
# received meanwhile ("fwd": fake workers, chaos, fake frontend)

sub request {
	my (%o) = @_;

	my $case = $o{case} // 'c' . ++$CASE;
	my $port = port($o{port} // 8080);
	my $method = $o{method} // 'POST';
	my $body = $o{body};

	$body = '{}' if !defined $body && $method eq 'POST';

	my $mark = mark();

	my $req = $o{raw} // do {
		my $h = "$method $o{target} HTTP/1.1\r\n";
		my $more = $o{headers} // '';

		$h .= "Host: localhost\r\n" unless $more =~ /^Host:/mi;
		$h .= "Connection: close\r\nX-Case: $case\r\n$more";
		$h .= "Content-Type: application/json\r\n"
			. 'Content-Length: ' . length($body) . "\r\n"
			if defined $body;
		"$h\r\n" . ($body // '');
	};

	$req =~ s/%CASE%/$case/g;

	my $raw = $o{ack} ? acked_http($req, $port, $o{ack}, $o{timeout} // 10)
		: http($req, PeerAddr => "127.0.0.1:$port",
			timeout => $o{timeout} // 10) // '';

	my $res = parse_response($raw) // { status => 0, headers => {},
		body => '' };

	$res->{raw} = $raw;
	$res->{json} = eval { decode_json($res->{body}) };
	$res->{json} = {} unless ref $res->{json} eq 'HASH';

	$res->{log} = $o{nolog} ? {} : $t->wait_for(sub {
		(grep { $_->{case} eq $case } access_log())[0];
	}, 5) // {};

	$res->{err} = [ grep { !/\[debug\]/ } err_since($mark->{err}) ];
	$res->{fwd} = [ since($mark) ];

	return $res;
}

# the response of the chaos frontend when it sends each SSE event only
# once the client has acknowledged the one before (x-chaos-ack, a FIFO):
# events are acknowledged as they arrive

sub acked_http {
	my ($req, $port, $fifo, $timeout) = @_;

	sysopen(my $ackw, $fifo, POSIX::O_RDWR()) or die "$fifo: $!\n";

	my $s = http($req, PeerAddr => "127.0.0.1:$port", start => 1)
		or return '';

	my $sel = IO::Select->new($s);
	my $deadline = time() + Test::DynamoRL::scale($timeout);
	my ($buf, $pos) = ('', 0);

	while ((my $left = $deadline - time()) > 0) {
		last unless $sel->can_read($left);
		last unless sysread($s, $buf, 65536, length $buf);

		pos($buf) = $pos;

		while ($buf =~ /data: \{"i":(\d+)[^\n]*\n\n/g) {
			syswrite($ackw, "$1\n");
			$pos = pos($buf);
		}
	}

	close $s;
	close $ackw;

	return $buf;
}

# a point in every record stream, and what came after it

sub mark {
	return {
		err => -s "$DIR/error.log" // 0,
		chaos => scalar(my @c = chaos_records()),
		front => scalar @{$t->fake_records('frontend')},
		map { ("worker$_" => scalar @{$t->fake_records("worker-$_")}) }
			0 .. 2,
	};
}

sub since {
	my ($m) = @_;

	my @new;

	for my $w (0 .. 2) {
		my $recs = $t->fake_records("worker-$w");
		push @new, map { { %$_, who => "worker$w" } }
			@$recs[$m->{"worker$w"} .. $#$recs];
	}

	my @c = chaos_records();
	push @new, map { { %$_, who => 'chaos' } }
		grep { !$_->{event} } @c[$m->{chaos} .. $#c];

	my $f = $t->fake_records('frontend');
	push @new, map { { %$_, who => 'frontend' } }
		grep { !$_->{event} } @$f[$m->{front} .. $#$f];

	return @new;
}

sub chaos_records {
	open my $fh, '<', "$DIR/chaos.log" or return ();
	binmode $fh;
	return map { $JS->decode($_) } grep { /\S/ } <$fh>;
}

sub chaos_events {
	my ($event, $case) = @_;
	return grep { ($_->{event} // '') eq $event
		&& (!defined $case || $_->{case} eq $case) } chaos_records();
}

# the log has the request's bytes as they came: not always UTF-8; the
# entries are read once, as the log grows

my ($LOG_OFF, $LOG_PART, @LOG);

sub access_log {
	open my $fh, '<', "$DIR/cases.log" or return @LOG;
	binmode $fh;
	seek($fh, $LOG_OFF // 0, 0);

	my $new = do { local $/; <$fh> } // '';

	$LOG_OFF += length $new;
	$new = ($LOG_PART // '') . $new;
	$new =~ s/([^\n]*)\z//;
	$LOG_PART = $1;

	push @LOG, grep { defined } map { eval { $JS->decode($_) } }
		grep { /\S/ } split /\n/, $new;

	return @LOG;
}

sub err_since {
	my ($off) = @_;

	open my $fh, '<', "$DIR/error.log" or return ();
	seek($fh, $off // 0, 0);
	return <$fh>;
}

# a denial by the module: status, reason in the body and in the access
# log, nothing forwarded anywhere

sub denied {
	my ($res, $status, $reason) = @_;

	return join(' ', $res->{status}, $res->{json}{error} // '-',
		$res->{log}{deny} || '-', scalar @{$res->{fwd}})
		eq "$status $reason $reason 0";
}

# a refusal by nginx itself, before any location: its own page

sub refused {
	my ($res, $status) = @_;

	return $res->{status} == $status && !@{$res->{fwd}}
		&& $res->{body} =~ /<title>$status /;
}

sub fwd_summary {
	my ($res) = @_;
	return join(' ', map { "$_->{who} " . ($_->{uri} // $_->{line} // '') }
		@{$res->{fwd}});
}

###############################################################################

# the nginx processes (Test::DynamoRL's worker_pids()): their RSS, open
# files and CPU

sub proc_stat {
	my ($pid) = @_;

	open my $fh, '<', "/proc/$pid/stat" or return ();
	my $stat = <$fh> // return ();
	$stat =~ s/^.*\)\s+//s;
	return split ' ', $stat;
}

sub rss_kb {
	my $kb = 0;

	for my $pid (@_) {
		open my $fh, '<', "/proc/$pid/status" or next;
		while (<$fh>) {
			$kb += $1 if /^VmRSS:\s+(\d+)/;
		}
	}

	return $kb;
}

sub fds {
	my $n = 0;

	for my $pid (@_) {
		opendir(my $dh, "/proc/$pid/fd") or next;
		$n += grep { /^\d+$/ } readdir $dh;
	}

	return $n;
}

# CPU time of the processes, in seconds

sub cpu {
	my $ticks = 0;

	for my $pid (@_) {
		my @st = proc_stat($pid) or next;
		$ticks += $st[11] + $st[12];
	}

	return $ticks / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

sub alive {
	my ($pid) = @_;
	my @st = proc_stat($pid);
	return @st && $st[0] ne 'Z' && $st[0] ne 'X';
}

###############################################################################

# a request as raw bytes for http(..., start => 1) and friends

sub raw_req {
	my ($target, %o) = @_;

	my $body = $o{body};
	my $h = ($o{method} // 'POST') . " $target HTTP/1.1\r\n"
		. "Host: localhost\r\nConnection: close\r\n"
		. 'X-Case: ' . ($o{case} // 'raw') . "\r\n"
		. ($o{headers} // '');

	$h .= "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($body) . "\r\n" if defined $body;

	return "$h\r\n" . ($body // '');
}

sub chunked_request {
	my ($target, $chunks) = @_;

	return "POST $target HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nX-Case: %CASE%\r\n"
		. "Content-Type: application/json\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n$chunks";
}

# reads until $re matches, EOF, or $secs; returns what was read

# reads what arrives for $secs, or until EOF

sub read_for {
	my ($sock, $secs) = @_;
	return read_until($sock, undef, $secs);
}

# G17: an SSE stream whose client goes away after 3 events; returns the
# time from the client's close to the upstream's

sub g17_cycle {
	my ($case) = @_;

	my $sock = http(raw_req('/v1/chat/completions', case => $case,
		body => '{"stream":true}', headers => "x-chaos: sse\r\n"
			. "x-chaos-events: 500\r\nx-chaos-interval-ms: 20\r\n"),
		PeerAddr => '127.0.0.1:' . port(8083), start => 1);

	read_until($sock, qr/"i":3,/, 10);

	my $closed = time();
	close $sock;

	my $ev = $t->wait_for(sub { (chaos_events('closed', $case))[0] }, 5)
		or return undef;

	return $ev->{t} - $closed;
}

# a child process running $code; its Test::More state is never used

sub client {
	my ($code, @args) = @_;

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		alarm(120);
		eval { $code->(@args); };
		print STDERR "client: $@" if $@;
		POSIX::_exit(0);
	}

	return $pid;
}

sub d12_client {
	my ($i) = @_;

	open my $out, '>', "$DIR/d12.$i" or die "$!\n";

	my $peer = '127.0.0.1:' . port(8085);

	for my $n (1 .. 200) {
		my $route = $n % 2 ? 'flush_cache' : 'liveness_probe';
		my $res = parse_response(http(raw_req("$W/777/engine/$route",
			case => "d12-$i-$n", body => '{}'), PeerAddr => $peer));

		print $out $JS->encode([ 'admin', $route,
			$res ? $res->{status} : 0, "d12-$i-$n" ]), "\n";

		next if $n % 4;

		$res = parse_response(http(raw_req($W, method => 'GET',
			case => "d12-$i-$n-d"), PeerAddr => $peer));

		my $body = $res
			&& eval { $JS->encode($JSU->decode($res->{body})) };

		print $out $JS->encode([ 'discovery', '',
			$res ? $res->{status} : 0, $body // 'not JSON' ]), "\n";
	}
}

sub d12_results {
	my ($i) = @_;

	open my $fh, '<', "$DIR/d12.$i" or return ();
	return map { $JS->decode($_) } grep { /\S/ } <$fh>;
}

# L1: generation requests until told to stop, and a few more

sub l1_client {
	my ($i) = @_;

	open my $out, '>', "$DIR/l1.$i" or die "$!\n";
	select((select($out), $| = 1)[0]);

	my ($n, $after) = (0, 0);

	while ($n++ < 3000 && $after < 20) {
		$after++ if -e "$DIR/l1.stop";

		my $res = parse_response(http(raw_req('/v1/completions',
			case => "l1-$i-$n", body => $BODY)));

		print $out(($res ? $res->{status} : 0), "\n");
	}
}

# an admin call on its own connection; returns its duration, or -1

sub timed_admin {
	my ($port, $target) = @_;

	my $t0 = time();
	my $res = parse_response(http(raw_req($target, case => 'l5',
		body => '{}'), PeerAddr => '127.0.0.1:' . port($port)));

	return $res && $res->{status} == 200 ? time() - $t0 : -1;
}

# keep-alive requests on one connection: returns the status, or undef

sub ka_connect {
	my ($port) = @_;

	return IO::Socket::INET->new(Proto => 'tcp',
		PeerAddr => '127.0.0.1:' . port($port)) || die "connect: $!\n";
}

sub ka_request {
	my ($sock, $req) = @_;

	local $SIG{PIPE} = 'IGNORE';

	syswrite($sock, $req) or return undef;

	my $buf = '';

	until ($buf =~ /\r\n\r\n/) {
		sysread($sock, $buf, 65536, length $buf) or return undef;
	}

	my ($head) = $buf =~ /\A(.*?\r\n\r\n)/s;
	my ($status) = $head =~ m!^HTTP/1\.1 (\d{3})!;
	my ($len) = $head =~ /\r\nContent-Length: (\d+)/i;

	my $more = sub { sysread($sock, $buf, 65536, length $buf) };

	if (!defined $len) {
		until ($buf =~ /\r\n0\r\n\r\n\z/) {
			$more->() or return undef;
		}

	} else {
		while (length($buf) < length($head) + $len) {
			$more->() or return undef;
		}
	}

	return $status;
}

# the zone's free pages, from the status page: its ledger capacity is the
# records plus 32 per free page

sub free_pages {
	my ($port) = @_;

	my $s = eval { decode_json(parse_response(http_get('/rl/status',
		PeerAddr => '127.0.0.1:' . port($port)))->{body}) } // {};
	my $l = $s->{ledger} // {};

	return (($l->{capacity} // 0) - ($l->{records} // 0)) / 32;
}

sub generation {
	my ($port) = @_;

	my $s = eval { decode_json(parse_response(http_get('/rl/status',
		PeerAddr => '127.0.0.1:' . port($port)))->{body}) } // {};

	return $s->{snapshot}{generation} // 0;
}

sub small_zone_conf {
	return rl_conf(<<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 96k%%

    %%RL_PROXY_KEEPALIVE%%

    server {
        %%RL_LISTEN 8088%%

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_discovery max_size=16k;
            proxy_pass http://127.0.0.1:8082;
        }

        %%RL_ADMIN_LOCATION /_rl_discovery valid=0 max_size=16k%%

        %%RL_DISCOVERY_FETCH%%
    }
}

EOF
}

###############################################################################

# the chaos daemon: one process per connection; the mode is the route of
# an /engine/ call, else the x-chaos header; every request head is
# recorded byte for byte before anything is answered

sub chaos {
	my ($port, $log) = @_;

	fork_server($port, 'chaos', sub { chaos_conn($_[0], $port, $log) },
		backlog => 512);
}

sub chaos_record {
	my ($log, $obj) = @_;

	open my $fh, '>>', $log or return;
	binmode $fh;
	syswrite($fh, JSON::PP->new->ascii->canonical->encode($obj) . "\n");
	close $fh;
}

sub chaos_read {
	my ($c, $buf, $secs) = @_;

	return 0 unless IO::Select->new($c)->can_read($secs);

	my $n = sysread($c, $$buf, 65536, length $$buf);
	return $n ? 1 : 0;
}

sub chaos_send {
	my ($c, $data) = @_;

	my $off = 0;

	while ($off < length $data) {
		my $n = syswrite($c, $data, length($data) - $off, $off);
		return 0 unless $n;
		$off += $n;
	}

	return 1;
}

# 1 if the peer closed (or reset) within $secs; bytes that arrive are
# returned through $got

sub chaos_eof {
	my ($c, $secs, $got) = @_;

	my $sel = IO::Select->new($c);
	my $deadline = time() + $secs;

	while ((my $left = $deadline - time()) > 0) {
		next unless $sel->can_read($left);

		my $n = sysread($c, my $data, 65536);
		return 1 unless $n;

		$$got .= $data if $got;
	}

	return 0;
}

# the answers: each returns true if the connection may serve another
# request

my %CHAOS;

BEGIN {
	%CHAOS = (
		bigheader => \&chaos_bigheader,
		sse => \&chaos_sse,
		rst => \&chaos_sse,
		hang => \&chaos_hang,
		accel => \&chaos_accel,
		upgrade => \&chaos_upgrade,
		redirect => \&chaos_redirect,
	);
}

sub chaos_conn {
	my ($c, $port, $log) = @_;

	binmode $c;

	my $buf = '';

	for ( ;; ) {
		my $head;

		until (($head) = $buf =~ /\A(.*?\r?\n\r?\n)/s) {
			return if length $buf > 1024 * 1024;
			return unless chaos_read($c, \$buf, 30);
		}

		substr($buf, 0, length $head, '');

		my ($line, @lines) = split /\r?\n/, $head;
		my %h;

		for (@lines) {
			my ($n, $v) = /^([^:]*):[ \t]*(.*?)[ \t]*$/s or next;
			push @{$h{lc $n}}, $v;
		}

		my $q = {
			c => $c,
			log => $log,
			h => { map { $_ => $h{$_}[0] } keys %h },
		};

		my $body = '';
		my $cl = $q->{h}{'content-length'};

		if (defined $cl && $cl =~ /^\d+$/) {
			while (length $buf < $cl) {
				return unless chaos_read($c, \$buf, 30);
			}

			$body = substr($buf, 0, $cl, '');
		}

		my ($target) = $line =~ /^\S+ (\S+)/;
		my $path = $target // '';
		$path =~ s{^[a-z]+://[^/]*}{}i;
		$path =~ s/[?#].*//s;

		$q->{engine} = $path =~ m{^/engine/};
		$q->{mode} = $path =~ m{^/engine/(.+)\z}s ? $1
			: $q->{h}{'x-chaos'} // 'ok';
		$q->{case} = $q->{h}{'x-case'} // '';

		chaos_record($log, { port => $port, raw => $head, line => $line,
			uri => $target, body => $body, t => time(),
			mode => $q->{mode}, case => $q->{case},
			headers => $q->{h} });

		my $answer = $CHAOS{$q->{mode}} // \&chaos_ok;

		return unless $answer->($q);
		return if ($q->{h}{connection} // '') =~ /close/i;
	}
}

sub chaos_ok {
	my ($q) = @_;

	my $b = $q->{engine} ? '{"status":"ok"}'
		: '{"object":"text_completion"}';

	return chaos_send($q->{c}, "HTTP/1.1 200 OK\r\n"
		. "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($b) . "\r\n\r\n$b");
}

sub chaos_bigheader {
	my ($q) = @_;

	return chaos_send($q->{c}, "HTTP/1.1 200 OK\r\n"
		. 'X-Big: ' . ('b' x 20000) . "\r\n"
		. "Content-Type: application/json\r\n"
		. "Content-Length: 2\r\n\r\n{}");
}

sub chaos_accel {
	my ($q) = @_;

	my $to = $q->{h}{'x-chaos-target'} // '/secret';

	return chaos_send($q->{c}, "HTTP/1.1 200 OK\r\n"
		. "X-Accel-Redirect: $to\r\n"
		. "X-Accel-Limit-Rate: 1\r\n"
		. "Content-Type: application/json\r\n"
		. "Content-Length: 20\r\n\r\n"
		. '{"upstream":"accel"}');
}

sub chaos_redirect {
	my ($q) = @_;

	return chaos_send($q->{c}, "HTTP/1.1 302 Found\r\n"
		. "Location: http://169.254.169.254/latest/meta-data/\r\n"
		. "Content-Length: 0\r\n\r\n");
}

sub chaos_hang {
	my ($q) = @_;

	my $closed = chaos_eof($q->{c}, 30);

	chaos_record($q->{log}, { event => $closed ? 'closed' : 'timeout',
		case => $q->{case}, t => time() });

	return 0;
}

# 101, then watch what the peer sends through the would-be tunnel

sub chaos_upgrade {
	my ($q) = @_;

	chaos_send($q->{c}, "HTTP/1.1 101 Switching Protocols\r\n"
		. "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
		. "TUNNEL-FROM-WORKER\n");

	my $got = '';
	my $closed = chaos_eof($q->{c}, 5, \$got);

	chaos_record($q->{log}, { event => 'tunnel', case => $q->{case},
		t => time(), data => $got, closed => $closed });

	return 0;
}

# an SSE stream whose events carry their send time; "rst" resets the
# connection after event 3; with x-chaos-ack, a FIFO, event i is sent
# only once the client has acknowledged event i - 1 there, and the reset
# comes once it has acknowledged event 3

sub chaos_sse {
	my ($q) = @_;

	my ($c, $h) = ($q->{c}, $q->{h});
	my $events = $h->{'x-chaos-events'} // 50;
	my $iv = ($h->{'x-chaos-interval-ms'} // 20) / 1000;

	chaos_send($c, "HTTP/1.1 200 OK\r\n"
		. "Content-Type: text/event-stream\r\n"
		. "Cache-Control: no-cache\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n");

	my $ack;

	if (defined $h->{'x-chaos-ack'}) {
		open($ack, '<', $h->{'x-chaos-ack'}) or undef $ack;
	}

	my ($acks, $next) = ('', time());

	for my $i (1 .. $events) {
		if ($ack && $i > 1 && !chaos_acked($ack, \$acks, $i - 1)) {
			chaos_record($q->{log}, { event => 'ack_timeout',
				case => $q->{case}, t => time(), i => $i });
			return 0;
		}

		if (chaos_eof($c, $next - time())) {
			chaos_record($q->{log}, { event => 'closed',
				case => $q->{case}, t => time(),
				sent => $i - 1 });
			return 0;
		}

		my $ev = sprintf("data: {\"i\":%d,\"t\":%.6f}\n\n", $i, time());
		chaos_send($c, sprintf("%x\r\n%s\r\n", length $ev, $ev));

		$next += $iv;

		if ($q->{mode} eq 'rst' && $i == 3) {
			chaos_record($q->{log}, { event => 'ack_timeout',
				case => $q->{case}, t => time(), i => 4 })
				if $ack && !chaos_acked($ack, \$acks, 3);

			setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
			close $c;
			chaos_record($q->{log}, { event => 'rst',
				case => $q->{case}, t => time() });
			return 0;
		}
	}

	my $done = "data: [DONE]\n\n";

	return chaos_send($c, sprintf("%x\r\n%s\r\n0\r\n\r\n", length $done,
		$done));
}

# waits up to 10 s (scaled under valgrind) until $n lines were read from
# the FIFO

sub chaos_acked {
	my ($ack, $acks, $n) = @_;

	my $sel = IO::Select->new($ack);
	my $deadline = time() + Test::DynamoRL::scale(10);

	while ((() = $$acks =~ /\n/g) < $n) {
		my $left = $deadline - time();

		return 0 if $left <= 0 || !$sel->can_read($left);
		return 0 unless sysread($ack, $$acks, 4096, length $$acks);
	}

	return 1;
}

###############################################################################

# the fast listener: keep-alive, answers every request with the next of
# the documents DIR/doc.* in turn (per connection), and logs one line per
# request in DIR/fetches.log

sub fast_listener {
	my ($port, $dir) = @_;

	fork_server($port, 'fast listener', sub { fast_conn($_[0], $dir) });
}

sub fast_conn {
	my ($c, $dir) = @_;

	binmode $c;

	my ($buf, $n) = ('', 0);

	for ( ;; ) {
		until ($buf =~ s/\A.*?\r?\n\r?\n//s) {
			return unless chaos_read($c, \$buf, 60);
		}

		my @docs = sort glob("$dir/doc.*");
		my $doc = '';

		if (@docs) {
			open my $fh, '<', $docs[$n++ % @docs] or return;
			binmode $fh;
			local $/;
			$doc = <$fh>;
		}

		open my $lf, '>>', "$dir/fetches.log" or return;
		syswrite($lf, "$$\n");
		close $lf;

		chaos_send($c, "HTTP/1.1 200 OK\r\n"
			. "Content-Type: application/json\r\n"
			. 'Content-Length: ' . length($doc) . "\r\n\r\n$doc")
			or return;
	}
}

sub fast_set {
	my (@docs) = @_;

	unlink glob("$DIR/fast/doc.*");

	for my $i (0 .. $#docs) {
		open my $fh, '>', "$DIR/fast/.tmp" or die "$!\n";
		binmode $fh;
		print $fh $docs[$i];
		close $fh;
		rename("$DIR/fast/.tmp", "$DIR/fast/doc.$i") or die "$!\n";
	}
}

sub fast_fetches {
	open my $fh, '<', "$DIR/fast/fetches.log" or return 0;
	my $n = 0;
	$n++ while <$fh>;
	return $n;
}

###############################################################################
