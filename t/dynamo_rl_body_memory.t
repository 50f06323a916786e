#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the body policy with bodies that nginx reads into memory but
# that do not fit in the buffer of the request's header: the part that
# came with the header and the rest end up in one buffer, which the
# scanner reads in place.  Bodies with the header, after it, in several
# writes, with proxy_request_buffering on and off; a request pipelined
# after such a body on a keepalive connection.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL qw/ http /;
use Test::DynamoRL::Fixture qw/ attempt read_until record_with rl_test /;

###############################################################################

my $t = rl_test(120, 16, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    client_max_body_size 4m;
    client_body_buffer_size 512k;

    server {
        %%RL_LISTEN 8080%%

        dynamo_rl_metadata_upload s3://bucket/rl/;

        %%RL_REQUEST_PLANE keepalive%%
    }

    # proxy_request_buffering off

    server {
        %%RL_LISTEN 8084%%

        %%RL_REQUEST_PLANE sse%%
    }
}

EOF

$t->run_fake_dynamo();
$t->run();

###############################################################################

my ($r, $rec, $s, @status);

my $BODY = '{"model":"m","prompt":[' . join(',', map { $_ * 7919 % 151936 }
	1 .. 30000) . '],"max_tokens":1}';
ok(length $BODY > 150_000 && length $BODY < 512 * 1024,
	'a body of memory size');

(my $PINNED = $BODY) =~ s/"max_tokens":1/"max_tokens":1,"nvext":{"dp_rank":3}/;
(my $STRIPPED = $BODY) =~ s/"max_tokens":1/"max_tokens":1,"nvext":{}/;
(my $DENIED = $BODY)
	=~ s/"max_tokens":1/"max_tokens":1,"nvext":{"metadata_upload":{"url":"s3:\/\/x"}}/;
(my $BAD = $BODY) =~ s/,(\d+)\]/,0$1]/;

is(attempt('mem-1', $BODY)->{status}, 200, 'forwarded');
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-1');
ok($rec && $rec->{body} eq $BODY, 'byte-identical');

attempt('mem-pins', $PINNED);
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-pins');
ok($rec && $rec->{body} eq $STRIPPED, 'pins removed');

is(attempt('mem-denied', $DENIED)->{status}, 403, 'denied at the end');
is(attempt('mem-bad', $BAD)->{status}, 400,
	'a leading zero at the end: 400');

# the body after the header, in several writes

$s = http("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
	. "Connection: close\r\nContent-Type: application/json\r\n"
	. "X-Dynamo-Attempt-Id: mem-split\r\n"
	. 'Content-Length: ' . length($PINNED) . "\r\n\r\n"
	. substr($PINNED, 0, 700), start => 1);
select undef, undef, undef, 0.2;
print $s substr($PINNED, 700, 60000);
select undef, undef, undef, 0.2;
print $s substr($PINNED, 60700);
$r = read_until($s, qr/\r\n\r\n.*\}/s, 10);
like($r, qr{^HTTP/1.1 200}, 'several writes: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-split');
ok($rec && $rec->{body} eq $STRIPPED, 'several writes: pins removed');

# proxy_request_buffering off

is(attempt('mem-nobuf', $PINNED, port => 8084)->{status}, 200,
	'unbuffered: 200');
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-nobuf');
ok($rec && $rec->{body} eq $STRIPPED, 'unbuffered: pins removed');

is(attempt('mem-nobuf-denied', $DENIED, port => 8084)->{status}, 403,
	'unbuffered: denied');

# a request pipelined after the body on a keepalive connection

my $ka = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
	. "Content-Type: application/json\r\nX-Dynamo-Attempt-Id: mem-ka-1\r\n"
	. 'Content-Length: ' . length($BODY) . "\r\n\r\n" . $BODY
	. "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
	. "Connection: close\r\nContent-Type: application/json\r\n"
	. "X-Dynamo-Attempt-Id: mem-ka-2\r\n"
	. "Content-Length: 14\r\n\r\n" . '{"prompt":"x"}';

$r = http($ka);
@status = ($r // '') =~ m{HTTP/1.1 (\d+) }g;
is("@status", '200 200', 'pipelined: both answered');
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-ka-1');
ok($rec && $rec->{body} eq $BODY, 'pipelined: the first body');
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-ka-2');
ok($rec && $rec->{body} eq '{"prompt":"x"}', 'pipelined: the second body');

# the same with the second request sent once the first is answered

my ($first, $second) = $ka =~ /\A(.*?"max_tokens":1\})(.*)\z/s;
$second =~ s/mem-ka-2/mem-kb-2/;
$first =~ s/mem-ka-1/mem-kb-1/;

$s = http($first, start => 1);
$r = read_until($s, qr/\r\n\r\n.*\}/s, 10);
print $s $second;
$r .= read_until($s, qr/(HTTP\/1.1 .*){2}.*\}\z/s, 10);
@status = ($r // '') =~ m{HTTP/1.1 (\d+) }g;
is("@status", '200 200', 'keepalive: both answered');
$rec = record_with($t, 'x-dynamo-attempt-id', 'mem-kb-2');
ok($rec && $rec->{body} eq '{"prompt":"x"}', 'keepalive: the second body');

###############################################################################
