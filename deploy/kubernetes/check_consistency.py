#!/usr/bin/env python3
"""Cross-file checks of the voicepipe Kubernetes manifests that no schema can express.

Usage: check_consistency.py [MANIFEST_DIR]   (default: the directory of this script)

The repository (pipelines/, Sources/) is found from this script's own location, so a copy of the
manifests elsewhere is checked against the same sources. Prints one line per check, `ok` or `FAIL`,
and exits 1 if any check failed. Needs PyYAML (installed with kubernetes-validate by
scripts/install-python-deps.sh); scripts/check-manifests.sh runs it after the schema validation.
"""

import os
import re
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GRAPH_TEMPLATE = os.path.join(REPO, "pipelines", "serve-recognizer.yaml")
METRICS_SOURCE = os.path.join(REPO, "Sources", "VoicepipeServe", "Serve", "ServeMetrics.swift")

# Resource figures of one worker (docs/kubernetes.md): a session of the serve-recognizer graph
# costs ~0.28 core and ~95 MB, the process ~60 MB when idle.
CPU_PER_SESSION = 0.28
MB_PER_SESSION = 95
MB_IDLE = 60

# Files in the manifest directory that kustomization.yaml must not list.
NOT_IN_KUSTOMIZATION = {"secret.example.yaml", "prometheus-adapter-rules.yaml"}
# Top-level keys `voicepipe serve` reads.
SERVE_KEYS = {"listen", "max_sessions", "drain_grace_s", "nats", "routes"}

failures = 0


def report(ok, what, detail=""):
    global failures
    if not ok:
        failures += 1
    print(("ok    " if ok else "FAIL  ") + what + (f": {detail}" if detail else ""))
    return ok


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last silently;
    the API server's decoder does not)."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]


def cpu_cores(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def memory_bytes(q):
    q = str(q)
    for suffix, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40),
                           ("k", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12)):
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * factor
    return float(q)


def substitute(text, env):
    """`${VAR}` / `${VAR:-default}` / `$$` as voicepipe's GraphLoader.substitute does it. Returns the
    text and the names that are used without a default and are not in `env`."""
    missing = []

    def one(m):
        if m.group(0) == "$$":
            return "$"
        body = m.group(1)
        name, sep, fallback = body.partition(":-")
        value = env.get(name)
        if value is not None and not (value == "" and sep):
            return value
        if sep:
            return fallback
        missing.append(name)
        return ""

    return re.sub(r"\$\$|\$\{([^}]*)\}", one, text), missing


def selector_matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def main():
    manifest_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
    print(f"manifests: {manifest_dir}")

    # --- every file parses, without duplicate keys -------------------------------------------------
    docs = {}
    for name in sorted(os.listdir(manifest_dir)):
        if not name.endswith((".yaml", ".yml")):
            continue
        try:
            docs[name] = load_all(os.path.join(manifest_dir, name))
            report(True, f"{name} parses as YAML without duplicate keys")
        except yaml.YAMLError as e:
            report(False, f"{name} parses as YAML without duplicate keys", str(e).replace("\n", " "))

    def find(kind, name=None):
        for fname, items in docs.items():
            for d in items:
                if isinstance(d, dict) and d.get("kind") == kind and (name is None or d.get("metadata", {}).get("name") == name):
                    return fname, d
        return None, None

    # --- kustomization -----------------------------------------------------------------------------
    _, kust = find("Kustomization")
    if report(kust is not None, "kustomization.yaml is present"):
        listed = set(kust.get("resources", []))
        missing_files = sorted(r for r in listed if not os.path.exists(os.path.join(manifest_dir, r)))
        report(not missing_files, "kustomization lists only existing files", ", ".join(missing_files))
        unlisted = sorted(n for n in docs if n != "kustomization.yaml" and n not in NOT_IN_KUSTOMIZATION and n not in listed)
        report(not unlisted, "kustomization lists every manifest", "not listed: " + ", ".join(unlisted) if unlisted else "")
        leaked = sorted(listed & NOT_IN_KUSTOMIZATION)
        report(not leaked, "kustomization leaves out the example Secret and the adapter rules", ", ".join(leaked))

    # --- deployment ----------------------------------------------------------------------------------
    _, dep = find("Deployment")
    if not report(dep is not None, "a Deployment is present"):
        return
    pod = dep["spec"]["template"]["spec"]
    pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
    annotations = dep["spec"]["template"]["metadata"].get("annotations", {})
    containers = pod.get("containers", [])
    container = next((c for c in containers if c.get("name") == "voicepipe"), containers[0] if containers else {})
    report(selector_matches(dep["spec"]["selector"].get("matchLabels", {}), pod_labels),
           "Deployment selector matches its pod template labels")

    argv = list(container.get("command", [])) + list(container.get("args", []))
    serve_path = argv[argv.index("serve") + 1] if "serve" in argv and argv.index("serve") + 1 < len(argv) else None
    report(bool(argv) and os.path.basename(argv[0]) == "voicepipe" and serve_path is not None,
           "container runs `voicepipe serve FILE`", " ".join(argv))

    # The configuration file comes from the ConfigMap volume mounted at its directory.
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    config_mount = next((m for m in container.get("volumeMounts", [])
                         if serve_path and os.path.dirname(serve_path) == m["mountPath"].rstrip("/")), None)
    cm_name = volumes.get(config_mount["name"], {}).get("configMap", {}).get("name") if config_mount else None
    report(cm_name is not None, f"{serve_path} is in a mounted ConfigMap", cm_name or "no ConfigMap volume at its directory")
    _, cm = find("ConfigMap", cm_name) if cm_name else (None, None)
    cm_data = (cm or {}).get("data", {})
    serve_key = os.path.basename(serve_path or "")
    if not report(serve_key in cm_data, f"ConfigMap {cm_name} holds {serve_key}"):
        return

    # --- the serve configuration, as the container will see it ------------------------------------
    # Environment of the container: literal values (with $(VAR) references expanded), downward-API
    # fields and required Secret keys are always set; an optional Secret key may be absent.
    env, optional_env = {}, []
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), str(e["value"]))
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = "<" + e["valueFrom"]["fieldRef"]["fieldPath"] + ">"
        elif "secretKeyRef" in e.get("valueFrom", {}):
            if e["valueFrom"]["secretKeyRef"].get("optional", False):
                optional_env.append(e["name"])
            else:
                env[e["name"]] = "<secret>"
    text, unset = substitute(cm_data[serve_key], env)
    detail = ", ".join(f"{n} (an optional Secret key)" if n in optional_env else n for n in sorted(set(unset)))
    report(not unset, "every variable serve.yaml uses without a default is always set in the container", detail)
    try:
        serve = yaml.load(text, Loader=StrictLoader) or {}
    except yaml.YAMLError as e:
        report(False, "serve.yaml parses after substitution", str(e).replace("\n", " "))
        return
    report(isinstance(serve, dict) and set(serve) <= SERVE_KEYS, "serve.yaml has only keys voicepipe serve reads",
           ", ".join(sorted(set(serve) - SERVE_KEYS)) if isinstance(serve, dict) else "not a mapping")
    listen_port = int(serve.get("listen", {}).get("port", 8080))
    drain_grace = int(serve.get("drain_grace_s", 30))
    max_sessions = int(serve.get("max_sessions", 100))
    print(f"      serve.yaml: listen port {listen_port}, max_sessions {max_sessions}, drain_grace_s {drain_grace}")
    nats = serve.get("nats", {})
    report(isinstance(nats, dict) and bool(nats.get("url")) and nats.get("worker") == "<metadata.name>",
           "nats: url is set and worker is the pod name (downward API)",
           f"url {nats.get('url')!r}, worker {nats.get('worker')!r}")

    # Graph templates: present in the ConfigMap next to serve.yaml; the one shipped in the repository
    # must be identical.
    routes = serve.get("routes", []) or []
    graphs = sorted({r.get("graph") for r in routes if r.get("graph")})
    absent = [g for g in graphs if g.startswith("/") or g not in cm_data]
    report(bool(graphs) and not absent, "every route's graph is in the ConfigMap", ", ".join(absent))
    with open(GRAPH_TEMPLATE, encoding="utf-8") as f:
        repo_graph = f.read()
    same = cm_data.get("serve-recognizer.yaml") == repo_graph
    report(same, "ConfigMap serve-recognizer.yaml equals pipelines/serve-recognizer.yaml",
           "" if same else "they differ; copy the file into configmap.yaml again")

    # --- ports ---------------------------------------------------------------------------------------
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    report(ports.get("http") == listen_port, "container port `http` is listen.port", f"{ports.get('http')} vs {listen_port}")
    wyoming = [int(r["port"]) for r in routes if r.get("protocol") == "wyoming"]
    for port in wyoming:
        report(port in ports.values(), f"Wyoming route port {port} is a container port")

    # --- probes ------------------------------------------------------------------------------------
    def probe_ok(probe, path):
        get = (container.get(probe) or {}).get("httpGet", {})
        port = get.get("port")
        return get.get("path") == path and (port == listen_port or ports.get(port) == listen_port)

    report(probe_ok("readinessProbe", "/readyz"), "readinessProbe is GET /readyz on listen.port")
    report(probe_ok("livenessProbe", "/healthz"), "livenessProbe is GET /healthz on listen.port")
    if "startupProbe" in container:
        report(probe_ok("startupProbe", "/healthz"), "startupProbe is GET /healthz on listen.port")
    live = container.get("livenessProbe", {})
    live_window = live.get("periodSeconds", 10) * live.get("failureThreshold", 3)
    report(live_window >= 30 and live.get("timeoutSeconds", 1) >= 2,
           "livenessProbe tolerates a busy pod (>= 30 s of failures, timeout >= 2 s)",
           f"{live_window} s, timeout {live.get('timeoutSeconds', 1)} s")

    # --- shutdown arithmetic -------------------------------------------------------------------------
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    sleep_s = None
    if "sleep" in pre_stop:
        sleep_s = int(pre_stop["sleep"]["seconds"])
    elif "exec" in pre_stop:
        cmd = pre_stop["exec"].get("command", [])
        if cmd and os.path.basename(cmd[0]) == "sleep" and len(cmd) == 2:
            sleep_s = int(cmd[1])
    if report(sleep_s is not None, "preStop sleeps before SIGTERM", f"{sleep_s} s" if sleep_s is not None else "no sleep found"):
        grace = pod.get("terminationGracePeriodSeconds", 30)
        need = sleep_s + drain_grace
        report(grace >= need, "terminationGracePeriodSeconds >= preStop sleep + drain_grace_s",
               f"{grace} >= {sleep_s} + {drain_grace} = {need} (margin {grace - need} s)")

    # --- rollout, security, scraping -----------------------------------------------------------------
    strategy = dep["spec"].get("strategy", {})
    report(strategy.get("type", "RollingUpdate") == "RollingUpdate"
           and str(strategy.get("rollingUpdate", {}).get("maxUnavailable")) == "0",
           "rolling update with maxUnavailable 0")
    sc, psc = container.get("securityContext", {}), pod.get("securityContext", {})
    report((sc.get("runAsNonRoot") or psc.get("runAsNonRoot")) is True and sc.get("readOnlyRootFilesystem") is True
           and sc.get("allowPrivilegeEscalation") is False and "ALL" in sc.get("capabilities", {}).get("drop", []),
           "non-root, read-only root filesystem, no privilege escalation, all capabilities dropped")
    report(annotations.get("prometheus.io/scrape") == "true" and str(annotations.get("prometheus.io/port")) == str(listen_port)
           and annotations.get("prometheus.io/path", "/metrics") == "/metrics",
           "Prometheus scrape annotations point at /metrics on listen.port")

    # --- resources against max_sessions ------------------------------------------------------------
    res = container.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    need_cpu = max_sessions * CPU_PER_SESSION
    need_mem = (MB_IDLE + max_sessions * MB_PER_SESSION) * 10**6
    if report("cpu" in req and "memory" in lim, "CPU request and memory limit are set"):
        report(cpu_cores(req["cpu"]) >= need_cpu and ("cpu" not in lim or cpu_cores(lim["cpu"]) >= need_cpu),
               "CPU covers max_sessions",
               f"request {req['cpu']}, limit {lim.get('cpu', 'none')} >= {max_sessions} x {CPU_PER_SESSION} = {need_cpu:.2f} cores")
        report(memory_bytes(lim["memory"]) >= need_mem and memory_bytes(req.get("memory", lim["memory"])) >= need_mem,
               "memory covers max_sessions",
               f"request {req.get('memory')}, limit {lim['memory']} >= {MB_IDLE} + {max_sessions} x {MB_PER_SESSION} MB = {need_mem / 2**20:.0f} MiB")

    # --- Secret references ---------------------------------------------------------------------------
    _, secret = find("Secret")
    refs = [(e["name"], e["valueFrom"]["secretKeyRef"]) for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
    if secret is not None:
        keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
        wrong = [f"{n} -> {r['name']}/{r['key']}" for n, r in refs
                 if r["name"] != secret["metadata"]["name"] or (r["key"] not in keys and not r.get("optional", False))]
        report(not wrong, f"secretKeyRefs name Secret {secret['metadata']['name']} and keys it has", ", ".join(wrong))

    # --- Service -------------------------------------------------------------------------------------
    _, svc = find("Service")
    if report(svc is not None, "a Service is present"):
        report(selector_matches(svc["spec"].get("selector", {}), pod_labels), "Service selector matches the pod labels")
        bad = [f"{p.get('name')}: {p.get('targetPort')}" for p in svc["spec"].get("ports", [])
               if not (p.get("targetPort") in ports or p.get("targetPort") in ports.values()
                       or ("targetPort" not in p and p["port"] in ports.values()))]
        report(not bad, "Service targetPorts are container ports", ", ".join(bad))
        svc_targets = {ports.get(p.get("targetPort"), p.get("targetPort", p["port"])) for p in svc["spec"].get("ports", [])}
        report({listen_port, *wyoming} <= svc_targets, "Service exposes listen.port and the Wyoming port",
               f"targets {sorted(svc_targets, key=str)}")
        report(svc["spec"].get("sessionAffinity", "None") == "None", "Service has no session affinity (one session = one connection)")

    # --- PodDisruptionBudget -----------------------------------------------------------------------
    _, pdb = find("PodDisruptionBudget")
    if report(pdb is not None, "a PodDisruptionBudget is present"):
        report(selector_matches(pdb["spec"].get("selector", {}).get("matchLabels", {}), pod_labels),
               "PodDisruptionBudget selector matches the pod labels")

    # --- HorizontalPodAutoscaler and the adapter rule ---------------------------------------------
    with open(METRICS_SOURCE, encoding="utf-8") as f:
        exposed = set(re.findall(r'"(voicepipe_[a-z0-9_]+)', f.read()))
    _, hpa = find("HorizontalPodAutoscaler")
    if report(hpa is not None, "a HorizontalPodAutoscaler is present"):
        target = hpa["spec"]["scaleTargetRef"]
        report(target.get("kind") == "Deployment" and target.get("name") == dep["metadata"]["name"],
               "HPA scales the Deployment", f"{target.get('kind')}/{target.get('name')}")
        report("replicas" not in dep["spec"], "Deployment leaves replicas to the HPA")
        pods_metrics = [m["pods"] for m in hpa["spec"].get("metrics", []) if m.get("type") == "Pods"]
        for m in pods_metrics:
            name = m["metric"]["name"]
            report(name in exposed, f"HPA metric {name} is exposed on /metrics (ServeMetrics.swift)")
            avg = m["target"].get("averageValue")
            report(avg is not None and 0 < cpu_cores(avg) < max_sessions, f"HPA target {avg} sessions per pod is below max_sessions {max_sessions}")
        report(bool(pods_metrics), "HPA scales on a per-pod sessions metric")
        report(any(m.get("type") == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["spec"].get("metrics", [])),
               "HPA has a CPU fallback")
        down = hpa["spec"].get("behavior", {}).get("scaleDown", {}).get("stabilizationWindowSeconds", 300)
        report(down >= 300, "HPA scale-down stabilization >= 300 s", f"{down} s")

        _, adapter = find("ConfigMap", "prometheus-adapter")
        if report(adapter is not None and "config.yaml" in adapter.get("data", {}), "prometheus-adapter rules are present"):
            rules = (yaml.load(adapter["data"]["config.yaml"], Loader=StrictLoader) or {}).get("rules", [])
            served = {}
            for r in rules:
                series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", r.get("seriesQuery", ""))
                series = series.group(1) if series else None
                named = r.get("name", {})
                served[named.get("as") or series] = (series, r)
            for m in pods_metrics:
                name = m["metric"]["name"]
                series, rule = served.get(name, (None, None))
                report(rule is not None, f"adapter rule serves {name}")
                if rule:
                    report(series in exposed, f"adapter rule reads {series}, which /metrics exposes")
                    overrides = rule.get("resources", {}).get("overrides", {})
                    report({"namespace", "pod"} <= {v.get("resource") for v in overrides.values()}
                           and "sum" in rule.get("metricsQuery", "") and "<<.GroupBy>>" in rule.get("metricsQuery", ""),
                           "adapter rule maps namespace and pod and sums the routes per pod")


if __name__ == "__main__":
    try:
        main()
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        report(False, "manifests have the expected structure", f"{type(e).__name__}: {e}")
    print(f"{failures} check(s) failed" if failures else "all consistency checks passed")
    sys.exit(1 if failures else 0)
