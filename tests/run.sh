#!/usr/bin/env bash
# The test command (README "Testing", and what .ci/run calls): brings what the tests need, then
# runs every test, crash suite included. The integration tests are one binary, `integration`
# (tests/tests.rs), whose modules are the files of tests/. Extra arguments go to cargo test, e.g.
#   tests/run.sh --test integration smtp::          # one module (tests/core/smtp.rs)
#   tests/run.sh --test integration crash::workers:: -- --nocapture
#   tests/run.sh smtp::                             # a filter over every binary, unit tests too
# What it brings:
#   - a Python virtual environment at ${CARGO_TARGET_DIR:-target}/test-venv with the pinned
#     packages of tests/requirements.txt (pip, from PyPI, only when the requirements or the
#     python3 first on PATH changed since the last run: a second run is fast and offline);
#   - the mailpit-api npm client in tests/support/mailpit/node_modules (npm ci from the
#     committed lock, only when the lock or node changed; node and npm must be on PATH);
#   - the openssl CLI (the SMTP tests make a throwaway CA), with apt-get when run as root;
#   - Debian's chromium at /usr/bin/chromium (tests/http/unsubscribe.rs drives it with Playwright
#     for Python, tests/support/browser.py), with apt-get when run as root;
#   - Debian's swaks (tests/fake/fake_smtp.rs sends through it), with apt-get when run as root;
#   - Debian's fuse3 (fusermount3, libfuse3: tests/crash/powerloss.rs mounts a FUSE filesystem that
#     drops unsynced writes, tests/support/powercut.py), with apt-get when run as root;
#   - Debian's PostgreSQL server (initdb, pg_ctl under /usr/lib/postgresql/*/bin: the
#     PostgreSQL store's tests start throwaway clusters, tests/common/pg.rs), with apt-get when
#     run as root.
# Without arguments it ends with tests/package.sh (the Debian package installed and purged;
# root only, SKIPPED otherwise).
# The venv's bin goes first on PATH, so the tests' `python3` is the venv's.
set -euo pipefail
cd "$(dirname "$0")/.."

# Milliseconds since the epoch (bash 5's EPOCHREALTIME; whole seconds on older shells).
now_ms() {
  if [ -n "${EPOCHREALTIME:-}" ]; then
    local t=${EPOCHREALTIME/[.,]/}
    echo $((10#$t / 1000))
  else
    echo $(($(date +%s) * 1000))
  fi
}
started=$(now_ms)
echo "== test dependencies"

as_root() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
  # apt-get update first: on a fresh machine the package lists may be missing or stale.
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# -- python3 and the virtual environment
if ! command -v python3 >/dev/null 2>&1; then
  echo "tests/run.sh: no python3 on PATH: the SMTP tests need Python 3 (3.8 or newer)." >&2
  echo "  Debian/Ubuntu: apt-get install python3 python3-venv; macOS: brew install python" >&2
  exit 1
fi
target=${CARGO_TARGET_DIR:-target}
venv="$target/test-venv"
requirements=tests/requirements.txt
stamp="$venv/.sendonce-stamp"
# What the venv must match: the requirements file and the Python it was made from (the
# python3 first on PATH; its base prefix is the same inside and outside a venv).
want=$(python3 - "$requirements" <<'PY'
import hashlib, sys
with open(sys.argv[1], "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
print("requirements-sha256", digest)
print("python", sys.base_prefix, sys.version.split()[0])
PY
)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$venv/bin/python" -c '' 2>/dev/null; then
  echo "venv $venv is up to date ($(python3 --version 2>&1), $requirements unchanged)"
else
  rm -rf "$venv"
  mkdir -p "$target"
  echo "creating venv $venv with $(command -v python3) ($(python3 --version 2>&1))"
  if ! venv_err=$(python3 -m venv "$venv" 2>&1); then
    rm -rf "$venv"
    if as_root; then
      # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) separately.
      echo "python3 -m venv failed; installing python3-venv with apt-get"
      apt_install python3-venv
      if ! venv_err=$(python3 -m venv "$venv" 2>&1); then
        rm -rf "$venv"
        echo "$venv_err" >&2
        echo "tests/run.sh: python3 -m venv still fails after installing python3-venv." >&2
        exit 1
      fi
    else
      echo "$venv_err" >&2
      echo "tests/run.sh: python3 -m venv failed. On Debian/Ubuntu install the venv module" >&2
      echo "  (sudo apt-get install python3-venv) and run tests/run.sh again." >&2
      exit 1
    fi
  fi
  echo "installing $requirements into $venv (needs PyPI the first time)"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"; then
    echo "tests/run.sh: pip could not install $requirements into $venv (no network to PyPI?)." >&2
    exit 1
  fi
  printf '%s\n' "$want" > "$stamp"
fi
"$venv/bin/python" -c 'import aiosmtpd, playwright' || {
  echo "tests/run.sh: aiosmtpd or playwright does not import from $venv; delete that directory and rerun." >&2
  exit 1
}

# -- flufl.bounce's corpus of real bounces (tests/core/dsn.rs compares sendonce's DSN parser with
# flufl.bounce's on it): the sdist from PyPI (the wheel has no test data), checked against its
# SHA-256 and unpacked once under the target directory.
corpus_version=6.0.0
corpus_sha256=a1df16b9d1877ae4536f7d76c00d8421fcefbe694f80f5285d05c45a2547b1bc
corpus="$target/flufl_bounce-$corpus_version"
if [ ! -d "$corpus/tests/data" ]; then
  echo "fetching flufl.bounce $corpus_version's sdist from PyPI (its bounce corpus)"
  rm -rf "$target/flufl-sdist" "$corpus"
  if ! "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary :all: "flufl.bounce==$corpus_version" -d "$target/flufl-sdist"; then
    echo "tests/run.sh: pip could not download flufl.bounce's sdist (no network to PyPI?)." >&2
    exit 1
  fi
  tarball="$target/flufl-sdist/flufl_bounce-$corpus_version.tar.gz"
  if [ "$(sha256sum "$tarball" | cut -d' ' -f1)" != "$corpus_sha256" ]; then
    echo "tests/run.sh: $tarball does not have the expected SHA-256." >&2
    exit 1
  fi
  tar xzf "$tarball" -C "$target"
fi
export SENDONCE_DSN_CORPUS
SENDONCE_DSN_CORPUS=$(cd "$corpus/tests/data" && pwd)

# -- node and the mailpit-api npm client (tests/fake/fake_mailpit.rs runs it, tests/support/mailpit):
# `npm ci` from the committed lock, only when the lock or node changed since the last run.
mailpit_dir=tests/support/mailpit
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "tests/run.sh: the Mailpit API test needs node (18 or newer) and npm on PATH." >&2
  echo "  Debian/Ubuntu: apt-get install nodejs npm" >&2
  exit 1
fi
npm_want="lock-sha256 $(sha256sum "$mailpit_dir/package-lock.json" | cut -d' ' -f1) node $(node --version)"
npm_stamp="$mailpit_dir/node_modules/.sendonce-stamp"
if [ -f "$npm_stamp" ] && [ "$(cat "$npm_stamp")" = "$npm_want" ]; then
  echo "npm packages of $mailpit_dir are up to date"
else
  echo "installing $mailpit_dir/package-lock.json with npm ci (needs the npm registry the first time)"
  if ! (cd "$mailpit_dir" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "tests/run.sh: npm ci failed in $mailpit_dir (no network to the npm registry?)." >&2
    exit 1
  fi
  printf '%s\n' "$npm_want" > "$npm_stamp"
fi

# -- openssl
if ! command -v openssl >/dev/null 2>&1; then
  if as_root; then
    apt_install openssl
  else
    echo "tests/run.sh: the SMTP tests need the openssl command: install it (apt-get install openssl)." >&2
    exit 1
  fi
fi

# -- chromium (Debian's package; Playwright drives it, its own browser download is never used)
if [ ! -x /usr/bin/chromium ]; then
  if as_root; then
    apt_install chromium
  else
    echo "tests/run.sh: the browser tests need /usr/bin/chromium: install it (apt-get install chromium)." >&2
    exit 1
  fi
fi

# -- swaks (tests/fake/fake_smtp.rs: an SMTP client we did not write, against the fake provider)
if ! command -v swaks >/dev/null 2>&1; then
  if as_root; then
    apt_install swaks
  else
    echo "tests/run.sh: the fake provider's SMTP tests need swaks: install it (apt-get install swaks)." >&2
    exit 1
  fi
fi

# -- PostgreSQL server binaries (tests/common/pg.rs starts throwaway clusters with them)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if as_root; then
    apt_install postgresql
  else
    echo "tests/run.sh: the PostgreSQL store's tests need the PostgreSQL server: install it (apt-get install postgresql)." >&2
    exit 1
  fi
fi

# -- fuse3 (fusermount3 and libfuse3: tests/crash/powerloss.rs mounts tests/support/powercut.py)
if ! command -v fusermount3 >/dev/null 2>&1 || ! ls /lib/*/libfuse3.so.3 /usr/lib/*/libfuse3.so.3 2>/dev/null | grep -q .; then
  if as_root; then
    apt_install fuse3
  else
    echo "tests/run.sh: the power-loss tests need FUSE 3: install it (apt-get install fuse3)." >&2
    exit 1
  fi
fi
if [ ! -c /dev/fuse ]; then
  echo "tests/run.sh: the power-loss tests need /dev/fuse (a container needs --device /dev/fuse)." >&2
  exit 1
fi

# -- iproute2 (`ip netns`: tests/crash/pg_crash.rs runs workers on simulated hosts; root only)
if ! command -v ip >/dev/null 2>&1 && as_root; then
  apt_install iproute2
fi

venv_abs=$(cd "$venv" && pwd)
export PATH="$venv_abs/bin:$PATH" VIRTUAL_ENV="$venv_abs"
unset PYTHONHOME
elapsed=$(($(now_ms) - started))
echo "test dependencies ready in $((elapsed / 1000)).$(printf '%03d' $((elapsed % 1000))) s ($(command -v python3))"

echo "== tests: cargo test --release --no-fail-fast --features tier2 $*"
cargo test --release --no-fail-fast --features tier2 "$@"

# The Debian package test (tests/package.sh) installs and purges the .deb built from the
# release binary above: the whole run only (CI), as root; it says SKIPPED otherwise.
if [ $# -eq 0 ]; then
  tests/package.sh
else
  echo "package test not run (tests/run.sh was given arguments): run tests/package.sh alone"
fi
