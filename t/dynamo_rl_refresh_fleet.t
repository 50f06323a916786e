#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for examples/rl-refresh against the fleets Dynamo really has
# (issue 16): the native sidecar's control/* spellings and SGLang's
# continue_generation; an empty-bodied 503 from a starting worker,
# retried within --timeout, and one that never ends; the generation check
# on by default, with the model that discovery names; and a worker that
# joins during the refresh, after which the client exits 14 and leaves the
# gate closed, and the gate API says "members_changed": true.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ refresh_args refresh_finish
	refresh_python refresh_start rl_test worker_calls worker_counts
	worker_state /;

###############################################################################

plan(skip_all => 'no python3 (or TEST_PYTHON)') unless refresh_python();

my $t = rl_test(300, 25, <<'EOF');

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 5m%%

    %%RL_UPSTREAMS%%

    %%RL_PROXY_KEEPALIVE%%

    server {
        listen 127.0.0.1:8080;

        # rl-refresh reads discovery before it closes each gate: the
        # location names its source, so that the read is the snapshot
        # the gate closes on

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_discovery;
            proxy_pass http://rl_listener;
        }

        %%RL_ADMIN_LOCATION /_rl_discovery valid=1s%%

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_APIS gate%%

        # examples/dynamo-rl.conf's /verify/v1/: rl-refresh's default
        # generation check while the gates are closed

        location /verify/v1/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_pass http://frontend/v1/;
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical;

my @ID = ('7587888160958628117', '9007199254740993', '18446744073709551615');

my @VLLM = sort qw/
	liveness_probe pause_generation resume_generation flush_cache
	update_weights_from_disk get_weight_version
	update_weights_from_distributed init_weights_update_group
	destroy_weights_update_group update_weights_from_tensor abort_request
/;

my $G = 'http://127.0.0.1:' . port(8080);

my ($res, $m, %c);

###############################################################################

# the native sidecar's spellings (worker 0) and SGLang's (worker 1); the
# generation check runs by default, with the model of discovery

$t->fake_set('discovery.json', doc(
	[ 0, 'control/pause_generation', 'update_weights_from_disk',
		'flush_cache', 'control/resume_generation',
		'control/get_weight_version' ],
	[ 1, 'pause_generation', 'update_weights_from_disk', 'flush_cache',
		'continue_generation', 'get_weight_version' ],
	[ 2, @VLLM ],
));

$t->fake_set("worker-$_.respond.json", $JS->encode({ status => 200,
	body => { status => 'ok', version => 'v1' } })) for 0, 1;

$m = mark();
$res = refresh('v1');

is($res->{rc}, 0, 'spellings: exit 0') or diag($res->{out});

%c = calls($m);

is($c{0}, '/engine/control/pause_generation /engine/update_weights_from_disk '
	. '/engine/flush_cache /engine/control/resume_generation '
	. '/engine/control/get_weight_version', 'spellings: native sidecar');
is($c{1}, '/engine/pause_generation /engine/update_weights_from_disk '
	. '/engine/flush_cache /engine/continue_generation '
	. '/engine/get_weight_version', 'spellings: SGLang\'s resume');

my @gen = grep { $_->{uri} eq '/v1/completions' }
	since($t->fake_records('frontend'), $m->{frontend});
my $body = @gen ? eval { decode_json($gen[0]{body}) } // {} : {};

is(scalar @gen, 1, 'generation: on by default');
is($body->{model}, 'Qwen/Qwen3-0.6B', 'generation: the model of discovery');
like($res->{out}, qr/^\[8\/9 generation\] +\Q$G\E\/verify\/v1\/completions  ok, HTTP 200/m,
	'generation: through the gateway\'s /verify/v1/');
like($res->{out}, qr/^\[9\/9 members\] +replica \Q$G\E  the same 3 worker\(s\)/m,
	'members: checked before reopening');
is(gate()->{state}, 'open', 'spellings: gate open');

# and off when asked

$m = mark();
$res = refresh('v1', '--no-verify-generation');

is($res->{rc}, 0, 'no generation: exit 0') or diag($res->{out});
is(scalar(grep { $_->{uri} eq '/v1/completions' }
	since($t->fake_records('frontend'), $m->{frontend})), 0,
	'no generation: none sent');

reset_all();

###############################################################################

# an empty-bodied 503 from a starting worker: retried until it answers

$t->fake_set('worker-0.respond.json', $JS->encode({ status => 503,
	raw => '' }));

$m = mark();
my $run = start_refresh('v2');

ok(Test::DynamoRL::wait_for(sub { calls_n($m, 0) >= 2 }, 10),
	'starting: the 503 retried');

$t->fake_unset('worker-0.respond.json');

$res = refresh_finish($run);

is($res->{rc}, 0, 'starting: exit 0 once the worker answers')
	or diag($res->{out});
like($res->{out}, qr/^\[4\/9 pause\] +worker $ID[0]  HTTP 503 with an empty body: the worker is starting, retrying/m,
	'starting: the retry said');
like(calls($m)->{0} // '', qr{^(/engine/pause_generation )+/engine/update},
	'starting: pause called again, then the update');
is(join(' ', map { worker_state($t, $_)->{version} } 0 .. 2), 'v2 v2 v2',
	'starting: every worker updated');

# ... and one that never ends: the step fails after --timeout

$t->fake_set('worker-0.respond.json', $JS->encode({ status => 503,
	raw => '' }));

$m = mark();
$res = refresh('v3', '--timeout', '2');

is($res->{rc}, 6, 'never starts: exit 6') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 4\/9 pause, worker $ID[0]: pause_generation failed: HTTP 503: \(empty body\)$/m,
	'never starts: the step and the worker');
cmp_ok(calls_n($m, 0), '>=', 2, 'never starts: retried');
is(gate()->{state}, 'closed', 'never starts: gate closed');

reset_all();

###############################################################################

# a worker joins during the refresh: the gate stays closed, exit 14

$t->fake_set('worker-0.respond.json', $JS->encode({ status => 200,
	delay_ms => 300, body => { status => 'ok', version => 'v4' } }));

$m = mark();
$run = start_refresh('v4');

ok(Test::DynamoRL::wait_for(sub { calls_n($m, 0) >= 1 }, 10),
	'joined: the refresh is under way');

$t->fake_set('discovery.json', doc([ 0, @VLLM ], [ 1, @VLLM ], [ 2, @VLLM ],
	[ 2, 4242, @VLLM ]));

$res = refresh_finish($run);

is($res->{rc}, 14, 'joined: exit 14') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 9\/9 members, replica \Q$G\E: the fleet changed during the refresh \(joined: 4242 at http:\/\/127\.0\.0\.1:\d+; left: none\)/m,
	'joined: the worker named');
is(gate()->{state}, 'closed', 'joined: gate still closed');
is(gate()->{members_changed}, JSON::PP::true, 'joined: members_changed');
is(scalar(grep { $_->{uri} eq '/v1/completions' }
	since($t->fake_records('frontend'), $m->{frontend})), 1,
	'joined: verified, generation checked, then refused to reopen');

reset_all();

###############################################################################

# a discovery document: [ worker, routes... ] or [ worker, id, routes... ]

sub doc {
	my (@w) = @_;

	my @items;

	for my $w (@w) {
		my ($i, @routes) = @$w;
		my $id = $routes[0] =~ /^\d+$/ ? shift @routes : $ID[$i];

		push @items, '{"namespace":"dynamo","component":"backend",'
			. '"endpoint":"rl","instance_id":' . $id . ','
			. '"transport":{"tcp":"127.0.0.1:9999/' . $id . '/rl"},'
			. '"request_plane_url":"dyn://dynamo.backend.rl",'
			. '"system_url":"http://127.0.0.1:' . port(8091 + $i) . '",'
			. '"model":"Qwen/Qwen3-0.6B","routes":'
			. encode_json(\@routes) . ',"world_size":1}';
	}

	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',', @items) . ']}';
}

sub refresh {
	return refresh_finish(start_refresh(@_));
}

sub start_refresh {
	my ($ver, @args) = @_;

	return refresh_start($t, '--gateway', $G, refresh_args($ver), @args);
}

sub mark {
	return {
		w => worker_counts($t),
		frontend => scalar @{$t->fake_records('frontend')},
	};
}

# the URIs each fake worker received since a mark

sub calls {
	my ($mk) = @_;

	my %c = worker_calls($t, $mk->{w});
	my %r = map { $_ => join ' ', map { $_->{uri} } @{$c{$_}} } keys %c;

	return wantarray ? %r : \%r;
}

sub calls_n {
	my ($mk, $i) = @_;
	my %c = worker_calls($t, $mk->{w});
	return scalar @{$c{$i}};
}

sub since {
	my ($list, $from) = @_;
	return @$list[$from .. $#$list];
}

sub gate {
	my $r = http_json('/rl/gate');
	return ref $r->{json} eq 'HASH' ? $r->{json} : {};
}

sub reset_all {
	$t->fake_unset($_) for qw/ discovery.json worker-0.respond.json
		worker-1.respond.json worker-2.respond.json /;
	http_json('/rl/gate', json => { action => 'open' });
}


###############################################################################
