#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for reloads (SIGHUP): the dynamo_rl zone and its discovery snapshot
# survive, so that the new worker processes allow admin calls from the
# snapshot taken before the reload, without fetching the document again,
# with one worker process or two.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ admin_call concurrent doc listener_fetches
	rl_conf time_limit worker /;

###############################################################################

time_limit(120);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(22);

$t->write_file_expand('nginx.conf', nginx_conf(1, 'one'));
$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;

my $W = '/v1/rl/workers';
my $ID = '18446744073709551615';

# the snapshot: worker $ID, taken by an admin call

$t->fake_set('discovery.json', one_worker($ID));

my $r = admin("$W/$ID/engine/liveness_probe");
is($r->{status}, 200, 'before reload: allowed');
is(listener_fetches($t), 1, 'before reload: one fetch');

my $gen = $r->{log}{generation};
my $pid = $r->{log}{pid};

like($gen, qr/^[1-9]\d*$/, 'before reload: snapshot generation');

# from now on, a fetch would deny the call

$t->fake_set('discovery.json', one_worker('42'));

$t->write_file_expand('nginx.conf', nginx_conf(1, 'two'));
$t->reload();

ok(!$t->reload_failed(), 'reload: accepted');
is(parse_response(http_get('/version'))->{body}, 'two',
	'reload: new configuration');

$r = admin("$W/$ID/engine/liveness_probe");
is($r->{status}, 200, 'after reload: allowed from the old snapshot');
is(listener_fetches($t), 1, 'after reload: no fetch');
is($r->{log}{generation}, $gen, 'after reload: same generation');
isnt($r->{log}{pid}, $pid, 'after reload: a new worker process');
is(join(' ', map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'2 /engine/liveness_probe', 'after reload: forwarded');

$r = admin("$W/42/engine/liveness_probe");
is(join(' ', $r->{status}, $r->{json}{error} // ''), '404 unknown_worker',
	'after reload: the old snapshot, not the new document');

# a reload to two worker processes: both rebuild their index from the zone

$t->write_file_expand('nginx.conf', nginx_conf(2, 'three'));
$t->reload();

ok(!$t->reload_failed(), 'two processes: reload accepted');

my @res = concurrent(8083, map { "$W/$ID/engine/liveness_probe" } 1 .. 16);

is(join(' ', map { $_->{status} } @res), join(' ', (200) x 16),
	'two processes: all allowed');
is(listener_fetches($t), 1, 'two processes: no fetch');

# a worker process logs a request after its client has the response

$t->wait_for(sub {
	grep({ $_->{port} eq port(8083) } access_log()) >= 16
}, 5);

my %pids = map { $_->{pid} => 1 } grep { $_->{port} eq port(8083) }
	access_log();

is(scalar keys %pids, 2, 'two processes: both served calls');
is(join(' ', sort { $a <=> $b } keys %{{ map { $_->{generation} => 1 }
	grep { $_->{port} eq port(8083) } access_log() }}), $gen,
	'two processes: same generation');

# the valid=0 location refreshes and sees the new document, which then
# becomes the snapshot for all

$r = admin("/v1/rl/fresh/$ID/engine/liveness_probe");
is(join(' ', $r->{status}, $r->{json}{error} // ''), '404 unknown_worker',
	'refresh: new document');
is(listener_fetches($t), 2, 'refresh: one fetch');
cmp_ok($r->{log}{generation}, '>', $gen, 'refresh: next generation');

$r = admin("$W/42/engine/liveness_probe");
is($r->{status}, 200, 'refresh: new snapshot used by valid=60s');

# a reload that changes nothing of the zone keeps that snapshot too

$t->write_file_expand('nginx.conf', nginx_conf(2, 'four'));
$t->reload();

$r = admin("$W/42/engine/liveness_probe");
is($r->{status}, 200, 'second reload: allowed');
is(listener_fetches($t), 2, 'second reload: no fetch');

###############################################################################

alarm(0);

###############################################################################

sub nginx_conf {
	my ($workers, $version) = @_;

	return rl_conf(<<"EOF");

%%RL_MAIN workers=$workers%%

http {
    %%RL_HTTP 5m%%

    %%RL_ACCESS_LOG t status port pid deny generation%%

    %%RL_LISTENER%%

    %%RL_PROXY_KEEPALIVE%%

    server {
        %%RL_LISTEN 8080 8083 reuseport%%

        location = /version {
            return 200 "$version";
        }

        %%RL_ADMIN_PLANE valid=60s%%

        # valid=0 on the same source (a source is its URI in its server)

        location /v1/rl/fresh/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;

            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }
    }
}

EOF
}

# a document with one worker, on fake worker 2

sub one_worker {
	my ($id) = @_;

	return doc(worker(id => $id, w => 2, routes => [ 'liveness_probe' ],
		model => undef, world_size => undef));
}

# one admin call (Test::DynamoRL::Fixture::admin_call)

sub admin {
	my ($path, %o) = @_;
	return admin_call($t, 'POST', $path, %o);
}

sub access_log {
	my $text = eval { $t->read_file('rl.log') } // '';
	return map { $JS->decode($_) } grep { /\S/ } split /\n/, $text;
}

###############################################################################
