#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for t/fake_dynamo.pl, the fake NVIDIA Dynamo used by the module
# tests: frontend, RL listener and worker system server wire formats,
# scenarios, record files, concurrency and shutdown.  No nginx involved.

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Spec;
use File::Temp qw(tempdir);
use FindBin;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $dir = tempdir('dynamo-rl-fake-XXXXXXXX', TMPDIR => 1,
	CLEANUP => !$ENV{TEST_NGINX_LEAVE});

my $fake = fork();
die "fork: $!\n" unless defined $fake;

if ($fake == 0) {
	exec($^X, File::Spec->catfile($FindBin::Bin, 'fake_dynamo.pl'),
		'--state-dir', $dir, '--quiet')
		or die "exec: $!\n";
}

$SIG{ALRM} = sub { die "timed out\n" };
alarm(60);

END {
	if ($fake && kill(0, $fake)) {
		local $?;
		kill 'TERM', $fake;
		waitpid($fake, 0);
	}
}

my $ports = wait_ports();

ok($ports, 'ports.json written');
like($ports->{frontend}, qr/^\d+$/, 'frontend port');
like($ports->{listener}, qr/^\d+$/, 'listener port');
is(scalar @{$ports->{workers}}, 3, 'three worker ports');

my $fp = $ports->{frontend};
my $lp = $ports->{listener};
my @wp = @{$ports->{workers}};

###############################################################################

# frontend: non-streamed completion, x-request-id echo, keep-alive

my $c = conn($fp);

my $r = call($c, 'POST', '/v1/completions',
	[ 'X-Request-Id' => 'rid-1 "q"' ],
	'{"model":"m","prompt":"hello there"}');

is($r->{status}, 200, 'completion status');
is($r->{headers}{'content-type'}, 'application/json', 'completion type');
is($r->{headers}{'x-request-id'}, 'rid-1 "q"', 'x-request-id echoed');
is($r->{headers}{'content-length'}, length $r->{body},
	'completion content length');

my $j = eval { decode_json($r->{body}) } // {};

is($j->{object}, 'text_completion', 'completion object');
is($j->{model}, 'm', 'completion model');
is($j->{choices}[0]{finish_reason}, 'stop', 'completion finish reason');
like($j->{choices}[0]{text}, qr/\S/, 'completion text');

# a chunked request body on the same connection

my $chunked_body = '{"messages":[{"role":"user","content":"hi"}],'
	. '"stream":false}';

$r = call($c, 'POST', '/v1/chat/completions',
	[ 'Transfer-Encoding' => 'chunked' ],
	chunk(substr($chunked_body, 0, 10)) . chunk(substr($chunked_body, 10))
	. "0\r\n\r\n");

is($r->{status}, 200, 'keep-alive chunked request status');
$j = eval { decode_json($r->{body}) } // {};
is($j->{object}, 'chat.completion', 'chat completion object');
is($j->{choices}[0]{message}{role}, 'assistant', 'chat message');
ok(!exists $r->{headers}{'x-request-id'}, 'no x-request-id generated');

$r = call($c, 'GET', '/v1/models');
$j = eval { decode_json($r->{body}) } // {};
is($j->{object}, 'list', 'models list on the same connection');

close $c;

# frontend errors

$r = call(conn($fp), 'GET', '/v1/nope', [ 'x-request-id' => 'e1' ]);
is($r->{status}, 404, 'unknown path');
is($r->{body}, '{"message":"Not Found","type":"Not Found","code":404}',
	'unknown path flat body');
is($r->{headers}{'x-request-id'}, 'e1', 'x-request-id echoed on 404');

$r = call(conn($fp), 'GET', '/v1/completions');
is($r->{status}, 405, 'wrong method');
is(flat($r), 'Method Not Allowed/405', 'wrong method flat body');

$r = call(conn($fp), 'POST', '/v1/completions', [], 'not json');
is($r->{status}, 400, 'not json');
is(flat($r), 'Bad Request/400', 'not json flat body');

$r = call(conn($fp), 'POST', '/v1/completions',
	[ 'x-fake-scenario' => 'status-529' ], '{}');
is($r->{status}, 529, 'status-529');
is(flat($r), 'Overloaded/529', 'status-529 flat body');

$r = call(conn($fp), 'POST', '/v1/chat/completions',
	[ 'x-fake-scenario' => 'status-503' ], '{"stream":true}');
is($r->{body},
	'{"message":"Service is not ready","type":"Service Unavailable",'
	. '"code":503}', 'status-503 body');

$r = call(conn($fp), 'POST', '/v1/completions',
	[ 'x-fake-scenario' => 'accel-redirect' ], '{}');
is($r->{headers}{'x-accel-redirect'}, '/secret', 'accel redirect header');
is($r->{headers}{'x-accel-limit-rate'}, '1', 'accel limit rate header');
is($r->{body}, '{"upstream":"accel"}', 'accel body');

$r = call(conn($fp), 'POST', '/v1/completions',
	[ 'x-fake-scenario' => 'no-response' ], '{}');
ok(!defined $r->{status} && $r->{raw} eq '', 'no-response closes silently');

###############################################################################

# frontend streams

$r = call(conn($fp), 'POST', '/v1/completions',
	[ 'x-request-id' => 's1' ], '{"prompt":"x","stream":true}');

is($r->{status}, 200, 'stream status');
is($r->{headers}{'content-type'}, 'text/event-stream', 'stream type');
is($r->{headers}{'transfer-encoding'}, 'chunked', 'stream chunked');
is($r->{headers}{'x-request-id'}, 's1', 'stream x-request-id');
ok($r->{complete}, 'stream terminating chunk');
is(scalar(grep { /^data: \{.*\}\n\n\z/s } @{$r->{chunks}}), 3,
	'three events, one chunk each');
is($r->{chunks}[-1], "data: [DONE]\n\n", 'stream ends with [DONE]');
$j = eval { decode_json(substr($r->{chunks}[0], 6)) } // {};
is($j->{object}, 'text_completion', 'stream event shape');

$r = call(conn($fp), 'POST', '/v1/completions',
	[ 'x-fake-scenario' => 'error-frame' ], '{"stream":true}');

ok($r->{complete}, 'error-frame terminating chunk');
is_deeply([ @{$r->{chunks}}[2, 3] ], [
	'data: {"error":{"message":"backend failed",'
		. '"type":"internal_server_error","code":500}}' . "\n\n",
	"data: [DONE]\n\n",
], 'error-frame after two events, then [DONE]');

$r = call(conn($fp), 'POST', '/v1/completions',
	[ 'x-fake-scenario' => 'abrupt' ], '{"stream":true}');

is($r->{status}, 200, 'abrupt status');
ok(!$r->{complete}, 'abrupt has no terminating chunk');
is(scalar @{$r->{chunks}}, 2, 'abrupt two events');
unlike($r->{body}, qr/\[DONE\]/, 'abrupt has no [DONE]');

$r = call(conn($fp), 'POST', '/v1/chat/completions',
	[ 'x-fake-scenario' => 'split-done' ], '{"stream":true}');

ok($r->{complete}, 'split-done terminating chunk');
is_deeply([ @{$r->{chunks}}[-2, -1] ], [ 'data: [DO', "NE]\n\n" ],
	'split-done marker in two chunks');

$r = call(conn($fp), 'POST', '/generate',
	[ 'x-fake-scenario' => 'slow', 'x-fake-events' => 2,
		'x-fake-interval-ms' => 50 ], '{"text":"x"}');

ok($r->{complete}, 'slow streams without stream:true');
is(scalar @{$r->{chunks}}, 3, 'slow event count');

# client_closed on a slow stream closed early; other connections go on

$c = conn($fp);
print $c req('POST', '/v1/completions',
	[ 'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
		'x-fake-interval-ms' => 100, 'x-request-id' => 'slow-close' ],
	'{"stream":true}');

my $first = read_until($c, qr/data: \{/);
ok($first, 'slow stream started');

my $t0 = time();
$r = call(conn($fp), 'GET', '/health');
is($r->{status}, 200, 'other connection served during a slow stream');
ok(time() - $t0 < 2, 'not blocked by the slow stream');

close $c;

ok(wait_log('frontend.log', sub {
	($_[0]{event} // '') eq 'client_closed'
		&& ($_[0]{'x-request-id'} // '') eq 'slow-close'
}), 'client_closed recorded for slow stream');

# hang: nothing is sent, the close is noticed

$c = conn($fp);
print $c req('POST', '/v1/completions',
	[ 'x-fake-scenario' => 'hang', 'x-request-id' => 'hang-1' ], '{}');

ok(wait_log('frontend.log', sub {
	!exists $_[0]{event} && ($_[0]{headers}{'x-request-id'} // '') eq 'hang-1'
}), 'hang request recorded');

ok(!IO::Select->new($c)->can_read(0.2), 'hang sends nothing');
close $c;

ok(wait_log('frontend.log', sub {
	($_[0]{event} // '') eq 'client_closed'
		&& ($_[0]{'x-request-id'} // '') eq 'hang-1'
}), 'client_closed recorded for hang');

# frontend record

ok(wait_log('frontend.log', sub {
	($_[0]{method} // '') eq 'POST'
		&& $_[0]{uri} eq '/v1/chat/completions'
		&& $_[0]{body} eq $chunked_body
		&& $_[0]{pid} =~ /^\d+$/ && $_[0]{time} > 0
}), 'frontend record with the de-chunked body');

ok(wait_log('frontend.log', sub {
	($_[0]{headers}{'x-request-id'} // '') eq 'rid-1 "q"'
		&& $_[0]{body} eq '{"model":"m","prompt":"hello there"}'
}), 'frontend record with headers and body');

###############################################################################

# RL listener

$r = call(conn($lp), 'GET', '/v1/rl/engine');
is($r->{status}, 404, 'listener unknown path');
is($r->{headers}{'content-length'}, '0', 'listener 404 content length');
is($r->{body}, '', 'listener 404 empty body');

$r = call(conn($lp), 'POST', '/v1/rl/workers', [], '{}');
is($r->{status}, 405, 'listener wrong method');
is($r->{headers}{allow}, 'GET,HEAD', 'listener 405 allow');
is($r->{body}, '', 'listener 405 empty body');

$c = conn($lp);
$r = call($c, 'HEAD', '/v1/rl/workers');
is($r->{status}, 200, 'listener head');
ok($r->{headers}{'content-length'} > 0, 'listener head content length');
$r = call($c, 'GET', '/v1/rl/workers?refresh=1');
is($r->{status}, 200, 'listener get after head, query ignored');
is($r->{headers}{'content-type'}, 'application/json', 'listener type');

my $doc = $r->{body};

like($doc, qr/^\{"protocol_version":1,"namespace":"dynamo","workers":\[/,
	'default document header');
like($doc, qr/"instance_id":18446744073709551615,/, 'u64 max exact');
like($doc, qr!"tcp":"127\.0\.0\.1:9999/ffffffffffffffff/rl"!,
	'transport hex id');
is_deeply([ $doc =~ /"instance_id":(\d+)/g ],
	[ '9007199254740993', '7587888160958628117', '18446744073709551615' ],
	'workers sorted by instance id');
my @urls = $doc =~ m!"system_url":"http://127\.0\.0\.1:(\d+)"!g;
is_deeply([ sort { $a <=> $b } @urls ], [ sort { $a <=> $b } @wp ],
	'system urls are the worker ports');

$j = eval { decode_json($doc) } // {};
is_deeply($j->{workers}[0]{routes}, [ qw/
	abort_request destroy_weights_update_group flush_cache
	get_weight_version init_weights_update_group liveness_probe
	pause_generation resume_generation update_weights_from_disk
	update_weights_from_distributed update_weights_from_tensor
/ ], 'advertised routes');
is($j->{workers}[0]{request_plane_url}, 'dyn://dynamo.backend.rl',
	'request plane url');

put('discovery.json', "not json {\x01");
$r = call(conn($lp), 'GET', '/v1/rl/workers');
is($r->{body}, "not json {\x01", 'discovery.json served verbatim');

put('discovery.status', "500\n");
$r = call(conn($lp), 'GET', '/v1/rl/workers');
is($r->{status}, 500, 'discovery.status');
is($r->{body}, "not json {\x01", 'discovery.status with discovery.json');

unlink path('discovery.json');
$r = call(conn($lp), 'GET', '/v1/rl/workers');
is($r->{body}, '{"error":"discovery_failed","message":'
	. '"etcd request failed: deadline has elapsed"}', 'discovery failed body');

unlink path('discovery.status');
put('discovery.delay_ms', '300');
$t0 = time();
$r = call(conn($lp), 'GET', '/v1/rl/workers');
ok(time() - $t0 >= 0.29 && $r->{status} == 200, 'discovery.delay_ms');
unlink path('discovery.delay_ms');

ok(wait_log('listener.log', sub {
	$_[0]{method} eq 'POST' && $_[0]{uri} eq '/v1/rl/workers'
		&& exists $_[0]{headers}{host} && $_[0]{time} > 0
}), 'listener record');

###############################################################################

# worker system servers

my $w = $wp[0];

$r = call(conn($w), 'GET', '/health');
is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8',
	'worker health type');
is($r->{body}, '{"status":"ready","uptime":{"secs":1,"nanos":0},'
	. '"endpoints":{}}', 'worker health body');

$r = call(conn($w), 'GET', '/nope');
is($r->{status}, 404, 'worker unknown path');
is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8',
	'worker unknown path type');
is($r->{body}, 'Route not found', 'worker unknown path body');

$r = call(conn($w), 'POST', '/engine/nope', [], '{}');
is($r->{status}, 404, 'worker unknown route');
is($r->{body}, '{"error":"Route not found",'
	. '"message":"Route /engine/nope not found"}', 'worker unknown route body');

$r = call(conn($w), 'POST', '/engine/liveness_probe', [], '{bad');
is($r->{status}, 400, 'worker invalid json');
is(wj($r)->{error}, 'Invalid JSON', 'worker invalid json body');

$r = call(conn($w), 'POST', '/engine/liveness_probe', [], '[1]');
is($r->{status}, 200, 'worker non-object status');
is(wj($r)->{message}, 'request body must be a JSON object',
	'worker non-object body');

$c = conn($w);

$r = call($c, 'GET', '/engine/liveness_probe');
is($r->{status}, 200, 'liveness probe');
is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8',
	'engine reply as text/plain');
is_deeply(wj($r), { status => 'ok', alive => JSON::PP::true },
	'liveness probe body');

$r = call($c, 'POST', '/engine/update_weights_from_disk', [],
	'{"model_path":"/m"}');
like(wj($r)->{message}, qr/^Worker must be paused via pause_generation\(\)/,
	'update needs a pause');

$r = call($c, 'POST', '/engine/pause_generation', [], '{"mode":"bad"}');
is(wj($r)->{message}, "Invalid mode 'bad'; expected keep|wait|abort",
	'pause bad mode');

$r = call($c, 'POST', '/engine/pause_generation', [], '');
is_deeply(wj($r), { status => 'ok', message => 'Engine paused',
	mode => 'keep', clear_cache => JSON::PP::false }, 'pause');

$r = call($c, 'POST', '/engine/update_weights_from_disk', [], '{}');
is(wj($r)->{message}, "Missing 'model_path' in body", 'update without path');

$r = call($c, 'POST', '/engine/update_weights_from_disk', [],
	'{"model_path":"/m","weight_version":"v7"}');
is_deeply(wj($r), { status => 'ok', version => 'v7' }, 'update weights');

$r = call($c, 'GET', '/engine/get_weight_version');
is(wj($r)->{version}, 'v7', 'weight version remembered');

$r = call(conn($wp[1]), 'GET', '/engine/get_weight_version');
is(wj($r)->{version}, 'initial', 'other worker keeps its version');

$r = call($c, 'POST', '/engine/resume_generation', [], '{}');
is(wj($r)->{message}, 'Engine resumed', 'resume');

$r = call($c, 'POST', '/engine/control/sleep', [], '{}');
is_deeply([ $r->{status}, wj($r)->{status} ], [ 200, 'ok' ],
	'unadvertised control/sleep callable');

$r = call($c, 'POST', '/engine/control%2Fwake_up', [], '{}');
is($r->{status}, 200, 'percent-encoded route decoded');

close $c;

put('worker-0.respond.json', '{"status":200,"body":{"success":false}}');
$r = call(conn($w), 'POST', '/engine/flush_cache', [], '{}');
is_deeply([ $r->{status}, $r->{body} ], [ 200, '{"success":false}' ],
	'respond.json override');

put('worker-0.respond.json', '{"status":500,"body":{"error":"x"}}');
$r = call(conn($w), 'POST', '/engine/nope', [], '{}');
is($r->{status}, 500, 'respond.json override status, any route');
unlink path('worker-0.respond.json');

$r = call(conn($wp[2]), 'POST', '/engine/flush_cache', [], '{}');
is(wj($r)->{message}, 'Cache flushed', 'override is per worker');

ok(wait_log('worker-0.log', sub {
	$_[0]{worker} == 0 && $_[0]{uri} eq '/nope' && $_[0]{method} eq 'GET'
}), 'worker record of a 404');

ok(wait_log('worker-0.log', sub {
	$_[0]{uri} eq '/engine/update_weights_from_disk'
		&& $_[0]{body} eq '{"model_path":"/m","weight_version":"v7"}'
}), 'worker record with body');

###############################################################################

# shutdown: SIGTERM ends the whole process group

$c = conn($fp);
print $c req('POST', '/v1/completions',
	[ 'x-fake-scenario' => 'slow', 'x-fake-events' => 1000 ], '{}');
ok(read_until($c, qr/data: \{/), 'slow stream before shutdown');

kill 'TERM', $fake;

my $deadline = time() + 10;
my $done = 0;

while (time() < $deadline) {
	$done = waitpid($fake, WNOHANG);
	last if $done;
	sleep(0.05);
}

is($done, $fake, 'fake exited on SIGTERM');
is($?, 0, 'fake exit status');

my $gone = 0;

while (time() < $deadline) {
	$gone = !kill(0, -$fake);
	last if $gone;
	sleep(0.05);
}

ok($gone, 'no process of the fake left');
ok(closed_within($c, 5), 'open stream closed');

$fake = 0;

done_testing();

###############################################################################

sub path {
	return File::Spec->catfile($dir, $_[0]);
}

sub put {
	my ($name, $data) = @_;

	open(my $fh, '>', path("$name.tmp")) or die "$name: $!\n";
	binmode $fh;
	print $fh $data;
	close $fh;

	rename(path("$name.tmp"), path($name)) or die "$name: $!\n";
}

sub wait_ports {
	my $deadline = time() + 20;

	while (time() < $deadline) {
		if (open(my $fh, '<', path('ports.json'))) {
			local $/;
			my $p = eval { decode_json(<$fh>) };
			return $p if $p;
		}

		die "fake_dynamo exited\n" if waitpid($fake, WNOHANG);
		sleep(0.05);
	}

	return undef;
}

sub wait_log {
	my ($name, $match) = @_;

	my $deadline = time() + 10;

	while (time() < $deadline) {
		if (open(my $fh, '<', path($name))) {
			while (my $line = <$fh>) {
				my $rec = eval { decode_json($line) } or next;
				return 1 if eval { $match->($rec) };
			}
		}

		sleep(0.05);
	}

	return 0;
}

sub conn {
	my ($port) = @_;

	my $s = IO::Socket::INET->new(
		Proto => 'tcp',
		PeerAddr => '127.0.0.1',
		PeerPort => $port,
	) or die "connect 127.0.0.1:$port: $@\n";

	return $s;
}

sub chunk {
	return sprintf("%x\r\n%s\r\n", length $_[0], $_[0]);
}

sub req {
	my ($method, $uri, $headers, $body) = @_;

	my @h = @{$headers // []};
	my $r = "$method $uri HTTP/1.1\r\nHost: 127.0.0.1\r\n";
	my $chunked = 0;

	while (my ($k, $v) = splice(@h, 0, 2)) {
		$r .= "$k: $v\r\n";
		$chunked = 1 if lc $k eq 'transfer-encoding';
	}

	$r .= "Content-Length: " . length($body) . "\r\n"
		if defined $body && !$chunked;

	return $r . "\r\n" . ($body // '');
}

sub call {
	my ($s, $method, $uri, $headers, $body) = @_;

	$s->syswrite(req($method, $uri, $headers, $body));

	return read_response($s, $method);
}

# reads until $re matches what was received; undef on EOF or timeout

sub read_until {
	my ($s, $re, $timeout) = @_;

	my $buf = '';
	my $sel = IO::Select->new($s);
	my $deadline = time() + ($timeout // 10);

	while (time() < $deadline) {
		next unless $sel->can_read($deadline - time());
		my $n = sysread($s, $buf, 65536, length $buf);
		return undef unless $n;
		return $buf if $buf =~ $re;
	}

	return undef;
}

sub closed_within {
	my ($s, $timeout) = @_;

	my $sel = IO::Select->new($s);
	my $deadline = time() + $timeout;

	while (time() < $deadline) {
		next unless $sel->can_read($deadline - time());
		my $n = sysread($s, my $buf, 65536);
		return 1 unless $n;
	}

	return 0;
}

sub read_response {
	my ($s, $method) = @_;

	my $r = { raw => '', chunks => [], body => '', complete => 0 };
	my $sel = IO::Select->new($s);
	my $buf = '';

	my $more = sub {
		return 0 unless $sel->can_read(10);
		my $n = sysread($s, $buf, 65536, length $buf);
		return 0 unless $n;
		$r->{raw} .= substr($buf, -$n);
		return 1;
	};

	until ($buf =~ /\r\n\r\n/) {
		return $r unless $more->();
	}

	$buf =~ s/\A(.*?)\r\n\r\n//s;
	my ($sl, @lines) = split /\r\n/, $1;

	($r->{status}) = $sl =~ m!^HTTP/1\.[01] (\d{3})!;

	for (@lines) {
		/^([^:]+):\s*(.*)$/ or next;
		$r->{headers}{lc $1} = $2;
	}

	my $h = $r->{headers};

	if ($method eq 'HEAD' || $r->{status} == 204 || $r->{status} == 304) {
		$r->{complete} = 1;

	} elsif (($h->{'transfer-encoding'} // '') =~ /chunked/i) {
		for ( ;; ) {
			until ($buf =~ /\r\n/) {
				return $r unless $more->();
			}

			$buf =~ s/\A([0-9a-fA-F]+)[^\r]*\r\n// or return $r;
			my $size = hex $1;

			if ($size == 0) {
				until ($buf =~ /\A\r\n/) {
					return $r unless $more->();
				}

				$r->{complete} = 1;
				last;
			}

			while (length $buf < $size + 2) {
				return $r unless $more->();
			}

			my $data = substr($buf, 0, $size + 2, '');
			substr($data, -2, 2, '');

			push @{$r->{chunks}}, $data;
			$r->{body} .= $data;
		}

	} elsif (defined $h->{'content-length'}) {
		while (length $buf < $h->{'content-length'}) {
			return $r unless $more->();
		}

		$r->{body} = $buf;
		$r->{complete} = 1;

	} else {
		1 while $more->();
		$r->{body} = $buf;
	}

	return $r;
}

sub flat {
	my ($r) = @_;

	my $j = eval { decode_json($r->{body}) } // {};

	return join '/', map { $_ // 'undef' } $j->{type}, $j->{code};
}

sub wj {
	my ($r) = @_;

	return eval { decode_json($r->{body}) } // {};
}

###############################################################################
