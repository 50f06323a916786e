#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for examples/rl-refresh, the policy-refresh client for a deployment
# with more than one gateway: two nginx instances, each with its own zone
# and so its own gate, in front of one fake Dynamo.  The whole refresh
# (both gates closed before the first worker call and opened after the
# last, every worker paused, updated, flushed, resumed and verified, in
# that order and step by step across the fleet); the drain wait for a
# stream in flight, with lease renewals; a failure injected at each step,
# after which the client exits with that step's status, names the step and
# the worker or replica, and leaves both gates closed (worker 1, the
# first in discovery order, fails; for a later step it advertises only the
# routes from that step on, since the fake's worker-1.respond.json answers
# every route); a gate reopened by someone else; TERM; gates already
# closed by someone else; replicas from DNS; usage errors.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use List::Util qw/ max min /;
use Socket qw/ getaddrinfo getnameinfo SOCK_STREAM NI_NUMERICHOST
	NIx_NOSERV /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ json_lines refresh_args refresh_failed
	refresh_finish refresh_python refresh_replicas refresh_sequence
	refresh_start rl_conf time_limit worker_calls worker_counts
	worker_state /;

###############################################################################

time_limit(300);

plan(skip_all => 'no python3 (or TEST_PYTHON)') unless refresh_python();

# two gateway replicas: their rollout listeners, their trusted listeners;
# a server that answers 500 to everything, inside replica 2's nginx; a
# port where nothing listens

my ($R1, $T1, $R2, $T2, $BROKEN, $DEAD) =
	(8070, 8071, 8075, 8076, 8077, 8079);

my $t1 = Test::DynamoRL->new()->has(qw/http proxy/)->plan(144);
my $t2 = Test::DynamoRL->new();

$t1->write_file_expand('nginx.conf', nginx_conf($R1, $T1, ''));
$t2->write_file_expand('nginx.conf', nginx_conf($R2, $T2, <<"EOF"));
    server {
        listen 127.0.0.1:$BROKEN;

        location / {
            default_type application/json;
            return 500 '{"error":"injected","message":"broken replica"}';
        }
    }
EOF

$t1->run_fake_dynamo();
$t1->run();
$t2->run();

###############################################################################

my $JS = JSON::PP->new->canonical;

my $ID0 = '7587888160958628117';
my $ID1 = '9007199254740993';
my $ID2 = '18446744073709551615';
my @ID = ($ID0, $ID1, $ID2);

my @VLLM = sort qw/
	liveness_probe pause_generation resume_generation flush_cache
	update_weights_from_disk get_weight_version
	update_weights_from_distributed init_weights_update_group
	destroy_weights_update_group update_weights_from_tensor abort_request
/;

my @SEQUENCE = refresh_sequence();

my $G1 = 'http://127.0.0.1:' . port($T1);
my $G2 = 'http://127.0.0.1:' . port($T2);
my $GB = 'http://127.0.0.1:' . port($BROKEN);
my $GD = 'http://127.0.0.1:' . port($DEAD);

my $VERIFY = "$G1/v1/completions";

my ($res, $out, $mark, $v, $s);
my $version = 0;

###############################################################################

# the whole refresh, with the generation check through replica 1's trusted
# listener, where the gate does not apply

reset_all();
$mark = mark();
$v = next_version();

$res = refresh($v, '--verify-url', $VERIFY, '--verify-model', 'Qwen/Qwen3-0.6B');
$out = $res->{out};

is($res->{rc}, 0, 'success: exit 0') or diag($out);
like($out, qr/^rl-refresh: done: 3 worker\(s\) at weight version "\Q$v\E", 2 gate\(s\) open$/m,
	'success: summary');

for my $step (qw/ close drain open /) {
	is(scalar(() = $out =~ /^\[\d\/9 $step\] +replica http:\/\/127\.0\.0\.1:\d+ /mg),
		2, "success: one $step line per replica");
}

for my $step (qw/ pause update flush resume verify /) {
	is(join(' ', $out =~ /^\[\d\/9 $step\] +worker (\d+) /mg),
		"$ID1 $ID0 $ID2", "success: one $step line per worker, exact ids");
}

like($out, qr/^\[3\/9 discovery\] +replica \Q$G1\E  protocol_version 1, 3 worker\(s\), 3 usable/m,
	'success: discovery line');
like($out, qr/^\[5\/9 update\] +worker $ID2  ok: \Q$v\E$/m,
	'success: update line with the version');
like($out, qr/^\[8\/9 generation\] +\Q$VERIFY\E  ok, HTTP 200/m,
	'success: generation line');

my %calls = calls_since($mark);

for my $i (0 .. 2) {
	is(join(' ', map { $_->{uri} } @{$calls{$i}}), "@SEQUENCE",
		"success: worker $i called in order");
}

is_deeply([ map { decode_json($_->{body}) } $calls{0}[0], $calls{0}[1] ],
	[ { mode => 'keep' },
		{ model_path => "/models/policy-$v", weight_version => $v } ],
	'success: pause and update bodies');

is(join(' ', map { worker_state($t1, $_)->{version} } 0 .. 2), "$v $v $v",
	'success: weight version on every worker');
is(join(' ', map { worker_state($t1, $_)->{paused} ? 'paused' : 'running' }
	0 .. 2), 'running running running', 'success: every worker resumed');

# step by step across the fleet: every pause before any update, ...

my @steps = map { my $k = $_; [ map { $calls{$_}[$k]{time} } 0 .. 2 ] }
	0 .. 4;

ok((grep { max(@{$steps[$_]}) < min(@{$steps[$_ + 1]}) } 0 .. 3) == 4,
	'success: each step done on the whole fleet before the next');

# both gates closed before the first worker call and opened after the
# last one, by the gateways' own access logs

my ($first, $last) = (min(map { $_->{time} } map { @$_ } values %calls),
	max(map { $_->{time} } map { @$_ } values %calls));

for my $g ([ 'replica 1', $t1 ], [ 'replica 2', $t2 ]) {
	my ($name, $t) = @$g;
	my @gate = gate_posts($t, $mark);

	is(join(' ', map { $_->{action} } @gate), 'close open',
		"success: $name gate closed once, opened once");
	ok(@gate == 2 && $gate[0]{msec} <= $first,
		"success: $name closed before the first worker call");
	ok(@gate == 2 && $gate[1]{start} + 0.001 >= $last,
		"success: $name opened after the last worker call");
}

my @gen = grep { $_->{uri} eq '/v1/completions' }
	access_log($t1, $mark->{a1});

is(join(' ', map { "$_->{port} $_->{status} $_->{outcome}" } @gen),
	port($T1) . ' 200 succeeded', 'success: one generation, gate off');

my @gen_fake = grep { $_->{uri} eq '/v1/completions' }
	since($t1->fake_records('frontend'), $mark->{frontend});
my $gen_body = @gen_fake ? eval { decode_json($gen_fake[0]{body}) } // {} : {};

ok(@gen_fake == 1 && $gen_fake[0]{time} > $last
	&& defined $gen_body->{stream} && !$gen_body->{stream}
	&& $gen_body->{max_tokens} <= 16,
	'success: generation after the version check, not streamed');

for my $p ($T1, $T2) {
	is(gate($p)->{state}, 'open', "success: gate on $p open");
}

# nothing else was contacted: proxies in the environment are ignored

is(join(' ', sort keys %{{ map { $_->{port} => 1 }
	access_log($t1, $mark->{a1}), access_log($t2, $mark->{a2}) }}),
	join(' ', sort(port($T1), port($T2))),
	'success: only the trusted listeners given');

###############################################################################

# the drain: a stream in flight on replica 1 when the refresh starts; the
# lease is renewed while waiting

reset_all();
$mark = mark();
$v = next_version();

# 5 s of stream: the refresh's start and both closes, on a loaded machine,
# then a drain long enough for the 2 s lease to be renewed

my $EVENTS = 25;

$s = in_flight($R1, 'slow', "X-Fake-Events: $EVENTS",
	'X-Fake-Interval-Ms: 200');

ok(Test::DynamoRL::wait_for(sub { gate($T1)->{in_flight} == 1 }, 5),
	'drain: stream in flight');

my $run = start_refresh($v, '--lease', '2s');

ok(Test::DynamoRL::wait_for(sub {
	gate($T1)->{state} eq 'closed' && gate($T2)->{state} eq 'closed'
}, 10), 'drain: both gates closed');

is(gate($T1)->{in_flight}, 1, 'drain: stream still in flight');

for my $p ($R1, $R2) {
	my $r = rollout($p);
	is(join(' ', $r->{status}, $r->{headers}{'retry-after'} ? 'retry' : '',
		eval { decode_json($r->{body})->{message} } // ''),
		'503 retry generation is paused for a policy refresh, retry later',
		"drain: new generation on $p refused");
}

my $stream = parse_response(http_end($s));
like($stream->{body}, qr/data: \[DONE\]/, 'drain: stream completed');

$res = refresh_finish($run);
$out = $res->{out};

is($res->{rc}, 0, 'drain: exit 0') or diag($out);
like($out, qr/^\[2\/9 drain\] +replica \Q$G1\E  in_flight 0 after (\d+\.\d)s$/m,
	'drain: replica 1 waited');
ok(($out =~ /^\[2\/9 drain\] +replica \Q$G1\E  in_flight 0 after (\d+\.\d)s$/m)[0]
	>= 0.5, 'drain: for the stream');
like($out, qr/^\[2\/9 drain\] +replica \Q$G1\E  lease renewed until /m,
	'drain: lease renewed');

%calls = calls_since($mark);

my ($sl) = grep { $_->{uri} eq '/v1/completions' && $_->{status} == 200 }
	access_log($t1, $mark->{a1});
my ($sf) = grep { ($_->{headers}{'x-fake-scenario'} // '') eq 'slow' }
	since($t1->fake_records('frontend'), $mark->{frontend});
my $first_pause = min(map { $calls{$_}[0]{time} } 0 .. 2);

is($sl && $sl->{outcome}, 'succeeded', 'drain: stream succeeded');
ok($sl && $first_pause >= $sl->{msec}, 'drain: pause after the stream ended')
	or diag(explain([ $sl, $first_pause ]));
ok($sf && $first_pause >= $sf->{time} + $EVENTS * 0.2,
	'drain: pause after the fake sent the whole stream');
ok((grep { $_->{action} eq 'renew' } gate_posts($t1, $mark))
	&& (grep { $_->{action} eq 'renew' } gate_posts($t2, $mark)),
	'drain: both leases renewed');

is(join(' ', map { worker_state($t1, $_)->{version} } 0 .. 2), "$v $v $v",
	'drain: weight version on every worker');

###############################################################################

# a failure at each step: its exit status, the step and the worker or
# replica named, both gates left closed

# close: one replica answers 500, the others are closed all the same

failure('close 500', [ '--gateway', $G1, '--gateway', $GB, '--gateway', $G2 ],
	rc => 3, step => '1/9 close', who => "replica $GB",
	detail => qr/HTTP 500: \{"error":"injected"/, calls => 0);

like($out, qr/^\[1\/9 close\] +replica \Q$G2\E  closed/m,
	'close 500: the replica after it closed');

# close: one replica is down

failure('close down', [ '--gateway', $G1, '--gateway', $GD ],
	rc => 3, step => '1/9 close', who => "replica $GD",
	detail => qr/no answer: .*refused/i, calls => 0, closed => [ $T1 ]);

is(gate($T2)->{state}, 'open', 'close down: a replica not given untouched');

# drain: a request that never ends

$s = in_flight($R2, 'hang');

ok(Test::DynamoRL::wait_for(sub { gate($T2)->{in_flight} == 1 }, 5),
	'drain timeout: request in flight');

failure('drain timeout', [ '--drain-timeout', '1' ],
	rc => 4, step => '2/9 drain', who => "replica $G2",
	detail => qr/still 1 request\(s\) in flight after --drain-timeout 1s/,
	calls => 0, cleanup => sub { close $s });

ok(Test::DynamoRL::wait_for(sub { gate($T2)->{in_flight} == 0 }, 10),
	'drain timeout: request gone');

# discovery: the RL listener fails

$t1->fake_set('discovery.status', '500');

failure('discovery 500', [], rc => 5, step => '3/9 discovery',
	who => "replica $G1", detail => qr/GET \/v1\/rl\/workers failed: HTTP 5\d\d/,
	calls => 0);

$t1->fake_unset('discovery.status');

# discovery: a worker whose probe failed is not refreshed silently ...

$t1->fake_set('discovery.json', discovery(error => 1));

failure('discovery worker error', [], rc => 5, step => '3/9 discovery',
	who => "worker $ID1", detail => qr/not usable: .*error "worker discovery timed out after 30s"/,
	calls => 0);

# ... unless told to go on without it

reset_all();
$mark = mark();
$v = next_version();
$t1->fake_set('discovery.json', discovery(error => 1));

$res = refresh($v, '--skip-broken-workers');

is($res->{rc}, 0, 'skip broken: exit 0') or diag($res->{out});
like($res->{out}, qr/^\[3\/9 discovery\] +worker $ID1  NOT USABLE: dynamo\/backend\/rl: error/m,
	'skip broken: reported');
%calls = calls_since($mark);
is(join(' ', map { scalar @{$calls{$_}} } 0 .. 2), '5 0 5',
	'skip broken: the others refreshed');

reset_all();

# pause: {"status":"error"} with 200 from worker 1, the first one

$t1->fake_set('worker-1.respond.json', $JS->encode({ status => 200,
	body => { status => 'error', message => 'injected pause failure' } }));

failure('pause error', [], rc => 6, step => '4/9 pause', who => "worker $ID1",
	detail => qr/pause_generation failed: HTTP 200 with "status": "error": .*injected pause failure/,
	calls => { 1 => [ 'pause_generation' ] });

# update: {"success":false}; worker 1 does not advertise pause, so its
# first call is the update

$t1->fake_set('discovery.json', discovery(
	drop => [ qw/ pause_generation / ]));
$t1->fake_set('worker-1.respond.json', $JS->encode({ status => 200,
	body => { success => JSON::PP::false, message => 'injected' } }));

failure('update success false', [], rc => 7, step => '5/9 update',
	who => "worker $ID1",
	detail => qr/update_weights_from_disk failed: HTTP 200 with "success": false/,
	calls => { 0 => [ 'pause_generation' ], 1 => [ 'update_weights_from_disk' ],
		2 => [ 'pause_generation' ] });

like($out, qr/^\[4\/9 pause\] +worker $ID1  skipped: pause_generation or control\/pause_generation not advertised$/m,
	'update success false: pause skipped where not advertised');
like($out, qr/^rl-refresh: done before the failure: pause $ID0 $ID2$/m,
	'update success false: what was done');

# flush: HTTP 500

$t1->fake_set('discovery.json', discovery(
	drop => [ qw/ pause_generation update_weights_from_disk / ]));
$t1->fake_set('worker-1.respond.json', $JS->encode({ status => 500,
	body => { error => 'Handler error', message => 'injected flush' } }));

failure('flush 500', [], rc => 8, step => '6/9 flush', who => "worker $ID1",
	detail => qr/flush_cache failed: HTTP 500: \{"error":"Handler error"/,
	calls => { 0 => [ @SEQUENCE[0, 1] ], 1 => [ 'flush_cache' ],
		2 => [ @SEQUENCE[0, 1] ] });

# resume

$t1->fake_set('discovery.json', discovery(
	drop => [ qw/ pause_generation update_weights_from_disk flush_cache / ]));
$t1->fake_set('worker-1.respond.json', $JS->encode({ status => 200,
	body => { status => 'error', message => 'injected resume' } }));

failure('resume error', [], rc => 9, step => '7/9 resume', who => "worker $ID1",
	detail => qr/resume_generation failed: HTTP 200 with "status": "error"/,
	calls => { 0 => [ @SEQUENCE[0 .. 2] ], 1 => [ 'resume_generation' ],
		2 => [ @SEQUENCE[0 .. 2] ] });

# version: worker 1 answers everything, but with an old version

$t1->fake_set('worker-1.respond.json', $JS->encode({ status => 200,
	body => { status => 'ok', version => 'stale' } }));

failure('version mismatch', [], rc => 10, step => '8/9 verify',
	who => "worker $ID1", detail => qr/weight version is "stale", not "v\d+"/,
	calls => { map { $_ => [ @SEQUENCE ] } 0 .. 2 });

like($out, qr/^\[8\/9 verify\] +worker $ID0  weight version "v\d+"$/m,
	'version mismatch: the others verified');

# generation: nothing listens at --verify-url

failure('generation down', [ '--verify-url', "$GD/v1/completions",
	'--verify-model', 'm' ], rc => 11, step => '8/9 generation',
	who => "$GD/v1/completions", detail => qr/no answer: .*refused/i,
	calls => { map { $_ => [ @SEQUENCE ] } 0 .. 2 });

is(join(' ', map { worker_state($t1, $_)->{version} } 0 .. 2),
	"$version $version $version" =~ s/(\d+)/v$1/gr,
	'generation down: weights were updated');

# generation: through a rollout listener, the gate refuses it

failure('generation gated', [ '--verify-url',
	'http://127.0.0.1:' . port($R1) . '/v1/completions',
	'--verify-model', 'm' ], rc => 11, step => '8/9 generation',
	who => 'http://127.0.0.1:' . port($R1) . '/v1/completions',
	detail => qr/HTTP 503: .*policy refresh.*a closed gate refuses it.*dynamo_rl_gate off/,
	calls => { map { $_ => [ @SEQUENCE ] } 0 .. 2 });

###############################################################################

# someone else reopens a gate during the drain

reset_all();
$mark = mark();

($s, $run) = refresh_draining('reopened', $R1, $T1);

gate_post($T2, { action => 'open' });

$res = refresh_finish($run);

is($res->{rc}, 13, 'reopened: exit 13') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 2\/9 drain, replica \Q$G2\E: the gate was reopened by someone else/m,
	'reopened: named');
is(gate($T1)->{state}, 'closed', 'reopened: our other gate stays closed');
is(scalar(map { @$_ } values %{{ calls_since($mark) }}), 0,
	'reopened: no worker called');

close $s;

ok(Test::DynamoRL::wait_for(sub { gate($T1)->{in_flight} == 0 }, 10),
	'reopened: request gone');

# interrupted by TERM while draining: said, and the gates stay closed

reset_all();
$mark = mark();

($s, $run) = refresh_draining('term', $R2, $T2);

kill 'TERM', $run->{pid};

$res = refresh_finish($run);

is($res->{rc}, 130, 'term: exit 130') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: interrupted\nrl-refresh: no gate is reopened after a failure; gates now: \Q$G1\E CLOSED, \Q$G2\E CLOSED$/m,
	'term: said');
is(join(' ', map { gate($_)->{state} } $T1, $T2), 'closed closed',
	'term: gates still closed');

close $s;

# a gate closed by someone else, under another reason, is not taken over

reset_all();
$mark = mark();
gate_post($T2, { action => 'close', reason => 'operator maintenance',
	lease => '60s' });

$res = refresh(next_version());

is($res->{rc}, 3, 'closed by someone: exit 3') or diag($res->{out});
like($res->{out}, qr/^rl-refresh: FAILED at step 1\/9 close, replica \Q$G2\E: the gate is already closed by someone else \(reason "operator maintenance", lease until "/m,
	'closed by someone: named');
is(gate($T1)->{state}, 'open', 'closed by someone: nothing changed');
is(gate($T2)->{reason}, 'operator maintenance',
	'closed by someone: reason kept');

$v = next_version();
$res = refresh($v, '--force');

is($res->{rc}, 0, 'closed by someone, --force: exit 0') or diag($res->{out});
is(join(' ', map { worker_state($t1, $_)->{version} } 0 .. 2), "$v $v $v",
	'closed by someone, --force: refreshed');

# the replicas from DNS: every address of a name, the name as Host

my @addrs = resolve('localhost');

SKIP: {
	skip 'localhost is not only 127.0.0.1 here', 4
		unless "@addrs" eq '127.0.0.1';

	reset_all();
	$mark = mark();
	$v = next_version();

	$res = refresh($v, { replicas => [ '--gateway-dns',
		'localhost:' . port($T1), '--gateway', $G2 ] });

	is($res->{rc}, 0, 'dns: exit 0') or diag($res->{out});
	like($res->{out}, qr/^rl-refresh: weight version "\Q$v\E" from \S+ through 2 gateway replica\(s\): \Q$G1\E, \Q$G2\E$/m,
		'dns: replicas');
	is(join(' ', sort keys %{{ map { $_->{host} => 1 }
		access_log($t1, $mark->{a1}) }}), 'localhost',
		'dns: the name as Host');
	is(join(' ', map { worker_state($t1, $_)->{version} } 0 .. 2), "$v $v $v",
		'dns: refreshed');
}

# usage errors touch nothing

reset_all();
$mark = mark();

for my $bad ([ 'no gateway', [ '--model-path', 'p', '--weight-version', 'x' ] ],
	[ 'bad lease', [ '--gateway', $G1, '--model-path', 'p',
		'--weight-version', 'x', '--lease', '2d' ] ],
	[ 'long reason', [ '--gateway', $G1, '--model-path', 'p',
		'--weight-version', 'x', '--reason', 'r' x 129 ] ])
{
	$res = refresh_finish(refresh_start($t1, proxy => $GD,
		@{$bad->[1]}));
	is($res->{rc}, 2, "usage: $bad->[0]") or diag($res->{out});
}

is(scalar(my @l = access_log($t1, $mark->{a1})), 0,
	'usage: nothing contacted');

###############################################################################

# replica 2's nginx is not planned: its logs are checked here

reset_all();

is(join('', $t2->log_lines('error.log', qr/\[(?:alert|emerg)\]|exited on signal/)),
	'', 'replica 2: no alerts');

###############################################################################

sub nginx_conf {
	my ($rollout, $trusted, $extra) = @_;

	return rl_conf(<<"EOF");

%%RL_MAIN workers=2 connections=1024%%

http {
    %%RL_HTTP 5m%%

    log_format rl escape=json '{"msec":\$msec,"rt":\$request_time,'
                              '"method":"\$request_method",'
                              '"uri":"\$request_uri","status":\$status,'
                              '"port":"\$server_port","host":"\$host",'
                              '"deny":"\$dynamo_rl_deny_reason",'
                              '"outcome":"\$dynamo_rl_outcome",'
                              '"body":"\$request_body"}';

    access_log %%TESTDIR%%/rl.log rl;

    %%RL_FRONTEND 8%%

    upstream rl_listener {
        server 127.0.0.1:8082;
        keepalive 4;
    }

    %%RL_PROXY_KEEPALIVE%%

    # rollout clients

    server {
        listen 127.0.0.1:$rollout;

        %%RL_REQUEST_PLANE unbuffered%%

        %%RL_NOT_FOUND%%
    }

    # trusted network

    server {
        listen 127.0.0.1:$trusted;

        # rl-refresh reads discovery before it closes each gate: the
        # location names its source, so that the read is the snapshot
        # the gate closes on

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_discovery;
            proxy_pass http://rl_listener;
        }

        %%RL_ADMIN_LOCATION /_rl_discovery valid=1s%%

        %%RL_DISCOVERY_FETCH rl_listener 4m%%

        %%RL_APIS gate%%

        # the refresh's check that generation works, while the gates
        # are still closed

        %%RL_REQUEST_PLANE ungated%%

        # examples/dynamo-rl.conf's /verify/v1/: rl-refresh's default
        # generation check while the gates are closed

        location /verify/v1/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_pass http://frontend/v1/;
        }

        %%RL_NOT_FOUND%%
    }

$extra
}

EOF
}

# one refresh; a hash as the last argument replaces the replicas

sub start_refresh {
	my ($ver, @args) = @_;

	my @replicas = refresh_replicas(\@args, $G1, $G2);

	# the client's proxies point where nothing listens

	return refresh_start($t1, proxy => $GD, @replicas, refresh_args($ver),
		@args);
}

sub refresh {
	return refresh_finish(start_refresh(@_));
}

# one injected failure, checked in full: exit status, the step and the
# worker or replica in the failure line and on stderr, the worker calls
# made, and the gates still closed

sub failure {
	my ($name, $args, %o) = @_;

	my $ver = next_version();
	my $before = mark();

	my @replicas = @$args && $args->[0] eq '--gateway'
		? () : ('--gateway', $G1, '--gateway', $G2);
	my @rest = @$args;
	my @gw;

	push @gw, splice(@rest, 0, 2) while @rest && $rest[0] eq '--gateway';

	$res = refresh($ver, @rest, { replicas => [ @replicas, @gw ] });
	$out = $res->{out};

	# exactly one failure line

	my $line = refresh_failed($name, $res, %o);

	like($line, $o{detail}, "$name: status and excerpt");

	my %c = calls_since($before);

	if (ref $o{calls}) {
		is(join('; ', map { "$_: " . join(' ', map { $_->{uri} }
			@{$c{$_}}) } 0 .. 2),
			join('; ', map { "$_: " . join(' ', map { m!^/! ? $_
				: "/engine/$_" } @{$o{calls}{$_} // []}) } 0 .. 2),
			"$name: worker calls");

	} else {
		is(scalar(map { @$_ } values %c), 0, "$name: no worker called");
	}

	my @closed = @{$o{closed} // [ $T1, $T2 ]};

	is(join(' ', map { gate($_)->{state} } @closed),
		join(' ', ('closed') x @closed), "$name: gates still closed");

	$o{cleanup}->() if $o{cleanup};

	reset_all();

	return $res;
}

sub next_version {
	return 'v' . ++$version;
}

# back to a fleet at rest: default discovery, no injected answers, gates
# open, nothing in flight

sub reset_all {
	$t1->fake_unset($_) for qw/ discovery.json discovery.status
		worker-0.respond.json worker-1.respond.json worker-2.respond.json /;

	for my $p ($T1, $T2) {
		gate_post($p, { action => 'open' });
	}

	Test::DynamoRL::wait_for(sub {
		gate($T1)->{in_flight} == 0 && gate($T2)->{in_flight} == 0
	}, 10) or diag('reset: requests still in flight: '
		. encode_json([ gate($T1), gate($T2) ]));
}

sub mark {
	return {
		w => worker_counts($t1),
		frontend => scalar @{$t1->fake_records('frontend')},
		a1 => scalar(my @a1 = access_log($t1)),
		a2 => scalar(my @a2 = access_log($t2)),
	};
}

sub calls_since {
	my ($m) = @_;
	return worker_calls($t1, $m->{w});
}

sub access_log {
	my ($t, $from) = @_;

	my @lines = json_lines($t->testdir() . '/rl.log');

	return @lines[($from // 0) .. $#lines];
}

# the POSTs to a gate since a mark, with their action, end and start

sub gate_posts {
	my ($t, $m) = @_;

	my $from = $t == $t1 ? $m->{a1} : $m->{a2};

	return map {
		my $body = eval { decode_json($_->{body}) } // {};
		+{ %$_, action => $body->{action} // '',
			start => $_->{msec} - $_->{rt} };
	} grep { $_->{method} eq 'POST' && $_->{uri} eq '/rl/gate' }
		access_log($t, $from);
}

sub gate {
	my ($p) = @_;

	my $r = http_json('/rl/gate', PeerAddr => '127.0.0.1:' . port($p));
	return $r && ref $r->{json} eq 'HASH' ? $r->{json} : { state => '',
		in_flight => -1 };
}

sub gate_post {
	my ($p, $data) = @_;

	my $r = http_json('/rl/gate', json => $data,
		PeerAddr => '127.0.0.1:' . port($p));
	return $r && ref $r->{json} eq 'HASH' ? $r->{json} : {};
}

sub rollout {
	my ($p) = @_;

	my $body = '{"model":"m","prompt":"hi"}';

	return parse_response(http_post('/v1/completions', $body,
		PeerAddr => '127.0.0.1:' . port($p))) // { status => 0,
		headers => {}, body => '' };
}

# a discovery document like the fake's own: worker 1 may drop routes or
# have a failed probe

sub discovery {
	my (%o) = @_;

	my @items;

	for my $i (1, 0, 2) {
		my %drop = $i == 1 ? map { $_ => 1 } @{$o{drop} // []} : ();

		my $item = '{"namespace":"dynamo","component":"backend",'
			. '"endpoint":"rl","instance_id":' . $ID[$i] . ','
			. '"transport":{"tcp":"127.0.0.1:9999/' . $i . '/rl"},'
			. '"request_plane_url":"dyn://dynamo.backend.rl",';

		if ($i == 1 && $o{error}) {
			$item .= '"model":"Qwen/Qwen3-0.6B","routes":[],'
				. '"error":"worker discovery timed out after 30s"}';

		} else {
			$item .= '"system_url":"http://127.0.0.1:' . port(8091 + $i)
				. '","model":"Qwen/Qwen3-0.6B","routes":'
				. encode_json([ grep { !$drop{$_} } @VLLM ])
				. ',"world_size":1}';
		}

		push @items, $item;
	}

	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',', @items) . ']}';
}

sub resolve {
	my ($name) = @_;

	my ($err, @res) = getaddrinfo($name, '', { socktype => SOCK_STREAM });
	return () if $err;

	my %seen;

	return grep { !$seen{$_}++ } map {
		my ($e, $host) = getnameinfo($_->{addr}, NI_NUMERICHOST, NIx_NOSERV);
		$e ? () : $host
	} @res;
}

sub since {
	my ($list, $from) = @_;
	return @$list[$from .. $#$list];
}

# a refresh started while a request that never ends is in flight on
# rollout listener $p (gate API $tp): it returns once the refresh's drain
# has closed both gates

sub refresh_draining {
	my ($name, $p, $tp) = @_;

	my $s = in_flight($p, 'hang');

	ok(Test::DynamoRL::wait_for(sub { gate($tp)->{in_flight} == 1 }, 5),
		"$name: request in flight");

	my $run = start_refresh(next_version(), '--drain-timeout', '20');

	ok(Test::DynamoRL::wait_for(sub {
		gate($T1)->{state} eq 'closed' && gate($T2)->{state} eq 'closed'
	}, 10), "$name: both gates closed");

	return ($s, $run);
}

# a generation request left in flight on a rollout listener

sub in_flight {
	my ($p, $scenario, @headers) = @_;

	my $body = '{"model":"m","prompt":"hi","stream":true}';

	return http("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "X-Fake-Scenario: $scenario\r\n"
		. join('', map { "$_\r\n" } @headers)
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body",
		PeerAddr => '127.0.0.1:' . port($p), start => 1);
}

###############################################################################
