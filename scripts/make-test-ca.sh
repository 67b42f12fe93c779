#!/usr/bin/env bash
# Makes a throwaway certificate authority and node certificates for trying
# the weights lane's TLS (cluster.tls) on one machine or in tests:
#
#   scripts/make-test-ca.sh [--force] DIR NODE...
#
# writes DIR/ca.pem and DIR/ca.key (the CA, EC P-256, valid 30 days), and
# for each NODE DIR/NODE.pem and DIR/NODE.key: a certificate with CN=NODE
# and subjectAltName IP:127.0.0.1, DNS:localhost, signed by the CA. It
# refuses to overwrite a CA already in DIR unless given --force. Needs the
# openssl program. Not for real clusters: the keys are written unencrypted.
set -euo pipefail

usage() {
  echo "usage: $0 [--force] DIR NODE..." >&2
  exit 2
}

force=0
if [[ "${1:-}" == "--force" ]]; then
  force=1
  shift
fi
[[ $# -ge 2 ]] || usage
dir=$1
shift
for node in "$@"; do
  [[ "$node" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "$0: node name '$node' is not [A-Za-z0-9._-]+" >&2; exit 2; }
  [[ "$node" != ca ]] || { echo "$0: a node cannot be called 'ca'" >&2; exit 2; }
done
command -v openssl >/dev/null || { echo "$0: the openssl program is not installed" >&2; exit 1; }

mkdir -p "$dir"
umask 077
made=()

if [[ -e "$dir/ca.pem" || -e "$dir/ca.key" ]]; then
  if [[ $force -eq 0 ]]; then
    echo "$0: $dir/ca.pem or $dir/ca.key exists; pass --force to make a new CA" >&2
    exit 1
  fi
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 30 -subj "/CN=edgegossip test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null
made+=("$dir/ca.pem" "$dir/ca.key")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for node in "$@"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$dir/$node.key" -out "$tmp/$node.csr" -subj "/CN=$node" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$tmp/$node.ext"
  openssl x509 -req -in "$tmp/$node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -CAserial "$tmp/ca.srl" -days 30 -extfile "$tmp/$node.ext" \
    -out "$dir/$node.pem" 2>/dev/null
  made+=("$dir/$node.pem" "$dir/$node.key")
done
chmod 644 "$dir"/*.pem

echo "made:"
printf '  %s\n' "${made[@]}"
