#!/bin/bash
# bench/soak.sh: a bounded soak of the gateway of examples/dynamo-rl.conf in
# front of the bundled fake Dynamo (t/fake_dynamo.pl), loopback only;
# issue 6, item 5, and the reliability note's section 6, run 7.
#
#     bench/soak.sh                    10 minutes (600 s)
#     SOAK_SECONDS=120 bench/soak.sh   shorter: every time below scales
#
# The configuration is examples/dynamo-rl.conf with its @...@ placeholders
# filled in as util/run-gateway does, and its two listen ports moved to
# free ports (SOAK_PORT, SOAK_ADMIN_PORT to choose them).  The fake Dynamo
# has 6 workers.  For SOAK_SECONDS (T), client processes send, each from a
# new connection per request:
#
#   gen        POST /v1/completions, half with a client attempt id, 2% with
#              "x-fake-scenario: status-500" (a 500 of Dynamo's own)
#   sse        POST /v1/chat/completions, stream, 5 events 20 ms apart;
#              10% of the clients go away after the first event
#   sse-long   4 streams always open: 20 events 250 ms apart (5 s each)
#   discovery  GET /v1/rl/workers
#   admin      POST /v1/rl/workers/<id>/engine/<route> for a worker of the
#              client's last discovery read (allowed; it reads again every
#              200 calls and after a 404), and 30% denied
#              calls: a route not advertised (403), a bad id (400), GET
#              (405), a worker that does not exist (404), a query (400)
#   status     GET /rl/status and /metrics, once a second
#
# and the orchestrator, meanwhile:
#
#   - discovery churn: every 3 s it rewrites the fake's discovery.json
#     with 1 to 6 workers, a worker that comes back getting a new
#     instance id;
#   - gate cycles: every T/30 s (at most 20 s, at least 4 s) it closes the
#     gate with a lease, then opens it an eighth of a period later;
#   - two "nginx -s reload", at 0.3 T and 0.7 T;
#   - samples every 5 s, and at 0.1 T, 0.5 T and T - 2 s (1, 5 and 10
#     minutes of a 10-minute run): each worker process's RSS (VmRSS,
#     RssAnon, RssShmem) and open fds (/proc/<pid>/fd), and the zone's
#     ledger records and capacity from dynamo_rl_status.
#
# Every response is classified: expected (200; 503 "X-Dynamo-RL-Reason:
# gate_closed" while the gate is closed; the scenario's 500; the denied
# calls' own 4xx; 404 unknown_worker for a worker that churn has just
# removed; a client's deliberate abort) or failed (a connection error, a
# timeout, an incomplete answer or stream, any other status).  Failures in
# a reload window (from 0.5 s before "nginx -s reload" until the old
# worker processes have exited, and at least 5 s) are reported apart.
#
# The report (markdown) goes to stdout and to SOAK_REPORT (default
# build/soak-report.md); the raw records stay in the scratch directory
# when KEEP=1.  Exit status 1 when a request failed, an old worker process
# did not exit, or error.log has an [alert] or [crit] line.
#
# Environment: SOAK_SECONDS (600), SOAK_PORT, SOAK_ADMIN_PORT (free ports),
# NGX_BIN (/usr/sbin/nginx), MODULE (build/ngx_http_dynamo_rl_module.so),
# SOAK_REPORT, KEEP.

set -eu
set -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)

# $nginx and $module; soak.sh has its own cleanup and ports
. "$top/bench/lib.sh"

seconds=${SOAK_SECONDS:-600}
report=${SOAK_REPORT:-$top/build/soak-report.md}

case "$seconds" in
    ''|*[!0-9]*) echo "soak.sh: SOAK_SECONDS must be a number" >&2; exit 2 ;;
esac

if [ "$seconds" -lt 30 ] || [ "$seconds" -gt 600 ]; then
    echo "soak.sh: SOAK_SECONDS must be 30 to 600 (the soak is bounded)" >&2
    exit 2
fi

[ -f "$module" ] || { echo "soak.sh: $module is missing: run make" >&2; exit 2; }

free_port() {
    perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:0",
            Listen => 1, ReuseAddr => 1) or die "no port: $@\n";
        print $s->sockport(), "\n";'
}

port=${SOAK_PORT:-$(free_port)}
aport=${SOAK_ADMIN_PORT:-$(free_port)}

[ "$port" != "$aport" ] || aport=$(free_port)

prefix=$(mktemp -d /tmp/dynamo-rl-soak.XXXXXX)
chmod 755 "$prefix"
fake_pid=

cleanup() {
    trap - INT TERM EXIT
    if [ -f "$prefix/nginx.pid" ]; then
        kill -QUIT "$(cat "$prefix/nginx.pid")" 2>/dev/null || true
        i=0
        while [ -f "$prefix/nginx.pid" ] && [ "$i" -lt 100 ]; do
            sleep 0.1; i=$((i + 1))
        done
        if [ -f "$prefix/nginx.pid" ]; then
            kill -TERM "$(cat "$prefix/nginx.pid")" 2>/dev/null || true
        fi
    fi
    if [ -n "$fake_pid" ]; then
        kill -TERM "$fake_pid" 2>/dev/null || true
        wait "$fake_pid" 2>/dev/null || true
    fi
    if [ -n "${KEEP:-}" ]; then
        echo "soak.sh: scratch directory kept: $prefix" >&2
    else
        rm -rf "$prefix"
    fi
}

trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# the fake Dynamo, 6 workers

mkdir -p "$prefix/fake" "$prefix/soak"
perl "$top/t/fake_dynamo.pl" --state-dir "$prefix/fake" --workers 6 --quiet &
fake_pid=$!

i=0
while [ ! -f "$prefix/fake/ports.json" ]; do
    i=$((i + 1))
    if [ $i -gt 100 ]; then
        echo "soak.sh: the fake Dynamo did not start" >&2
        exit 1
    fi
    sleep 0.1
done

ports=$(cat "$prefix/fake/ports.json")
fport=$(echo "$ports" | sed 's/.*"frontend":\([0-9]*\).*/\1/')
lport=$(echo "$ports" | sed 's/.*"listener":\([0-9]*\).*/\1/')

# examples/dynamo-rl.conf as util/run-gateway instantiates it, on free ports

sed -e "s|@MODULE@|$module|" \
    -e "s|@PREFIX@|$prefix|g" \
    -e "s|@FRONTEND@|127.0.0.1:$fport|" \
    -e "s|@RL_LISTENER@|127.0.0.1:$lport|" \
    -e "s|listen  127.0.0.1:8080;|listen  127.0.0.1:$port;|" \
    -e "s|listen  127.0.0.1:9090;|listen  127.0.0.1:$aport;|" \
    "$top/examples/dynamo-rl.conf" > "$prefix/nginx.conf"

if ! grep -q "127.0.0.1:$port;" "$prefix/nginx.conf" \
   || ! grep -q "127.0.0.1:$aport;" "$prefix/nginx.conf"
then
    echo "soak.sh: examples/dynamo-rl.conf no longer listens on" \
         "127.0.0.1:8080 and 127.0.0.1:9090" >&2
    exit 1
fi

"$nginx" -p "$prefix/" -c "$prefix/nginx.conf" -t -q
"$nginx" -p "$prefix/" -c "$prefix/nginx.conf"

cat > "$prefix/soak.pl" <<'PERL'
use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use List::Util qw(shuffle);
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

my %A = map { split /=/, $_, 2 } @ARGV;

my $T = $A{seconds};
my $DIR = $A{prefix};
my $OUT = "$DIR/soak";
my $PORT = $A{port};
my $APORT = $A{aport};
my $FAKE = "$DIR/fake";
my $JSON = JSON::PP->new->canonical->allow_bignum;

my $ports = $JSON->decode(slurp("$FAKE/ports.json"));
my @WPORTS = @{$ports->{workers}};

my $T0 = time();
my $DEADLINE = $T0 + $T;
my $STOP = "$OUT/stop";

$SIG{PIPE} = 'IGNORE';

###############################################################################

# HTTP/1.1 from a new connection; returns
# { status, headers, body, complete, err, aborted }

sub request {
	my (%o) = @_;

	my $r = { status => 0, headers => {}, body => '', complete => 0 };

	my $s = IO::Socket::INET->new(Proto => 'tcp', Timeout => 5,
		PeerAddr => "127.0.0.1:$o{port}");

	unless ($s) {
		$r->{err} = "connect: $!";
		return $r;
	}

	my $body = $o{body};
	my $req = "$o{method} $o{uri} HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\n";
	$req .= "$_->[0]: $_->[1]\r\n" for @{$o{headers} // []};
	$req .= "Content-Type: application/json\r\nContent-Length: "
		. length($body) . "\r\n" if defined $body;
	$req .= "\r\n" . ($body // '');

	while (length $req) {
		my $n = syswrite($s, $req);
		unless ($n) {
			$r->{err} = "send: $!";
			return $r;
		}
		substr($req, 0, $n, '');
	}

	my $sel = IO::Select->new($s);
	my $buf = '';
	my $deadline = time() + ($o{timeout} // 30);

	for (;;) {
		my $left = $deadline - time();

		if ($left <= 0 || !$sel->can_read($left)) {
			$r->{err} = 'timeout';
			last;
		}

		my $n = sysread($s, $buf, 65536, length $buf);

		unless (defined $n) {
			$r->{err} = "recv: $!";
			last;
		}

		last if $n == 0;

		# a client that goes away after the first event

		if ($o{abort} && $buf =~ /\r\n\r\n.*?data: \{/s) {
			$r->{aborted} = 1;
			last;
		}
	}

	close $s;

	my ($head, $rest) = split /\r\n\r\n/, $buf, 2;

	unless (defined $head && $head =~ m{^HTTP/1\.[01] (\d{3})}) {
		$r->{err} //= length $buf ? 'bad response' : 'no response';
		return $r;
	}

	$r->{status} = $1;

	for my $line (split /\r\n/, $head) {
		$r->{headers}{lc $1} = $2 if $line =~ /^([^:]+):\s*(.*)$/;
	}

	$rest //= '';

	if (($r->{headers}{'transfer-encoding'} // '') =~ /chunked/i) {
		my $out = '';

		while ($rest =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
			my $size = hex $1;

			if ($size == 0) {
				$r->{complete} = 1;
				last;
			}

			last if length($rest) < $size + 2;
			$out .= substr($rest, 0, $size, '');
			last unless $rest =~ s/^\r\n//;
		}

		$r->{body} = $out;

	} elsif (defined $r->{headers}{'content-length'}) {
		$r->{body} = $rest;
		$r->{complete} = length($rest) == $r->{headers}{'content-length'};

	} else {
		$r->{body} = $rest;
		$r->{complete} = !$r->{err};
	}

	return $r;
}

sub slurp {
	my ($path) = @_;
	open my $fh, '<', $path or return undef;
	local $/;
	return <$fh>;
}

sub put_atomic {
	my ($path, $data) = @_;
	open my $fh, '>', "$path.tmp.$$" or die "$path: $!\n";
	print $fh $data;
	close $fh;
	rename "$path.tmp.$$", $path or die "rename $path: $!\n";
}

sub gated {
	my ($r) = @_;
	return $r->{status} == 503
		&& ($r->{headers}{'x-dynamo-rl-reason'} // '') eq 'gate_closed';
}

###############################################################################

# client processes: each appends "start end category outcome ok detail"

my %clients;

sub client {
	my ($name, $code) = @_;

	my $pid = fork() // die "fork: $!\n";

	if ($pid) {
		$clients{$pid} = $name;
		return;
	}

	srand($$ ^ int(time() * 1000));

	open my $log, '>', "$OUT/client-$name.log" or die "$name: $!\n";
	my $n = 0;

	my $record = sub {
		my ($t0, $cat, $outcome, $ok, $detail) = @_;
		printf $log "%.3f %.3f %s %s %d %s\n", $t0 - $T0, time() - $T0,
			$cat, $outcome, $ok ? 1 : 0, $detail // '-';
	};

	while (!-e $STOP && time() < $DEADLINE) {
		$code->($record, ++$n);
	}

	close $log;
	POSIX::_exit(0);
}

sub outcome {
	my ($r) = @_;
	return $r->{aborted} ? 'abort' : $r->{err} ? 'error'
		: $r->{status} ? $r->{status} : 'error';
}

sub detail {
	my ($r) = @_;
	my $d = $r->{err} // $r->{headers}{'x-dynamo-rl-reason'} // '-';
	$d =~ s/\s+/_/g;
	return $d;
}

sub gen_client {
	my ($name) = @_;

	client($name, sub {
		my ($record, $n) = @_;

		my @h;
		push @h, [ 'X-Dynamo-Attempt-Id', "$name-$$-$n" ] if $n % 2;

		my $err500 = rand() < 0.02;
		push @h, [ 'x-fake-scenario', 'status-500' ] if $err500;

		my $t0 = time();
		my $r = request(port => $PORT, method => 'POST',
			uri => '/v1/completions', headers => \@h,
			body => '{"model":"Qwen/Qwen3-0.6B","prompt":"soak",'
				. '"max_tokens":8}');

		my $ok = !$r->{err} && $r->{complete}
			&& (($r->{status} == 200 && $r->{body} =~ /text_completion/)
				|| gated($r)
				|| ($err500 && $r->{status} == 500));

		$record->($t0, 'gen', outcome($r), $ok,
			$err500 && $r->{status} == 500 ? 'scenario' : detail($r));

		# a client that honours Retry-After a little

		sleep(gated($r) ? 0.2 : 0.01);
	});
}

sub sse_client {
	my ($name, $long) = @_;

	client($name, sub {
		my ($record, $n) = @_;

		my $abort = !$long && rand() < 0.1;
		my @h = $long
			? ([ 'x-fake-scenario', 'slow' ], [ 'x-fake-events', 20 ],
				[ 'x-fake-interval-ms', 250 ])
			: ([ 'x-fake-events', 5 ], [ 'x-fake-interval-ms', 20 ]);

		push @h, [ 'X-Dynamo-Attempt-Id', "$name-$$-$n" ] if $n % 2;

		my $t0 = time();
		my $r = request(port => $PORT, method => 'POST',
			uri => '/v1/chat/completions', headers => \@h,
			abort => $abort, timeout => 60,
			body => '{"model":"Qwen/Qwen3-0.6B","stream":true,'
				. '"messages":[{"role":"user","content":"soak"}]}');

		my $events = () = $r->{body} =~ /^data: \{/mg;

		my $ok = $r->{aborted} ? $r->{status} == 200
			: !$r->{err} && $r->{complete}
			&& (($r->{status} == 200 && $events == ($long ? 20 : 5)
				&& $r->{body} =~ /data: \[DONE\]\n\n\z/)
				|| gated($r));

		my $d = detail($r);
		$d = "events=$events" if !$ok && $r->{status} == 200;

		$record->($t0, $long ? 'sse-long' : 'sse', outcome($r), $ok, $d);

		sleep(gated($r) ? 0.5 : $long ? 0 : 0.01);
	});
}

sub discovery_read {
	my ($record) = @_;

	my $t0 = time();
	my $r = request(port => $APORT, method => 'GET',
		uri => '/v1/rl/workers');

	my $doc = eval { $JSON->decode($r->{body}) };
	my $ok = !$r->{err} && $r->{complete} && $r->{status} == 200
		&& ref $doc eq 'HASH' && ref $doc->{workers} eq 'ARRAY';

	$record->($t0, 'discovery', outcome($r), $ok, detail($r));

	return $ok ? $doc->{workers} : undef;
}

sub discovery_client {
	my ($name) = @_;

	# bursts of reads, then a pause: a read stores the document as the
	# snapshot, and the admin plane's own refreshes (valid=1s) run only
	# when no read came for a second

	client($name, sub {
		my ($record, $n) = @_;
		discovery_read($record);
		sleep($n % 10 ? 0.05 : 3);
	});
}

my @ALLOWED = qw(liveness_probe get_weight_version flush_cache);

sub admin_client {
	my ($name) = @_;

	my $workers = [];

	client($name, sub {
		my ($record, $n) = @_;

		if ($n % 200 == 1 || !@$workers) {
			$workers = discovery_read($record) // [];
			return sleep(0.1) unless @$workers;
		}

		my $w = $workers->[int rand @$workers];
		my $id = $w->{instance_id};
		my $base = '/v1/rl/workers';

		my ($method, $uri, @expect);
		my $kind = rand();

		if ($kind < 0.7) {
			my $route = $ALLOWED[int rand @ALLOWED];
			($method, $uri) = ('POST', "$base/$id/engine/$route");
			@expect = (200, 404);

		} else {
			my @denied = (
				[ 'POST', "$base/$id/engine/control/sleep", 403, 404 ],
				[ 'POST', "$base/12ab/engine/liveness_probe", 400 ],
				[ 'GET', "$base/$id/engine/liveness_probe", 405 ],
				[ 'POST', "$base/42/engine/liveness_probe", 404 ],
				[ 'POST', "$base/$id/engine/liveness_probe?x=1", 400 ],
			);

			($method, $uri, @expect) = @{$denied[int rand @denied]};
		}

		my $allowed = $kind < 0.7;

		my $t0 = time();
		my $r = request(port => $APORT, method => $method, uri => $uri,
			body => $method eq 'POST' ? '{}' : undef);

		my $ok = !$r->{err} && $r->{complete}
			&& grep { $_ == $r->{status} } @expect;

		# a 404 for a worker of the client's view only when churn has
		# removed it from the gateway's snapshot

		my $j = eval { $JSON->decode($r->{body}) } // {};
		my $d = $j->{error} // detail($r);

		if ($ok && $r->{status} == 404 && $uri !~ m{/42/}) {
			$ok = $d eq 'unknown_worker';
			$d = 'churn';

			# as a trainer would: read the fleet again

			$workers = [];
		}

		$record->($t0, $allowed ? 'admin' : 'admin-denied',
			outcome($r), $ok, $d);

		sleep(0.02);
	});
}

sub status_client {
	my ($name) = @_;

	client($name, sub {
		my ($record, $n) = @_;

		my $uri = $n % 2 ? '/rl/status' : '/metrics';
		my $t0 = time();
		my $r = request(port => $APORT, method => 'GET', uri => $uri);

		$record->($t0, 'status', outcome($r),
			!$r->{err} && $r->{complete} && $r->{status} == 200,
			detail($r));

		sleep(1);
	});
}

###############################################################################

# the orchestrator's view of nginx

sub master {
	my $m = slurp("$DIR/nginx.pid") // '';
	chomp $m;
	return $m;
}

sub children {
	my ($ppid) = @_;

	my @kids;

	for my $stat (glob('/proc/[0-9]*/stat')) {
		my $line = slurp($stat) // next;
		next unless $line =~ /^(\d+) \((.*)\) (\S) (\d+)/;
		push @kids, $1 if $4 == $ppid && $3 ne 'Z';
	}

	return sort { $a <=> $b } @kids;
}

sub workers {
	my $m = master() or return ();
	return grep { (slurp("/proc/$_/cmdline") // '') =~ /worker process/
		&& (slurp("/proc/$_/cmdline") // '') !~ /shutting down/ }
		children($m);
}

sub proc {
	my ($pid) = @_;

	my $st = slurp("/proc/$pid/status") // return undef;
	my %p = (pid => $pid);

	for my $k (qw(VmRSS RssAnon RssFile RssShmem)) {
		$p{$k} = $st =~ /^$k:\s+(\d+) kB/m ? $1 : 0;
	}

	opendir(my $dh, "/proc/$pid/fd") or return \%p;
	$p{fds} = grep { /^\d+$/ } readdir $dh;

	return \%p;
}

sub zone {
	my $r = request(port => $APORT, method => 'GET', uri => '/rl/status',
		timeout => 10);
	return eval { $JSON->decode($r->{body}) } // {};
}

sub sample {
	my ($label) = @_;

	my $z = zone();
	my $l = $z->{ledger} // {};

	return {
		label => $label,
		t => time() - $T0,
		master => proc(master()),
		workers => [ grep { defined } map { proc($_) } workers() ],
		records => $l->{records} // -1,
		in_flight => $l->{in_flight} // -1,
		capacity => $l->{capacity} // -1,
		evictions => $l->{evictions} // -1,
		expired => $l->{expired} // -1,
		exhausted => $l->{exhausted} // -1,
		generation => $z->{snapshot}{generation} // -1,
		gate => $z->{gate}{state} // '?',
		sockets => scalar(grep { /^\s*\d+:/ } split /\n/,
			slurp('/proc/net/tcp') // ''),
	};
}

# discovery churn: 1 to 6 of the fake's workers; one that comes back
# gets a new instance id

my @ROUTES = sort qw(liveness_probe pause_generation resume_generation
	flush_cache update_weights_from_disk get_weight_version
	update_weights_from_distributed init_weights_update_group
	destroy_weights_update_group update_weights_from_tensor abort_request);

my (@present, @incarnation);

sub churn {
	my $n = 1 + int rand @WPORTS;
	my %keep;

	my @idx = shuffle(0 .. $#WPORTS);
	$keep{$_} = 1 for @idx[0 .. $n - 1];

	my @items;

	for my $i (0 .. $#WPORTS) {
		if (!$keep{$i}) {
			$present[$i] = 0;
			next;
		}

		$incarnation[$i]++ unless $present[$i];
		$present[$i] = 1;

		my $id = 7000000000000000000 + $i * 1000000 + $incarnation[$i];

		push @items, '{"namespace":"dynamo","component":"backend",'
			. '"endpoint":"rl","instance_id":' . $id . ','
			. '"transport":{"tcp":"127.0.0.1:9999/' . sprintf('%x', $id)
			. '/rl"},"request_plane_url":"dyn://dynamo.backend.rl",'
			. '"system_url":"http://127.0.0.1:' . $WPORTS[$i] . '",'
			. '"model":"Qwen/Qwen3-0.6B","routes":['
			. join(',', map { "\"$_\"" } @ROUTES) . '],"world_size":1}';
	}

	put_atomic("$FAKE/discovery.json",
		'{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',', @items) . ']}');

	return scalar @items;
}

###############################################################################

churn();

gen_client("gen$_") for 1 .. 3;
sse_client("sse$_", 0) for 1 .. 2;
sse_client("long$_", 1) for 1 .. 4;
discovery_client('disc1');
admin_client("admin$_") for 1 .. 2;
status_client('status1');

my $gate_period = $T / 30;
$gate_period = 20 if $gate_period > 20;
$gate_period = 4 if $gate_period < 4;

my @marks = (
	[ 0.1 * $T, sprintf('%g min', 0.1 * $T / 60) ],
	[ 0.5 * $T, sprintf('%g min', 0.5 * $T / 60) ],
	[ $T - 2, sprintf('%g min', $T / 60) ],
);

my @reload_at = (0.3 * $T, 0.7 * $T);

my (@series, @points, @reloads, @events);
my ($next_churn, $next_sample, $next_gate) = (3, 5, $gate_period / 2);
my ($gate_closed, $churns, $gate_cycles) = (0, 1, 0);

open my $ev, '>', "$OUT/events.log" or die "events.log: $!\n";
select((select($ev), $| = 1)[0]);

sub event {
	my ($what) = @_;
	printf $ev "%.3f %s\n", time() - $T0, $what;
}

sub gate_api {
	my ($body) = @_;
	my $r = request(port => $APORT, method => 'POST', uri => '/rl/gate',
		body => $body);
	event("gate $body -> " . outcome($r));
	return $r;
}

my %gate_results;

while (time() < $DEADLINE) {
	my $now = time() - $T0;

	if ($now >= $next_churn) {
		my $n = churn();
		$churns++;
		event("churn: $n workers");
		$next_churn += 3;
	}

	if ($now >= $next_gate) {
		if ($gate_closed) {
			my $r = gate_api('{"action":"open"}');
			$gate_results{$r->{status} == 200 ? 'ok' : 'failed'}++;
			$gate_closed = 0;
			$next_gate += $gate_period * 7 / 8;

		} else {
			my $r = gate_api('{"action":"close","reason":"soak",'
				. '"lease":"' . int($gate_period * 2) . 's"}');
			$gate_results{$r->{status} == 200 ? 'ok' : 'failed'}++;
			$gate_closed = 1;
			$gate_cycles++;
			$next_gate += $gate_period / 8;
		}
	}

	if (@reload_at && $now >= $reload_at[0]) {
		shift @reload_at;

		my @old = workers();
		my $t = time();
		my $rc = system($A{nginx}, '-p', "$DIR/", '-c', "$DIR/nginx.conf",
			'-s', 'reload');

		push @reloads, { t => $t - $T0, old => \@old, rc => $rc,
			exited => undef };
		event("reload (nginx -s reload, exit $rc), old workers @old");
	}

	for my $rl (@reloads) {
		next if defined $rl->{exited};
		next if grep { -e "/proc/$_" && (slurp("/proc/$_/stat") // '')
			!~ /^\d+ \(.*\) Z/ } @{$rl->{old}};
		$rl->{exited} = time() - $T0;
		event(sprintf('old workers of the reload at %.1f s exited after'
			. ' %.2f s', $rl->{t}, $rl->{exited} - $rl->{t}));
	}

	if (@marks && $now >= $marks[0][0]) {
		my $m = shift @marks;
		push @points, sample($m->[1]);
		event("sample $m->[1]");
	}

	if ($now >= $next_sample) {
		push @series, sample(sprintf('%.0f s', $now));
		$next_sample += 5;
	}

	sleep(0.1);
}

put_atomic($STOP, '');
event('stop');

# the clients finish their current request (a long stream takes 5 s)

my $wait_until = time() + 90;

while (%clients && time() < $wait_until) {
	while ((my $pid = waitpid(-1, WNOHANG)) > 0) {
		delete $clients{$pid};
	}
	sleep(0.1);
}

kill 'KILL', keys %clients;

gate_api('{"action":"open"}') if $gate_closed;

for my $rl (@reloads) {
	next if defined $rl->{exited};
	my $deadline = time() + 10;
	while (time() < $deadline
		&& grep { -e "/proc/$_" } @{$rl->{old}}) { sleep(0.1); }
	$rl->{exited} = time() - $T0 unless grep { -e "/proc/$_" } @{$rl->{old}};
}

my $final = zone();

###############################################################################

# the report

my (%tot, %cls, @fails, $nreq);

for my $f (glob("$OUT/client-*.log")) {
	open my $fh, '<', $f or next;

	while (my $line = <$fh>) {
		my ($t0, $t1, $cat, $out, $ok, $detail) = split ' ', $line;
		$nreq++;

		my $class = $out =~ /^(\d)\d\d$/ ? "${1}xx" : $out;

		$tot{$cat}{$class}++;
		$tot{$cat}{total}++;
		$cls{$class}++;
		$tot{$cat}{failed}++ unless $ok;
		$tot{$cat}{"$out $detail"}++ if $ok && $out ne '200';

		push @fails, [ $t0, $t1, $cat, $out, $detail ] unless $ok;
	}
}

sub in_window {
	my ($rl, $t0, $t1) = @_;
	my $end = $rl->{exited} // ($rl->{t} + 60);
	$end = $rl->{t} + 5 if $end < $rl->{t} + 5;
	return $t1 >= $rl->{t} - 0.5 && $t0 <= $end;
}

my @lines;
my $p = sub { push @lines, join('', @_) };

my $mb = sub { sprintf '%.1f', $_[0] / 1024 };

$p->("## Totals by status class\n");
$p->("| class of request | requests | 2xx | 4xx | 5xx | client abort |"
	. " connection error or timeout | failed |");
$p->('|---|---:|---:|---:|---:|---:|---:|---:|');

for my $cat (qw(gen sse sse-long discovery admin admin-denied status)) {
	my $c = $tot{$cat} // {};
	$p->(sprintf '| %s | %d | %d | %d | %d | %d | %d | %d |', $cat,
		$c->{total} // 0, $c->{'2xx'} // 0, $c->{'4xx'} // 0,
		$c->{'5xx'} // 0, $c->{abort} // 0, $c->{error} // 0,
		$c->{failed} // 0);
}

$p->(sprintf '| **all** | %d | %d | %d | %d | %d | %d | %d |', $nreq // 0,
	$cls{'2xx'} // 0, $cls{'4xx'} // 0, $cls{'5xx'} // 0,
	$cls{abort} // 0, $cls{error} // 0, scalar @fails);

$p->('');
$p->(sprintf 'Over %d s: %.0f requests/s; the orchestrator\'s gate API'
	. ' calls: %d ok, %d failed (%d close/open cycles); %d discovery'
	. ' documents written (churn).', $T, ($nreq // 0) / $T,
	$gate_results{ok} // 0, $gate_results{failed} // 0, $gate_cycles,
	$churns);
$p->('');
$p->('Expected answers other than 200, by class and reason:');
$p->('');

for my $cat (sort keys %tot) {
	my @k = grep { / / } sort keys %{$tot{$cat}};
	next unless @k;
	$p->("- $cat: " . join(', ', map { "$_ × $tot{$cat}{$_}" } @k));
}

$p->('');
$p->("## Reloads\n");
$p->('| reload | at | old worker processes | exited after | requests in'
	. ' the window | failed in the window |');
$p->('|---|---:|---|---:|---:|---:|');

my $nr = 0;
my $reload_failed = 0;

for my $rl (@reloads) {
	$nr++;

	my ($n, $f) = (0, 0);

	for my $ff (glob("$OUT/client-*.log")) {
		open my $fh, '<', $ff or next;
		while (my $line = <$fh>) {
			my ($t0, $t1, $cat, $out, $ok) = split ' ', $line;
			next unless in_window($rl, $t0, $t1);
			$n++;
			$f++ unless $ok;
		}
	}

	$reload_failed += $f;

	$p->(sprintf '| %d | %.1f s | %s | %s | %d | %d |', $nr, $rl->{t},
		join(' ', @{$rl->{old}}), defined $rl->{exited}
			? sprintf('%.2f s', $rl->{exited} - $rl->{t}) : 'NOT EXITED',
		$n, $f);
}

$p->('');
$p->(sprintf 'Requests failed during the reloads: **%d**. Failed outside'
	. ' them: **%d**.', $reload_failed, @fails - $reload_failed);

if (@fails) {
	$p->('');
	$p->('First failures (start s, end s, class, outcome, detail):');
	$p->('');
	$p->('```');
	$p->(join ' ', @$_) for @fails[0 .. (@fails > 30 ? 29 : $#fails)];
	$p->('```');
}

$p->('');
$p->("## Worker processes and zone at the sample points\n");
$p->('RSS in MiB (VmRSS = RssAnon + RssFile + RssShmem), fds = entries of'
	. ' /proc/<pid>/fd; the ledger from dynamo_rl_status; zone free pages'
	. ' ≈ (capacity − records) / 32 (capacity counts free pages at 128'
	. ' bytes a record).');
$p->('');
$p->('| at | process | pid | VmRSS | RssAnon | RssShmem | fds |'
	. ' ledger records | in flight | capacity | free pages | evictions |'
	. ' expired | generation |');
$p->('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');

for my $s (@points) {
	my @procs = ([ 'master', $s->{master} ],
		map { [ 'worker', $_ ] } @{$s->{workers}});

	my $first = 1;

	for my $pp (@procs) {
		my ($name, $q) = @$pp;
		next unless $q;

		$p->(sprintf '| %s | %s | %d | %s | %s | %s | %d | %s |',
			$first ? $s->{label} . sprintf(' (%.0f s)', $s->{t}) : '',
			$name, $q->{pid}, $mb->($q->{VmRSS}), $mb->($q->{RssAnon}),
			$mb->($q->{RssShmem}), $q->{fds} // -1,
			$first ? join(' | ', $s->{records}, $s->{in_flight},
				$s->{capacity}, int(($s->{capacity} - $s->{records}) / 32),
				$s->{evictions}, $s->{expired}, $s->{generation})
				: '| | | | | |');
		$first = 0;
	}
}

# worker processes of one generation (between reloads): growth

$p->('');
$p->('Growth within one generation of worker processes (the series, one'
	. ' sample every 5 s; first and last sample of each pid):');
$p->('');
$p->('| pid | from | to | VmRSS | RssAnon | RssShmem | fds |');
$p->('|---:|---:|---:|---|---|---|---|');

my %by;

for my $s (@series) {
	push @{$by{$_->{pid}}}, [ $s->{t}, $_ ] for @{$s->{workers}};
}

for my $pid (sort { $by{$a}[0][0] <=> $by{$b}[0][0] || $a <=> $b } keys %by) {
	my ($a0, $a1) = ($by{$pid}[0], $by{$pid}[-1]);
	my ($x, $y) = ($a0->[1], $a1->[1]);

	$p->(sprintf '| %d | %.0f s | %.0f s | %s → %s | %s → %s | %s → %s |'
		. ' %d → %d |', $pid, $a0->[0], $a1->[0],
		$mb->($x->{VmRSS}), $mb->($y->{VmRSS}),
		$mb->($x->{RssAnon}), $mb->($y->{RssAnon}),
		$mb->($x->{RssShmem}), $mb->($y->{RssShmem}),
		$x->{fds} // -1, $y->{fds} // -1);
}

# the gateway's own view: access.log by status class

my %acc;

if (open my $al, '<', "$DIR/access.log") {
	while (my $line = <$al>) {
		$acc{$1 . 'xx'}++ if $line =~ /"status":(\d)\d\d,/;
		$acc{total}++;
	}
}

$p->('');
$p->("## access.log\n");
$p->(sprintf 'The gateway logged %d requests: %s (a stream that a client'
	. ' left after its first event is logged with the 200 already sent;'
	. ' the orchestrator\'s gate and status calls are included).', $acc{total} // 0, join(', ', map { "$_ $acc{$_}" }
	grep { $_ ne 'total' } sort keys %acc));

# error.log by level

my %lvl;
my %msgs;

if (open my $el, '<', "$DIR/error.log") {
	while (my $line = <$el>) {
		next unless $line =~ /^\S+ \S+ \[(\w+)\] \d+#\d+: (?:\*\d+ )?(.*)$/;
		my ($level, $m) = ($1, $2);
		$lvl{$level}++;
		next if $level eq 'info' || $level eq 'debug';
		$m =~ s/, client: .*//;
		$m =~ s/\d+/N/g;
		$msgs{"[$level] $m"}++;
	}
}

$p->('');
$p->("## error.log\n");
$p->('| level | lines |');
$p->('|---|---:|');
$p->("| $_ | " . ($lvl{$_} // 0) . ' |')
	for qw(emerg alert crit error warn notice info);
$p->('');
$p->('Distinct messages above info (numbers replaced by N):');
$p->('');
$p->('```');
$p->(sprintf '%6d %s', $msgs{$_}, substr($_, 0, 160))
	for grep { defined } (sort { $msgs{$b} <=> $msgs{$a} } keys %msgs)[0 .. 19];
$p->('```');

$p->('');
$p->('Final zone counters (dynamo_rl_status): '
	. $JSON->encode({ ledger => $final->{ledger},
		counters => $final->{counters}{requests},
		refreshes => $final->{counters}{discovery_refreshes},
		generation => $final->{snapshot}{generation} }));

@lines = grep { defined } @lines;
print "$_\n" for @lines;

# series for the record

open my $sf, '>', "$OUT/series.tsv";
print $sf "t\tpid\tVmRSS\tRssAnon\tRssShmem\tfds\trecords\tcapacity\n";
for my $s (@series) {
	printf $sf "%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", $s->{t}, $_->{pid},
		$_->{VmRSS}, $_->{RssAnon}, $_->{RssShmem}, $_->{fds} // -1,
		$s->{records}, $s->{capacity} for @{$s->{workers}};
}
close $sf;

my $bad = @fails || grep({ !defined $_->{exited} } @reloads)
	|| ($lvl{alert} // 0) || ($lvl{crit} // 0) || ($lvl{emerg} // 0);

exit($bad ? 1 : 0);
PERL

git_rev=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
git_dirty=$(git -C "$top" status --porcelain --untracked-files=no \
            -- ngx_dynamo_rl_module config 2>/dev/null | wc -l)

{
    echo "# Soak: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- command: \`SOAK_SECONDS=$seconds bench/soak.sh\`"
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo \
        | sed 's/.*: //'), kernel $(uname -r), \
$(awk '/MemTotal/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
    echo "- nginx: $("$nginx" -v 2>&1 | sed 's/^nginx version: //');" \
         "module: $module, built $(date -u -r "$module" '+%Y-%m-%d %H:%M UTC');" \
         "repository at $git_rev$([ "$git_dirty" -gt 0 ] \
         && echo ' with uncommitted changes to the module')"
    echo "- configuration: examples/dynamo-rl.conf (worker_processes 2," \
         "zone rl:8m, attempt TTL 10m, discovery valid=1s), listening on" \
         "127.0.0.1:$port and 127.0.0.1:$aport; fake Dynamo with 6 workers"
    echo "- load: 3 gen, 2 sse, 4 sse-long, 1 discovery, 2 admin, 1 status" \
         "client processes, a new connection per request; churn every 3 s;" \
         "gate cycles; nginx -s reload at $((seconds * 3 / 10)) s and" \
         "$((seconds * 7 / 10)) s"
    echo
} > "$prefix/report.head"

set +e
perl "$prefix/soak.pl" seconds="$seconds" prefix="$prefix" port="$port" \
    aport="$aport" nginx="$nginx" > "$prefix/report.body"
rc=$?
set -e

mkdir -p "$(dirname "$report")"
cat "$prefix/report.head" "$prefix/report.body" > "$report"
cat "$report"
echo
echo "report: $report"

if [ $rc -ne 0 ]; then
    echo "soak.sh: FAILED: failed requests, old worker processes left," \
         "or [alert]/[crit]/[emerg] lines (see above)" >&2
fi

exit $rc
