package Test::DynamoRL::PidNS;

# (C) ngx_dynamo_rl_module developers

# nginx of a test in a pid namespace of its own (unshare --pid --fork
# --kill-child), as in a container: its master is pid 1 there and its
# first worker process pid 2.  unshare kills its child, nginx's master,
# the namespace's init, if it is killed itself.  The test stops it by its
# pid (stop()), in an END block too:
#
#     END { local $?; $ns->stop('KILL') if $ns; }
#
# The test file checks first that "unshare --pid --fork true" works here.
#
#     my $ns = Test::DynamoRL::PidNS->new($t, $name, seconds => 10)
#                           nginx of $t's test directory (nginx.conf,
#                           error.log, stdout and stderr appended to
#                           "stderr"; under TEST_NGINX_PRELOAD, LD_PRELOAD
#                           and the sanitizer's log_path as for
#                           Test::DynamoRL's nginx), "$name" in messages;
#                           stop() waits "seconds" for it to exit
#     $ns->start($ready)    forks unshare and nginx in the foreground,
#                           polls $ready->() for 10 s (scaled) and returns
#                           its first true value, undef if none; dies
#                           "$name exited" if unshare exits meanwhile;
#                           then finds nginx's master
#     $ns->stop($signal)    $signal to nginx's master (if it was found;
#                           without it, a KILL goes to unshare), waits for
#                           unshare to exit, then SIGKILL to it and reaps
#                           it; nothing if it does not run
#     $ns->pid(), master()  unshare's pid, nginx's master outside the
#                           namespace (undef if it does not run)

###############################################################################

use warnings;
use strict;

use POSIX qw/ WNOHANG /;

use Test::DynamoRL ();

###############################################################################

sub new {
	my ($class, $t, $name, %o) = @_;

	return bless { t => $t, name => $name, seconds => $o{seconds} // 10 },
		$class;
}

sub pid { $_[0]{pid} }
sub master { $_[0]{master} }

sub start {
	my ($self, $ready) = @_;

	my $d = $self->{t}->testdir();

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

	$self->{pid} = $pid;

	my $v = Test::DynamoRL::wait_for(sub {
		die "$self->{name} exited\n" if waitpid($pid, WNOHANG) == $pid;
		return $ready->();
	}, 10);

	if (open my $fh, '<', "/proc/$pid/task/$pid/children") {
		($self->{master}) = (<$fh> // '') =~ /(\d+)/;
	}

	return $v;
}

sub stop {
	my ($self, $signal) = @_;

	my $pid = $self->{pid} or return;
	my $master = $self->{master};

	kill $signal, $master if $master;
	kill 'KILL', $pid if $signal eq 'KILL' && !$master;

	Test::DynamoRL::wait_for(sub { waitpid($pid, WNOHANG) == $pid },
		$self->{seconds})
		or do { kill 'KILL', $pid; waitpid($pid, 0) };

	delete @$self{qw/ pid master /};
}

###############################################################################

1;

###############################################################################
