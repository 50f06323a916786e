#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# /rl/status across worker processes (issue 12, defect 3): two worker
# processes, the status location (JSON and the HTML dashboard) polled
# hard while the other worker process stores snapshots of changing size,
# growing and shrinking fleets from 0 to 600 workers, through the
# discovery plane and through admin refreshes, with reloads meanwhile.
#
# The handler once sized its buffer from the process's index and then
# rendered a newer one, built in between from a snapshot that the other
# worker process stored: a heap overflow in ngx_http_dynamo_rl_fleet_json
# (make asan reports it; without the sanitizer a worker may crash), and a
# probe of a freed index that could spin forever.  Here every status
# answer must be complete JSON whose fleet is one whole document (its
# length one of the fleet sizes served, its "workers" that length), no
# worker process may crash or raise an alert (the harness checks the
# error log and the sanitizer's reports), and none may hang: every
# request is bounded, and after the load every worker process answers
# and sits idle.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_conf time_limit /;

###############################################################################

time_limit(Test::DynamoRL::scale(180));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(14);

# under make asan, the race needs the speed of the fast unwinder: with the
# slow one of make asan, each of jansson's allocations costs a full unwind
# and the worker processes store a snapshot a second

$t->asan_options('fast_unwind_on_malloc=1');

# the sanitizer writes its reports as <testdir>/asan.<pid>: when the tests
# run as root, worker processes run as "nobody" and could not create them
# in the test directory, and a worker's report would be lost

chmod(01777, $t->testdir()) or die "cannot chmod: $!\n";

$t->write_file_expand('nginx.conf', nginx_conf('one'));
$t->run_fake_dynamo()->run();

###############################################################################

my $DIR = $t->testdir();
my $FAKE = $t->fake_dir();
my $JS = JSON::PP->new->canonical->allow_bignum;

# the fleets served, in bytes from about 60 to about 400 KB; each worker's
# model needs escaping ('<', '"', a control byte), so that a render uses
# the bound it was sized with.  A small fleet in a document padded with a
# large array that the index ignores takes long to index: a render that
# indexes it sizes for a small fleet, and the other worker process has
# time to store a large one meanwhile.

my @SIZES = (0, 1, 3, 40, 150, 600);
my %SIZE = map { $_ => 1 } @SIZES;
my %DOC = map { $_ => doc($_) } @SIZES;

$DOC{padded} = doc(1, 1);
push @SIZES, 'padded', 'padded';

# load, in seconds of normal speed

my $LOAD = Test::DynamoRL::scale(12);

my $stop = "$DIR/stop-load";
my $end = time() + $LOAD;
my @kids;

# the fake's own fleet is not one of these: the load starts on one of
# ours, or a writer could store the fake's before the first switch

$t->fake_set('discovery.json', $DOC{1});

push @kids, switcher();
push @kids, writer($_) for 1 .. 3;
push @kids, poller($_) for 1 .. 2;

# reloads while the load runs: the new worker processes rebuild their
# index from the zone, the old ones finish what they serve

my $reloads = 0;

for my $n (qw/ two three four /) {
	sleep($LOAD / 4);
	$t->write_file_expand('nginx.conf', nginx_conf($n));

	# a worker process that hangs never stops accepting: a failure,
	# not the end of the test

	if (!eval { $t->reload(); 1 }) {
		diag($@);
		last;
	}

	$reloads++ unless $t->reload_failed();
}

sleep($end - time()) if $end > time();

open my $fh, '>', $stop or die "cannot create $stop: $!\n";
close $fh;

my $reaped = Test::DynamoRL::wait_for(sub {
	@kids = grep { waitpid($_, WNOHANG) == 0 } @kids;
	return !@kids;
}, 30);

ok($reaped, 'load processes finished in time');

# a load process stuck on a hung worker process is stopped by its pid

for my $pid (@kids) {
	kill 'KILL', $pid;
	waitpid($pid, 0);
}

is($reloads, 3, 'three reloads under load');

###############################################################################

my %w = results('writer');
my %p = results('poller');

# the counts of the writer's and the poller's answers: at least so many
# of each kind, and no bad one

for my $c ([ \%w, discovery => 20, 'snapshots stored through discovery' ],
	[ \%w, admin => 10, 'admin calls refreshed the snapshot' ],
	[ \%p, json => 30, 'status polled as JSON' ],
	[ \%p, html => 30, 'status polled as HTML' ],
	[ \%p, sizes => 3, 'status saw fleets of several sizes' ])
{
	my ($res, $kind, $least, $name) = @$c;

	cmp_ok($res->{$kind} // 0, '>=', $least, $name)
		or diag(explain($res));
}

for my $c ([ \%w, discovery_bad => 'every discovery answer 200' ],
	[ \%w, admin_bad => 'every admin answer 404 unknown_worker' ],
	[ \%p, bad => 'every status answer complete, with one whole fleet' ])
{
	my ($res, $kind, $name) = @$c;

	is($res->{$kind} // 0, 0, $name) or diag($res->{sample});
}

my $gen = status()->{snapshot}{generation} // 0;
cmp_ok($gen, '>=', 40, "snapshot generations moved ($gen)");

# nothing hung: no worker process uses CPU once the load has stopped

my @workers = $t->worker_pids();
is(scalar @workers, 2, 'two worker processes');

my %cpu0 = map { $_ => cpu($_) } @workers;
sleep(1);
my @busy = grep { cpu($_) - $cpu0{$_} > 0.5 } @workers;

ok(!@busy, 'no worker process spins after the load') or diag("busy: @busy");

# a spinning worker process ignores the master's QUIT: stop it here

kill 'KILL', $_ for @busy;

ok(Test::DynamoRL::wait_for(sub {
	my $r = parse_response(http_get('/rl/status',
		PeerAddr => '127.0.0.1:' . port(8070), timeout => 5)) or return;
	return $r->{status} == 200 && eval { decode_json($r->{body}) };
}, 10), 'status answers after the load');

###############################################################################

sub nginx_conf {
	my ($version) = @_;

	return rl_conf(<<"EOF");

%%RL_MAIN workers=2%%

http {
    %%RL_HTTP 16m%%

    %%RL_LISTENER%%

    %%RL_PROXY_KEEPALIVE%%

    server {
        %%RL_LISTEN 8070%%

        # "valid=0": every admin call refreshes the snapshot

        dynamo_rl_discovery /_rl_discovery valid=0 max_size=2m;

        # named here too: its answers are stored into the snapshot

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_discovery;
            proxy_pass http://rl_listener;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
        }

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_APIS status%%

        location = /version {
            return 200 $version;
        }
    }
}

EOF
}

# a fleet of $n workers, padded or not; every tenth id is given twice (ambiguous_worker,
# a probe that finds two); the model needs escaping

sub doc {
	my ($n, $pad) = @_;

	my @w;

	for my $i (1 .. $n) {
		my $id = 1000 + ($i % 10 ? $i : $i - 1);

		push @w, {
			namespace => 'dynamo',
			component => 'backend',
			endpoint => 'rl',
			instance_id => $id,
			transport => { tcp => "127.0.0.1:9999/$id/rl" },
			request_plane_url => 'dyn://dynamo.backend.rl',
			system_url => 'http://127.0.0.1:' . port(8091),
			model => "Qwen/Qwen3 <$i> \"\x01\"" . ('&' x ($i % 7)),
			routes => [ 'flush_cache', 'liveness_probe' ],
			world_size => 1,
		};
	}

	return '{"protocol_version":1,"namespace":"dynamo",'
		. ($pad ? '"padding":[' . join(',', (0) x 60000) . '],' : '')
		. '"workers":' . $JS->encode(\@w) . '}';
}

sub done {
	return -e $stop || time() > $end + Test::DynamoRL::scale(20);
}

# a load process: writes "key value" lines to <testdir>/<name>-<n>.out

sub spawn {
	my ($name, $code) = @_;

	my $pid = fork() // die "cannot fork: $!\n";
	return $pid if $pid;

	my %c;
	my $ok = eval { $code->(\%c); 1 };
	$c{died} = $@ unless $ok;

	if (open my $out, '>', "$DIR/$name-$$.out") {
		for my $k (sort keys %c) {
			(my $v = $c{$k}) =~ s/\n/\\n/g;
			print $out "$k $v\n";
		}

		close $out;
	}

	POSIX::_exit(0);
}

# the listener's fleet changes size every few milliseconds

sub switcher {
	return spawn('switcher', sub {
		my ($c) = @_;

		srand($$);

		until (done()) {
			$t->fake_set('discovery.json',
				$DOC{$SIZES[int(rand(@SIZES))]});
			$c->{switches}++;
			sleep(0.005);
		}
	});
}

# snapshots stored through the discovery plane, then through an admin
# call's refresh (to an id no fleet has)

sub writer {
	my ($n) = @_;

	return spawn('writer', sub {
		my ($c) = @_;

		until (done()) {
			my $r = get('GET', '/v1/rl/workers');

			if ($r->{status} == 200) {
				$c->{discovery}++;

			} else {
				$c->{discovery_bad}++;
				$c->{sample} //= "discovery: $r->{status} "
					. substr($r->{body}, 0, 200);
			}

			$r = get('POST', '/v1/rl/workers/42/engine/flush_cache');
			my $j = eval { decode_json($r->{body}) } // {};

			if ($r->{status} == 404
				&& ($j->{error} // '') eq 'unknown_worker')
			{
				$c->{admin}++;

			} else {
				$c->{admin_bad}++;
				$c->{sample} //= "admin: $r->{status} "
					. substr($r->{body}, 0, 200);
			}
		}
	});
}

sub poller {
	my ($n) = @_;

	return spawn('poller', sub {
		my ($c) = @_;

		my %sizes;

		until (done()) {
			for my $html (0, 1) {
				my $r = get('GET', '/rl/status'
					. ($html ? '?format=html' : ''));
				my $err = check($r, $html, \%sizes);

				if (defined $err) {
					$c->{bad}++;
					$c->{sample} //= $err;

				} else {
					$c->{$html ? 'html' : 'json'}++;
				}
			}
		}

		$c->{sizes} = join ',', sort { $a <=> $b } keys %sizes;
	});
}

# undef for a complete answer with one whole fleet, else what is wrong

sub check {
	my ($r, $html, $sizes) = @_;

	return "no answer" unless $r->{status};
	return "status $r->{status}" unless $r->{status} == 200;

	my $body = $r->{body};

	if ($html) {
		$body =~ m{<script\ type="application/json"\ id="data">(.*?)
			</script>\n<script\ nonce="[^"]+">.*</html>\n\z}sx
			or return 'HTML without its data: ' . substr($body, -200);
		$body = $1;
	}

	my $j = eval { $JS->decode($body) }
		or return "not JSON ($@): " . substr($body, 0, 200);

	my $s = $j->{snapshot} // {};
	my $fleet = $s->{fleet};

	return 'no fleet' unless ref $fleet eq 'ARRAY';

	my $n = scalar @$fleet;

	return "a fleet of $n workers, not a document's" unless $SIZE{$n};
	return "\"workers\":$s->{workers} with $n in the fleet"
		unless ($s->{workers} // -1) == $n;

	for my $w (@$fleet) {
		return "a worker without its model: " . $JS->encode($w)
			unless ($w->{model} // '') =~ /^Qwen\/Qwen3 <(\d+)> "\x01"/
			&& $w->{instance_id} =~ /^\d+$/;
	}

	$sizes->{$n} = 1;

	return undef;
}

sub results {
	my ($name) = @_;

	my %sum;

	for my $path (glob("$DIR/$name-*.out")) {
		open my $in, '<', $path or next;

		while (my $line = <$in>) {
			chomp $line;
			my ($k, $v) = split / /, $line, 2;

			if ($k eq 'sample') {
				$sum{sample} //= $v;

			} elsif ($k eq 'died') {
				$sum{sample} //= "died: $v";

			} elsif ($k eq 'sizes') {
				$sum{seen}{$_} = 1 for split /,/, $v;
				$sum{sizes} = keys %{$sum{seen}};

			} else {
				$sum{$k} += $v;
			}
		}
	}

	return %sum;
}

sub get {
	my ($method, $uri) = @_;

	my $raw = $method eq 'POST'
		? http_post($uri, '{}', PeerAddr => '127.0.0.1:' . port(8070),
			timeout => 5)
		: http_get($uri, PeerAddr => '127.0.0.1:' . port(8070),
			timeout => 5);

	return parse_response($raw) // { status => 0, body => '' };
}

sub status {
	return eval { decode_json(get('GET', '/rl/status')->{body}) } // {};
}

# user and system time of a process, in seconds

sub cpu {
	my ($pid) = @_;

	open my $in, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$in> // '';
	$stat =~ s/^.*\)\s+//s;
	my @f = split ' ', $stat;

	return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

###############################################################################
