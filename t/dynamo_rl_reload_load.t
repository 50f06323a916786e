#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Reload under load and a crash in the middle of a refresh (issue 6, item
# 5; reliability note cases L1 and L4):
#
# - two graceful reloads while SSE streams are open and a steady stream of
#   requests runs: no request fails, the streams finish in the worker
#   processes that took them (their attempts end "succeeded"), the old
#   worker processes exit, and the zone keeps a closed gate, a ledger
#   record and the discovery snapshot's generation;
# - a worker process killed with SIGKILL while its discovery refresh is in
#   flight: a request that waited for that flight in the other worker
#   process takes it over at once, and the respawned worker process allows
#   an admin call at once, instead of waiting out the 60 s after which a
#   flight is taken over anyway; the only alert is the master's "exited on
#   signal 9".

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call raw rl_conf start /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

$SIG{ALRM} = sub { die "test timed out\n" };
# durations and deadlines are those of normal speed, scaled under
# valgrind (Test::DynamoRL::scale)

alarm(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(42);

$t->write_file_expand('nginx.conf', nginx_conf('one'));
$t->run_fake_dynamo()->run();

# the worker process killed below

$t->allow_log(qr/worker process \d+ exited on signal 9/);

# helpers use these, not $t: a named sub that closed over $t would keep it
# alive past the END checks

my $DIR = $t->testdir();
my $FAKE = $t->fake_dir();
my $BIN = $ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx';
my $DEBUG = `$BIN -V 2>&1` =~ /--with-debug/;

###############################################################################

my $ID = '9007199254740993';
my $ADMIN = "/v1/rl/workers/$ID/engine/liveness_probe";
my $FRESH = "/fresh/$ID/engine/liveness_probe";

# the streams must outlast both reloads

my $STREAMS = 6;
my $EVENTS = 24;
my $INTERVAL = Test::DynamoRL::scale(250);

# zone state before the reloads: a snapshot, a finished attempt

my $r = call('POST', $ADMIN, port => 8083, body => '{}');
is($r->{status}, 200, 'before: admin call allowed');

my $gen = status()->{snapshot}{generation};
like($gen, qr/^[1-9]\d*$/, 'before: snapshot generation');
my $fetches = listener_fetches();

$r = call('POST', '/v1/completions', body => '{"prompt":"p"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'kept-1' ]);
is($r->{status}, 200, 'before: attempt kept-1');

my @old = worker_pids();
is(scalar @old, 2, 'before: two worker processes');

# SSE streams, then the gate closes behind them

my @streams = map {
	start('POST', '/v1/chat/completions',
		body => '{"messages":[{"role":"user","content":"hi"}],'
			. '"stream":true}',
		headers => [ 'X-Dynamo-Attempt-Id' => "sse-$_",
			'x-fake-scenario' => 'slow',
			'x-fake-events' => $EVENTS,
			'x-fake-interval-ms' => $INTERVAL ])
} 1 .. $STREAMS;

ok(Test::DynamoRL::wait_for(sub {
	!grep { (api($_, port => 8083)->{json}{state} // '') ne 'streaming' }
		map { "sse-$_" } 1 .. $STREAMS
}, 10), 'streams: all streaming');

my $g = gate_post('{"action":"close","reason":"reload test"}');
is($g->{state}, 'closed', 'gate closed');
my $epoch = $g->{epoch};

# steady traffic: an ungated location must answer 200, the gated one 503
# gate_closed, every time, from new connections

my $stop = "$DIR/stop-load";
my @loaders = map { loader($_) } 1 .. 2;

# load before, between and after the reloads: at least 40 requests, half
# of them gated, on top of those during the reloads

load_progress(10);

$t->write_file_expand('nginx.conf', nginx_conf('two'));
$t->reload();
ok(!$t->reload_failed(), 'first reload accepted');
my @mid = grep { my $p = $_; !grep { $_ == $p } @old } worker_pids();

load_progress(10);

$t->write_file_expand('nginx.conf', nginx_conf('three'));
$t->reload();
ok(!$t->reload_failed(), 'second reload accepted');

is(join(' ', map { api("sse-$_", port => 8083)->{json}{state} // 'none' }
	1 .. $STREAMS),
	join(' ', ('streaming') x $STREAMS),
	'reloads done while the streams were open');

load_progress(20);
$t->write_file('stop-load', '');

my %load = (ok => 0, gated => 0, fail => []);

for my $l (@loaders) {
	my $res = collect($l);
	$load{ok} += $res->{ok};
	$load{gated} += $res->{gated};
	push @{$load{fail}}, @{$res->{fail}};
}

is(scalar @{$load{fail}}, 0, 'load: no failed request')
	or diag(join "\n", @{$load{fail}}[0 .. min($#{$load{fail}}, 19)]);
cmp_ok($load{ok}, '>=', 20, "load: $load{ok} answered 200");
cmp_ok($load{gated}, '>=', 20, "load: $load{gated} refused by the gate");

is(parse_response(http_get('/version'))->{body}, 'three',
	'the last configuration is in place');

# the streams finish where they started

my @done = map { parse_response(http_end($_, timeout => 20)) } @streams;

is(scalar(grep { $_ && $_->{status} == 200 } @done), $STREAMS,
	'streams: all 200');
is(scalar(grep { $_ && !$_->{incomplete} && $_->{body} =~ /data: \[DONE\]\n\n\z/
	&& (() = $_->{body} =~ /^data: \{/mg) == $EVENTS } @done), $STREAMS,
	"streams: all $EVENTS events and [DONE]");

my @records = map { api("sse-$_", port => 8083)->{json} } 1 .. $STREAMS;

is(join(' ', map { $_->{state} // 'none' } @records),
	join(' ', ('succeeded') x $STREAMS), 'streams: attempts succeeded');

# the access log lines follow the answers: waited for

my %served;

Test::DynamoRL::wait_for(sub {
	%served = map { $_->{attempt} => $_->{pid} }
		grep { $_->{attempt} =~ /^sse-/ } access_log();
	return keys %served == $STREAMS;
}, 10);

is(scalar(grep { my $p = $served{"sse-$_"} // 0; grep { $_ == $p } @old }
	1 .. $STREAMS), $STREAMS, 'streams: served by the old worker processes');

# the old worker processes exit once their streams are done

ok(Test::DynamoRL::wait_for(sub { !grep { alive($_) } @old, @mid }, 10),
	'old worker processes exited');

my @now = worker_pids();
is(scalar @now, 2, 'two worker processes now');
ok(!grep({ my $p = $_; grep { $_ == $p } @old, @mid } @now),
	'all of them new');

# the zone kept its state

$g = gate();
is("$g->{state} $g->{reason} $g->{epoch}", "closed reload test $epoch",
	'zone: the gate is still closed, same epoch');

is(api('kept-1', port => 8083)->{json}{state}, 'succeeded',
	'zone: ledger record kept');

$r = call('POST', '/open/completions', body => '{"prompt":"p"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'kept-1' ]);
is($r->{status}, 409, 'zone: the kept id is still refused');

is(status()->{snapshot}{generation}, $gen, 'zone: snapshot generation');

$r = call('POST', $ADMIN, port => 8083, body => '{}');
is($r->{status}, 200, 'zone: admin call allowed after the reloads');
is(listener_fetches(), $fetches, 'zone: from the kept snapshot, no fetch');

###############################################################################

# a worker process killed while its refresh is in flight

$t->fake_set('discovery.delay_ms', Test::DynamoRL::scale(5000));

my $before = listener_fetches();
my $refreshes = status()->{counters}{discovery_refreshes};

# the leader: its refresh waits in the fake listener

my ($lead, $x) = connect_to(8083);
send_request($lead, 'POST', $FRESH, body => '{}');

ok(Test::DynamoRL::wait_for(sub { listener_fetches() > $before }, 5),
	'crash: refresh in flight');

# a waiter for that flight in the other worker process

my ($waiter, $y) = connect_to(8083, not => $x);
ok($waiter, 'crash: a connection to the other worker process');

# the next refresh is answered at once; the one in flight still waits

$t->fake_unset('discovery.delay_ms');

SKIP: {
skip 'no connection reached the other worker process', 2 unless $waiter;

send_request($waiter, 'POST', $FRESH, body => '{}');

# the waiter polls every 10 ms; it logs that it waits at debug level

if ($DEBUG) {
	Test::DynamoRL::wait_for(sub { scalar $t->log_lines('error.log',
		qr/\[debug\] $y#.*dynamo rl discovery: waiting for flight/) }, 5);

} else {
	sleep(0.5);
}

kill 'KILL', $x;
my $killed = time();

my $rb = parse_response(http_end($waiter, timeout => 10));
is($rb && $rb->{status}, 200, 'crash: the waiter took the flight over');
cmp_ok(time() - $killed, '<', Test::DynamoRL::scale(5),
	sprintf('crash: in %.2f s, not after 60 s', time() - $killed));

}

SKIP: {
skip 'no waiter, or no debug log', 1 unless $waiter && $DEBUG;

ok(scalar($t->log_lines('error.log',
	qr/\[debug\] $y#.*dynamo rl discovery: waiting for flight/)),
	'crash: the other worker process was waiting for the flight');

}

kill 'KILL', $x unless $waiter;

my $ra = http_end($lead, timeout => 5);
ok(!length $ra, 'crash: the leader\'s connection closed without an answer');

# the respawned worker process: an admin call that needs a refresh

my $respawned = Test::DynamoRL::wait_for(sub {
	my @w = worker_pids();
	my @new = grep { my $p = $_; !grep { $_ == $p } @now } @w;
	return @w == 2 && @new == 1 && !alive($x) ? $new[0] : undef;
}, 10);

ok($respawned, 'crash: a new worker process');

my ($c) = connect_to(8083, to => $respawned);
ok($c, 'crash: connected to the new worker process');

my $t2 = time();
my $rc = $c ? parse_response(do { send_request($c, 'POST', $FRESH,
	body => '{}'); http_end($c, timeout => 10) }) : undef;

is($rc && $rc->{status}, 200, 'crash: the new worker process allows a call');
cmp_ok(time() - $t2, '<', Test::DynamoRL::scale(5),
	sprintf('crash: within %.2f s', time() - $t2));

# more calls, on any worker process, each with a refresh

my @more = map { call('POST', $FRESH, port => 8083, body => '{}')->{status} }
	1 .. 4;
is("@more", '200 200 200 200', 'crash: later calls allowed');

my $st = status();
cmp_ok($st->{counters}{discovery_refreshes}{ok}, '>=', $refreshes->{ok} + 5,
	'crash: refreshes counted');
is("$st->{gate}{state} $st->{gate}{epoch}", "closed $epoch",
	'crash: the gate kept');
is(api('kept-1', port => 8083)->{json}{state}, 'succeeded',
	'crash: the ledger kept');

# nginx force-unlocks the zone's mutex only when the killed process held
# it; the refresh was waiting for the listener, so nothing was held

is(scalar($t->log_lines('error.log', qr/was locked by|\[crit\]/)), 0,
	'crash: no locked mutex, no crit');
is(scalar($t->log_lines('error.log', qr/exited on signal 9/)), 1,
	'crash: one worker process killed');

###############################################################################

alarm(0);

###############################################################################

sub nginx_conf {
	my ($version) = @_;

	return rl_conf(<<"EOF");

%%RL_MAIN workers=2 connections=1024%%

http {
    %%RL_HTTP 5m%%

    %%RL_ACCESS_LOG attempt status pid uri outcome%%

    %%RL_FRONTEND 8%%

    # the rollout listener

    server {
        listen 127.0.0.1:8080;

        %%RL_PROXY_KEEPALIVE unbuffered%%

        %%RL_REQUEST_PLANE%%

        location /open/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_pass http://frontend/v1/;
        }

        location = /version {
            return 200 $version;
        }
    }

    # the trusted listener; reuseport: each worker process has its own
    # socket, which its respawned successor takes over, so that
    # connections reach both

    server {
        listen 127.0.0.1:8083 reuseport;

        %%RL_ADMIN_LOCATION /_rl_discovery valid=1h%%

        location /fresh/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;
            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        location = /_rl_discovery {
            internal;
            proxy_pass http://127.0.0.1:8082/v1/rl/workers;
            proxy_read_timeout 30s;
        }

        %%RL_APIS gate attempts status%%
    }
}

EOF
}





sub status {
	return eval { decode_json(call('GET', '/rl/status', port => 8083)
		->{body}) } // {};
}

sub gate {
	return eval { decode_json(call('GET', '/rl/gate', port => 8083)
		->{body}) } // {};
}

sub gate_post {
	return eval { decode_json(call('POST', '/rl/gate', port => 8083,
		body => shift)->{body}) } // {};
}

sub access_log {
	open my $fh, '<', "$DIR/rl.log" or return ();
	return map { eval { decode_json($_) } // () } <$fh>;
}

sub listener_fetches {
	open my $fh, '<', "$FAKE/listener.log" or return 0;
	my @lines = grep { /"GET"/ } <$fh>;
	return scalar @lines;
}

sub min {
	return $_[0] < $_[1] ? $_[0] : $_[1];
}

# a load process: requests from new connections until the stop file
# appears; its results come back through a pipe as one JSON line

sub loader {
	my ($n) = @_;

	pipe(my $rd, my $wr) or die "pipe: $!\n";

	my $pid = fork() // die "fork: $!\n";

	if ($pid == 0) {
		close $rd;

		my %res = (ok => 0, gated => 0, fail => []);
		my $i = 0;

		# a byte per answered request, for load_progress()

		open my $count, '>>', "$DIR/load-$n.count" or die "$!\n";
		$count->autoflush(1);

		# it stops on the stop file, or when the test is gone, or after
		# a minute at most

		my $parent = getppid();
		my $deadline = time() + 60;

		until (-e $stop || getppid() != $parent || time() > $deadline) {
			$i++;
			my $gated = $i % 2;
			my $uri = $gated ? '/v1/completions' : '/open/completions';
			my $t = time();

			my $raw = quiet_http(raw('POST', $uri, body => '{"prompt":"p"}'));
			my $r = parse_response($raw);

			if ($r && !$gated && $r->{status} == 200
				&& $r->{body} =~ /"text_completion"/)
			{
				$res{ok}++;

			} elsif ($r && $gated && $r->{status} == 503
				&& ($r->{headers}{'x-dynamo-rl-reason'} // '')
					eq 'gate_closed')
			{
				$res{gated}++;

			} else {
				push @{$res{fail}}, sprintf('%.3f %s %s: %s', $t,
					"loader $n", $uri, $r ? "status $r->{status}"
					: 'no response (' . length($raw // '') . ' bytes)');
			}

			print $count '.';
		}

		print $wr encode_json(\%res), "\n";
		close $wr;
		POSIX::_exit(0);
	}

	close $wr;

	return { pid => $pid, fh => $rd };
}

# waits until the load processes have done $n more requests; a load that
# stopped makes the counts of the "load:" tests fail

sub load_progress {
	my ($n) = @_;

	my $done = sub {
		my $c = 0;
		$c += -s $_ // 0 for glob("$DIR/load-*.count");
		return $c;
	};

	my $want = $done->() + $n;

	Test::DynamoRL::wait_for(sub { $done->() >= $want }, 10);
}

# a request without the harness's diagnostics, which would go to the TAP
# stream of the test from this process

sub quiet_http {
	my ($request) = @_;

	local $SIG{PIPE} = 'IGNORE';

	my $s = IO::Socket::INET->new(Proto => 'tcp', Timeout => 5,
		PeerAddr => '127.0.0.1:' . port(8080)) or return undef;

	syswrite($s, $request);

	my $sel = IO::Select->new($s);
	my $deadline = time() + 10;
	my $reply = '';

	while ((my $left = $deadline - time()) > 0) {
		last unless $sel->can_read($left);
		last unless sysread($s, $reply, 65536, length $reply);
	}

	return $reply;
}

sub collect {
	my ($l) = @_;

	my $fh = $l->{fh};
	my $line = <$fh> // '';
	waitpid($l->{pid}, 0);

	return eval { decode_json($line) }
		// { ok => 0, gated => 0, fail => [ 'loader: no result' ] };
}

sub worker_pids {
	open my $fh, '<', "$DIR/nginx.pid" or return ();
	my $master = <$fh> // '';
	chomp $master;

	my @pids;

	for my $stat (glob('/proc/[0-9]*/stat')) {
		open my $sf, '<', $stat or next;
		my $line = <$sf> // '';

		next unless $line =~ /^(\d+) \((.*)\) (\S) (\d+)/;
		next unless $4 == $master && $3 ne 'Z';

		push @pids, $1;
	}

	return sort { $a <=> $b } @pids;
}

sub alive {
	my ($pid) = @_;

	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $line = <$fh> // '';

	return $line =~ /^\d+ \(.*\) ([^ZX])/ ? 1 : 0;
}

# the worker process that accepted the connection from local port $lport
# to nginx's port $sport: the socket's inode in /proc/net/tcp, then the
# process that has it open

sub owner {
	my ($sport, $lport) = @_;

	open my $fh, '<', '/proc/net/tcp' or return undef;

	my $inode;

	while (my $line = <$fh>) {
		my @f = split ' ', $line;
		next unless @f > 9 && $f[1] =~ /:([0-9A-F]{4})$/;
		next unless hex($1) == $sport;
		next unless $f[2] =~ /:([0-9A-F]{4})$/ && hex($1) == $lport;

		$inode = $f[9];
		last;
	}

	return undef unless $inode;

	for my $pid (worker_pids()) {
		opendir(my $dh, "/proc/$pid/fd") or next;

		for my $fd (readdir $dh) {
			my $l = readlink("/proc/$pid/fd/$fd") // next;
			return $pid if $l eq "socket:[$inode]";
		}
	}

	return undef;
}

# a connection accepted by a worker process: any (and which), or one
# other than "not", or exactly "to"; tries up to 50 connections

sub connect_to {
	my ($port, %o) = @_;

	for (1 .. 50) {
		my $s = IO::Socket::INET->new(Proto => 'tcp',
			PeerAddr => '127.0.0.1:' . port($port)) or next;

		my $pid = Test::DynamoRL::wait_for(sub {
			owner(port($port), $s->sockport())
		}, 2);

		next unless $pid;

		return ($s, $pid) if $o{to} ? $pid == $o{to}
			: $o{not} ? $pid != $o{not} : 1;

		close $s;
	}

	return;
}

sub send_request {
	my ($s, $method, $uri, %o) = @_;

	local $SIG{PIPE} = 'IGNORE';
	my $data = raw($method, $uri, %o);
	syswrite($s, $data) == length($data) or die "send: $!\n";
}

###############################################################################
