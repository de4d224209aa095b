#!/usr/bin/env bash
# serve.engine_tls: TLS on the engine service's gRPC channel, next to its token. With a throwaway
# CA and certificates made here (openssl): an engine started with --tls-cert/--tls-key serves a
# scheduler given --engine-tls-ca, and nothing to one without it (plaintext), nor to one trusting
# another CA, nor to one checking another name unless --engine-tls-server-name names the
# certificate's; an engine with --tls-client-ca (mutual TLS) refuses a scheduler without a client
# certificate and serves one with it; bad files (missing, not PEM, a key of another certificate)
# are startup errors naming the flag and the file, exit 1; `serve --np 2` hands its --tls-* flags
# to the world it starts, whose services then speak mutual TLS.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/token"
chmod 600 "$WORK/token"

# The certificates: a CA, another CA of the same name that signed nothing here, a server
# certificate for 127.0.0.1 / localhost, one for another name, a client certificate.
cd "$WORK"
EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${EC[@]}" -keyout ca.key -out ca.pem -days 2 -subj /CN=epserve-test-ca 2>/dev/null
openssl req -x509 "${EC[@]}" -keyout rogue.key -out rogue.pem -days 2 -subj /CN=epserve-test-ca 2>/dev/null
sign() { # NAME CN SAN EXTENDED_KEY_USAGE
  openssl req "${EC[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$3" "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" -days 2 \
    -extfile "$1.ext" 2>/dev/null
}
sign server 127.0.0.1 IP:127.0.0.1,DNS:localhost serverAuth
sign named engine.test DNS:engine.test serverAuth
sign client epserve-serve DNS:epserve-serve clientAuth
cd - >/dev/null

# expect_error WHAT TEXT COMMAND...: COMMAND exits 1 within 30 s saying TEXT.
expect_error() {
  local what=$1 text=$2 rc=0 out
  shift 2
  out=$(timeout 30 "$@" 2>&1) || rc=$?
  [[ $rc -eq 1 ]] || { echo "$out"; fail "$what: exit $rc, not 1"; }
  grep -qF -- "$text" <<<"$out" || { echo "$out"; fail "$what: the error does not say \"$text\""; }
}
ENGINE=("$EPSERVE" engine --model "$WORK/model" --port 0 --kv-memory 16M --threads 1)
expect_error "a missing key file" "--tls-key $WORK/nothing.key: no such file" \
  "${ENGINE[@]}" --tls-cert "$WORK/server.pem" --tls-key "$WORK/nothing.key"
expect_error "a certificate that is no PEM" "--tls-cert $WORK/token: no PEM certificate" \
  "${ENGINE[@]}" --tls-cert "$WORK/token" --tls-key "$WORK/server.key"
expect_error "another certificate's key" \
  "--tls-key $WORK/client.key: not the private key of the certificate in --tls-cert $WORK/server.pem" \
  "${ENGINE[@]}" --tls-cert "$WORK/server.pem" --tls-key "$WORK/client.key"
expect_error "a certificate without its key" "--tls-cert and --tls-key go together" \
  "${ENGINE[@]}" --tls-cert "$WORK/server.pem"
SERVE=("$EPSERVE" serve --port 0 --model "$WORK/model" --kv-memory 16M --threads 1)
expect_error "a missing CA file" "--engine-tls-ca $WORK/nothing.pem: no such file" \
  "${SERVE[@]}" --engines 127.0.0.1:1 --engine-tls-ca "$WORK/nothing.pem"
expect_error "a client certificate without its key" "--engine-tls-cert and --engine-tls-key go together" \
  "${SERVE[@]}" --engines 127.0.0.1:1 --engine-tls-ca "$WORK/ca.pem" --engine-tls-cert "$WORK/client.pem"
expect_error "the world's certificate without --np" "with --np" \
  "${SERVE[@]}" --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key"

# refused LOG WHY ARGS...: serve gives up within its --startup-timeout (2 s), exit 1, the group
# never up.
TOKEN=(--engine-token-file "$WORK/token")
refused() {
  local log=$1 why=$2 rc=0 start=$SECONDS
  shift 2
  timeout 30 "${SERVE[@]}" --engines "$ENGINES" --startup-timeout 2 "$@" >"$log" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] || { cat "$log"; fail "$why: serve exited $rc, not 1"; }
  grep -q "not up after" "$log" || { cat "$log"; fail "$why: serve does not say the group is not up"; }
  ((SECONDS - start <= 15)) || fail "$why: serve took $((SECONDS - start)) s to give up"
}
# served LOG WHY ARGS...: serve comes up, a completion is answered, serve stops cleanly.
served() {
  local log=$1 why=$2 code
  shift 2
  start_server "$log" --model "$WORK/model" --engines "$ENGINES" "$@"
  code=$(curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": "hi", "max_tokens": 3}' "$BASE/v1/completions")
  [[ $code == 200 ]] || { cat "$WORK/out.json"; fail "$why: status $code"; }
  stop_server
}

# TLS, the token as well.
start_engines 1 "$WORK/model" "$WORK/tls" --engine-token-file "$WORK/token" \
  --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key"
served "$WORK/tls-served.log" "TLS with the CA" --engine-tls-ca "$WORK/ca.pem" "${TOKEN[@]}"
refused "$WORK/tls-plain.log" "plaintext to a TLS engine" "${TOKEN[@]}"
grep -q "does the engine service use TLS" "$WORK/tls-plain.log" || { cat "$WORK/tls-plain.log"; fail "no hint at TLS"; }
refused "$WORK/tls-rogue.log" "a CA that did not sign the certificate" --engine-tls-ca "$WORK/rogue.pem" "${TOKEN[@]}"
refused "$WORK/tls-name.log" "a name the certificate does not carry" --engine-tls-ca "$WORK/ca.pem" \
  --engine-tls-server-name other.test "${TOKEN[@]}"
# TLS does not replace the token.
refused "$WORK/tls-notoken.log" "TLS without the token" --engine-tls-ca "$WORK/ca.pem"
grep -q "missing or wrong engine token" "$WORK/tls-notoken.log" || { cat "$WORK/tls-notoken.log"; fail "no token refusal"; }
stop_engines

# A certificate issued to another name than the address: --engine-tls-server-name.
start_engines 1 "$WORK/model" "$WORK/named" --engine-token-file "$WORK/token" \
  --tls-cert "$WORK/named.pem" --tls-key "$WORK/named.key"
refused "$WORK/named-refused.log" "a certificate for engine.test reached as 127.0.0.1" \
  --engine-tls-ca "$WORK/ca.pem" "${TOKEN[@]}"
served "$WORK/named-served.log" "--engine-tls-server-name engine.test" --engine-tls-ca "$WORK/ca.pem" \
  --engine-tls-server-name engine.test "${TOKEN[@]}"
stop_engines

# Mutual TLS.
start_engines 1 "$WORK/model" "$WORK/mtls" --engine-token-file "$WORK/token" \
  --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key" --tls-client-ca "$WORK/ca.pem"
refused "$WORK/mtls-nocert.log" "mutual TLS without a client certificate" --engine-tls-ca "$WORK/ca.pem" \
  "${TOKEN[@]}"
refused "$WORK/mtls-wrongcert.log" "mutual TLS with a certificate the client CA did not sign" \
  --engine-tls-ca "$WORK/ca.pem" --engine-tls-cert "$WORK/rogue.pem" --engine-tls-key "$WORK/rogue.key" \
  "${TOKEN[@]}"
served "$WORK/mtls-served.log" "mutual TLS with the client certificate" --engine-tls-ca "$WORK/ca.pem" \
  --engine-tls-cert "$WORK/client.pem" --engine-tls-key "$WORK/client.key" "${TOKEN[@]}"
stop_engines

# serve --np 2 hands the world its certificate, key and client CA; both groups serve.
start_server "$WORK/np.log" --model "$WORK/model" --np 2 --policy round_robin \
  --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key" --tls-client-ca "$WORK/ca.pem" \
  --engine-tls-ca "$WORK/ca.pem" --engine-tls-cert "$WORK/client.pem" --engine-tls-key "$WORK/client.key"
grep -q "epserve engine .* --tls-cert $WORK/server.pem --tls-key $WORK/server.key --tls-client-ca $WORK/ca.pem" \
  "$WORK/np.log" || { cat "$WORK/np.log"; fail "the world was not given the TLS flags"; }
for i in 1 2; do
  code=$(curl -s --max-time 30 -o "$WORK/np$i.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"prompt\": [$i, 7, 9], \"max_tokens\": 3}" "$BASE/v1/completions")
  [[ $code == 200 ]] || { cat "$WORK/np$i.json"; fail "--np 2, request $i: status $code"; }
done
for g in 0 1; do
  [[ $(metric "epserve:prompt_tokens_total{group=\"$g\"}") -gt 0 ]] || fail "--np 2: group $g got no request"
done
stop_server
[[ -z $(pgrep -f "epserve engine --model $WORK/model" || true) ]] || fail "engine processes left after --np 2"
echo "serve.engine_tls: ok"
