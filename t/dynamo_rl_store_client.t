#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the store client on its own: "nginx -t" on every bad
# parameter of dynamo_rl_store (each exact message, the tls_* ones,
# password_file errors), then a real redis-server on a free loopback port,
# started and stopped here by its PID, with a password: each worker
# process connects and authenticates (one notice each, with the address),
# warns about a maxmemory-policy that may evict, logs one error when the
# store goes away however often it retries, and connects again when the
# store comes back on the same port, without a reload.  A reload to a
# unix socket with a wrong password: the connection is made and AUTH is
# refused, logged once per worker process.

###############################################################################

use warnings;
use strict;

use Test::More;

use POSIX qw/ WNOHANG /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ output time_limit /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

time_limit(120);

my $REDIS = '/usr/bin/redis-server';

plan(skip_all => "no $REDIS (apt-get install redis-server)") unless -x $REDIS;

my $t = Test::DynamoRL->new()->has(qw/http/)->plan(84 + 4 + 8 + 4);

my $d = $t->testdir();
my $conf = "$d/nginx-t.conf";

$t->write_file('password', "s3cret-pass\n");
$t->write_file('wrong', "not-the-password\n");
$t->write_file('empty', "\n\n");

###############################################################################

# valid configurations

for my $store (
	'redis://127.0.0.1:8379',
	'redis://127.0.0.1:8379/3 prefix=dynamo-rl:prod timeout=100ms'
		. ' on_error=local replica=gw-0.a_b lease=10m gate_poll=100ms'
		. ' gate_stale=1s heartbeat=200ms',
	'redis://localhost/ user=dynamo-rl password_file=password',
	'unix:/run/redis.sock?db=2 on_error=fail',
	'REDIS://127.0.0.1',
	'rediss://localhost:6380/1 tls_verify=off',
	'rediss://127.0.0.1 tls_name=redis.test',
	'redis://127.0.0.1 wait=1 lease=4s')
{
	my ($code, $out) = $t->nginx_t(config($store));

	is($code, 0, "valid: $store") or diag($out);
	unlike($out, qr/\[(?:emerg|alert|warn)\]/, "valid: $store: no messages");
}

# the URL

emerg('tls without rediss', 'redis://127.0.0.1 tls_verify=off',
	'"tls_verify=off" requires a "rediss://" store URL');
emerg('tls parameter', 'rediss://127.0.0.1 tls_ciphers=ALL',
	'invalid parameter "tls_ciphers=ALL"');
emerg('tls_verify', 'rediss://127.0.0.1 tls_verify=maybe',
	'invalid tls_verify "maybe", it must be "on" or "off"');
emerg('tls duplicate', 'rediss://127.0.0.1 tls_name=a tls_name=b',
	'duplicate parameter "tls_name=b"');
emerg('tls_certificate alone', 'rediss://127.0.0.1 tls_certificate=c.crt',
	'"tls_certificate" and "tls_certificate_key" go together');
emerg('scheme', 'http://127.0.0.1:6379',
	'invalid store URL "http://127.0.0.1:6379", it must begin with'
	. ' "redis://", "rediss://" or "unix:"');
emerg('credentials', 'redis://u:p@127.0.0.1',
	'credentials in the store URL "redis://u:p@127.0.0.1" are not'
	. ' supported: use "user=" and "password_file="');
emerg('database', 'redis://127.0.0.1/x',
	'invalid database in the store URL "redis://127.0.0.1/x"');
emerg('large database', 'redis://127.0.0.1/10000',
	'invalid database in the store URL "redis://127.0.0.1/10000"');
emerg('unix database', 'unix:/run/r.sock?db=',
	'invalid database in the store URL "unix:/run/r.sock?db=",'
	. ' it must be "?db=N"');
emerg('no host', 'redis:///0', 'no host in the store URL "redis:///0"');
emerg('bad port', 'redis://127.0.0.1:99999',
	'invalid port in the store URL "redis://127.0.0.1:99999"');

# the parameters

emerg('unknown parameter', 'redis://127.0.0.1 pool=4',
	'invalid parameter "pool=4"');
emerg('duplicate parameter', 'redis://127.0.0.1 prefix=a prefix=b',
	'duplicate parameter "prefix=b"');
emerg('prefix with a brace', 'redis://127.0.0.1 "prefix=a{b}"',
	'invalid prefix "a{b}": 1 to 64 bytes, without "{", "}" or spaces');
emerg('prefix with a space', 'redis://127.0.0.1 "prefix=a b"',
	'invalid prefix "a b": 1 to 64 bytes, without "{", "}" or spaces');
emerg('empty prefix', 'redis://127.0.0.1 prefix=',
	'invalid prefix "": 1 to 64 bytes, without "{", "}" or spaces');
emerg('timeout', 'redis://127.0.0.1 timeout=fast', 'invalid timeout "fast"');
emerg('zero timeout', 'redis://127.0.0.1 timeout=0', 'invalid timeout "0"');
emerg('lease', 'redis://127.0.0.1 lease=8d', 'invalid lease "8d"');
emerg('gate_poll', 'redis://127.0.0.1 gate_poll=-1',
	'invalid gate_poll "-1"');
emerg('heartbeat', 'redis://127.0.0.1 heartbeat=1x',
	'invalid heartbeat "1x"');
emerg('gate_stale', 'redis://127.0.0.1 gate_poll=1s gate_stale=1s',
	'gate_stale must be longer than gate_poll');
emerg('wait with a short lease', 'redis://127.0.0.1 wait=1 lease=3999ms',
	'with "wait", lease must be at least 8 * timeout + 4 * heartbeat');
emerg('on_error', 'redis://127.0.0.1 on_error=open',
	'invalid on_error "open", it must be "fail" or "local"');
emerg('replica', 'redis://127.0.0.1 replica=a/b',
	'invalid replica name "a/b": 1 to 63 of [A-Za-z0-9._-]');
emerg('long replica', 'redis://127.0.0.1 replica=' . ('r' x 64),
	'invalid replica name "' . ('r' x 64) . '": 1 to 63 of [A-Za-z0-9._-]');
emerg('user without password', 'redis://127.0.0.1 user=rl',
	'"user" requires "password_file"');
emerg('password_file missing', 'redis://127.0.0.1 password_file=nope',
	qq{cannot read password_file "$d/nope" (2: No such file or directory)});
emerg('password_file empty', 'redis://127.0.0.1 password_file=empty',
	qq{password_file "$d/empty" is empty});
emerg('password_file a directory', "redis://127.0.0.1 password_file=$d",
	qq{password_file "$d" is not a file of at most 4096 bytes});

# the directive

expect_emerg('duplicate', config('redis://127.0.0.1;'
	. ' dynamo_rl_store redis://127.0.0.1'),
	'"dynamo_rl_store" directive is duplicate');
expect_emerg('in server', config('redis://127.0.0.1', 'server'),
	'"dynamo_rl_store" directive is not allowed here');
expect_emerg('no URL', config(''),
	'invalid number of arguments in "dynamo_rl_store" directive');

# the password never reaches a log

my ($code, $out) = $t->nginx_t(config('redis://127.0.0.1 user=rl'
	. ' password_file=password timeout=fast'));
unlike($out, qr/s3cret/, 'the password is not in a message');

###############################################################################

# a running store: each worker process connects

my $redis = start_redis();

$t->write_file_expand('nginx.conf', two_workers('redis://127.0.0.1:8379'
	. ' replica=gw-A timeout=200ms user=default password_file=password'));

$t->run();

my $port = port(8379);
my $url = "redis://127.0.0.1:$port";

my $connected = qr/\[notice\] .* dynamo rl store: connected to "\Q$url\E"/
	. qr/ \(127\.0\.0\.1:$port\) as replica "gw-A"/;

ok(lines($connected, 2), 'each worker process connected');
is(scalar lines(qr/\[(?:error|warn)\] .*dynamo rl store/), 2,
	'no error before the connection, one warning each');

ok(lines(qr/\[warn\] .* dynamo rl store: maxmemory-policy of "\Q$url\E"/
	. qr/ is "allkeys-lru", not "noeviction": the store may evict/, 2),
	'maxmemory-policy allkeys-lru: one warning each');

ok(Test::DynamoRL::wait_for(sub { clients() == 3 }), 'the store sees both connections')
	or diag('clients: ' . clients());

my @names = grep { /name=|addr=/ } split /\n/, cli('CLIENT', 'LIST');
is(scalar(grep { /cmd=(?:script|config|eval|auth)/ } @names), 2,
	'their last commands were the handshake\'s');

# the store goes away: one error line per worker process, not one per
# retry (100 ms, doubling: the retries of 1.5 s are watched)

stop_redis($redis);

ok(lines(qr/\[error\] .* dynamo rl store: lost "\Q$url\E"/
	. qr/ \(127\.0\.0\.1:$port\): the store closed the connection/, 2),
	'one error each when the store goes away');

select(undef, undef, undef, 1.5);

is(scalar lines(qr/\[error\] .*dynamo rl store/), 2,
	'no error line per retry');
is(scalar lines(qr/\[(?:crit|alert)\]/), 0, 'nothing above error');

# it comes back on the same port: connected again, no reload

$redis = start_redis();

ok(lines($connected, 4), 'both connected again');
ok(Test::DynamoRL::wait_for(sub { clients() == 3 }), 'the store sees both again');

# a reload to a unix socket and a wrong password: AUTH is refused, once
# per new worker process; the old ones go (a long timeout: a new worker
# under valgrind takes a while to read its first reply)

my $sock = "$d/redis.sock";

ok(Test::DynamoRL::wait_for(sub { -S $sock }), 'the unix socket of the store');

$t->write_file_expand('nginx.conf',
	two_workers("unix:$sock?db=1 password_file=wrong timeout=5s"));

$t->reload();

my $refused = qr/\[error\] .* dynamo rl store: "unix:\Q$sock?db=1\E"/
	. qr/ \(unix:\Q$sock\E\) is unavailable: AUTH: WRONGPASS /;

ok(lines($refused, 2), 'AUTH refused: one error each');
ok(Test::DynamoRL::wait_for(sub { clients() == 1 }), 'the old workers closed theirs');

select(undef, undef, undef, 1);

is(scalar lines($refused), 2, 'not one per retry');
unlike($t->read_file('error.log'), qr/not-the-password|s3cret/,
	'no password in the log');

$t->stop();

stop_redis($redis);

###############################################################################

# two worker processes with the store of "dynamo_rl_store $store", and a
# server that answers 204

sub two_workers {
	my ($store) = @_;

	return <<"EOF";

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    dynamo_rl_zone zone=rl:1m state=%%TESTDIR%%/state/rl.state;
    dynamo_rl_store $store;

    server {
        listen 127.0.0.1:8080;

        location / {
            return 204;
        }
    }
}

EOF
}

sub config {
	my ($store, $where) = @_;

	$where //= 'http';

	my $line = length $store ? "dynamo_rl_store $store;" : 'dynamo_rl_store;';

	return <<"EOF";

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%% dynamo_rl_zone zone=rl:1m state=%%TESTDIR%%/state/rl.state;
    @{[ $where eq 'http' ? $line : '' ]}
    server {
        listen 127.0.0.1:8080;
        @{[ $where eq 'server' ? $line : '' ]}
        location / {
            return 204;
        }
    }
}

EOF
}

sub emerg {
	my ($name, $store, $message) = @_;
	expect_emerg($name, config($store), $message);
}

sub expect_emerg {
	my ($name, $text, $message) = @_;

	my ($line) = grep { (split /\n/, $text, -1)[$_ - 1] =~ /dynamo_rl_store/ }
		1 .. scalar(split /\n/, $text, -1);

	my ($c, $o) = $t->nginx_t($text);

	is($c, 1, "$name: nginx -t fails");
	like($o, qr/^nginx: \[emerg\] \Q$message\E in \Q$conf\E:$line$/m,
		"$name: message") or diag($o);
}

# lines of error.log; with $n, waits until there are at least $n

sub lines {
	my ($re, $n) = @_;

	return $t->log_lines('error.log', $re) unless defined $n;

	return Test::DynamoRL::wait_for(sub {
		my @l = $t->log_lines('error.log', $re);
		return @l >= $n ? scalar @l : 0;
	});
}

sub start_redis {
	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDOUT, '>>', "$d/redis.log";
		open STDERR, '>&', \*STDOUT;

		{
			exec $REDIS, '--port', port(8379), '--bind', '127.0.0.1',
				'--unixsocket', "$d/redis.sock",
				'--unixsocketperm', '777', '--save', '',
				'--appendonly', 'no', '--dir', $d,
				'--maxmemory-policy', 'allkeys-lru',
				'--requirepass', 's3cret-pass';
		}

		POSIX::_exit(127);
	}

	Test::DynamoRL::wait_for(sub { cli('PING') eq 'PONG' })
		or die "redis-server did not start:\n"
			. ($t->read_file('redis.log') // '');

	return $pid;
}

sub stop_redis {
	my ($pid) = @_;

	kill 'TERM', $pid;

	Test::DynamoRL::wait_for(sub { waitpid($pid, WNOHANG) == $pid })
		or kill 'KILL', $pid;
}

sub cli {
	my @args = @_;

	return output('redis-cli', '-h', '127.0.0.1', '-p', port(8379),
		'--no-auth-warning', '-a', 's3cret-pass', @args);
}

sub clients {
	my ($n) = cli('INFO', 'clients') =~ /connected_clients:(\d+)/;
	return $n // -1;
}

###############################################################################
