#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for configuration errors: "nginx -t" on bad configurations of the
# request plane directives, matching each exact "nginx: [emerg]" text and
# the line it names, and one valid configuration that passes.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(76);

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

emerg($t, 'unknown plane', location => 'dynamo_rl_plane foo;',
	'invalid plane "foo", it must be "request", "discovery" or "admin"');

emerg($t, 'plane in upper case', location => 'dynamo_rl_plane REQUEST;',
	'invalid plane "REQUEST",'
	. ' it must be "request", "discovery" or "admin"');

emerg($t, 'duplicate plane',
	location => "dynamo_rl_plane request;\n dynamo_rl_plane admin;",
	'"dynamo_rl_plane" directive is duplicate');

emerg($t, 'plane without a value', location => 'dynamo_rl_plane;',
	'invalid number of arguments in "dynamo_rl_plane" directive');

emerg($t, 'plane in server', server => 'dynamo_rl_plane request;',
	'"dynamo_rl_plane" directive is not allowed here');

emerg($t, 'plane in http', http => 'dynamo_rl_plane request;',
	'"dynamo_rl_plane" directive is not allowed here');

# dynamo_rl_methods

emerg($t, 'bad method', location => 'dynamo_rl_methods GET FOO;',
	'invalid method "FOO"');

emerg($t, 'method in lower case', location => 'dynamo_rl_methods post;',
	'invalid method "post"');

emerg($t, 'duplicate method', location => 'dynamo_rl_methods GET POST GET;',
	'duplicate method "GET"');

emerg($t, 'duplicate dynamo_rl_methods',
	location => "dynamo_rl_methods GET;\n dynamo_rl_methods POST;",
	'"dynamo_rl_methods" directive is duplicate');

emerg($t, 'methods without a value', location => 'dynamo_rl_methods;',
	'invalid number of arguments in "dynamo_rl_methods" directive');

emerg($t, 'methods in server', server => 'dynamo_rl_methods GET;',
	'"dynamo_rl_methods" directive is not allowed here');

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

###############################################################################

# "nginx -t" on the configuration must fail with exactly one [emerg] line,
# the given text, on the line of the last directive of the snippet

#
# $t is passed, not closed over: a named sub that closed over it would keep
# it alive past Test::More's END check, where the harness's own two tests
# would break the plan

sub emerg {
	my ($t, $name, $where, $snippet, $message) = @_;

	my $text = config($where => $snippet);
	my ($last) = $snippet =~ /([^\n]*)\z/;
	my $line = line_of($text, $last);
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
# goes in the server, after the location

sub config {
	my (%s) = @_;

	$s{$_} //= '' for qw/ http server location extra /;

	return <<"EOF";

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%% dynamo_rl_zone zone=rl:64k;
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
