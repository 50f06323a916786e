package Test::DynamoRL;

# (C) ngx_dynamo_rl_module developers

# A small test harness for ngx_http_dynamo_rl_module.  The API follows
# the shape of nginx-tests' Test::Nginx (new, has, plan, write_file_expand,
# run, reload, stop, http_get, port, ...); the code is our own.
#
# nginx is started daemonized, exactly as in production:
#
#     nginx -p <testdir>/ -c nginx.conf -e error.log
#
# with its stdout and stderr appended to <testdir>/stderr.  The master
# pid is read from the pid file that %%TEST_GLOBALS%% configures.
#
# Environment:
#
#     TEST_NGINX_BINARY     nginx binary, default /usr/sbin/nginx
#     TEST_NGINX_MODULES    directory with ngx_http_dynamo_rl_module.so,
#                           default <repo>/build
#     TEST_NGINX_NO_MODULE  1: never emit load_module (harness self-test)
#     TEST_NGINX_GLOBALS    appended to %%TEST_GLOBALS%%
#     TEST_NGINX_GLOBALS_HTTP  appended to %%TEST_GLOBALS_HTTP%%
#     TEST_NGINX_LEAVE      keep the test directory
#     TEST_NGINX_CATLOG     dump error.log at the end of the test
#     TEST_NGINX_VERBOSE    report the commands run
#     TEST_NGINX_VALGRIND   1: run nginx under valgrind, with
#                           <repo>/valgrind.suppress when it exists; the
#                           logs are <testdir>/valgrind.<pid>.log and every
#                           deadline of the harness is multiplied by 5
#                           (scale())
#     TEST_NGINX_PRELOAD    put in LD_PRELOAD of nginx only (make asan:
#                           libasan), with ASAN_OPTIONS log_path and
#                           those of asan_options()

###############################################################################

use warnings;
use strict;

use base qw/ Exporter /;

our @EXPORT = qw/ http http_get http_head http_post http_end http_json
	port parse_response /;

use Cwd qw/ abs_path /;
use Fcntl qw/ :flock O_WRONLY O_CREAT /;
use File::Basename qw/ dirname /;
use File::Copy ();
use File::Path qw/ make_path /;
use File::Temp qw/ tempdir /;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;
use Scalar::Util qw/ blessed /;
use Test::More ();
use Time::HiRes qw/ time sleep /;

use Test::DynamoRL::HTTP qw/ add_header /;

my $TDIR = abs_path(dirname(__FILE__) . '/../..');
my $REPO = abs_path("$TDIR/..");

my $MODULE = 'ngx_http_dynamo_rl_module.so';

my $JSON = JSON::PP->new->utf8->allow_bignum->canonical;

my %FEATURES = (
	http => '!--without-http ',
	proxy => '!--without-http_proxy_module',
	rewrite => '!--without-http_rewrite_module',
	map => '!--without-http_map_module',
	upstream_zone => '!--without-http_upstream_zone_module',
	http_v2 => '--with-http_v2_module',
	auth_request => '--with-http_auth_request_module',
	stub_status => '--with-http_stub_status_module',
	realip => '--with-http_realip_module',
	ssl => '--with-http_ssl_module',
	debug => '--with-debug',
);

# the notice of a worker process that stopped accepting, or of a cache
# process that exits at once; the pid is captured

my $SHUTTING_DOWN = qr/\] (\d+)#\d+: (?:gracefully shutting down|exiting)$/m;

my $SANITIZER = qr/AddressSanitizer|LeakSanitizer|ThreadSanitizer
	|ERROR:\ Can't\ open\ file
	|MemorySanitizer|UndefinedBehaviorSanitizer|runtime\ error:
	|==\d+==\s*ERROR\ SUMMARY:\ [1-9]/x;

###############################################################################

sub new {
	my ($class) = @_;

	my $dir = tempdir('dynamo-rl-test-XXXXXXXXXX', TMPDIR => 1,
		CLEANUP => !$ENV{TEST_NGINX_LEAVE})
		or die "cannot create a test directory: $!\n";

	# workers run as "nobody" when the tests run as root

	chmod(0755, $dir) or die "cannot chmod $dir: $!\n";

	return bless {
		_testdir => $dir,
		_pid => $$,
		_daemons => [],
		_allowed => [],
		_asan_options => [],
	}, $class;
}

sub testdir {
	my ($self) = @_;
	return $self->{_testdir};
}

sub has {
	my ($self, @features) = @_;

	for my $feature (@features) {
		my $flag = $FEATURES{$feature};
		die "unknown feature \"$feature\"\n" unless defined $flag;

		my $v = _nginx_v();
		my $have = $flag =~ s/^!// ? index($v, $flag) < 0
			: index($v, $flag) >= 0;

		Test::More::plan(skip_all => "no $feature") unless $have;
	}

	return $self;
}

our @PLANNED;

sub plan {
	my ($self, $n) = @_;

	Test::More::plan(tests => $n + 2);
	$self->{_planned} = 1;

	# the final checks run from END as well, before Test::More counts
	# the tests, even if a closure keeps the object alive

	push @PLANNED, $self;

	return $self;
}

END {
	local $?;
	$_->_finish() for @PLANNED;
}

# another nginx of a planned test, such as a second gateway replica: its
# error log and sanitizer reports are checked at the end as well, two
# more tests that the test's plan() counts

sub check_at_end {
	my ($self) = @_;

	$self->{_planned} = 1;
	push @PLANNED, $self;

	return $self;
}

# code that stop() runs once nginx and the daemons have stopped, once: a
# server of the test's own that nginx uses until it exits (the store)

sub at_stop {
	my ($self, $code) = @_;
	push @{$self->{_at_stop}}, $code;
	return $self;
}

# lines of error.log matching one of these do not count as alerts,
# e.g. the [emerg] of a deliberately broken reload

sub allow_log {
	my ($self, @re) = @_;
	push @{$self->{_allowed}}, @re;
	return $self;
}

# ASAN_OPTIONS added, under make asan (TEST_NGINX_PRELOAD), for the nginx
# that run() starts next, after those of the environment: a test that
# must change the sanitizer's behavior says so here, and why

sub asan_options {
	my ($self, @options) = @_;
	push @{$self->{_asan_options}}, @options;
	return $self;
}

###############################################################################

sub write_file {
	my ($self, $name, $content) = @_;

	my $path = "$self->{_testdir}/$name";
	make_path(dirname($path));

	open my $fh, '>', $path or die "cannot create $path: $!\n";
	binmode $fh;
	print $fh $content;
	close $fh or die "cannot write $path: $!\n";

	return $self;
}

sub write_file_expand {
	my ($self, $name, $content) = @_;
	return $self->write_file($name, $self->_expand($content));
}

sub _expand {
	my ($self, $content, $error_log) = @_;

	my $d = $self->{_testdir};
	$error_log //= 'error.log';

	# Expansion keeps line numbers, so that tests can match the
	# "in nginx.conf:N" of messages against their heredoc: each macro
	# becomes a single line, and load_module, which must precede every
	# other directive, joins the first line of the file.

	if ($content =~ /%%TEST_GLOBALS%%/) {
		my $g = "pid $d/nginx.pid; error_log $d/$error_log debug;";
		$g .= ' ' . $ENV{TEST_NGINX_GLOBALS}
			if defined $ENV{TEST_NGINX_GLOBALS};
		$content =~ s/%%TEST_GLOBALS%%/$g/g;

		my $lm = _load_module();
		$lm .= ' ' if length($lm) && $content !~ /^\n/;
		$content = $lm . $content;
	}

	if ($content =~ /%%TEST_GLOBALS_HTTP%%/) {
		my $g = "access_log $d/access.log;";
		$g .= " ${_}_temp_path $d/${_}_temp;"
			for qw/ client_body proxy fastcgi uwsgi scgi /;
		$g .= ' ' . $ENV{TEST_NGINX_GLOBALS_HTTP}
			if defined $ENV{TEST_NGINX_GLOBALS_HTTP};
		$content =~ s/%%TEST_GLOBALS_HTTP%%/$g/g;
	}

	$content =~ s/%%TESTDIR%%/$d/g;
	$content =~ s/127\.0\.0\.1:(8\d{3})(?!\d)/'127.0.0.1:' . port($1)/ge;
	$content =~ s/\bport\((\d+)\)/port($1)/ge;

	return $content;
}

sub _load_module {
	return '' if $ENV{TEST_NGINX_NO_MODULE};

	my $dir = $ENV{TEST_NGINX_MODULES} // "$REPO/build";
	my $so = abs_path($dir) // $dir;
	$so .= "/$MODULE";

	die "module not built: run make ($so is missing)\n" unless -f $so;

	return "load_module $so;";
}

###############################################################################

# Ports are taken outside the kernel's ephemeral range, so that no client
# connection of the test can take a port before the server binds it, and
# a lock file per port keeps parallel test files (prove -j) apart.

my (%PORTS, %LOCKS);

sub port {
	my ($n) = @_;

	return $PORTS{$n} if defined $PORTS{$n};

	for (1 .. 1000) {
		my $p = 10000 + int(rand(22000));

		next if $LOCKS{$p};

		my $lock = ($ENV{TMPDIR} // '/tmp') . "/dynamo-rl-port-$p.lock";
		sysopen(my $fh, $lock, O_WRONLY | O_CREAT) or next;
		flock($fh, LOCK_EX | LOCK_NB) or next;

		my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$p",
			Proto => 'tcp', ReuseAddr => 1) or next;
		close $s;

		$LOCKS{$p} = $fh;
		return $PORTS{$n} = $p;
	}

	die "cannot allocate a port for $n\n";
}

###############################################################################

sub run {
	my ($self) = @_;

	die "nginx is already running\n" if $self->{_master};

	my $d = $self->{_testdir};
	die "$d/nginx.conf is missing\n" unless -f "$d/nginx.conf";

	unlink "$d/nginx.pid";

	# the processes of this master are logged from here on

	$self->{_procs} = { offset => -s "$d/error.log" // 0, started => {},
		stopping => {} };

	my @cmd = (_binary(), '-p', "$d/", '-c', 'nginx.conf',
		'-e', 'error.log');

	if ($ENV{TEST_NGINX_VALGRIND}) {
		my @vg = ('valgrind', '--quiet', '--error-exitcode=42',
			'--leak-check=full', '--show-leak-kinds=definite',
			'--errors-for-leak-kinds=definite', '--num-callers=30',
			"--log-file=$d/valgrind.%p.log");
		push @vg, "--suppressions=$REPO/valgrind.suppress"
			if -f "$REPO/valgrind.suppress";
		unshift @cmd, @vg;
	}

	_verbose("run: @cmd");

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', "$d/stderr";
		open STDERR, '>>', "$d/stderr";

		# make asan: the sanitizer runtime for nginx only, not for
		# the perl, curl or node processes of the tests

		if ($ENV{TEST_NGINX_PRELOAD}) {
			$ENV{LD_PRELOAD} = $ENV{TEST_NGINX_PRELOAD};

			# one report file per process: reports of processes
			# exiting together do not interleave; worker processes
			# run as "nobody" under root and write them too, so
			# the folder is writable by all

			mkdir("$d/sanitizer") and chmod(01777, "$d/sanitizer");

			# and the leak suppressions: a checkout may sit where
			# "nobody" cannot read (a mktemp -d directory)

			my ($from) = ($ENV{LSAN_OPTIONS} // '')
				=~ /(?:^|:)suppressions=([^:]+)/;
			my $supp = "$d/sanitizer/lsan.supp";

			if (defined $from && $from ne $supp && -r $from
				&& File::Copy::copy($from, "$supp.$$")
				&& rename("$supp.$$", $supp))
			{
				chmod(0644, $supp);
				$ENV{LSAN_OPTIONS} =~
					s/(^|:)suppressions=[^:]+/$1suppressions=$supp/;
			}

			$ENV{ASAN_OPTIONS} = join ':', grep { length }
				$ENV{ASAN_OPTIONS} // '', @{$self->{_asan_options}},
				"log_path=$d/sanitizer/asan";
		}

		{ exec @cmd; }
		print STDERR "cannot exec $cmd[0]: $!\n";
		POSIX::_exit(127);
	}

	# the launched process exits once nginx has daemonized; with
	# "daemon off" in TEST_NGINX_GLOBALS it is the master itself

	my ($child, $failure) = ($pid);

	my $master = $self->wait_for(sub {
		if ($child && waitpid($child, WNOHANG) == $child) {
			$child = undef;
			if ($?) {
				$failure = 'nginx exited with status '
					. ($? >> 8) . ($? & 127 ? ' (signal '
					. ($? & 127) . ')' : '');
				return -1;
			}
		}

		open my $fh, '<', "$d/nginx.pid" or return;
		my $m = <$fh> // '';
		return $m =~ /^(\d+)\n/ && _alive($1) ? $1 : undef;
	}, 10);

	$failure //= 'no pid file after ' . scale(10) . ' s'
		unless $master && $master > 0;

	if (!$failure) {
		$self->{_master} = $master;
		$self->{_child} = $child;

		for my $addr ($self->_listens()) {
			next if $self->waitforsocket($addr);
			$failure = "$addr does not accept connections";
			last;
		}
	}

	if ($failure) {
		if (!$self->{_master} && $child) {
			kill 'KILL', $child;
			waitpid($child, 0);
		}

		$self->_stop_nginx();

		die "nginx failed to start: $failure\n"
			. $self->_tail('error.log') . $self->_tail('stderr');
	}

	_verbose("nginx master $master");

	return $self;
}

sub try_run {
	my ($self, $message) = @_;

	return $self if eval { $self->run(); 1 };

	Test::More::diag($@) if $ENV{TEST_NGINX_VERBOSE};

	if (!$self->{_planned}) {
		Test::More::plan(skip_all => $message);
	}

	# planned already: skip the rest, including our own two checks

	my $b = Test::More->builder();
	$b->skip($message) for $b->current_test() + 1 .. $b->expected_tests();

	$self->{_planned} = 0;
	exit 0;
}

sub _listens {
	my ($self) = @_;

	my $conf = $self->read_file('nginx.conf');
	$conf =~ s/#.*//g;

	my %seen;
	return grep { !$seen{$_}++ }
		$conf =~ /^\s*listen\s+(127\.0\.0\.1:\d+)(?![^;]*\budp\b)/mg;
}

sub reload {
	my ($self) = @_;

	my $master = $self->{_master} or die "nginx is not running\n";
	my $log = "$self->{_testdir}/error.log";
	my $offset = -s $log // 0;

	_verbose("reload: HUP $master");
	kill 'HUP', $master or die "cannot signal $master: $!\n";

	# The master logs "reconfiguring", then "start worker process N" for
	# each new process (error.log is at debug level, see %%TEST_GLOBALS%%),
	# then signals the old ones, which log "gracefully shutting down" and
	# close their listening sockets.  Done when a new worker runs and
	# every other child has stopped accepting (it is gone, or it logged
	# that it is shutting down, in this reload or an earlier one), or
	# when the new configuration was rejected and the old one stays in
	# place.  Processes are found by their parent and the log, not by
	# their titles: under valgrind, /proc/<pid>/cmdline shows valgrind's
	# command line.

	my $result = $self->wait_for(sub {
		my $text = _read_from($log, $offset);
		return 'failed' if $text =~ /\[emerg\]/;

		$text =~ s/^.*?\breconfiguring\n//s or return;
		my %new = map { $_ => 1 }
			$text =~ /start \w+(?: \w+)? process (\d+)/g;
		return unless grep { _alive($_) } keys %new;

		my $stopping = $self->_procs()->{stopping};

		for my $pid (grep { !$new{$_} } _children($master)) {
			return unless $stopping->{$pid};
		}

		return 'ok';
	}, 10);

	die "reload did not complete in " . scale(10) . " s\n"
		. $self->_tail('error.log') unless defined $result;

	$self->{_reload_failed} = $result eq 'failed';

	return $self;
}

sub reload_failed {
	my ($self) = @_;
	return $self->{_reload_failed};
}

# The worker processes that accept connections: children of the master
# that error.log names in "start worker process N" and that have not
# logged "gracefully shutting down".  As reload(), by /proc and the log,
# so that it works under valgrind too.

sub worker_pids {
	my ($self) = @_;

	my $master = $self->{_master} or return ();
	my $p = $self->_procs();

	# in scalar context, their number (sort's is undefined)

	my @pids = sort { $a <=> $b } grep {
		$p->{started}{$_} && !$p->{stopping}{$_}
	} _children($master);

	return @pids;
}

# what error.log says about the processes of the master that run()
# started: the worker processes started, the processes shutting down;
# read on from where the last call stopped, whole lines only

sub _procs {
	my ($self) = @_;

	my $p = $self->{_procs};
	my $text = _read_from("$self->{_testdir}/error.log", $p->{offset});

	$text =~ s/[^\n]*\z//;
	$p->{offset} += length $text;

	$p->{started}{$_} = 1 for $text =~ /start worker process (\d+)/g;
	$p->{stopping}{$_} = 1 for $text =~ /$SHUTTING_DOWN/g;

	return $p;
}

sub stop {
	my ($self) = @_;

	$self->_stop_nginx();

	while (my $pid = shift @{$self->{_daemons}}) {
		_verbose("stop: daemon $pid");

		kill 'TERM', -$pid or kill 'TERM', $pid;
		next if $self->wait_for(sub { waitpid($pid, WNOHANG) != 0 }, 5);

		kill 'KILL', -$pid or kill 'KILL', $pid;
		waitpid($pid, 0);
	}

	while (my $code = shift @{$self->{_at_stop}}) {
		$code->();
	}

	return $self;
}

sub _stop_nginx {
	my ($self) = @_;

	my $master = delete $self->{_master} or return;
	my $child = delete $self->{_child};

	_verbose("stop: nginx master $master");

	my $gone = sub {
		waitpid($child, WNOHANG) if $child;
		return !_alive($master);
	};

	for my $signal (qw/ QUIT TERM KILL /) {
		kill $signal, $master;
		last if $self->wait_for($gone, $signal eq 'KILL' ? 5 : 10);
		Test::More::diag("nginx master $master ignored SIG$signal");
	}
}

sub nginx_t {
	my ($self, $conf) = @_;

	my $d = $self->{_testdir};
	my $name = 'nginx-t.conf';

	$self->write_file($name, $self->_expand($conf, 't-error.log'));

	my @cmd = (_binary(), '-t', '-p', "$d/", '-c', $name,
		'-e', "$d/t-error.log");
	_verbose("nginx_t: @cmd");

	return run_command(sub {

		# nginx -t exits without freeing its cycle, by design: under
		# make asan, LeakSanitizer would report all of it at exit and
		# fail the command.  Leaks of the module are checked in the
		# processes that run() starts.

		if ($ENV{TEST_NGINX_PRELOAD}) {
			$ENV{LD_PRELOAD} = $ENV{TEST_NGINX_PRELOAD};
			$ENV{ASAN_OPTIONS} = join ':', grep { length }
				$ENV{ASAN_OPTIONS} // '', 'detect_leaks=0';
		}
	}, @cmd);
}

# run_command($setup, @cmd): the exit code and the output of a command,
# its stderr with its stdout; $setup, if any, runs in the child first

sub run_command {
	my ($setup, @cmd) = @_;

	my $pid = open(my $fh, '-|') // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		$setup->() if $setup;
		{ exec @cmd; }
		print "cannot exec $cmd[0]: $!\n";
		POSIX::_exit(127);
	}

	my $out = join '', <$fh>;
	close $fh;

	return ($? >> 8, $out);
}

sub DESTROY {
	my ($self) = @_;

	local ($?, $!, $@);

	$self->_finish();
}

sub _finish {
	my ($self) = @_;

	return if $self->{_pid} != $$ || $self->{_finished}++;

	$self->stop();

	my $d = $self->{_testdir};

	if ($ENV{TEST_NGINX_CATLOG} && -f "$d/error.log") {
		Test::More::diag("error.log:\n"
			. $self->read_file('error.log'));
	}

	Test::More::diag("test directory kept: $d") if $ENV{TEST_NGINX_LEAVE};

	return unless $self->{_planned};

	my @alerts = grep { !$self->_allowed($_) }
		$self->log_lines('error.log',
			qr/\[(?:alert|emerg)\]|exited on signal/);

	Test::More::ok(!@alerts, 'no alerts')
		or Test::More::diag(join '', @alerts);

	my @errors;

	for my $path ("$d/error.log", "$d/stderr", glob("$d/asan.*"),
		glob("$d/sanitizer/asan.*"))
	{
		next unless -f $path;
		(my $name = $path) =~ s{^\Q$d\E/}{};
		push @errors, map { "$name: $_" } _sanitizer_lines(
			$self->read_file($name) // '');
	}

	for my $path (glob("$d/valgrind.*.log")) {
		(my $name = $path) =~ s{.*/}{};
		push @errors, map { "$name: $_" } grep { !/^==\d+== Warning/ }
			$self->log_lines($name, qr/^==\d+== /);
	}

	Test::More::ok(!@errors, 'no sanitizer errors')
		or Test::More::diag(join '', @errors[0 .. _min($#errors, 99)]);

	Test::More::diag($self->_tail('error.log'))
		if (@alerts || @errors) && !$ENV{TEST_NGINX_CATLOG};
}

# Sanitizer lines, without LeakSanitizer reports of nginx itself: a worker
# process's start-up allocations (its event arrays, its environment) that
# nginx never frees.  A leak is nginx's own when no frame of its stack is
# in request processing (ngx_process_events_and_timers) or in the module;
# util/lsan.supp cannot say this, as a suppression matches any frame.

sub _sanitizer_lines {
	my ($text) = @_;

	my $leak = qr/^==\d+==ERROR: LeakSanitizer: detected memory leaks\n/m;
	my $end = qr/^SUMMARY: AddressSanitizer: [^\n]*leaked[^\n]*\n/m;

	$text =~ s{$leak(.*?)$end}{ _nginx_leak($1) ? '' : $& }gmse;

	return grep { /$SANITIZER/ } split /^/m, $text;
}

sub _nginx_leak {
	my ($report) = @_;

	for my $block (split /\n(?=(?:Direct|Indirect) leak)/, $report) {
		next unless $block =~ /leak of/;
		return 0 if $block =~ /ngx_process_events_and_timers
			|ngx_http_dynamo_rl|<unknown module>/x;
	}

	return 1;
}

sub _allowed {
	my ($self, $line) = @_;

	for my $re (@{$self->{_allowed}}) {
		return 1 if $line =~ $re;
	}

	return 0;
}

###############################################################################

sub run_daemon {
	my ($self, $code, @args) = @_;

	_verbose('daemon: ' . (ref $code ? 'CODE' : $code) . " @args");

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		setpgrp(0, 0);

		# stdout is TAP: never let a daemon write there

		open STDIN, '<', '/dev/null';
		open STDOUT, '>&', \*STDERR;

		if (ref $code eq 'CODE') {
			my $ok = eval { $code->(@args); 1 };
			print STDERR "daemon: $@" unless $ok;
			POSIX::_exit($ok ? 0 : 1);
		}

		{ exec $code, @args; }
		print STDERR "cannot exec $code: $!\n";
		POSIX::_exit(127);
	}

	# either side may win the race; stop() signals the group

	setpgrp($pid, $pid);

	push @{$self->{_daemons}}, $pid;

	return $self;
}

sub wait_for {
	shift if blessed($_[0]);
	my ($cond, $seconds, $interval) = @_;

	my $deadline = time() + scale($seconds // 10);
	$interval //= 0.05;

	for (;;) {
		my $v = $cond->();
		return $v if $v;
		return undef if time() > $deadline;
		sleep($interval);
	}
}

sub waitforsocket {
	shift if blessed($_[0]);
	my ($addr, $seconds) = @_;

	return wait_for(sub {
		my $s = IO::Socket::INET->new(Proto => 'tcp', PeerAddr => $addr,
			Timeout => 1);
		return defined $s;
	}, $seconds // 10, 0.05) ? 1 : 0;
}

sub waitforfile {
	shift if blessed($_[0]);
	my ($path, $seconds) = @_;

	return wait_for(sub { -e $path }, $seconds // 10) ? 1 : 0;
}

sub read_file {
	my ($self, $name) = @_;

	my $path = "$self->{_testdir}/$name";

	open my $fh, '<', $path or die "cannot open $path: $!\n";
	binmode $fh;
	local $/;
	return scalar <$fh>;
}

sub log_lines {
	my ($self, $name, $re) = @_;

	open my $fh, '<', "$self->{_testdir}/$name" or return;
	return grep { $_ =~ $re } <$fh>;
}

###############################################################################

sub fake_dir {
	my ($self) = @_;
	return "$self->{_testdir}/fake";
}

sub run_fake_dynamo {
	my ($self, %opts) = @_;

	my $dir = $self->fake_dir();
	my $workers = $opts{workers} // 3;
	my @ports = map { port(8091 + $_) } 0 .. $workers - 1;

	make_path($dir);
	unlink "$dir/ports.json";

	$self->run_daemon($^X, "$TDIR/fake_dynamo.pl",
		'--state-dir', $dir,
		'--frontend-port', port(8081),
		'--listener-port', port(8082),
		'--worker-ports', join(',', @ports),
		$ENV{TEST_NGINX_VERBOSE} ? () : ('--quiet'),
		@{$opts{args} // []});

	$self->waitforfile("$dir/ports.json")
		or die "fake_dynamo.pl did not write $dir/ports.json\n";

	for my $p (port(8081), port(8082), @ports) {
		$self->waitforsocket("127.0.0.1:$p")
			or die "fake_dynamo.pl does not listen on $p\n";
	}

	return $self;
}

sub fake_records {
	my ($self, $which) = @_;

	open my $fh, '<', $self->fake_dir() . "/$which.log" or return [];

	my @records;

	# a line the fake is still writing has no newline yet: it is read
	# the next time

	while (my $line = <$fh>) {
		last unless $line =~ /\n\z/;
		next unless $line =~ /\S/;
		push @records, $JSON->decode($line);
	}

	return \@records;
}

sub fake_set {
	my ($self, $file, $content) = @_;

	my $path = $self->fake_dir() . "/$file";
	make_path(dirname($path));

	open my $fh, '>', "$path.tmp.$$" or die "cannot create $path: $!\n";
	binmode $fh;
	print $fh $content;
	close $fh or die "cannot write $path: $!\n";
	rename("$path.tmp.$$", $path) or die "cannot rename to $path: $!\n";

	return $self;
}

sub fake_unset {
	my ($self, $file) = @_;

	my $path = $self->fake_dir() . "/$file";
	unlink($path) or $!{ENOENT} or die "cannot remove $path: $!\n";

	return $self;
}

###############################################################################

sub http_get {
	my ($uri, %extra) = @_;
	return http(_request('GET', $uri, %extra), %extra);
}

sub http_head {
	my ($uri, %extra) = @_;
	return http(_request('HEAD', $uri, %extra), %extra);
}

sub http_post {
	my ($uri, $body, %extra) = @_;

	my $h = $extra{headers} // '';
	$h = "Content-Type: application/json\r\n$h"
		unless $h =~ /^Content-Type:/mi;
	$h = 'Content-Length: ' . length($body) . "\r\n$h";

	return http(_request('POST', $uri, %extra, headers => $h), %extra,
		body => $body);
}

# GET (or POST when "json" holds data to send), then decode the body;
# returns parse_response()'s hash plus "json" (undef if not JSON)

sub http_json {
	my ($uri, %extra) = @_;

	my $data = delete $extra{json};
	my $h = $extra{headers} // '';
	$h = "Accept: application/json\r\n$h" unless $h =~ /^Accept:/mi;

	my $raw = defined $data
		? http_post($uri, $JSON->encode($data), %extra, headers => $h)
		: http_get($uri, %extra, headers => $h);

	my $r = parse_response($raw) or return undef;

	$r->{json} = eval { $JSON->decode($r->{body}) };
	$r->{json_error} = $@ unless defined $r->{json};

	return $r;
}

sub _request {
	my ($method, $uri, %extra) = @_;

	my $h = $extra{headers} // '';
	$h .= "\r\n" if length($h) && $h !~ /\r\n\z/;

	my $r = "$method $uri HTTP/1.1\r\n";
	$r .= "Host: localhost\r\n" unless $h =~ /^Host:/mi;
	$r .= "Connection: close\r\n" unless $h =~ /^Connection:/mi;

	return "$r$h\r\n";
}

sub http {
	my ($request, %extra) = @_;

	my $addr = $extra{PeerAddr} // '127.0.0.1:' . port(8080);
	my $s = IO::Socket::INET->new(Proto => 'tcp', PeerAddr => $addr,
		Timeout => 5);

	if (!$s) {
		Test::More::diag("http: cannot connect to $addr: $@");
		return undef;
	}

	local $SIG{PIPE} = 'IGNORE';

	_send($s, $request);

	if (defined $extra{body}) {
		sleep($extra{sleep}) if $extra{sleep};
		_send($s, $extra{body});
	}

	return $s if $extra{start};

	return http_end($s, %extra);
}

sub _send {
	my ($s, $data) = @_;

	_verbose("http >>>\n$data") if ($ENV{TEST_NGINX_VERBOSE} // 0) > 1;

	while (length $data) {
		my $n = syswrite($s, $data);
		return unless $n;
		substr($data, 0, $n, '');
	}
}

sub http_end {
	my ($s, %extra) = @_;

	my $timeout = scale($extra{timeout} // 10);
	my $deadline = time() + $timeout;
	my $sel = IO::Select->new($s);
	my $reply = '';

	for (;;) {
		my $left = $deadline - time();

		if ($left <= 0 || !$sel->can_read($left)) {
			Test::More::diag("http: response incomplete after"
				. " $timeout s");
			last;
		}

		my $n = sysread($s, $reply, 65536, length $reply);
		last unless $n;
	}

	close $s;

	_verbose("http <<<\n$reply") if ($ENV{TEST_NGINX_VERBOSE} // 0) > 1;

	return $reply;
}

sub parse_response {
	my ($raw) = @_;

	return undef unless defined $raw && length $raw;

	my ($head, $body) = split /\r\n\r\n/, $raw, 2;
	my ($status_line, @lines) = split /\r\n/, $head;

	return undef unless $status_line
		&& $status_line =~ m{^(HTTP/\d(?:\.\d)?) (\d{3})(?: (.*))?$};

	my %r = (protocol => $1, status => $2 + 0, reason => $3 // '',
		headers => {}, body => $body // '');

	for my $line (@lines) {
		my ($name, $value) = $line =~ /^([^:\s]+):\s*(.*?)\s*$/ or next;

		add_header($r{headers}, lc $name, $value);
	}

	my $te = $r{headers}{'transfer-encoding'} // '';

	if (!ref $te && $te =~ /\bchunked\b/i) {
		($r{body}, $r{incomplete}) = _dechunk($r{body});
	}

	return \%r;
}

sub _dechunk {
	my ($in) = @_;

	my $out = '';

	while ($in =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
		my $size = hex $1;
		return ($out, 0) if $size == 0;
		return ($out . $in, 1) if length($in) < $size + 2;

		$out .= substr($in, 0, $size, '');
		return ($out, 1) unless $in =~ s/^\r\n//;
	}

	return ($out, 1);
}

###############################################################################

sub _binary {
	return $ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx';
}

my $NGINX_V;

sub _nginx_v {
	return $NGINX_V if defined $NGINX_V;

	my $bin = _binary();
	$NGINX_V = `$bin -V 2>&1`;
	die "cannot run $bin -V\n" if $?;

	$NGINX_V =~ s/\n/ /g;
	$NGINX_V .= ' ';

	return $NGINX_V;
}

# a deadline or duration of normal speed, as it holds in this run:
# multiplied by 5 under valgrind; the harness's own deadlines go through
# it, and tests use it for theirs (Test::DynamoRL::scale(10))

sub scale {
	my ($seconds) = @_;
	return $ENV{TEST_NGINX_VALGRIND} ? $seconds * 5 : $seconds;
}

sub _verbose {
	Test::More::diag(@_) if $ENV{TEST_NGINX_VERBOSE};
}

sub _min {
	return $_[0] < $_[1] ? $_[0] : $_[1];
}

sub _stat {
	my ($pid) = @_;

	open my $fh, '<', "/proc/$pid/stat" or return;
	my $stat = <$fh> // return;

	# the command name in parentheses may hold spaces and parentheses

	$stat =~ s/^.*\)\s+//s;
	return split ' ', $stat;
}

sub _alive {
	my ($pid) = @_;

	return 0 unless kill 0, $pid;

	my ($state) = _stat($pid);
	return defined $state && $state ne 'Z' && $state ne 'X';
}

sub _children {
	my ($ppid) = @_;

	my @kids;

	opendir(my $dh, '/proc') or die "cannot read /proc: $!\n";

	for my $pid (grep { /^\d+$/ } readdir $dh) {
		my ($state, $parent) = _stat($pid);
		push @kids, $pid if defined $parent && $parent == $ppid
			&& $state ne 'Z';
	}

	return @kids;
}

sub _read_from {
	my ($path, $offset) = @_;

	open my $fh, '<', $path or return '';
	seek($fh, $offset, 0);
	local $/;
	return <$fh> // '';
}

sub _tail {
	my ($self, $name, $n) = @_;

	# debug lines, and the header dumps that continue them, would hide
	# the messages that explain a failure

	my $re = $name =~ /error\.log\z/ ? qr/^\S+ \S+ \[(?!debug\])/ : qr/^/;
	my @lines = $self->log_lines($name, $re) or return '';
	$n //= 20;
	splice(@lines, 0, @lines - $n) if @lines > $n;

	return "--- tail of $name ---\n" . join('', @lines);
}

###############################################################################

# the pid of the running nginx master (the new one after an upgrade())

sub master {
	my ($self) = @_;
	return $self->{_master};
}

# A binary upgrade, as Debian's "invoke-rc.d nginx upgrade" does it: USR2
# to the running master, which re-executes the binary with the same
# arguments (and reads nginx.conf again); the new master writes
# nginx.pid, the old one renames its file to nginx.pid.oldbin.  Returns
# once the new master has $workers worker processes; both masters run
# until upgrade_finish() QUITs the old one.  From upgrade() on, stop()
# stops the new master, and an old master left running is stopped by
# its pid at the end of the test.

my @OLD_MASTERS;

sub upgrade {
	my ($self, $workers) = @_;

	my $old = $self->{_master} or die "nginx is not running\n";
	my $d = $self->{_testdir};

	# nginx ignores USR2 ("the changing binary signal is ignored") while
	# the process that daemonized it is still there: the master takes
	# its parent for the old binary.  Under make asan that process may
	# still be in LeakSanitizer's check at exit.

	my $child = delete $self->{_child};

	if ($child && $child != $old) {
		$self->wait_for(sub { waitpid($child, WNOHANG) != 0 }, 30)
			or die "nginx's launcher $child did not exit in "
			. scale(30) . " s\n";
	}

	_verbose("upgrade: USR2 $old");
	kill 'USR2', $old or die "cannot signal $old: $!\n";

	my $new = $self->wait_for(sub {
		open my $fh, '<', "$d/nginx.pid.oldbin" or return;
		open $fh, '<', "$d/nginx.pid" or return;
		my ($pid) = (<$fh> // '') =~ /^(\d+)\n/ or return;
		return if $pid == $old || !_alive($pid);
		return (grep { _alive($_) } _children($pid)) >= ($workers // 1)
			? $pid : undef;
	}, 30) or die "binary upgrade did not start in " . scale(30) . " s\n"
		. $self->_tail('error.log');

	push @OLD_MASTERS, [ $self, $old ];

	$self->{_old_master} = $old;
	$self->{_master} = $new;

	return $new;
}

sub upgrade_finish {
	my ($self) = @_;

	my $old = delete $self->{_old_master} or die "no binary upgrade\n";

	_stop_master($self, $old);
	@OLD_MASTERS = grep { $_->[1] != $old } @OLD_MASTERS;

	return $self;
}

# stops nginx only, keeping the daemons (the fake Dynamo) for a run()

sub stop_nginx {
	my ($self) = @_;
	$self->_stop_nginx();
	return $self;
}

sub _stop_master {
	my ($self, $pid) = @_;

	for my $signal (qw/ QUIT TERM KILL /) {
		kill $signal, $pid;
		last if $self->wait_for(sub { !_alive($pid) },
			$signal eq 'KILL' ? 5 : 10);
		Test::More::diag("nginx master $pid ignored SIG$signal");
	}
}

END {
	local $?;
	_stop_master(@$_) for grep { $_->[0]{_pid} == $$ } @OLD_MASTERS;
}

###############################################################################

1;

###############################################################################
