#!/usr/bin/env bash
# Checks everything under deploy/ that can be checked without a cluster: Kubernetes manifests,
# systemd units, the Slurm script (a dry run) and the Dockerfile. Exits non-zero if any check
# fails; a check whose tool or service is missing here says SKIP and why.
#
#   deploy/check.sh                         rayd from build/cli/rayd, if built
#   RAYD_BIN=path/to/rayd deploy/check.sh   the binary whose flags and libraries are checked
#
# Needs python3-yaml, shellcheck and systemd (systemd-analyze, systemd-sysusers):
# scripts/install-deps.sh installs them.
set -euo pipefail

deploy="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$deploy")"
python=/usr/bin/python3
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }
skip() { echo "SKIP: $*"; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

rayd="${RAYD_BIN:-}"
if [ -z "$rayd" ] && [ -x "$repo/build/cli/rayd" ]; then rayd="$repo/build/cli/rayd"; fi
# Absolute: the systemd check puts it in ExecStart=, which takes no relative path.
if [[ "$rayd" == */* ]] && dir="$(cd "$(dirname "$rayd")" 2>/dev/null && pwd)"; then
  rayd="$dir/$(basename "$rayd")"
fi
if [ -n "$rayd" ] && [ ! -x "$rayd" ]; then
  fail "RAYD_BIN=$rayd is not an executable"
  rayd=""
fi
# The flags `rayd start` takes, one a line: manifests and units may use only these.
start_flags="$tmp/start-flags"
if [ -n "$rayd" ]; then
  "$rayd" start --help | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u >"$start_flags"
else
  skip "no rayd binary (set RAYD_BIN or build build/cli/rayd): flags and libraries unchecked"
fi

for tool in "$python" shellcheck systemd-analyze systemd-sysusers; do
  command -v "$tool" >/dev/null || fail "$tool is missing (run scripts/install-deps.sh)"
done
"$python" -c 'import yaml' 2>/dev/null || fail "python3-yaml is missing (run scripts/install-deps.sh)"

# ---------------------------------------------------------------------------------------------
# Kubernetes: each document parses and names itself; references between them (selectors,
# named ports, volumes, Secret keys, StatefulSet services) resolve; the rayd containers use
# only real `rayd start` flags and get a memory-backed /dev/shm.
check_k8s() {  # FILE... (all documents of one deployment together)
  "$python" - "$start_flags" "$@" <<'EOF'
import os, re, sys, yaml

flags_file, files = sys.argv[1], sys.argv[2:]
flags = set(open(flags_file).read().split()) if os.path.exists(flags_file) else None
errors = []
docs = []
for f in files:
    try:
        for d in yaml.safe_load_all(open(f)):
            if d is not None:
                docs.append((f, d))
    except yaml.YAMLError as e:
        errors.append(f"{f}: not YAML: {e}")
if not docs and not errors:
    errors.append("no documents in " + " ".join(files))

def where(f, d):
    return f"{f}: {d.get('kind')}/{(d.get('metadata') or {}).get('name')}"

secrets, configmaps = {}, {}
for f, d in docs:
    if not isinstance(d, dict):
        errors.append(f"{f}: a document is not a mapping"); continue
    for key in ("apiVersion", "kind"):
        if not d.get(key): errors.append(f"{f}: a document has no {key}")
    if not (d.get("metadata") or {}).get("name"):
        errors.append(f"{f}: a {d.get('kind')} has no metadata.name")
    if d.get("kind") == "Secret":
        secrets[d["metadata"]["name"]] = set(d.get("stringData") or {}) | set(d.get("data") or {})
    if d.get("kind") == "ConfigMap":
        configmaps[d["metadata"]["name"]] = set(d.get("data") or {}) | set(d.get("binaryData") or {})

workloads = [(f, d) for f, d in docs if isinstance(d, dict) and
             d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
services = {d["metadata"]["name"]: d for f, d in docs
            if isinstance(d, dict) and d.get("kind") == "Service"}
for f, d in workloads:
    w = where(f, d)
    spec = d.get("spec") or {}
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    match = (spec.get("selector") or {}).get("matchLabels") or {}
    if not match or any(labels.get(k) != v for k, v in match.items()):
        errors.append(f"{w}: selector {match} does not select its pod labels {labels}")
    if d["kind"] == "StatefulSet" and spec.get("serviceName") not in services:
        errors.append(f"{w}: serviceName {spec.get('serviceName')} is no Service here")
    pod = tmpl.get("spec") or {}
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    volumes.update({(c.get("metadata") or {}).get("name"): c
                    for c in spec.get("volumeClaimTemplates") or []})
    containers = pod.get("containers") or []
    if not containers: errors.append(f"{w}: no containers")
    for c in containers:
        cw = f"{w} container {c.get('name')}"
        if not c.get("name") or not c.get("image"): errors.append(f"{cw}: needs name and image")
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                errors.append(f"{cw}: mounts undefined volume {m.get('name')}")
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref.get("key") not in secrets.get(ref.get("name"), set()):
                errors.append(f"{cw}: env {e.get('name')} needs Secret {ref.get('name')} key {ref.get('key')}")
        env_names = {e.get("name") for e in c.get("env") or []}
        port_names = {p.get("name") for p in c.get("ports") or []}
        for probe in ("readinessProbe", "livenessProbe"):
            port = ((c.get(probe) or {}).get("tcpSocket") or {}).get("port")
            if isinstance(port, str) and port not in port_names:
                errors.append(f"{cw}: {probe} names no port {port}")
        args = [str(a) for a in c.get("args") or []]
        if args[:1] == ["start"]:  # a rayd daemon
            for var in re.findall(r"\$\((\w+)\)", " ".join(args)):
                if var not in env_names: errors.append(f"{cw}: args use $({var}), not in env")
            if flags is not None:
                for a in args[1:]:
                    flag = a.split("=", 1)[0]
                    if flag.startswith("--") and flag not in flags:
                        errors.append(f"{cw}: `rayd start` has no flag {flag}")
            # An autoscaler file must be a key of a ConfigMap mounted in this container.
            for i, a in enumerate(args):
                if a != "--autoscaler" and not a.startswith("--autoscaler="): continue
                path = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
                found = False
                for m in c.get("volumeMounts") or []:
                    root = (m.get("mountPath") or "").rstrip("/") + "/"
                    cm = ((volumes.get(m.get("name")) or {}).get("configMap") or {}).get("name")
                    if cm and path.startswith(root) and path[len(root):] in configmaps.get(cm, set()):
                        found = True
                if not found:
                    errors.append(f"{cw}: --autoscaler {path} is no key of a ConfigMap it mounts")
            shm = [m for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"]
            if not shm or (volumes.get(shm[0]["name"], {}).get("emptyDir") or {}).get("medium") != "Memory":
                errors.append(f"{cw}: /dev/shm is not an emptyDir with medium: Memory")
            if "--head" not in args and "--address" not in " ".join(args):
                errors.append(f"{cw}: a node without --address joins nothing")

pods = [((d["spec"]["template"].get("metadata") or {}).get("labels") or {}, d)
        for _, d in workloads]
for name, s in services.items():
    sel = (s.get("spec") or {}).get("selector") or {}
    chosen = [d for labels, d in pods if sel and all(labels.get(k) == v for k, v in sel.items())]
    if not chosen:
        errors.append(f"Service {name}: selector {sel} selects no pod here"); continue
    names = {p.get("name") for d in chosen for c in d["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports") or []}
    for p in (s.get("spec") or {}).get("ports") or []:
        t = p.get("targetPort")
        if isinstance(t, str) and t not in names:
            errors.append(f"Service {name}: targetPort {t} is no container port of its pods")

for e in errors: print("  " + e)
print(f"  {len(docs)} documents, {len(workloads)} workloads, {len(services)} services")
sys.exit(1 if errors else 0)
EOF
}

k8s="$deploy/kubernetes"
# kustomization.yaml is kustomize's own file, not a resource.
mapfile -t manifests < <(find "$k8s/base" -name '*.yaml' ! -name kustomization.yaml | sort)
if check_k8s "${manifests[@]}"; then pass "kubernetes: base manifests"; else fail "kubernetes: base manifests"; fi
if command -v kubectl >/dev/null; then
  # kustomize runs offline: the overlays must render, cpu-only must drop the GPU request, and
  # autoscaler must give the head --autoscaler with its file mounted from a ConfigMap.
  for overlay in base cpu-only autoscaler; do
    if kubectl kustomize "$k8s/$overlay" >"$tmp/$overlay.yaml" 2>"$tmp/kustomize.err" &&
      check_k8s "$tmp/$overlay.yaml"; then
      pass "kubernetes: kubectl kustomize $overlay renders and checks"
    else
      cat "$tmp/kustomize.err" >&2
      fail "kubernetes: kubectl kustomize $overlay"
    fi
  done
  grep -q 'nvidia.com/gpu' "$tmp/base.yaml" || fail "kubernetes: base workers request no nvidia.com/gpu"
  ! grep -q 'nvidia.com/gpu' "$tmp/cpu-only.yaml" || fail "kubernetes: cpu-only still requests GPUs"
  grep -q -- '--autoscaler=' "$tmp/autoscaler.yaml" || fail "kubernetes: the autoscaler overlay's head has no --autoscaler"
  ! grep -q -- '--autoscaler' "$tmp/base.yaml" || fail "kubernetes: base's head has --autoscaler"
  # A client dry run still asks an API server for the resource types.
  if kubectl --request-timeout=5s get --raw /version >/dev/null 2>&1; then
    if kubectl apply --dry-run=client --validate=false -f "$tmp/base.yaml" >/dev/null; then
      pass "kubernetes: kubectl apply --dry-run=client"
    else
      fail "kubernetes: kubectl apply --dry-run=client"
    fi
  else
    skip "kubectl apply --dry-run=client: no API server reachable (it needs one for discovery)"
  fi
else
  skip "kubectl not installed: overlays not rendered (kubectl kustomize)"
fi

# The autoscaler overlay's file: this build's rayd must load it, so a head is started with it
# (in a scratch temp dir, on free ports) and stopped again. Its provider's programs are the
# site's and need not exist here.
if [ -n "$rayd" ]; then
  as_root="$tmp/autoscaler-head"
  trap '"$rayd" stop --force --temp-dir "$as_root" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
  if "$rayd" start --head --port 0 --dashboard-port 0 --num-cpus 0 --num-gpus 0 \
    --temp-dir "$as_root" --autoscaler "$k8s/autoscaler/autoscaler.yaml" >"$tmp/as.out" 2>&1; then
    pass "kubernetes: rayd start --head --autoscaler loads autoscaler/autoscaler.yaml"
  else
    sed 's/^/  /' "$tmp/as.out" >&2
    fail "kubernetes: rayd start --head --autoscaler autoscaler/autoscaler.yaml"
  fi
  "$rayd" stop --temp-dir "$as_root" >/dev/null 2>&1 || fail "kubernetes: rayd stop of the autoscaler check's head"
fi

# ---------------------------------------------------------------------------------------------
# systemd: `systemd-analyze verify` on copies of the units whose ExecStart is a binary that
# exists here (verify rejects a missing one); any warning counts as a failure. It needs no
# running systemd, but calibrate on a trivial unit first so that an environment where it
# cannot work is reported as such rather than blamed on our units.
sd="$deploy/systemd"
mkdir "$tmp/units"
printf '[Unit]\nDescription=calibration\n[Service]\nExecStart=/bin/true\n' >"$tmp/units/calibrate.service"
if ! (cd "$tmp/units" && systemd-analyze verify ./calibrate.service) >"$tmp/sd.out" 2>&1 ||
  [ -s "$tmp/sd.out" ]; then
  skip "systemd-analyze verify fails on a trivial unit here, units unchecked: $(head -1 "$tmp/sd.out")"
else
  for unit in rayd-head.service rayd-node.service; do
    sed "s#^ExecStart=/usr/local/bin/rayd #ExecStart=${rayd:-/bin/true} #" "$sd/$unit" >"$tmp/units/$unit"
    grep -q "^ExecStart=${rayd:-/bin/true} " "$tmp/units/$unit" ||
      fail "systemd: $unit: ExecStart is not /usr/local/bin/rayd ..."
    if (cd "$tmp/units" && systemd-analyze verify "./$unit") >"$tmp/sd.out" 2>&1 &&
      [ ! -s "$tmp/sd.out" ]; then
      pass "systemd: systemd-analyze verify $unit"
    else
      sed 's/^/  /' "$tmp/sd.out" >&2
      fail "systemd: systemd-analyze verify $unit"
    fi
    # The flags of ExecStart (with its continuation lines) must be flags of `rayd start`.
    if [ -s "${start_flags}" ]; then
      sed -n '/^ExecStart=/,/[^\\]$/p' "$sd/$unit" | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u |
        while read -r flag; do
          grep -qxF -- "$flag" "$start_flags" || echo "$flag"
        done >"$tmp/bad-flags"
      if [ -s "$tmp/bad-flags" ]; then
        fail "systemd: $unit uses flags rayd start lacks: $(tr '\n' ' ' <"$tmp/bad-flags")"
      else
        pass "systemd: $unit uses only real rayd start flags"
      fi
    fi
    # Every ${VAR} of ExecStart must be set by the example EnvironmentFile.
    for var in $(sed -n '/^ExecStart=/,/[^\\]$/p' "$sd/$unit" | grep -oE '[$][{]?[A-Z_]+' | tr -d '{$'); do
      grep -q "^$var=" "$sd/rayd.env" || fail "systemd: $unit uses \$$var, which rayd.env does not set"
    done
  done
fi
# The unit's user: systemd-sysusers creates it in a scratch root.
mkdir -p "$tmp/root/etc"
if systemd-sysusers --root="$tmp/root" "$sd/rayd.sysusers.conf" >/dev/null 2>&1 &&
  grep -q '^rayd:' "$tmp/root/etc/passwd" &&
  grep -q '^User=rayd$' "$sd/rayd-head.service" && grep -q '^User=rayd$' "$sd/rayd-node.service"; then
  pass "systemd: rayd.sysusers.conf creates the user the units run as"
else
  fail "systemd: rayd.sysusers.conf does not create the units' user"
fi

# ---------------------------------------------------------------------------------------------
# Shell scripts.
if shellcheck "$deploy/slurm/rayd.sbatch" "$deploy/check.sh"; then
  pass "shellcheck rayd.sbatch check.sh"
else
  fail "shellcheck rayd.sbatch check.sh"
fi

# ---------------------------------------------------------------------------------------------
# Slurm dry run with a faked allocation. srun and rayd on PATH only record that they were
# called: a dry run must call neither.
sbatch="$deploy/slurm/rayd.sbatch"
mkdir "$tmp/bin" "$tmp/bin-noscontrol"
for tool in srun rayd; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/called"\n' "$tool" "$tmp" >"$tmp/bin/$tool"
  cp "$tmp/bin/$tool" "$tmp/bin-noscontrol/$tool"
done
# shellcheck disable=SC2016 # the fake's own script, expanded when it runs
printf '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu[01-03]" ] || exit 1\nprintf "gpu01\\ngpu02\\ngpu03\\n"\n' >"$tmp/bin/scontrol"
chmod +x "$tmp"/bin/* "$tmp"/bin-noscontrol/*
# The system's tools without a real scontrol (a machine with Slurm installed has one in
# /usr/bin), for the runs that must find none.
mkdir "$tmp/system-noscontrol"
for tool in /usr/bin/* /bin/*; do
  name="$(basename "$tool")"
  [ "$name" = scontrol ] || ln -sf "$tool" "$tmp/system-noscontrol/$name"
done

dry() {  # PATH-DIR NODELIST ARGS...
  local bin="$1" nodelist="$2" system="/usr/bin:/bin"
  shift 2
  [ "$bin" = "$tmp/bin-noscontrol" ] && system="$tmp/system-noscontrol"
  env -i PATH="$bin:$system" HOME="$tmp" SLURM_JOB_ID=77 SLURM_JOB_NODELIST="$nodelist" \
    SLURM_CPUS_ON_NODE=8 RAYD_SLURM_DRY_RUN="${RAYD_SLURM_DRY_RUN:-0}" RAYD_HEAD_IP=10.1.2.3 RAYD_TOKEN=sekrit-token-value \
    RAYD_AUTOSCALER="${RAYD_AUTOSCALER:-}" bash "$sbatch" "$@"
}
expect() {  # FILE REGEX WHAT
  grep -qE -- "$2" "$1" || fail "slurm: $3 (no line matching: $2)"
}
expect_order() {  # FILE REGEX-FIRST REGEX-THEN WHAT
  local a b
  a="$(grep -nE -- "$2" "$1" | head -1 | cut -d: -f1)"
  b="$(grep -nE -- "$3" "$1" | head -1 | cut -d: -f1)"
  if [ -z "$a" ] || [ -z "$b" ] || [ "$a" -ge "$b" ]; then fail "slurm: $4"; fi
}
before=$failures
if dry "$tmp/bin" 'gpu[01-03]' --dry-run sweep.yaml >"$tmp/dry.out" 2>&1; then
  out="$tmp/dry.out"
  expect "$out" '^\+ srun .*-w gpu01 rayd start --head --block --port 6380 --node-ip-address 10\.1\.2\.3 ' \
    "the head starts on the first host, advertising RAYD_HEAD_IP"
  expect "$out" '^\+ srun --nodes=2 --ntasks=2 --ntasks-per-node=1 .*-w gpu02,gpu03 bash -c .*start --block --address .* rayd 10\.1\.2\.3:6380 ' \
    "one node daemon on each other host, joining the head's address"
  expect "$out" '^\+ rayd list nodes --address 10\.1\.2\.3:6380 --format json +# until 3 ALIVE' \
    "the join wait polls for all 3 nodes"
  expect "$out" '^\+ rayd tune sweep\.yaml --address 10\.1\.2\.3:6380$' "the sweep runs against the cluster"
  expect_order "$out" 'start --head' 'start --block --address' "nodes start after the head"
  expect_order "$out" 'start --block --address' 'list nodes' "the join wait follows the node start"
  expect_order "$out" 'list nodes' 'rayd tune' "the sweep waits for the nodes"
  ! grep -q 'sekrit-token-value' "$out" || fail "slurm: the dry run prints the token"
else
  sed 's/^/  /' "$tmp/dry.out" >&2
  fail "slurm: the dry run exits non-zero"
fi
! grep -q -- '--autoscaler' "$tmp/dry.out" || fail "slurm: --autoscaler without RAYD_AUTOSCALER"
# RAYD_AUTOSCALER: the head alone gets --autoscaler.
if RAYD_AUTOSCALER=/shared/autoscaler.yaml dry "$tmp/bin" 'gpu[01-03]' --dry-run sweep.yaml >"$tmp/dry5.out" 2>&1; then
  expect "$tmp/dry5.out" '^\+ srun .*-w gpu01 rayd start --head .* --autoscaler /shared/autoscaler\.yaml( |$)' \
    "RAYD_AUTOSCALER: the head starts with --autoscaler FILE"
  ! grep -q 'start --block --address.*--autoscaler' "$tmp/dry5.out" ||
    fail "slurm: RAYD_AUTOSCALER reaches the node daemons too"
else
  sed 's/^/  /' "$tmp/dry5.out" >&2
  fail "slurm: the dry run with RAYD_AUTOSCALER exits non-zero"
fi
# The flags the script gives `rayd start` (head and nodes; a $(...) inside is the shell's)
# must be flags of this build's `rayd start`.
if [ -s "$start_flags" ] && [ -s "$tmp/dry5.out" ]; then
  sed -n 's/^+ srun .* start \(--.*\)$/\1/p' "$tmp/dry5.out" | sed 's/[$]([^)]*)//g' |
    grep -oE -- '--[a-z][a-z0-9-]*' | sort -u | while read -r flag; do
      grep -qxF -- "$flag" "$start_flags" || echo "$flag"
    done >"$tmp/bad-sbatch-flags"
  [ ! -s "$tmp/bad-sbatch-flags" ] ||
    fail "slurm: rayd.sbatch gives rayd start flags it lacks: $(tr '\n' ' ' <"$tmp/bad-sbatch-flags")"
fi
# Without scontrol (no Slurm at all) the script expands the node list itself.
if RAYD_SLURM_DRY_RUN=1 dry "$tmp/bin-noscontrol" 'gpu[08-10],login7' sweep.yaml >"$tmp/dry2.out" 2>&1; then
  expect "$tmp/dry2.out" '-w gpu08 rayd start --head' "without scontrol: head on gpu08"
  expect "$tmp/dry2.out" '--nodes=3 .*-w gpu09,gpu10,login7 ' "without scontrol: nodes on gpu09,gpu10,login7"
else
  sed 's/^/  /' "$tmp/dry2.out" >&2
  fail "slurm: the dry run without scontrol exits non-zero"
fi
# One host: a head and no node step.
if dry "$tmp/bin-noscontrol" 'solo1' --dry-run sweep.yaml >"$tmp/dry3.out" 2>&1; then
  expect "$tmp/dry3.out" '-w solo1 rayd start --head' "one host: the head on it"
  ! grep -q 'start --block --address' "$tmp/dry3.out" || fail "slurm: one host still starts a node step"
else
  fail "slurm: the one-host dry run exits non-zero"
fi
# No sweep named: refuse before starting anything.
if dry "$tmp/bin" 'gpu[01-03]' --dry-run >"$tmp/dry4.out" 2>&1; then
  fail "slurm: no TUNE_YAML and no argument, yet the script succeeds"
fi
[ ! -e "$tmp/called" ] || fail "slurm: a dry run called: $(cat "$tmp/called")"
[ "$failures" -eq "$before" ] &&
  pass "slurm: dry runs print head (with RAYD_AUTOSCALER's file), nodes, join wait and sweep, run nothing; real rayd start flags"

# ---------------------------------------------------------------------------------------------
# Docker. Building needs a daemon (and minutes on 2 cores); without one check what the file
# relies on: its COPY sources exist, the options it passes exist, .dockerignore hides no
# source, and its runtime stage installs rayd's package.
df="$deploy/docker/Dockerfile"
before=$failures
while read -r src; do
  [ -e "$repo/$src" ] || fail "docker: COPY source $src does not exist"
done < <(awk '$1 == "COPY" && $2 !~ /^--from/ {for (i = 2; i < NF; i++) print $i}' "$df")
for opt in $(grep -oE -- '-D[A-Z_]+=' "$df" | tr -d '=' | cut -c3-); do
  grep -q "$opt" "$repo/CMakeLists.txt" || fail "docker: the build passes -D$opt, which CMakeLists.txt lacks"
done
if [ -f "$repo/.dockerignore" ] && command -v git >/dev/null && git -C "$repo" rev-parse 2>/dev/null; then
  # Docker's patterns match from the context root, like git's with a leading slash.
  sed 's|^\([^#!/]\)|/\1|' "$repo/.dockerignore" >"$tmp/dockerignore"
  hidden="$(git -C "$repo" ls-files -ci --exclude-from="$tmp/dockerignore" | grep -vE '^(build[^/]*|rayd_results)/' || true)"
  [ -z "$hidden" ] || fail "docker: .dockerignore hides tracked sources: $(echo "$hidden" | head -3 | tr '\n' ' ')"
fi
# The runtime stage installs the package the build stage made (whose Depends: bring the
# libraries; tests/deploy/package_test.sh checks them), not a copied tree.
runtime_stage="$(awk '/^FROM .* AS runtime/ {r = 1} r' "$df")"
if ! grep -q 'apt-get install' <<<"$runtime_stage" || ! grep -q '/tmp/rayd_\*\.deb' <<<"$runtime_stage"; then
  fail "docker: the runtime stage does not apt-get install the rayd package"
fi
if command -v hadolint >/dev/null; then
  hadolint "$df" || fail "docker: hadolint"
fi
if docker info >/dev/null 2>&1; then
  # BuildKit's linter: parses the file and checks it without building.
  if docker build --check -f "$df" "$repo"; then pass "docker: docker build --check"; else fail "docker: docker build --check"; fi
else
  skip "docker: no Docker daemon here, the image is not built (docker build --check needs one too)"
fi
what="COPY sources, build options, .dockerignore, the runtime stage installs the package"
[ "$failures" -eq "$before" ] && pass "docker: $what"

echo
if [ "$failures" -ne 0 ]; then
  echo "deploy/check.sh: $failures check(s) failed" >&2
  exit 1
fi
echo "deploy/check.sh: all checks passed"
