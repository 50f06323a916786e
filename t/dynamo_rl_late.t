#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Errors of the request plane before its PREACCESS phase, answered with
# the context ngx_http_dynamo_rl_request_late() creates in the header
# filter: nginx's own 413 of a declared Content-Length over
# client_max_body_size (from the find-config phase), and a "return" of a
# 4xx or a 5xx in an if block (the rewrite phase).  Over HTTP/2 (h2c with
# prior knowledge, nghttp), and over HTTP/1.1 with two worker processes,
# each of which answers every case: the status, the flat error shape, the
# attempt id (the client's one valid id echoed, else a minted UUIDv7:
# none sent, an invalid one, two of them), and nothing forwarded.
# t/dynamo_rl_verdict_attack.t holds the first of them over HTTP/1.1
# (findings 5 and 6).

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ attempt call fail_without flat forwarded
	frontend_requests output rl_test /;
use Test::DynamoRL::HTTP qw/ add_header /;

###############################################################################

fail_without('nghttp', output('nghttp', '--version') =~ /^nghttp / ? undef
	: 'nghttp is needed: util/apt-ensure nghttp2-client');

my $t = rl_test(120, 66, <<'EOF', has => [qw/ http proxy rewrite http_v2 /]);

%%RL_MAIN workers=2%%

http {
    %%RL_HTTP 1m%%
    %%RL_FRONTEND%%

    server {
        # one listening socket per worker process on each port: the
        # kernel spreads the connections over both

        %%RL_LISTEN 8080 reuseport 8090 http2 reuseport%%

        # which worker process answered
        add_header X-Test-Pid $pid always;

        location /v1/ {
            dynamo_rl_plane request;
            client_max_body_size 1k;
            proxy_pass http://frontend;

            if ($http_x_block = 418) {
                return 418;
            }

            if ($http_x_block = 503) {
                return 503;
            }
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}$/x;

my $P = '{"prompt":"p"}';
my $BIG = '{"prompt":"' . ('x' x 2048) . '"}';

# what comes before the PREACCESS phase: [ name, body, headers, status,
# type of the flat error ]

my @KINDS = (
	[ '413', $BIG, [], 413, 'Payload Too Large' ],
	[ 'if 418', $P, [ 'X-Block' => 418 ], 418, 'I\'m a teapot' ],
	[ 'if 503', $P, [ 'X-Block' => 503 ], 503, 'Service Unavailable' ],
);

# the attempt ids a client sends: [ name, ids, echoed (or minted) ]

my @IDS = (
	[ 'valid id', [ 'late-%s' ], 1 ],
	[ 'no id', [], 0 ],
	[ 'invalid id', [ 'bad/id' ], 0 ],
	[ 'two ids', [ 'late-a-%s', 'late-b-%s' ], 0 ],
);

# the control: requests that pass are forwarded, and recorded as such

is(attempt('late-h1-ok', $P)->{status}, 200, 'http/1.1: an attempt passes');
is(forwarded($t, 'late-h1-ok'), 1, 'http/1.1: it is forwarded');

my $r = h2([ 'x-dynamo-attempt-id: late-h2-ok' ], $P);
is($r && $r->{status}, 200, 'http2: an attempt passes');
is(forwarded($t, 'late-h2-ok'), 1, 'http2: it is forwarded');

###############################################################################

# HTTP/2

for my $k (@KINDS) {
	my ($kind, $body, $headers, $status, $type) = @$k;

	for my $i (@IDS) {
		my ($name, $ids, $echoed) = @$i;

		my @sent = ids($ids, "h2-$status");
		my %h = @$headers;

		my $r = h2([ map({ "x-dynamo-attempt-id: $_" } @sent),
			map({ lc($_) . ": $h{$_}" } keys %h) ], $body);

		is($r->{status}, $status, "http2, $kind, $name: status");
		ok(flat($r, $status, $type), "http2, $kind, $name: flat error")
			or diag($r->{body});
		ok(id_ok($r, $echoed, @sent), "http2, $kind, $name: attempt id")
			or diag($r->{headers}{'x-dynamo-attempt-id'} // 'none');
	}
}

###############################################################################

# HTTP/1.1, two worker processes: each case until both have answered it

ok($t->wait_for(sub { $t->worker_pids() == 2 }, 10),
	'two worker processes');

for my $k (@KINDS) {
	my $kind = $k->[0];

	for my $i (@IDS) {
		my $name = $i->[0];

		my ($pids, $bad) = both_workers($k, $i);

		my @workers = sort $t->worker_pids();

		is(scalar @$bad, 0, "two workers, $kind, $name: status, flat"
			. ' error, attempt id') or diag($bad->[0]);
		is(join(' ', sort keys %$pids), "@workers",
			"two workers, $kind, $name: both processes answered");
	}
}

# nothing reached the frontend but the two controls

is(frontend_requests($t), 2, 'nothing forwarded but the controls');

###############################################################################

# a case over HTTP/1.1 until both worker processes have answered it (40
# times at most): the pids that answered, the wrong answers

sub both_workers {
	my ($k, $i) = @_;

	my (undef, $body, $headers, $status, $type) = @$k;
	my (undef, $ids, $echoed) = @$i;

	my (%pids, @bad);

	for my $n (1 .. 40) {
		my @sent = ids($ids, "h1-$status-$n");

		my $r = call('POST', '/v1/completions', body => $body,
			headers => [ @$headers,
				map { ('X-Dynamo-Attempt-Id' => $_) } @sent ]);

		push @bad, ($r->{status} // 'none') . ' '
			. ($r->{headers}{'x-dynamo-attempt-id'} // 'none')
			. ' ' . ($r->{body} // '')
			unless ($r->{status} // 0) == $status
				&& flat($r, $status, $type)
				&& id_ok($r, $echoed, @sent);

		$pids{$r->{headers}{'x-test-pid'} // 'none'} = 1;

		last if keys %pids >= 2;
	}

	return (\%pids, \@bad);
}

# the ids of a request, each "%s" its tag

sub ids {
	my ($ids, $tag) = @_;

	return map { (my $id = $_) =~ s/%s/$tag/; $id } @$ids;
}

# the client's valid id echoed, else a minted UUIDv7, none of those sent

sub id_ok {
	my ($r, $echoed, @sent) = @_;

	my $id = $r->{headers}{'x-dynamo-attempt-id'};

	return 0 unless defined $id && !ref $id;
	return $id eq $sent[0] if $echoed;
	return $id =~ $UUID7 && !grep { $_ eq $id } @sent;
}

# over HTTP/2 with nghttp (Debian's nghttp2-client, as h2load in
# dynamo_rl_http2.t): nginx answers these POSTs before it has read their
# body and ends the stream with RST_STREAM NO_ERROR, as RFC 9113 8.1
# allows, and curl 7.88 then often fails with exit 92 without the answer;
# nghttp -v shows the answer: its header fields one a line, and a body of
# one line (as the flat error is) just before the line of the frame that
# carried it

sub h2 {
	my ($headers, $body) = @_;

	$t->write_file('h2.body', $body);

	my $out = output('nghttp', '-v', '-t', '10',
		'-d', $t->testdir() . '/h2.body',
		'-H', 'content-type: application/json',
		map({ ('-H', $_) } @$headers),
		'http://127.0.0.1:' . port(8090) . '/v1/completions');

	my %r = (headers => {});

	while ($out =~ /^\[\s*[\d.]+\] recv \(stream_id=\d+\) (\S+): (.*)$/mg) {
		my ($name, $value) = ($1, $2);

		if ($name eq ':status') {
			$r{status} = $value;
			next;
		}

		add_header($r{headers}, $name, $value);
	}

	# the body, ended by its newline or not, before the frame's line

	($r{body}) = $out =~ /^([^\[\n][^\n]*\n?)\[\s*[\d.]+\] recv DATA frame/m;

	diag("nghttp: $out") unless defined $r{status};

	return \%r;
}

###############################################################################
