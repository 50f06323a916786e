#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the gate's drain count: only admitted requests are counted,
# a worker process killed with requests in flight does not hold the drain
# forever, a change can be made conditional on the epoch, and a client
# can tell the gateway's refusals from Dynamo's own by a header.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ hold rl_test /;

###############################################################################

my $t = rl_test(90, 15, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    server {
        listen 127.0.0.1:8080;

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8081;
        }

        %%RL_APIS gate%%
    }
}

EOF

$t->run_fake_dynamo()->run();

# the killed worker process below is expected in the error log

$t->allow_log(qr/exited on signal 9/);

###############################################################################

# a request held by the frontend is in flight

my $s = hold('drain-1');

ok(wait_gate(sub { $_[0]{in_flight} == 1 }), 'held: one in flight');

# a worker process killed with it: the drain is not held forever

my @workers = worker_pids();
is(scalar @workers, 1, 'one worker process');

kill 'KILL', @workers;
close $s;

ok(wait_gate(sub { $_[0]{in_flight} == 0 }), 'killed: the drain is free');

ok($t->wait_for(sub { my @w = worker_pids(); @w && $w[0] != $workers[0] },
	10), 'a new worker process');

# a request refused by the closed gate is never counted, even while its
# body is still on the way

my $g = gate_post('{"action":"close","reason":"drain test"}');
is($g->{state}, 'closed', 'closed');

$s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
	or die "connect: $!\n";
print $s "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
	. "Content-Length: 100000\r\n\r\n{\"prompt\":";

my $r = parse_response(read_response($s));
is($r->{status}, 503, 'refused by the gate');
is($r->{headers}{'x-dynamo-rl-reason'}, 'gate_closed',
	'refused: the reason header');
is(gate()->{in_flight}, 0, 'refused while sending its body: not counted');
close $s;

# conditional changes: the epoch must be current

my $epoch = gate()->{epoch};

$r = gate_raw('{"action":"open","epoch":' . ($epoch - 1) . '}');
is($r->{status}, 409, 'stale epoch: 409');
is(eval { decode_json($r->{body})->{error} }, 'epoch_mismatch',
	'stale epoch: reason');
is(gate()->{state}, 'closed', 'stale epoch: still closed');

$g = gate_post('{"action":"open","epoch":' . $epoch . '}');
is($g->{state}, 'open', 'current epoch: opened');
is($g->{epoch}, $epoch + 1, 'current epoch: epoch moved');

# a refusal of Dynamo's own carries no reason header

$r = parse_response(http_post('/v1/completions', '{"prompt":"p"}',
	headers => "x-fake-scenario: status-503\r\n"));
is($r->{status}, 503, 'dynamo 503');
ok(!defined $r->{headers}{'x-dynamo-rl-reason'}, 'dynamo 503: no reason');

###############################################################################

sub read_response {
	my ($sock) = @_;

	my $buf = '';
	my $sel = IO::Select->new($sock);

	while ($sel->can_read(5)) {
		my $n = sysread($sock, $buf, 65536, length $buf);
		last unless $n;
		last if $buf =~ /\r\n\r\n/ && $buf =~ /\}\s*$/;
	}

	return $buf;
}

sub gate {
	return decode_json(parse_response(http_get('/rl/gate'))->{body});
}

sub gate_raw {
	return parse_response(http_post('/rl/gate', shift));
}

sub gate_post {
	return decode_json(gate_raw(shift)->{body});
}

sub wait_gate {
	my ($cond) = @_;
	return $t->wait_for(sub { $cond->(gate()) }, 10);
}

sub worker_pids {
	my $master = $t->read_file('nginx.pid');
	chomp $master;

	my @pids;

	for my $stat (glob('/proc/[0-9]*/stat')) {
		open my $fh, '<', $stat or next;
		my $line = <$fh> // '';
		close $fh;

		next unless $line =~ /^(\d+) \((.*)\) (\S) (\d+)/;
		next unless $4 == $master && $3 ne 'Z';

		push @pids, $1;
	}

	return sort { $a <=> $b } @pids;
}

###############################################################################
