#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the test harness itself, t/lib/Test/DynamoRL.pm: run, http
# helpers, parse_response, reload, worker_pids, nginx_t, wait_for and the
# checks done on DESTROY, and what counts as a sanitizer report.  Plain
# nginx, without our module.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;

use lib 't/lib';
use Test::DynamoRL;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

$ENV{TEST_NGINX_NO_MODULE} = 1;

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(35);

$t->write_file_expand('nginx.conf', nginx_conf('one'));
$t->write_file('static.txt', "static file\n");

$t->run_daemon(\&http_daemon, port(8081));
ok($t->waitforsocket('127.0.0.1:' . port(8081)), 'daemon listens');

$t->run();

###############################################################################

my $r = parse_response(http_get('/'));
is($r->{status}, 200, 'get status');
is($r->{body}, 'one', 'get body');
is($r->{headers}{'content-type'}, 'text/plain', 'header lowercased');
is_deeply($r->{headers}{'x-multi'}, [ 'a', 'b' ], 'repeated header');

$r = parse_response(http_head('/'));
is($r->{status}, 200, 'head status');
is($r->{body}, '', 'head without body');

$r = parse_response(http_get('/static.txt'));
is($r->{body}, "static file\n", 'testdir expanded');

$r = parse_response(http_get('/chunked'));
is($r->{headers}{'transfer-encoding'}, 'chunked', 'chunked from nginx');
is($r->{body}, 'hello, chunked world', 'chunked body decoded');

$r = parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
	. "\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-Trailer: 1\r\n\r\n");
is($r->{body}, 'hello!', 'chunk extension and trailer');
ok(!$r->{incomplete}, 'complete chunked body');

$r = parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
	. "\r\n5\r\nhel");
ok($r->{incomplete}, 'truncated chunked body');

$r = parse_response(http_post('/echo', '{"a":1}',
	headers => "X-Test: yes\r\n"));
is($r->{body}, 'POST {"a":1} yes', 'post through proxy');

my $s = http("GET /echo HTTP/1.1\r\nHost: localhost\r\n"
	. "Connection: close\r\n\r\n", start => 1);
like(http_end($s), qr/\r\n\r\nGET  $/, 'start and http_end');

# ports

is(port(8080), port(8080), 'port stable');
isnt(port(8080), port(8081), 'ports distinct');

# reload picks up the new configuration; worker_pids() follows it, by
# the parent pid and error.log, as it must under valgrind

my @before = $t->worker_pids();
is(scalar @before, 1, 'worker_pids: one worker process');
is(scalar $t->worker_pids(), 1, 'worker_pids: their number as a scalar');

$t->write_file_expand('nginx.conf', nginx_conf('two'));
$t->reload();
ok(!$t->reload_failed(), 'reload succeeded');
is(parse_response(http_get('/'))->{body}, 'two', 'reloaded');
ok(scalar $t->log_lines('error.log', qr/\breconfiguring$/), 'log_lines');

my @after = $t->worker_pids();
ok(@after == 1 && $after[0] != $before[0],
	'worker_pids: the new worker process only');

# nginx -t on a broken configuration

my ($code, $out) = $t->nginx_t(<<'EOF');

%%TEST_GLOBALS%%

events {
}

foo bar;

EOF

my $conf = $t->testdir() . '/nginx-t.conf';

is($code, 1, 'nginx -t exit code');
like($out, qr/^nginx: \[emerg\] unknown directive "foo" in \Q$conf\E:7$/m,
	'nginx -t message');

# fake_dynamo state files, without the daemon: 64-bit ids stay exact

$t->fake_set('frontend.log', qq({"id":18446744073709551615,"n":1}\n)
	. qq({"id":2}\n));
my $records = $t->fake_records('frontend');
is(scalar @$records, 2, 'fake_records count');
is("$records->[0]{id}", '18446744073709551615', 'fake_records bignum');

# a record the fake is still writing, its line without the newline yet

$t->fake_set('frontend.log', qq({"id":1}\n{"id":2,"bo));
is(scalar @{$t->fake_records('frontend')}, 1,
	'fake_records: a line being written is left for later');

$t->fake_unset('frontend.log');
is_deeply($t->fake_records('frontend'), [], 'fake_unset');
ok(!-e $t->fake_dir() . '/frontend.log.tmp.' . $$, 'fake_set atomic');

# sanitizer reports: a deliberate signal too is a report; LeakSanitizer's
# reports of nginx's own start-up allocations are not, those with a frame
# in request processing or the module are

my $asan = "==7==ERROR: AddressSanitizer: SEGV on unknown address\n";

is(scalar Test::DynamoRL::_sanitizer_lines(
	"AddressSanitizer:DEADLYSIGNAL\n$asan"), 2, 'sanitizer: DEADLYSIGNAL');

my $leak = "==7==ERROR: LeakSanitizer: detected memory leaks\n\n"
	. "Direct leak of 8 byte(s) in 1 object(s) allocated from:\n"
	. "    #0 0x1 in malloc\n    #1 0x2 in ngx_alloc\n%s"
	. "\nSUMMARY: AddressSanitizer: 8 byte(s) leaked in 1 allocation(s).\n";

is(scalar Test::DynamoRL::_sanitizer_lines(sprintf($leak,
	"    #2 0x3 in ngx_worker_process_init\n")), 0,
	'sanitizer: nginx\'s own start-up leak set apart');
is(scalar Test::DynamoRL::_sanitizer_lines(sprintf($leak,
	"    #2 0x3 in ngx_http_dynamo_rl_index (x.so+0x4)\n")), 2,
	'sanitizer: a leak in the module');

# wait_for

my $n = 0;
is($t->wait_for(sub { ++$n >= 3 ? "done $n" : undef }, 5, 0.01),
	'done 3', 'wait_for value');
is(Test::DynamoRL::wait_for(sub { 0 }, 0.2), undef, 'wait_for timeout');

###############################################################################

sub nginx_conf {
	my ($text) = @_;

	return <<"EOF";

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = / {
            default_type text/plain;
            add_header X-Multi a;
            add_header X-Multi b;
            return 200 "$text";
        }

        location /static.txt {
            root %%TESTDIR%%;
        }

        location / {
            proxy_pass http://127.0.0.1:8081;
            proxy_http_version 1.1;
        }
    }
}

EOF
}

# a one-request-at-a-time HTTP/1.1 backend: /chunked answers in chunks,
# anything else echoes the method, the body and the X-Test header

sub http_daemon {
	my ($port) = @_;

	my $server = IO::Socket::INET->new(
		Proto => 'tcp',
		LocalAddr => "127.0.0.1:$port",
		Listen => 5,
		ReuseAddr => 1,
	) or die "cannot listen on $port: $!\n";

	local $SIG{PIPE} = 'IGNORE';

	while (my $client = $server->accept()) {
		$client->autoflush(1);

		my $head = '';

		while (<$client>) {
			$head .= $_;
			last if /^\x0d?\x0a?$/;
		}

		my ($method, $uri) = $head =~ /^(\S+) (\S+)/;
		my ($len) = $head =~ /^Content-Length: (\d+)/mi;
		my ($test) = $head =~ /^X-Test: (\S*)/mi;

		my $body = '';
		read($client, $body, $len) if $len;

		if (($uri // '') eq '/chunked') {
			print $client "HTTP/1.1 200 OK\r\n"
				. "Transfer-Encoding: chunked\r\n"
				. "Connection: close\r\n\r\n";

			for my $part ('hello', ', ', 'chunked world') {
				printf $client "%x\r\n%s\r\n", length($part), $part;
			}

			print $client "0\r\n\r\n";

		} else {
			my $reply = join ' ', $method // '', $body, $test // '';

			print $client "HTTP/1.1 200 OK\r\n"
				. 'Content-Length: ' . length($reply) . "\r\n"
				. "Connection: close\r\n\r\n$reply";
		}

		close $client;
	}
}

###############################################################################
