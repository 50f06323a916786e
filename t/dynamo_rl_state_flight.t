#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for dynamo_rl_zone state=: an attempt that streams across a
# reload that resizes the zone (a new zone) and across a binary upgrade
# (USR2, then QUIT of the old master) stays in flight in the new zone,
# owned by the old worker process that streams it, and ends as that
# process ends it (succeeded); if that process is killed before it ends
# the attempt, the new zone settles it failed, worker_exited.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_conf slurp time_limit /;

###############################################################################

time_limit(240);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(27);

my $d = $t->testdir();
my $STATE = "$d/state/rl.state";

$t->write_file_expand('nginx.conf', nginx_conf('1m', 8076));
$t->run_fake_dynamo()->run();

###############################################################################

my ($s, $a, $body, @old);

# a reload that resizes the zone: the new zone takes the attempt from the
# old one in flight, and the old worker's end reaches it through the file

$s = stream('flight-reload', 8086, 30);

ok(streaming('flight-reload', 8076), 'resize: streaming before the reload');

$t->write_file_expand('nginx.conf', nginx_conf('2m', 8076));
$t->reload();

is(scalar $t->log_lines('error.log', qr/dynamo_rl zone "rl" took \d+ /
	. qr/attempts and the gate at epoch \d+ from zone "rl" of the /
	. qr/previous configuration/), 1, 'resize: a new zone');

$a = api('flight-reload', 8076);
is($a->{state}, 'streaming', 'resize: still streaming in the new zone');

$a = settled('flight-reload', 8076);
is($a->{state} // '', 'succeeded', 'resize: succeeded once the old worker '
	. 'finished') or diag(explain($a));
ok($a->{duration_ms} > 0, 'resize: a duration');

$body = drain($s);
like($body, qr/data: \[DONE\]/, 'resize: the client got the whole stream');

# a binary upgrade: the new master reads the attempt in flight from the
# file, owned by a worker of the old master; QUIT of the old master lets
# that worker finish

$s = stream('flight-upgrade', 8086, 60);

ok(streaming('flight-upgrade', 8076), 'upgrade: streaming before USR2');
ok($t->wait_for(sub { (slurp($STATE) // '')
		=~ /^a flight-upgrade 2 200 1 \d+ \d+ - - \d+$/m }, 10),
	'upgrade: in the state file, in flight, with its owner');

$t->write_file_expand('nginx.conf', nginx_conf('2m', 8075));

my $old = $t->master();
my $new = $t->upgrade(2);

$a = api('flight-upgrade', 8075);
is($a->{state}, 'streaming', 'upgrade: streaming in the new master');

kill 'QUIT', $old;

$a = api('flight-upgrade', 8075);
is($a->{state}, 'streaming', 'upgrade: streaming after QUIT of the old');

$a = settled('flight-upgrade', 8075);
is($a->{state} // '', 'succeeded', 'upgrade: succeeded once the old master\'s '
	. 'worker finished');

$body = drain($s);
like($body, qr/data: \[DONE\]/, 'upgrade: the client got the whole stream');

$t->upgrade_finish();

ok(!Test::DynamoRL::_alive($old), 'upgrade: old master gone');

# the old worker killed before it ends the attempt: failed, worker_exited

$s = stream('flight-killed', 8085, 150);

ok(streaming('flight-killed', 8075), 'killed: streaming before the reload');

@old = $t->worker_pids();

$t->write_file_expand('nginx.conf', nginx_conf('1m', 8075));
$t->reload();

$a = api('flight-killed', 8075);
is($a->{state}, 'streaming', 'killed: still streaming in the new zone');

# the other old worker, with no request, exits

my @owner;

$t->wait_for(sub {
	@owner = grep { Test::DynamoRL::_alive($_) } @old;
	return @owner == 1;
}, 5);

is(scalar @owner, 1, 'killed: one old worker streams');

$t->allow_log(qr/worker process $_ exited on signal 9/) for @owner;

kill 'KILL', @owner;

$a = settled('flight-killed', 8075, 5);
is(join(' ', $a->{state} // '', $a->{reason} // ''), 'failed worker_exited',
	'killed: failed, worker_exited within 5 s');

is(api('flight-killed', 8075)->{state}, 'failed', 'killed: stays failed');
close $s;

# the next reload's new zone takes the ended attempt as ended

$t->write_file_expand('nginx.conf', nginx_conf('2m', 8075));
$t->reload();

$a = api('flight-killed', 8075);
is(join(' ', $a->{state} // '', $a->{reason} // ''), 'failed worker_exited',
	'killed: still failed in the next zone');

# a stop with TERM cuts a stream: the file has the attempt in flight, and
# the next start, neither a reload nor an upgrade, knows that no process
# of the file runs any more

$s = stream('flight-cold', 8085, 150);

ok(streaming('flight-cold', 8075), 'cold: streaming');

my $master = $t->master();
kill 'TERM', $master;
$t->wait_for(sub { !Test::DynamoRL::_alive($master) }, 10);
$t->stop_nginx();
close $s;

like(slurp($STATE) // '', qr/^a flight-cold 2 200 1 \d+ \d+ - - \d+$/m,
	'cold: in the state file, in flight, with its owner');

$t->run();

$a = api('flight-cold', 8075);
is(join(' ', $a->{state} // '', $a->{reason} // ''), 'failed worker_exited',
	'cold: failed, worker_exited at once');

# the reason is in the file too: a restart keeps it

$t->stop_nginx();
$t->run();

$a = api('flight-cold', 8075);
is(join(' ', $a->{state} // '', $a->{reason} // ''), 'failed worker_exited',
	'cold: the reason kept across a restart');

# an old worker process other than the first, which exits at once, ends
# one attempt while it streams another: the end reaches the new zone then,
# not when the process exits; reuseport spreads the connections, and the
# debug log says which process took each

$t->stop_nginx();
$t->write_file_expand('nginx.conf', nginx_conf('1m', 8075, 'reuseport'));
$t->run();

my ($w0, $w1) = $t->worker_pids();

my ($sb, $idb) = owned_by($w1, 'flight-long', 150);
my ($sa, $ida) = owned_by($w1, 'flight-short', 25);

ok($sa && $sb, 'second worker: streams two attempts');

$t->write_file_expand('nginx.conf', nginx_conf('2m', 8075, 'reuseport'));
$t->reload();

$a = settled($ida // '', 8075, 15);
is($a->{state} // '', 'succeeded', 'second worker: one attempt ended');
is(api($idb // '', 8075)->{state}, 'streaming',
	'second worker: the other still streaming');
ok(Test::DynamoRL::_alive($w1), 'second worker: the old process still runs');

drain($sa) if $sa;
close $sb if $sb;

###############################################################################

sub nginx_conf {
	my ($size, $extra, $listen) = @_;

	$listen //= '';

	# 8075 and 8085 for the new master of an upgrade, 8076 and 8086 for
	# the old one

	my $request = $extra + 10;

	return rl_conf(<<"EOF");

%%TEST_GLOBALS%%

worker_processes 2;

# a binary upgrade passes on only these: make asan's runtime and options
env LD_PRELOAD;
env ASAN_OPTIONS;
env LSAN_OPTIONS;

events {
    worker_connections 1024;
}

http {
    %%RL_HTTP $size state=$STATE%%

    %%RL_FRONTEND%%

    server {
        %%RL_LISTEN 8080 $listen $request $listen%%

        %%RL_REQUEST_PLANE unbuffered%%
    }

    server {
        %%RL_LISTEN 8070 $extra%%

        %%RL_APIS gate attempts%%
    }
}

EOF
}

# a slow stream of $events events 200 ms apart, left for the kernel's
# buffers to take until drain() reads it

sub stream {
	my ($id, $p, $events) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($p))
		or die "connect: $!\n";

	my $body = '{"model":"m","prompt":"hello","stream":true}';

	syswrite($s, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\nX-Fake-Scenario: slow\r\n"
		. "X-Fake-Events: $events\r\nX-Fake-Interval-Ms: 200\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body");

	return $s;
}

# a stream whose connection the worker process $pid took: others are
# closed (canceled) and tried again under another id

sub owned_by {
	my ($pid, $id, $events) = @_;

	for my $try (1 .. 40) {
		my $s = stream("$id-$try", 8085, $events);
		my $owner;

		my $re = qr/(\d+)#\d+: \*\d+ dynamo rl request: attempt /
			. qr/"\Q$id-$try\E" from client/;

		$t->wait_for(sub {
			($owner) = map { /$re/ ? $1 : () }
				$t->log_lines('error.log', $re);
			return defined $owner;
		}, 5);

		if (defined $owner && $owner == $pid) {
			return $t->wait_for(sub {
				(api("$id-$try", 8075)->{state} // '') eq 'streaming' }, 5)
				? ($s, "$id-$try") : ();
		}

		close $s;
	}

	return;
}

sub drain {
	my ($s) = @_;

	my ($buf, $sel) = ('', IO::Select->new($s));

	while ($sel->can_read(30)) {
		sysread($s, $buf, 65536, length $buf) or last;
	}

	close $s;

	return $buf;
}

sub api {
	my ($id, $p) = @_;
	return http_json("/rl/attempts/$id",
		PeerAddr => '127.0.0.1:' . port($p))->{json} // {};
}

sub streaming {
	my ($id, $p) = @_;
	return $t->wait_for(sub { (api($id, $p)->{state} // '') eq 'streaming' },
		10);
}

sub settled {
	my ($id, $p, $within) = @_;

	my $a = {};

	$t->wait_for(sub {
		$a = api($id, $p);
		return ($a->{state} // 'streaming') !~ /^(?:accepted|streaming)$/;
	}, $within // 40);

	return $a;
}

###############################################################################
