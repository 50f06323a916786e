#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for README.md as a new user meets it: "make run" itself, on free
# ports (RUN_PORTS), and the README's marked command blocks ("<!-- README
# test: name -->" before a fenced sh block) run as they are written,
# against it, with only the ports changed: generation and /generate, the
# gate, a whole policy refresh with rl-refresh's defaults; then "make run
# REPLICAS=2" and the shared mode's gate (the epoch taken from the close,
# "drained" waited for) and refresh.  What make run prints is checked
# too: no compiler output, every command it shows can be pasted into a
# shell (quoted: each -H a header, each -d JSON), the single mode's pasted
# again with the same answers, and a Ctrl-C that ends it without an error
# of make's, everything it started stopped.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ run_gateway time_limit /;

###############################################################################

time_limit(240);

my $REPO = abs_path(dirname(__FILE__) . '/..');

my $t = Test::DynamoRL->new();

plan(tests => 39);

# the marked blocks, continuation lines as the shell reads them

my %block;
my @names;

{
	open my $fh, '<', "$REPO/README.md" or die "README.md: $!\n";
	local $/;
	my $readme = <$fh>;

	while ($readme =~ /^<!-- README test: ([\w-]+)[^\n]*-->\n```sh\n(.*?)^```$/msg) {
		push @names, $1;
		$block{$1} = $2;
	}
}

is(join(' ', @names), 'single-generate single-gate single-refresh '
	. 'shared-gate shared-refresh', 'README: the marked blocks');

###############################################################################

# make run

my @P = map { port($_) } 8060 .. 8063;
my $run;
my $transcript;

$run = make_run(1, "$P[0]:$P[1]");
my $text = wait_running();

ok($text =~ /^running; press Ctrl-C to stop$/m, 'single: started')
	or diag($text);
unlike($text, qr/^(?:cc |gcc |make\[|objs\/)|-Werror|\.o\b/m,
	'single: no compiler output');

my @shown = shown($text);

is(scalar @shown, 5, 'single: five calls shown');
pasteable('single', @shown);

# pasted again: the same answers (a named attempt id is used up)

for my $s (@shown) {
	my $out = sh($s->[0]);
	my $want = $s->[0] =~ /X-Dynamo-Attempt-Id/
		? qr/^HTTP\/1\.1 409 |"code":409/m
		: qr/^\Q${\substr($s->[1], 0, 20)}\E/;

	like($out, $want, 'single, pasted: ' . substr($s->[0], 0, 60));
}

my ($refresh) = $text =~ /^(examples\/rl-refresh .*)$/m;

like($refresh // '', qr/--gateway http:\/\/127\.0\.0\.1:$P[1] /,
	'single: the refresh command shown');
like(sh($refresh // 'false'), qr/^rl-refresh: done: 3 worker/m,
	'single, pasted: the refresh done');

# the README's blocks, as written

my $out = readme('single-generate', 8080 => $P[0], 9090 => $P[1]);

like($out, qr/"object":"text_completion"/, 'single-generate: a completion');
like($out, qr/"meta_info"|"text":/, 'single-generate: /generate answered');
unlike($out, qr/"error"/, 'single-generate: no error');

$out = readme('single-gate', 8080 => $P[0], 9090 => $P[1]);

like($out, qr/"state":"closed"/, 'single-gate: closed');
like($out, qr/^HTTP\/1\.1 503 .*^Retry-After: /ms, 'single-gate: 503, Retry-After')
	or diag($out);
like($out, qr/"state":"open"/, 'single-gate: open again');

$out = readme('single-refresh', 8080 => $P[0], 9090 => $P[1]);

like($out, qr/^\[8\/9 generation\] +\S+:$P[1]\/verify\/v1\/completions  ok, HTTP 200/m,
	'single-refresh: the generation check on its default');
like($out, qr/^rl-refresh: done: 3 worker\(s\) at weight version "v2", 1 gate\(s\) open$/m,
	'single-refresh: done') or diag($out);

stopped('single', $P[0], $P[1]);

###############################################################################

# make run REPLICAS=2

$run = make_run(2, "$P[0]:$P[1] $P[2]:$P[3]");
$text = wait_running();

ok($text =~ /^running; press Ctrl-C to stop$/m, 'shared: started')
	or diag($text);
unlike($text, qr/^(?:cc |gcc |make\[|objs\/)|-Werror|\.o\b/m,
	'shared: no compiler output');

@shown = shown($text);

is(scalar @shown, 8, 'shared: eight calls shown');
pasteable('shared', @shown);

like($shown[5][1] // '', qr/"drained":true/,
	'shared: the gate shown once drained');

$out = readme('shared-gate', 8080 => $P[0], 9090 => $P[1],
	8081 => $P[2], 9091 => $P[3]);

like($out, qr/^HTTP\/1\.1 503 .*gate_closed/ms, 'shared-gate: 503 on b');
like($out, qr/"replica":"b".*"drained":true/, 'shared-gate: drained on b');
like($out, qr/"state":"open".*"replica":"b"/, 'shared-gate: opened through b')
	or diag($out);

$out = readme('shared-refresh', 8080 => $P[0], 9090 => $P[1],
	8081 => $P[2], 9091 => $P[3]);

like($out, qr/^rl-refresh: done: 3 worker\(s\) at weight version "v2", the shared gate open$/m,
	'shared-refresh: done') or diag($out);

stopped('shared', @P);

###############################################################################

# make run in a process group of its own, as a terminal starts it: Ctrl-C
# reaches make and everything under it

sub make_run {
	my ($replicas, $ports) = @_;

	$transcript = $t->testdir() . "/make-run-$replicas.out";

	return run_gateway($t, $transcript,
		[ 'make', 'run', "REPLICAS=$replicas", "RUN_PORTS=$ports" ],
		setsid => 1, dir => $REPO, unset => [ qw/ MAKEFLAGS MAKELEVEL
			MFLAGS / ]);
}

sub wait_running {
	Test::DynamoRL::wait_for(sub {
		if ($run && waitpid($run, WNOHANG) == $run) {
			$run = 0;
			return 1;
		}

		return slurp($transcript) =~ /^running; press Ctrl-C to stop$/m;
	}, 120);

	return slurp($transcript);
}

# Ctrl-C: SIGINT to the whole process group

sub stopped {
	my ($name, @ports) = @_;

	my @pids = map { slurp($_) =~ /(\d+)/ }
		glob($t->testdir() . '/dynamo-rl-run.*/{,*/}nginx.pid'),
		glob($t->testdir() . '/dynamo-rl-run.*/redis/redis.pid');

	kill 'INT', -$run if $run;

	my $status;

	ok(Test::DynamoRL::wait_for(sub {
		$run && waitpid($run, WNOHANG) == $run or return;
		$status = $?;
		return 1;
	}, 30), "$name: Ctrl-C ends it");

	$run = 0;

	my $text = slurp($transcript);

	unlike($text, qr/^make(?:\[\d+\])?: \*\*\*/m,
		"$name: no error of make's") or diag($text);
	like($text, qr/^stopped; logs were in /m, "$name: said so");
	is(scalar(grep { kill 0, $_ } @pids), 0,
		"$name: what it started stopped");
	is(join(' ', grep { IO::Socket::INET->new("127.0.0.1:$_") } @ports),
		'', "$name: nothing listens on its ports");

	system('rm', '-rf', glob($t->testdir() . '/dynamo-rl-run.*'));
}

# the calls a transcript shows: [ command, its output ]

sub shown {
	my ($text) = @_;

	return map { [ split /\n/, $_, 2 ] } grep { /^curl / }
		split /^\$ /m, ($text =~ /^(\$ curl .*)\z/ms)[0] // '';
}

# each command shown, as a shell reads it: curl, a loopback URL, every -H
# a header line and every -d JSON

sub pasteable {
	my ($name, @shown) = @_;

	my @bad;

	for my $s (@shown) {
		my @w = split /\0/, sh("eval \"set -- \$0\"; printf '%s\\0' \"\$@\"",
			$s->[0]);

		my $ok = @w && $w[0] eq 'curl'
			&& grep { m{^http://127\.0\.0\.1:\d+/} } @w;

		for my $i (0 .. $#w - 1) {
			$ok = 0 if $w[$i] eq '-H' && $w[$i + 1] !~ /^[\w-]+: \S/;
			$ok = 0 if $w[$i] eq '-d'
				&& !eval { decode_json($w[$i + 1]); 1 };
		}

		push @bad, $s->[0] unless $ok;
	}

	is(join("\n", @bad), '', "$name: every command shown can be pasted");
}

# a README block, its ports moved, run by bash from the top of the clone

sub readme {
	my ($name, %port) = @_;

	my $sh = $block{$name} // 'echo "no block"; exit 1';

	$sh =~ s/127\.0\.0\.1:(\d+)/'127.0.0.1:' . ($port{$1} \/\/ $1)/ge;

	return sh("set -e\n$sh");
}

sub sh {
	my ($cmd, @args) = @_;

	my $pid = open(my $fh, '-|') // die "cannot fork: $!\n";

	if ($pid == 0) {
		chdir $REPO;
		open STDERR, '>&', \*STDOUT;
		{ exec 'bash', '-c', $cmd, @args; }
		POSIX::_exit(127);
	}

	local $/;
	my $out = <$fh> // '';
	close $fh;

	return $out;
}

sub slurp {
	return Test::DynamoRL::Fixture::slurp($_[0]) // '';
}

END {
	if ($run) {
		kill 'INT', -$run;
		waitpid($run, 0);
	}
}

###############################################################################
