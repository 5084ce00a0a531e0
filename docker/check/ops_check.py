#!/usr/bin/env python3
"""Checks of Sluice's operations files that no packaged tool does.

scripts/check-ops.sh runs each subcommand; each prints what it checked and
exits non-zero on a finding. Python 3 standard library plus python3-yaml.

  exported METRICS.txt
      the metric names a live /metrics exports (one per line)
  dashboard DASHBOARD.json METRICS.txt RULES_OUT.yml
      the dashboard's structure, every query's metric names against METRICS.txt,
      and every query written as a recording rule into RULES_OUT.yml for
      `promtool check rules` (PromQL syntax)
  alerts ALERTS.yml METRICS.txt
      every metric name in the alert rules against METRICS.txt
  manifests OUT.json FILE.yaml...
      Kubernetes YAML to JSON documents for k8s-validate.mjs
  k8s-consistency FILE.yaml...
      what the schemas cannot see: probes, grace period, selectors, ports, mounts
  compose COMPOSE_CONFIG.yml COMPOSE_DIR
      the normalized compose file (docker-compose config): grace period, mounts
  check-config SLUICE_BIN (compose COMPOSE_CONFIG.yml | k8s FILE.yaml...)
      runs `sluice check-config` on the environment the compose file or the
      Deployment gives Sluice (hosts mapped to 127.0.0.1, mounted files to a
      temporary copy), so that every SLUICE_ variable in them is known and valid
  dockerfile Dockerfile
      the image's contract: Debian 12 builder, non-root user, exec-form
      entrypoint, HEALTHCHECK through `sluice healthcheck`, STOPSIGNAL SIGTERM
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import yaml


class Findings:
    def __init__(self, what):
        self.what = what
        self.errors = []
        self.checked = 0

    def fail(self, msg):
        self.errors.append(msg)

    def done(self, summary):
        for e in self.errors:
            print(f"  FAIL {self.what}: {e}")
        if self.errors:
            print(f"{self.what}: {len(self.errors)} problem(s)")
            return 1
        print(f"{self.what}: ok ({summary})")
        return 0


# ---- metrics -----------------------------------------------------------------

def exposition(metrics_path):
    """Series names a Prometheus text exposition defines, and the label names
    of those that have samples."""
    names, labels = set(), {}
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()[:4]
                if kind == "histogram":
                    names.update({name + "_bucket", name + "_sum", name + "_count"})
                elif kind == "summary":
                    names.update({name, name + "_sum", name + "_count"})
                else:
                    names.add(name)
            elif line.strip() and not line.startswith("#"):
                m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?", line)
                names.add(m.group(1))
                found = set(re.findall(r'([A-Za-z_]\w*)="', m.group(3) or ""))
                labels.setdefault(m.group(1), set()).update(found)
    return names, labels


def exported_names(metrics_path):
    return exposition(metrics_path)[0]


# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}


def promql_label_problems(expr, labels):
    """Label names in matchers and grouping clauses that the selected metrics do
    not have. Returns (problems, unchecked metric names)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    names = promql_metric_names(expr)
    unchecked = sorted({n for n in names if n not in labels})
    problems = []
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}", s):
        name = m.group(1)
        if name not in labels:
            continue
        for lab in re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2)):
            if lab not in labels[name] | TARGET_LABELS:
                problems.append(f"{name} has no label {lab!r} (it has {', '.join(sorted(labels[name]))})")
    if not unchecked:
        known = set(TARGET_LABELS)
        for n in names:
            known |= labels[n]
        for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", s):
            for lab in (x.strip() for x in m.group(2).split(",")):
                if lab and lab not in known:
                    problems.append(f"{m.group(1)} ({lab}): no metric of the expression has label {lab!r}")
    return problems, unchecked


PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan", "start", "end",
}


def promql_metric_names(expr):
    """Metric names a PromQL expression selects (bare identifiers that are not
    functions, keywords, label names or parts of numbers and durations)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges, subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = []
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        tok = m.group(0)
        prev = s[m.start() - 1] if m.start() else " "
        if prev.isdigit() or prev == ".":
            continue  # 15m, 1e3
        if s[m.end():].lstrip().startswith("("):
            continue  # a function
        if tok.lower() in PROMQL_KEYWORDS:
            continue
        names.append(tok)
    return names


def cmd_exported(metrics_path):
    for n in sorted(exported_names(metrics_path)):
        print(n)
    return 0


# ---- dashboard ---------------------------------------------------------------

GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
# What the dashboard must keep showing (the list, as exported today).
DASHBOARD_MUST_SHOW = [
    "sluice_admission_level",
    "sluice_admission_level_changes_total",
    "sluice_admission_decisions_total",
    "sluice_event_loop_lag_seconds_bucket",
    "sluice_upstream_wait_seconds_bucket",
    "sluice_lane_in_flight",
    "sluice_upstream_waiting",
    "sluice_requests_total",
    "sluice_upstream_capacity_estimate",
    "sluice_upstream_carrying_capacity",
    "sluice_lane_queue_depth",
    "sluice_heavy_leases",
    "sluice_lane_starvation_total",
    "sluice_upstream_closed",
    "sluice_upstream_closures_total",
    "sluice_upstream_probes_total",
    "sluice_upstream_fallbacks_total",
    "sluice_upstream_budget_remaining",
    "sluice_upstream_host_ejections_total",
]


def grafana_to_promql(expr):
    """Grafana variables replaced by values PromQL parses."""
    expr = re.sub(r"\$\{?(__rate_interval|__interval|__range)\}?", "5m", expr)
    expr = re.sub(r"\$\{(\w+)(:\w+)?\}|\$(\w+)", ".*", expr)
    return expr


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:
            yield q


def cmd_dashboard(dash_path, metrics_path, rules_out):
    f = Findings("dashboard")
    try:
        with open(dash_path, encoding="utf-8") as fh:
            dash = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        f.fail(f"{dash_path}: not valid JSON: {e}")
        return f.done("")
    exported, labels = exposition(metrics_path)
    for key in ("uid", "title", "schemaVersion", "panels"):
        if key not in dash:
            f.fail(f"no top-level {key!r}")
    variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}

    queries = []  # (where, expr)
    ids, cells = set(), {}
    for p in panels_of(dash):
        pid, title = p.get("id"), p.get("title", "")
        where = f"panel {pid} {title!r}"
        if pid in ids:
            f.fail(f"{where}: duplicate id")
        ids.add(pid)
        g = p.get("gridPos", {})
        if not all(k in g for k in ("x", "y", "w", "h")) or g["x"] < 0 or g["x"] + g["w"] > 24:
            f.fail(f"{where}: gridPos {g} outside the 24-column grid")
        else:
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells:
                        f.fail(f"{where}: overlaps panel {cells[(x, y)]}")
                        break
                    cells[(x, y)] = pid
                else:
                    continue
                break
        if p.get("type") in ("row", "text"):
            continue
        targets = p.get("targets") or []
        if not targets:
            f.fail(f"{where}: no queries")
        refs = [t.get("refId") for t in targets]
        if len(refs) != len(set(refs)):
            f.fail(f"{where}: duplicate refId")
        for t in targets:
            ds = t.get("datasource") or p.get("datasource") or {}
            if ds.get("uid") != "${datasource}":
                f.fail(f"{where} {t.get('refId')}: data source {ds} is not the dashboard's ${{datasource}}")
            if not t.get("expr", "").strip():
                f.fail(f"{where} {t.get('refId')}: empty expr")
                continue
            queries.append((f"{where} {t.get('refId')}", t["expr"]))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            queries.append((f"annotation {a.get('name')!r}", a["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and isinstance(q, str):
            m = re.fullmatch(r"\s*label_values\(\s*([^,]+?)\s*,\s*\w+\s*\)\s*", q)
            if not m:
                f.fail(f"variable {v.get('name')}: query {q!r} is not label_values(METRIC, LABEL)")
            else:
                queries.append((f"variable {v.get('name')}", m.group(1)))

    used, unlabelled = set(), set()
    rules = []
    for i, (where, expr) in enumerate(queries):
        for var in re.findall(r"\$\{?(\w+)", expr):
            if var not in variables and var not in GRAFANA_BUILTINS:
                f.fail(f"{where}: ${var} is not a dashboard variable")
        names = promql_metric_names(grafana_to_promql(expr))
        if not names:
            f.fail(f"{where}: selects no metric: {expr}")
        for n in names:
            used.add(n)
            if n not in exported:
                f.fail(f"{where}: {n} is not exported by Sluice ({expr})")
        problems, unchecked = promql_label_problems(grafana_to_promql(expr), labels)
        for p in problems:
            f.fail(f"{where}: {p} ({expr})")
        unlabelled.update(unchecked)
        rules.append({"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)})
        f.checked += 1
    for n in DASHBOARD_MUST_SHOW:
        if n not in used:
            f.fail(f"no panel shows {n}")
    with open(rules_out, "w", encoding="utf-8") as fh:
        yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, fh, sort_keys=False)
    note = f"; labels not checked for {', '.join(sorted(unlabelled))} (no samples)" if unlabelled else ""
    return f.done(f"{len(ids)} panels, {f.checked} queries, {len(used)} metric names, all exported, "
                  f"label names checked{note}")


def cmd_alerts(alerts_path, metrics_path):
    f = Findings("alerts")
    exported, labels = exposition(metrics_path)
    unlabelled = set()
    with open(alerts_path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    used = set()
    for g in doc.get("groups", []):
        for r in g.get("rules", []):
            name = r.get("alert") or r.get("record")
            for n in promql_metric_names(r.get("expr", "")):
                used.add(n)
                if n not in exported:
                    f.fail(f"{name}: {n} is not exported by Sluice")
            problems, unchecked = promql_label_problems(r.get("expr", ""), labels)
            for p in problems:
                f.fail(f"{name}: {p}")
            unlabelled.update(unchecked)
            f.checked += 1
    note = f"; labels not checked for {', '.join(sorted(unlabelled))} (no samples)" if unlabelled else ""
    return f.done(f"{f.checked} rules, metric names {', '.join(sorted(used))} all exported, "
                  f"label names checked{note}")


# ---- Kubernetes ----------------------------------------------------------------

def load_docs(paths):
    docs = []
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            for i, d in enumerate(yaml.safe_load_all(fh)):
                if d is not None:
                    docs.append({"file": p, "index": i, "doc": d})
    return docs


def cmd_manifests(out, paths):
    docs = load_docs(paths)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(docs, fh)
    print(f"manifests: {len(docs)} documents from {len(paths)} files")
    return 0


def parse_duration_s(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", text.strip())
    if not m:
        raise ValueError(f"bad duration {text!r}")
    n, unit = int(m.group(1)), m.group(2) or "s"
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def by_kind(docs, kind):
    return [d["doc"] for d in docs if d["doc"].get("kind") == kind]


def deployment_env(docs, dep):
    """The SLUICE_ environment the Deployment's first container gets."""
    c = dep["spec"]["template"]["spec"]["containers"][0]
    cms = {cm["metadata"]["name"]: cm.get("data", {}) for cm in by_kind(docs, "ConfigMap")}
    env = {}
    for src in c.get("envFrom") or []:
        ref = src.get("configMapRef", {}).get("name")
        if ref is not None:
            if ref not in cms:
                raise KeyError(f"envFrom ConfigMap {ref} is not among the manifests")
            env.update(cms[ref])
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e.get("valueFrom", {}):
            env[e["name"]] = "secret-from-" + e["valueFrom"]["secretKeyRef"]["name"]
    return env, c, cms


def cmd_k8s_consistency(paths):
    f = Findings("k8s consistency")
    docs = load_docs(paths)
    # Sluice's Deployment is "sluice"; others (the Redis of the fleet's
    # tenant counts) are checked for their own selectors and ports.
    all_deps = by_kind(docs, "Deployment")
    deps = [d for d in all_deps if d["metadata"]["name"] == "sluice"]
    if len(deps) != 1:
        f.fail(f"expected one Deployment named sluice, found {len(deps)}")
        return f.done("")
    dep = deps[0]
    env, c, cms = deployment_env(docs, dep)
    pod = dep["spec"]["template"]
    labels = pod["metadata"].get("labels", {})

    def pod_labels(d):
        return d["spec"]["template"]["metadata"].get("labels", {})

    def matches(sel, lbls):
        return bool(sel) and all(lbls.get(k) == v for k, v in sel.items())

    def selects(sel, what):
        if not matches(sel, labels):
            f.fail(f"{what} selector {sel} does not select the Deployment's pods {labels}")

    selects(dep["spec"]["selector"].get("matchLabels"), "Deployment")
    for d in all_deps:
        if d is not dep and not matches(d["spec"]["selector"].get("matchLabels"), pod_labels(d)):
            f.fail(f"Deployment {d['metadata']['name']} selects none of its own pods")
    upstream_hosts = [h.split("://")[-1] for entry in env.get("SLUICE_UPSTREAMS", "").split(";")
                      for h in entry.split("=", 1)[-1].split("|")]
    services = {}
    for s in by_kind(docs, "Service"):
        services[s["metadata"]["name"]] = s
        if s["spec"].get("clusterIP") == "None":
            # A headless Service is the upstream's pods: SLUICE_UPSTREAMS must name it.
            name = s["metadata"]["name"]
            if not any(h == name or h.startswith(name + ".") for h in upstream_hosts):
                f.fail(f"headless Service {name} is not named in SLUICE_UPSTREAMS {upstream_hosts}")
            continue
        sel = s["spec"].get("selector")
        owners = [d for d in all_deps if matches(sel, pod_labels(d))]
        if not owners:
            f.fail(f"Service {s['metadata']['name']} selector {sel} selects no Deployment's pods")
            continue
        oc = owners[0]["spec"]["template"]["spec"]["containers"][0]
        names = {p.get("name") for p in oc.get("ports") or []} | {p["containerPort"] for p in oc.get("ports") or []}
        for p in s["spec"]["ports"]:
            if p.get("targetPort", p["port"]) not in names:
                f.fail(f"Service port {p} targets no container port")
    # SLUICE_REDIS_URL naming a Service of the manifests: that Service, on its port.
    redis = env.get("SLUICE_REDIS_URL", "")
    if redis:
        hostport = redis.split("://", 1)[-1].rsplit("@", 1)[-1].split("/", 1)[0]
        host, _, port = hostport.partition(":")
        svc = services.get(host.split(".", 1)[0])
        if svc is None and "." not in host:
            f.fail(f"SLUICE_REDIS_URL names {host}, no Service of the manifests")
        elif svc is not None and int(port or 6379) not in {p["port"] for p in svc["spec"]["ports"]}:
            f.fail(f"SLUICE_REDIS_URL port {port or 6379} is not a port of Service {host}")
    for pdb in by_kind(docs, "PodDisruptionBudget"):
        selects(pdb["spec"]["selector"].get("matchLabels"), "PodDisruptionBudget")
    for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        if (ref.get("kind"), ref.get("name")) != ("Deployment", dep["metadata"]["name"]):
            f.fail(f"HorizontalPodAutoscaler targets {ref}, not the Deployment")
        if hpa["spec"].get("minReplicas", 1) < 2:
            f.fail("HorizontalPodAutoscaler minReplicas below 2 (the PodDisruptionBudget then blocks drains)")

    # Grace period: longer than the drain.
    delay = parse_duration_s(env.get("SLUICE_DRAIN_DELAY", "5s"))
    timeout = parse_duration_s(env.get("SLUICE_DRAIN_TIMEOUT", "30s"))
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    if grace <= delay + timeout:
        f.fail(f"terminationGracePeriodSeconds {grace} <= SLUICE_DRAIN_DELAY + SLUICE_DRAIN_TIMEOUT ({delay + timeout:g}s)")

    # Probes: /readyz and /healthz on the admin listener's port.
    admin = env.get("SLUICE_ADMIN_LISTEN", "127.0.0.1:9901")
    host, _, port = admin.rpartition(":")
    if host in ("127.0.0.1", "localhost", "[::1]"):
        f.fail(f"SLUICE_ADMIN_LISTEN {admin} is loopback: the kubelet's probes cannot reach it")
    if "SLUICE_ADMIN_TOKEN" not in env:
        f.fail("no SLUICE_ADMIN_TOKEN: a non-loopback admin listener requires it")
    port_names = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        hg = c.get(probe, {}).get("httpGet")
        if not hg:
            f.fail(f"no {probe} httpGet")
            continue
        if hg.get("path") != path:
            f.fail(f"{probe} path {hg.get('path')} is not {path}")
        p = port_names.get(hg.get("port"), hg.get("port"))
        if str(p) != port:
            f.fail(f"{probe} port {hg.get('port')} ({p}) is not the admin port {port}")
    listen_port = env.get("SLUICE_LISTEN", "0.0.0.0:8080").rpartition(":")[2]
    if int(listen_port) not in port_names.values():
        f.fail(f"SLUICE_LISTEN port {listen_port} is not a container port")

    # Files: every SLUICE_*_FILE under a mounted ConfigMap; pins without subPath.
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts") or []}
    vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    for var in ("SLUICE_ROUTES_FILE", "SLUICE_PINS_FILE", "SLUICE_CONFIG_FILE"):
        if var not in env:
            continue
        path = env[var]
        mount = next((m for mp, m in mounts.items() if path.startswith(mp.rstrip("/") + "/")), None)
        if not mount:
            f.fail(f"{var}={path} is not under a volume mount")
            continue
        if mount.get("subPath"):
            f.fail(f"{var} is mounted with subPath: ConfigMap updates would never reach it")
        vol = vols.get(mount["name"], {})
        cm = vol.get("configMap", {}).get("name")
        key = path[len(mount["mountPath"].rstrip("/")) + 1:]
        if cm is None:
            f.fail(f"{var}: volume {mount['name']} is not a ConfigMap")
        elif key not in cms.get(cm, {}):
            f.fail(f"{var}: ConfigMap {cm} has no key {key}")
    if "SLUICE_PINS_FILE" not in env:
        f.fail("no SLUICE_PINS_FILE: the fleet cannot be pinned through a ConfigMap")
    return f.done(
        f"selectors, ports, probes /readyz and /healthz on admin port {port}, "
        f"grace {grace}s > drain {delay + timeout:g}s, ConfigMap files mounted without subPath")


# ---- compose -------------------------------------------------------------------

def cmd_compose(config_path, compose_dir):
    f = Findings("compose")
    with open(config_path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    services = doc.get("services", {})
    for name in ("sluice", "upstream", "prometheus", "grafana", "haproxy", "redis"):
        if name not in services:
            f.fail(f"no service {name}")
    s = services.get("sluice", {})
    env = s.get("environment", {})
    delay = parse_duration_s(env.get("SLUICE_DRAIN_DELAY", "5s"))
    timeout = parse_duration_s(env.get("SLUICE_DRAIN_TIMEOUT", "30s"))
    grace = parse_duration_s(str(s.get("stop_grace_period", "10s")))
    if grace <= delay + timeout:
        f.fail(f"sluice stop_grace_period {grace:g}s <= drain {delay + timeout:g}s")
    for name, svc in services.items():
        for v in svc.get("volumes") or []:
            src = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if src and src.startswith("/") and not os.path.exists(src):
                f.fail(f"{name}: bind mount source {src} does not exist")
    prom = services.get("prometheus", {})
    with open(os.path.join(compose_dir, "prometheus", "prometheus.yml"), encoding="utf-8") as fh:
        pconf = yaml.safe_load(fh)
    targets = [t for sc in pconf["scrape_configs"] for st in sc.get("static_configs", []) for t in st["targets"]]
    targets += [f"{n}:{sd['port']}" for sc in pconf["scrape_configs"]
                for sd in sc.get("dns_sd_configs", []) for n in sd.get("names", [])]
    admin_port = env.get("SLUICE_ADMIN_LISTEN", "").rpartition(":")[2]
    if f"sluice:{admin_port}" not in targets:
        f.fail(f"prometheus.yml does not scrape sluice:{admin_port} (targets {targets})")
    if not prom:
        f.fail("no prometheus service")
    return f.done(f"{len(services)} services, stop_grace_period {grace:g}s > drain {delay + timeout:g}s, "
                  "bind mounts exist, Prometheus scrapes the admin port")


# ---- sluice check-config ---------------------------------------------------------

def localize_upstreams(value):
    """name=host:port|host:port;... with every host replaced by 127.0.0.1."""
    out = []
    for entry in value.split(";"):
        name, eq, addrs = entry.rpartition("=")
        hosts = "|".join("127.0.0.1:" + a.rpartition(":")[2] for a in addrs.split("|"))
        out.append(f"{name}{eq}{hosts}")
    return ";".join(out)


# Paths to PEM files: a Secret's (Kubernetes) or a mounted folder's (compose).
TLS_FILES = ("SLUICE_TLS_CERT", "SLUICE_TLS_KEY", "SLUICE_UPSTREAM_CA",
             "SLUICE_UPSTREAM_CLIENT_CERT", "SLUICE_UPSTREAM_CLIENT_KEY")


def make_tls_pairs(env, local):
    """The certificates the variables name, made here as a certificate manager
    would write them (a Secret is not in the manifests): one self-signed pair per
    SLUICE_TLS_CERT / SLUICE_TLS_KEY entry, unless the mounted files gave it."""
    certs = env.get("SLUICE_TLS_CERT", "").split(",") if env.get("SLUICE_TLS_CERT") else []
    keys = env.get("SLUICE_TLS_KEY", "").split(",") if env.get("SLUICE_TLS_KEY") else []
    for cert, key in zip(certs, keys):
        if os.path.exists(local(cert)) and os.path.exists(local(key)):
            continue
        for p in (cert, key):
            os.makedirs(os.path.dirname(local(p)), exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=sluice.test",
                        "-keyout", local(key), "-out", local(cert)],
                       check=True, capture_output=True)


def run_check_config(sluice_bin, env, files, what):
    """env: SLUICE_ variables as the container sees them; files: container
    path -> content or a host path."""
    with tempfile.TemporaryDirectory() as root:
        def local(p):
            return os.path.join(root, p.lstrip("/"))
        for path, content in files.items():
            os.makedirs(os.path.dirname(local(path)), exist_ok=True)
            with open(local(path), "w", encoding="utf-8") as fh:
                fh.write(content)
        run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for k, v in env.items():
            if not k.startswith("SLUICE_"):
                continue
            if k == "SLUICE_UPSTREAMS":
                v = localize_upstreams(v)
            elif k.endswith("_FILE") or k == "SLUICE_TICK_LOG" or (k == "SLUICE_ACCESS_LOG" and v.startswith("/")):
                os.makedirs(os.path.dirname(local(v)), exist_ok=True)
                v = local(v)
            elif k in TLS_FILES:
                v = ",".join(local(p) for p in v.split(","))
            run_env[k] = v
        make_tls_pairs(env, local)
        r = subprocess.run([sluice_bin, "check-config"], env=run_env, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  FAIL check-config {what}: exit {r.returncode}: {r.stderr.strip()}")
            return 1
        json.loads(r.stdout)
        names = sorted(k for k in run_env if k.startswith("SLUICE_"))
        print(f"check-config {what}: ok ({len(names)} variables: {' '.join(names)})")
        return 0


def cmd_check_config(sluice_bin, source, args):
    if source == "compose":
        with open(args[0], encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
        rc = 0
        for name, svc in doc["services"].items():
            env = svc.get("environment", {}) or {}
            if not any(k.startswith("SLUICE_") for k in env):
                continue
            files = {}
            for v in svc.get("volumes") or []:
                src, target = (v.split(":")[:2] if isinstance(v, str) else (v["source"], v["target"]))
                if os.path.isdir(src):
                    for fn in os.listdir(src):
                        with open(os.path.join(src, fn), encoding="utf-8") as fh:
                            files[os.path.join(target, fn)] = fh.read()
                elif os.path.isfile(src):
                    with open(src, encoding="utf-8") as fh:
                        files[target] = fh.read()
            rc |= run_check_config(sluice_bin, env, files, f"compose service {name}")
        return rc
    if source == "k8s":
        docs = load_docs(args)
        dep = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "sluice")
        env, c, cms = deployment_env(docs, dep)
        vols = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes") or []}
        files = {}
        for m in c.get("volumeMounts") or []:
            cm = vols.get(m["name"], {}).get("configMap", {}).get("name")
            for key, content in cms.get(cm, {}).items():
                files[os.path.join(m["mountPath"], key)] = content
        return run_check_config(sluice_bin, env, files, f"k8s Deployment {dep['metadata']['name']}")
    print(f"check-config: unknown source {source}")
    return 2


# ---- Dockerfile --------------------------------------------------------------------

def dockerfile_instructions(path):
    lines, cur = [], ""
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            if not cur and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.lstrip().startswith("#"):
                continue  # a comment inside a continued instruction
            if line.endswith("\\"):
                cur += line[:-1] + " "
                continue
            cur += line
            lines.append(cur.strip())
            cur = ""
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]


def cmd_dockerfile(path):
    f = Findings("Dockerfile")
    ins = dockerfile_instructions(path)
    args = {}
    stages = []  # (image, name, [instructions])
    for op, rest in ins:
        if op == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
        elif op == "FROM":
            parts = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), parts[0])
            name = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None
            stages.append((image, name, []))
        elif stages:
            stages[-1][2].append((op, rest))
    if len(stages) < 2:
        f.fail("not a multi-stage build")
        return f.done("")
    if not re.fullmatch(r"debian:(12|bookworm)(-slim)?(@.*)?", stages[0][0]):
        f.fail(f"builder stage is {stages[0][0]}, not Debian 12")
    image, _, final = stages[-1]
    if not ("distroless" in image or re.fullmatch(r"debian:(12|bookworm)-slim(@.*)?", image)):
        f.fail(f"runtime stage {image} is neither distroless nor debian:12-slim")
    ops = {}
    for op, rest in final:
        ops.setdefault(op, []).append(rest)
    user = (ops.get("USER") or [""])[-1].split(":")[0]
    if not user.isdigit() or int(user) == 0:
        f.fail(f"USER {user!r} is not a numeric non-root uid (Kubernetes runAsNonRoot needs a number)")

    def exec_form(text, what):
        try:
            v = json.loads(text)
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                return v
        except json.JSONDecodeError:
            pass
        f.fail(f"{what} {text!r} is not in exec form (a JSON array)")
        return []

    ep = exec_form((ops.get("ENTRYPOINT") or ["missing"])[-1], "ENTRYPOINT")
    if ep and not ep[0].endswith("/sluice"):
        f.fail(f"ENTRYPOINT {ep} does not run sluice")
    hc = (ops.get("HEALTHCHECK") or [""])[-1]
    m = re.search(r"\bCMD\s+(\[.*\])\s*$", hc)
    cmd = exec_form(m.group(1), "HEALTHCHECK CMD") if m else []
    if cmd[-2:] != [ep[0] if ep else "", "healthcheck"]:
        f.fail(f"HEALTHCHECK {hc!r} is not `sluice healthcheck` in exec form")
    if (ops.get("STOPSIGNAL") or [""])[-1] != "SIGTERM":
        f.fail("no STOPSIGNAL SIGTERM")
    names = {s[1] for s in stages if s[1]}
    for op, rest in final:
        m = re.match(r"--from=(\S+)", rest)
        if op == "COPY" and m and m.group(1) not in names:
            f.fail(f"COPY --from={m.group(1)}: no such stage")
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    for _, _, body in stages:
        for op, rest in body:
            for script in re.findall(r"(docker/[\w./-]+\.sh)", rest):
                if not os.access(os.path.join(root, script), os.X_OK):
                    f.fail(f"{op} runs {script}, which is not an executable file of the repository")
    return f.done(f"builder {stages[0][0]}, runtime {image}, USER {user}, ENTRYPOINT {ep}, "
                  f"HEALTHCHECK {cmd}, STOPSIGNAL SIGTERM")


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    table = {
        "exported": lambda: cmd_exported(*args),
        "dashboard": lambda: cmd_dashboard(*args),
        "alerts": lambda: cmd_alerts(*args),
        "manifests": lambda: cmd_manifests(args[0], args[1:]),
        "k8s-consistency": lambda: cmd_k8s_consistency(args),
        "compose": lambda: cmd_compose(*args),
        "check-config": lambda: cmd_check_config(args[0], args[1], args[2:]),
        "dockerfile": lambda: cmd_dockerfile(*args),
    }
    if cmd not in table:
        print(__doc__)
        return 2
    return table[cmd]()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
