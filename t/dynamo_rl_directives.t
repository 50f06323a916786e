#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for util/check-directives, the check of make lint that keeps the
# directive reference (docs/ngx_http_dynamo_rl_module.md) and the code's
# ngx_command_t tables in step: the tree as it is passes; a directive of
# the code without its section, a section without its directive, a name
# twice and a section whose Syntax line names another directive each
# fail with a line that names them.  Copies of the reference and the
# sources in the test's directory, changed one way each.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;

use lib 't/lib';
use Test::DynamoRL;

###############################################################################

my $REPO = abs_path(dirname(__FILE__) . '/..');
my $DOC = "$REPO/docs/ngx_http_dynamo_rl_module.md";
my $SRC = "$REPO/ngx_dynamo_rl_module";

my $t = Test::DynamoRL->new();
my $d = $t->testdir();

plan(tests => 11);

my $doc = slurp($DOC);
my @c = sort glob("$SRC/*.c");
my %src = map { (s{.*/}{}r, slurp($_)) } @c;

my ($rc, $out) = check($DOC, $SRC);

is($rc, 0, 'the tree: passes') or diag($out);

# a directive of the code without its section

(my $less = $doc) =~ s/^### dynamo_rl_gate\n.*?(?=^### )//ms;

($rc, $out) = check(write_doc($less), $SRC);

is($rc, 1, 'no section: fails');
like($out, qr/"dynamo_rl_gate" is a directive of the code without its section/,
	'no section: named');

# a section without its directive

(my $more = $doc) =~ s/^(## Directives\n)/$1\n### dynamo_rl_nothing\n\n```\nSyntax:  dynamo_rl_nothing;\n```\n\n/m;

($rc, $out) = check(write_doc($more), $SRC);

is($rc, 1, 'no directive: fails');
like($out, qr/"dynamo_rl_nothing" has a section .* but is no directive/,
	'no directive: named');

# a section whose Syntax names another directive

(my $wrong = $doc) =~ s/^Syntax:  dynamo_rl_ledger /Syntax:  dynamo_rl_gate /m;

($rc, $out) = check(write_doc($wrong), $SRC);

is($rc, 1, 'wrong Syntax: fails');
like($out, qr/the section "dynamo_rl_ledger" has the Syntax of "dynamo_rl_gate"/,
	'wrong Syntax: named');

# the code: a directive more, and one twice

my %added = %src;
$added{'ngx_http_dynamo_rl_module.c'} =~ s/(ngx_http_dynamo_rl_commands\[\] = \{\n)/$1\n    { ngx_string("dynamo_rl_extra"),\n      0, NULL, 0, 0, NULL },\n/;

($rc, $out) = check($DOC, write_src('added', %added));

is($rc, 1, 'a directive more: fails');
like($out, qr/"dynamo_rl_extra" is a directive of the code without its section/,
	'a directive more: named');

my %twice = %src;
$twice{'ngx_http_dynamo_rl_module.c'} =~ s/(ngx_http_dynamo_rl_commands\[\] = \{\n)/$1\n    { ngx_string("dynamo_rl_zone"),\n      0, NULL, 0, 0, NULL },\n/;

($rc, $out) = check($DOC, write_src('twice', %twice));

is($rc, 1, 'a directive twice: fails');
like($out, qr/"dynamo_rl_zone" twice in the code/, 'a directive twice: named');

###############################################################################

sub check {
	my ($doc, $src) = @_;

	my $out = `'$REPO/util/check-directives' '$doc' '$src' 2>&1`;

	return ($? >> 8, $out);
}

sub write_doc {
	my ($text) = @_;

	my $path = "$d/doc-" . int(rand(1e9)) . '.md';

	open my $fh, '>', $path or die "$path: $!\n";
	print $fh $text;
	close $fh;

	return $path;
}

sub write_src {
	my ($name, %files) = @_;

	mkdir "$d/$name";

	for my $f (keys %files) {
		open my $fh, '>', "$d/$name/$f" or die "$d/$name/$f: $!\n";
		print $fh $files{$f};
		close $fh;
	}

	return "$d/$name";
}

sub slurp {
	my ($path) = @_;

	open my $fh, '<', $path or die "$path: $!\n";
	local $/;

	return <$fh>;
}

###############################################################################
