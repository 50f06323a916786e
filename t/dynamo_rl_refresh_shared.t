#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the shared mode of examples/rl-refresh, against a fake of the
# gate API of replicas that share a store (dynamo_rl_store): the gate
# documents carry "fleet", every replica answers for one gate, and a
# change that names an epoch other than the gate's is refused with 409.
# One nginx serves two replicas' trusted listeners in front of the fake
# Dynamo; their /rl/gate goes to the fake gate (a second fake stands for
# another store), a third listener has the zone's own gate.  The whole
# refresh in the shared mode, picked by --mode auto: one close and one
# open, both with the epoch; the drain that waits for the fleet's
# "drained" and for every replica's own "in_flight" 0 (the cross-check);
# a lost replica that holds the drain, and --ignore-lost; someone else's
# change during the drain; a replica that answers for another gate; and
# the mode checks, after which nothing was changed.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;
use JSON::PP;
use List::Util qw/ max min /;
use POSIX qw/ WNOHANG /;
use Time::HiRes ();

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ refresh_args refresh_failed refresh_finish
	refresh_output refresh_python refresh_replicas refresh_sequence
	refresh_start rl_conf time_limit worker_calls worker_counts
	worker_state /;

###############################################################################

time_limit(240);

plan(skip_all => 'no python3 (or TEST_PYTHON)') unless refresh_python();

# the trusted listeners of replicas a and b (the fake gate), of replica c
# (another fake gate: another store), and of replica z (the zone's gate);
# the two fake gates

my ($TA, $TB, $TC, $TZ, $GATE1, $GATE2) = (8070, 8071, 8072, 8073, 8085,
	8086);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(73);

$t->write_file_expand('nginx.conf', nginx_conf());
$t->run_fake_dynamo();
$t->run_daemon(\&fake_gate, port($GATE1), $t->testdir() . '/gate1');
$t->run_daemon(\&fake_gate, port($GATE2), $t->testdir() . '/gate2');
$t->run();

$t->waitforsocket('127.0.0.1:' . port($_)) or die "no fake gate on $_\n"
	for $GATE1, $GATE2;

###############################################################################

my $ID0 = '7587888160958628117';
my $ID1 = '9007199254740993';
my $ID2 = '18446744073709551615';

my @SEQUENCE = refresh_sequence();

my $GA = 'http://127.0.0.1:' . port($TA);
my $GB = 'http://127.0.0.1:' . port($TB);
my $GC = 'http://127.0.0.1:' . port($TC);
my $GZ = 'http://127.0.0.1:' . port($TZ);

my ($res, $out, $mark, $v, $run, @posts);
my $version = 0;

###############################################################################

# the whole refresh: --mode auto finds "fleet" on both replicas

reset_all();
$mark = mark();
$v = next_version();

$res = refresh($v);
$out = $res->{out};

is($res->{rc}, 0, 'success: exit 0') or diag($out);
like($out, qr/^rl-refresh: weight version "\Q$v\E" from \S+ through 2 gateway replica\(s\), one shared gate: \Q$GA\E, \Q$GB\E$/m,
	'success: the shared mode');
like($out, qr/^\[1\/9 close\] +replica \Q$GA\E  closed the shared gate, epoch (\d+), lease until "?[^ ]+"?, 2 replica\(s\) in the fleet$/m,
	'success: closed once through the first replica');
like($out, qr/^\[1\/9 close\] +replica \Q$GB\E  sees the close, epoch \d+$/m,
	'success: the other replica sees the close');
like($out, qr/^\[2\/9 drain\] +replica \Q$GA\E  drained after \d+\.\ds: 2 replica\(s\) at epoch \d+, in_flight 0$/m,
	'success: drained by the fleet');
like($out, qr/^\[9\/9 open\] +replica \Q$GA\E  opened the shared gate, epoch \d+$/m,
	'success: opened once');
like($out, qr/^rl-refresh: done: 3 worker\(s\) at weight version "\Q$v\E", the shared gate open$/m,
	'success: summary');

@posts = gate_posts(1, $mark);

is(join(' ', map { "$_->{action}\@$_->{epoch}" } @posts),
	"close\@$mark->{epoch} open\@" . ($mark->{epoch} + 1),
	'success: one close and one open, each with the epoch it follows');
is(join(' ', map { $_->{replica} } @posts), 'a a',
	'success: both through replica a');
is($posts[0]{body}{reason}, "rl-refresh: weight version $v",
	'success: the reason');
is(scalar gate_posts(2, $mark), 0, 'success: the other store untouched');

my %calls = calls_since($mark);

for my $i (0 .. 2) {
	is(join(' ', map { $_->{uri} } @{$calls{$i}}), "@SEQUENCE",
		"success: worker $i called in order");
}

my ($close_t, $open_t) = map { $_->{time} } @posts;
my @times = map { $_->{time} } map { @$_ } values %calls;

ok(@posts == 2 && $close_t <= min(@times) && $open_t >= max(@times),
	'success: closed before the first worker call, opened after the last');
is(gate_state(1)->{state}, 'open', 'success: the gate open');

###############################################################################

# the drain: replica a reports a request in flight, then none; the lease
# (2s) is renewed with the epoch while waiting

$run = refresh_draining('drain', '--lease', '2s');
ok(Test::DynamoRL::wait_for(sub {
	grep { $_->{action} eq 'renew' } gate_posts(1, $mark) }, 10),
	'drain: the lease renewed while waiting');
ok(!waitpid($run->{pid}, WNOHANG), 'drain: still waiting');

fleet({ in_flight => { a => 0, b => 0 } });

$res = refresh_finish($run);

is($res->{rc}, 0, 'drain: exit 0') or diag($res->{out});

@posts = gate_posts(1, $mark);

ok((grep { $_->{action} eq 'renew' } @posts) == @posts - 2
	&& !grep({ $posts[$_]{epoch} != $mark->{epoch} + $_ } 0 .. $#posts),
	'drain: every renew and the open named the epoch of our last change')
	or diag(explain(\@posts));

# the cross-check: the fleet's reports say drained, replica b's own count
# does not

reset_all();
$mark = mark();

fleet({ in_flight => { a => 0, b => 0 }, local => { a => 0, b => 1 } });

failure('cross-check', [ '--drain-timeout', '1' ], rc => 4,
	step => '2/9 drain', who => "replica $GA",
	detail => qr/not drained after --drain-timeout 1s: the fleet says drained, but \Q$GB\E in_flight 1/);

# a lost replica holds the drain ...

fleet({ in_flight => { a => 0, b => 0 }, lost => [ 'c' ] });

failure('lost', [ '--drain-timeout', '1' ], rc => 4, step => '2/9 drain',
	who => "replica $GA",
	detail => qr/acked 2 of 2 replica\(s\), in_flight 0; lost: c \(no heartbeat .*--ignore-lost/);

like($out, qr/^\[2\/9 drain\] +replica \Q$GA\E  lost: c$/m, 'lost: said');

# ... unless told not to wait for it

reset_all();
$mark = mark();
$v = next_version();

fleet({ in_flight => { a => 0, b => 0 }, lost => [ 'c' ] });

$res = refresh($v, '--ignore-lost');

is($res->{rc}, 0, 'ignore lost: exit 0') or diag($res->{out});
like($res->{out}, qr/^\[2\/9 drain\] +replica \Q$GA\E  drained after \d+\.\ds: 2 replica\(s\) at epoch \d+, in_flight 0; lost and ignored: c$/m,
	'ignore lost: said');
is(join(' ', map { worker_state($t, $_)->{version} } 0 .. 2), "$v $v $v",
	'ignore lost: refreshed');

# a replica that has not seen the close yet holds the drain too

reset_all();
fleet({ in_flight => { a => 0, b => 0 }, unacked => [ 'b' ] });

failure('unacked', [ '--drain-timeout', '1', '--ignore-lost' ], rc => 4,
	step => '2/9 drain', who => "replica $GA",
	detail => qr/acked 1 of 2 replica\(s\), in_flight 0$/);

###############################################################################

# someone else reopens the gate during the drain: noticed, nothing called

$run = refresh_draining('reopened', '--drain-timeout', '20');

gate_post(1, { action => 'open' });

$res = refresh_finish($run);

is($res->{rc}, 13, 'reopened: exit 13') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 2\/9 drain, replica \Q$GA\E: the gate was reopened by someone else/m,
	'reopened: named');
like($res->{out}, qr/^rl-refresh: no gate is reopened after a failure; gates now: the shared gate OPEN, epoch \d+ \(through \Q$GA\E\)$/m,
	'reopened: the summary');
is(scalar(map { @$_ } values %{{ calls_since($mark) }}), 0,
	'reopened: no worker called');

# someone else closes it again under their own reason while we drain:
# the next read of the gate notices

$run = refresh_draining('taken over', '--drain-timeout', '20');

my $g = gate_state(1);
gate_post(1, { action => 'close', reason => 'operator', lease => '60s',
	epoch => $g->{epoch} });

$res = refresh_finish($run);

is($res->{rc}, 13, 'taken over: exit 13') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 2\/9 drain, replica \Q$GA\E: the gate was changed by someone else/m,
	'taken over: named');
is(gate_state(1)->{reason}, 'operator', 'taken over: their close stands');

###############################################################################

# a replica that answers for another gate (another store or prefix): the
# gate we closed stays closed

reset_all();
$mark = mark();

failure('another store', [ '--gateway', $GA, '--gateway', $GC ], rc => 3,
	step => '1/9 close', who => "replica $GC",
	detail => qr/it answers state open, epoch \d+, not our close at epoch \d+ through \Q$GA\E: it does not share that gate/);

is(gate_state(2)->{state}, 'open', 'another store: its gate untouched');

# an open answered 503 gate_outcome_unknown but made: read again, the
# refresh is done; one answered so and not made: the failure stands, the
# gate closed

reset_all();
$mark = mark();

$t->write_file('gate1/unknown', 'open apply');

$res = refresh(next_version());

is($res->{rc}, 0, 'open unknown, made: exit 0') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: replica \Q$GA\E: open answered HTTP 503: .*gate_outcome_unknown.*; the gate read again: open, epoch \d+: the change was made$/m,
	'open unknown, made: said');
is(gate_state(1)->{state}, 'open', 'open unknown, made: open');

reset_all();

$t->write_file('gate1/unknown', 'open skip');

$res = refresh(next_version());

is($res->{rc}, 12, 'open unknown, not made: exit 12') or diag($res->{out});
like($res->{out}, qr/the gate read again: closed, epoch \d+: not our change$/m,
	'open unknown, not made: said');
is(gate_state(1)->{state}, 'closed', 'open unknown, not made: still closed');

# the mode checks change nothing

reset_all();

for my $case (
	[ 'per-replica on a shared gate', [ '--mode', 'per-replica' ],
		"replica $GA", qr/its gate is in a shared store .*use --mode shared/ ],
	[ 'shared on a zone gate', [ '--gateway', $GZ, '--shared' ],
		"replica $GZ", qr/its gate is its own .*use --mode per-replica/ ],
	[ 'auto on two modes', [ '--gateway', $GA, '--gateway', $GZ ],
		"replica $GZ", qr/its gate is its own, while \Q$GA\E shares a store/ ])
{
	my ($name, $args, $who, $detail) = @$case;

	$mark = mark();

	my @replicas = $args->[0] eq '--gateway' ? () : ('--gateway', $GA,
		'--gateway', $GB);

	$res = refresh(next_version(), @$args, { replicas => \@replicas });

	my ($line) = $res->{out} =~ /^(rl-refresh: FAILED at step .*)$/m;

	is($res->{rc}, 3, "$name: exit 3") or diag($res->{out});
	like($line // '', qr/^rl-refresh: FAILED at step 1\/9 close, \Q$who\E: /,
		"$name: named");
	like($line // '', $detail, "$name: why");
	is(scalar gate_posts(1, $mark), 0, "$name: nothing changed");
}

###############################################################################

sub nginx_conf {
	my $trusted = '';

	for my $l ([ $TA, "http://127.0.0.1:$GATE1", 'a' ],
		[ $TB, "http://127.0.0.1:$GATE1", 'b' ],
		[ $TC, "http://127.0.0.1:$GATE2", 'c' ],
		[ $TZ, undef, 'z' ])
	{
		my ($port, $gate, $name) = @$l;

		my $api = defined $gate
			? "proxy_pass $gate;\n"
			. "            proxy_set_header X-Replica $name;"
			: 'dynamo_rl_gate_api;';

		$trusted .= <<"EOF";
    server {
        listen 127.0.0.1:$port;

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://rl_listener;
        }

        %%RL_ADMIN_LOCATION /_rl_discovery valid=1s%%

        %%RL_DISCOVERY_FETCH rl_listener 4m%%

        location = /rl/gate {
            $api
        }

        # examples/dynamo-rl.conf's /verify/v1/: rl-refresh's default
        # generation check while the gates are closed

        location /verify/v1/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_pass http://frontend/v1/;
        }

        %%RL_NOT_FOUND%%
    }

EOF
	}

	return rl_conf(<<"EOF");

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 20m%%

    %%RL_UPSTREAMS%%
    %%RL_PROXY_KEEPALIVE%%

$trusted
}

EOF
}

# a refresh started on a fresh fleet whose replica a reports a request
# in flight: it returns once the refresh has closed the shared gate, with
# $mark where the refresh began

sub refresh_draining {
	my ($name, @args) = @_;

	reset_all();
	$mark = mark();

	fleet({ in_flight => { a => 1, b => 0 } });

	my $run = start_refresh(next_version(), @args);

	# closed, and the close seen through the other replica: the last of
	# step 1, which reports a change of the gate before it as its own

	ok(Test::DynamoRL::wait_for(sub {
		gate_state(1)->{state} eq 'closed'
			&& refresh_output($run)
			=~ /^\[1\/9 close\] +replica \Q$GB\E  sees the close/m
	}, 10), "$name: closed");

	return $run;
}

# the client

sub start_refresh {
	my ($ver, @args) = @_;

	my @replicas = refresh_replicas(\@args, $GA, $GB);

	return refresh_start($t, @replicas, refresh_args($ver),
		'--verify-model', 'Qwen/Qwen3-0.6B', @args);
}

sub refresh {
	return refresh_finish(start_refresh(@_));
}

# one injected failure: exit status, the step and who, the gate closed
# and no worker called

sub failure {
	my ($name, $args, %o) = @_;

	my @rest = @$args;
	my @gw;

	push @gw, splice(@rest, 0, 2) while @rest && $rest[0] eq '--gateway';
	@gw = ('--gateway', $GA, '--gateway', $GB) unless @gw;

	my $before = mark();

	$res = refresh(next_version(), @rest, { replicas => \@gw });
	$out = $res->{out};

	my $line = refresh_failed($name, $res, %o);

	like($line, $o{detail}, "$name: why");
	is(scalar(map { @$_ } values %{{ calls_since($before) }}), 0,
		"$name: no worker called");
	is(gate_state(1)->{state}, 'closed', "$name: the gate stays closed");

	reset_all();

	return $res;
}

sub next_version {
	return 'v' . ++$version;
}

# both fake gates open, the fleet at rest

sub reset_all {
	fleet({ in_flight => { a => 0, b => 0 } });

	for my $n (1, 2) {
		gate_post($n, { action => 'open' })
			if gate_state($n)->{state} ne 'open';
	}
}

sub mark {
	return {
		w => worker_counts($t),
		g1 => scalar(my @g1 = posts(1)),
		g2 => scalar(my @g2 = posts(2)),
		epoch => gate_state(1)->{epoch},
	};
}

sub calls_since {
	my ($m) = @_;
	return worker_calls($t, $m->{w});
}

# the fake gates' records of POSTs

sub posts {
	my ($n) = @_;

	my $text = eval { $t->read_file("gate$n/posts.log") } // '';

	return map { decode_json($_) } grep { /\S/ } split /\n/, $text;
}

sub gate_posts {
	my ($n, $m) = @_;

	my @all = posts($n);

	return map { +{ %$_, action => $_->{body}{action} // '',
		epoch => $_->{body}{epoch} // -1 } } @all[$m->{"g$n"} .. $#all];
}

# the fake gates directly, as another controller would

sub gate_state {
	my ($n) = @_;

	my $r = http_json('/rl/gate', PeerAddr => '127.0.0.1:'
		. port($n == 1 ? $GATE1 : $GATE2));

	return $r && ref $r->{json} eq 'HASH' ? $r->{json} : { state => '' };
}

sub gate_post {
	my ($n, $data) = @_;

	my $r = http_json('/rl/gate', json => $data, PeerAddr => '127.0.0.1:'
		. port($n == 1 ? $GATE1 : $GATE2));

	return $r && ref $r->{json} eq 'HASH' ? $r->{json} : {};
}

sub fleet {
	my ($f) = @_;

	for my $n (1, 2) {
		my $path = $t->testdir() . "/gate$n/fleet.json";

		open my $fh, '>', "$path.tmp" or die "$path: $!\n";
		print $fh encode_json($f);
		close $fh;
		rename "$path.tmp", $path or die "$path: $!\n";
	}
}

###############################################################################

# the gate API of replicas that share a store, as the contract of
# dynamo_rl_store has it: one gate, changes that name a stale epoch get
# 409, "fleet" computed from DIR/fleet.json ({"in_flight":{replica:n},
# "local":{replica:n}, "lost":[...], "unacked":[...]}); "in_flight" is
# the count of the replica named in X-Replica; every POST is appended to
# DIR/posts.log

sub fake_gate {
	my ($port, $dir) = @_;

	mkdir $dir;

	my $json = JSON::PP->new->canonical;
	my %gate = (state => 'open', epoch => 0, reason => undef,
		lease_ms => 0, expires => 0, changed => undef);

	my $server = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 16, ReuseAddr => 1, Proto => 'tcp')
		or die "fake gate: cannot listen on $port: $!\n";

	while (my $c = $server->accept()) {
		local $SIG{ALRM} = sub { die "fake gate: client timed out\n" };
		alarm(10);

		eval { gate_answer($c, $dir, $json, \%gate); };
		alarm(0);
		close $c;
	}
}

sub gate_answer {
	my ($c, $dir, $json, $gate) = @_;

	my %gate = %$gate;

	my ($head, $body) = ('', '');

	while ($head !~ /\r\n\r\n/) {
		sysread($c, $head, 4096, length $head) or last;
	}

	# a probe of waitforsocket() sends nothing

	return unless $head =~ /\r\n\r\n/;

	($head, $body) = split /\r\n\r\n/, $head, 2;
	$body //= '';

	my ($method, $uri) = $head =~ /^(\S+) (\S+)/;
	my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
	my ($replica) = $head =~ /^X-Replica:\s*(\S+)/mi;

	$replica //= '';
	$method //= '';

	while (defined $len && length $body < $len) {
		sysread($c, $body, $len - length $body, length $body)
			or last;
	}

	my $f = eval {
		open my $fh, '<', "$dir/fleet.json" or die;
		local $/;
		decode_json(<$fh>);
	} // {};

	my $now = int(Time::HiRes::time() * 1000);
	my ($status, $doc) = (200, undef);

	if ($method eq 'POST') {
		my $b = eval { decode_json($body) } // {};

		open my $log, '>>', "$dir/posts.log";
		syswrite($log, $json->encode({ body => $b,
			replica => $replica, time => $now / 1000 }) . "\n");
		close $log;

		my $a = $b->{action} // '';

		# "$dir/unknown", "ACTION apply|skip": the next POST of that
		# action is answered 503 gate_outcome_unknown, made or not

		my ($ua, $how) = split ' ', (eval {
			open my $fh, '<', "$dir/unknown" or die;
			scalar <$fh>;
		} // '');

		$ua = undef unless defined $ua && $ua eq $a;
		unlink "$dir/unknown" if defined $ua;

		if (defined $ua && $how eq 'skip') {
			# not made

		} elsif (defined $b->{epoch} && $b->{epoch} != $gate{epoch}) {
			($status, $doc) = (409, { error => 'epoch_mismatch',
				message => 'the gate changed since that epoch' });

		} elsif ($a eq 'renew' && $gate{state} ne 'closed') {
			($status, $doc) = (400, { error => 'bad_body',
				message => 'the gate is open: nothing to renew' });

		} elsif ($a eq 'close' || $a eq 'renew') {
			my $lease = $b->{lease} // '';
			my ($n, $u) = $lease =~ /^(\d+)(ms|s|m|h)?$/;
			my $ms = defined $n ? $n * { ms => 1, s => 1000,
				m => 60000, h => 3600000 }->{$u // 's'} : 0;

			$gate{state} = 'closed';
			$gate{reason} = $b->{reason} if $a eq 'close';
			$gate{lease_ms} = $ms if $ms || $a eq 'close';
			$gate{expires} = $gate{lease_ms}
				? $now + $gate{lease_ms} : 0;
			$gate{epoch}++;
			$gate{changed} = $now;

		} elsif ($a eq 'open') {
			%gate = (%gate, state => 'open', reason => undef,
				lease_ms => 0, expires => 0, changed => $now);
			$gate{epoch}++;

		} else {
			($status, $doc) = (400, { error => 'bad_body',
				message => '"action" must be "close", "renew" or "open"' });
		}

		($status, $doc) = (503, { error => 'gate_outcome_unknown',
			message => 'the shared store stopped answering after the'
				. ' change was sent: it may or may not have been made;'
				. ' read the gate' })
			if defined $ua && $status == 200;
	}

	unless ($doc) {
		my %in = %{$f->{in_flight} // {}};
		my %local = (%in, %{$f->{local} // {}});
		my %unacked = map { $_ => 1 } @{$f->{unacked} // []};
		my @lost = @{$f->{lost} // []};
		my $sum = 0;
		$sum += $_ for values %in;

		my $closed = $gate{state} eq 'closed';
		my $acked = $closed ? grep { !$unacked{$_} } keys %in
			: scalar keys %in;

		$doc = {
			state => $gate{state},
			reason => $gate{reason},
			epoch => $gate{epoch},
			in_flight => $local{$replica} // 0,
			lease_expires => $gate{expires}
				? iso($gate{expires}) : undef,
			expired => $closed && $gate{expires}
				&& $now >= $gate{expires}
				? JSON::PP::true : JSON::PP::false,
			lease_remaining_ms => $gate{expires}
				? max(0, $gate{expires} - $now) : undef,
			changed => defined $gate{changed}
				? iso($gate{changed}) : undef,
			members_changed => $closed ? JSON::PP::false : undef,
			replica => $replica,
			fleet => {
				replicas => scalar keys %in,
				acked => $acked,
				in_flight => $sum,
				lost => \@lost,
				drained => $closed && $acked == keys %in
					&& $sum == 0 && !@lost
					? JSON::PP::true : JSON::PP::false,
			},
		};
	}

	my $out = $json->encode($doc);

	print $c "HTTP/1.1 $status X\r\nContent-Type: application/json\r\n"
		. 'Content-Length: ' . length($out) . "\r\n"
		. "Connection: close\r\n\r\n$out";

	%$gate = %gate;
}

sub iso {
	my ($ms) = @_;

	my @t = gmtime(int($ms / 1000));

	return sprintf('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', $t[5] + 1900,
		$t[4] + 1, @t[3, 2, 1, 0], $ms % 1000);
}

###############################################################################
