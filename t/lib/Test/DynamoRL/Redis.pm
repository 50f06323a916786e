package Test::DynamoRL::Redis;

# (C) ngx_dynamo_rl_module developers

# The shared store of the store tests (issue 13): Debian's redis-server
# started by the test on a free loopback port (never 6379: a system
# instance may sit there), a RESP2 client of our own, the nginx
# configuration of a gateway replica that uses the store, and a fake RESP
# server that injects faults between nginx and Redis.
#
# A server:
#
#     my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
#
# (args => [ '--appendonly', 'yes' ] in new(): more redis-server options,
# after the defaults, which they override)
#
# (tls => 8380 in new(): a TLS port too, --tls-port on a free port for
# 8380, with the --tls-* options given in args; the plain port stays for
# the test's own client; $redis->tls_port() is that port)
#
#     $redis->url()         "redis://127.0.0.1:<port>"
#     $redis->port(), pid() the port, the pid of redis-server
#     $redis->start()       starts redis-server in <testdir>/redis-<n>
#                           (no persistence, bound to 127.0.0.1) and
#                           waits until it answers PING
#     $redis->stop()        SIGTERM to its pid, SIGKILL if it lingers
#     $redis->crash()       SIGKILL to its pid: gone at once, as a crash
#     $redis->restart()     start() again on the same port (empty)
#     $redis->cmd(@args)    one command on the test's own connection;
#                           returns the reply: a string, an integer,
#                           undef, an array ref, or { error => "..." };
#                           dies if the server does not answer in time
#     ping(), flushall(), time_ms() (the server's TIME in ms),
#     pause($ms) (CLIENT PAUSE), hgetall($key) (a hash ref),
#     has_key($key) (EXISTS)
#
# (host => '::1' in new(): bound to that loopback address instead of
# 127.0.0.1, the test's own client too; url() names it)
#
# A sentinel (issue 25): sentinel => [ 'monitor rl 127.0.0.1 <port> 2',
# 'down-after-milliseconds rl 1000', ... ] in new(): Debian's
# redis-sentinel (TEST_REDIS_SENTINEL_BINARY) runs with a configuration
# of those "sentinel ..." lines, on its port; url(), cmd() and stop() as
# for a server.
#
# The server is stopped by its pid when $t stops (after nginx), at the
# end of the test process in any case, and by a watcher process if the
# test process is killed: no server outlives its test.
#
# RESP2:
#
#     resp_encode(@args)    a command as an array of bulk strings
#     resp_parse(\$buf)     takes one whole reply (or command) off the
#                           front of $buf: returns (value, raw bytes), or
#                           an empty list while it is incomplete; dies on
#                           bytes that are not RESP2
#
# A replica:
#
#     replica_conf(%o)      nginx.conf text (for write_file_expand) of a
#                           gateway replica in front of the fake Dynamo:
#         name => 'A'       replica=A
#         listen => 8080    the request plane: /v1/ (ledger and gate
#                           on), /gate/v1/ (ledger off, gate on),
#                           /zone/v1/ (ledger and gate off)
#         api => 8070       the gate, attempts, status and metrics APIs
#         store => $url     the store, or undef: no dynamo_rl_store
#         params => '...'   more dynamo_rl_store parameters
#         workers => 1      worker_processes
#         env => [names]    "env" lines (libfaketime's variables)
#         http => '...'     more http{} directives (e.g. "resolver")
#         trusted => 1      the api listener is a trusted listener as
#                           examples/rl-refresh expects: the discovery
#                           and admin planes too, /v1/ with the ledger
#                           and the gate off (its generation check), and
#                           /verify/v1/ with the gate off only, as in
#                           examples/dynamo-rl.conf
#     reason($r)            the reason of a refusal: the
#                           X-Dynamo-RL-Reason header, else the JSON
#                           body's "error" (a string, or its "reason")
#
# Calls to a replica $rep, a hash of replica_conf()'s name, listen, api:
#
#     gen($rep, $id, $loc)  POST a completion with attempt id $id under
#                           $loc/v1/ ('' for /v1/, '/gate', '/zone');
#                           returns call()'s response
#     admit($rep)           gen() with fresh ids until one is 200 (10 s)
#     gate($rep), status($rep)  the gate API's and the status's JSON
#     gate_post($rep, $body)  POST $body (a hash) to the gate API; the
#                           response with "json"
#     wait_gate($rep, $cond), wait_status($rep, $cond)  polls until
#                           $cond->($json) holds (10 s), returns the last
#     wait_state($rep, $id, $state), wait_done($rep, $id)  polls the
#                           attempts API until the record is in $state,
#                           or ended; returns the record, or
#                           { http => status } if there is none
#     store_key($name, $prefix)  "{prefix}:name", prefix "dynamo-rl"
#     store_lines($t, $off, $level)  the "dynamo rl store:" lines of
#                           error.log at $level, from byte $off
#
# The fake RESP server, run as a daemon of the test:
#
#     $t->run_daemon(\&resp_proxy, $port, $redis->port(), $dir)
#
# listens on 127.0.0.1:$port and passes every command on to Redis and
# its reply back, one command at a time, except:
#
#     - the first command with an argument holding "fault-stall-<x>":
#       passed on, and its reply never sent (the connection stays open
#       until the client closes it);
#     - "fault-close-<x>": passed on, half of its reply sent, then the
#       connection is closed;
#     - "fault-garbage-<x>": passed on, and bytes that are not RESP sent
#       instead of its reply;
#     - an EVALSHA with "fault-noscript-<x>": not passed on, answered
#       -NOSCRIPT after 0.6 s (past a timeout of 250ms);
#     - "fault-huge-<x>": passed on, and "$2000000000" sent instead of
#       its reply, then its bytes 64 KB every 5 ms, up to 64 MB;
#     - "fault-drip-<x>": passed on, its reply sent a byte every 0.5 s;
#     - "fault-late-<x>": held back, the connection closed at once, then
#       passed on 1.5 s later (a claim that reaches Redis after the
#       release sent on the next connection), its reply dropped, and the
#       file <dir>/late-<x> written;
#     - "fault-shape-<x>": passed on, and of a reply that is an array of
#       one element, the element sent alone (a batch of one claim
#       answered [ok, epoch] instead of [[ok, epoch]]);
#     - "fault-hold-<x>": passed on, its reply held until the file
#       <dir>/go-<x> exists (30 s at most), then sent; the commands
#       after it wait meanwhile (a claim that ran, answered late while
#       the test changes the store);
#
# each of them once per id (a file <dir>/fired-<id>).  While the file
# <dir>/mode holds "silent", it accepts connections and never answers,
# and the connections it had are closed.  Every command it reads is
# appended to <dir>/commands.log (its first word and its keys).

###############################################################################

use warnings;
use strict;

use base qw/ Exporter /;

our @EXPORT_OK = qw/ resp_encode resp_parse replica_conf reason resp_proxy
	gen admit gate status gate_post wait_gate wait_status wait_state
	wait_done store_key store_lines /;

use Fcntl qw/ O_CREAT O_EXCL O_WRONLY /;
use File::Path qw/ make_path /;
use IO::Select;
use IO::Socket::INET;
use IO::Socket::IP;
use JSON::PP;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ time sleep /;

use Test::DynamoRL ();
use Test::DynamoRL::Fixture qw/ api call err_since fork_server json /;

my $BINARY = $ENV{TEST_REDIS_BINARY} // 'redis-server';
my $SENTINEL = $ENV{TEST_REDIS_SENTINEL_BINARY} // 'redis-sentinel';

my (@SERVERS, $N);

###############################################################################

sub new {
	my ($class, $t, %o) = @_;

	my $n = ++$N;

	my $self = bless {
		t => $t,
		port => Test::DynamoRL::port($o{port} // 8379),
		host => $o{host} // '127.0.0.1',
		dir => $t->testdir() . "/redis-$n",
		args => $o{args} // [],
		sentinel => $o{sentinel},
		owner => $$,
	}, $class;

	$self->{tls_port} = Test::DynamoRL::port($o{tls}) if $o{tls};

	make_path($self->{dir});
	push @SERVERS, $self;

	# after nginx and the daemons, when the test stops

	$t->at_stop(sub { $self->stop() });

	return $self;
}

sub url {
	my ($self) = @_;
	my $h = $self->{host} =~ /:/ ? "[$self->{host}]" : $self->{host};
	return "redis://$h:$self->{port}";
}

sub port {
	my ($self) = @_;
	return $self->{port};
}

sub tls_port {
	my ($self) = @_;
	return $self->{tls_port};
}

sub pid {
	my ($self) = @_;
	return $self->{pid};
}

sub dir {
	my ($self) = @_;
	return $self->{dir};
}

sub start {
	my ($self) = @_;

	die "redis-server is already running\n" if $self->{pid};

	my $d = $self->{dir};

	my @cmd = ($BINARY, '--port', $self->{port}, '--bind', $self->{host},
		'--save', '', '--appendonly', 'no', '--dir', $d,
		'--daemonize', 'no', '--pidfile', "$d/redis.pid",
		'--logfile', "$d/redis.log", '--enable-debug-command', 'local',
		($self->{tls_port} ? ('--tls-port', $self->{tls_port}) : ()),
		@{$self->{args}});

	if ($self->{sentinel}) {
		open my $fh, '>', "$d/sentinel.conf" or die "$d: $!\n";
		print $fh join '', map { "$_\n" } "port $self->{port}",
			'bind 127.0.0.1', "dir $d", "logfile $d/redis.log",
			"pidfile $d/redis.pid", 'daemonize no',
			map { "sentinel $_" } @{$self->{sentinel}};
		close $fh;

		@cmd = ($SENTINEL, "$d/sentinel.conf");
	}

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', "$d/stdout";
		open STDERR, '>&', \*STDOUT;

		# never the sanitizer or libfaketime of nginx

		delete $ENV{LD_PRELOAD};

		{ exec @cmd; }
		print STDERR "cannot exec $cmd[0]: $!\n";
		POSIX::_exit(127);
	}

	$self->{pid} = $pid;
	$self->_watch();

	my $up = Test::DynamoRL::wait_for(sub {
		return -1 if waitpid($pid, WNOHANG) == $pid;
		my $r = eval { $self->_cmd(1, 'PING') };
		return defined $r && !ref $r && $r eq 'PONG';
	}, 10);

	if (!$up || $up < 0) {
		delete $self->{pid} if $up;
		$self->stop();
		die "redis-server did not start on $self->{port}\n"
			. $self->_log_tail();
	}

	return $self;
}

sub stop {
	my ($self) = @_;

	return $self if $self->{owner} != $$;

	delete $self->{sock};

	if (my $pid = delete $self->{pid}) {
		for my $signal (qw/ TERM KILL /) {
			kill $signal, $pid;
			last if Test::DynamoRL::wait_for(sub {
				waitpid($pid, WNOHANG) != 0
			}, 10);
			Test::More::diag("redis-server $pid ignored SIG$signal");
		}
	}

	if (my $w = delete $self->{watcher}) {
		kill 'KILL', $w;
		waitpid($w, 0);
	}

	return $self;
}

sub crash {
	my ($self) = @_;

	my $pid = delete $self->{pid} or die "redis-server is not running\n";

	delete $self->{sock};

	kill 'KILL', $pid;
	waitpid($pid, 0);

	return $self;
}

sub restart {
	my ($self) = @_;

	$self->stop() if $self->{pid};
	return $self->start();
}

# a process that stops the server if the test process is gone without
# its END blocks (SIGKILL, SIGINT): it polls its parent

sub _watch {
	my ($self) = @_;

	return if $self->{watcher};

	my $parent = $$;
	my $pidfile = "$self->{dir}/redis.pid";

	my $w = fork() // die "cannot fork: $!\n";

	if ($w == 0) {
		$SIG{TERM} = 'DEFAULT';
		sleep(0.5) while getppid() == $parent;

		if (open my $fh, '<', $pidfile) {
			my ($pid) = (<$fh> // '') =~ /^(\d+)/;

			if ($pid && open my $c, '<', "/proc/$pid/cmdline") {
				kill 'KILL', $pid if (<$c> // '') =~ /redis/;
			}
		}

		POSIX::_exit(0);
	}

	$self->{watcher} = $w;
}

sub _log_tail {
	my ($self) = @_;

	open my $fh, '<', "$self->{dir}/redis.log" or return '';
	my @lines = <$fh>;
	splice(@lines, 0, @lines - 10) if @lines > 10;

	return "--- tail of redis.log ---\n" . join '', @lines;
}

# this END runs before Test::DynamoRL's: the test's nginx stops first,
# then the server

END {
	local $?;

	for my $server (grep { $_->{owner} == $$ } @SERVERS) {
		$server->{t}->stop();
		$server->stop();
	}
}

###############################################################################

sub cmd {
	my ($self, @args) = @_;

	my $r = eval { $self->_cmd(10, @args) };
	die "redis $args[0]: $@" unless defined $r || !$@;

	return $r;
}

sub _cmd {
	my ($self, $seconds, @args) = @_;

	my $s = $self->{sock} //= IO::Socket::IP->new(
		PeerHost => $self->{host}, PeerPort => $self->{port},
		Proto => 'tcp', Timeout => 2) or die "cannot connect: $@\n";

	my $ok = eval {
		_write($s, resp_encode(@args));
		my ($v) = _read_reply($s, \(my $buf = ''), $seconds);
		$self->{last} = $v;
		1;
	};

	if (!$ok) {
		delete $self->{sock};
		die $@;
	}

	return $self->{last};
}

sub ping {
	my ($self) = @_;
	return $self->cmd('PING');
}

sub flushall {
	my ($self) = @_;
	return $self->cmd('FLUSHALL');
}

sub pause {
	my ($self, $ms) = @_;
	return $self->cmd('CLIENT', 'PAUSE', $ms, 'ALL');
}

sub time_ms {
	my ($self) = @_;

	my $r = $self->cmd('TIME');
	return $r->[0] * 1000 + int($r->[1] / 1000);
}

sub has_key {
	my ($self, $key) = @_;
	return $self->cmd('EXISTS', $key);
}

sub hgetall {
	my ($self, $key) = @_;

	my $r = $self->cmd('HGETALL', $key);
	return {} unless ref $r eq 'ARRAY';

	return { @$r };
}

###############################################################################

sub resp_encode {
	my (@args) = @_;

	return '*' . @args . "\r\n"
		. join('', map { '$' . length($_) . "\r\n$_\r\n" } @args);
}

sub resp_parse {
	my ($buf) = @_;

	my ($v, $end) = _parse($$buf, 0) or return;
	my $raw = substr($$buf, 0, $end, '');

	return ($v, $raw);
}

# (value, end offset) of the reply at $pos, or an empty list if $buf
# ends before it does

sub _parse {
	my ($buf, $pos) = @_;

	my $eol = index($buf, "\r\n", $pos);
	return if $eol < 0;

	my $type = substr($buf, $pos, 1);
	my $line = substr($buf, $pos + 1, $eol - $pos - 1);
	my $next = $eol + 2;

	return ($line, $next) if $type eq '+';
	return ({ error => $line }, $next) if $type eq '-';

	if ($type eq ':') {
		die "not RESP: bad integer \"$line\"\n"
			unless $line =~ /^-?\d+$/;
		return ($line + 0, $next);
	}

	if ($type eq '$') {
		die "not RESP: bad length \"$line\"\n" unless $line =~ /^-?\d+$/;
		return (undef, $next) if $line < 0;
		return if length($buf) < $next + $line + 2;
		die "not RESP: a bulk string without its CRLF\n"
			unless substr($buf, $next + $line, 2) eq "\r\n";
		return (substr($buf, $next, $line), $next + $line + 2);
	}

	if ($type eq '*') {
		die "not RESP: bad count \"$line\"\n" unless $line =~ /^-?\d+$/;
		return (undef, $next) if $line < 0;

		my @a;

		for (1 .. $line) {
			(my $v, $next) = _parse($buf, $next) or return;
			push @a, $v;
		}

		return (\@a, $next);
	}

	die "not RESP: type byte \"" . quotemeta($type) . "\"\n";
}

sub _write {
	my ($s, $data) = @_;

	local $SIG{PIPE} = 'IGNORE';

	while (length $data) {
		my $n = syswrite($s, $data) or die "cannot write: $!\n";
		substr($data, 0, $n, '');
	}
}

# one reply from $s, whose bytes are added to $$buf

sub _read_reply {
	my ($s, $buf, $seconds) = @_;

	my $sel = IO::Select->new($s);
	my $deadline = time() + Test::DynamoRL::scale($seconds);

	for (;;) {
		my @r = resp_parse($buf);
		return @r if @r;

		my $left = $deadline - time();
		die "no reply in $seconds s\n"
			if $left <= 0 || !$sel->can_read($left);

		my $n = sysread($s, $$buf, 65536, length $$buf);
		die "connection closed\n" unless $n;
	}
}

###############################################################################

sub replica_conf {
	my (%o) = @_;

	my $name = $o{name} // 'A';
	my $listen = $o{listen} // 8080;
	my $api = $o{api} // 8070;
	my $workers = $o{workers} // 1;
	my $env = join '', map { "env $_;\n" } @{$o{env} // []};

	my ($zone, $listener, $trusted) = ('4m', '', '');

	# the zone holds a discovery snapshot of the default max_size too

	if ($o{trusted}) {
		$zone = '8m';
		$listener = 'upstream rl_listener { server 127.0.0.1:8082; }';
		$trusted = '%%RL_CONTROL_PLANES valid=1s%%'
			. ' location /v1/ { dynamo_rl_plane request;'
			. ' dynamo_rl_ledger off; dynamo_rl_gate off;'
			. ' proxy_pass http://frontend; }'
			. ' location /verify/v1/ { dynamo_rl_plane request;'
			. ' dynamo_rl_gate off; proxy_pass http://frontend/v1/; }';
	}

	my $http = $o{http} // '';
	my $store = defined $o{store}
		? "dynamo_rl_store $o{store} replica=$name"
			. (defined $o{params} ? " $o{params}" : '') . ';'
		: '';

	return Test::DynamoRL::Fixture::rl_conf(<<"EOF");

%%TEST_GLOBALS%%

worker_processes $workers;
$env
events {
    worker_connections 2048;
}

http {
    %%TEST_GLOBALS_HTTP%%

    dynamo_rl_zone zone=rl:$zone;
    $store
    $http

    %%RL_LOG_FORMAT rl attempt deny outcome status uri=uri%%

    upstream frontend {
        server 127.0.0.1:8081;
        keepalive 16;
    }

    $listener

    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffering off;

    server {
        %%RL_LISTEN $listen%%

        access_log %%TESTDIR%%/rl.log rl;

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://frontend;
        }

        location /gate/v1/ {
            dynamo_rl_plane request;
            dynamo_rl_ledger off;
            proxy_pass http://frontend/v1/;
        }

        location /zone/v1/ {
            dynamo_rl_plane request;
            dynamo_rl_ledger off;
            dynamo_rl_gate off;
            proxy_pass http://frontend/v1/;
        }

        location / {
            return 404;
        }
    }

    server {
        %%RL_LISTEN $api%%

        access_log %%TESTDIR%%/rl.log rl;

        %%RL_APIS%%

        $trusted
    }
}

EOF
}

sub reason {
	my ($r) = @_;

	my $h = $r->{headers}{'x-dynamo-rl-reason'};
	return $h if defined $h && !ref $h;

	my $j = eval { decode_json($r->{body}) };
	return undef unless ref $j eq 'HASH';

	my $e = $j->{error};
	return ref $e eq 'HASH' ? $e->{reason} : $e;
}

###############################################################################

my $BODY = '{"model":"m","prompt":"hello there"}';
my $SEQ = 0;

sub gen {
	my ($rep, $id, $loc) = @_;

	return call('POST', ($loc // '') . '/v1/completions',
		port => $rep->{listen}, body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);
}

sub admit {
	my ($rep) = @_;

	my $r = {};

	Test::DynamoRL::wait_for(sub {
		$r = gen($rep, 'admit-' . ++$SEQ);
		return $r->{status} == 200;
	}, 10);

	return $r;
}

sub gate {
	my ($rep) = @_;
	return _json_get($rep, '/rl/gate');
}

sub status {
	my ($rep) = @_;
	return _json_get($rep, '/rl/status');
}

sub _json_get {
	my ($rep, $uri) = @_;

	my $j = json(call('GET', $uri, port => $rep->{api}));
	return ref $j eq 'HASH' ? $j : {};
}

sub gate_post {
	my ($rep, $body) = @_;

	my $r = call('POST', '/rl/gate', port => $rep->{api},
		body => JSON::PP->new->canonical->encode($body));
	$r->{json} = json($r);

	return $r;
}

sub wait_gate {
	my ($rep, $cond) = @_;
	return _wait_json(\&gate, $rep, $cond);
}

sub wait_status {
	my ($rep, $cond) = @_;
	return _wait_json(\&status, $rep, $cond);
}

sub _wait_json {
	my ($get, $rep, $cond) = @_;

	my $j = {};

	Test::DynamoRL::wait_for(sub {
		$j = $get->($rep);
		return $cond->($j);
	}, 10);

	return $j;
}

sub wait_state {
	my ($rep, $id, $state) = @_;
	return _wait_record($rep, $id, sub { $_[0] eq $state });
}

sub wait_done {
	my ($rep, $id) = @_;
	return _wait_record($rep, $id,
		sub { $_[0] !~ /^(?:accepted|streaming|)$/ });
}

sub _wait_record {
	my ($rep, $id, $cond) = @_;

	my $a = {};

	Test::DynamoRL::wait_for(sub {
		my $r = api($id, port => $rep->{api});
		$a = $r->{status} == 200 ? $r->{json} : { http => $r->{status} };
		return $cond->($a->{state} // '');
	}, 10);

	return $a;
}

sub store_key {
	my ($name, $prefix) = @_;
	return '{' . ($prefix // 'dynamo-rl') . "}:$name";
}

sub store_lines {
	my ($t, $off, $level) = @_;
	return grep { /\[$level\] .*dynamo rl store:/ } err_since($t, $off);
}

###############################################################################

sub resp_proxy {
	my ($port, $redis_port, $dir) = @_;

	make_path($dir);

	fork_server($port, 'resp proxy', sub {
		my ($c) = @_;
		_proxy_conn($c, $redis_port, $dir);
	});
}

sub _mode {
	my ($dir) = @_;

	open my $fh, '<', "$dir/mode" or return 'pass';
	my $m = <$fh> // '';
	$m =~ s/\s+//g;

	return length $m ? $m : 'pass';
}

sub _proxy_conn {
	my ($c, $redis_port, $dir) = @_;

	my $sel = IO::Select->new($c);
	my $in = '';

	if (_mode($dir) eq 'silent') {

		# accepted, never answered: until the client goes away or
		# the mode changes (then closed, so that it reconnects)

		while (_mode($dir) eq 'silent') {
			next unless $sel->can_read(0.1);
			return unless sysread($c, $in, 65536);
			$in = '';
		}

		return;
	}

	my $r = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$redis_port",
		Proto => 'tcp', Timeout => 2) or return;

	for (;;) {
		return if _mode($dir) eq 'silent';
		next unless $sel->can_read(0.1);
		return unless sysread($c, $in, 65536, length $in);

		while (my ($cmd) = resp_parse(\$in)) {
			_proxy_log($dir, $cmd);

			my $fault = _fault($dir, $cmd);

			if (defined $fault && $fault eq 'late') {
				close $c;
				select(undef, undef, undef, 1.5);
				_write($r, resp_encode(@$cmd));
				_read_reply($r, \(my $late = ''), 30);
				my ($id) = map { /(fault-late-[\w.-]+)/ } @$cmd;
				open my $fh, '>', "$dir/late-$id";
				return;
			}

			if (defined $fault && $fault eq 'noscript') {

				# the store lost its scripts, and says so after
				# the client's deadline (timeout=250ms)

				select(undef, undef, undef, 0.6);
				_write($c, "-NOSCRIPT No matching script."
					. " Please use EVAL.\r\n");
				next;
			}

			_write($r, resp_encode(@$cmd));
			my (undef, $raw) = _read_reply($r, \(my $buf = ''), 30);

			if (!defined $fault) {
				_write($c, $raw);
				next;
			}

			if ($fault eq 'hold') {
				my ($id) = map { /(fault-hold-[\w.-]+)/ } @$cmd;
				my $end = time() + 30;
				select(undef, undef, undef, 0.01)
					while !-e "$dir/go-$id" && time() < $end;
				_write($c, $raw);
				next;
			}

			if ($fault eq 'shape') {
				$raw =~ s/^\*1\r\n//;
				_write($c, $raw);
				next;
			}

			if ($fault eq 'drip' || $fault eq 'huge') {
				_drip($c, $fault, $raw) or return;
				next;
			}

			if ($fault eq 'close') {
				_write($c, substr($raw, 0, int(length($raw) / 2) || 1));
				return;
			}

			_write($c, "&garbage\x00\xff\r\n") if $fault eq 'garbage';

			# stall, or garbage sent: hold the connection until the
			# client closes it (or silence is asked for)

			my $end = time() + 60;

			while (time() < $end && _mode($dir) ne 'silent') {
				next unless $sel->can_read(0.1);
				return unless sysread($c, $buf, 65536);
			}

			return;
		}
	}
}

sub _fault {
	my ($dir, $cmd) = @_;

	for my $arg (@$cmd) {
		my ($id, $kind) = $arg
			=~ /(fault-(stall|close|garbage|noscript|huge|drip|shape|late
				|hold)-[\w.-]+)/x
			or next;

		next if $kind eq 'noscript' && uc $cmd->[0] ne 'EVALSHA';

		sysopen(my $fh, "$dir/fired-$id", O_CREAT | O_EXCL | O_WRONLY)
			or return undef;

		return $kind;
	}

	return undef;
}

# a reply sent slowly: false once the client is gone

sub _drip {
	my ($c, $fault, $raw) = @_;

	local $SIG{PIPE} = 'IGNORE';

	if ($fault eq 'drip') {
		for my $byte (split //, $raw) {
			syswrite($c, $byte) or return 0;
			select(undef, undef, undef, 0.5);
		}

		return 1;
	}

	syswrite($c, "\$2000000000\r\n") or return 0;

	my $chunk = 'x' x 65536;

	for (1 .. 1024) {
		return 0 unless defined _write_all($c, $chunk);
		select(undef, undef, undef, 0.005);
	}

	return 0;
}

sub _write_all {
	my ($s, $data) = @_;

	while (length $data) {
		my $n = syswrite($s, $data);
		return undef unless $n;
		substr($data, 0, $n, '');
	}

	return 1;
}

sub _proxy_log {
	my ($dir, $cmd) = @_;

	my @words = grep { /^[A-Za-z]+$|\{/ } @$cmd[0 .. _min($#$cmd, 4)];

	open my $fh, '>>', "$dir/commands.log" or return;
	syswrite($fh, "@words\n");
}

sub _min {
	return $_[0] < $_[1] ? $_[0] : $_[1];
}

###############################################################################

1;

###############################################################################
