# Sourced by bench/tls.sh and bench/flood.sh: the three-node example as a
# bench runs it, and the median of numbers on standard input.

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# three_node_config OUT WORK NAME EPOCHS PORT_PREFIX [TLS_DIR]: configs/three-
# nodes.toml with its store and runs under WORK (named NAME), EPOCHS epochs,
# ports PORT_PREFIX01, 11, 21 (e.g. 472 -> 47201, 47211, 47221; each node's
# weights lane takes the next port) and, with TLS_DIR, the
# certificates scripts/make-test-ca.sh made there.
three_node_config() {
  local out="$1" work="$2" name="$3" epochs="$4" ports="$5" tls="${6:-}"
  sed -e "s|^dir = \"edgegossip-data/three-nodes\"|dir = \"$work/data-$name\"|" \
      -e "s|^dir = \"runs\"|dir = \"$work/runs-$name\"|" \
      -e "s|^epochs = .*|epochs = $epochs|" \
      -e "s|^port = 471\([012]1\)\$|port = $ports\1|" \
      "$here/configs/three-nodes.toml" >"$out"
  if [ -n "$tls" ]; then
    sed -i "s|^balancer = \"a\"|balancer = \"a\"\n[cluster.tls]\ncertificate = \"$tls/{node}.pem\"\nkey = \"$tls/{node}.key\"\nca = \"$tls/ca.pem\"|" "$out"
  fi
}

# wall_median CSV [FROM_EPOCH]: the median wall_seconds of a cluster.csv's
# epochs from FROM_EPOCH (0-based) on.
wall_median() {
  awk -F, -v from="${2:-0}" 'NR == 1 {for (i = 1; i <= NF; ++i) if ($i == "wall_seconds") c = i; next}
                            $1 >= from {print $c}' "$1" | median
}
