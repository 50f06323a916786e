#!/usr/bin/python3
"""bench/request_report.py: the tables of bench/request.sh, in markdown.

    request_report.py RESULTS SSE_RESULTS OUTDIR

RESULTS, one line per run: round label req/s requests p50_us p99_us
gateway_cpu_us_per_req upstream_cpu_us_per_req cpu0_busy% cpu1_busy%
other_procs_cpu% irq+softirq% steal% client_cpu_us_per_req tries
store_cpu_us_per_req ("-" where a figure does not apply; tries > 1: the
run had socket errors, timeouts on a stalled machine, and was run again).
OUTDIR/store-rtt, when there, holds the store's round trips (us). SSE_RESULTS: round label events p50 p90 p99 max
(us, arrival - send) other_procs_cpu%; OUTDIR holds ROUND-sse-LABEL.delays.

Ratios are medians of the per-round ratios, never ratios of medians.
"""

import os
import sys

from sse_client import pct  # nearest rank, as the SSE client reports

# a round is quiet when other processes used at most this % of one CPU
QUIET = int(os.environ.get("QUIET", "20"))

# issue 7 and issue 4
TARGETS = {
    "rps module/plain": (">=", 0.97),
    "cpu module/plain": ("<=", 1.05),
    "rps module/lua": (">=", 1.3),
    "rps module/lua-ledger": (">=", 1.3),
    "rps module/module-ledger-off": (">=", 0.95),
    "sse p99 module-plain": ("<=", 50.0),
    # issue 13 (STORE=1)
    "store cpu added": ("<=", 8.0),
    "store capacity": (">=", 0.75),
    "store redis cpu": ("<=", 20.0),
    "store p50 added c1": ("<=", None),
    "store capacity lua-redis": (">=", 2.0),
    # issue 25: TLS on a reused session, over redis://
    "store tls cpu added": ("<=", 3.0),
}


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return float("nan")
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def num(x):
    return None if x == "-" else float(x)


def load(path, fields):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != len(fields):
                continue
            rows.append(dict(zip(fields, parts)))
    return rows


HTTP_FIELDS = ["round", "label", "rps", "reqs", "p50", "p99", "gw", "up",
               "cpu0", "cpu1", "other", "softirq", "steal", "client", "tries",
               "store"]
SSE_FIELDS = ["round", "label", "n", "p50", "p90", "p99", "max", "other"]


def fmt(x, digits=0):
    if x is None or x != x:
        return "-"
    return "%.*f" % (digits, x)


# targets shown to be out of reach: a miss says where, not only "MISSED"
OUT_OF_REACH = {
    "rps module/lua": "bench/findings.md, \"Why module/lua >= 1.3 is out"
                      " of reach\"",
    "rps module/lua-ledger": "the same",
}


def verdict(name, value, limit=None):
    op, fixed = TARGETS[name]
    limit = fixed if limit is None else limit
    ok = value >= limit if op == ">=" else value <= limit
    if not ok and name in OUT_OF_REACH:
        return "**MISSED** (target %s %g; out of reach: %s)" % (
            op, limit, OUT_OF_REACH[name])
    return "**%s** (target %s %g)" % ("met" if ok else "MISSED", op, limit)


def main(argv):
    results, sse_results, outdir = argv[1], argv[2], argv[3]
    rows = load(results, HTTP_FIELDS)
    sse = load(sse_results, SSE_FIELDS)

    by = {}
    rounds = []
    labels = []
    for r in rows:
        by[(r["round"], r["label"])] = r
        if r["round"] not in rounds:
            rounds.append(r["round"])
        if r["label"] not in labels:
            labels.append(r["label"])

    # --- per round
    print("### Requests, per round (interleaved in this order)")
    print()
    print("| round | variant | req/s | p50 us | p99 us | gateway CPU us/req "
          "| upstream CPU us/req | client CPU us/req | CPU0 busy % "
          "| CPU1 busy % | other procs CPU % | irq+softirq % | steal % "
          "| tries | store CPU us/req |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
          "|---:|---:|")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s "
              "| %s | %s | %s |" % (r["round"], r["label"], r["rps"],
                                    r["p50"], r["p99"], r["gw"], r["up"],
                                    r["client"], r["cpu0"], r["cpu1"],
                                    r["other"], r["softirq"], r["steal"],
                                    r["tries"], r["store"]))
    print()
    print("h2 variants: h2load has no percentiles, the p50 column holds its "
          "mean. Direct has no gateway: its upstream column is the upstream's "
          "whole cost.")
    print()

    # --- medians per variant
    print("### Requests, medians over the rounds")
    print()
    print("| variant | req/s | p50 us | p99 us | gateway CPU us/req "
          "| upstream CPU us/req | client CPU us/req | store CPU us/req |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    medians = {}
    for label in labels:
        col = {}
        for k in ("rps", "p50", "p99", "gw", "up", "client", "store"):
            vals = [num(by[(rd, label)][k]) for rd in rounds
                    if (rd, label) in by]
            vals = [v for v in vals if v is not None]
            col[k] = median(vals) if vals else None
        medians[label] = col
        print("| %s | %s | %s | %s | %s | %s | %s | %s |"
              % (label, fmt(col["rps"]), fmt(col["p50"]), fmt(col["p99"]),
                 fmt(col["gw"], 2), fmt(col["up"], 2),
                 fmt(col["client"], 2), fmt(col["store"], 2)))
    print()

    # --- ratios
    pairs = [("module", "plain"), ("module-client-id", "plain"),
             ("module-ledger-off", "plain"), ("module-body-off", "plain"),
             ("module", "module-ledger-off"), ("module", "module-body-off"),
             ("module-client-id", "module-ledger-off"),
             ("module-floor", "plain"), ("module", "module-floor"),
             ("module-ledger-off", "module-floor"),
             ("module", "lua"), ("module-client-id", "lua-client-id"),
             ("module", "lua-ledger"),
             ("module-client-id", "lua-ledger-client-id"),
             ("module-ledger-off", "lua"), ("lua", "plain"),
             ("lua-ledger", "plain"), ("lua-ledger", "lua"),
             ("plain", "direct"), ("module-h2", "plain-h2"),
             ("store", "module"), ("store", "module-ledger-off"),
             ("store", "plain"), ("store", "lua-redis"),
             ("lua-redis", "lua-ledger"), ("lua-redis", "plain"),
             ("module-c1", "plain-c1"), ("store-c1", "module-c1"),
             ("store-c1", "plain-c1"), ("lua-redis-c1", "plain-c1"),
             ("store-tls", "store"), ("store-repl", "store"),
             ("store-wait1", "store"), ("store-wait1", "store-repl"),
             ("store-tls-c1", "store-c1"), ("store-wait1-c1", "store-c1"),
             ("store-wait1-c1", "store-repl-c1"),
             ("store-tls", "store-tls-base"), ("store", "store-base"),
             ("store-tls-c1", "store-tls-base-c1")]
    summary = {}
    print("### Ratios: medians of the per-round ratios")
    print()
    print("Quiet rounds: those in which both runs of the pair saw other "
          "processes use at most %d%% of one CPU." % QUIET)
    print()
    print("| ratio | req/s | gateway CPU/req | p99 latency | quiet rounds "
          "| req/s, quiet | CPU/req, quiet | per-round req/s "
          "| per-round CPU/req |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for a, b in pairs:
        rr, cr, lr, qr, qc = [], [], [], [], []
        for rd in rounds:
            if (rd, a) not in by or (rd, b) not in by:
                continue
            x, y = by[(rd, a)], by[(rd, b)]
            quiet = (float(x["other"]) <= QUIET
                     and float(y["other"]) <= QUIET)
            rr.append(float(x["rps"]) / float(y["rps"]))
            if quiet:
                qr.append(rr[-1])
            if num(x["gw"]) is not None and num(y["gw"]):
                cr.append(float(x["gw"]) / float(y["gw"]))
                if quiet:
                    qc.append(cr[-1])
            if num(x["p99"]) is not None and num(y["p99"]):
                lr.append(float(x["p99"]) / float(y["p99"]))
        if not rr:
            continue
        name = "%s/%s" % (a, b)
        summary["rps " + name] = median(rr)
        if cr:
            summary["cpu " + name] = median(cr)
        if qr:
            summary["quiet rps " + name] = median(qr)
        if qc:
            summary["quiet cpu " + name] = median(qc)
        print("| %s | %.3f | %s | %s | %d | %s | %s | %s | %s |"
              % (name, median(rr), fmt(median(cr), 3) if cr else "-",
                 fmt(median(lr), 3) if lr else "-", len(qr),
                 fmt(median(qr), 3) if qr else "-",
                 fmt(median(qc), 3) if qc else "-",
                 " ".join("%.3f" % v for v in rr),
                 " ".join("%.3f" % v for v in cr) if cr else "-"))
    print()

    # --- SSE
    sby = {}
    slabels = []
    for r in sse:
        sby[(r["round"], r["label"])] = r
        if r["label"] not in slabels:
            slabels.append(r["label"])
    srounds = sorted({r["round"] for r in sse}, key=int)

    if sse:
        print("### SSE: per-event delay (upstream write to client read), us")
        print()
        print("Per round: events, p50 and p99 of each path's per-event delay; "
              "added = that path's percentile minus direct's in the same "
              "round.")
        print()
        print("| round | path | events | p50 | p99 | max | added p50 "
              "| added p99 | other procs CPU % |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        added = {}
        for rd in srounds:
            d = sby.get((rd, "direct"))
            for label in slabels:
                r = sby.get((rd, label))
                if r is None:
                    continue
                a50 = a99 = None
                if d is not None and label != "direct":
                    a50 = float(r["p50"]) - float(d["p50"])
                    a99 = float(r["p99"]) - float(d["p99"])
                    added.setdefault(label, []).append((a50, a99))
                print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                      % (rd, label, r["n"], r["p50"], r["p99"], r["max"],
                         fmt(a50, 1), fmt(a99, 1), r["other"]))
        print()
        print("| path | median added p50 | median added p99 | pooled p50 "
              "| pooled p99 | pooled max | pooled added p50 "
              "| pooled added p99 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        pooled = {}
        for label in slabels:
            vals = []
            for rd in srounds:
                path = os.path.join(outdir, "%s-sse-%s.delays" % (rd, label))
                if os.path.exists(path):
                    with open(path) as f:
                        vals.extend(float(x) for x in f if x.strip())
            vals.sort()
            pooled[label] = (pct(vals, 50), pct(vals, 99),
                             vals[-1] if vals else float("nan"))
        for label in slabels:
            p50, p99, mx = pooled[label]
            if label == "direct":
                print("| direct | - | - | %.1f | %.1f | %.1f | - | - |"
                      % (p50, p99, mx))
                continue
            a = added.get(label, [])
            print("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f |"
                  % (label, fmt(median([x[0] for x in a]), 1),
                     fmt(median([x[1] for x in a]), 1), p50, p99, mx,
                     p50 - pooled["direct"][0], p99 - pooled["direct"][1]))
        print()
        if "module" in added and "plain" in added:
            diff = []
            for rd in srounds:
                m, p = sby.get((rd, "module")), sby.get((rd, "plain"))
                if m and p:
                    diff.append(float(m["p99"]) - float(p["p99"]))
            summary["sse p99 module-plain"] = median(diff)
            print("module's p99 minus plain's, per round: %s us; median "
                  "%.1f us." % (" ".join("%.1f" % x for x in diff),
                                median(diff)))
            print()

    # --- the store (issue 13): differences per round, then medians
    def diffs(a, b, k):
        out = []
        for rd in rounds:
            if (rd, a) in by and (rd, b) in by:
                x, y = num(by[(rd, a)][k]), num(by[(rd, b)][k])
                if x is not None and y is not None:
                    out.append(x - y)
        return out

    rtt = []
    if os.path.exists(os.path.join(outdir, "store-rtt")):
        with open(os.path.join(outdir, "store-rtt")) as f:
            rtt = [float(x) for x in f.read().split()]

    if "store" in labels or "lua-redis" in labels:
        print("### The shared store (issue 13)")
        print()
        if rtt:
            print("The store's round trip (redis-benchmark, PING on one "
                  "connection from the gateway's CPU): p50 %s us (runs: %s)."
                  % (fmt(median(rtt), 1),
                     " ".join("%.1f" % x for x in rtt)))
            print()
        print("| figure | per round | median |")
        print("|---|---|---:|")
        for a, b, k, what in [
                ("store", "module", "gw",
                 "gateway CPU added by the store, store - module (zone "
                 "ledger), us/req"),
                ("store", "module-ledger-off", "gw",
                 "store - module-ledger-off, us/req"),
                ("lua-redis", "lua-ledger", "gw",
                 "lua-redis - lua-ledger (Lua's own store cost), us/req"),
                ("store-c1", "module-c1", "p50",
                 "p50 added at c=1, store - module, us"),
                ("store-c1", "plain-c1", "p50",
                 "p50 added at c=1, store - plain, us"),
                ("lua-redis-c1", "plain-c1", "p50",
                 "p50 added at c=1, lua-redis - plain, us"),
                # issue 25: TLS, over redis:// to a like redis-server
                ("store-tls", "store", "gw",
                 "gateway CPU added by TLS, store-tls - store, us/req"),
                ("store-tls-c1", "store-c1", "gw",
                 "gateway CPU added by TLS at c=1, store-tls - store, us/req"),
                ("store-tls", "store", "p50",
                 "p50 added by TLS, store-tls - store, us"),
                ("store-tls-c1", "store-c1", "p50",
                 "p50 added by TLS at c=1, store-tls - store, us"),
                ("store-tls", "store", "store",
                 "redis-server CPU added by TLS, store-tls - store, us/req"),
                # issue 25: wait=1, against no wait on the same primary and
                # replica (store-repl), and against store (no replica)
                ("store-wait1", "store-repl", "p50",
                 "p50 added by wait=1, store-wait1 - store-repl, us"),
                ("store-wait1", "store-repl", "p99",
                 "p99 added by wait=1, store-wait1 - store-repl, us"),
                ("store-wait1-c1", "store-repl-c1", "p50",
                 "p50 added by wait=1 at c=1, store-wait1 - store-repl, us"),
                ("store-wait1-c1", "store-repl-c1", "p99",
                 "p99 added by wait=1 at c=1, store-wait1 - store-repl, us"),
                ("store-wait1", "store", "p50",
                 "p50 added by a replica and wait=1, store-wait1 - store, "
                 "us"),
                ("store-wait1", "store", "p99",
                 "p99 added by a replica and wait=1, store-wait1 - store, "
                 "us"),
                ("store-wait1-c1", "store-c1", "p50",
                 "p50 added by a replica and wait=1 at c=1, store-wait1 - "
                 "store, us"),
                ("store-wait1-c1", "store-c1", "p99",
                 "p99 added by a replica and wait=1 at c=1, store-wait1 - "
                 "store, us"),
                ("store-wait1", "store-repl", "gw",
                 "gateway CPU added by wait=1, store-wait1 - store-repl, "
                 "us/req"),
                ("store-repl", "store", "gw",
                 "gateway CPU added by a replica, store-repl - store, "
                 "us/req"),
                # BASE_MODULE: the change, before and after in one run
                ("store-tls-base", "store-base", "gw",
                 "gateway CPU added by TLS with the base module, "
                 "store-tls-base - store-base, us/req"),
                ("store-tls", "store-tls-base", "gw",
                 "gateway CPU, store-tls - store-tls-base (this build - "
                 "base), us/req"),
                ("store-tls-c1", "store-tls-base-c1", "gw",
                 "gateway CPU at c=1, store-tls - store-tls-base, us/req"),
                ("store", "store-base", "gw",
                 "gateway CPU, store - store-base, us/req"),
                ("store-tls", "store-tls-base", "p50",
                 "p50, store-tls - store-tls-base, us"),
                ("store-tls-c1", "store-tls-base-c1", "p50",
                 "p50 at c=1, store-tls - store-tls-base, us"),
                ("store-tls-c1", "store-tls-base-c1", "p99",
                 "p99 at c=1, store-tls - store-tls-base, us"),
                ("store-tls", "store-tls-base", "store",
                 "redis-server CPU, store-tls - store-tls-base, us/req")]:
            d = diffs(a, b, k)
            if not d:
                continue
            summary["diff %s-%s %s" % (a, b, k)] = median(d)
            print("| %s | %s | %s |" % (what, " ".join("%.1f" % x for x in d),
                                        fmt(median(d), 1)))
        for label in ("store", "lua-redis", "store-tls", "store-repl",
                      "store-wait1", "store-base", "store-tls-base"):
            if label in medians and medians[label]["store"] is not None:
                summary["redis cpu " + label] = medians[label]["store"]
                both = (" (primary + replica)"
                        if label in ("store-repl", "store-wait1") else "")
                print("| store (redis-server) CPU per request, %s%s, us | "
                      "| %s |" % (label, both,
                                  fmt(medians[label]["store"], 2)))
        print()

        targets = [
            ("store cpu added", "diff store-module gw",
             "gateway CPU added by the store (store - module, us/req)",
             None),
            ("store capacity", "cpu store/module",
             "store capacity / zone ledger's, 1 / (CPU/req ratio)", None),
            ("store redis cpu", "redis cpu store",
             "store (redis-server) CPU per request, us", None),
            ("store p50 added c1", "diff store-c1-module-c1 p50",
             "p50 latency added at c=1 (store - module, us), target one "
             "round trip + 50 us", median(rtt) + 50 if rtt else None),
            ("store capacity lua-redis", "cpu store/lua-redis",
             "capacity store / lua-redis, 1 / (CPU/req ratio)", None),
            ("store tls cpu added", "diff store-tls-store gw",
             "gateway CPU added by TLS (store-tls - store, us/req)", None)]
        print("| target | figure | verdict |")
        print("|---|---:|---|")
        for name, key, what, limit in targets:
            if key not in summary:
                continue
            v = summary[key]
            if key.startswith("cpu "):
                v = 1 / v
            if TARGETS[name][1] is None and limit is None:
                print("| %s | %.3f | (no round trip measured) |" % (what, v))
                continue
            print("| %s | %.3f | %s |" % (what, v, verdict(name, v, limit)))
        print()

    # --- verdicts
    print("### Verdicts (medians of per-round ratios)")
    print()
    print("| target | figure | verdict |")
    print("|---|---:|---|")
    for name, label in [("rps module/plain", "module/plain requests/s"),
                        ("cpu module/plain",
                         "module/plain gateway CPU per request"),
                        ("rps module/lua", "module/lua requests/s"),
                        ("rps module/lua-ledger",
                         "module/lua-ledger requests/s (the same "
                         "single-use policy)"),
                        ("rps module/module-ledger-off",
                         "ledger on / ledger off requests/s"),
                        ("sse p99 module-plain",
                         "SSE added p99, module minus plain (us)")]:
        if name in summary:
            print("| %s | %.3f | %s |" % (label, summary[name],
                                          verdict(name, summary[name])))
        if "quiet " + name in summary:
            v = summary["quiet " + name]
            print("| %s, quiet rounds only | %.3f | %s |"
                  % (label, v, verdict(name, v)))
    for a, b in [("module", "plain"), ("module", "lua"),
                 ("module", "lua-ledger"), ("store", "module"),
                 ("store", "lua-redis"),
                 ("module", "module-ledger-off"),
                 ("module", "module-body-off")]:
        c = summary.get("cpu %s/%s" % (a, b))
        if c:
            print("| %s/%s gateway capacity, 1 / (CPU/req ratio) | %.3f "
                  "| (the req/s ratio of a saturated gateway core) |"
                  % (a, b, 1 / c))
    for line in ("SUMMARY %s %.3f" % (k, v) for k, v in summary.items()):
        sys.stderr.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
