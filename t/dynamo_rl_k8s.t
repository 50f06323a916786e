#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the Kubernetes manifests in examples/k8s/, without a cluster
# or a network: every YAML document parses and names its apiVersion, kind
# and metadata.name; the Services select the Deployment's pods and expose
# exactly the rollout port (8080) and the admin port (9090); the probes
# reach /healthz; the NetworkPolicy lets 9090 in only from orchestrators;
# and the ConfigMap's nginx.conf, with loopback upstreams, the locally
# built module and self-signed certificates, passes "nginx -t".  The store
# (redis.yaml): a StatefulSet with an append-only file on a claimed
# volume, no eviction and its ACL file from the Secret, reached by the
# gateway only; the gateway's dynamo_rl_store names its Service, and its
# password_file is the Secret's "password", mounted; and Debian's
# redis-server runs that redis.conf with what redis-acl writes: the
# gateway's user may run scripts on its own prefix and nothing else.
#
# The store's variants (store-tls/, store-sentinel/, store-managed/): the
# README names each; each file parses and replaces a base object whose
# text or structure it repeats but for the store; every file the store's
# parameters name is in a Secret mounted read-only; its nginx.conf, with
# certificates made here with openssl, passes "nginx -t".  store-tls:
# the store's certificate is for the URL's host, the gateway's is a
# client certificate of the same CA, Debian's redis-server runs its
# redis.conf (TLS only, a client certificate required), and the gateway
# runs its nginx.conf against it: the store is up.  store-sentinel:
# the URL names every sentinel pod and the master they watch, wait=1;
# its start scripts run Debian's redis-server and redis-sentinel with the
# ACL file of its redis-acl, on loopback: node 0 is the primary, node 1
# finds it through the sentinel and replicates it, the sentinel watches
# both, each as its own user; the gateway runs its nginx.conf and finds
# the primary through the sentinel: the store is up.  store-managed: rediss://
# outside the cluster, its CA from the Secret, egress to an address block.

###############################################################################

use warnings;
use strict;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;
use Test::More;

use lib 't/lib';
use Test::DynamoRL;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $REPO = abs_path(dirname(__FILE__) . '/..');
my $K8S = "$REPO/examples/k8s";

# the YAML parser: Debian's libyaml-libyaml-perl, installed when missing

my $yaml_error = load_yaml();

if ($yaml_error) {
	plan(tests => 1);
	fail('YAML::XS is needed to parse examples/k8s/*.yaml');
	diag($yaml_error);
	exit 1;
}

my $t = Test::DynamoRL->new();

plan(tests => 246);

###############################################################################

# the selectors that README.md and networkpolicy.yaml document

my %ROLLOUT_CLIENT = ('rl.example.com/rollout-client' => 'true');
my %ORCHESTRATOR = ('rl.example.com/orchestrator' => 'true');

my %API = (
	ConfigMap => 'v1',
	Service => 'v1',
	Deployment => 'apps/v1',
	NetworkPolicy => 'networking.k8s.io/v1',
	StatefulSet => 'apps/v1',
	Namespace => 'v1',
	Ingress => 'networking.k8s.io/v1',
);

# the Ingress controller that ingress.yaml is written for, as
# networkpolicy.yaml admits it

my %CONTROLLER_NS = ('kubernetes.io/metadata.name' => 'ingress-nginx');
my %CONTROLLER = ('app.kubernetes.io/name' => 'ingress-nginx');

# every document of every file

my @files = sort glob("$K8S/*.yaml");
my (@docs, %by_file);

is_deeply([ map { s{.*/}{}r } @files ], [ qw/ configmap.yaml
	deployment.yaml ingress.yaml namespace.yaml networkpolicy.yaml
	redis.yaml service-admin.yaml service-rollout.yaml / ],
	'the manifests');

for my $file (@files) {
	(my $name = $file) =~ s{.*/}{};

	my @d = eval { YAML::XS::LoadFile($file) };
	diag("$name: $@") if $@;

	@d = grep { defined } @d;
	ok(!$@ && @d, "$name: parses");

	for my $doc (@d) {
		push @docs, $doc;
		push @{$by_file{$name}}, $doc;
	}
}

my @bad = grep {
	ref $_ ne 'HASH'
	|| !defined $_->{apiVersion} || !length $_->{apiVersion}
	|| !defined $_->{kind} || !length $_->{kind}
	|| ref $_->{metadata} ne 'HASH'
	|| !defined $_->{metadata}{name} || !length $_->{metadata}{name}
} @docs;

is(scalar @bad, 0, 'every document has apiVersion, kind and metadata.name');

my @wrong = grep { ref $_ eq 'HASH' && defined $_->{kind}
	&& (!defined $API{$_->{kind}}
		|| ($_->{apiVersion} // '') ne $API{$_->{kind}}) } @docs;

is(join(', ', map { "$_->{kind} $_->{apiVersion}" } @wrong), '',
	'apiVersions served by Kubernetes 1.28+');

my %ns = map { ($_->{metadata}{namespace} // '') => 1 }
	grep { ($_->{kind} // '') ne 'Namespace' } @docs;
is(join(' ', sort keys %ns), 'dynamo', 'one namespace');

# which namespace.yaml creates, first

my ($nsdoc) = kind('namespace.yaml', 'Namespace');
is($nsdoc->{metadata}{name}, 'dynamo', 'namespace.yaml: creates it');
like(slurp("$K8S/README.md"), qr{^kubectl apply -f examples/k8s/namespace\.yaml
kubectl apply -f examples/k8s/$}m, 'README.md: the namespace first');

my ($cm) = kind('configmap.yaml', 'ConfigMap');
my ($dep) = kind('deployment.yaml', 'Deployment');
my ($np) = kind('networkpolicy.yaml', 'NetworkPolicy');
my ($rollout) = kind('service-rollout.yaml', 'Service');
my ($ing) = kind('ingress.yaml', 'Ingress');
my ($admin) = kind('service-admin.yaml', 'Service');
my ($rcm) = kind('redis.yaml', 'ConfigMap');
my ($rsvc) = kind('redis.yaml', 'Service');
my ($rss) = kind('redis.yaml', 'StatefulSet');
my ($rnp) = kind('redis.yaml', 'NetworkPolicy');

###############################################################################

# the Deployment

my $pod = $dep->{spec}{template} // {};
my %labels = %{$pod->{metadata}{labels} // {}};
my $spec = $pod->{spec} // {};
my ($c) = @{$spec->{containers} // []};
$c //= {};

ok(%labels, 'deployment: pod labels');
ok(subset($dep->{spec}{selector}{matchLabels}, \%labels),
	'deployment: selector matches the pod labels');
is(scalar @{$spec->{containers} // []}, 1, 'deployment: one container');
like($c->{image} // '', qr/debian/i, 'deployment: a Debian-based image');

# the image of "make image" (the Containerfile): its name, its user, the
# state directory it makes, and the command that the deployment repeats

my $image = `make -s --no-print-directory -C '$REPO' image-name 2>&1`;
chomp $image;

is($c->{image}, $image, 'deployment: the image "make image" builds');

my $cf = slurp("$REPO/Containerfile");
my ($cf_user) = $cf =~ /^USER\s+(\S+)\s*$/m;
my ($cf_state) = $cf =~ /install -d -o www-data -g www-data -m 0750 (\S+)/;

is(join(' ', $cf_user // '-', (getpwnam($cf_user // 'www-data'))[2] // '-'),
	'www-data ' . ($spec->{securityContext}{runAsUser} // '-'),
	'Containerfile: the image\'s user is the deployment\'s uid');
is(join(' ', map { $_->{mountPath} } grep { $_->{name} eq 'state' }
	@{$c->{volumeMounts} // []}), $cf_state // '-',
	'deployment: the state volume on the image\'s state directory');

my %cport = map { ($_->{name} // '') => $_->{containerPort} }
	@{$c->{ports} // []};
my %cnum = map { $_->{containerPort} => 1 } @{$c->{ports} // []};

ok($cnum{8080} && $cnum{9090}, 'deployment: ports 8080 and 9090');
is(join(' ', sort map { $_->{protocol} // 'TCP' } @{$c->{ports} // []}),
	'TCP TCP TCP', 'deployment: TCP ports');

my $sc = $spec->{securityContext} // {};
my $csc = $c->{securityContext} // {};

ok($sc->{runAsNonRoot} || $csc->{runAsNonRoot}, 'deployment: runAsNonRoot');
ok(($sc->{runAsUser} // $csc->{runAsUser} // 0) > 0,
	'deployment: a non-root uid');
ok(defined $csc->{allowPrivilegeEscalation}
	&& !$csc->{allowPrivilegeEscalation},
	'deployment: no privilege escalation');
ok($csc->{readOnlyRootFilesystem}, 'deployment: read-only root');
is_deeply($csc->{capabilities}{drop}, [ 'ALL' ],
	'deployment: capabilities dropped');

ok($c->{resources}{requests}{cpu} && $c->{resources}{requests}{memory},
	'deployment: resource requests');

# probes of a port that the configuration serves: readiness on
# dynamo_rl_ready's /ready, liveness on /healthz (nginx answers)

my %probe_port;
my %probe_path = (readinessProbe => '/ready', livenessProbe => '/healthz');

for my $p (qw/ readinessProbe livenessProbe /) {
	my $g = $c->{$p}{httpGet} // {};
	my $port = container_port($g->{port});

	is($g->{path}, $probe_path{$p}, "deployment: $p path");
	ok($port && $port != 8080 && $port != 9090,
		"deployment: $p on a port of its own");

	$probe_port{$port // 0} = 1;
}

is(scalar keys %probe_port, 1, 'deployment: both probes on one port');

# the ConfigMap is mounted where nginx reads it

my %vol = map { $_->{name} => $_ } @{$spec->{volumes} // []};
my ($mount) = grep { ($vol{$_->{name}}{configMap}{name} // '') eq
	($cm->{metadata}{name} // '-') } @{$c->{volumeMounts} // []};

ok($mount, 'deployment: the ConfigMap is mounted');

my @cmd = (@{$c->{command} // []}, @{$c->{args} // []});
my ($conf_path) = map { $cmd[$_ + 1] } grep { $cmd[$_] eq '-c' } 0 .. $#cmd;

is($conf_path, ($mount->{mountPath} // '-') . '/nginx.conf',
	'deployment: nginx -c names the mounted nginx.conf');
ok(grep({ $_ eq 'daemon off;' } @cmd), 'deployment: daemon off');

my %mounted = map { $_->{mountPath} => $_ } @{$c->{volumeMounts} // []};

ok($mounted{'/tmp'} && $vol{$mounted{'/tmp'}{name}}{emptyDir},
	'deployment: a writable /tmp');
ok($mounted{'/etc/nginx/tls'} && $vol{$mounted{'/etc/nginx/tls'}{name}}
	{secret}{secretName}, 'deployment: TLS from a Secret');

# dynamo_rl_zone state=: its directory is a subdirectory of a writable
# volume, which nginx creates as its own (an emptyDir is mode 0777, which
# nginx refuses for the state file's directory)

my ($state_dir) = ($cm->{data}{'nginx.conf'} // '')
	=~ m{\bdynamo_rl_zone\s[^;]*\bstate=(/\S+)/[^/\s;]+[\s;]};
(my $state_volume = $state_dir // '-') =~ s{/[^/]+$}{};
my $sm = $mounted{$state_volume} // {};

ok($sm->{name} && !$sm->{readOnly} && ($vol{$sm->{name}}{emptyDir}
	|| $vol{$sm->{name}}{persistentVolumeClaim}),
	'deployment: the state file\'s directory is a writable volume');

###############################################################################

# the Services

service($rollout, 'rollout', 8080);
service($admin, 'admin', 9090);

isnt($rollout->{metadata}{name}, $admin->{metadata}{name},
	'services: two names');

###############################################################################

# the NetworkPolicy

ok(subset($np->{spec}{podSelector}{matchLabels}, \%labels),
	'networkpolicy: selects the gateway pods');
is(join(' ', sort @{$np->{spec}{policyTypes} // []}), 'Egress Ingress',
	'networkpolicy: ingress and egress');

my @in = @{$np->{spec}{ingress} // []};

is(scalar(grep { !@{$_->{ports} // []} } @in), 0,
	'networkpolicy: every ingress rule names its ports');
is(scalar(grep { !@{$_->{from} // []} } @in), 0,
	'networkpolicy: every ingress rule names its sources');

my @in_ports = map { rule_ports($_) } @in;
is(join(' ', sort { $a <=> $b } grep { /^\d+$/ } @in_ports), '8080 9090',
	'networkpolicy: ingress to 8080 and 9090 only');

for my $port (8080, 9090) {
	my @rules = grep { my $r = $_; grep { $_ eq $port } rule_ports($r) } @in;
	my @peers = map { @{$_->{from} // []} } @rules;

	if ($port == 9090) {
		is(scalar @peers, 1, "networkpolicy: $port from one peer");
		ok((grep { only_pods($_, \%ORCHESTRATOR) } @peers) == @peers
			&& @peers,
			"networkpolicy: $port only from the orchestrator selector");
		next;
	}

	# the rollout port: trainers, and the Ingress controller's pods

	is(scalar @peers, 2, "networkpolicy: $port from two peers");
	ok(scalar(grep { only_pods($_, \%ROLLOUT_CLIENT) } @peers) == 1,
		"networkpolicy: $port from the rollout client selector");
	ok(scalar(grep { controller($_) } @peers) == 1,
		"networkpolicy: $port from the Ingress controller's pods");
}

###############################################################################

# the Ingress: the rollout plane only, as the controller must pass it

my @paths = map { @{$_->{http}{paths} // []} } @{$ing->{spec}{rules} // []};
my %a = %{$ing->{metadata}{annotations} // {}};

is(join(' ', map { "$_->{backend}{service}{name}:"
	. ($_->{backend}{service}{port}{name}
		// $_->{backend}{service}{port}{number} // '') } @paths),
	"$rollout->{metadata}{name}:rollout", 'ingress: the rollout Service only');
is(scalar(grep { $_->{backend}{service}{name} eq $admin->{metadata}{name} }
	@paths), 0, 'ingress: never the trusted listener');
is(join(' ', map { ($_->{targetPort} // '') . ':' . ($_->{port} // '') }
	grep { $_->{name} eq 'rollout' } @{$rollout->{spec}{ports} // []}),
	'rollout:8080', 'ingress: the port named rollout is 8080');
is($ing->{spec}{ingressClassName}, 'nginx', 'ingress: ingress-nginx\'s class');
ok(@{$ing->{spec}{tls} // []}, 'ingress: TLS');

my ($body_limit) = ($cm->{data}{'nginx.conf'} // '')
	=~ /^\s*client_max_body_size\s+(\S+);/m;

is($a{'nginx.ingress.kubernetes.io/proxy-body-size'}, $body_limit,
	'ingress: the bodies the gateway takes');
is(join(' ', map { $a{"nginx.ingress.kubernetes.io/$_"} // '-' }
	qw/ proxy-buffering proxy-request-buffering /), 'off off',
	'ingress: SSE and bodies unbuffered');
cmp_ok($a{'nginx.ingress.kubernetes.io/proxy-read-timeout'} // 0, '>=', 3600,
	'ingress: an hour for a stream');
is(join(' ', map { $a{"nginx.ingress.kubernetes.io/$_"} // '-' }
	qw/ proxy-next-upstream proxy-next-upstream-tries /), 'error timeout 1',
	'ingress: a POST never sent twice');

ok(!grep({ $_->{namedPort} } map { @{$_->{ports} // []} } @in),
	'networkpolicy: numeric ports');

my @out = @{$np->{spec}{egress} // []};

is(scalar(grep { !@{$_->{ports} // []} || !@{$_->{to} // []} } @out), 0,
	'networkpolicy: every egress rule names destinations and ports');
ok(!grep({ $_->{ipBlock} } map { @{$_->{to} // []} } @out),
	'networkpolicy: no egress to address blocks');

my %egress;

for my $r (@out) {
	for my $peer (@{$r->{to}}) {
		my $sel = $peer->{podSelector}{matchLabels} // {};
		my $key = join ',', map { "$_=$sel->{$_}" } sort keys %$sel;
		$egress{$key}{($_->{protocol} // 'TCP') . "/$_->{port}"} = 1
			for @{$r->{ports}};
	}
}

is(join(' ', sort keys %{$egress{'nvidia.com/dynamo-component-type=frontend'}
	// {}}), 'TCP/8000 TCP/8001',
	'networkpolicy: egress to the frontend and the RL listener');
is(scalar keys %{$egress{'nvidia.com/dynamo-component-type=worker'} // {}},
	1, 'networkpolicy: egress to the workers\' system port');
is(join(' ', sort keys %{$egress{'k8s-app=kube-dns'} // {}}),
	'TCP/53 UDP/53', 'networkpolicy: DNS');
is(join(' ', sort keys %{$egress{'app.kubernetes.io/name=dynamo-rl-redis'}
	// {}}), 'TCP/6379', 'networkpolicy: egress to the store');
is(scalar keys %egress, 4, 'networkpolicy: no other egress');

###############################################################################

# the store: a StatefulSet, its Service and its NetworkPolicy

my $rpod = $rss->{spec}{template} // {};
my %rlabels = %{$rpod->{metadata}{labels} // {}};
my $rspec = $rpod->{spec} // {};
my ($rc) = @{$rspec->{containers} // []};
$rc //= {};

is($rss->{spec}{replicas}, 1, 'store: one primary');
ok(subset($rss->{spec}{selector}{matchLabels}, \%rlabels),
	'store: selector matches the pod labels');
is($rss->{spec}{serviceName}, $rsvc->{metadata}{name},
	'store: the StatefulSet names its Service');
ok(!subset(\%rlabels, \%labels) && !subset(\%labels, \%rlabels),
	'store: labels apart from the gateway\'s');
like($rc->{image} // '', qr/^[\w.\/-]*redis:7\.0-bookworm$/,
	'store: Redis 7.0 on Debian 12');

my %rvol = map { $_->{name} => $_ } @{$rspec->{volumes} // []};
my %rmounted = map { $_->{mountPath} => $_ } @{$rc->{volumeMounts} // []};
my @rcmd = (@{$rc->{command} // []}, @{$rc->{args} // []});
my ($rconf_path) = grep { /\.conf$/ } @rcmd;
(my $rconf_dir = $rconf_path // '-') =~ s{/[^/]+$}{};

is(($rvol{($rmounted{$rconf_dir} // {})->{name} // '-'} // {})
	->{configMap}{name}, $rcm->{metadata}{name},
	'store: redis-server reads the ConfigMap\'s redis.conf');

my $rconf = $rcm->{data}{'redis.conf'} // '';
my %rset = map { /^\s*(\S+)\s+(.*?)\s*$/ ? (lc $1, $2) : () }
	grep { !/^\s*#/ } split /\n/, $rconf;

is($rset{appendonly}, 'yes', 'store: appendonly yes');
is($rset{'maxmemory-policy'}, 'noeviction', 'store: noeviction');
ok(($rset{maxmemory} // '') =~ /^\d+[kmg]?b?$/i && $rset{maxmemory} ne '0',
	'store: a maxmemory');

my ($claim) = grep { ($_->{metadata}{name} // '') eq
	(($rmounted{$rset{dir} // '-'} // {})->{name} // '-') }
	@{$rss->{spec}{volumeClaimTemplates} // []};

ok($claim && $claim->{spec}{resources}{requests}{storage},
	'store: the data directory on a claimed volume');

(my $acl_dir = $rset{aclfile} // '-') =~ s{/[^/]+$}{};
my $acl_vol = $rvol{($rmounted{$acl_dir} // {})->{name} // '-'} // {};

is($acl_vol->{secret}{secretName}, 'dynamo-rl-redis',
	'store: the ACL file from the Secret');
is(join(' ', map { "$_->{key}:$_->{path}" } @{$acl_vol->{secret}{items}
	// []}), 'users.acl:users.acl', 'store: only its users.acl');

my $rsc = $rspec->{securityContext} // {};
my $rcsc = $rc->{securityContext} // {};

ok($rsc->{runAsNonRoot} && $rcsc->{readOnlyRootFilesystem}
	&& defined $rcsc->{allowPrivilegeEscalation}
	&& !$rcsc->{allowPrivilegeEscalation},
	'store: non-root, read-only root, no privilege escalation');
ok($rc->{resources}{limits}{memory} && $rc->{readinessProbe},
	'store: a memory limit and a readiness probe');

my ($rport) = map { $_->{containerPort} } @{$rc->{ports} // []};
my ($rsp) = @{$rsvc->{spec}{ports} // []};

is($rport, 6379, 'store: container port 6379');
ok(subset($rsvc->{spec}{selector}, \%rlabels), 'store service: selects it');
is(join(' ', map { $_->{port} } @{$rsvc->{spec}{ports} // []}), '6379',
	'store service: exactly port 6379');

ok(subset($rnp->{spec}{podSelector}{matchLabels}, \%rlabels),
	'store networkpolicy: selects the store');
is(join(' ', map { rule_ports($_) } @{$rnp->{spec}{ingress} // []}), '6379',
	'store networkpolicy: ingress to 6379 only');
is(scalar(grep { !only_pods($_, \%labels) }
	map { @{$_->{from} // []} } @{$rnp->{spec}{ingress} // []}), 0,
	'store networkpolicy: from the gateway\'s pods only');
is_deeply($rnp->{spec}{egress}, [], 'store networkpolicy: no egress');

###############################################################################

# the ConfigMap's nginx.conf

my $conf = $cm->{data}{'nginx.conf'} // '';
(my $bare = $conf) =~ s/#.*//g;

# an emptyDir is writable by everyone, which nginx refuses for the state
# file's directory: the file is in a directory nginx makes in it

like($bare, qr{\bstate=\Q${\($cf_state // '-')}\E/[\w.]+/[\w.]+;},
	'nginx.conf: the state file below the image\'s state directory');

like($bare, qr{^load_module\s+/usr/lib/nginx/modules/
	ngx_http_dynamo_rl_module\.so;}mx, 'nginx.conf: the module is loaded');

my %servers = servers($bare);

ok($servers{8080}, 'nginx.conf: a server on 8080');
unlike($servers{8080} // '', qr/\bssl\b|dynamo_rl_plane\s+(?:admin|discovery)
	|dynamo_rl_(?:gate_api|attempts_api|status|metrics)\b/x,
	'nginx.conf: 8080 serves the request plane only');
like($servers{8080} // '', qr/dynamo_rl_plane\s+request;/,
	'nginx.conf: 8080 has the request plane');
like($servers{8080} // '', qr/proxy_buffering\s+off;/,
	'nginx.conf: 8080 does not buffer SSE');
like($servers{8080} // '', qr{location\s+=\s+/generate\s*\{\s*dynamo_rl_plane\s+request;},
	'nginx.conf: 8080 routes SGLang\'s /generate on the request plane');
like($servers{9090} // '', qr{location\s+=\s+/verify/v1/completions\s*\{\s*dynamo_rl_plane\s+request;\s*dynamo_rl_gate\s+off;},
	'nginx.conf: 9090 has rl-refresh\'s default generation check, gate off');
like(slurp("$REPO/examples/rl-refresh"),
	qr{^VERIFY_PATH = '/verify/v1/completions'$}m,
	'rl-refresh: its default generation check is that location');
unlike($bare, qr/proxy_ignore_client_abort\s+on/,
	'nginx.conf: client aborts reach Dynamo');

like($servers{9090} // '', qr/^\s*listen\s+9090\s+ssl;/m,
	'nginx.conf: 9090 is TLS');
like($servers{9090} // '', qr/ssl_verify_client\s+on;/,
	'nginx.conf: 9090 verifies client certificates');
like($servers{9090} // '', qr/ssl_client_certificate\s+\S+;/,
	'nginx.conf: 9090 has the clients\' CA');
like($servers{9090} // '', qr/dynamo_rl_plane\s+admin;/,
	'nginx.conf: 9090 has the admin plane');

# the store: dynamo_rl_store names its Service, the password from the
# Secret's "password", mounted

my ($store) = $bare =~ /^\s*dynamo_rl_store\s+([^;]*);/m;
my @sp = split ' ', $store // '';
my %sparam = map { /^(\w+)=(.*)$/ ? ($1, $2) : () } @sp[1 .. $#sp];

is($sp[0], 'redis://' . $rsvc->{metadata}{name} . '.'
	. $rsvc->{metadata}{namespace} . ".svc.cluster.local:$rsp->{port}",
	'nginx.conf: dynamo_rl_store names the store\'s Service');

(my $pw_dir = $sparam{password_file} // '-') =~ s{/([^/]+)$}{};
my $pw_file = $1 // '-';
my $pw_vol = $vol{($mounted{$pw_dir} // {})->{name} // '-'} // {};

is($pw_vol->{secret}{secretName}, 'dynamo-rl-redis',
	'deployment: the password_file from the Secret');
is(join(' ', map { "$_->{key}:$_->{path}" } @{$pw_vol->{secret}{items}
	// []}), "password:$pw_file", 'deployment: only its password');
ok($mounted{$pw_dir} && $mounted{$pw_dir}{readOnly},
	'deployment: the password read-only');
ok($sparam{user} && !$sparam{password}, 'nginx.conf: a user, no password');
unlike($bare, qr/\bon_error=local\b/, 'nginx.conf: the store fails closed');

my ($health) = keys %probe_port;

like($servers{$health} // '', qr/location\s+=\s+\/healthz\s*\{\s*return\s+200;/,
	'nginx.conf: the probes\' port serves /healthz');
like($servers{$health} // '',
	qr/location\s+=\s+\/ready\s*\{\s*dynamo_rl_ready;\s*\}/,
	'nginx.conf: the probes\' port serves /ready');
unlike($servers{$health} // '', qr/dynamo_rl_(?!ready;)|proxy_pass/,
	'nginx.conf: the probes\' port serves nothing else');

# nginx -t, with loopback upstreams, the local build and test certificates

my $d = $t->testdir();
my $so = ($ENV{TEST_NGINX_MODULES} // "$REPO/build")
	. '/ngx_http_dynamo_rl_module.so';
$so = abs_path($so) // $so;

my $local = $conf;
my $n;

$n = $local =~ s{^(\s*server\s+)[A-Za-z][A-Za-z0-9.-]*(:\d+)}
	{${1}127.0.0.1$2}mg;
is($n, 2, 'nginx -t: two upstream servers on loopback');

$n = $local =~ s{(?<![\w/])/tmp/}{%%TESTDIR%%/}g;
ok($n >= 6, 'nginx -t: /tmp in the test directory');

# after /tmp: the tree itself may be under /tmp

$n = $local =~ s{^(load_module\s+)/usr/lib/nginx/modules/
	(ngx_http_dynamo_rl_module\.so;)}{$1$so;}mx;
is($n, 1, 'nginx -t: module path replaced');

$n = $local =~ s{(\bstate=)/\S+/}{$1%%TESTDIR%%/state/}g;
is($n, 1, 'nginx -t: state file in the test directory');

$n = $local =~ s{/etc/nginx/tls/}{%%TESTDIR%%/tls/}g;
is($n, 3, 'nginx -t: certificate paths in the test directory');

$n = $local =~ s{redis://[A-Za-z][A-Za-z0-9.-]*:}{redis://127.0.0.1:}g;
is($n, 1, 'nginx -t: the store on loopback');

$n = $local =~ s{(password_file=)/\S+/}{$1%%TESTDIR%%/}g;
is($n, 1, 'nginx -t: the password file in the test directory');

# the Secret as redis-acl writes it

my $acl_out = `$K8S/redis-acl $d/secret 2>&1`;
is($?, 0, 'redis-acl: exit 0') or diag($acl_out);

$t->write_file($pw_file, slurp("$d/secret/password"));

my $tls = certificates("$d/tls");
is($tls, '', 'nginx -t: test certificates') or diag($tls);

# an orchestrator's certificate, for the gateways the variants run

my $orch_cmd = "cd $d/tls && openssl req -newkey ec -pkeyopt"
	. " ec_paramgen_curve:prime256v1 -nodes -subj /CN=orchestrator"
	. " -keyout orch.key -out orch.csr 2>&1 && openssl x509 -req"
	. " -in orch.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1"
	. " -out orch.crt 2>&1";
my $orch = `$orch_cmd`;
is($?, 0, 'an orchestrator\'s certificate') or diag($orch);

SKIP: {
	skip("module not built: $so is missing", 3) unless -f $so;

	my ($code, $out) = $t->nginx_t($local);

	my $file = "$d/nginx-t.conf";

	is($code, 0, 'nginx -t: exit code') or diag($out);
	like($out, qr/^nginx: configuration file \Q$file\E test is successful$/m,
		'nginx -t: test is successful');
	unlike($out, qr/\[(?:emerg|alert|crit|error|warn)\]/,
		'nginx -t: no messages') or diag($out);
}

# Debian's redis-server runs redis.conf, with a port, data directory and
# ACL file of ours, and the ACL file of redis-acl: the gateway's user may
# run scripts on keys under its prefix, publish there, and read a record;
# anything else is refused, and so is everyone without the password

my $redis = `sh -c 'command -v redis-server' 2>/dev/null`;
chomp $redis;

SKIP: {
	skip('no redis-server', 12) unless $redis;

	my $port = port(8079);
	mkdir "$d/redis-data";

	my $rc_local = $rconf;
	$rc_local =~ s/^bind .*$/bind 127.0.0.1/m;
	$rc_local =~ s/^port .*$/port $port/m;
	$rc_local =~ s/^dir .*$/dir $d\/redis-data/m;
	$rc_local =~ s/^aclfile .*$/aclfile $d\/secret\/users.acl/m;
	$t->write_file('redis.conf', $rc_local);

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', "$d/redis.out";
		open STDERR, '>&', \*STDOUT;
		{ exec $redis, "$d/redis.conf"; }
		POSIX::_exit(127);
	}

	ok($t->waitforsocket("127.0.0.1:$port"), 'redis-server: runs redis.conf')
		or diag(slurp("$d/redis.out"));

	my $pw = slurp("$d/secret/password");
	my $user = $sparam{user} // '-';
	my $p = "{$sparam{prefix}}";

	is(resp($port, [ 'PING' ]), '-NOAUTH Authentication required.',
		'redis-server: nothing without the password');
	is(resp($port, [ 'AUTH', 'default', $pw ]) =~ s/ .*//r, '-WRONGPASS',
		'redis-server: the default user is off');
	is(resp($port, [ 'AUTH', $user, 'wrong' ]) =~ s/ .*//r, '-WRONGPASS',
		'redis-server: a wrong password refused');

	my @auth = ([ 'AUTH', $user, $pw ]);

	is(resp($port, @auth, [ 'EVAL', "redis.call('HSET', KEYS[1], 'state',"
		. " 'closed'); redis.call('PUBLISH', KEYS[1], '1');"
		. " return redis.call('TIME')[1] + 0", 1, "$p:gate" ]) =~ /^:\d+$/
		? 'ok' : 'no', 'ok', 'redis-server: a script on its own keys');
	like(resp($port, @auth, [ 'SCRIPT', 'LOAD', 'return 1' ]),
		qr/^\$[0-9a-f]{40}$/, 'redis-server: SCRIPT LOAD');
	is(resp($port, @auth, [ 'HGET', "$p:gate", 'state' ]), '$closed',
		'redis-server: a read of its own keys');
	is(resp($port, @auth, [ 'SELECT', '0' ]), '+OK', 'redis-server: SELECT');
	like(resp($port, @auth, [ 'GET', 'other' ]), qr/^-NOPERM/,
		'redis-server: other keys refused');
	like(resp($port, @auth, [ 'EVAL', "return redis.call('GET', KEYS[1])",
		1, 'other' ]), qr/^-NOPERM/,
		'redis-server: other keys refused in scripts');
	like(resp($port, @auth, [ 'FLUSHALL' ]), qr/^-NOPERM/,
		'redis-server: FLUSHALL refused');
	like(resp($port, @auth, [ 'CONFIG', 'SET', 'maxmemory-policy',
		'allkeys-lru' ]), qr/^-NOPERM/, 'redis-server: CONFIG refused');

	kill 'TERM', $pid;
	waitpid($pid, 0);
}

###############################################################################

# the store's variants: each directory holds the files that replace those
# of the same name here (or come in addition), for the same objects;
# apart from the store, each replacement says what the base says

my %VARIANT = (
	'store-tls' => [ qw/ certificates.yaml configmap.yaml deployment.yaml
		redis.yaml / ],
	'store-sentinel' => [ qw/ configmap.yaml networkpolicy.yaml redis-acl
		redis.yaml / ],
	'store-managed' => [ qw/ configmap.yaml deployment.yaml
		networkpolicy.yaml / ],
);

my %VAPI = (%API, Issuer => 'cert-manager.io/v1',
	Certificate => 'cert-manager.io/v1');

my $readme = slurp("$K8S/README.md");
my %base_doc = map { ("$_->{kind}/$_->{metadata}{name}" => $_) } @docs;

my (%vdocs, %vconf, %vdep);

# the base's objects as in their files: the checks above autovivify

my ($dep0) = YAML::XS::LoadFile("$K8S/deployment.yaml");
my ($np0) = YAML::XS::LoadFile("$K8S/networkpolicy.yaml");

for my $v (sort keys %VARIANT) {
	my @f = map { s{.*/}{}r } glob("$K8S/$v/*");

	is(join(' ', sort @f), join(' ', @{$VARIANT{$v}}), "$v: the files");
	ok($readme =~ m{^## .*\Q$v/\E}m, "$v: README.md has its section");
	ok($readme =~ m{^\| `\Q$v/\E` \|}m, "$v: README.md's table names it");

	for my $name (grep { /\.yaml$/ } @f) {
		my @d = eval { YAML::XS::LoadFile("$K8S/$v/$name") };
		diag("$v/$name: $@") if $@;
		@d = grep { defined } @d;

		ok(!$@ && @d, "$v/$name: parses");

		my @bad = grep { ref $_ ne 'HASH' || !length($_->{kind} // '')
			|| ($VAPI{$_->{kind}} // '-') ne ($_->{apiVersion} // '')
			|| !length($_->{metadata}{name} // '')
			|| ($_->{metadata}{namespace} // '') ne 'dynamo' } @d;

		is(scalar @bad, 0, "$v/$name: kinds, apiVersions, names, namespace");

		push @{$vdocs{$v}{$name}}, @d;
	}

	my ($cmv) = grep { $_->{kind} eq 'ConfigMap' }
		@{$vdocs{$v}{'configmap.yaml'} // []};
	$vconf{$v} = ($cmv // {})->{data}{'nginx.conf'} // '';

	my ($depv) = grep { $_->{kind} eq 'Deployment' }
		@{$vdocs{$v}{'deployment.yaml'} // []};
	$vdep{$v} = $depv // $dep0;

	# the same objects as the base's, and the same text but the store's

	is(join(' ', map { "$_->{kind}/$_->{metadata}{name}" } grep {
		!$base_doc{"$_->{kind}/$_->{metadata}{name}"} }
		@{$vdocs{$v}{'configmap.yaml'} // []},
		@{$vdocs{$v}{'deployment.yaml'} // []},
		@{$vdocs{$v}{'networkpolicy.yaml'} // []}), '',
		"$v: replaces the base's objects");

	is(conf_but_store($vconf{$v}), conf_but_store($conf),
		"$v: nginx.conf is the base's but for the store");
	is_deeply(dep_but_store($vdep{$v}), dep_but_store($dep0),
		"$v: the Deployment is the base's but for the store's Secrets");

	my ($npv) = @{$vdocs{$v}{'networkpolicy.yaml'} // [ $np0 ]};
	is_deeply(np_but_store($npv), np_but_store($np0),
		"$v: the NetworkPolicy is the base's but for the store");
}

# every file the store's parameters name is in a Secret mounted
# read-only; nginx -t with each configuration, with certificates made
# here where it names files

my $vca = ca_chain("$d/vtls");
is($vca, '', 'variants: test CA and certificates') or diag($vca);

my %VFILE = (
	'ca.crt' => "$d/vtls/ca.crt",
	'tls.crt' => "$d/vtls/client.crt",
	'tls.key' => "$d/vtls/client.key",
	'password' => "$d/secret/password",
);

my %vstore;

for my $v (sort keys %VARIANT) {
	my $bare_v = $vconf{$v} =~ s/#.*//gr;
	my ($line) = $bare_v =~ /^\s*dynamo_rl_store\s+([^;]*);/m;
	my @p = split ' ', $line // '';
	my %param = map { /^(\w+)=(.*)$/ ? ($1, $2) : () } @p[1 .. $#p];

	$vstore{$v} = { url => $p[0] // '', param => \%param, bare => $bare_v };

	my @files = map { $param{$_} }
		grep { /^(?:password_file|tls_\w*certificate\w*)$/ } sort keys %param;
	my @where = map { join ':', secret_file($vdep{$v}, $_) } @files;

	is(scalar(grep { !/^\S+:\S+:ro$/ } @where), 0,
		"$v: the store's files are in Secrets mounted read-only")
		or diag(join ' ', map { "$files[$_]=$where[$_]" } 0 .. $#files);

	my $local = localise($vconf{$v}, $d);
	$vstore{$v}{local} = \$local;

	for my $f (@files) {
		my ($dir, $key) = $f =~ m{^(.*)/([^/]+)$};
		my $to = "$d/v/$v" . $dir;
		system('mkdir', '-p', $to);
		system('cp', $VFILE{$key} // '/dev/null', "$to/$key");
		$local =~ s{(=)\Q$f\E(?=[\s;])}{$1$to/$key}g;
	}

	SKIP: {
		skip("module not built: $so is missing", 2) unless -f $so;

		my ($code, $out) = $t->nginx_t($local);

		is($code, 0, "$v: nginx -t") or diag($out);
		unlike($out, qr/\[(?:emerg|alert|crit|error|warn)\]/,
			"$v: nginx -t, no messages") or diag($out);
	}
}

# TLS to the in-cluster store: its certificate names the URL's host, the
# store is TLS only with client certificates, the gateway's Secret is the
# client certificate's, both from one CA

{
	my $v = 'store-tls';
	my $s = $vstore{$v};
	my %cert = map { ($_->{metadata}{name} => $_) } grep {
		$_->{kind} eq 'Certificate' } @{$vdocs{$v}{'certificates.yaml'} // []};
	my ($rcmv) = grep { $_->{kind} eq 'ConfigMap' }
		@{$vdocs{$v}{'redis.yaml'} // []};
	my ($rssv) = grep { $_->{kind} eq 'StatefulSet' }
		@{$vdocs{$v}{'redis.yaml'} // []};
	my ($rsvcv) = grep { $_->{kind} eq 'Service' }
		@{$vdocs{$v}{'redis.yaml'} // []};

	my ($host, $port) = $s->{url} =~ m{^rediss://([^:/]+):(\d+)$};

	is($host // '-', "$rsvcv->{metadata}{name}.dynamo.svc.cluster.local",
		"$v: rediss:// to the store's Service");
	is($port // '-', $rsvcv->{spec}{ports}[0]{port}, "$v: its port");

	my %rs = map { /^\s*(\S+)\s+(.*?)\s*$/ ? (lc $1, $2) : () }
		grep { !/^\s*#/ } split /\n/, $rcmv->{data}{'redis.conf'} // '';

	is(join(' ', map { $rs{$_} // '-' } qw/ port tls-port tls-auth-clients
		appendonly maxmemory-policy /), "0 $port yes yes noeviction",
		"$v: redis.conf: TLS only, client certificates, as the base");

	my $server = (grep { grep { $_ eq $host } @{$_->{spec}{dnsNames} // []} }
		values %cert)[0] // {};
	my ($client_secret) = secret_file($vdep{$v},
		$s->{param}{tls_certificate} // '-');
	my ($client) = grep { $_->{spec}{secretName} eq ($client_secret // '-') }
		values %cert;
	$client //= {};

	my %rv = map { $_->{name} => $_ } @{$rssv->{spec}{template}{spec}{volumes}
		// []};
	my %rm = map { $_->{mountPath} => $_ }
		@{$rssv->{spec}{template}{spec}{containers}[0]{volumeMounts} // []};
	(my $tls_dir = $rs{'tls-cert-file'} // '-') =~ s{/[^/]+$}{};

	is($rv{($rm{$tls_dir} // {})->{name} // '-'}{secret}{secretName} // '-',
		$server->{spec}{secretName} // 'none',
		"$v: the store's certificate, for the URL's host, is its Secret");
	is(join(' ', grep { /auth/ } @{$client->{spec}{usages} // []}),
		'client auth', "$v: the gateway's Secret is a client certificate");
	is($client->{spec}{issuerRef}{name} // '-',
		$server->{spec}{issuerRef}{name} // 'none', "$v: one CA for both");
	ok(($cert{$client->{spec}{issuerRef}{name} // '-'} // {})->{spec}{isCA}
		|| grep({ $_->{kind} eq 'Issuer' && $_->{spec}{ca}
			&& $_->{metadata}{name} eq ($server->{spec}{issuerRef}{name}
				// '-') } @{$vdocs{$v}{'certificates.yaml'} // []}),
		"$v: the issuer is a CA");

	# Debian's redis-server runs this redis.conf with the test's
	# certificates: the gateway's user with the client certificate and the
	# password; nothing without the certificate, nothing in plain TCP

	SKIP: {
		skip('no redis-server', 4) unless $redis;

		my $p = port(8078);
		my $rc_v = $rcmv->{data}{'redis.conf'};
		mkdir "$d/vredis";

		$rc_v =~ s/^bind .*$/bind 127.0.0.1/m;
		$rc_v =~ s/^tls-port .*$/tls-port $p/m;
		$rc_v =~ s/^dir .*$/dir $d\/vredis/m;
		$rc_v =~ s/^aclfile .*$/aclfile $d\/secret\/users.acl/m;
		$rc_v =~ s{^(tls-[\w-]+-file) /\S+/(\S+)$}{
			"$1 $d/vtls/" . { 'tls.crt' => 'server.crt',
				'tls.key' => 'server.key', 'ca.crt' => 'ca.crt' }->{$2}
		}mge;
		$t->write_file('vredis.conf', $rc_v);

		my $pid = daemon("$d/vredis.out", $redis, "$d/vredis.conf");

		ok($t->waitforsocket("127.0.0.1:$p"), "$v: redis-server runs it")
			or diag(slurp("$d/vredis.out"));

		my $pw = slurp("$d/secret/password");
		my @tls = ('--tls', '--cacert', "$d/vtls/ca.crt");
		my @cert = ('--cert', "$d/vtls/client.crt",
			'--key', "$d/vtls/client.key");

		is(cli($p, @tls, @cert, '--user', $s->{param}{user}, '--pass', $pw,
			'HSET', '{dynamo-rl}:gate', 'state', 'open'), '1',
			"$v: the gateway's user with its certificate");
		unlike(cli($p, @tls, '--user', $s->{param}{user}, '--pass', $pw,
			'PING'), qr/^PONG$/m, "$v: nothing without a certificate");
		unlike(cli($p, '--user', $s->{param}{user}, '--pass', $pw, 'PING'),
			qr/^PONG$/m, "$v: nothing in plain TCP");

		my $gw = gateway($v, $p);
		ok(is_true($gw->{store}{up}), "$v: the gateway's store is up")
			or diag(explain($gw));

		stop($pid);
	}
}

# a managed endpoint: rediss:// to a name outside the cluster, verified
# against the CA of the store's Secret, reached by an address block

{
	my $v = 'store-managed';
	my $s = $vstore{$v};

	like($s->{url}, qr{^rediss://[a-z0-9.-]+:\d+$}, "$v: rediss://");
	unlike($s->{url}, qr/\.svc\.cluster\.local|dynamo-rl-redis\b/,
		"$v: an endpoint outside the cluster");
	is(join(':', secret_file($vdep{$v},
		$s->{param}{tls_trusted_certificate} // '-')), 'dynamo-rl-redis:ca.crt:ro',
		"$v: its CA from the Secret dynamo-rl-redis");
	ok(!defined $s->{param}{tls_verify}, "$v: the certificate verified");
	like($s->{bare}, qr/^\s*resolver\s+kube-dns\.kube-system\.svc\.cluster\.local\b/m,
		"$v: nginx's resolver is kube-dns");

	my ($npv) = @{$vdocs{$v}{'networkpolicy.yaml'} // []};
	my @blocks = grep { grep { $_->{ipBlock} } @{$_->{to} // []} }
		@{$npv->{spec}{egress} // []};

	is(join(' ', map { rule_ports($_) } @blocks), '6379',
		"$v: egress to an address block on 6379 only");
}

# Sentinel: the gateway names each sentinel of the StatefulSet by its
# name in the headless Service, and the master they watch; wait=1; the
# sentinels' port as well as the nodes' in the NetworkPolicies

{
	my $v = 'store-sentinel';
	my $s = $vstore{$v};
	my %o = map { ("$_->{kind}/$_->{metadata}{name}" => $_) }
		@{$vdocs{$v}{'redis.yaml'} // []};

	my ($sset) = grep { /^StatefulSet\// && $o{$_}{spec}{template}{spec}
		{containers}[0]{ports}[0]{containerPort} == 26379 } keys %o;
	my ($nset) = grep { /^StatefulSet\// && $_ ne ($sset // '') } keys %o;
	my $ss = $o{$sset // '-'} // {};
	my $ns = $o{$nset // '-'} // {};
	my $ssvc = $o{"Service/" . ($ss->{spec}{serviceName} // '-')} // {};
	my $nsvc = $o{"Service/" . ($ns->{spec}{serviceName} // '-')} // {};

	my ($hosts, $master) = $s->{url} =~ m{^sentinel://([^/]+)/(\S+)$};
	my @want = map { "$ss->{metadata}{name}-$_.$ssvc->{metadata}{name}"
		. ".dynamo.svc.cluster.local:$ssvc->{spec}{ports}[0]{port}" }
		0 .. ($ss->{spec}{replicas} // 0) - 1;

	is($hosts // '-', join(',', @want), "$v: every sentinel by its name");
	is(scalar @want, 3, "$v: three sentinels");
	is(join(' ', map { $_->{spec}{clusterIP} // '-' } $ssvc, $nsvc),
		'None None', "$v: headless Services for names of pods");
	is($ns->{spec}{replicas}, 3, "$v: a primary and two replicas");
	is($s->{param}{wait}, 1, "$v: wait=1");
	like($s->{bare}, qr/^\s*resolver\s+kube-dns\.kube-system\.svc\.cluster\.local\b/m,
		"$v: nginx's resolver is kube-dns");

	my $rcmv = $o{'ConfigMap/dynamo-rl-redis'} // {};
	my $sconf = $rcmv->{data}{'sentinel.conf'} // '';
	my $start = $rcmv->{data}{'start-sentinel'} // '';

	like($start, qr/^\s*echo "sentinel monitor \Q$master\E \$primary 6379 2"$/m,
		"$v: the sentinels watch the gateway's master, quorum 2");
	unlike($sconf, qr/resolve-hostnames\s+yes/, "$v: nodes by address");

	for my $k (qw/ start-redis start-sentinel /) {
		$t->write_file("v-$k", $rcmv->{data}{$k} // 'exit 1');
		my $out = `sh -n $d/v-$k 2>&1`;
		is($?, 0, "$v: $k: sh -n") or diag($out);
		like($rcmv->{data}{$k} // '', qr/^\s*exec redis-\w+ \/run\/redis\//m,
			"$v: $k: runs from the writable volume");
	}

	my ($npv) = @{$vdocs{$v}{'networkpolicy.yaml'} // []};
	my %eg = map { join(',', %{($_->{to}[0]{podSelector}{matchLabels}
		// {})}) => join(' ', sort map { $_->{port} } @{$_->{ports}}) }
		@{$npv->{spec}{egress} // []};

	is($eg{'app.kubernetes.io/name,dynamo-rl-redis'}, '26379 6379',
		"$v: the gateway reaches the nodes and the sentinels");

	# the start scripts run, with Debian's redis-server and
	# redis-sentinel, the Secret of store-sentinel/redis-acl, loopback
	# for the pods' names and ports of the test's: node 0 starts as the
	# primary; a sentinel watches it; node 1 asks the sentinel for the
	# primary (its name of node 0 does not resolve) and replicates it as
	# "replica"; the sentinel sees both as "sentinel"

	my $acl_v = `$K8S/$v/redis-acl $d/vsecret 2>&1`;
	is($?, 0, "$v: redis-acl: exit 0") or diag($acl_v);

	my $sentinel = `sh -c 'command -v redis-sentinel' 2>/dev/null`;
	chomp $sentinel;

	SKIP: {
		skip('no redis-server or redis-sentinel', 4)
			unless $redis && $sentinel;

		my $ipw = slurp("$d/vsecret/internal-password");
		my ($pp, $rp, $sp) = (port(8077), port(8076), port(8075));
		my $bin = "$d/vs-bin";
		my @pid;

		# hostname and getent of a pod

		mkdir $bin;
		$t->write_file('vs-bin/hostname', "#!/bin/sh\necho \"\$TEST_HOST\"\n");
		$t->write_file('vs-bin/getent', "#!/bin/sh\n"
			. "[ -n \"\$TEST_NODE0\" ] || exit 2\n"
			. "echo \"\$TEST_NODE0 \$2\"\n");
		chmod 0755, "$bin/hostname", "$bin/getent";

		local $ENV{PATH} = "$bin:$ENV{PATH}";

		for ([ 'p', $pp, 'dynamo-rl-redis-0', 'start-redis', '' ],
			[ 's', $sp, 'dynamo-rl-sentinel-0', 'start-sentinel',
				'127.0.0.1' ],
			[ 'r', $rp, 'dynamo-rl-redis-1', 'start-redis', '' ])
		{
			my ($n, $p, $host, $script, $node0) = @$_;
			my $etc = "$d/vs-$n/etc";

			system('mkdir', '-p', "$etc/acl", "$d/vs-$n/run",
				"$d/vs-$n/data");
			system('cp', "$d/vsecret/users.acl",
				"$d/vsecret/internal-password", "$etc/acl/");

			for my $k ('redis.conf', 'sentinel.conf') {
				my $c = $rcmv->{data}{$k} // '';
				$c =~ s/^bind .*$//m;
				$c =~ s/^port .*$/port $p\nbind 127.0.0.1/m;
				$c =~ s{^dir /data$}{dir $d/vs-$n/data}m;
				$c =~ s{^dir /run/redis$}{dir $d/vs-$n/run}m;
				$c =~ s{/etc/redis/}{$etc/}g;
				$t->write_file("vs-$n/etc/$k", $c);
			}

			my $sh = $rcmv->{data}{$script} // 'exit 1';
			$sh =~ s{/etc/redis/}{$etc/}g;
			$sh =~ s{/run/redis/}{$d/vs-$n/run/}g;
			$sh =~ s{-h "dynamo-rl-sentinel-\$i\.dynamo-rl-sentinel"}
				{-h 127.0.0.1}g;
			$sh =~ s/\b26379\b/$sp/g;
			$sh =~ s/\b6379\b/$pp/g;
			$t->write_file("vs-$n.sh", $sh);

			local $ENV{TEST_HOST} = $host;
			local $ENV{TEST_NODE0} = $node0;
			local $ENV{POD_IP} = '10.255.0.' . (1 + @pid);

			push @pid, daemon("$d/vs-$n.out", 'sh', "$d/vs-$n.sh");

			ok($t->waitforsocket("127.0.0.1:$p"), "$v: $script runs $host")
				or diag(slurp("$d/vs-$n.out"));
		}

		ok(Test::DynamoRL::wait_for(sub {
			cli($rp, '--user', 'sentinel', '--pass', $ipw, 'ROLE')
				=~ /^slave\n127\.0\.0\.1\n$pp\nconnected\n/ }, 20),
			"$v: node 1 replicates the primary the sentinel names")
			or diag(slurp("$d/vs-r.out"));
		is(cli($sp, 'SENTINEL', 'get-master-addr-by-name', $master),
			"127.0.0.1\n$pp", "$v: the sentinel names the primary")
			or diag(slurp("$d/vs-s.out"));
		ok(Test::DynamoRL::wait_for(sub {
			cli($sp, 'SENTINEL', 'replicas', $master) =~ /\b$rp\b/
				&& cli($sp, 'SENTINEL', 'master', $master)
					!~ /\n(?:flags\n[^\n]*(?:disconnected|s_down))/ }, 20),
			"$v: the sentinel watches the nodes as \"sentinel\"")
			or diag(slurp("$d/vs-s.out"));

		# the gateway's password is this redis-acl's

		system('cp', "$d/vsecret/password",
			"$d/v/$v/etc/dynamo-rl/redis/password");

		my $gw = gateway($v, $sp);
		ok(is_true($gw->{store}{up}), "$v: the gateway's store is up,"
			. " through the sentinel") or diag(explain($gw));

		stop($_) for reverse @pid;
	}
}

###############################################################################

sub slurp {
	my ($path) = @_;

	open my $fh, '<', $path or return '';
	local $/;

	return <$fh> // '';
}

# commands in RESP on one connection: the first line of the last reply

sub resp {
	my ($port, @cmds) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
		Timeout => 5) or return "no connection: $!";

	my $line = '';

	for my $cmd (@cmds) {
		print $s '*' . @$cmd . "\r\n"
			. join('', map { '$' . length($_) . "\r\n$_\r\n" } @$cmd);

		$line = <$s> // '';
		$line =~ s/\r\n\z//;

		if ($line =~ /^\$(\d+)$/) {
			read($s, my $bulk, $1 + 2);
			$line = '$' . substr($bulk, 0, $1);
		}
	}

	return $line;
}

sub load_yaml {
	return '' if eval { require YAML::XS; 1 };

	my $apt = "$REPO/util/apt-ensure";
	my $out = `$apt libyaml-libyaml-perl 2>&1`;
	my $rc = $?;

	return '' if eval { require YAML::XS; 1 };

	return "util/apt-ensure libyaml-libyaml-perl failed (status "
		. ($rc >> 8) . "), install Debian's libyaml-libyaml-perl:\n$out"
		if $rc;

	return "YAML::XS does not load even after util/apt-ensure "
		. "libyaml-libyaml-perl:\n$@$out";
}

sub kind {
	my ($file, $kind) = @_;

	my @d = grep { ($_->{kind} // '') eq $kind } @{$by_file{$file} // []};
	is(scalar @d, 1, "$file: one $kind");

	return $d[0] // {};
}

sub subset {
	my ($small, $big) = @_;

	return 0 unless ref $small eq 'HASH' && %$small;

	for my $k (keys %$small) {
		return 0 unless defined $big->{$k} && $big->{$k} eq $small->{$k};
	}

	return 1;
}

sub container_port {
	my ($p) = @_;

	return undef unless defined $p;
	return $p if $p =~ /^\d+$/ && $cnum{$p};
	return $cport{$p};
}

sub service {
	my ($svc, $name, $port) = @_;

	my $s = $svc->{spec} // {};
	my @ports = @{$s->{ports} // []};

	is($s->{type} // 'ClusterIP', 'ClusterIP', "$name service: ClusterIP");
	ok(subset($s->{selector}, \%labels),
		"$name service: selects the Deployment's pods");
	is(join(' ', map { $_->{port} } @ports), $port,
		"$name service: exactly port $port");
	is(join(' ', map { container_port($_->{targetPort} // $_->{port})
		// 'none' } @ports), $port,
		"$name service: to container port $port");
}

sub rule_ports {
	my ($rule) = @_;
	return map { $_->{port} // 'any' } @{$rule->{ports} // []};
}

# a peer of the Ingress controller's pods in its namespace

sub controller {
	my ($peer) = @_;

	return 0 if grep { !/^(?:podSelector|namespaceSelector)$/ } keys %$peer;

	my $ns = $peer->{namespaceSelector}{matchLabels} // {};
	my $pods = $peer->{podSelector}{matchLabels} // {};

	return join(',', %$ns) eq join(',', %CONTROLLER_NS)
		&& join(',', %$pods) eq join(',', %CONTROLLER);
}

sub only_pods {
	my ($peer, $want) = @_;

	return 0 if grep { $_ ne 'podSelector' } keys %$peer;

	my $sel = $peer->{podSelector} // {};
	return 0 if $sel->{matchExpressions};

	my $got = $sel->{matchLabels} // {};

	return join(',', map { "$_=$got->{$_}" } sort keys %$got)
		eq join(',', map { "$_=$want->{$_}" } sort keys %$want);
}

# server blocks by the port of their first "listen"

sub servers {
	my ($text) = @_;

	my %s;

	while ($text =~ /\bserver\s*\{/g) {
		my $start = pos($text);
		my ($depth, $i) = (1, $start);

		while ($depth && $i < length $text) {
			my $ch = substr($text, $i++, 1);
			$depth++ if $ch eq '{';
			$depth-- if $ch eq '}';
		}

		my $body = substr($text, $start, $i - $start);
		$s{$1} = $body if $body =~ /^\s*listen\s+(?:[\d.]+:)?(\d+)/m;

		pos($text) = $i;
	}

	return %s;
}

sub certificates {
	my ($dir) = @_;

	mkdir $dir;

	my @req = ('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
		'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1');

	for ([ 'tls', '/CN=dynamo-rl-admin.dynamo.svc' ],
		[ 'ca', '/CN=orchestrators CA' ])
	{
		my ($name, $subj) = @$_;

		my $pid = open(my $fh, '-|') // return "cannot fork: $!";

		if ($pid == 0) {
			open STDERR, '>&', \*STDOUT;
			{ exec @req, '-subj', $subj, '-keyout', "$dir/$name.key",
				'-out', "$dir/$name.crt"; }
			print "cannot exec openssl: $!\n";
			POSIX::_exit(127);
		}

		my $out = join '', <$fh>;
		close $fh;

		return "openssl req for $name.crt failed:\n$out" if $?;
	}

	return '';
}

# what is left of an nginx.conf without comments, the store and the
# resolver, in single spaces

sub conf_but_store {
	my ($text) = @_;

	$text =~ s/#.*//g;
	$text =~ s/^\s*(?:dynamo_rl_store|resolver)\s[^;]*;//mg;
	$text =~ s/\s+/ /g;

	return $text;
}

# a Deployment without the volumes of the store's Secrets ("redis-*")

sub dep_but_store {
	my ($d) = @_;

	my $c = YAML::XS::Load(YAML::XS::Dump($d // {}));
	my $s = $c->{spec}{template}{spec} // {};

	$s->{volumes} = [ grep { $_->{name} !~ /^redis-/ }
		@{$s->{volumes} // []} ];

	for my $ct (@{$s->{containers} // []}) {
		$ct->{volumeMounts} = [ grep { $_->{name} !~ /^redis-/ }
			@{$ct->{volumeMounts} // []} ];
	}

	return $c;
}

# a NetworkPolicy without its egress to the store

sub np_but_store {
	my ($n) = @_;

	my $c = YAML::XS::Load(YAML::XS::Dump($n // {}));

	$c->{spec}{egress} = [ grep { !grep { ($_->{port} // 0) == 6379 }
		@{$_->{ports} // []} } @{$c->{spec}{egress} // []} ];

	return $c;
}

# the Secret and key a file of the container is, and "ro" if mounted so

sub secret_file {
	my ($d, $path) = @_;

	my ($dir, $file) = $path =~ m{^(.*)/([^/]+)$} or return ();
	my $s = $d->{spec}{template}{spec} // {};
	my ($m) = grep { $_->{mountPath} eq $dir }
		@{$s->{containers}[0]{volumeMounts} // []};
	my ($vol) = grep { $_->{name} eq ($m // {})->{name} // '-' }
		@{$s->{volumes} // []};
	my $sec = ($vol // {})->{secret} or return ();

	my $key = $file;

	if ($sec->{items}) {
		my ($i) = grep { $_->{path} eq $file } @{$sec->{items}};
		$key = $i ? $i->{key} : return ();
	}

	return ($sec->{secretName}, $key, $m->{readOnly} ? 'ro' : 'rw');
}

# an nginx.conf of the manifests for nginx -t here: loopback for every
# name, the test directory for every path but the store's files

sub localise {
	my ($text, $dir) = @_;

	$text =~ s{^(\s*server\s+)[A-Za-z][A-Za-z0-9.-]*(:\d+)}
		{${1}127.0.0.1$2}mg;
	$text =~ s{(?<![\w/])/tmp/}{%%TESTDIR%%/}g;
	$text =~ s{^(load_module\s+)/usr/lib/nginx/modules/
		(ngx_http_dynamo_rl_module\.so;)}{$1$so;}mx;
	$text =~ s{(\bstate=)/\S+/}{$1%%TESTDIR%%/state/}g;
	$text =~ s{/etc/nginx/tls/}{%%TESTDIR%%/tls/}g;
	$text =~ s{(rediss?://)[A-Za-z][A-Za-z0-9.-]*:}{${1}127.0.0.1:}g;
	$text =~ s{(sentinel://)(\S+)/}{$1 . join(',', map { s/^[^:]+/127.0.0.1/r }
		split /,/, $2) . '/'}ge;
	$text =~ s{^(\s*resolver\s+)[A-Za-z][A-Za-z0-9.-]*}{${1}127.0.0.1}mg;

	return $text;
}

# a CA, a certificate of the store's Service name and 127.0.0.1, and a
# client certificate, as cert-manager would issue them

sub ca_chain {
	my ($dir) = @_;

	mkdir $dir;

	my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
	my @cmds = (
		"openssl req -x509 $ec -days 1 -subj '/CN=dynamo-rl-redis CA'"
			. " -keyout ca.key -out ca.crt",
		"openssl req $ec -subj '/CN=dynamo-rl-redis' -keyout server.key"
			. " -out server.csr",
		"printf 'subjectAltName=DNS:dynamo-rl-redis.dynamo.svc.cluster.local"
			. ",IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext",
		"openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key"
			. " -CAcreateserial -days 1 -extfile server.ext -out server.crt",
		"openssl req $ec -subj '/CN=dynamo-rl-gateway' -keyout client.key"
			. " -out client.csr",
		"printf 'extendedKeyUsage=clientAuth\\n' > client.ext",
		"openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key"
			. " -CAcreateserial -days 1 -extfile client.ext -out client.crt",
	);

	for my $cmd (@cmds) {
		my $out = `cd '$dir' && $cmd 2>&1`;
		return "$cmd:\n$out" if $?;
	}

	return '';
}

# a daemon of the test, its output to a file; stopped by its pid

sub daemon {
	my ($out, @cmd) = @_;

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', $out;
		open STDERR, '>&', \*STDOUT;
		delete $ENV{LD_PRELOAD};
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	return $pid;
}

# the gateway of a variant's nginx.conf, run on free loopback ports with
# its store on "port" (a sentinel's, for sentinel://): the status its
# trusted listener answers, over mutual TLS, once the store is up or
# after 10 s

sub gateway {
	my ($v, $port) = @_;

	my $g = Test::DynamoRL->new();
	my $conf = ${$vstore{$v}{local}};
	my %p = map { $_ => port(8060 + $_ % 100) } qw/ 8080 9090 8088 /;

	$conf =~ s{%%TESTDIR%%/tls/}{$d/tls/}g;
	$conf =~ s{^(\s*listen\s+)(8080|9090|8088)\b}{${1}127.0.0.1:$p{$2}}mg;
	$conf =~ s{((?:rediss?|sentinel)://[^/\s]*?127\.0\.0\.1:)\d+}
		{$1$port}g;

	$g->write_file_expand('nginx.conf', $conf);
	$g->run();

	my $st = {};

	Test::DynamoRL::wait_for(sub {
		my $curl = "curl -s --max-time 5 -k --cert $d/tls/orch.crt"
			. " --key $d/tls/orch.key https://127.0.0.1:$p{9090}/rl/status";
		my $out = `$curl`;
		$st = eval { JSON::PP::decode_json($out) } // { raw => $out };
		return is_true($st->{store}{up});
	}, 10);

	$g->stop();

	return $st;
}

sub is_true {
	my ($v) = @_;
	return ref $v && $v ? 1 : 0;
}

# a daemon stopped by its pid: redis-server refuses a SIGTERM while it
# writes its first append-only file (a replica after its sync), so
# SIGTERM again until it exits

sub stop {
	my ($pid) = @_;

	for (1 .. 100) {
		kill 'TERM', $pid;
		return if Test::DynamoRL::wait_for(sub {
			waitpid($pid, WNOHANG) == $pid }, 1);
	}

	kill 'KILL', $pid;
	waitpid($pid, 0);
}

# redis-cli on loopback: its output, errors included, without the last
# newline

sub cli {
	my ($port, @args) = @_;

	my $pid = open(my $fh, '-|') // return "cannot fork: $!";

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		delete $ENV{LD_PRELOAD};
		{ exec 'timeout', '10', 'redis-cli', '--no-auth-warning',
			'-h', '127.0.0.1', '-p', $port, @args; }
		POSIX::_exit(127);
	}

	my $out = join '', <$fh>;
	close $fh;
	chomp $out;

	return $out;
}

###############################################################################
