#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The request plane over HTTP/2 (h2c with prior knowledge, the only
# cleartext HTTP/2 of nginx 1.22): curl's non-streaming and streaming
# requests carry the attempt header, SSE stays unbuffered, a client id and
# its duplicate behave as over HTTP/1.1; h2load's 200 multiplexed POSTs are
# 200 distinct succeeded attempts in the ledger (and 100 SSE streams); a
# client that gives up mid-generation (curl --max-time), and a stream reset
# with RST_STREAM on a connection that stays open, during the stream or
# before the response header, are recorded as canceled and cancel the
# generation at the frontend.
#
# curl and h2load (Debian's nghttp2-client) are installed with
# util/apt-ensure when missing; if that fails, the test fails.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ attempt_record fail_without
	frontend_records record_with rl_conf run_timed slurp /;
use Test::DynamoRL::H2;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my @KIDS;

$SIG{ALRM} = sub { kill 'KILL', map { -$_ } @KIDS; die "test timed out\n" };
alarm(300);

my $REPO = abs_path(dirname(__FILE__) . '/..');

my $t = Test::DynamoRL->new()->has(qw/http proxy http_v2/);

fail_without('curl with HTTP/2 and h2load available', tools());

$t->plan(97)->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%RL_MAIN%%

http {
    %%RL_HTTP 4m%%

    %%RL_LOG_FORMAT rl attempt outcome status proto%%

    %%RL_FRONTEND 32%%

    # rollout clients over h2c, otherwise as in examples/dynamo-rl.conf

    server {
        %%RL_LISTEN 8080 http2%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_REQUEST_PLANE sse%%
        %%RL_NOT_FOUND json%%
    }

    # trusted: attempts API and metrics, over HTTP/1.1

    %%RL_API_SERVER 8070 attempts metrics%%
}

EOF

$t->run_fake_dynamo()->run();

my $DIR = $t->testdir();
my $BASE = 'http://127.0.0.1:' . port(8080);

###############################################################################

my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}$/x;

my $TEXT = 'Hello from the';

my $COMPLETION = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"model":"m","messages":[{"role":"user","content":"hi"}],'
	. '"stream":true}';

my ($r, $id, $a, $rec);

# non-streaming

$r = curl('/v1/completions', $COMPLETION);
$id = $r->{headers}{'x-dynamo-attempt-id'};

is($r->{exit}, 0, 'curl: exit status');
is($r->{version}, '2', 'curl: HTTP/2');
is($r->{status}, 200, 'curl: status');
like($id, $UUID7, 'curl: attempt id');
is($r->{headers}{'x-request-id'}, $id, 'curl: x-request-id echoed');
is((eval { decode_json($r->{body}) } // {})->{choices}[0]{text}, $TEXT,
	'curl: completion text');

$rec = record_with($t, 'x-request-id', $id);
is($rec && $rec->{uri}, '/v1/completions', 'curl: frontend request');
is($rec && $rec->{headers}{'x-dynamo-attempt-id'}, $id,
	'curl: frontend x-dynamo-attempt-id');
is($rec && $rec->{body}, $COMPLETION, 'curl: request body forwarded');

$a = wait_done($id);
is($a->{state}, 'succeeded', 'curl: attempt succeeded');
ok(defined $a->{stream} && !$a->{stream}, 'curl: attempt not a stream');
is($a->{status}, 200, 'curl: attempt status');

# streaming

$r = curl('/v1/chat/completions', $CHAT);
$id = $r->{headers}{'x-dynamo-attempt-id'};

is($r->{exit}, 0, 'curl sse: exit status');
is($r->{version}, '2', 'curl sse: HTTP/2');
is($r->{status}, 200, 'curl sse: status');
like($r->{headers}{'content-type'}, qr{^text/event-stream},
	'curl sse: content type');
like($id, $UUID7, 'curl sse: attempt id');
is(scalar(() = $r->{body} =~ /^data: \{/mg), 3, 'curl sse: three events');
like($r->{body}, qr/data: \[DONE\]\n\n\z/, 'curl sse: data: [DONE] last');
is(sse_text($r->{body}), $TEXT, 'curl sse: text');

$a = wait_done($id);
is($a->{state}, 'succeeded', 'curl sse: attempt succeeded');
ok($a->{stream}, 'curl sse: attempt is a stream');
ok(record_with($t, 'x-request-id', $id), 'curl sse: id at the frontend');

# SSE unbuffered over HTTP/2: the first event before the others exist

{
	my $t0 = time();
	my ($first, $out, $exit) = curl_stream('/v1/chat/completions', $CHAT,
		'x-fake-scenario: slow', 'x-fake-events: 5',
		'x-fake-interval-ms: 300');
	my $total = time() - $t0;

	ok(defined $first && $first < 1.0, 'sse timing: first event within 1 s')
		or diag('first event after ' . ($first // 'never'));
	ok($total >= 1.2, 'sse timing: the stream took the frontend\'s time');
	is($exit, 0, 'sse timing: curl exit status');
	is(scalar(() = $out =~ /^data: \{/mg), 5, 'sse timing: five events');
	like($out, qr/data: \[DONE\]\n\n\z/, 'sse timing: data: [DONE] last');
}

# a client attempt id, and its duplicate

$r = curl('/v1/completions', $COMPLETION, 'X-Dynamo-Attempt-Id: h2-client.1');

is($r->{status}, 200, 'client id: status');
is($r->{headers}{'x-dynamo-attempt-id'}, 'h2-client.1', 'client id: echoed');
is(wait_done('h2-client.1')->{state}, 'succeeded', 'client id: succeeded');

# When nginx answers a POST before it has read the body (any early
# response, a plain "return 409" too), it ends the stream with RST_STREAM
# NO_ERROR, as RFC 9113 8.1 allows, and curl 7.88 then often fails with
# "(92) Stream error in the HTTP/2 framing layer" without showing the
# response.  A duplicate id is found once the body policy has read the
# body, so curl sees this 409 whole (a GET, no attempt, would be
# forwarded: issue 29, item 9); the other POST refusals go through the
# small client below.

$r = curl('/v1/completions', $COMPLETION, 'X-Dynamo-Attempt-Id: h2-client.1');

is($r->{status}, 409, 'duplicate: 409');
is($r->{headers}{'x-dynamo-attempt-id'}, 'h2-client.1',
	'duplicate: attempt id on the 409');
is((eval { decode_json($r->{body}) } // {})->{type}, 'Conflict',
	'duplicate: flat error');
is(scalar(grep { ($_->{headers}{'x-request-id'} // '') eq 'h2-client.1' }
	requests()), 1, 'duplicate: not forwarded');

# a bad client id over HTTP/2

$r = curl('/v1/models', undef, 'X-Dynamo-Attempt-Id: a/b');

is($r->{status}, 400, 'bad id: 400');
like($r->{headers}{'x-dynamo-attempt-id'}, $UUID7, 'bad id: minted id');

# POST refusals, one connection: the stream ends (with RST_STREAM
# NO_ERROR or not), the response is whole, the connection stays usable

{
	my $h2 = Test::DynamoRL::H2->new('127.0.0.1:' . port(8080));

	my $d = $h2->request('/v1/completions', $COMPLETION,
		'x-dynamo-attempt-id' => 'h2-client.1');
	my $b = $h2->request('/v1/completions', $COMPLETION,
		'x-dynamo-attempt-id' => 'bad id');
	my $g = $h2->request('/v1/completions', $COMPLETION,
		'x-dynamo-attempt-id' => 'h2-client.2');

	ok($h2->pump(sub { $h2->ended($d) && $h2->ended($b)
		&& $h2->ended($g) }, 10), 'POST refusals: three streams ended');

	is($h2->status($d), 409, 'POST duplicate: 409');
	is((eval { decode_json($h2->data($d)) } // {})->{message},
		'attempt id already used: generation is not idempotent',
		'POST duplicate: flat error');
	ok(!$h2->rst_code($d), 'POST duplicate: no stream error')
		or diag('RST_STREAM ' . $h2->rst_code($d));

	is($h2->status($b), 400, 'POST bad id: 400');
	is((eval { decode_json($h2->data($b)) } // {})->{type}, 'Bad Request',
		'POST bad id: flat error');

	is($h2->status($g), 200, 'POST after refusals: 200');
	ok(!$h2->{goaway}, 'POST refusals: no GOAWAY');

	$h2->finish();
}

is(scalar(grep { ($_->{headers}{'x-request-id'} // '') eq 'h2-client.1' }
	requests()), 1, 'POST duplicate: not forwarded');
is(wait_done('h2-client.2')->{state}, 'succeeded',
	'POST after refusals: succeeded');

###############################################################################

# h2load: 200 POSTs, 4 connections, 4 streams each

$t->write_file('completion.json', $COMPLETION);
$t->write_file('chat.json', $CHAT);

for my $case ([ 'completion.json', '/v1/completions', 200, 0 ],
	[ 'chat.json', '/v1/chat/completions', 100, 1 ])
{
	my ($file, $uri, $n, $stream) = @$case;
	my $name = "h2load $uri";

	my %before = metrics();
	my $nrec = scalar requests();

	my ($exit, $out) = run_cmd([ 'h2load', '-n', $n, '-c', 4, '-m', 4,
		'-d', "$DIR/$file", '-H', 'content-type: application/json',
		"$BASE$uri" ], 120);

	my ($done, $succ) = $out =~
		/^requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded,/m;
	my ($failed, $errored, $timeout) = $out =~
		/^requests: .*, (\d+) failed, (\d+) errored, (\d+) timeout$/m;
	my ($s2xx) = $out =~ /^status codes: (\d+) 2xx/m;

	is($exit, 0, "$name: exit status") or diag($out);
	like($out, qr/^Application protocol: h2c$/m, "$name: h2c");
	is($done, $n, "$name: $n done");
	is($succ, $n, "$name: $n succeeded");
	is(($failed // 0) + ($errored // 0) + ($timeout // 0), 0,
		"$name: 0 failed, errored or timed out")
		or diag($out);
	is($s2xx, $n, "$name: $n 2xx");

	my %after;

	Test::DynamoRL::wait_for(sub {
		%after = metrics();
		return delta(\%before, \%after, 'succeeded') >= $n;
	}, 10);

	is(delta(\%before, \%after, 'succeeded'), $n,
		"$name: metrics $n more succeeded");
	is(delta(\%before, \%after, $_), 0, "$name: metrics no more $_")
		for qw/failed canceled rejected/;

	my @new = (requests())[$nrec .. $nrec + $n - 1];
	my @ids = grep { defined } map { $_->{headers}{'x-request-id'} }
		grep { defined } @new;

	is(scalar(requests()), $nrec + $n, "$name: $n requests at the frontend");
	is(scalar(grep { /$UUID7/ } @ids), $n, "$name: $n UUIDv7 ids upstream");
	is(scalar(keys %{{ map { $_ => 1 } @ids }}), $n,
		"$name: $n distinct attempt ids");

	# a sample of them in the ledger

	my @sample = @ids[map { int($_ * $#ids / 9) } 0 .. 9];
	my @good = grep {
		my $x = api($_);
		($x->{state} // '') eq 'succeeded' && ($x->{status} // 0) == 200
			&& ($x->{stream} ? 1 : 0) == $stream
	} @sample;

	is(scalar @good, 10, "$name: a sample of 10 succeeded in the ledger");
}

###############################################################################

# curl gives up mid-generation: canceled, and the frontend sees the close

my %before = metrics();

$r = curl('/v1/chat/completions', $CHAT, '--max-time', '1',
	'x-fake-scenario: slow', 'x-fake-events: 100',
	'x-fake-interval-ms: 200', 'X-Dynamo-Attempt-Id: h2-cancel-curl');

is($r->{exit}, 28, 'curl --max-time: curl timed out');
is($r->{headers}{'x-dynamo-attempt-id'}, 'h2-cancel-curl',
	'curl --max-time: attempt id received');
like($r->{body}, qr/^data: \{/m, 'curl --max-time: some events received');

is(wait_state('h2-cancel-curl', 'canceled')->{state}, 'canceled',
	'curl --max-time: attempt canceled');
ok(wait_closed('h2-cancel-curl'),
	'curl --max-time: frontend recorded client_closed');

# RST_STREAM mid-generation, on a connection that stays open for another
# request

my $h2 = Test::DynamoRL::H2->new('127.0.0.1:' . port(8080));

ok($h2, 'rst: h2c connection');

my $s1 = $h2->request('/v1/chat/completions', $CHAT,
	'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
	'x-fake-interval-ms' => 200, 'x-dynamo-attempt-id' => 'h2-rst-1');

ok($h2->pump(sub { $h2->data($s1) =~ /data: \{/ }, 10),
	'rst: first event on stream 1');
is($h2->status($s1), 200, 'rst: stream 1 status 200');

$h2->rst($s1, 0x8);

is(wait_state('h2-rst-1', 'canceled')->{state}, 'canceled',
	'rst: attempt canceled');
ok(wait_closed('h2-rst-1'), 'rst: frontend recorded client_closed');

# ... and before the response header: the frontend is still generating

my $s5 = $h2->request('/v1/completions', $COMPLETION,
	'x-fake-scenario' => 'hang', 'x-dynamo-attempt-id' => 'h2-rst-5');

ok(Test::DynamoRL::wait_for(sub {
	record_with($t, 'x-request-id', 'h2-rst-5') }, 10),
	'rst before the header: request at the frontend');

$h2->rst($s5, 0x8);

is(wait_state('h2-rst-5', 'canceled')->{state}, 'canceled',
	'rst before the header: attempt canceled');
ok(wait_closed('h2-rst-5'),
	'rst before the header: frontend recorded client_closed');

my $s3 = $h2->request('/v1/completions', $COMPLETION,
	'x-dynamo-attempt-id' => 'h2-rst-3');

ok($h2->pump(sub { $h2->ended($s3) }, 10), 'rst: stream 3 ended');
is($h2->status($s3), 200, 'rst: stream 3 on the same connection 200');
like($h2->data($s3), qr/"text":"\Q$TEXT\E"/, 'rst: stream 3 body');
ok(!$h2->{goaway}, 'rst: no GOAWAY');
is(wait_done('h2-rst-3')->{state}, 'succeeded', 'rst: stream 3 succeeded');

$h2->finish();

my %after = metrics();

is(delta(\%before, \%after, 'canceled'), 3, 'metrics: three more canceled');

###############################################################################

$t->stop();

my @log = map { decode_json($_) } grep { /\S/ } split /\n/,
	$t->read_file('rl.log');

is(scalar(grep { $_->{proto} ne 'HTTP/2.0' } @log), 0,
	'access log: every request HTTP/2.0');
is(scalar(grep { $_->{outcome} eq 'succeeded' } @log), 306,
	'access log: 306 succeeded');
is(join(',', map { "$_->{attempt}=$_->{outcome}" }
	grep { $_->{outcome} eq 'canceled' } @log),
	'h2-cancel-curl=canceled,h2-rst-1=canceled,h2-rst-5=canceled',
	'access log: three canceled');

###############################################################################

sub tools {
	my $have = sub {
		my $v = `curl --version 2>/dev/null`;
		return 0 unless $? == 0 && $v =~ /^Features:.*\bHTTP2\b/m;
		`h2load --version 2>/dev/null`;
		return $? == 0;
	};

	return undef if $have->();

	my ($st, $out) = run_cmd([ "$REPO/util/apt-ensure", 'nghttp2-client',
		'curl' ], 240);

	return undef if $have->();

	return "curl with HTTP/2 and h2load are needed: \"util/apt-ensure"
		. " nghttp2-client curl\" exited with $st and did not"
		. " provide them\n$out";
}

# runs a command with stdout and stderr together, in its own process
# group, killed after $seconds; returns the exit status (or a reason)
# and the output

sub run_cmd {
	my ($cmd, $seconds) = @_;

	my $out = ($t->testdir() // '/tmp') . "/cmd.$$.out";

	my $st = run_timed($cmd, $out, $seconds, kids => \@KIDS, poll => 0.02);

	my $text = slurp($out) // '';
	unlink $out;

	return ($st, $text);
}

# curl --http2-prior-knowledge; extra arguments are headers ("name: value")
# or options (starting with "-", followed by their value)

sub curl_args {
	my ($uri, $body, @extra) = @_;

	my @args = ('curl', '-sS', '--http2-prior-knowledge', '-N',
		defined $body ? ('-H', 'content-type: application/json',
			'--data-binary', $body) : ());

	while (defined(my $x = shift @extra)) {
		push @args, $x =~ /^-/ ? ($x, shift @extra) : ('-H', $x);
	}

	return (@args, "$BASE$uri");
}

sub curl {
	my (@a) = @_;

	my $hfile = "$DIR/curl.headers";
	unlink $hfile;

	my @cmd = curl_args(@a);
	splice(@cmd, 1, 0, '-D', $hfile, '-w', '\n%{http_version}');

	my ($st, $out) = run_cmd(\@cmd, 30);

	my %r = (exit => $st, headers => {});

	($r{body}, $r{version}) = $out =~ /\A(.*)\n(\S*)\z/s ? ($1, $2)
		: ($out, undef);

	my $head = slurp($hfile) // '';

	diag("@cmd: exit $st: $out") unless $head =~ m{^HTTP/};
	($r{status}) = $head =~ m{^HTTP/\S+ (\d{3})};

	for my $line (split /\r\n/, $head) {
		my ($n, $v) = $line =~ /^([^:\s]+):\s*(.*?)\s*$/ or next;
		$r{headers}{lc $n} = $v;
	}

	return \%r;
}

# a streaming curl read as it arrives: seconds to the first event, the
# whole body, curl's exit status

sub curl_stream {
	my (@a) = @_;

	my $t0 = time();
	my $pid = open(my $fh, '-|', curl_args(@a)) or return;
	push @KIDS, $pid;

	my $sel = IO::Select->new($fh);
	my $deadline = time() + 30;
	my ($buf, $first) = ('');

	while ((my $left = $deadline - time()) > 0) {
		last unless $sel->can_read($left);
		last unless sysread($fh, $buf, 65536, length $buf);
		$first //= time() - $t0 if $buf =~ /data: \{/;
	}

	close $fh;
	@KIDS = grep { $_ != $pid } @KIDS;

	return ($first, $buf, $? >> 8);
}

sub sse_text {
	my ($body) = @_;

	my $text = '';

	for my $data ($body =~ /^data: (\{.*)$/mg) {
		my $j = eval { decode_json($data) } or next;
		my $c = $j->{choices}[0] // {};
		$text .= $c->{delta}{content} // $c->{text} // '';
	}

	return $text;
}



sub requests {
	return grep { !exists $_->{event} } @{frontend_records($t)};
}


sub wait_closed {
	my ($id) = @_;

	return Test::DynamoRL::wait_for(sub {
		scalar grep { ($_->{event} // '') eq 'client_closed'
			&& ($_->{'x-request-id'} // '') eq $id } @{frontend_records($t)};
	}, 10);
}

sub api {
	return attempt_record(@_);
}

sub wait_state {
	my ($id, $re) = @_;

	my $last = {};

	Test::DynamoRL::wait_for(sub {
		$last = api($id);
		return ($last->{state} // '') =~ /^(?:$re)$/;
	}, 10);

	return $last;
}

sub wait_done {
	my ($id) = @_;

	return {} unless defined $id;
	return wait_state($id, 'succeeded|failed|canceled');
}

# dynamo_rl_requests_total{plane="request",outcome=...}

sub metrics {
	my $r = parse_response(http_get('/metrics',
		PeerAddr => '127.0.0.1:' . port(8070))) // {};

	return map { $_->[0] => $_->[1] } map { [ /^(\w+)"\} (\d+)$/ ] }
		grep { s/^dynamo_rl_requests_total\{plane="request",outcome="//
			|| 0 } split /\n/, $r->{body} // '';
}

sub delta {
	my ($before, $after, $outcome) = @_;
	return ($after->{$outcome} // 0) - ($before->{$outcome} // 0);
}

###############################################################################
