#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the tenant the gateway assigned in the shared store's attempt
# record (issue 27): a claim writes it as "tn" beside "rp" and "rq", the
# attempts API of every replica reads it back as "tenant", a record
# without one has none, and with the store down the zone's copy answers
# with it (on_error=local).

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_conf time_limit /;
use Test::DynamoRL::Redis qw/ store_key /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy map/)->plan(11);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

$t->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    dynamo_rl_zone zone=rl:4m;
    dynamo_rl_store redis://127.0.0.1:8379 replica=A timeout=1s
                    on_error=local;

    map $http_x_test_team $rl_tenant {
        a        "tenant \"a\"";
        default  "";
    }

    upstream frontend {
        server 127.0.0.1:8081;
    }

    server {
        %%RL_LISTEN 8080%%

        location /v1/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            dynamo_rl_tenant $rl_tenant;

            proxy_pass http://frontend;
        }
    }

    server {
        %%RL_LISTEN 8070%%

        %%RL_APIS attempts%%
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my ($h, $a);

# claims go to the store once it is connected (before, on_error=local)

ok($t->wait_for(sub { scalar $t->log_lines('error.log',
	qr/\[notice\] .*dynamo rl store: connected to/) }, 20),
	'store: connected');

post('tn-1', 'a');
$h = wait_record('tn-1');
is($h->{tn}, 'tenant "a"', 'store: the record has the tenant');
is($h->{rp}, 'A', 'store: beside the replica');

$a = attempt('tn-1');
is($a->{tenant}, 'tenant "a"', 'store: the attempts API shows it');
is($a->{replica}, 'A', 'store: read from the store');

post('tn-2', undef);
$h = wait_record('tn-2');
ok($h->{st} && !exists $h->{tn}, 'store: none assigned, no "tn"');
ok(!exists attempt('tn-2')->{tenant}, 'store: none assigned, none shown');

# the store down: the zone's copy

$redis->stop();

$a = attempt('tn-1');
is($a->{source}, 'local', 'zone: the local record');
is($a->{tenant}, 'tenant "a"', 'zone: the tenant');

$a = attempt('tn-2');
is($a->{source}, 'local', 'zone: the local record without one');
ok(!exists $a->{tenant}, 'zone: none shown');

###############################################################################

sub post {
	my ($id, $team) = @_;

	return http_post('/v1/completions', '{"prompt":"x"}',
		headers => "X-Dynamo-Attempt-Id: $id\r\n"
			. (defined $team ? "X-Test-Team: $team\r\n" : ''),
		PeerAddr => '127.0.0.1:' . port(8080));
}

sub wait_record {
	my ($id) = @_;

	my $h = {};

	$t->wait_for(sub {
		$h = $redis->hgetall(store_key("a:$id"));
		return ($h->{st} // '') eq 'u';
	}, 10);

	return $h;
}

sub attempt {
	my ($id) = @_;

	my $raw = http_get("/rl/attempts/$id",
		PeerAddr => '127.0.0.1:' . port(8070));
	my ($body) = $raw =~ /\r\n\r\n(.*)\z/s;

	return eval { decode_json($body) } // {};
}

###############################################################################
