#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# examples/rl-refresh in its shared mode against real replicas (issue
# 13): two nginx instances, A and B, whose dynamo_rl_store is one
# Debian redis-server, in front of the fake Dynamo; the client is given
# both replicas' trusted listeners.
#
# - a refresh held by an SSE stream in flight on A: the gate in the
#   store closed once, B refuses generation with 503 gate_closed, the
#   client keeps polling and calls no worker; once the stream ends it
#   completes, the gate opened once (the epoch moved by 2), and every
#   worker was paused after the close and resumed before the open;
# - B's nginx stopped by its pid during a refresh: B shows as lost, the
#   client names it and waits, then fails after --drain-timeout with the
#   gate left closed; run again with --ignore-lost, it completes.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use POSIX qw/ WNOHANG /;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ forwarded is_false iso_ms json_lines
	read_until refresh_finish refresh_output refresh_python refresh_start
	start time_limit worker_counts /;
use Test::DynamoRL::Redis qw/ gate gen reason replica_conf store_key
	wait_gate /;

###############################################################################

time_limit(Test::DynamoRL::scale(240));

plan(skip_all => 'no python3 3.6') unless refresh_python();

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(37 + 2);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $PARAMS = 'timeout=' . Test::DynamoRL::scale(1) . 's heartbeat=500ms'
	. ' gate_poll=100ms gate_stale=2s';

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $redis->url(),
	params => $PARAMS, trusted => 1));
$tb->write_file_expand('nginx.conf', replica_conf(%B,
	store => $redis->url(), params => $PARAMS, trusted => 1));

$t->run_fake_dynamo()->run();
$tb->run();

###############################################################################

my $GA = 'http://127.0.0.1:' . port($A{api});
my $GB = 'http://127.0.0.1:' . port($B{api});

my @SEQUENCE = map { "/engine/$_" } qw/ pause_generation
	update_weights_from_disk flush_cache resume_generation
	get_weight_version /;

my ($run, $res, $r, $g, $s, $e, $mark);

$g = wait_gate(\%A, sub { ($_[0]{fleet}{replicas} // 0) == 2 });
is("$g->{state} $g->{fleet}{replicas}", 'open 2', 'start: open, 2 replicas');

###############################################################################

# a refresh held by a stream in flight on A

$e = $g->{epoch};
$mark = worker_counts($t);
$s = stream('held-1');

$run = spawn('v1');

$g = wait_gate(\%B, sub { ($_[0]{state} // '') eq 'closed'
	&& ($_[0]{fleet}{acked} // 0) == 2 });

is($g->{epoch}, $e + 1, 'held: closed, epoch +1');
cmp_ok($g->{fleet}{in_flight}, '>=', 1, 'held: the stream in flight');
ok(is_false($g->{fleet}{drained}), 'held: not drained');

my $closed = iso_ms($g->{changed});

$r = gen(\%B, 'held-b');
is($r->{status} . ' ' . (reason($r) // '-'), '503 gate_closed',
	'held: generation through B refused');
ok(defined $r->{headers}{'retry-after'}, 'held: with Retry-After');
is(forwarded($t, 'held-b'), 0, 'held: nothing forwarded');

# examples/dynamo-rl.conf's /verify/v1/, "dynamo_rl_gate off" with the
# ledger on: with a store, the claim is made whatever the gate

is(gen({ listen => $A{api} }, 'held-verify', '/verify')->{status},
	200, 'held: /verify/v1/ on A passes the closed gate');
is(gen({ listen => $A{api} }, 'held-verify', '/verify')->{status},
	409, 'held: and its id is used up on A');
is(gen({ listen => $B{api} }, 'held-verify', '/verify')->{status},
	409, 'held: and on B');

# the client keeps reading the gate, and calls no worker meanwhile

my $polls = gate_reads();

ok(Test::DynamoRL::wait_for(sub { gate_reads() >= $polls + 10 }, 10),
	'held: the client polls the gate');
ok(!waitpid($run->{pid}, WNOHANG), 'held: the client waits');
is(scalar(keys %{calls($mark)}), 0, 'held: no worker called');

close $s;

$res = refresh_finish($run);

is($res->{rc}, 0, 'held: exit 0 once the stream ended') or diag($res->{out});
is(scalar(() = $res->{out} =~ /^\[1\/9 close\] .* closed the shared gate/mg),
	1, 'held: one close');
like($res->{out}, qr/^\[1\/9 close\] +replica \Q$GB\E  sees the close, epoch \d+$/m,
	'held: B sees the close');
like($res->{out}, qr/^\[2\/9 drain\] +replica \Q$GA\E  drained after \d+\.\ds: 2 replica\(s\) at epoch \d+, in_flight 0$/m,
	'held: drained by the fleet');

$g = gate(\%B);
is("$g->{state} $g->{epoch}", 'open ' . ($e + 2),
	'held: opened once, the epoch +2');

$g = gate(\%A);

my $h = $redis->hgetall(store_key('gate'));
is("$h->{state} $h->{epoch}", 'open ' . ($e + 2), 'held: the store agrees');

my $opened = iso_ms($g->{changed});
my %c = %{calls($mark)};

is(join(' | ', map { join ' ', map { $_->{uri} } @{$c{$_} // []} } 0 .. 2),
	join(' | ', ("@SEQUENCE") x 3), 'held: every worker called in order');

# the store's clock and the fake's are the machine's: the pause after the
# close, the resume before the open, on every worker

my @late = grep {
	my ($pause, $resume) = map { $_->{time} * 1000 } @{$c{$_}}[0, 3];
	!($closed <= $pause && $resume <= $opened);
} 0 .. 2;

ok(defined $closed && defined $opened && !@late,
	'held: paused after the close, resumed before the open')
	or diag("closed $closed, opened $opened, late: @late");

###############################################################################

# replica B stopped by its pid during a refresh: lost, and the drain holds

$e = gate(\%A)->{epoch};
$mark = worker_counts($t);
$s = stream('lost-1');

my $drain = Test::DynamoRL::scale(8);
$run = spawn('v2', '--drain-timeout', $drain);

wait_gate(\%A, sub { ($_[0]{state} // '') eq 'closed'
	&& ($_[0]{fleet}{acked} // 0) == 2 });

$tb->stop_nginx();

$g = wait_gate(\%A, sub { grep { $_ eq 'B' } lost($_[0]) });
is(join(' ', lost($g)), 'B', 'lost: B is lost');

close $s;

$g = wait_gate(\%A, sub { ($_[0]{fleet}{in_flight} // 1) == 0 });
is("$g->{fleet}{acked} $g->{fleet}{replicas} $g->{fleet}{in_flight}",
	'1 1 0', 'lost: A acked, nothing in flight');
ok(is_false($g->{fleet}{drained}), 'lost: not drained');

ok(Test::DynamoRL::wait_for(sub {
	refresh_output($run) =~ /^\[2\/9 drain\] +replica \Q$GA\E  lost: B$/m }, 10),
	'lost: the client names B');

$res = refresh_finish($run);

is($res->{rc}, 4, 'lost: exit 4') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 2\/9 drain, replica \Q$GA\E: not drained after --drain-timeout \Q$drain\Es: acked 1 of 1 replica\(s\), in_flight 0; lost: B \(no heartbeat .*--ignore-lost/m,
	'lost: the drain failed, B named');
is(scalar(keys %{calls($mark)}), 0, 'lost: no worker called');

# the close moves the epoch by one, and so does each renewal of the
# lease during a long drain (valgrind)

my $renewed = () = $res->{out} =~ /lease renewed until/g;

$g = gate(\%A);
is("$g->{state} $g->{epoch}", 'closed ' . ($e + 1 + $renewed),
	'lost: the gate closed');
is($redis->hgetall(store_key('gate'))->{state}, 'closed',
	'lost: closed in the store');

# the same refresh again, not waiting for B

$res = refresh('v2', '--ignore-lost');

is($res->{rc}, 0, 'ignore lost: exit 0') or diag($res->{out});
like($res->{out}, qr/^\[1\/9 close\] +replica \Q$GB\E  does not answer/m,
	'ignore lost: B does not answer');
like($res->{out}, qr/^\[2\/9 drain\] +replica \Q$GA\E  drained after \d+\.\ds: 1 replica\(s\) at epoch \d+, in_flight 0; lost and ignored: B$/m,
	'ignore lost: B ignored');
is(join(' ', map { worker_version($_) } 0 .. 2), 'v2 v2 v2',
	'ignore lost: every worker updated');

$renewed += () = $res->{out} =~ /lease renewed until/g;

$g = gate(\%A);
is("$g->{state} $g->{epoch}", 'open ' . ($e + 3 + $renewed),
	'ignore lost: closed again and opened');

###############################################################################

sub stream {
	my ($id) = @_;

	my $sock = start('POST', '/v1/chat/completions', port => $A{listen},
		body => '{"messages":[{"role":"user","content":"hi"}],'
			. '"stream":true}',
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => 'slow', 'x-fake-events' => 600,
			'x-fake-interval-ms' => 100 ]);

	like(read_until($sock, qr/data: \{/, 10), qr/data: \{/,
		"$id: streaming on A");

	return $sock;
}

sub lost {
	my ($gate) = @_;

	my $l = ref $gate->{fleet} eq 'HASH' ? $gate->{fleet}{lost} : undef;
	return ref $l eq 'ARRAY' ? @$l : ();
}

# reads of A's gate API in its access log

sub gate_reads {
	return scalar grep { $_->{uri} eq '/rl/gate' }
		json_lines($t->testdir() . '/rl.log', bytes => 1);
}

# worker => [ its records since $mk ]

sub calls {
	my ($mk) = @_;

	my %w;

	for my $i (0 .. 2) {
		my $recs = $t->fake_records("worker-$i");
		my @new = @$recs[$mk->{$i} .. $#$recs];
		$w{$i} = \@new if @new;
	}

	return \%w;
}

sub worker_version {
	my ($i) = @_;
	return decode_json($t->read_file("fake/worker-$i.state"))->{version};
}

# the client, with both trusted listeners

sub refresh {
	return refresh_finish(spawn(@_));
}

sub spawn {
	my ($ver, @args) = @_;

	return refresh_start($t, '--gateway', $GA, '--gateway', $GB, '--shared',
		'--model-path', "/models/policy-$ver", '--weight-version', $ver,
		'--lease', '60s', '--timeout', '10', '--drain-timeout', '20',
		'--poll-interval', '0.05', @args);
}

###############################################################################
