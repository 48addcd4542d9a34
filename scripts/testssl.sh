#!/usr/bin/env bash
# Runs testssl.sh (Debian package `testssl.sh`) against switchyard's TLS port on 127.0.0.1
# with a throwaway certificate, and prints the protocol and cipher verdicts. Not part of CI.
#   scripts/testssl.sh            # builds the debug binary if needed
set -euo pipefail
cd "$(dirname "$0")/.."
command -v testssl >/dev/null 2>&1 || {
  echo "installing testssl.sh"; apt-get install -y -qq testssl.sh >/dev/null; }
cargo build --quiet
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=switchyard.test" \
  -addext "subjectAltName=DNS:switchyard.test" -keyout "$work/key.pem" -out "$work/crt.pem" 2>/dev/null
cat "$work/crt.pem" "$work/key.pem" > "$work/bundle.pem"
cat > "$work/m.yaml" <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: secure, annotations: {serviceloadbalancer/lb.sslTerm: "true"}}
spec: {ports: [{port: 80}]}
YAML
./target/debug/switchyard --manifests "$work/m.yaml" --bind-address 127.0.0.1 \
  --http-port 18480 --admin-port 18481 --stats-port 0 --https-port 18443 \
  --ssl-cert "$work/bundle.pem" 2>"$work/switchyard.log" &
pid=$!
for _ in $(seq 50); do
  curl -sk -o /dev/null https://127.0.0.1:18443/ && break
  sleep 0.2
done
testssl --quiet --color 0 --warnings off --protocols --std --server-defaults \
  --fs --vulnerable --jsonfile "$work/testssl.json" 127.0.0.1:18443 | tee "$work/testssl.txt"
echo "--- summary (severity >= LOW)"
grep -E '"severity" *: *"(LOW|MEDIUM|HIGH|CRITICAL)"' -B3 "$work/testssl.json" \
  | grep -E '"id"|"finding"' | paste - - || echo "no finding of severity LOW or above"
