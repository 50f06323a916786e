#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for Dynamo's own request id on the request plane: every attempt
# sends a UUID upstream as "request-id" (the attempt id when it is one,
# else a UUIDv7 minted for the attempt and shown as "request_id" by the
# attempts API); a client's request-id and x-dynamo-request-id never reach
# Dynamo; a client's x-request-id is kept as x-client-request-id when the
# attempt id goes upstream as x-request-id.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ record_with rl_test /;

###############################################################################

my $t = rl_test(120, 33, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    server {
        %%RL_LISTEN 8080%%

        location / {
            dynamo_rl_plane request;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }

    server {
        %%RL_LISTEN 8083%%

        location / {
            dynamo_rl_plane request;
            dynamo_rl_attempt_upstream_header off;

            proxy_pass http://frontend;
            %%RL_PROXY_KEEPALIVE%%
        }
    }

    %%RL_API_SERVER 8086 attempts%%
}

EOF

$t->run_fake_dynamo()->run();


my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}$/x;

my $BODY = '{"model":"m","prompt":"hello"}';

###############################################################################

my ($r, $rec, $a);

# a minted id is Dynamo's request id; client ones never reach Dynamo

$r = call('/v1/completions', $BODY, 'request-id' => 'client-rid',
	'X-Dynamo-Request-Id' => '00000000-0000-4000-8000-000000000000');
my $id = $r->{headers}{'x-dynamo-attempt-id'};
like($id, $UUID7, 'minted: attempt id');
$rec = record_with($t, 'x-dynamo-attempt-id', $id);
is($rec && $rec->{headers}{'request-id'}, $id, 'minted: request-id upstream');
ok($rec && !exists $rec->{headers}{'x-dynamo-request-id'},
	'minted: client x-dynamo-request-id removed');
$a = attempt($id);
is($a && $a->{request_id}, $id, 'minted: request_id in the attempts API');

# a client id that is not a UUID: a UUIDv7 minted for it

$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => 'traj-1.turn-2');
$rec = record_with($t, 'x-dynamo-attempt-id', 'traj-1.turn-2');
my $rid = $rec && $rec->{headers}{'request-id'};
like($rid, $UUID7, 'client id: a UUIDv7 upstream as request-id');
isnt($rid, 'traj-1.turn-2', 'client id: not the attempt id');
is($rec && $rec->{headers}{'x-request-id'}, 'traj-1.turn-2',
	'client id: x-request-id is the attempt id');
$a = attempt('traj-1.turn-2');
is($a && $a->{request_id}, $rid, 'client id: request_id kept in the ledger');

# 49 bytes of id and a request id still fit the record

my $long = 'L' x 49;
$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => $long);
is($r->{status}, 200, 'long id: 200');
$a = attempt($long);
like($a && $a->{request_id}, $UUID7, 'long id: request_id');

my $longer = 'L' x 128;
$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => $longer);
$a = attempt($longer);
like($a && $a->{request_id}, $UUID7, '128-byte id: request_id');

# a client id that is a UUID is Dynamo's request id as it is

my $uuid = '0190a0b4-1c2d-7e3f-8a4b-5c6d7e8f9a0b';
$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => $uuid,
	'Request-Id' => 'other');
$rec = record_with($t, 'x-dynamo-attempt-id', $uuid);
is($rec && $rec->{headers}{'request-id'}, $uuid, 'UUID id: request-id');
$a = attempt($uuid);
is($a && $a->{request_id}, $uuid, 'UUID id: request_id');

# a client's x-request-id: a trajectory id, kept under another name

$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => 'turn-3',
	'X-Request-Id' => 'trajectory-9');
is($r->{status}, 200, 'x-request-id: not an attempt id');
is($r->{headers}{'x-dynamo-attempt-id'}, 'turn-3', 'x-request-id: attempt');
$rec = record_with($t, 'x-dynamo-attempt-id', 'turn-3');
is($rec && $rec->{headers}{'x-request-id'}, 'turn-3',
	'x-request-id: the attempt id upstream');
is($rec && $rec->{headers}{'x-client-request-id'}, 'trajectory-9',
	'x-request-id: kept as x-client-request-id');

# reused across turns: never a duplicate attempt

$r = call('/v1/completions', $BODY, 'X-Request-Id' => 'trajectory-9');
is($r->{status}, 200, 'x-request-id reused: 200');
$r = call('/v1/completions', $BODY, 'X-Request-Id' => 'trajectory-9');
is($r->{status}, 200, 'x-request-id reused again: 200');

# without the upstream attempt header, x-request-id reaches Dynamo

$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => 'turn-4',
	'X-Request-Id' => 'trajectory-9', port => port(8083));
$rec = record_with($t, 'x-dynamo-attempt-id', 'turn-4');
is($rec && $rec->{headers}{'x-request-id'}, 'trajectory-9',
	'upstream header off: x-request-id as sent');
ok($rec && !exists $rec->{headers}{'x-client-request-id'},
	'upstream header off: no x-client-request-id');
like($rec && $rec->{headers}{'request-id'}, $UUID7,
	'upstream header off: request-id');

# /generate: a rid that is not a UUID keeps the minted UUID as request id

$r = call('/generate', '{"rid":"slime-1","input_ids":[1]}');
is($r->{headers}{'x-dynamo-attempt-id'}, 'slime-1', 'rid: attempt id');
$rec = record_with($t, 'x-dynamo-attempt-id', 'slime-1');
$rid = $rec && $rec->{headers}{'request-id'};
like($rid, $UUID7, 'rid: request-id is a UUIDv7');
$a = attempt('slime-1');
is($a && $a->{request_id}, $rid, 'rid: request_id in the ledger');

my $ruuid = '0190a0b4-1c2d-7e3f-8a4b-000000000001';
$r = call('/generate', qq({"rid":"$ruuid","input_ids":[1]}));
$rec = record_with($t, 'x-dynamo-attempt-id', $ruuid);
is($rec && $rec->{headers}{'request-id'}, $ruuid, 'UUID rid: request-id');
$a = attempt($ruuid);
is($a && $a->{request_id}, $ruuid, 'UUID rid: request_id');

# one request-id upstream, whatever the client sent

$r = call('/v1/completions', $BODY, 'X-Dynamo-Attempt-Id' => 'many-1',
	'request-id' => 'a', 'Request-ID' => 'b', 'x-dynamo-request-id' => 'c');
$rec = record_with($t, 'x-dynamo-attempt-id', 'many-1');
ok($rec && !ref $rec->{headers}{'request-id'}, 'many: one request-id');
like($rec && $rec->{headers}{'request-id'}, $UUID7, 'many: ours');

# a refused request still answers with its attempt id

$r = call('/v1/completions', '{"x":', 'X-Dynamo-Attempt-Id' => 'refused-1');
is($r->{status}, 400, 'refused: 400');
$a = attempt('refused-1');
ok(!$a, 'refused: no record');

# the fields of a record

$a = attempt('turn-3');
is(join(',', sort keys %{$a // {}}), 'attempt_id,bytes_sent,duration_ms,'
	. 'ended,request_id,started,state,status,stream', 'record: fields');
like($a && $a->{request_id}, $UUID7, 'record: request_id of turn-3');

###############################################################################

sub call {
	my ($uri, $body, @h) = @_;

	my %o;
	my $head = '';

	while (my ($k, $v) = splice(@h, 0, 2)) {
		if ($k eq 'port') {
			$o{port} = $v;
			next;
		}

		$head .= "$k: $v\r\n";
	}

	return parse_response(http_post($uri, $body, headers => $head,
		PeerAddr => '127.0.0.1:' . ($o{port} // port(8080))));
}

sub attempt {
	my ($id) = @_;

	my $r = parse_response(http_get("/rl/attempts/$id",
		PeerAddr => '127.0.0.1:' . port(8086)));

	return undef unless $r && $r->{status} == 200;
	return eval { decode_json($r->{body}) };
}


###############################################################################
