package Test::DynamoRL::PidNS;

# (C) ngx_dynamo_rl_module developers

# nginx of a test in a pid namespace of its own (unshare --pid --fork
# --kill-child), as in a container: its master is pid 1 there and its
# first worker process pid 2.  The test records the pid that
# pidns_start() returns before it waits, and stops it by that pid (in
# its END block too): unshare kills its child, nginx's master, the
# namespace's init, if it is killed itself.  The test file checks first
# that "unshare --pid --fork true" works here.
#
#     pidns_start($t)       forks unshare and nginx in the foreground,
#                           with $t's test directory as prefix
#                           (nginx.conf, error.log, stdout and stderr
#                           appended to "stderr"; under
#                           TEST_NGINX_PRELOAD, LD_PRELOAD and the
#                           sanitizer's log_path as Test::DynamoRL sets
#                           them); returns unshare's pid at once
#     pidns_wait($pid, $ready, $what)  polls $ready->() for 10 s (scaled)
#                           and returns its first true value, undef if
#                           none; dies "$what exited" if unshare exits
#     pidns_master($pid)    nginx's master outside the namespace
#                           (unshare's child), undef if there is none
#     pidns_stop($pid, $signal, $master, $seconds)  $signal to $master
#                           (if given; without it, a KILL goes to
#                           unshare), waits $seconds for unshare to
#                           exit, then SIGKILL to it and reaps it

###############################################################################

use warnings;
use strict;

use base qw/ Exporter /;

our @EXPORT_OK = qw/ pidns_start pidns_wait pidns_master pidns_stop /;

use POSIX qw/ WNOHANG /;

use Test::DynamoRL ();

###############################################################################

sub pidns_start {
	my ($t) = @_;

	my $d = $t->testdir();

	my @env = ();

	if ($ENV{TEST_NGINX_PRELOAD}) {
		mkdir("$d/sanitizer") and chmod(01777, "$d/sanitizer");
		push @env, "LD_PRELOAD=$ENV{TEST_NGINX_PRELOAD}",
			'ASAN_OPTIONS=' . join(':', grep { length }
				$ENV{ASAN_OPTIONS} // '',
				"log_path=$d/sanitizer/asan");
	}

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', "$d/stderr";
		open STDERR, '>>', "$d/stderr";

		my @cmd = ('unshare', '--pid', '--fork', '--kill-child',
			'env', @env,
			$ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx',
			'-p', "$d/", '-c', 'nginx.conf', '-e', 'error.log',
			'-g', 'daemon off;');

		{ exec @cmd; }
		POSIX::_exit(127);
	}

	return $pid;
}

sub pidns_wait {
	my ($pid, $ready, $what) = @_;

	return Test::DynamoRL::wait_for(sub {
		die "$what exited\n" if waitpid($pid, WNOHANG) == $pid;
		return $ready->();
	}, 10);
}

sub pidns_master {
	my ($pid) = @_;

	open my $fh, '<', "/proc/$pid/task/$pid/children" or return undef;
	my ($child) = (<$fh> // '') =~ /(\d+)/;

	return $child;
}

sub pidns_stop {
	my ($pid, $signal, $master, $seconds) = @_;

	kill $signal, $master if $master;
	kill 'KILL', $pid if $signal eq 'KILL' && !$master;

	Test::DynamoRL::wait_for(sub { waitpid($pid, WNOHANG) == $pid },
		$seconds)
		or do { kill 'KILL', $pid; waitpid($pid, 0) };
}

###############################################################################

1;

###############################################################################
