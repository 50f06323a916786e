#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attacks on the request plane's handling of a client's headers (routing
# pins, Dynamo's request ids, a second attempt id, Content-Encoding, in any
# case, duplicated, spread over the parts of nginx's headers_in list, over
# HTTP/2, with underscores and invalid names allowed) and on the lifetime
# of a request whose body the module reads (late, chunked, to a temporary
# file, aborted, refused and followed on the same connection), with the
# ledger's times of such requests.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use Time::HiRes qw/ sleep time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call frontend_records
	frontend_requests json output raw record_with rl_test start /;

###############################################################################

my $t = rl_test(240, undef, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    client_body_buffer_size 1k;

    server {
        %%RL_LISTEN 8080 8085 http2%%

        location /v1/ {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE unbuffered%%

            error_page 415 = /refused;
        }

        location /v1/unbuffered/ {
            dynamo_rl_plane request;

            proxy_pass http://frontend/v1/;
            %%RL_PROXY_KEEPALIVE unbuffered%%
            proxy_request_buffering off;
        }

        location = /refused {
            return 200 "refused\n";
        }
    }

    server {
        %%RL_LISTEN 8086%%

        underscores_in_headers on;
        ignore_invalid_headers off;

        %%RL_REQUEST_PLANE keepalive unbuffered%%
    }

    %%RL_API_SERVER 8070 attempts%%
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my @PINS = qw/ x-dynamo-worker-instance-id x-dynamo-prefill-instance-id
	x-dynamo-dp-rank x-dynamo-prefill-dp-rank x-worker-instance-id
	x-prefill-instance-id x-dp-rank x-data-parallel-rank x-prefill-dp-rank /;

my $BODY = '{"model":"m","prompt":"hello"}';

my ($r, $rec, $n, $id);

# every pin in three cases, each twice, spread over the parts of the list
# (nginx's headers_in grows by 20): none reaches the frontend, the filler
# does

my @h;
my $k = 0;

for my $pin (@PINS) {
	for my $name (lc $pin, uc $pin, join '-', map { ucfirst } split /-/, $pin) {
		push @h, "X-Filler-$k" => "f$k", $name => "7";
		$k++;
	}
}

push @h, 'Request-Id' => 'evil-rid', 'X-Dynamo-Request-Id' => 'evil-xdrid',
	'REQUEST-ID' => 'evil-rid2', 'x-dynamo-REQUEST-id' => 'evil-xdrid2';

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ @h, 'X-Dynamo-Attempt-Id' => 'a3-pins-1' ]);
is($r->{status}, 200, 'pins over list parts: status');

$rec = record_with($t, 'x-dynamo-attempt-id', 'a3-pins-1');
ok($rec, 'pins over list parts: forwarded');
is(join(',', grep { $rec && exists $rec->{headers}{$_} } @PINS), '',
	'pins over list parts: no pin upstream');
is(scalar(grep { $rec && exists $rec->{headers}{lc "x-filler-$_"} }
	0 .. $k - 1), $k, 'pins over list parts: every other header kept');
ok($rec && !exists $rec->{headers}{'x-dynamo-request-id'},
	'pins over list parts: no x-dynamo-request-id upstream');
ok($rec && !ref $rec->{headers}{'request-id'}
	&& ($rec->{headers}{'request-id'} // '') !~ /evil/,
	'pins over list parts: one request-id, not the client\'s');

# names of a pin's length, and near misses: kept as they are

my @near = qw/ x-dynamo-worker-instance-ix x-dynamo-prefill-instance-ie
	x-dynamo-dp-ranK0 x-dp-ranz y-dp-rank x-data-parallel-ran
	x-worker-instance-idx request-ix x-dynamo-request-ie content-encodinx /;

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ (map { $_ => 'near' } @near),
		'X-Dynamo-Attempt-Id' => 'a3-near-1' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'a3-near-1');
is($r->{status}, 200, 'near misses: status');
is(scalar(grep { $rec && ($rec->{headers}{lc $_} // '') eq 'near' } @near),
	scalar @near, 'near misses: all forwarded');

# a second attempt id 30 headers after the first, in another list part

$n = frontend_requests($t);
$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'a3-two-1',
		(map { ("X-F$_" => $_) } 1 .. 30),
		'x-dynamo-attempt-id' => 'a3-two-2' ]);
is($r->{status}, 400, 'second attempt id in another part: 400');
is(frontend_requests($t), $n, 'second attempt id in another part: nothing'
	. ' forwarded');

# a client's x-request-id is kept under x-client-request-id, never as a
# second x-request-id, even twice and in another part

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Request-Id' => 'traj-1', (map { ("X-F$_" => $_) } 1 .. 25),
		'x-REQUEST-id' => 'traj-2', 'X-Dynamo-Attempt-Id' => 'a3-xrid-1' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'a3-xrid-1');
is($rec && $rec->{headers}{'x-request-id'}, 'a3-xrid-1',
	'client x-request-id twice: one x-request-id, the attempt\'s');
is(join(',', sort @{$rec && ref $rec->{headers}{'x-client-request-id'}
	? $rec->{headers}{'x-client-request-id'} : []}), 'traj-1,traj-2',
	'client x-request-id twice: both kept as x-client-request-id');

# Content-Encoding after 30 headers, in any case, after an "identity"

for my $case ([ 'late', (map { ("X-F$_" => $_) } 1 .. 30),
		'CONTENT-ENCODING' => 'gzip' ],
	[ 'after identity', 'Content-Encoding' => 'identity',
		(map { ("X-F$_" => $_) } 1 .. 22), 'content-encoding' => 'br' ],
	[ 'list', 'Content-Encoding' => 'identity, gzip' ])
{
	my ($name, @hs) = @$case;

	$n = frontend_requests($t);
	$r = call('POST', '/v1/completions', body => $BODY, headers => \@hs);
	is($r->{status}, 415, "coded body $name: 415");
	is($r->{headers}{'x-dynamo-rl-reason'}, 'unsupported_encoding',
		"coded body $name: reason");
	is(frontend_requests($t), $n, "coded body $name: nothing forwarded");
}

# underscores and invalid names allowed: the dash form is still stripped,
# and so is the underscore form, which nginx's $http_ variables take for
# the same name

$r = call('POST', '/v1/completions', port => 8086, body => $BODY,
	headers => [ 'X-Dynamo-Worker-Instance-Id' => '9',
		'x_dynamo_worker_instance_id' => '9',
		'X-Dp-Rank.' => '9', 'X-Dynamo-Attempt-Id' => 'a3-us-1' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'a3-us-1');
is($r->{status}, 200, 'underscores: status');
ok($rec && !exists $rec->{headers}{'x-dynamo-worker-instance-id'},
	'underscores: the pin stripped');
ok($rec && !exists $rec->{headers}{'x_dynamo_worker_instance_id'},
	'underscores: the underscore form stripped');

# a name longer than the bit mask's 64 bytes

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ ('X-' . 'a' x 100) => 'long',
		'X-Dynamo-Attempt-Id' => 'a3-long-1' ]);
$rec = record_with($t, 'x-dynamo-attempt-id', 'a3-long-1');
is($rec && $rec->{headers}{'x-' . 'a' x 100}, 'long', 'long name: kept');

# HTTP/2: lowercase names, duplicated pins and request ids, 30 headers

SKIP: {
	my $curl = output('sh', '-c', 'curl --version 2>/dev/null');
	skip 'curl with HTTP/2 not installed', 6 unless $curl =~ /HTTP2/;

	my @args = ('curl', '-sS', '--http2-prior-knowledge', '-o', '/dev/null',
		'-w', '%{http_code}', '-H', 'content-type: application/json');

	# a 415 answered before the body is read: curl 7.88 sees the stream
	# reset and prints no status, the access log has it

	push @args, '-H', "x-f$_: $_" for 1 .. 30;
	push @args, '-H', "$_: 3" for @PINS, @PINS;
	push @args, '-H', 'request-id: evil-h2', '-H',
		'x-dynamo-request-id: evil-h2';

	is(output(@args, '-H', 'x-dynamo-attempt-id: a3-h2-1',
		'--data-binary', $BODY,
		'http://127.0.0.1:' . port(8085) . '/v1/completions'), '200',
		'http2 pins: status');

	$rec = record_with($t, 'x-dynamo-attempt-id', 'a3-h2-1');
	ok($rec, 'http2 pins: forwarded');
	is(join(',', grep { $rec && exists $rec->{headers}{$_} } @PINS), '',
		'http2 pins: none upstream');
	ok($rec && !ref $rec->{headers}{'request-id'}
		&& ($rec->{headers}{'request-id'} // '') !~ /evil/
		&& !exists $rec->{headers}{'x-dynamo-request-id'},
		'http2 pins: request ids not the client\'s');

	$n = frontend_requests($t);

	output(@args, '-H', 'content-encoding: gzip', '--data-binary', $BODY,
		'http://127.0.0.1:' . port(8085) . '/v1/completions');
	# the stream's line is written once its end is on the wire

	ok($t->wait_for(sub { $t->read_file('access.log')
		=~ m{"POST /v1/completions HTTP/2\.0" 415} }, 5),
		'http2 coded body: 415');
	is(frontend_requests($t), $n, 'http2 coded body: nothing forwarded');
}

###############################################################################

# a body that arrives late, then a pipelined request on the same
# connection: both answered, the ledger's times those of the attempt

my $s = start('POST', '/v1/completions', headers => [
	'Connection' => 'keep-alive', 'X-Dynamo-Attempt-Id' => 'a3-late-1',
	'Content-Type' => 'application/json',
	'Content-Length' => length $BODY ]);

my $t0 = time();
sleep(1.2);
syswrite($s, $BODY . raw('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'a3-late-2' ]));

my $all = read_all($s, 10);
my @st = $all =~ m{HTTP/1\.1 (\d{3}) }g;
is("@st", '200 200', 'late body then pipelined: both answered')
	or diag($all);

$r = api('a3-late-1');
is($r->{status}, 200, 'late body: a ledger record');
ok(($r->{json}{duration_ms} // 1e9) < 1000,
	'late body: duration from the body, not the header')
	or diag(explain $r->{json});

# a chunked body in pieces

$s = start('POST', '/v1/completions', headers => [
	'X-Dynamo-Attempt-Id' => 'a3-chunk-1',
	'Content-Type' => 'application/json',
	'Transfer-Encoding' => 'chunked' ]);

for my $piece ($BODY =~ /(.{1,7})/sg) {
	syswrite($s, sprintf("%x\r\n%s\r\n", length $piece, $piece));
	sleep(0.05);
}

syswrite($s, "0\r\n\r\n");
like(read_all($s, 10), qr{^HTTP/1\.1 200}, 'chunked in pieces: 200');
is(record_with($t, 'x-dynamo-attempt-id', 'a3-chunk-1')->{body} // '',
	$BODY, 'chunked in pieces: body forwarded');

# a body to a temporary file (client_body_buffer_size 1k)

my $big = '{"model":"m","prompt":"' . ('x' x 20000) . '"}';

$r = call('POST', '/v1/completions', body => $big,
	headers => [ 'X-Dynamo-Attempt-Id' => 'a3-big-1' ]);
is($r->{status}, 200, 'temp file body: status');
is(length(record_with($t, 'x-dynamo-attempt-id', 'a3-big-1')->{body} // ''),
	length $big, 'temp file body: forwarded whole');

# a client gone mid-body, then a fresh request: no attempt recorded, the
# worker still answers

for my $case ([ 'a3-abort-1', '/v1/completions' ],
	[ 'a3-abort-2', '/v1/unbuffered/completions' ])
{
	$s = start('POST', $case->[1], headers => [
		'X-Dynamo-Attempt-Id' => $case->[0],
		'Content-Type' => 'application/json', 'Content-Length' => 1000 ]);
	syswrite($s, substr($BODY, 0, 10));
	sleep(0.2);
	close $s;
}

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'a3-after-abort' ]);
is($r->{status}, 200, 'after aborted bodies: a request answered');
is(api('a3-abort-1')->{status}, 404, 'aborted body: no attempt recorded');

# a refused body (415, its own answer though an error_page names 415) on a
# keepalive connection, a second request pipelined behind its body

$s = start('POST', '/v1/completions', headers => [
	'Connection' => 'keep-alive', 'Content-Encoding' => 'gzip',
	'Content-Type' => 'application/json',
	'Content-Length' => length $BODY ]);
syswrite($s, $BODY . raw('POST', '/v1/completions', body => $BODY,
	headers => [ 'X-Dynamo-Attempt-Id' => 'a3-after-415' ]));

$all = read_all($s, 10);
@st = $all =~ m{HTTP/1\.1 (\d{3}) }g;
is("@st", '415 200', 'refused then pipelined: both answered')
	or diag($all);
ok(!record_with($t, 'content-encoding', 'gzip'),
	'refused then pipelined: the coded body never forwarded');

# the same with a refused body that comes late

$s = start('POST', '/v1/completions', headers => [
	'Connection' => 'keep-alive', 'Content-Encoding' => 'gzip',
	'Content-Type' => 'application/json',
	'Content-Length' => length $BODY ]);
sleep(0.3);
syswrite($s, $BODY);
like(read_all($s, 10), qr{^HTTP/1\.1 415}, 'refused, body late: 415');

# unbuffered request body, late

$s = start('POST', '/v1/unbuffered/completions', headers => [
	'X-Dynamo-Attempt-Id' => 'a3-unbuf-1',
	'Content-Type' => 'application/json',
	'Content-Length' => length $BODY ]);
sleep(0.3);
syswrite($s, $BODY);
like(read_all($s, 10), qr{^HTTP/1\.1 200}, 'unbuffered, body late: 200');
is(record_with($t, 'x-dynamo-attempt-id', 'a3-unbuf-1')->{body} // '',
	$BODY, 'unbuffered, body late: body forwarded');

# HTTP/2 with the body in many DATA frames, late (curl reads stdin)

SKIP: {
	my $curl = output('sh', '-c', 'curl --version 2>/dev/null');
	skip 'curl with HTTP/2 not installed', 2 unless $curl =~ /HTTP2/;

	my $cmd = '(printf %s \'' . substr($big, 0, 10000) . '\'; sleep 0.5;'
		. ' printf %s \'' . substr($big, 10000) . '\') | curl -sS'
		. ' --http2-prior-knowledge -o /dev/null -w %{http_code}'
		. ' -H "content-type: application/json"'
		. ' -H "x-dynamo-attempt-id: a3-h2-late" -T - -X POST'
		. ' http://127.0.0.1:' . port(8085) . '/v1/completions';

	is(output('sh', '-c', $cmd), '200', 'http2 late body: status');
	is(length(record_with($t, 'x-dynamo-attempt-id', 'a3-h2-late')->{body}
		// ''), length $big, 'http2 late body: forwarded whole');
}

$t->stop();

unlike($t->read_file('error.log'), qr/\[alert\]|\[emerg\]|open socket/,
	'no alerts, no open sockets left at exit');

done_testing();

###############################################################################

sub read_all {
	my ($s, $seconds) = @_;

	my $sel = IO::Select->new($s);
	my $deadline = time() + $seconds;
	my $buf = '';

	while ((my $left = $deadline - time()) > 0) {
		last unless $sel->can_read($left);
		last unless sysread($s, $buf, 65536, length $buf);
	}

	return $buf;
}

###############################################################################
