#!/bin/sh
# Installs the interop suite's node peer (node-redisson 1.0.4 + ioredis 5,
# pinned by package-lock.json next to this script) into a build-local folder,
# unless an identical install is already there.
#
#   setup-node.sh <install-dir>
#
# Exit status: 0 ready; 2 node or npm missing; 3 npm failed (e.g. no access to
# the npm registry). The test binary runs this under a file lock, so parallel
# tests never install at the same time.
set -eu

src_dir=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: setup-node.sh <install-dir>}

node_bin=${INTEROP_NODE:-node}
if ! command -v "$node_bin" >/dev/null 2>&1; then
  echo "setup-node.sh: '$node_bin' not found on PATH; the interop suite needs Node.js >= 16 (set INTEROP_NODE to use another binary)" >&2
  exit 2
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "setup-node.sh: npm not found on PATH; the interop suite installs node-redisson@1.0.4 and ioredis@5 with it" >&2
  exit 2
fi

# Already installed from this very lock file?
if cmp -s "$src_dir/package-lock.json" "$dest/package-lock.json" &&
   [ -f "$dest/node_modules/node-redisson/package.json" ] &&
   [ -f "$dest/node_modules/ioredis/package.json" ] &&
   [ -f "$dest/.installed" ]; then
  exit 0
fi

mkdir -p "$dest"
rm -f "$dest/.installed"
cp "$src_dir/package.json" "$src_dir/package-lock.json" "$dest/"
cd "$dest"
# --legacy-peer-deps: node-redisson declares typescript as a peer dependency
# for its type declarations only; the peer does not need it at run time.
# Bounded, also when the test that runs us is killed: npm gets its own timer.
bound=""
if command -v timeout >/dev/null 2>&1; then
  bound="timeout --kill-after=5 ${INTEROP_NPM_TIMEOUT:-150}"
fi
if ! $bound npm ci --legacy-peer-deps --no-audit --no-fund --loglevel=error; then
  echo "setup-node.sh: 'npm ci' failed in $dest (is the npm registry reachable?)" >&2
  exit 3
fi
"$node_bin" -e '
  const v = require("node-redisson/package.json").version;
  const io = require("ioredis/package.json").version;
  if (v !== "1.0.4" || !io.startsWith("5.")) {
    console.error(`setup-node.sh: unexpected versions node-redisson ${v}, ioredis ${io}`);
    process.exit(1);
  }' || exit 3
touch .installed
