#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: the store's words in the error log.  The claim path escapes
# them ("the store's text is not trusted for the log"), and the reference
# says bytes outside printable ASCII are written as \xNN; but an error
# reply to the client's own commands (a sentinel's answer to SENTINEL
# get-master-addr-by-name, AUTH, SELECT, SCRIPT LOAD) goes into the error
# line as it is.  A RESP error line may hold a bare LF: a hostile or
# spoofed sentinel (sentinel:// is plain TCP) writes whole forged lines
# into nginx's error log, here an [alert] that monitoring would act on.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ time_limit fork_server /;
use Test::DynamoRL::Redis qw/ replica_conf gen resp_parse /;

###############################################################################

time_limit(Test::DynamoRL::scale(60));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(3);

my $FORGED = '2026/01/01 00:00:00 [alert] 1#1: forged by the sentinel';

# a sentinel that answers every SENTINEL command with an error whose text
# holds a line feed and a line of nginx's error log format

$t->run_daemon(\&fork_server, port(8479), 'sentinel', sub {
	my ($c) = @_;

	my $buf = '';
	my $sel = IO::Select->new($c);

	while ($sel->can_read(5)) {
		sysread($c, $buf, 65536, length $buf) or last;

		while (my ($v) = resp_parse(\$buf)) {
			my $cmd = uc(ref $v eq 'ARRAY' ? $v->[0] // '' : '');

			syswrite($c, $cmd eq 'SENTINEL'
				? "-ERR no such master\n$FORGED\r\n" : "+OK\r\n");
		}
	}
});

$t->allow_log(qr/forged by the sentinel/);

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => 'sentinel://127.0.0.1:' . port(8479) . '/rl',
	params => 'timeout=250ms'));

$t->run_fake_dynamo()->run();

###############################################################################

my $rep = { listen => 8080, api => 8070 };

$t->wait_for(sub {
	$t->log_lines('error.log', qr/dynamo rl store: .*SENTINEL/)
}, 10);

is(gen($rep, 'forge-1')->{status}, 503, 'no primary: 503');

my @forged = $t->log_lines('error.log', qr/^\Q$FORGED\E/);

is(scalar @forged, 0, 'no line of the error log is the sentinel\'s');

ok($t->log_lines('error.log', qr/\[error\].*SENTINEL
	\ get-master-addr-by-name:\ ERR\ no\ such\ master\\x0a2026/x),
	'the sentinel\'s words kept in the line, the LF as \\x0a');

###############################################################################
