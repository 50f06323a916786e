package Test::DynamoRL::HTTP;

# (C) ngx_dynamo_rl_module developers

# What both sides of the tests' HTTP share: the harness reading nginx's
# answers (Test::DynamoRL) and the fake Dynamo reading nginx's requests
# (t/fake_dynamo.pl, which adds t/lib to @INC from its own path).
#
#     add_header($h, $name, $value)  adds a header to a hash of headers
#                           by name: the first value is a string, a
#                           second one makes an array of all of them

###############################################################################

use warnings;
use strict;

use base qw/ Exporter /;

our @EXPORT_OK = qw/ add_header /;

###############################################################################

sub add_header {
	my ($h, $name, $value) = @_;

	if (!exists $h->{$name}) {
		$h->{$name} = $value;

	} elsif (ref $h->{$name}) {
		push @{$h->{$name}}, $value;

	} else {
		$h->{$name} = [ $h->{$name}, $value ];
	}
}

###############################################################################

1;
