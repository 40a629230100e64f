#!/usr/bin/env bash
# Checks the Kubernetes manifests offline (no cluster, no network once installed):
#  1. every manifest against the Kubernetes JSON schemas bundled with kubernetes-validate, strict
#     (unknown fields are errors; a kind or apiVersion without a schema is an error too);
#  2. deploy/kubernetes/check_consistency.py: what schemas cannot see (grace period against preStop
#     and drain_grace_s, probe paths, ports, resources against max_sessions, the HPA metric against
#     /metrics, the ConfigMap's graph template against pipelines/serve-recognizer.yaml, ...).
# Exits non-zero if anything fails.
#
# Usage: scripts/check-manifests.sh [DIR]      DIR defaults to deploy/kubernetes
#   KUBERNETES_VERSIONS="1.31 1.37" validates against several API versions (default 1.31).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-deploy/kubernetes}"
versions="${KUBERNETES_VERSIONS:-1.31}"
python="$(scripts/install-python-deps.sh | tail -n 1)"
validate="$(dirname "$python")/kubernetes-validate"
echo "check-manifests: kubernetes-validate $("$validate" --version), Kubernetes $versions, strict, $dir"

shopt -s nullglob
status=0
files=0
for f in "$dir"/*.yaml "$dir"/*.yml; do
  # kustomization.yaml is kustomize's own file, not an API object; check_consistency.py checks it.
  [ "$(basename "$f")" = kustomization.yaml ] && continue
  files=$((files + 1))
  for v in $versions; do
    rc=0
    out="$("$validate" --strict -k "$v" "$f" 2>&1)" || rc=$?
    [ -n "$out" ] && printf '%s\n' "$out"
    if [ $rc -ne 0 ]; then
      status=1
    elif grep -q '^WARN' <<<"$out"; then
      # kubernetes-validate only warns when it has no schema for a kind/apiVersion (a typo, or an
      # API the chosen Kubernetes version does not serve); the API server would reject it.
      echo "check-manifests: $f: no schema for a resource above (Kubernetes $v)"
      status=1
    elif ! grep -q '^INFO .* passed' <<<"$out"; then
      echo "check-manifests: $f: no Kubernetes resource in the file"
      status=1
    fi
  done
done
if [ $files -eq 0 ]; then
  echo "check-manifests: no manifests in $dir" >&2
  exit 1
fi

"$python" deploy/kubernetes/check_consistency.py "$dir" || status=1
if [ $status -ne 0 ]; then
  echo "check-manifests: FAILED" >&2
  exit 1
fi
echo "check-manifests: all manifests valid and consistent"
