#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the files the module reads and writes on the local disk, as a
# local user who is not nginx would attack them (the tests run as root and
# build each hostile case with chown and chmod; the worker processes run as
# "nobody"):
#
# - dynamo_rl_zone state=: nginx -t refuses a directory that anyone but
#   nginx's user can write (mode 0777, another owner, root's own), naming
#   it and why, and refuses an existing state file that is a link, is
#   another user's or is writable by others; nginx -t neither creates nor
#   chowns anything; a start creates a missing directory 0700 for nginx's
#   user; a "PATH.tmp" planted as a link to another user's file is not
#   followed, and the live file is nginx's, mode 0600; a state file that
#   is another user's or a link is refused closed at start (the gate
#   stays closed, with the reason), and another user's file put in place
#   while nginx runs closes the gate.
# - a full disk (ENOSPC, a tmpfs of 64k mounted by the test): a gate change
#   that cannot be written is made, answered 500 state_unwritable and
#   logged with the errno; the file written before stays whole, no
#   temporary file is left, and a change once there is room again is
#   written and read back at the next start.
# - dynamo_rl_store password_file=: a FIFO is refused by nginx -t at once
#   instead of hanging it.

###############################################################################

use warnings;
use strict;

use Test::More;

use Fcntl qw/ O_WRONLY O_NONBLOCK /;
use POSIX qw/ mkfifo WNOHANG /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_conf slurp time_limit /;

###############################################################################

time_limit(120);

plan(skip_all => 'run as root: the hostile files are built with chown')
	if $> != 0;

my $t = Test::DynamoRL->new()->has(qw/http/)->plan(46);

my $d = $t->testdir();
my $NOBODY = getpwnam('nobody') // die "no user nobody\n";
my $OTHER = 4242;	# a uid of no user: not root, not nginx's

# the tmpfs of the full disk's case, unmounted whatever happens

our $MOUNTED;

END { system('umount', $MOUNTED) if defined $MOUNTED; }

###############################################################################

my ($rc, $out);

# the directory: nginx's user's alone

for my $case (
	[ 'mode 0777', 'open', $NOBODY, 0777,
		'writable by others than its owner (mode 0777)' ],
	[ 'mode 0770', 'group', $NOBODY, 0770,
		'writable by others than its owner (mode 0770)' ],
	[ 'another owner', 'other', $OTHER, 0700,
		"owned by uid $OTHER, not by nginx's user (uid $NOBODY)" ],
	[ 'root\'s own', 'root', 0, 0755,
		"owned by uid 0, not by nginx's user (uid $NOBODY)" ],
) {
	my ($name, $dir, $uid, $mode, $why) = @$case;

	mkdir "$d/$dir" or die "cannot mkdir $d/$dir: $!\n";
	chown $uid, -1, "$d/$dir" or die "cannot chown $d/$dir: $!\n";
	chmod $mode, "$d/$dir" or die "cannot chmod $d/$dir: $!\n";

	($rc, $out) = $t->nginx_t(nginx_conf("state=$d/$dir/rl.state"));
	my $re = qr/\[emerg\] unsafe directory "\Q$d\/$dir\E" of state file /
		. qr/"\Q$d\/$dir\/rl.state\E": \Q$why\E\n/;
	like($out, qr/$re/m,
		"nginx -t: directory of $name refused") or diag($out);
	is($rc, 1, "nginx -t: directory of $name, exit 1");
}

# nginx -t changed nothing: ngx_add_path() gave a directory to nginx's user

is(join(' ', (stat "$d/root")[4], sprintf('%04o', (stat _)[2] & 07777)),
	'0 0755', 'nginx -t: root\'s directory not given to nginx\'s user');

# a missing directory: nginx -t passes and does not create it

($rc, $out) = $t->nginx_t(nginx_conf("state=$d/state/rl.state"));
is($rc, 0, 'nginx -t: missing directory accepted') or diag($out);
ok(!-e "$d/state", 'nginx -t: missing directory not created');

# an existing state file: root's or nginx's user's, theirs alone, no link

mkdir "$d/ok" or die "cannot mkdir $d/ok: $!\n";
chown $NOBODY, -1, "$d/ok" or die "cannot chown $d/ok: $!\n";
chmod 0700, "$d/ok" or die "cannot chmod $d/ok: $!\n";

for my $case (
	[ 'a link', sub { symlink "$d/elsewhere", $_[0] }, 'a symbolic link' ],
	[ 'a FIFO', sub { mkfifo($_[0], 0600) }, 'not a regular file' ],
	[ 'another user\'s', sub { spew($_[0], 'x'); chown $OTHER, -1, $_[0] },
		"owned by uid $OTHER, not by root or nginx's user (uid $NOBODY)" ],
	[ 'writable by others', sub { spew($_[0], 'x'); chmod 0666, $_[0] },
		'writable by others than its owner (mode 0666)' ],
) {
	my ($name, $make, $why) = @$case;
	my $file = "$d/ok/rl.state";

	unlink $file;
	$make->($file) or die "cannot make $file: $!\n";

	($rc, $out) = $t->nginx_t(nginx_conf("state=$file"));
	like($out, qr/\[emerg\] unsafe state file "\Q$file\E": \Q$why\E$/m,
		"nginx -t: state file $name refused") or diag($out);
}

unlink "$d/ok/rl.state";

($rc, $out) = $t->nginx_t(nginx_conf("state=$d/ok/rl.state"));
is($rc, 0, 'nginx -t: nginx\'s own directory accepted') or diag($out);

###############################################################################

# a start creates the directory, for nginx's user alone

my $STATE = "$d/state/rl.state";

$t->write_file_expand('nginx.conf', nginx_conf("state=$STATE"));
$t->run();

is(join(' ', (stat "$d/state")[4], sprintf('%04o', (stat _)[2] & 07777)),
	"$NOBODY 0700", 'start: directory created 0700 for nginx\'s user');
is((stat $d)[4], 0, 'start: the test directory not given away');

# a PATH.tmp planted as a link to another user's file is not followed

spew("$d/attacker", "attacker's\n");
chown $OTHER, -1, "$d/attacker" or die "cannot chown $d/attacker: $!\n";
chmod 0666, "$d/attacker" or die "cannot chmod $d/attacker: $!\n";
symlink "$d/attacker", "$STATE.tmp" or die "cannot symlink: $!\n";

my $r = gate_post({ action => 'close', reason => 'planted tmp' });
is(join(' ', $r->{status}, $r->{json}{state} // ''), '200 closed',
	'planted tmp: gate closed and written');
is(slurp("$d/attacker"), "attacker's\n",
	'planted tmp: the link\'s target untouched');
ok(!-l $STATE && -f _, 'planted tmp: the state file is no link');
is(join(' ', (lstat $STATE)[4], sprintf('%04o', (lstat _)[2] & 07777)),
	"$NOBODY 0600", 'planted tmp: the state file is nginx\'s, mode 0600');
like(slurp($STATE) // '', qr/^gate closed \d+ .* \Q706c616e74656420746d70\E$/m,
	'planted tmp: the state file holds the gate');
ok(!-e "$STATE.tmp" && !-l "$STATE.tmp", 'planted tmp: no tmp left');

is(gate_post({ action => 'open' })->{status}, 200, 'opened');

# a state file that is another user's: refused closed at start

$t->stop_nginx();

like(slurp($STATE) // '', qr/^gate open /m, 'stop: file written, gate open');
chown $OTHER, -1, $STATE or die "cannot chown $STATE: $!\n";

$t->run();

my $g = gate();
is(join(' ', $g->{state}, $g->{reason} // ''), 'closed state file '
	. "unreadable: owned by uid $OTHER, not by root or nginx's user "
	. "(uid $NOBODY)", 'another user\'s file: gate closed, reason');
is(scalar $t->log_lines('error.log', qr/\[error\] .*state file "\Q$STATE\E" /
	. qr/is unreadable \(owned by uid $OTHER, /), 1,
	'another user\'s file: logged');

# while nginx runs: the same file, given to another user, put in place;
# the first worker process's look at the file (every 200 ms) refuses it

is(gate_post({ action => 'open' })->{status}, 200, 'opened again');

spew("$d/copy.state", slurp($STATE));
chown $OTHER, -1, "$d/copy.state" or die "cannot chown: $!\n";
rename "$d/copy.state", $STATE or die "cannot rename: $!\n";

ok($t->wait_for(sub { gate()->{state} eq 'closed' }, 5),
	'another user\'s file while running: gate closed');
like(gate()->{reason} // '', qr/^state file unreadable: owned by uid $OTHER,/,
	'another user\'s file while running: reason');

# a state file that is a link to a file that checks out: refused closed

is(gate_post({ action => 'open' })->{status}, 200, 'opened once more');

$t->stop_nginx();

rename $STATE, "$d/real.state" or die "cannot rename $STATE: $!\n";
symlink "$d/real.state", $STATE or die "cannot symlink: $!\n";

$t->run();

is(gate()->{reason}, 'state file unreadable: a symbolic link',
	'a link: gate closed, reason');

$t->stop_nginx();

###############################################################################

# password_file naming a FIFO: refused at once, not waited on

mkfifo("$d/fifo", 0600) or die "cannot mkfifo $d/fifo: $!\n";

# nginx -t in a child process, which a hung open() would keep waiting

my $pid = fork() // die "cannot fork: $!\n";

if ($pid == 0) {
	($rc, $out) = $t->nginx_t(nginx_conf("state=$d/ok/rl.state",
		'dynamo_rl_store redis://127.0.0.1:8379'
		. " user=rl password_file=$d/fifo;"));
	$t->write_file('fifo.out', "$rc\n$out");
	POSIX::_exit(0);
}

my $done = $t->wait_for(sub { waitpid($pid, WNOHANG) == $pid }, 10);

unless ($done) {
	# a writer that closes at once gives the hung reader its EOF

	close $_ for grep { sysopen($_, "$d/fifo", O_WRONLY | O_NONBLOCK) }
		my $fh;
	waitpid($pid, 0);
}

($rc, $out) = split /\n/, $t->read_file('fifo.out'), 2;

ok($done, 'password_file FIFO: nginx -t does not wait on it');
is($rc, 1, 'password_file FIFO: nginx -t fails') or diag($out);
like($out, qr/\[emerg\] password_file "\Q$d\/fifo\E" is not a file of at most 4096 bytes/,
	'password_file FIFO: message') or diag($out);

###############################################################################

# a full disk (a tmpfs of 64k, filled): a gate change that cannot be
# written is made all the same and said so, the file written before stays
# whole, no temporary file is left, and once there is room again a change
# is written and survives a restart

my $FULL = "$d/full";
mkdir $FULL or die "cannot mkdir $FULL: $!\n";

SKIP: {
	system('mount', '-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs',
		$FULL) == 0 or skip 'cannot mount a tmpfs here', 10;
	$MOUNTED = $FULL;

	chown $NOBODY, -1, $FULL or die "cannot chown $FULL: $!\n";

	my $file = "$FULL/rl.state";

	$t->write_file_expand('nginx.conf', nginx_conf("state=$file"));
	$t->run();

	is(gate_post({ action => 'close', reason => 'before full' })->{status},
		200, 'full disk: closed while there is room');

	# the rest of the room taken; tmpfs counts whole pages

	system("dd if=/dev/zero of=$FULL/filler bs=4k 2>/dev/null");
	my $before = slurp($file);
	my $eoff = -s "$d/error.log";

	$r = gate_post({ action => 'open' });
	is(join(' ', $r->{status}, $r->{json}{error} // ''),
		'500 state_unwritable', 'full disk: 500 state_unwritable');
	is(gate()->{state}, 'open', 'full disk: opened in the zone');
	my $enospc = qr/\[crit\] .*write\(\) of "\Q$file\E\.tmp" failed, /
		. qr/state of dynamo_rl zone "rl" not written \(28: No space /
		. qr/left on device\)/;
	like(join('', Test::DynamoRL::Fixture::err_since($t, $eoff)),
		qr/$enospc/, 'full disk: a crit line with ENOSPC');
	is(slurp($file), $before, 'full disk: the file written before whole');
	ok(!-e "$file.tmp", 'full disk: no temporary file left');

	unlink "$FULL/filler" or die "cannot unlink $FULL/filler: $!\n";

	$r = gate_post({ action => 'close', reason => 'room again' });
	is($r->{status}, 200, 'room again: written');

	$t->stop_nginx();
	$t->run();

	$g = gate();
	is(join(' ', $g->{state}, $g->{reason} // ''), 'closed room again',
		'room again: the gate after a restart');
	is(scalar(grep { /exited on signal|\[alert\]/ }
		Test::DynamoRL::Fixture::err_since($t, 0)), 0,
		'full disk: no crash');

	$t->stop_nginx();

	is(system('umount', $FULL), 0, 'full disk: unmounted');
	undef $MOUNTED;
}

###############################################################################

sub nginx_conf {
	my ($state, $extra) = @_;

	$extra //= '';

	return rl_conf(<<"EOF");

%%TEST_GLOBALS%%

events {
}

http {
    %%RL_HTTP 1m $state%%
    $extra

    server {
        %%RL_LISTEN 8070%%

        %%RL_APIS gate%%
    }
}

EOF
}

sub gate {
	return http_json('/rl/gate', PeerAddr => '127.0.0.1:' . port(8070))
		->{json} // {};
}

sub gate_post {
	my ($data) = @_;
	return http_json('/rl/gate', json => $data,
		PeerAddr => '127.0.0.1:' . port(8070));
}

sub spew {
	my ($path, $content) = @_;
	open my $fh, '>', $path or die "cannot write $path: $!\n";
	print $fh $content;
	close $fh;
	return 1;
}

###############################################################################
