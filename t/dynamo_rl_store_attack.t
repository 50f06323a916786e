#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attacks on the shared store (dynamo_rl_store): each block is a finding
# of the review of the store, written against the contract (DESIGN.md,
# "Shared state across gateway replicas"; the docs' "When the store is
# unavailable"), and marked TODO until the module is fixed.
#
# Two replicas in front of the fake Dynamo, each its own nginx with one
# worker process, sharing a real redis-server (an append-only file, so
# that a restart keeps the data) on a free loopback port, started and
# stopped here by its PID:
#
#   a  on_error=fail, reaches the store through a TCP relay of this test
#      that can lose a reply: it forwards a command to the store, reads
#      the store's reply and closes the connection instead of passing it
#   b  on_error=local, connected to the store directly
#
# finding 1  a claim that ran in the store but whose reply was lost with
#            the connection answers 503 "nothing was sent, retry later",
#            and leaves the id claimed for the lease (1h): the retry gets
#            409 with X-Should-Retry: false, and nothing is ever forwarded
# finding 2  on_error=local: an attempt this very replica forwarded
#            through the store is unknown to its zone: with the store
#            down, the attempts API answers 404 (invites a resubmit) and
#            the same id is forwarded a second time by the same replica
# finding 3  on_error=local: a replica that starts while the store is
#            unreachable has never read the gate, yet its ledger location
#            forwards (the gate was closed in the store), and its gate API
#            says "open"
# finding 4  a binary upgrade (USR2) of a replica with a generation in
#            flight: the new instance reports the replica's heartbeat with
#            its own zone's count, 0, and the fleet says "drained" while
#            the old instance still streams
# finding 5  the store answers every claim with an error (-OOM with
#            maxmemory and noeviction, which the docs require): one error
#            line per request, without the store's message
# finding 6  a worker process that dies leaves its attempts in the store
#            "streaming" for the lease (1h): nothing settles them as
#            failed, worker_exited, as the zone does within seconds

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ call json output start time_limit /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

time_limit(180);

my $REDIS = '/usr/bin/redis-server';
my $CLI = '/usr/bin/redis-cli';

plan(skip_all => "no $REDIS or $CLI (apt-get install redis-server"
	. ' redis-tools)') unless -x $REDIS && -x $CLI;

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(39);
my $t2 = Test::DynamoRL->new();

my $d = $t->testdir();

mkdir "$d/relay" or die "cannot create $d/relay: $!\n";

$t->write_file_expand('nginx.conf', conf('a', 8080, 8070,
	'redis://127.0.0.1:8380 on_error=fail'));
$t2->write_file_expand('nginx.conf', conf('b', 8180, 8170,
	'redis://127.0.0.1:8379 on_error=local'));

my $redis;

END { redis_stop() if defined $redis && $$ == ($t->{_pid} // 0); }

redis_start();

$t->run_fake_dynamo();
$t->run_daemon(\&relay, port(8380), port(8379), "$d/relay");
$t->waitforsocket('127.0.0.1:' . port(8380)) or die "no relay\n";

$t->run();
$t2->run();

# both replicas connected, the gate record created

for my $r ([ 8070, 'a' ], [ 8170, 'b' ]) {
	ok(wait_for(sub { store_up($r->[0]) }, 10),
		"replica $r->[1] connected");
}

ok(wait_for(sub { post(8080, 'warm-a')->{status} == 200 }, 10)
	&& wait_for(sub { post(8180, 'warm-b')->{status} == 200 }, 10),
	'both replicas forward');

my ($r, $j);

###############################################################################

# finding 1: the claim ran in the store, its reply was lost with the
# connection; the request was answered "nothing was sent, retry later"

$t->write_file('relay/cut', 'burn-1');

$r = post(8080, 'burn-1');

is($r->{status}, 503, 'lost reply: 503');
is($r->{headers}{'x-dynamo-rl-reason'}, 'store_unavailable',
	'lost reply: store_unavailable, nothing sent');
ok(!-e "$d/relay/cut", 'lost reply: the relay dropped the claim\'s reply');

ok(wait_for(sub { store_up(8070) }, 10), 'lost reply: reconnected');

# whatever was queued for the id has had its chance to reach the store

post(8080, 'lost-reply-flush');

{
	# fixed: finding 1: a claim answered 503 after its reply was lost
	# stays claimed for the lease, the retry is refused

	is(redis('HGET', '{dynamo-rl}:a:burn-1', 'st'), '',
		'lost reply: the id is not left claimed in the store');

	$r = post(8080, 'burn-1');

	is($r->{status}, 200, 'lost reply: the retry is forwarded')
		or diag("retry: $r->{status} "
			. ($r->{headers}{'x-dynamo-rl-reason'} // ''));
	is(forwards('burn-1'), 1, 'lost reply: forwarded once in all');
}

###############################################################################

# finding 2: on_error=local, the store goes away after replica b forwarded
# an attempt through it

is(post(8180, 'local-1')->{status}, 200, 'local: forwarded through the store');

ok(wait_for(sub {
	my $a = call('GET', '/rl/attempts/local-1', port => 8170);
	return $a->{status} == 200 && json($a)->{state} eq 'succeeded';
}, 10), 'local: the store has the attempt');

redis_stop();

ok(wait_for(sub { !store_up(8170) }, 10), 'local: the store is down');

{
	# fixed: finding 2: on_error=local forgets the attempts this replica
	# forwarded through the store

	$r = call('GET', '/rl/attempts/local-1', port => 8170);

	isnt($r->{status}, 404, 'local: the attempts API never says unknown'
		. ' for an attempt this replica forwarded')
		or diag($r->{body});

	$r = post(8180, 'local-1');

	is($r->{status}, 409, 'local: the same replica refuses the id again')
		or diag("again: $r->{status} "
			. ($r->{headers}{'x-dynamo-rl-reason'} // '') . "\n"
			. $t->_tail('error.log'));
	is(forwards('local-1'), 1, 'local: forwarded once');
}

###############################################################################

# finding 3: on_error=local, the gate closed in the store; replica b
# starts again (a fresh zone) while the store is unreachable

redis_start();

ok(wait_for(sub { store_up(8170) && store_up(8070) }, 15),
	'new replica: the store is back');

$r = gate(8070, { action => 'close', reason => 'attack', lease => '120s' });

is($r->{status}, 200, 'new replica: the gate closed');

ok(wait_for(sub { json(call('GET', '/rl/gate', port => 8170))->{state}
	eq 'closed' }, 10), 'new replica: b read the close');

redis_stop();

$t2->stop_nginx();
$t2->run();

{
	# fixed: finding 3: on_error=local admits on a replica that never read
	# the gate

	$r = post(8180, 'new-replica-1');

	is($r->{status}, 503, 'new replica: nothing admitted before the gate'
		. ' is read')
		or diag("new replica: $r->{status}");
	is(forwards('new-replica-1'), 0, 'new replica: nothing forwarded');

	$r = call('GET', '/rl/gate', port => 8170);

	ok($r->{status} == 503 || json($r)->{state} ne 'open',
		'new replica: the gate API does not say open')
		or diag($r->{body});
}

redis_start();

ok(wait_for(sub { store_up(8170) && store_up(8070) }, 15),
	'upgrade: the store is back');

###############################################################################

# finding 4: a binary upgrade of replica a while it streams a generation

$r = gate(8070, { action => 'open' });

is($r->{status}, 200, 'upgrade: the gate open');

ok(wait_for(sub { json(call('GET', '/rl/gate', port => 8070))->{state}
	eq 'open' }, 10), 'upgrade: a read the open');

my $sse = stream('sse-1', 8080);

ok(wait_for(sub { attempt_state('sse-1') eq 'streaming' }, 10),
	'upgrade: streaming');

$r = gate(8170, { action => 'close', reason => 'refresh', lease => '120s' });

is($r->{status}, 200, 'upgrade: the gate closed');

ok(wait_for(sub {
	my $f = fleet();
	return $f && $f->{replicas} == 2 && $f->{acked} == 2
		&& $f->{in_flight} == 1;
}, 10), 'upgrade: the fleet acked, one in flight');

my $old = $t->master();

$t->upgrade(1);

kill 'QUIT', $old;

# six heartbeats: the old instance's report, if it is still written, and
# the new one's, both had their turn

my $drained = wait_for(sub { my $f = fleet(); $f && $f->{drained} }, 3);

is(attempt_state('sse-1'), 'streaming', 'upgrade: still streaming');

{
	# fixed: finding 4: after a binary upgrade the fleet says drained
	# while the old instance streams

	ok(!$drained, 'upgrade: not drained while a generation is in flight');
}

close $sse;

###############################################################################

# finding 5: the store refuses every write (maxmemory with noeviction)

$r = gate(8170, { action => 'open' });

is($r->{status}, 200, 'errors: the gate open');

my $n = 0;

ok(wait_for(sub { post(8080, 'pre-oom-' . $n++)->{status} == 200 }, 10),
	'errors: a forwards again');

redis('CONFIG', 'SET', 'maxmemory', '1');

my $mark = -s "$d/error.log";
my @codes = map {
	my $o = post(8080, "oom-$_");
	"$o->{status} " . ($o->{headers}{'x-dynamo-rl-reason'} // '');
} 1 .. 20;

redis('CONFIG', 'SET', 'maxmemory', '0');

is(join(' ', grep { $_ ne '503 store_unavailable' } @codes), '',
	'errors: 503 store_unavailable to each');

my @errors = grep { /\[error\].*dynamo rl store/ } log_since("$d/error.log",
	$mark);

{
	# fixed: finding 5: one error line per request while the store answers
	# with errors, without its message

	ok(@errors <= 2, 'errors: at most one line per transition')
		or diag(scalar(@errors) . " lines");
	ok(grep({ /OOM/ } @errors), 'errors: the store\'s own message logged');
}

###############################################################################

# finding 6: a worker process of replica b dies while its attempt streams;
# without a store, the zone settles it as failed, worker_exited

my $sse2 = stream('sse-2', 8180);

ok(wait_for(sub { attempt_state('sse-2') eq 'streaming' }, 10),
	'worker died: streaming');

my ($worker) = $t2->worker_pids();

ok($worker && kill('KILL', $worker), 'worker died: killed');

ok(wait_for(sub { my ($w) = $t2->worker_pids(); $w && $w != $worker
	&& store_up(8170) }, 10), 'worker died: another worker connected');

{
	# fixed: finding 6: the store's records of a worker that died stayed
	# in flight for the lease

	ok(wait_for(sub {
		my $a = json(call('GET', '/rl/attempts/sse-2', port => 8170));
		return ($a->{state} // '') eq 'failed'
			&& ($a->{reason} // '') eq 'worker_exited';
	}, 10), 'worker died: the attempt ends failed, worker_exited');
}

close $sse2;

###############################################################################

sub conf {
	my ($replica, $port, $trusted, $store) = @_;

	return <<"EOF";

%%TEST_GLOBALS%%

worker_processes 1;

# the new binary of an upgrade keeps the sanitizer runtime of make asan
env LD_PRELOAD;
env ASAN_OPTIONS;
env LSAN_OPTIONS;

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    dynamo_rl_zone zone=rl:4m;
    dynamo_rl_store $store replica=$replica timeout=250ms;

    upstream frontend {
        server 127.0.0.1:8081;
        keepalive 4;
    }

    server {
        listen 127.0.0.1:$port;

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }

    server {
        listen 127.0.0.1:$trusted;

        location = /rl/gate { dynamo_rl_gate_api; }
        location /rl/attempts/ { dynamo_rl_attempts_api; }
        location = /rl/status { dynamo_rl_status; }
        location = /metrics { dynamo_rl_metrics; }
    }
}

EOF
}

sub post {
	my ($port, $id) = @_;

	return call('POST', '/v1/completions', port => $port,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ],
		body => '{"prompt":"x"}');
}

sub gate {
	my ($port, $body) = @_;

	return call('POST', '/rl/gate', port => $port,
		body => JSON::PP->new->canonical->encode($body));
}

sub fleet {
	my $g = json(call('GET', '/rl/gate', port => 8170));
	return $g->{fleet};
}

# a stream of 300 events 200 ms apart under attempt id $id, on $port:
# returns the socket

sub stream {
	my ($id, $port) = @_;

	return start('POST', '/v1/completions', port => $port,
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-events' => 300, 'x-fake-interval-ms' => 200 ],
		body => '{"prompt":"x","stream":true}');
}

sub attempt_state {
	my ($id) = @_;
	return json(call('GET', "/rl/attempts/$id", port => 8170))->{state}
		// '';
}

sub store_up {
	my ($port) = @_;

	my $s = json(call('GET', '/rl/status', port => $port))->{store};

	return ref $s eq 'HASH' && JSON::PP::is_bool($s->{up}) && $s->{up};
}

sub forwards {
	my ($id) = @_;

	return scalar grep {
		($_->{headers}{'x-dynamo-attempt-id'} // '') eq $id
	} @{$t->fake_records('frontend')};
}

sub log_since {
	my ($path, $offset) = @_;

	open my $fh, '<', $path or return;
	seek $fh, $offset // 0, 0;

	return <$fh>;
}

sub wait_for {
	return Test::DynamoRL::wait_for(@_);
}

# a redis-server of our own: loopback, a free port, an append-only file
# in the test directory, so that a restart keeps the gate and the records

sub redis_start {
	$redis = fork() // die "cannot fork: $!\n";

	if ($redis == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', "$d/redis.out";
		open STDERR, '>&', \*STDOUT;

		{
			exec $REDIS, '--port', port(8379),
				'--bind', '127.0.0.1', '--dir', $d,
				'--save', '', '--appendonly', 'yes',
				'--appendfsync', 'always', '--daemonize', 'no';
		}

		POSIX::_exit(127);
	}

	wait_for(sub { redis('PING') eq 'PONG' }, 10)
		or die "redis-server did not start\n";
}

sub redis_stop {
	return unless defined $redis;

	kill 'TERM', $redis;

	wait_for(sub { waitpid($redis, WNOHANG) == $redis }, 10)
		or do { kill 'KILL', $redis; waitpid($redis, 0); };

	undef $redis;
}

sub redis {
	my (@args) = @_;
	return output($CLI, '-h', '127.0.0.1', '-p', port(8379), @args);
}

# a TCP relay to the store; while "cut" holds a string, the first command
# bytes that contain it go to the store, the store's reply is read and
# dropped, and the connection is closed (and "cut" removed)

sub relay {
	my ($listen, $to, $dir) = @_;

	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$listen",
		Listen => 64, ReuseAddr => 1) or die "relay: $!\n";

	local $SIG{CHLD} = 'IGNORE';

	while (1) {
		my $c = $l->accept() or next;
		my $pid = fork() // die "relay: cannot fork: $!\n";

		if ($pid) {
			close $c;
			next;
		}

		close $l;

		my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$to")
			or POSIX::_exit(0);
		my $sel = IO::Select->new($c, $s);

		while (1) {
			for my $h ($sel->can_read()) {
				my $n = sysread($h, my $buf, 65536);
				POSIX::_exit(0) unless $n;

				if ($h == $s) {
					syswrite($c, $buf);
					next;
				}

				my $cut = '';

				if (open my $fh, '<', "$dir/cut") {
					local $/;
					$cut = <$fh> // '';
				}

				syswrite($s, $buf);

				next unless length $cut
					&& index($buf, $cut) >= 0;

				IO::Select->new($s)->can_read(5);
				sysread($s, my $reply, 65536);
				unlink "$dir/cut";
				POSIX::_exit(0);
			}
		}
	}
}

###############################################################################
