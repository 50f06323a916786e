#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests that every attempt ends: a worker process killed (SIGKILL, as the
# OOM killer does) with attempts in flight has them settled as failed,
# "reason":"worker_exited", within a few seconds; their ids stay refused,
# they no longer count as in flight, and the attempts of the other worker
# process are left alone.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ hold rl_test /;

###############################################################################

my $t = rl_test(120, 14, <<'EOF');

%%RL_MAIN workers=2%%

http {
    %%RL_HTTP 1m%%

    server {
        # one listening socket per worker process: the kernel spreads
        # the connections over both

        listen 127.0.0.1:8080 reuseport;

        location /v1/ {
            dynamo_rl_plane request;

            # the fake frontend logs which worker process forwarded it
            proxy_set_header X-Nginx-Pid $pid;
            proxy_pass http://127.0.0.1:8081;
        }
    }

    server {
        listen 127.0.0.1:8085;

        %%RL_APIS attempts gate status%%
    }
}

EOF

$t->run_fake_dynamo()->run();

# the killed worker process is expected in the error log

$t->allow_log(qr/exited on signal 9/);

###############################################################################

# under valgrind the second worker process may still be starting

$t->wait_for(sub { $t->worker_pids() == 2 }, 10);

my @workers = $t->worker_pids();
is(scalar @workers, 2, 'two worker processes');

# attempts held by the frontend, in flight in both worker processes

my (%sock, %pid);

for my $i (1 .. 16) {
	$sock{"exit-$i"} = hold("exit-$i");
}

ok($t->wait_for(sub {
	for my $rec (@{$t->fake_records('frontend')}) {
		my $id = $rec->{headers}{'x-dynamo-attempt-id'};
		my $p = $rec->{headers}{'x-nginx-pid'};
		$pid{$id} = $p if defined $id && defined $p;
	}
	return keys %pid == 16;
}, 10), 'all 16 forwarded');

my ($victim, $other) = @workers;
my @gone = sort grep { $pid{$_} == $victim } keys %pid;
my @kept = sort grep { $pid{$_} == $other } keys %pid;

ok(@gone && @kept, 'attempts in both worker processes')
	or diag(explain(\%pid));

is(status()->{ledger}{in_flight}, 16, 'in flight: 16');

# the OOM killer's way: nothing of the worker process runs again

my $t0 = time();

kill 'KILL', $victim;

ok($t->wait_for(sub {
	!grep { (attempt_api($_)->{state} // '') ne 'failed' } @gone
}, 10), 'the killed worker\'s attempts end');

my $elapsed = time() - $t0;
cmp_ok($elapsed, '<', 5, 'within a few seconds');

my @recs = map { attempt_api($_) } @gone;

is(scalar(grep { ($_->{reason} // '') eq 'worker_exited' } @recs),
	scalar @gone, 'reason worker_exited');
is(scalar(grep { defined $_->{ended} } @recs), scalar @gone,
	'ended is set');

# the other worker process's attempts are untouched

is(scalar(grep { (attempt_api($_)->{state} // '') eq 'accepted' } @kept),
	scalar @kept, 'the other worker\'s attempts still in flight');

my $st = status();
is($st->{ledger}{in_flight}, scalar @kept,
	'ledger: only the other worker\'s in flight');
is(gate()->{in_flight}, scalar @kept, 'gate drain: only the other\'s');

# the ids are still refused for their TTL

my $r = parse_response(http_post('/v1/completions', '{"prompt":"p"}',
	headers => "X-Dynamo-Attempt-Id: $gone[0]\r\n"));
is($r->{status}, 409, 'settled id refused');

# one warning, naming the worker process

is(scalar $t->log_lines('error.log',
	qr/\[warn\].*attempt\(s\) in flight in worker process $victim, which exited, ended as failed/), 1,
	'one warning naming the process');

close $_ for values %sock;

ok($t->wait_for(sub { status()->{ledger}{in_flight} == 0 }, 10),
	'the rest end when their clients go');

###############################################################################

sub get8085 {
	my ($uri) = @_;

	return parse_response(http("GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n",
		PeerAddr => '127.0.0.1:' . port(8085)));
}

sub attempt_api {
	my ($id) = @_;

	my $r = get8085("/rl/attempts/$id");
	return $r && $r->{status} == 200 ? decode_json($r->{body}) : {};
}

sub status {
	return decode_json(get8085('/rl/status')->{body});
}

sub gate {
	return decode_json(get8085('/rl/gate')->{body});
}

###############################################################################
