#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A fake NVIDIA Dynamo for the ngx_dynamo_rl_module tests, loopback only.
#
# It serves the three HTTP planes a gateway sits in front of, with the wire
# formats of /work/shared/reference/dynamo-contract.md (sections 1, 2, 4):
#
#   frontend   OpenAI-compatible request plane (port 8000 in real Dynamo):
#              POST /v1/completions, /v1/chat/completions, /v1/responses,
#              POST|PUT /generate, GET /v1/models, /health, /live;
#              flat errors {"message","type","code"}, nested under
#              "error" on /generate (flat for unparseable JSON), whose
#              meta_info.id is the body's rid; SSE streams with
#              chunked transfer encoding; x-request-id echoed.
#   listener   the RL discovery listener (port 8001): GET|HEAD
#              /v1/rl/workers only, empty-body 404/405 elsewhere.
#   workers    one system server per worker (DYN_SYSTEM_PORT):
#              any method on /engine/<route>, GET /health and /live.
#
# Usage:
#
#   t/fake_dynamo.pl --state-dir DIR [--frontend-port P] [--listener-port P]
#       [--worker-ports P1,P2,...] [--workers N] [--quiet]
#       [--no-parent-watch]
#
# Ports default to 0 (the kernel picks).  Once every socket listens,
# DIR/ports.json is written atomically:
#   {"frontend":P,"listener":P,"workers":[P1,P2,P3]}
#
# Frontend scenarios, chosen by request headers:
#   x-fake-scenario     ok (default), slow, error-frame, abrupt, split-done,
#                       status-NNN, no-response, hang, accel-redirect;
#                       an unknown name gets a 400 flat error
#   x-fake-events       number of SSE events (default 3)
#   x-fake-interval-ms  gap between events (default 0, 200 for slow); a
#                       non-streamed "ok" answer is delayed by
#                       events * interval
# slow, error-frame, abrupt and split-done always stream.  Requests in
# HTTP/1.0 get a close-delimited stream instead of a chunked one.
#
# Files in DIR read on every request (tests change them at will):
#   discovery.json        served verbatim by the listener
#   discovery.status      status code of the listener's answer
#   discovery.delay_ms    delay before the listener answers
#   worker-<i>.respond.json
#                         {"status":S,"body":<JSON>} answers every /engine
#                         call of worker i; optional extensions:
#                         "raw":"<bytes>" instead of "body",
#                         "content_type":"...", "delay_ms":N,
#                         "headers":[["Name","value"],...] (a hostile
#                         worker's extra header lines)
#   worker-<i>.flavor     "sglang": worker i is an SGLang worker, with the
#                         Dynamo engine routes of SGLang (control/... and
#                         DYN_SGLANG_ENGINE_ROUTES descriptors) and its
#                         {"success","message"} answers (sglang_route())
#
# Files in DIR written by the fake (one JSON object per line, each line
# appended with a single write, so concurrent children do not interleave):
#   frontend.log          every request, and {"event":"client_closed",...}
#                         when a client goes away during a stream or hang
#   listener.log          every listener request
#   worker-<i>.log        every worker request, 404s included
#   worker-<i>.state      pause state and weight version of worker i
#
# Process model: the supervisor puts itself in a new process group, binds
# every socket, then forks one server per listener; a server forks one
# child per accepted connection.  SIGTERM/SIGINT to the supervisor
# terminates the whole group; so does the death of the supervisor's parent
# (a test killed by alarm leaves nothing behind), unless --no-parent-watch.

###############################################################################

use warnings;
use strict;

use File::Basename qw(dirname);
use File::Spec;
use Getopt::Long qw(GetOptions);
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw(:sys_wait_h :signal_h EINTR EAGAIN);
use Time::HiRes qw(time sleep);

use lib dirname(__FILE__) . '/lib';
use Test::DynamoRL::HTTP qw(add_header);

###############################################################################

my $HOST = '127.0.0.1';
my $MODEL = 'Qwen/Qwen3-0.6B';

my $IDLE_TIMEOUT = 120;		# keep-alive wait for the next request
my $READ_TIMEOUT = 60;		# a request that started must finish in time
my $HANG_TIMEOUT = 60;		# the hang scenario gives up after this
my $MAX_HEADER = 64 * 1024;
my $MAX_BODY = 64 * 1024 * 1024;

# the routes a Python vLLM worker advertises, sorted as lib.rs sorts them

my @VLLM_ROUTES = sort qw/
	liveness_probe pause_generation resume_generation flush_cache
	update_weights_from_disk get_weight_version
	update_weights_from_distributed init_weights_update_group
	destroy_weights_update_group update_weights_from_tensor abort_request
/;

# registered by the same worker, callable, but not advertised

my @HIDDEN_ROUTES = qw!
	control/sleep control/wake_up control/start_profile control/stop_profile
	control/scale_elastic_ep
!;

my %REGISTRY = map { $_ => 1 } @VLLM_ROUTES, @HIDDEN_ROUTES;

# u64 instance ids kept as strings: the last two do not survive a double

my @INSTANCE_IDS = (
	'7587888160958628117',
	'9007199254740993',
	'18446744073709551615',
);

my %REASON = (
	100 => 'Continue', 200 => 'OK', 201 => 'Created', 202 => 'Accepted',
	204 => 'No Content', 301 => 'Moved Permanently', 302 => 'Found',
	304 => 'Not Modified', 307 => 'Temporary Redirect',
	308 => 'Permanent Redirect', 400 => 'Bad Request',
	401 => 'Unauthorized', 403 => 'Forbidden', 404 => 'Not Found',
	405 => 'Method Not Allowed', 406 => 'Not Acceptable',
	408 => 'Request Timeout', 409 => 'Conflict', 410 => 'Gone',
	411 => 'Length Required', 413 => 'Payload Too Large',
	414 => 'URI Too Long', 415 => 'Unsupported Media Type',
	422 => 'Unprocessable Entity', 429 => 'Too Many Requests',
	431 => 'Request Header Fields Too Large',
	500 => 'Internal Server Error', 501 => 'Not Implemented',
	502 => 'Bad Gateway', 503 => 'Service Unavailable',
	504 => 'Gateway Timeout', 505 => 'HTTP Version Not Supported',
);

my %FRONTEND_ROUTES = (
	'/v1/completions' => [ 'POST' ],
	'/v1/chat/completions' => [ 'POST' ],
	'/v1/responses' => [ 'POST' ],
	'/generate' => [ 'POST', 'PUT' ],
	'/v1/models' => [ 'GET', 'HEAD' ],
	'/health' => [ 'GET', 'HEAD' ],
	'/live' => [ 'GET', 'HEAD' ],
);

my %STREAM_SCENARIOS = map { $_ => 1 } qw/slow error-frame abrupt split-done/;

my @WORDS = qw/Hello from the fake Dynamo frontend/;

my $TEXT_PLAIN = 'text/plain; charset=utf-8';

my $JSON = JSON::PP->new->utf8->canonical->allow_nonref;
my $LOGJSON = JSON::PP->new->ascii->canonical->allow_nonref;

###############################################################################

my %opt = (
	frontend_port => 0,
	listener_port => 0,
	worker_ports => '',
	quiet => 0,
	parent_watch => 1,
);

GetOptions(
	'state-dir=s' => \$opt{state_dir},
	'frontend-port=i' => \$opt{frontend_port},
	'listener-port=i' => \$opt{listener_port},
	'worker-ports=s' => \$opt{worker_ports},
	'workers=i' => \$opt{workers},
	'quiet' => \$opt{quiet},
	'parent-watch!' => \$opt{parent_watch},
	'help' => sub { usage(0) },
) or usage(2);

usage(2) unless defined $opt{state_dir} && !@ARGV;

my @wports = grep { length } split /\s*,\s*/, $opt{worker_ports};

for my $p ($opt{frontend_port}, $opt{listener_port}, @wports) {
	die "fake_dynamo: bad port \"$p\"\n"
		unless $p =~ /^\d+$/ && $p < 65536;
}

my $NWORKERS = $opt{workers} // (@wports ? scalar @wports : 3);

die "fake_dynamo: --workers $NWORKERS is less than the "
	. scalar(@wports) . " --worker-ports given\n"
	if $NWORKERS < @wports;

push @wports, 0 while @wports < $NWORKERS;

my $STATE = $opt{state_dir};

unless (-d $STATE) {
	mkdir $STATE or die "fake_dynamo: cannot create $STATE: $!\n";
}

###############################################################################

$| = 1;
$SIG{PIPE} = 'IGNORE';

my $STOP = 0;
$SIG{TERM} = $SIG{INT} = sub { $STOP = 1 };

my $SUPERVISOR = $$;
my $PPID = getppid();

# own process group, so that shutdown can signal every descendant

POSIX::setpgid(0, 0);

unlink state_file('ports.json');

for my $i (0 .. $NWORKERS - 1) {
	write_state($i, { paused => JSON::PP::false, version => 'initial' });
}

my $frontend = listen_on($opt{frontend_port});
my $listener = listen_on($opt{listener_port});
my @workers = map { listen_on($_) } @wports;

my @all = ($frontend, $listener, @workers);
my %servers;

my %ports = (
	frontend => $frontend->sockport() + 0,
	listener => $listener->sockport() + 0,
	workers => [ map { $_->sockport() + 0 } @workers ],
);

spawn_server($frontend, 'frontend', \&frontend_handler);
spawn_server($listener, 'listener', \&listener_handler);

for my $i (0 .. $#workers) {
	spawn_server($workers[$i], "worker$i",
		sub { worker_handler($i, @_) });
}

$_->close() for @all;

write_atomic('ports.json', $JSON->encode(\%ports));

unless ($opt{quiet}) {
	printf "%-9s http://%s:%d\n", 'frontend', $HOST, $ports{frontend};
	printf "%-9s http://%s:%d\n", 'listener', $HOST, $ports{listener};

	for my $i (0 .. $#workers) {
		printf "%-9s http://%s:%d\n", "worker$i", $HOST,
			$ports{workers}[$i];
	}
}

my $rc = 0;

until ($STOP) {
	sleep(0.25);

	# a server exits 0 only when told to quit (a TERM to the whole
	# process group can reach it before it reaches us): stop quietly

	while ((my $pid = waitpid(-1, WNOHANG)) > 0) {
		my $name = delete $servers{$pid} // next;

		if ($?) {
			warn "fake_dynamo: $name server exited unexpectedly ($?)\n";
			$rc = 1;
		}

		$STOP = 1;
	}

	$STOP = 1 if $opt{parent_watch} && $PPID != 1 && getppid() != $PPID;
}

shutdown_all();
exit $rc;

###############################################################################

sub usage {
	my ($code) = @_;

	print STDERR <<'EOF';
usage: fake_dynamo.pl --state-dir DIR [--frontend-port P] [--listener-port P]
           [--worker-ports P1,P2,...] [--workers N] [--quiet]
           [--no-parent-watch]
EOF

	exit $code;
}

sub listen_on {
	my ($port) = @_;

	my $s = IO::Socket::INET->new(
		Proto => 'tcp',
		LocalAddr => $HOST,
		LocalPort => $port,
		Listen => 128,
		ReuseAddr => 1,
	) or die "fake_dynamo: cannot listen on $HOST:$port: $@\n";

	return $s;
}

sub shutdown_all {
	$SIG{TERM} = $SIG{INT} = 'IGNORE';

	if (getpgrp() == $$) {
		kill 'TERM', -$$;

	} else {
		kill 'TERM', keys %servers;
	}

	my $deadline = time() + 3;

	while (%servers && time() < $deadline) {
		while ((my $pid = waitpid(-1, WNOHANG)) > 0) {
			delete $servers{$pid};
		}

		sleep(0.05) if %servers;
	}

	if (%servers) {
		kill 'KILL', keys %servers;
		1 while waitpid(-1, WNOHANG) > 0;
	}
}

###############################################################################

# one process per listener: accept, fork a child per connection, reap

sub spawn_server {
	my ($lsock, $name, $handler) = @_;

	my $pid = fork();
	die "fake_dynamo: fork: $!\n" unless defined $pid;

	if ($pid) {
		$servers{$pid} = $name;
		return;
	}

	$0 = "fake_dynamo $name";

	for my $s (@all) {
		$s->close() if $s != $lsock;
	}

	my %kids;

	$SIG{CHLD} = sub {
		while ((my $p = waitpid(-1, WNOHANG)) > 0) {
			delete $kids{$p};
		}
	};

	# terminate and reap the connection children, so none is orphaned

	my $quit = sub {
		$SIG{CHLD} = $SIG{TERM} = $SIG{INT} = 'IGNORE';
		$lsock->close();

		kill 'TERM', keys %kids;

		my $deadline = time() + 1;

		while (%kids) {
			my $p = waitpid(-1, WNOHANG);
			last if $p < 0;

			if ($p > 0) {
				delete $kids{$p};
				next;
			}

			if (time() > $deadline) {
				kill 'KILL', keys %kids;
				$deadline = time() + 1;
			}

			sleep(0.02);
		}

		POSIX::_exit(0);
	};

	$SIG{TERM} = $SIG{INT} = $quit;

	my $sel = IO::Select->new($lsock);
	my $chld = POSIX::SigSet->new(SIGCHLD);
	my $old = POSIX::SigSet->new();

	for ( ;; ) {
		$quit->() if getppid() != $SUPERVISOR;

		next unless $sel->can_read(1);

		my $c = $lsock->accept() or next;

		# keep SIGCHLD out until the new pid is in %kids

		sigprocmask(SIG_BLOCK, $chld, $old);

		my $kid = fork();

		if (!defined $kid) {
			sigprocmask(SIG_SETMASK, $old);
			warn "fake_dynamo $name: fork: $!\n";
			$c->close();
			sleep(0.1);
			next;
		}

		if ($kid == 0) {
			$SIG{CHLD} = $SIG{TERM} = $SIG{INT} = 'DEFAULT';
			sigprocmask(SIG_SETMASK, $old);

			$lsock->close();
			$0 = "fake_dynamo $name connection";

			eval { serve_connection($c, $handler); };
			warn "fake_dynamo $name: $@" if $@;

			POSIX::_exit(0);
		}

		$kids{$kid} = 1;
		sigprocmask(SIG_SETMASK, $old);

		$c->close();
	}
}

###############################################################################

# HTTP/1.x connection handling

sub serve_connection {
	my ($sock, $handler) = @_;

	binmode $sock;

	my $c = { sock => $sock, buf => '', close => 0 };

	for ( ;; ) {
		my $req = read_request($c);
		last unless defined $req;

		if (my $status = $req->{error}) {
			$c->{close} = 1;
			conn_write($c, status_line($status)
				. "Date: " . http_date() . "\r\n"
				. "Content-Length: 0\r\nConnection: close\r\n\r\n");
			last;
		}

		$c->{close} = 1 unless keepalive($req);

		my $r = $handler->($c, $req) // 'close';
		last if $r ne 'keep' || $c->{close};
	}

	lingering_close($c);
}

sub keepalive {
	my ($req) = @_;

	my %tok = map { lc($_) => 1 }
		map { split /\s*,\s*/ } header_all($req, 'connection');

	return 0 if $tok{close};
	return 1 if $req->{version} eq '1.1';
	return $tok{'keep-alive'} ? 1 : 0;
}

# half-close, then drain what the client still sends (bounded), so that
# the kernel does not answer unread data with a reset that eats our reply

sub lingering_close {
	my ($c) = @_;

	my $sock = $c->{sock};
	shutdown($sock, 1);

	my $sel = IO::Select->new($sock);
	my $deadline = time() + 2;

	while ((my $left = $deadline - time()) > 0) {
		next unless $sel->can_read($left);
		my $n = sysread($sock, my $junk, 65536);
		next if !defined $n && ($! == EINTR || $! == EAGAIN);
		last unless $n;
	}

	close($sock);
}

# wait until $deadline for the socket, then read once into the buffer:
# the bytes read, 0 on EOF, -1 on an error; undef if nothing came in time
# or the read was interrupted

sub conn_read {
	my ($c, $deadline) = @_;

	my $left = $deadline - time();

	return undef
		unless IO::Select->new($c->{sock})->can_read($left < 0 ? 0 : $left);

	my $n = sysread($c->{sock}, $c->{buf}, 65536, length $c->{buf});

	return $n if defined $n;
	return $! == EINTR || $! == EAGAIN ? undef : -1;
}

# fill the buffer: 1 on data, 0 on EOF or error, -1 on timeout

sub conn_fill {
	my ($c, $timeout) = @_;

	my $deadline = time() + $timeout;

	for ( ;; ) {
		return -1 if time() >= $deadline;

		my $n = conn_read($c, $deadline) // next;

		return $n > 0 ? 1 : 0;
	}
}

sub conn_line {
	my ($c) = @_;

	for ( ;; ) {
		if ($c->{buf} =~ s/\A([^\n]*)\n//) {
			my $line = $1;
			$line =~ s/\r\z//;
			return $line;
		}

		return undef if length $c->{buf} > $MAX_HEADER;
		return undef if conn_fill($c, $READ_TIMEOUT) <= 0;
	}
}

sub conn_need {
	my ($c, $n) = @_;

	while (length $c->{buf} < $n) {
		return 0 if conn_fill($c, $READ_TIMEOUT) <= 0;
	}

	return 1;
}

sub conn_write {
	my ($c, $data) = @_;

	my $off = 0;

	while ($off < length $data) {
		my $n = syswrite($c->{sock}, $data, length($data) - $off, $off);

		if (!defined $n) {
			next if $! == EINTR || $! == EAGAIN;
			return 0;
		}

		$off += $n;
	}

	return 1;
}

# wait up to $secs, watching the socket; returns 1 if the client went away
# (EOF or error), 0 otherwise; bytes that arrive meanwhile (pipelined)
# are kept, and the wait goes on

sub client_gone {
	my ($c, $secs) = @_;

	my $deadline = time() + $secs;

	for ( ;; ) {
		my $n = conn_read($c, $deadline);

		return 1 if defined $n && $n <= 0;
		return 0 if time() >= $deadline;
	}
}

# returns undef (close silently), {error => status}, or the request

sub read_request {
	my ($c) = @_;

	my $head;

	for ( ;; ) {
		$c->{buf} =~ s/\A(?:\r?\n)+//;

		if ($c->{buf} =~ /\A(.*?\r?\n)\r?\n/s) {
			$head = $1;
			substr($c->{buf}, 0, $+[0], '');
			last;
		}

		return { error => 431 } if length $c->{buf} > $MAX_HEADER;

		my $r = conn_fill($c, length $c->{buf}
			? $READ_TIMEOUT : $IDLE_TIMEOUT);

		return undef if $r <= 0;
	}

	my @lines = split /\r?\n/, $head;
	my $rl = shift @lines;

	return { error => 400 }
		unless $rl =~ m!^([A-Za-z]+) (\S+) HTTP/(1\.[01])$!;

	my $req = {
		method => $1,
		uri => $2,
		version => $3,
		headers => {},
		hlist => [],
		body => '',
	};

	for my $line (@lines) {
		return { error => 400 }
			unless $line =~ /^([!#\$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/;

		my ($name, $value) = (lc $1, $2);

		push @{$req->{hlist}}, [ $name, $value ];
		add_header($req->{headers}, $name, $value);
	}

	my $te = join ',', header_all($req, 'transfer-encoding');
	my @cl = header_all($req, 'content-length');

	my $expect = lc(header($req, 'expect') // '');
	my $continue = sub {
		conn_write($c, "HTTP/1.1 100 Continue\r\n\r\n")
			if $expect eq '100-continue' && $req->{version} eq '1.1'
			&& length $c->{buf} == 0;
	};

	if ($te ne '') {
		return { error => 501 } unless $te =~ /(?:^|,)\s*chunked\s*$/i;

		$continue->();

		for ( ;; ) {
			my $line = conn_line($c);
			return undef unless defined $line;

			return { error => 400 }
				unless $line =~ /^([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?$/;

			my $size = hex $1;
			last if $size == 0;

			return { error => 413 }
				if length($req->{body}) + $size > $MAX_BODY;

			return undef unless conn_need($c, $size + 2);

			$req->{body} .= substr($c->{buf}, 0, $size, '');

			return { error => 400 } unless $c->{buf} =~ s/\A\r?\n//;
		}

		# trailer fields, up to the empty line

		for ( ;; ) {
			my $line = conn_line($c);
			return undef unless defined $line;
			last if $line eq '';
		}

		# a chunked request cannot be trusted for framing afterwards
		# if it also carried a content length

		$c->{close} = 1 if @cl;

	} elsif (@cl) {
		my %uniq = map { $_ => 1 } map { split /\s*,\s*/ } @cl;

		return { error => 400 } if keys %uniq != 1;

		my ($len) = keys %uniq;

		return { error => 400 } unless $len =~ /^\d{1,18}$/;
		return { error => 413 } if $len > $MAX_BODY;

		if ($len > 0) {
			$continue->();
			return undef unless conn_need($c, $len);
			$req->{body} = substr($c->{buf}, 0, $len, '');
		}
	}

	return $req;
}

sub header {
	my ($req, $name) = @_;

	my $v = $req->{headers}{$name};
	return ref $v ? $v->[0] : $v;
}

sub header_all {
	my ($req, $name) = @_;

	my $v = $req->{headers}{$name};
	return () unless defined $v;
	return ref $v ? @$v : ($v);
}

sub path_of {
	my ($uri) = @_;

	my $path = $uri;
	$path =~ s!^[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*!!;
	$path =~ s/[?#].*//s;

	return length $path ? $path : '/';
}

sub status_line {
	my ($status) = @_;

	# hyper writes "<none>" when a status has no canonical reason

	return "HTTP/1.1 $status " . ($REASON{$status} // '<none>') . "\r\n";
}

sub http_date {
	my @t = gmtime();
	my @day = qw/Sun Mon Tue Wed Thu Fri Sat/;
	my @mon = qw/Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec/;

	return sprintf "%s, %02d %s %04d %02d:%02d:%02d GMT",
		$day[$t[6]], $t[3], $mon[$t[4]], $t[5] + 1900,
		$t[2], $t[1], $t[0];
}

# headers: [ [name, value], ... ]; returns 'keep' or 'close'

sub send_response {
	my ($c, $req, $status, $headers, $body) = @_;

	$body //= '';

	my $nobody = $status == 204 || $status == 304 || $status < 200;

	my $out = status_line($status) . "Date: " . http_date() . "\r\n";
	$out .= "$_->[0]: $_->[1]\r\n" for @$headers;
	$out .= "Content-Length: " . length($body) . "\r\n" unless $nobody;

	if ($c->{close}) {
		$out .= "Connection: close\r\n";

	} elsif ($req->{version} eq '1.0') {
		$out .= "Connection: keep-alive\r\n";
	}

	$out .= "\r\n";
	$out .= $body unless $nobody || $req->{method} eq 'HEAD';

	return 'close' unless conn_write($c, $out);
	return $c->{close} ? 'close' : 'keep';
}

###############################################################################

# state directory helpers

sub state_file {
	return File::Spec->catfile($STATE, $_[0]);
}

sub read_file {
	my ($name) = @_;

	open(my $fh, '<', state_file($name)) or return undef;
	binmode $fh;
	local $/;
	my $data = <$fh>;
	close $fh;

	return $data // '';
}

sub write_atomic {
	my ($name, $data) = @_;

	my $tmp = state_file(".$name.$$.tmp");

	open(my $fh, '>', $tmp) or die "fake_dynamo: $tmp: $!\n";
	binmode $fh;
	print $fh $data;
	close($fh) or die "fake_dynamo: $tmp: $!\n";

	rename($tmp, state_file($name)) or die "fake_dynamo: rename $tmp: $!\n";
}

# one JSON line, appended with a single write(2) on an O_APPEND descriptor

sub record {
	my ($name, $obj) = @_;

	my $line = $LOGJSON->encode($obj) . "\n";

	open(my $fh, '>>', state_file($name)) or do {
		warn "fake_dynamo: $name: $!\n";
		return;
	};

	binmode $fh;
	syswrite($fh, $line);
	close $fh;
}

# a request in the log $name: its method, uri, headers and the time,
# with the other fields given

sub record_request {
	my ($name, $req, %fields) = @_;

	record($name, {
		method => text($req->{method}),
		uri => text($req->{uri}),
		headers => text_headers($req),
		time => time(),
		%fields,
	});
}

# request bytes as text for the logs: UTF-8 when valid, else Latin-1

sub text {
	my ($s) = @_;

	return undef unless defined $s;

	my $t = $s;
	utf8::decode($t);

	return $t;
}

sub text_headers {
	my ($req) = @_;

	my %h;

	for my $name (keys %{$req->{headers}}) {
		my $v = $req->{headers}{$name};
		$h{$name} = ref $v ? [ map { text($_) } @$v ] : text($v);
	}

	return \%h;
}

sub number_file {
	my ($name) = @_;

	my $v = read_file($name);
	return undef unless defined $v;

	$v =~ s/^\s+|\s+$//g;

	if ($v !~ /^\d+$/) {
		warn "fake_dynamo: ignoring $name: \"$v\" is not a number\n";
		return undef;
	}

	return $v + 0;
}

# JSON parse error in serde_json's words

sub json_error {
	my ($err, $text) = @_;

	my $off = $err =~ /at character offset (\d+)/ ? $1 : 0;
	$off = length $text if $off > length $text;

	my $before = substr($text, 0, $off);
	my $line = 1 + ($before =~ tr/\n//);
	my $col = $off - rindex($before, "\n");

	my $what = $err =~ /garbage after JSON/ ? 'trailing characters'
		: $off >= length $text ? 'EOF while parsing a value'
		: 'expected value';

	return "$what at line $line column $col";
}

sub json_decode {
	my ($bytes) = @_;

	my $v = eval { $JSON->decode($bytes) };
	return (undef, json_error($@, $bytes)) if $@;

	return ($v, undef);
}

sub json_str {
	return JSON::PP->new->ascii->allow_nonref->encode("$_[0]");
}

###############################################################################

# frontend (OpenAI-compatible request plane)

sub frontend_handler {
	my ($c, $req) = @_;

	record_request('frontend.log', $req, body => text($req->{body}),
		pid => $$);

	my $rid = header($req, 'x-request-id');
	my @echo = defined $rid ? ([ 'x-request-id', $rid ]) : ();

	$req->{echo} = \@echo;

	my $path = path_of($req->{uri});
	my $allowed = $FRONTEND_ROUTES{$path};

	return flat_error($c, $req, 404, 'Not Found') unless $allowed;

	unless (grep { $_ eq $req->{method} } @$allowed) {
		push @echo, [ 'Allow', join(',', @$allowed) ];
		return flat_error($c, $req, 405, 'Method Not Allowed');
	}

	my $sc = lc(header($req, 'x-fake-scenario') // 'ok');
	$sc =~ s/^\s+|\s+$//g;

	my $events = header($req, 'x-fake-events') // '';
	$events = $events =~ /^\s*(\d{1,6})\s*$/ ? $1 + 0 : 3;

	my $interval = header($req, 'x-fake-interval-ms') // '';
	$interval = $interval =~ /^\s*(\d{1,7})\s*$/ ? $1 + 0
		: $sc eq 'slow' ? 200 : 0;

	if ($sc eq 'no-response') {
		$c->{close} = 1;
		return 'close';
	}

	if ($sc eq 'hang') {
		$c->{close} = 1;

		client_closed($req) if client_gone($c, $HANG_TIMEOUT);

		return 'close';
	}

	if ($sc =~ /^status-(\d{3})$/ && $1 >= 200 && $1 <= 599) {
		my $status = $1 + 0;
		my $msg = $status == 503 ? 'Service is not ready'
			: $status == 529 ? 'Too many requests, try again later'
			: $REASON{$status} // "Status $status";

		return flat_error($c, $req, $status, $msg);
	}

	if ($sc eq 'accel-redirect') {
		return send_response($c, $req, 200, [
			[ 'Content-Type', 'application/json' ],
			[ 'X-Accel-Redirect', '/secret' ],
			[ 'X-Accel-Buffering', 'yes' ],
			[ 'X-Accel-Expires', '100' ],
			[ 'X-Accel-Limit-Rate', '1' ],
			@echo,
		], '{"upstream":"accel"}');
	}

	if ($sc ne 'ok' && !$STREAM_SCENARIOS{$sc}) {
		return flat_error($c, $req, 400,
			"fake_dynamo: unknown x-fake-scenario \"$sc\"");
	}

	if ($path eq '/v1/models') {
		return json_response($c, $req, 200, {
			object => 'list',
			data => [ {
				id => $MODEL,
				object => 'model',
				created => int(time()),
				owned_by => 'nvidia',
			} ],
		});
	}

	if ($path eq '/health') {
		return json_response($c, $req, 200, {
			status => 'healthy',
			message => 'Service is healthy',
			initial_discovery_complete => JSON::PP::true,
			initial_discovery_error => undef,
			endpoints => [ 'dyn://dynamo.backend.generate' ],
			instances => [],
		});
	}

	if ($path eq '/live') {
		return json_response($c, $req, 200,
			{ status => 'live', message => 'Service is live' });
	}

	# generation routes: the body must be a JSON object

	my ($body, $err) = json_decode($req->{body});

	if (defined $err) {
		return flat_error($c, $req, 400,
			"Failed to parse the request body as JSON: $err", 1);
	}

	if (ref $body ne 'HASH') {
		return flat_error($c, $req, 400,
			'Failed to deserialize the JSON body into the target type: '
			. 'invalid type: expected struct at line 1 column 1');
	}

	my $kind = $path eq '/v1/completions' ? 'completion'
		: $path eq '/v1/chat/completions' ? 'chat'
		: $path eq '/v1/responses' ? 'responses'
		: 'generate';

	# SGLang's engine request id: the body's rid, then x-request-id

	my $engine_id = $kind eq 'generate'
		? ((defined $body->{rid} && !ref $body->{rid}) ? $body->{rid}
			: header($req, 'x-request-id'))
		: undef;

	my $gen = {
		kind => $kind,
		engine_id => $engine_id,
		model => (defined $body->{model} && !ref $body->{model})
			? $body->{model} : $MODEL,
		id => sprintf("%x%04x", int(time() * 1000), $$ & 0xffff),
		created => int(time()),
		prompt_tokens => prompt_tokens($body),
		events => $events,
		interval => $interval,
	};

	my $stream = $STREAM_SCENARIOS{$sc}
		|| (JSON::PP::is_bool($body->{stream}) && $body->{stream});

	return stream_response($c, $req, $gen, $sc) if $stream;

	# non-streamed: generation takes events * interval, during which a
	# client that goes away is noticed, as Dynamo's disconnect monitor does

	if ($events * $interval > 0
		&& client_gone($c, $events * $interval / 1000))
	{
		client_closed($req);
		$c->{close} = 1;
		return 'close';
	}

	return json_response($c, $req, 200, full_answer($gen));
}

sub flat_error {
	my ($c, $req, $status, $message, $flat) = @_;

	my $type = $status == 529 ? 'Overloaded'
		: $status == 499 ? 'Client Closed Request'
		: $REASON{$status} // 'Error';

	# struct field order of Dynamo's ErrorMessage

	my $body = sprintf '{"message":%s,"type":%s,"code":%d}',
		json_str($message), json_str($type), $status;

	# SGLang's /generate nests its errors, but for unparseable JSON

	$body = "{\"error\":$body}"
		if !$flat && path_of($req->{uri}) eq '/generate';

	return send_response($c, $req, $status, [
		[ 'Content-Type', 'application/json' ],
		@{$req->{echo} // []},
	], $body);
}

sub json_response {
	my ($c, $req, $status, $obj) = @_;

	return send_response($c, $req, $status, [
		[ 'Content-Type', 'application/json' ],
		@{$req->{echo} // []},
	], $JSON->encode($obj));
}

sub client_closed {
	my ($req) = @_;

	return if $req->{closed_recorded}++;

	record('frontend.log', {
		event => 'client_closed',
		uri => text($req->{uri}),
		'x-request-id' => text(header($req, 'x-request-id')),
		pid => $$,
		time => time(),
	});
}

sub prompt_tokens {
	my ($body) = @_;

	my $text = '';

	for my $k (qw/prompt input text/) {
		my $v = $body->{$k};
		$text .= ' ' . (ref $v eq 'ARRAY' ? join(' ', grep { !ref } @$v)
			: ref $v ? '' : $v // '');
	}

	if (ref $body->{messages} eq 'ARRAY') {
		for my $m (@{$body->{messages}}) {
			next unless ref $m eq 'HASH' && defined $m->{content};
			$text .= ' ' . (ref $m->{content} ? '' : $m->{content});
		}
	}

	my @words = split ' ', $text;

	return @words ? scalar @words : 1;
}

sub token {
	my ($i) = @_;

	return ($i ? ' ' : '') . $WORDS[$i % @WORDS];
}

# an OpenAI completion or chat object of generation $g with one choice

sub choice_object {
	my ($g, $object, %choice) = @_;

	return {
		id => ($g->{kind} eq 'chat' ? 'chatcmpl-' : 'cmpl-') . $g->{id},
		object => $object,
		created => $g->{created},
		model => $g->{model},
		choices => [ { index => 0, logprobs => undef, %choice } ],
	};
}

sub full_answer {
	my ($g) = @_;

	my $text = join '', map { token($_) } 0 .. $g->{events} - 1;
	my $n = $g->{events};
	my $p = $g->{prompt_tokens};

	my $usage = {
		prompt_tokens => $p,
		completion_tokens => $n,
		total_tokens => $p + $n,
	};

	if ($g->{kind} eq 'completion') {
		return { %{choice_object($g, 'text_completion', text => $text,
			finish_reason => 'stop')}, usage => $usage };
	}

	if ($g->{kind} eq 'chat') {
		return { %{choice_object($g, 'chat.completion',
			message => { role => 'assistant', content => $text },
			finish_reason => 'stop')}, usage => $usage };
	}

	if ($g->{kind} eq 'responses') {
		return {
			id => "resp_$g->{id}",
			object => 'response',
			created_at => $g->{created},
			model => $g->{model},
			status => 'completed',
			output => [ {
				type => 'message',
				id => "msg_$g->{id}",
				status => 'completed',
				role => 'assistant',
				content => [ {
					type => 'output_text',
					text => $text,
					annotations => [],
				} ],
			} ],
			usage => {
				input_tokens => $p,
				output_tokens => $n,
				total_tokens => $p + $n,
			},
		};
	}

	return {
		text => $text,
		meta_info => {
			id => $g->{engine_id} // $g->{id},
			finish_reason => { type => 'stop' },
			prompt_tokens => $p,
			completion_tokens => $n,
		},
	};
}

sub stream_event {
	my ($g, $i, $last) = @_;

	my $tok = token($i);
	my $finish = $last ? 'stop' : undef;

	if ($g->{kind} eq 'completion') {
		return choice_object($g, 'text_completion', text => $tok,
			finish_reason => $finish);
	}

	if ($g->{kind} eq 'chat') {
		my $delta = { content => $tok };
		$delta->{role} = 'assistant' if $i == 0;

		return choice_object($g, 'chat.completion.chunk', delta => $delta,
			finish_reason => $finish);
	}

	if ($g->{kind} eq 'responses') {
		return {
			type => 'response.output_text.delta',
			item_id => "msg_$g->{id}",
			output_index => 0,
			content_index => 0,
			delta => $tok,
		};
	}

	return {
		text => $tok,
		index => 0,
		meta_info => {
			id => $g->{engine_id} // $g->{id},
			finish_reason => $last ? { type => 'stop' } : undef,
			prompt_tokens => $g->{prompt_tokens},
			completion_tokens => $i + 1,
		},
	};
}

sub stream_response {
	my ($c, $req, $g, $sc) = @_;

	# HTTP/1.0 has no chunked coding: the stream ends with the connection

	my $chunked = $req->{version} eq '1.1';
	$c->{close} = 1 unless $chunked;

	my $head = status_line(200) . "Date: " . http_date() . "\r\n"
		. "Content-Type: text/event-stream\r\n"
		. "Cache-Control: no-cache\r\n";

	$head .= "$_->[0]: $_->[1]\r\n" for @{$req->{echo}};
	$head .= "Transfer-Encoding: chunked\r\n" if $chunked;
	$head .= $c->{close} ? "Connection: close\r\n" : '';
	$head .= "\r\n";

	my $gone = sub {
		client_closed($req);
		$c->{close} = 1;
		return 'close';
	};

	return $gone->() unless conn_write($c, $head);

	my $send = sub {
		my ($data) = @_;
		return conn_write($c, $chunked
			? sprintf("%x\r\n%s\r\n", length $data, $data) : $data);
	};

	my $short = $sc eq 'error-frame' || $sc eq 'abrupt';
	my $n = $short ? 2 : $g->{events};
	my $wait = $g->{interval} / 1000;

	for my $i (0 .. $n - 1) {
		return $gone->() if client_gone($c, $i ? $wait : 0);

		my $ev = stream_event($g, $i, !$short && $i == $n - 1);

		return $gone->() unless $send->('data: ' . $JSON->encode($ev) . "\n\n");
	}

	return $gone->() if client_gone($c, $n ? $wait : 0);

	if ($sc eq 'abrupt') {
		$c->{close} = 1;
		return 'close';
	}

	if ($sc eq 'error-frame') {
		return $gone->() unless $send->('data: {"error":{"message":'
			. '"backend failed","type":"internal_server_error",'
			. '"code":500}}' . "\n\n");
	}

	if ($sc eq 'split-done') {
		return $gone->() unless $send->('data: [DO');
		return $gone->() if client_gone($c, 0.1);
		return $gone->() unless $send->("NE]\n\n");

	} else {
		return $gone->() unless $send->("data: [DONE]\n\n");
	}

	if ($chunked) {
		return $gone->() unless conn_write($c, "0\r\n\r\n");
	}

	return $c->{close} ? 'close' : 'keep';
}

###############################################################################

# RL discovery listener

sub listener_handler {
	my ($c, $req) = @_;

	record_request('listener.log', $req);

	# axum defaults: no fallback route, empty bodies

	if (path_of($req->{uri}) ne '/v1/rl/workers') {
		return send_response($c, $req, 404, [], '');
	}

	if ($req->{method} ne 'GET' && $req->{method} ne 'HEAD') {
		return send_response($c, $req, 405, [ [ 'Allow', 'GET,HEAD' ] ], '');
	}

	my $delay = number_file('discovery.delay_ms');
	sleep($delay / 1000) if $delay;

	my $status = number_file('discovery.status') // 200;
	$status = 200 if $status < 100 || $status > 599;

	my $body = read_file('discovery.json');

	unless (defined $body) {
		$body = $status < 300 ? default_discovery()
			: '{"error":"discovery_failed","message":'
			. '"etcd request failed: deadline has elapsed"}';
	}

	return send_response($c, $req, $status,
		[ [ 'Content-Type', 'application/json' ] ], $body);
}

sub u64_cmp {
	my ($x, $y) = @_;
	return length($x) <=> length($y) || $x cmp $y;
}

sub u64_hex {
	my ($dec) = @_;

	# exact decimal to hex by long division, no floating point on the way

	my @d = split //, $dec;
	my $hex = '';

	while (@d > 1 || $d[0] ne '0') {
		my ($rem, @q) = (0);

		for my $digit (@d) {
			my $cur = $rem * 10 + $digit;
			push @q, int($cur / 16);
			$rem = $cur % 16;
		}

		shift @q while @q > 1 && $q[0] == 0;
		@d = @q;
		$hex = sprintf('%x', $rem) . $hex;
	}

	return length $hex ? $hex : '0';
}

# written as text, so that u64 ids never pass through a double

sub default_discovery {
	my @w;

	for my $i (0 .. $NWORKERS - 1) {
		push @w, {
			id => $INSTANCE_IDS[$i] // (1000 + $i) . '',
			port => $ports{workers}[$i],
		};
	}

	my $routes = '[' . join(',', map { json_str($_) } @VLLM_ROUTES) . ']';

	my @items = map {
		'{"namespace":"dynamo","component":"backend","endpoint":"rl",'
		. '"instance_id":' . $_->{id} . ','
		. '"transport":{"tcp":'
		. json_str("127.0.0.1:9999/" . u64_hex($_->{id}) . "/rl") . '},'
		. '"request_plane_url":"dyn://dynamo.backend.rl",'
		. '"system_url":' . json_str("http://$HOST:$_->{port}") . ','
		. '"model":' . json_str($MODEL) . ','
		. '"routes":' . $routes . ','
		. '"world_size":1}'
	} sort { u64_cmp($a->{id}, $b->{id}) } @w;

	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',', @items) . ']}';
}

###############################################################################

# worker system status server

sub worker_handler {
	my ($i, $c, $req) = @_;

	record_request("worker-$i.log", $req, worker => $i,
		body => text($req->{body}));

	my $path = path_of($req->{uri});

	if ($path eq '/health' || $path eq '/live') {
		if ($req->{method} ne 'GET' && $req->{method} ne 'HEAD') {
			return send_response($c, $req, 405,
				[ [ 'Allow', 'GET,HEAD' ] ], '');
		}

		return send_response($c, $req, 200,
			[ [ 'Content-Type', $TEXT_PLAIN ] ],
			'{"status":"ready","uptime":{"secs":1,"nanos":0},'
			. '"endpoints":{}}');
	}

	my ($route) = $path =~ m!^/engine/(.+)$!s;

	unless (defined $route) {
		return send_response($c, $req, 404,
			[ [ 'Content-Type', $TEXT_PLAIN ] ], 'Route not found');
	}

	# axum's Path extractor percent-decodes the wildcard capture

	$route =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge;

	my $override = read_file("worker-$i.respond.json");
	return worker_override($c, $req, $i, $override) if defined $override;

	my $body = {};

	if (length $req->{body}) {
		my $err;
		($body, $err) = json_decode($req->{body});

		if (defined $err) {
			return worker_json($c, $req, 400, {
				error => 'Invalid JSON',
				message => $err,
			});
		}
	}

	if ((read_file("worker-$i.flavor") // '') =~ /^sglang\b/) {
		return sglang_route($c, $req, $i, $route, $body);
	}

	unless ($REGISTRY{$route}) {
		return worker_json($c, $req, 404, {
			error => 'Route not found',
			message => "Route /engine/" . text($route) . " not found",
		});
	}

	return worker_json($c, $req, 200, engine_route($i, $route, $body));
}

# an SGLang worker behind Dynamo (reference: "SGLang engine routes"): the
# fixed control/ routes and the descriptors of the docs' example
# DYN_SGLANG_ENGINE_ROUTES, answered as Dynamo normalises SGLang's
# results: None is {"status":"ok"}, a tuple {"success","message"[,...]}

sub sglang_route {
	my ($c, $req, $i, $route, $body) = @_;

	my %routes = map { $_ => 1 } qw!
		control/update_weights_from_disk control/update_weights_from_tensor
		control/update_weights_from_distributed
		control/update_weights_from_ipc control/update_weight_version
		server_info pause_generation flush_cache init_weights_update_group
		update_weights_from_distributed destroy_weights_update_group
		continue_generation
	!;

	unless ($routes{$route}) {
		return worker_json($c, $req, 404, {
			error => 'Route not found',
			message => "Route /engine/" . text($route) . " not found",
		});
	}

	$body = {} unless ref $body eq 'HASH';

	my $s = read_state($i);

	if ($route eq 'pause_generation' || $route eq 'continue_generation') {
		$s->{paused} = $route eq 'pause_generation'
			? JSON::PP::true : JSON::PP::false;
		write_state($i, $s);
		return worker_json($c, $req, 200, { status => 'ok' });
	}

	if ($route eq 'control/update_weights_from_disk') {
		unless (defined $body->{model_path} && !ref $body->{model_path}) {
			return worker_json($c, $req, 200, {
				success => JSON::PP::false,
				message => 'model_path is required',
				num_paused_requests => 0,
			});
		}

		$s->{version} = $body->{weight_version} // $body->{model_path};
		write_state($i, $s);

		return worker_json($c, $req, 200, {
			success => JSON::PP::true,
			message => 'Succeeded to update model weights.',
			num_paused_requests => 0,
		});
	}

	if ($route eq 'control/update_weight_version') {
		$s->{version} = $body->{new_version} // $s->{version};
		write_state($i, $s);

		return worker_json($c, $req, 200, {
			success => JSON::PP::true, message => 'ok',
			new_version => $s->{version},
		});
	}

	if ($route eq 'server_info') {
		return worker_json($c, $req, 200, {
			weight_version => $s->{version},
			paused => $s->{paused},
		});
	}

	return worker_json($c, $req, 200, {
		success => JSON::PP::true, message => 'ok',
	});
}

sub worker_json {
	my ($c, $req, $status, $obj) = @_;

	return send_response($c, $req, $status,
		[ [ 'Content-Type', $TEXT_PLAIN ] ], $JSON->encode($obj));
}

sub worker_override {
	my ($c, $req, $i, $data) = @_;

	my ($o, $err) = json_decode($data);

	if (defined $err || ref $o ne 'HASH') {
		return worker_json($c, $req, 500, {
			error => 'Handler error',
			message => "fake_dynamo: bad worker-$i.respond.json: "
				. ($err // 'not an object'),
		});
	}

	my $status = $o->{status} // 200;
	$status = 500 unless $status =~ /^\d{3}$/;

	sleep($o->{delay_ms} / 1000)
		if defined $o->{delay_ms} && $o->{delay_ms} =~ /^\d+$/;

	my $body = exists $o->{raw} ? $o->{raw} // '' : $JSON->encode($o->{body});
	utf8::encode($body) if utf8::is_utf8($body);

	# a hostile worker's extra header lines, as [ name, value ] pairs

	my @extra = grep { ref eq 'ARRAY' && @$_ == 2 } @{$o->{headers} // []};

	return send_response($c, $req, $status,
		[ [ 'Content-Type', $o->{content_type} // $TEXT_PLAIN ], @extra ],
		$body);
}

sub read_state {
	my ($i) = @_;

	my $data = read_file("worker-$i.state");
	my ($s) = defined $data ? json_decode($data) : ();

	$s = {} unless ref $s eq 'HASH';
	$s->{paused} //= JSON::PP::false;
	$s->{version} //= 'initial';

	return $s;
}

sub write_state {
	my ($i, $s) = @_;

	write_atomic("worker-$i.state", $JSON->encode($s));
}

# Python truthiness of a decoded JSON value

sub py_true {
	my ($v) = @_;

	return 0 unless defined $v;
	return $v ? 1 : 0 if JSON::PP::is_bool($v);
	return scalar(@$v) ? 1 : 0 if ref $v eq 'ARRAY';
	return scalar(%$v) ? 1 : 0 if ref $v eq 'HASH';

	# JSON::PP knows whether a scalar is a string or a number

	return length $v ? 1 : 0 if $JSON->encode($v) =~ /^"/;
	return $v != 0 ? 1 : 0;
}

sub py_str {
	my ($v) = @_;

	return 'None' unless defined $v;
	return $v ? 'True' : 'False' if JSON::PP::is_bool($v);
	return $JSON->encode($v) if ref $v;
	return $v;
}

# the vLLM Python worker's engine routes (components/src/dynamo/vllm)

sub engine_route {
	my ($i, $route, $body) = @_;

	$body = {} unless defined $body;

	if (ref $body ne 'HASH') {
		return {
			status => 'error',
			message => 'request body must be a JSON object',
		};
	}

	my $not_paused = 'Worker must be paused via pause_generation() before '
		. 'updating weights. Call pause_generation() first, then '
		. 'update, then resume_generation().';

	if ($route eq 'liveness_probe') {
		return { status => 'ok', alive => JSON::PP::true };
	}

	if ($route eq 'pause_generation') {
		my $mode = exists $body->{mode} ? $body->{mode} : 'keep';
		my $clear = py_true($body->{clear_cache});

		if (!defined $mode || ref $mode
			|| $JSON->encode($mode) !~ /^"(?:keep|wait|abort)"$/)
		{
			return {
				status => 'error',
				message => "Invalid mode '" . py_str($mode)
					. "'; expected keep|wait|abort",
			};
		}

		my $s = read_state($i);
		$s->{paused} = JSON::PP::true;
		write_state($i, $s);

		return {
			status => 'ok',
			message => 'Engine paused',
			mode => $mode,
			clear_cache => $clear ? JSON::PP::true : JSON::PP::false,
		};
	}

	if ($route eq 'resume_generation') {
		my $s = read_state($i);
		$s->{paused} = JSON::PP::false;
		write_state($i, $s);

		return { status => 'ok', message => 'Engine resumed' };
	}

	if ($route eq 'flush_cache') {
		return { status => 'ok', message => 'Cache flushed' };
	}

	if ($route eq 'update_weights_from_disk') {
		my $s = read_state($i);

		return { status => 'error', message => $not_paused }
			unless $s->{paused};

		return { status => 'error', message => "Missing 'model_path' in body" }
			unless py_true($body->{model_path});

		$s->{version} = exists $body->{weight_version}
			? $body->{weight_version} : 'unknown';
		write_state($i, $s);

		return { status => 'ok', version => $s->{version} };
	}

	if ($route eq 'update_weights_from_distributed') {
		my $allow = exists $body->{allow_unpaused}
			? $body->{allow_unpaused} : JSON::PP::false;
		my $reset = exists $body->{reset_prefix_cache}
			? $body->{reset_prefix_cache} : JSON::PP::true;

		return { status => 'error',
			message => "'allow_unpaused' must be a boolean" }
			unless JSON::PP::is_bool($allow);

		return { status => 'error',
			message => "'reset_prefix_cache' must be a boolean" }
			unless JSON::PP::is_bool($reset);

		if ($allow && $reset) {
			return {
				status => 'error',
				message => 'Unpaused weight updates cannot reset the '
					. "prefix cache. Set 'reset_prefix_cache' to false "
					. 'or pause generation first.',
			};
		}

		my $s = read_state($i);

		return { status => 'error', message => $not_paused }
			if !$s->{paused} && !$allow;

		$s->{version} = exists $body->{weight_version}
			? $body->{weight_version} : 'unknown';
		write_state($i, $s);

		return { status => 'ok', version => $s->{version} };
	}

	if ($route eq 'get_weight_version') {
		return { status => 'ok', version => read_state($i)->{version} };
	}

	if ($route eq 'update_weights_from_tensor') {
		return {
			status => 'error',
			message => 'update_weights_from_tensor is not implemented',
		};
	}

	if ($route eq 'init_weights_update_group') {
		return { status => 'ok', message => 'Weight update group initialized' };
	}

	if ($route eq 'destroy_weights_update_group') {
		return { status => 'ok', message => 'Weight update group destroyed' };
	}

	if ($route eq 'abort_request') {
		return { status => 'error', message => "Missing 'request_id' in body" }
			unless py_true($body->{request_id});

		return { status => 'ok', request_id => $body->{request_id} };
	}

	if ($route eq 'control/start_profile') {
		return { status => 'ok', message => 'Profiling started' };
	}

	if ($route eq 'control/stop_profile') {
		return { status => 'ok', message => 'Profiling stopped' };
	}

	return { status => 'ok' };
}

###############################################################################
