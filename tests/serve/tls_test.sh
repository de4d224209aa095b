#!/usr/bin/env bash
# serve.tls: with --ssl-certfile/--ssl-keyfile (a self-signed certificate made here for
# 127.0.0.1) the server speaks HTTPS only: curl and the official openai client (trusting the
# certificate through NODE_EXTRA_CA_CERTS) list models and stream completions over https; plain
# http gets no answer; a key that does not match the certificate is a clear startup error.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
[[ -d $HERE/node_modules/openai ]] || { echo "tests/serve/node_modules missing: run scripts/setup.sh"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=other" \
  -keyout "$WORK/other-key.pem" -out "$WORK/other-cert.pem" 2>/dev/null

# A key that is not the certificate's: an error naming the files, exit 1.
rc=0
timeout 30 "$EPSERVE" serve --model "$WORK/model" --port 0 --ssl-certfile "$WORK/cert.pem" \
  --ssl-keyfile "$WORK/other-key.pem" >"$WORK/bad.log" 2>&1 || rc=$?
[[ $rc == 1 ]] || { cat "$WORK/bad.log"; fail "mismatched key: exit $rc, want 1"; }
grep -q "cannot load the certificate and key" "$WORK/bad.log" || { cat "$WORK/bad.log"; fail "no clear TLS error"; }

start_server "$WORK/server.log" --model "$WORK/model" --served-model-name tiny \
  --ssl-certfile "$WORK/cert.pem" --ssl-keyfile "$WORK/key.pem"
[[ $BASE == https://* ]] || fail "the server does not announce https: $BASE"
CURL_TLS="--cacert $WORK/cert.pem"
curl -s --max-time 10 $CURL_TLS "$BASE/v1/models" | grep -q '"id":"tiny"' || fail "GET /v1/models over https"
curl -sN --max-time 20 $CURL_TLS -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 5, "temperature": 0, "stream": true}' \
  "$BASE/v1/completions" >"$WORK/stream.txt"
tail -c 20 "$WORK/stream.txt" | grep -q 'data: \[DONE\]' || fail "streamed completion over https"
code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" || true)
[[ $code == 000 ]] || fail "plain http answered $code"
NODE_EXTRA_CA_CERTS="$WORK/cert.pem" timeout 30 node "$HERE/openai_client_test.mjs" "$BASE" tiny
stop_server
echo "serve.tls: curl and the openai client over https; plain http refused"
