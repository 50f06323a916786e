#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the request plane's filter pair on top of the module's filter
# chain (ngx_http_dynamo_rl_plane_header_filter): the path a response
# took, read from the debug log.  The module of "make build" takes the
# pair's shortcut and logs nothing of it; build/nofast ("make
# test-filters", which sets TEST_NGINX_NOFAST=1) passes every such
# response to the chain and says so, once for its header and at least
# once for its body, so that the request plane's tests run against it
# cannot silently take the shortcut again.  The responses themselves (a
# plain one, SSE, nginx's own 502) and their ledger records are the same
# on both paths; other planes never reach the pair's shortcut.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call flat json rl_test /;

###############################################################################

my $t = rl_test(60, 26, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 5m%%

    %%RL_UPSTREAMS 8%%

    server {
        %%RL_LISTEN 8080%%

        %%RL_REQUEST_PLANE keepalive unbuffered%%

        # nothing listens there

        location /down/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8072/v1/;
        }

        %%RL_NOT_FOUND%%
    }

    server {
        %%RL_LISTEN 8070%%

        %%RL_DISCOVERY_PLANE%%
        %%RL_APIS attempts%%
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $NOFAST = $ENV{TEST_NGINX_NOFAST} ? 1 : 0;
my $PATH = $NOFAST ? 'the chain' : 'the fast pair';

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my $r;

$r = attempt('filters-plain', '/v1/completions', $BODY);
is($r->{status}, 200, 'plain: status');
is($r->{headers}{'x-dynamo-attempt-id'}, 'filters-plain', 'plain: id echoed');
is(json($r)->{object}, 'text_completion', 'plain: upstream body');

$r = attempt('filters-sse', '/v1/chat/completions', $CHAT);
is($r->{status}, 200, 'sse: status');
like($r->{body}, qr/^data: \[DONE\]$/m, 'sse: the stream to its end');

$r = attempt('filters-502', '/down/completions', $BODY);
is($r->{status}, 502, '502: status');
is($r->{headers}{'x-dynamo-attempt-id'}, 'filters-502', '502: id echoed');
ok(flat($r, 502, 'Bad Gateway'), '502: flat body') or diag($r->{body});

$r = call('GET', '/v1/rl/workers', port => 8070);
is($r->{status}, 200, 'discovery: status');
is(scalar @{json($r)->{workers} // []}, 3, 'discovery: the document')
	or diag($r->{body});

# the ledger's records, which the ledger's filters settle

record('filters-plain', 'succeeded', 200, 0);
record('filters-sse', 'succeeded', 200, 1);
record('filters-502', 'failed', 502, 0);

$t->stop();

# the path each response took, by the connection its debug lines name

my %conn = map { /\*(\d+) dynamo rl request: attempt "([^"]+)"/
	? ($2, $1) : () }
	$t->log_lines('error.log', qr/\[debug\] .* dynamo rl request: attempt/);

for my $id (qw/ filters-plain filters-sse filters-502 /) {
	my $c = $conn{$id};

	ok($c, "$id: its debug lines in the log");

	is(markers($t, $c, 'header'), $NOFAST, "$id: header through $PATH");

	if ($NOFAST) {
		ok(markers($t, $c, 'body') >= 1, "$id: body through $PATH");

	} else {
		is(markers($t, $c, 'body'), 0, "$id: body through $PATH");
	}
}

is(markers($t, undef, 'header'), 3 * $NOFAST,
	'no other response reached the shortcut');

###############################################################################

sub attempt {
	my ($id, $uri, $body) = @_;

	return call('POST', $uri, body => $body,
		headers => [ 'X-Dynamo-Attempt-Id' => $id ]);
}

# the record is written in the log phase, after the client has its answer

sub record {
	my ($id, $state, $status, $stream) = @_;

	my $a = {};

	Test::DynamoRL::wait_for(sub {
		$a = api($id)->{json};
		return ($a->{state} // '') eq $state;
	}, 5);

	is(join(' ', map { $_ // '-' } @$a{qw/ state status /}),
		"$state $status", "$id: ledger record");
	is($a->{stream} ? 1 : 0, $stream, "$id: ledger stream");
}

sub markers {
	my ($t, $c, $part) = @_;

	my $re = defined $c
		? qr/\*$c dynamo rl filter: request plane $part to the chain/
		: qr/ dynamo rl filter: request plane $part to the chain/;

	return scalar $t->log_lines('error.log', $re);
}

###############################################################################
