#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for configuration errors: "nginx -t" on bad configurations of the
# request plane directives, the zone and the directives of the planes and
# APIs that need it, matching each exact "nginx: [emerg]" text and the line
# it names, and the valid configurations that pass.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(216);

my $conf = $t->testdir() . '/nginx-t.conf';

###############################################################################

# a valid configuration, with every request plane directive (the other
# planes need a zone: their own tests check them)

my ($code, $out) = $t->nginx_t(config(
	http => 'dynamo_rl_attempt_header X-Trace-Id;'
		. ' dynamo_rl_attempt_upstream_header x-request-id;'
		. ' dynamo_rl_strip_routing_headers on;',
	server => 'dynamo_rl_attempt_upstream_header off;',
	location => 'dynamo_rl_plane request;'
		. ' dynamo_rl_methods GET HEAD POST PUT DELETE PATCH OPTIONS;'
		. ' dynamo_rl_attempt_header X-Dynamo-Attempt-Id;'
		. q{ dynamo_rl_attempt_upstream_header "!#$%&'*+-.^_`|~0aZ";}
		. ' dynamo_rl_strip_routing_headers off;'
		. ' dynamo_rl_accel_buffering on;',
	extra => 'location /v2/ { dynamo_rl_plane request;'
		. ' dynamo_rl_methods POST; proxy_pass http://127.0.0.1:8081; }'
));

is($code, 0, 'valid: exit code');
like($out, qr/^nginx: the configuration file \Q$conf\E syntax is ok$/m,
	'valid: syntax is ok');
like($out, qr/^nginx: configuration file \Q$conf\E test is successful$/m,
	'valid: test is successful');
unlike($out, qr/\[(?:emerg|alert|warn)\]/, 'valid: no messages');

# dynamo_rl_plane

emerg($t, @$_) for (
	[ 'unknown plane', location => 'dynamo_rl_plane foo;', 'invalid plane "foo", it must be "request", "discovery" or "admin"' ],
	[ 'plane in upper case', location => 'dynamo_rl_plane REQUEST;', 'invalid plane "REQUEST", it must be "request", "discovery" or "admin"' ],
	[ 'duplicate plane', location => "dynamo_rl_plane request;\n dynamo_rl_plane admin;", '"dynamo_rl_plane" directive is duplicate' ],
	[ 'plane without a value', location => 'dynamo_rl_plane;', 'invalid number of arguments in "dynamo_rl_plane" directive' ],
	[ 'plane in server', server => 'dynamo_rl_plane request;', '"dynamo_rl_plane" directive is not allowed here' ],
	[ 'plane in http', http => 'dynamo_rl_plane request;', '"dynamo_rl_plane" directive is not allowed here' ],

	# dynamo_rl_methods

	[ 'bad method', location => 'dynamo_rl_methods GET FOO;', 'invalid method "FOO"' ],
	[ 'method in lower case', location => 'dynamo_rl_methods post;', 'invalid method "post"' ],
	[ 'duplicate method', location => 'dynamo_rl_methods GET POST GET;', 'duplicate method "GET"' ],
	[ 'duplicate dynamo_rl_methods', location => "dynamo_rl_methods GET;\n dynamo_rl_methods POST;", '"dynamo_rl_methods" directive is duplicate' ],
	[ 'methods without a value', location => 'dynamo_rl_methods;', 'invalid number of arguments in "dynamo_rl_methods" directive' ],
	[ 'methods in server', server => 'dynamo_rl_methods GET;', '"dynamo_rl_methods" directive is not allowed here' ],
);

# dynamo_rl_attempt_header and dynamo_rl_attempt_upstream_header

for my $directive (qw/ dynamo_rl_attempt_header
	dynamo_rl_attempt_upstream_header /)
{
	emerg($t, "$directive with a space", location => qq{$directive "X Y";},
		'invalid header name "X Y"');

	emerg($t, "$directive with a colon", server => "$directive a:b;",
		'invalid header name "a:b"');

	emerg($t, "$directive empty", http => qq{$directive "";},
		'invalid header name ""');

	emerg($t, "$directive duplicate",
		location => "$directive X-A;\n $directive X-B;",
		qq{"$directive" directive is duplicate});
}

($code, $out) = $t->nginx_t(config(
	location => 'dynamo_rl_plane request;'
		. ' dynamo_rl_attempt_upstream_header off;'));

is($code, 0, 'dynamo_rl_attempt_upstream_header off: accepted');

{
	my $text = config(location => 'dynamo_rl_plane request;'
		. "\n dynamo_rl_attempt_header off;");
	my $line = line_of($text, 'dynamo_rl_attempt_header off;');

	($code, $out) = $t->nginx_t($text);

	is($code, 1, 'dynamo_rl_attempt_header off: refused');
	like($out, qr/^nginx: \[emerg\] invalid header name "off" in \Q$conf\E:$line$/m,
		'dynamo_rl_attempt_header off: message');
}

# dynamo_rl_strip_routing_headers

emerg($t, 'strip bad flag', location => 'dynamo_rl_strip_routing_headers yes;',
	'invalid value "yes" in "dynamo_rl_strip_routing_headers" directive,'
	. ' it must be "on" or "off"');

emerg($t, 'strip duplicate', server => "dynamo_rl_strip_routing_headers on;\n"
	. ' dynamo_rl_strip_routing_headers off;',
	'"dynamo_rl_strip_routing_headers" directive is duplicate');

emerg($t, 'strip without a value', http => 'dynamo_rl_strip_routing_headers;',
	'invalid number of arguments in "dynamo_rl_strip_routing_headers"'
	. ' directive');

# the zone: the request plane needs it for the ledger and the gate, the
# other planes always; errors found when locations are merged name the
# line that closes the http block

emerg_merge($t, 'request plane without a zone',
	{ zone => '', location => 'dynamo_rl_plane request;' },
	'"dynamo_rl_plane request" requires "dynamo_rl_zone"'
	. ' for the attempt ledger and the gate');

emerg_merge($t, 'request plane, ledger off, without a zone',
	{ zone => '', location => 'dynamo_rl_plane request;'
		. ' dynamo_rl_ledger off;' },
	'"dynamo_rl_plane request" requires "dynamo_rl_zone"'
	. ' for the attempt ledger and the gate');

emerg_merge($t, 'request plane, ledger off in http, without a zone',
	{ zone => '', http => 'dynamo_rl_ledger off;',
		location => 'dynamo_rl_plane request;' },
	'"dynamo_rl_plane request" requires "dynamo_rl_zone"'
	. ' for the attempt ledger and the gate');

($code, $out) = $t->nginx_t(config(zone => '',
	location => 'dynamo_rl_plane request; dynamo_rl_ledger off;'
		. ' dynamo_rl_gate off;'));

is($code, 0, 'request plane, ledger and gate off, without a zone: accepted');
unlike($out, qr/\[(?:emerg|alert|warn)\]/,
	'request plane, ledger and gate off, without a zone: no messages');

($code, $out) = $t->nginx_t(config(zone => '',
	http => 'dynamo_rl_ledger off; dynamo_rl_gate off;',
	location => 'dynamo_rl_plane request;'));

is($code, 0, 'request plane, ledger and gate off in http: accepted');

($code, $out) = $t->nginx_t(config(zone => '', location => ''));

is($code, 0, 'no plane, no zone: accepted');

emerg_merge($t, 'admin plane without a zone',
	{ zone => '', location => 'dynamo_rl_plane admin;'
		. ' dynamo_rl_discovery /_rl_discovery;' },
	'"dynamo_rl_plane admin" requires "dynamo_rl_zone"');

emerg_merge($t, 'discovery plane without a zone',
	{ zone => '', location => 'dynamo_rl_plane discovery;' },
	'"dynamo_rl_plane discovery" requires "dynamo_rl_zone"');

emerg($t, 'attempts api without a zone',
	extra => 'location /rl/attempts/ { dynamo_rl_attempts_api; }',
	'"dynamo_rl_attempts_api" directive requires "dynamo_rl_zone"'
	. ' before it', zone => '');

# the admin plane

emerg_merge($t, 'admin without discovery',
	{ location => 'dynamo_rl_plane admin;' },
	'"dynamo_rl_plane admin" requires "dynamo_rl_discovery"');

emerg_merge($t, 'admin with satisfy any',
	{ location => 'dynamo_rl_plane admin;'
		. ' dynamo_rl_discovery /_rl_discovery; satisfy any;' },
	'"dynamo_rl_plane admin" cannot be used with "satisfy any"');

emerg_merge($t, 'admin with satisfy any from the server',
	{ server => 'satisfy any;', location => 'dynamo_rl_plane admin;'
		. ' dynamo_rl_discovery /_rl_discovery;' },
	'"dynamo_rl_plane admin" cannot be used with "satisfy any"');

($code, $out) = $t->nginx_t(config(
	server => 'dynamo_rl_discovery /_rl_discovery valid=2s max_size=1m;',
	location => 'dynamo_rl_plane admin; satisfy all;'
		. ' dynamo_rl_namespace exact=ns suffix=abc;'
		. ' dynamo_rl_admin_routes pause_generation control/sleep;',
	extra => 'location = /_rl_discovery { internal;'
		. ' proxy_pass http://127.0.0.1:8082/v1/rl/workers; }'
		. ' location /rl/attempts/ { dynamo_rl_attempts_api; }'));

is($code, 0, 'admin plane: accepted') or diag($out);
unlike($out, qr/\[(?:emerg|alert|warn)\]/, 'admin plane: no messages');

# dynamo_rl_zone

emerg($t, @$_) for (
	[ 'zone without a name', http => 'dynamo_rl_zone zone=:64k;', '"dynamo_rl_zone" must have "zone" parameter', zone => '' ],
	[ 'zone without zone=', http => 'dynamo_rl_zone size=64k;', 'invalid parameter "size=64k"', zone => '' ],
	[ 'zone bad size', http => 'dynamo_rl_zone zone=rl:abc;', 'invalid zone size "zone=rl:abc"', zone => '' ],
	[ 'zone without size', http => 'dynamo_rl_zone zone=rl;', 'invalid zone size "zone=rl"', zone => '' ],
	[ 'zone too small', http => 'dynamo_rl_zone zone=rl:16k;', 'zone "zone=rl:16k" is too small', zone => '' ],
	[ 'zone one byte too small', http => 'dynamo_rl_zone zone=rl:32767;', 'zone "zone=rl:32767" is too small', zone => '' ],
);

($code, $out) = $t->nginx_t(config(zone => 'dynamo_rl_zone zone=rl:32k;',
	location => 'dynamo_rl_plane request;'));

is($code, 0, 'zone of 8 pages: accepted') or diag($out);

emerg($t, @$_) for (
	[ 'zone duplicate', http => 'dynamo_rl_zone zone=rl2:64k;', '"dynamo_rl_zone" directive is duplicate' ],
	[ 'zone unknown parameter', http => 'dynamo_rl_zone zone=rl:64k foo;', 'invalid parameter "foo"', zone => '' ],
	[ 'zone without a value', http => 'dynamo_rl_zone;', 'invalid number of arguments in "dynamo_rl_zone" directive', zone => '' ],
	[ 'zone in server', server => 'dynamo_rl_zone zone=rl2:64k;', '"dynamo_rl_zone" directive is not allowed here' ],
	[ 'zone name of another module', http => "limit_req_zone \$binary_remote_addr zone=rl:64k rate=1r/s;\n dynamo_rl_zone zone=rl:64k;", 'the shared memory zone "rl" is already declared for a different use', zone => '' ],

	# dynamo_rl_discovery

	[ 'discovery bad uri', location => 'dynamo_rl_discovery foo;', 'invalid discovery location "foo"' ],
	[ 'discovery empty uri', server => 'dynamo_rl_discovery "";', 'invalid discovery location ""' ],
	[ 'discovery bad valid', location => 'dynamo_rl_discovery /d valid=abc;', 'invalid "valid" value "valid=abc"' ],
	[ 'discovery bad max_size', location => 'dynamo_rl_discovery /d max_size=abc;', 'invalid "max_size" value "max_size=abc"' ],
	[ 'discovery tiny max_size', http => 'dynamo_rl_discovery /d max_size=63;', 'invalid "max_size" value "max_size=63"' ],
	[ 'discovery unknown parameter', location => 'dynamo_rl_discovery /d foo=1;', 'invalid parameter "foo=1"' ],
	[ 'discovery duplicate', location => "dynamo_rl_discovery /d;\n dynamo_rl_discovery /e;", '"dynamo_rl_discovery" directive is duplicate' ],
	[ 'discovery without a value', location => 'dynamo_rl_discovery;', 'invalid number of arguments in "dynamo_rl_discovery" directive' ],

	# dynamo_rl_namespace

	[ 'namespace unknown mode', location => 'dynamo_rl_namespace foo;', 'invalid parameter "foo"' ],
	[ 'namespace exact with a bad second parameter', location => 'dynamo_rl_namespace exact=ns bad;', 'invalid parameter "bad"' ],
	[ 'namespace empty prefix', server => 'dynamo_rl_namespace prefix=;', 'invalid parameter "prefix="' ],
	[ 'namespace duplicate', location => "dynamo_rl_namespace any;\n dynamo_rl_namespace env;", '"dynamo_rl_namespace" directive is duplicate' ],
	[ 'namespace three parameters', http => 'dynamo_rl_namespace exact=a suffix=b c;', 'invalid number of arguments in "dynamo_rl_namespace" directive' ],

	# dynamo_rl_admin_routes

	[ 'admin routes invalid route', location => 'dynamo_rl_admin_routes ../x;', 'invalid route "../x"' ],
	[ 'admin routes second route invalid', server => 'dynamo_rl_admin_routes pause_generation a//b;', 'invalid route "a//b"' ],
	[ 'admin routes duplicate', location => "dynamo_rl_admin_routes a;\n dynamo_rl_admin_routes b;", '"dynamo_rl_admin_routes" directive is duplicate' ],

	# dynamo_rl_attempt_ttl, dynamo_rl_ledger, dynamo_rl_attempts_api

	[ 'attempt ttl bad time', location => 'dynamo_rl_attempt_ttl abc;', '"dynamo_rl_attempt_ttl" directive invalid value' ],
	[ 'attempt ttl duplicate', http => "dynamo_rl_attempt_ttl 1s;\n dynamo_rl_attempt_ttl 2s;", '"dynamo_rl_attempt_ttl" directive is duplicate' ],
	[ 'ledger bad flag', location => 'dynamo_rl_ledger yes;', 'invalid value "yes" in "dynamo_rl_ledger" directive, it must be "on" or "off"' ],
	[ 'attempts api with another handler', extra => "location /rl/ {\n proxy_pass http://127.0.0.1:8081; dynamo_rl_attempts_api; }", '"dynamo_rl_attempts_api" directive is duplicate' ],
	[ 'attempts api with a parameter', extra => 'location /rl/ { dynamo_rl_attempts_api on; }', 'invalid number of arguments in "dynamo_rl_attempts_api" directive' ],
	[ 'attempts api in server', server => 'dynamo_rl_attempts_api;', '"dynamo_rl_attempts_api" directive is not allowed here' ],

	# dynamo_rl_log_level

	[ 'log level bad value', location => 'dynamo_rl_log_level foo;', 'invalid value "foo"' ],
	[ 'log level crit', http => 'dynamo_rl_log_level crit;', 'invalid value "crit"' ],
);

($code, $out) = $t->nginx_t(config(
	location => 'dynamo_rl_plane request; dynamo_rl_log_level info;'
		. ' dynamo_rl_attempt_ttl 90s; dynamo_rl_ledger on;'));

is($code, 0, 'log level, ttl and ledger: accepted') or diag($out);

###############################################################################

# "nginx -t" on the configuration must fail with exactly one [emerg] line,
# the given text, on the line of the last directive of the snippet

#
# $t is passed, not closed over: a named sub that closed over it would keep
# it alive past Test::More's END check, where the harness's own two tests
# would break the plan

# (further name => value pairs go to config() as well, e.g. zone => '')

sub emerg {
	my ($t, $name, $where, $snippet, $message, %more) = @_;

	my $text = config(%more, $where => $snippet);
	my ($last) = $snippet =~ /([^\n]*)\z/;

	expect_emerg($t, $name, $text, line_of($text, $last), $message);
}

# the same for an error found when the locations are merged: nginx names
# the line that closes the http block

sub emerg_merge {
	my ($t, $name, $parts, $message) = @_;

	my $text = config(%$parts);
	my @lines = split /\n/, $text, -1;
	my ($line) = grep { $lines[$_ - 1] =~ /^\}$/ } reverse 1 .. @lines;

	expect_emerg($t, $name, $text, $line, $message);
}

sub expect_emerg {
	my ($t, $name, $text, $line, $message) = @_;

	my $file = $t->testdir() . '/nginx-t.conf';

	my ($c, $o) = $t->nginx_t($text);

	is($c, 1, "$name: nginx -t fails");
	like($o, qr/^nginx: \[emerg\] \Q$message\E in \Q$file\E:$line$/m,
		"$name: message") or diag($o);
	is(scalar(() = $o =~ /\[emerg\]/g), 1, "$name: one emerg");
}

# the number of the last line of $text that holds $needle

sub line_of {
	my ($text, $needle) = @_;

	$needle =~ s/^\s+//;
	my @lines = split /\n/, $text, -1;

	my ($n) = grep { index($lines[$_ - 1], $needle) >= 0 }
		reverse 1 .. @lines;

	return $n;
}

# the snippets are put in the http, server or location block; the "extra"
# goes in the server, after the location; "zone" replaces the zone on the
# first line of the http block ('' for none)

sub config {
	my (%s) = @_;

	$s{$_} //= '' for qw/ http server location extra /;
	$s{zone} //= 'dynamo_rl_zone zone=rl:5m'
		. ' state=%%TESTDIR%%/state/rl.state;';

	return <<"EOF";

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%% $s{zone}
    $s{http}
    server {
        listen 127.0.0.1:8080;
        $s{server}
        location /v1/ {
            $s{location}
            proxy_pass http://127.0.0.1:8081;
        }
        $s{extra}
    }
}

EOF
}

###############################################################################
