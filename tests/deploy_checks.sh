#!/usr/bin/env bash
# Checks the deployment files against each other and against the built binaries:
#   systemd   deploy/systemd/*.service pass `systemd-analyze verify` (with ExecStart pointed at
#             the built binaries), a hardening threshold (`systemd-analyze security --offline`),
#             and name only flags the binaries know; the example env files hold no secret
#   k8s       `kubectl kustomize` (or `kustomize build`) of deploy/k8s and deploy/k8s/overlays/gpu:
#             the objects, probes, ports, volumes, Secrets and flags that must be there
#   yamllint  deploy/k8s and the kustomize output, with deploy/k8s/.yamllint
#   container deploy/container/runtime-packages.txt covers every shared library the built
#             binaries load (ldd + dpkg -S); the Containerfiles use it and copy what CMake reads
#   tls       deploy/tls/make-certs.sh: its certificates verify against their CA (as server and
#             client, with their names and addresses), never against another run's CA
#   docs      every deploy/... path that docs/deploy.md names exists
# Usage: tests/deploy_checks.sh BUILD_DIR. Exit 0: all passed; 1: a check failed; 77: nothing
# failed but a part was skipped because its tool is missing (named in the output).
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

declare -A bin=(
  [ps_scheduler]=$build/scheduler/ps_scheduler
  [ps_server]=$build/server/ps_server
  [ps_worker]=$build/worker/ps_worker
  [psctl]=$build/tools/psctl
)
for b in "${!bin[@]}"; do
  [ -x "${bin[$b]}" ] || { echo "deploy_checks: ${bin[$b]} is missing: build it first" >&2; exit 1; }
done

failed=()
skipped=()
fail() { echo "FAIL: $*" >&2; failed+=("$1"); }
have() { command -v "$1" >/dev/null 2>&1; }
part() { echo; echo "== $1"; }

# known[DAEMON]: the daemon's flag names, one a line (absl's --helpfull).
declare -A known=()
for b in ps_scheduler ps_server ps_worker; do
  known[$b]=$("${bin[$b]}" --helpfull 2>&1 | sed -n 's/^ *--\([A-Za-z0-9_]*\) (.*/\1/p' | sort -u || true)
  [ -n "${known[$b]}" ] || { echo "deploy_checks: $b --helpfull lists no flags" >&2; exit 1; }
done

# check_flags WHERE BINARY ARG...: every --flag among ARGs is one BINARY knows.
check_flags() {
  local where=$1 b=$2 arg name
  shift 2
  for arg in "$@"; do
    [[ $arg == --* ]] || continue
    name=${arg#--}
    name=${name%%=*}
    grep -qx -- "$name" <<<"${known[$b]}" || fail flags "$where: $b has no flag --$name"
    case $arg in
      --*token=* | --*password=* | --*secret=*) fail "secrets" "$where: a secret on the command line: $arg" ;;
    esac
  done
}

# ---------------------------------------------------------------------------------------------
part "systemd units"
if have systemd-analyze; then
  units=(ps-scheduler ps-server ps-worker)
  mkdir -p "$tmp/systemd"
  for u in "${units[@]}"; do
    f=deploy/systemd/$u.service
    b=${u/-/_}
    daemon=${u#ps-}
    [ -f "$f" ] || { fail systemd "$f is missing"; continue; }
    # The unit's settings, continuation lines joined.
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$f" | grep -v '^[#;]' >"$tmp/$u.flat"
    exec_start=$(sed -n 's/^ExecStart=//p' "$tmp/$u.flat")
    read -r -a words <<<"$exec_start"
    [ "${words[0]:-}" = "/usr/local/bin/$b" ] || fail systemd "$f: ExecStart does not run /usr/local/bin/$b"
    for want in "User=paramserver" "Group=paramserver" "EnvironmentFile=/etc/paramserver/$daemon.env" \
        "Restart=on-failure" "ProtectSystem=strict" "ProtectHome=yes" "PrivateTmp=yes" \
        "NoNewPrivileges=yes" "CapabilityBoundingSet=" "WantedBy=multi-user.target"; do
      grep -qx -- "$want" "$tmp/$u.flat" || fail systemd "$f lacks $want"
    done
    grep -q '^StateDirectory=paramserver/' "$tmp/$u.flat" || fail systemd "$f has no StateDirectory=paramserver/..."
    grep -q '^StartLimitBurst=' "$tmp/$u.flat" || fail systemd "$f sets no StartLimitBurst="
    # Every directory a flag of ExecStart names under /var/lib/paramserver is a StateDirectory.
    for dir in $(grep -o '=/var/lib/paramserver/[a-z]*' <<<"$exec_start" | sed 's|=/var/lib/||'); do
      grep -q "^StateDirectory=.*\b$dir\b" "$tmp/$u.flat" || fail systemd "$f: $dir is not a StateDirectory="
    done
    # The env file: the one variable ExecStart expands, and only flags the binary knows.
    var=$(grep -o '\$[A-Z_]*' <<<"$exec_start" | tr -d '$')
    [ -n "$var" ] || { fail systemd "$f: ExecStart expands no variable of its env file"; continue; }
    env=deploy/systemd/$daemon.env
    [ -f "$env" ] || { fail systemd "$env is missing"; continue; }
    value=$(env -i bash -c 'set -a; . "$1"; printf "%s" "${!2:-}"' _ "$env" "$var")
    [ -n "$value" ] || fail systemd "$env does not set $var"
    grep -Eq '^ *[A-Z_]*(TOKEN|PASSWORD|SECRET)[A-Z_]*=' "$env" && fail secrets "$env sets a token variable"
    read -r -a env_words <<<"$value"
    check_flags "$f" "$b" "${words[@]:1}"
    check_flags "$env" "$b" "${env_words[@]}"
    # For verify: ExecStart pointed at the built binary (the unit's user need not exist here).
    sed "s|/usr/local/bin/$b\b|${bin[$b]}|" "$f" >"$tmp/systemd/$u.service"
  done
  if (cd "$tmp/systemd" && systemd-analyze verify "${units[@]/%/.service}") >"$tmp/verify.log" 2>&1; then
    rc=0
  else
    rc=$?
  fi
  # verify warns (and exits 0) on unknown keys and bad values: any line about our units fails.
  if [ "$rc" -ne 0 ] || grep -Eq "ps-(scheduler|server|worker)\.service|$tmp" "$tmp/verify.log"; then
    cat "$tmp/verify.log" >&2
    fail systemd "systemd-analyze verify (exit $rc)"
  else
    echo "systemd-analyze verify: ${units[*]} ok"
  fi
  # The check itself: a unit with a bad value must be reported.
  sed 's/^Restart=on-failure/Restart=sometimes/' "$tmp/systemd/ps-server.service" >"$tmp/systemd/ps-broken.service"
  (cd "$tmp/systemd" && systemd-analyze verify ps-broken.service) >"$tmp/broken.log" 2>&1 || true
  grep -q "ps-broken.service" "$tmp/broken.log" ||
    fail systemd "systemd-analyze verify did not report a unit with Restart=sometimes"
  rm -f "$tmp/systemd/ps-broken.service"
  # Hardening: exposure at most 3.0 of 10 (systemd-analyze security's scale).
  if (cd "$tmp/systemd" && systemd-analyze security --offline=yes --threshold=30 \
        "${units[@]/%/.service}") >"$tmp/security.log" 2>&1; then
    grep 'Overall exposure' "$tmp/security.log" || true
  else
    grep 'Overall exposure' "$tmp/security.log" >&2 || cat "$tmp/security.log" >&2
    fail systemd "systemd-analyze security: exposure above 3.0"
  fi
else
  echo "SKIP: no systemd-analyze (Debian: systemd)"
  skipped+=(systemd)
fi

# ---------------------------------------------------------------------------------------------
part "kustomize"
k8s_ok=0
# kustomize: a kustomize binary, or kubectl 1.22 or later (kustomize 4.2: the labels field).
# Debian 12's kubernetes-client (kubectl 1.20) is too old: it counts as missing.
kustomize=()
if have kustomize; then
  kustomize=(kustomize build)
elif have kubectl; then
  minor=$(kubectl version --client -o json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+"))' \
    2>/dev/null || echo 0)
  if [ "${minor:-0}" -ge 22 ] 2>/dev/null; then
    kustomize=(kubectl kustomize)
  else
    echo "note: kubectl 1.${minor:-?} is older than 1.22"
  fi
fi
if [ ${#kustomize[@]} -gt 0 ] && /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  if ! "${kustomize[@]}" deploy/k8s >"$tmp/k8s-base.yaml" 2>"$tmp/kustomize.log"; then
    cat "$tmp/kustomize.log" >&2; fail k8s "${kustomize[*]} deploy/k8s"
  elif ! "${kustomize[@]}" deploy/k8s/overlays/gpu >"$tmp/k8s-gpu.yaml" 2>"$tmp/kustomize.log"; then
    cat "$tmp/kustomize.log" >&2; fail k8s "${kustomize[*]} deploy/k8s/overlays/gpu"
  else
    k8s_ok=1
    # The checks print "FAIL ..." lines and "ARGS binary where --flag..." lines for check_flags.
    /usr/bin/python3 - "$tmp/k8s-base.yaml" "$tmp/k8s-gpu.yaml" >"$tmp/k8s.out" <<'PY' || true
import re, sys, yaml

def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]

errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond

def find(docs, kind, name):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    return None

def flag(args, name):
    """The value of --name=VALUE in args, or None."""
    for a in args:
        if a.startswith("--" + name + "="):
            return a.split("=", 1)[1]
    return None

def port_of(address):
    return int(address.rsplit(":", 1)[1]) if address and ":" in address else None

def check_tree(docs, variant):
    ns = find(docs, "Namespace", "paramserver")
    check(ns is not None, f"{variant}: no Namespace paramserver")
    for d in docs:
        if d["kind"] != "Namespace":
            check(d["metadata"].get("namespace") == "paramserver",
                  f"{variant}: {d['kind']}/{d['metadata']['name']} is not in namespace paramserver")
        check(d["kind"] != "Secret", f"{variant}: a Secret in the manifests ({d['metadata']['name']}): "
              "secrets are made with kubectl create secret, never kept in git")
    sched = find(docs, "StatefulSet", "ps-scheduler")
    server = find(docs, "StatefulSet", "ps-server")
    worker = find(docs, "Deployment", "ps-worker") or find(docs, "StatefulSet", "ps-worker")
    for what, obj in (("StatefulSet ps-scheduler", sched), ("StatefulSet ps-server", server),
                      ("workload ps-worker", worker)):
        check(obj is not None, f"{variant}: no {what}")
    if not (sched and server and worker):
        return
    check(sched["spec"].get("replicas") == 1, f"{variant}: the scheduler must have 1 replica")
    # The scheduler's RocksDB state on a claim of its own.
    vcts = sched["spec"].get("volumeClaimTemplates") or []
    check(len(vcts) == 1, f"{variant}: ps-scheduler needs one volumeClaimTemplate (its state)")
    # The servers' headless Service.
    svc = find(docs, "Service", server["spec"].get("serviceName", ""))
    check(svc is not None and svc["spec"].get("clusterIP") == "None",
          f"{variant}: ps-server's serviceName is not a headless Service")
    # The shared checkpoint claim.
    rwx = [d for d in docs if d["kind"] == "PersistentVolumeClaim"
           and "ReadWriteMany" in d["spec"].get("accessModes", [])]
    check(len(rwx) == 1, f"{variant}: want one ReadWriteMany PersistentVolumeClaim, got {len(rwx)}")
    rwx_name = rwx[0]["metadata"]["name"] if rwx else None
    check(find(docs, "NetworkPolicy", "paramserver") is not None, f"{variant}: no NetworkPolicy")
    sched_svc = find(docs, "Service", "ps-scheduler")
    check(sched_svc is not None, f"{variant}: no Service ps-scheduler")

    for obj, role in ((sched, "scheduler"), (server, "server"), (worker, "worker")):
        where = f"{variant}: {obj['kind']}/{obj['metadata']['name']}"
        pod = obj["spec"]["template"]
        spec = pod["spec"]
        containers = spec["containers"]
        check(len(containers) == 1, f"{where}: want one container")
        c = containers[0]
        binary = c.get("command", [""])[0].rsplit("/", 1)[-1]
        check(binary == "ps_" + role, f"{where}: command runs '{binary}', not ps_{role}")
        args = c.get("args", [])
        print("ARGS", binary, where.replace(" ", ""), *args)
        # --advertise from the downward API: the scheduler and the workers their pod IP (the
        # host of their metrics and health addresses), the servers the stable name their
        # headless Service gives the pod (what TLS checks against the server's certificate).
        env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
               for e in c.get("env", [])}
        adv = flag(args, "advertise") or ""
        if role == "server":
            want = "$(POD_NAME)." + obj["spec"].get("serviceName", "?") + \
                ".$(POD_NAMESPACE).svc.cluster.local"
            check(adv == want, f"{where}: --advertise is '{adv}', not {want}")
            check(env.get("POD_NAME") == "metadata.name" and
                  env.get("POD_NAMESPACE") == "metadata.namespace",
                  f"{where}: no env POD_NAME and POD_NAMESPACE from the downward API")
            check(svc is not None and svc["spec"].get("publishNotReadyAddresses") is True,
                  f"{where}: the headless Service must publish not-ready addresses (servers "
                  "register before they are ready)")
        else:
            check(adv.split(":")[0] == "$(POD_IP)", f"{where}: --advertise is '{adv}', not $(POD_IP)")
            check(env.get("POD_IP") == "status.podIP", f"{where}: no env POD_IP from status.podIP")
        # Native grpc probes on the --health_listen port.
        health = port_of(flag(args, "health_listen"))
        check(health is not None, f"{where}: no --health_listen=HOST:PORT")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe == "startupProbe" and probe not in c:
                continue
            got = c.get(probe, {}).get("grpc", {}).get("port")
            check(got is not None and got == health,
                  f"{where}: {probe} is not a grpc probe on the --health_listen port {health} ({got})")
        # Prometheus annotations on the --metrics_listen port.
        metrics = port_of(flag(args, "metrics_listen"))
        ann = pod["metadata"].get("annotations", {})
        check(ann.get("prometheus.io/scrape") == "true", f"{where}: no prometheus.io/scrape: 'true'")
        check(metrics is not None and ann.get("prometheus.io/port") == str(metrics),
              f"{where}: prometheus.io/port {ann.get('prometheus.io/port')} is not the "
              f"--metrics_listen port {metrics}")
        ports = {p["containerPort"] for p in c.get("ports", [])}
        for p in (health, metrics):
            check(p in ports, f"{where}: port {p} not among the containerPorts")
        # Not root.
        sc = spec.get("securityContext", {})
        check(sc.get("runAsNonRoot") is True, f"{where}: runAsNonRoot is not true")
        # Files the flags name lie in mounted volumes; tokens and TLS from Secrets.
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for t in obj["spec"].get("volumeClaimTemplates", []):
            volumes[t["metadata"]["name"]] = {"name": t["metadata"]["name"], "claimTemplate": True}
        mounts = {m["mountPath"]: volumes.get(m["name"], {}) for m in c.get("volumeMounts", [])}
        def volume_of(path):
            best = None
            for mp in mounts:
                if path == mp or path.startswith(mp.rstrip("/") + "/"):
                    if best is None or len(mp) > len(best):
                        best = mp
            return mounts.get(best) if best else None
        for name in ("tls_ca", "tls_cert", "tls_key", "cluster_token_file", "admin_token_file"):
            path = flag(args, name)
            if path is None:
                check(name == "admin_token_file" and role != "scheduler",
                      f"{where}: no --{name}")
                continue
            v = volume_of(path)
            check(v is not None and "secret" in v, f"{where}: --{name}={path} is not in a Secret volume")
        checkpoint_dirs = [flag(args, "checkpoint_root")] if role == "scheduler" else \
            (flag(args, "checkpoint_roots") or "").split(",") if role == "server" else []
        for d in filter(None, checkpoint_dirs):
            v = volume_of(d)
            check(v is not None and v.get("persistentVolumeClaim", {}).get("claimName") == rwx_name,
                  f"{where}: checkpoint directory {d} is not on the ReadWriteMany claim")
        if role in ("scheduler", "server"):
            check(bool(checkpoint_dirs) and all(checkpoint_dirs),
                  f"{where}: no checkpoint directory flag")
        if role == "scheduler":
            state = flag(args, "state_dir") or ""
            v = volume_of(state)
            check(v is not None and v.get("claimTemplate"),
                  f"{where}: --state_dir={state} is not on the volumeClaimTemplate")
        else:
            # Servers and workers reach the scheduler through its Service.
            want = f"ps-scheduler:{sched_svc['spec']['ports'][0]['port']}" if sched_svc else "?"
            check(flag(args, "scheduler") == want, f"{where}: --scheduler is not {want}")
    return sched, server, worker

base = load(sys.argv[1])
gpu = load(sys.argv[2])
trees = {}
for variant, docs in (("deploy/k8s", base), ("overlays/gpu", gpu)):
    trees[variant] = check_tree(docs, variant)

def container(obj):
    return obj["spec"]["template"]["spec"]["containers"][0]

if trees["deploy/k8s"] and trees["overlays/gpu"]:
    for obj in trees["deploy/k8s"]:
        c = container(obj)
        check(c["image"] == "paramserver:latest",
              f"deploy/k8s: {obj['metadata']['name']} runs {c['image']}, not paramserver:latest")
        check("nvidia.com/gpu" not in c.get("resources", {}).get("limits", {}),
              f"deploy/k8s: {obj['metadata']['name']} asks for a GPU")
    w = container(trees["deploy/k8s"][2])
    check(flag(w.get("args", []), "device") == "cpu", "deploy/k8s: the worker's --device is not cpu")
    sched, server, worker = trees["overlays/gpu"]
    for obj in (sched, server):
        check(container(obj)["image"] == "paramserver:latest",
              f"overlays/gpu: {obj['metadata']['name']} should stay on paramserver:latest")
    w = container(worker)
    check(w["image"] == "paramserver-cuda:latest",
          f"overlays/gpu: the worker runs {w['image']}, not paramserver-cuda:latest")
    check(str(w.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")) == "1",
          "overlays/gpu: the worker has no limit nvidia.com/gpu: 1")
    devices = [a for a in w.get("args", []) if a.startswith("--device")]
    check(devices == ["--device=cuda:0"], f"overlays/gpu: the worker's device flags are {devices}")

for e in errors:
    print("FAIL", e)
PY
    if grep -q '^FAIL' "$tmp/k8s.out"; then
      sed -n 's/^FAIL /FAIL: k8s: /p' "$tmp/k8s.out" >&2
      fail k8s "the kustomize output lacks what it needs (above)"
    elif ! grep -q '^ARGS' "$tmp/k8s.out"; then
      cat "$tmp/k8s.out" >&2
      fail k8s "the checks of the kustomize output did not run"
    else
      echo "kustomize deploy/k8s, deploy/k8s/overlays/gpu: ok"
    fi
    # "ARGS binary variant:Kind/name arg...": the flags of each container.
    while read -r _ b where rest; do
      read -r -a a <<<"$rest"
      check_flags "$where" "$b" "${a[@]}"
    done < <(grep '^ARGS' "$tmp/k8s.out")
  fi
else
  echo "SKIP: no kustomize, kubectl 1.22+ or python3 yaml module (kubectl: Kubernetes' apt repository pkgs.k8s.io; python3-yaml)"
  skipped+=(k8s)
fi

# ---------------------------------------------------------------------------------------------
part "yamllint"
if have yamllint; then
  lint=(deploy/k8s)
  [ "$k8s_ok" -eq 1 ] && lint+=("$tmp/k8s-base.yaml" "$tmp/k8s-gpu.yaml")
  if yamllint --strict -c deploy/k8s/.yamllint "${lint[@]}"; then
    echo "yamllint: ${lint[*]/#$tmp\//kustomize output } ok"
  else
    fail yamllint "yamllint --strict -c deploy/k8s/.yamllint ${lint[*]}"
  fi
else
  echo "SKIP: no yamllint (Debian: yamllint)"
  skipped+=(yamllint)
fi

# ---------------------------------------------------------------------------------------------
part "container: runtime packages and Containerfiles"
runtime_list=deploy/container/runtime-packages.txt
if have ldd && have dpkg; then
  mapfile -t runtime < <(sed 's/#.*//' "$runtime_list" | tr -s ' \t' '\n' | grep .)
  [ ${#runtime[@]} -gt 0 ] || fail container "$runtime_list lists no package"
  allowed=" libc6 libgcc-s1 libstdc++6 ${runtime[*]} "
  declare -A needed=() owner=()
  for b in ps_scheduler ps_server ps_worker psctl; do
    ldd "${bin[$b]}" >"$tmp/ldd.$b" 2>&1 || { cat "$tmp/ldd.$b" >&2; fail container "ldd ${bin[$b]}"; continue; }
    if grep -q 'not found' "$tmp/ldd.$b"; then
      grep 'not found' "$tmp/ldd.$b" >&2; fail container "$b: libraries not found"
    fi
  done
  # Each library's package, from one dpkg -S over every form of every path: as ldd resolved it
  # and its target, under /lib and /usr/lib alike (merged /usr: dpkg knows one of them).
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' "$tmp"/ldd.* | sort -u >"$tmp/libs"
  while read -r path; do
    for f in "$path" "$(readlink -f "$path")"; do
      printf '%s\n' "$f" "${f/#\/usr\/lib\//\/lib\/}" "${f/#\/lib\//\/usr\/lib\/}"
    done
  done <"$tmp/libs" | sort -u >"$tmp/lib-forms"
  xargs dpkg -S <"$tmp/lib-forms" 2>/dev/null | grep -v '^diversion' >"$tmp/dpkg-S" || true
  while IFS= read -r line; do
    owner[${line#*: }]=${line%%:*}
  done <"$tmp/dpkg-S"
  for b in ps_scheduler ps_server ps_worker psctl; do
    while read -r lib path; do
      pkg=""
      for f in "$path" "$(readlink -f "$path")"; do
        for alt in "$f" "${f/#\/usr\/lib\//\/lib\/}" "${f/#\/lib\//\/usr\/lib\/}"; do
          [ -n "$pkg" ] || pkg=${owner[$alt]:-}
        done
      done
      [ -n "$pkg" ] || { fail container "$b: $lib ($path) belongs to no Debian package"; continue; }
      needed[$pkg]=1
      [[ $allowed == *" $pkg "* ]] ||
        fail container "$b needs $lib from package $pkg, which $runtime_list does not list"
    done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' "$tmp/ldd.$b")
  done
  for p in "${runtime[@]}"; do
    [ -n "${needed[$p]:-}" ] || echo "note: $runtime_list lists $p, which these binaries do not load"
  done
  echo "runtime packages: the binaries load libraries of ${#needed[@]} packages, all listed or in the base set"
else
  echo "SKIP: no ldd or dpkg"
  skipped+=(container)
fi
# The Containerfiles: both install runtime-packages.txt and build-packages.txt, copy every
# folder the top-level CMakeLists.txt adds, and build the four binaries.
subdirs=$(sed -n 's/^add_subdirectory(\([A-Za-z0-9_]*\)).*/\1/p' CMakeLists.txt)
for cf in deploy/container/Containerfile deploy/container/Containerfile.cuda; do
  [ -f "$cf" ] || { fail container "$cf is missing"; continue; }
  grep -q '^FROM debian:bookworm AS builder' "$cf" || fail container "$cf: no debian:bookworm builder stage"
  grep -q '^FROM debian:bookworm-slim' "$cf" || fail container "$cf: the runtime stage is not debian:bookworm-slim"
  for list in runtime-packages.txt build-packages.txt; do
    grep -q "^COPY deploy/container/$list " "$cf" && grep -q "sed 's/#.\*//' /tmp/$list" "$cf" ||
      fail container "$cf does not install deploy/container/$list"
  done
  for d in CMakeLists.txt $subdirs; do
    grep -Eq "^COPY $d( |$)" "$cf" || fail container "$cf does not copy $d, which CMakeLists.txt reads"
  done
  grep -q -- '--target ps_scheduler ps_server ps_worker psctl' "$cf" || fail container "$cf does not build the four binaries"
  grep -q '^USER 10001' "$cf" || fail container "$cf does not run as a non-root user"
done

# ---------------------------------------------------------------------------------------------
part "TLS: deploy/tls/make-certs.sh"
if have openssl; then
  certs=$tmp/certs
  if ! deploy/tls/make-certs.sh "$certs/a" scheduler=ps-scheduler,localhost,127.0.0.1 server-0 psctl \
        >"$tmp/certs.log" 2>&1 ||
     ! deploy/tls/make-certs.sh "$certs/b" intruder >>"$tmp/certs.log" 2>&1; then
    cat "$tmp/certs.log" >&2
    fail tls "make-certs.sh failed"
  else
    ca_before=$(sha256sum "$certs/a/ca.crt")
    # A later run with the same folder keeps its CA.
    deploy/tls/make-certs.sh "$certs/a" worker-0=10.1.2.3 >>"$tmp/certs.log" 2>&1 || fail tls "make-certs.sh, second run"
    [ "$(sha256sum "$certs/a/ca.crt")" = "$ca_before" ] || fail tls "a second run in the same folder replaced the CA"
    v() { openssl verify -CAfile "$1" "${@:2}" >>"$tmp/verify-tls.log" 2>&1; }
    v "$certs/a/ca.crt" -purpose sslserver -verify_hostname ps-scheduler "$certs/a/scheduler.crt" ||
      fail tls "scheduler.crt does not verify as a server for ps-scheduler"
    v "$certs/a/ca.crt" -purpose sslserver -verify_ip 127.0.0.1 "$certs/a/scheduler.crt" ||
      fail tls "scheduler.crt does not verify for 127.0.0.1"
    v "$certs/a/ca.crt" -purpose sslserver -verify_hostname localhost "$certs/a/server-0.crt" ||
      fail tls "server-0.crt (default SANs) does not verify for localhost"
    v "$certs/a/ca.crt" -purpose sslserver -verify_ip 127.0.0.1 "$certs/a/server-0.crt" ||
      fail tls "server-0.crt (default SANs) does not verify for 127.0.0.1"
    v "$certs/a/ca.crt" -purpose sslserver -verify_ip 10.1.2.3 "$certs/a/worker-0.crt" ||
      fail tls "worker-0.crt does not verify for 10.1.2.3"
    for n in scheduler server-0 worker-0 psctl; do
      v "$certs/a/ca.crt" -purpose sslclient "$certs/a/$n.crt" || fail tls "$n.crt does not verify as a client"
      [ "$(stat -c %a "$certs/a/$n.key")" = 600 ] || fail tls "$n.key is not mode 0600"
    done
    # Refused: a name or address the certificate does not carry, and another run's CA.
    v "$certs/a/ca.crt" -verify_hostname elsewhere.example.com "$certs/a/scheduler.crt" &&
      fail tls "scheduler.crt verifies for a name it does not carry"
    v "$certs/a/ca.crt" -verify_ip 10.9.9.9 "$certs/a/server-0.crt" &&
      fail tls "server-0.crt verifies for an address it does not carry"
    v "$certs/a/ca.crt" "$certs/b/intruder.crt" && fail tls "a certificate of another CA verifies"
    v "$certs/b/ca.crt" "$certs/a/psctl.crt" && fail tls "a certificate verifies against another CA"
    cmp -s "$certs/a/ca.crt" "$certs/b/ca.crt" && fail tls "two folders got the same CA"
    [[ " ${failed[*]} " == *" tls "* ]] || echo "make-certs.sh: certificates verify as they should; a foreign CA's do not"
  fi
else
  echo "SKIP: no openssl (Debian: openssl)"
  skipped+=(tls)
fi

# ---------------------------------------------------------------------------------------------
part "docs/deploy.md"
if [ -f docs/deploy.md ]; then
  for p in $(grep -o 'deploy/[A-Za-z0-9_./-]*[A-Za-z0-9_]' docs/deploy.md | sort -u); do
    [ -e "$p" ] || fail docs "docs/deploy.md names $p, which does not exist"
  done
  grep -q 'deploy.md' docs/operations.md || fail docs "docs/operations.md does not point to docs/deploy.md"
  echo "docs/deploy.md: the paths it names exist"
else
  fail docs "docs/deploy.md is missing"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "deploy_checks: FAILED (${#failed[@]}): parts $(printf '%s\n' "${failed[@]}" | sort -u | tr '\n' ' ')" >&2
  exit 1
fi
if [ ${#skipped[@]} -gt 0 ]; then
  echo "deploy_checks: passed, but skipped (tools missing): ${skipped[*]}"
  exit 77
fi
echo "deploy_checks: all passed"
