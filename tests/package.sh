#!/usr/bin/env bash
# The Debian package test (issue 16, "Install"): builds the .deb from the release binary that
# `cargo test --release` built (packaging/debian/build.sh --no-build), installs it with dpkg -i,
# checks what an operator gets (binary, man pages, completions, the `sendonce` user, directory
# and file modes, a fresh database as that user, the systemd unit), then removes it (dpkg -r:
# config and data stay) and purges it (dpkg -P: everything the package listed is gone, the user
# too; /var/lib/sendonce, the ledger, is kept), reinstalls over the kept data, and cleans up.
# tests/run.sh runs it last. It changes the machine (a package, a system user, /etc/sendonce,
# /var/lib/sendonce), so it runs only as root with apt-get (CI); otherwise it says SKIPPED.
# cargo-deb is installed once into TARGET/cargo-deb (a second run reuses it).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  echo "!!! SKIPPED package test: needs root (and apt-get, dpkg): it installs and purges"
  echo "!!! the sendonce .deb on this machine. CI runs it; run tests/package.sh as root."
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  exit 0
fi

now_ms() {
  if [ -n "${EPOCHREALTIME:-}" ]; then
    local t=${EPOCHREALTIME/[.,]/}
    echo $((10#$t / 1000))
  else
    echo $(($(date +%s) * 1000))
  fi
}
secs() { local ms=$(($(now_ms) - $1)); echo "$((ms / 1000)).$(printf '%03d' $((ms % 1000))) s"; }
started=$(now_ms)

passed=0
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() {
  echo "FAIL package test: $*" >&2
  echo "package: $passed passed, 1 failed"
  exit 1
}

data=/var/lib/sendonce
db=$data/sendonce.db
conf=/etc/sendonce
marker=$data/.package-test
unit=/usr/lib/systemd/system/sendonce.service
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
target=$(cd "$target" && pwd)

echo "== package test"

# -- never touch a real installation: only leftovers of an earlier run of this test are removed
# (The marker file is made right after each install and survives a purge with the data.)
installed() {
  local s
  s=$(dpkg-query -W -f='${db:Status-Status}' sendonce 2>/dev/null || true)
  [ -n "$s" ] && [ "$s" != not-installed ]
}
if installed || [ -e "$data" ] || [ -e "$conf" ]; then
  if [ -e "$marker" ]; then
    echo "removing what an earlier run of this test left behind"
    dpkg -P sendonce >/dev/null 2>&1 || true
    rm -rf "$data" "$conf"
  else
    fail "sendonce is installed here, or $data or $conf exists, and not by this test: \
refusing to touch a real installation (remove it by hand, or run the test on a scratch machine)"
  fi
fi

# -- tools: dpkg-dev (cargo-deb's dependency lookup), man-db, systemd (systemd-analyze), adduser
need=()
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev)
command -v man >/dev/null 2>&1 || need+=(man-db)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v adduser >/dev/null 2>&1 || need+=(adduser)
command -v runuser >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# -- cargo-deb 3.x, cached in the target directory
t=$(now_ms)
tools="$target/cargo-deb"
have=$("$tools/bin/cargo-deb" --version 2>/dev/null || true)
if [[ "$have" != *" 3."* ]]; then
  echo "installing cargo-deb 3.x into $tools (once; later runs reuse it)"
  cargo install cargo-deb --locked --version '^3' --root "$tools" --quiet ||
    fail "cargo install cargo-deb --locked --version '^3' failed"
fi
export PATH="$tools/bin:$PATH"
echo "cargo-deb ready in $(secs "$t"): $(cargo deb --version)"

# -- the release binary cargo test --release built (with the test features), else build one
bin="$target/release/sendonce"
if [ ! -x "$bin" ]; then
  echo "no release binary at $bin: cargo build --release --locked"
  cargo build --release --locked
fi
want_version=$("$bin" --version)

t=$(now_ms)
deb=$(packaging/debian/build.sh --no-build) || fail "packaging/debian/build.sh failed"
[ -f "$deb" ] || fail "build.sh printed '$deb', which is not a file"
echo "built $deb ($(du -h "$deb" | cut -f1)) in $(secs "$t")"

# From here on the machine is changed: clean up whatever happens.
cleanup() {
  dpkg -P sendonce >/dev/null 2>&1 || true
  rm -rf "$data" "$conf"
}
trap cleanup EXIT

# -- install
out=$(dpkg -i "$deb" 2>&1) || fail "dpkg -i $deb failed: $out"
sed 's/^/  dpkg: /' <<<"$out"
touch "$marker"
pass "dpkg -i"

[ "$(command -v sendonce)" = /usr/bin/sendonce ] || fail "sendonce on PATH is '$(command -v sendonce)', not /usr/bin/sendonce"
got=$(sendonce --version) || fail "sendonce --version failed"
[ "$got" = "$want_version" ] || fail "sendonce --version says '$got', the built binary '$want_version'"
pass "/usr/bin/sendonce --version: $got"

for page in sendonce sendonce-campaign sendonce-serve sendonce-campaign-create; do
  f=/usr/share/man/man1/$page.1.gz
  [ -f "$f" ] || fail "no man page $f"
  zgrep -q '^\.TH' "$f" || fail "$f is not a man page (no .TH)"
done
where=$(man -w sendonce 2>&1) || fail "man -w sendonce: $where"
[ "$where" = /usr/share/man/man1/sendonce.1.gz ] || fail "man -w sendonce found '$where'"
pass "man pages (man -w sendonce: $where)"

for f in /usr/share/bash-completion/completions/sendonce \
  /usr/share/zsh/vendor-completions/_sendonce \
  /usr/share/fish/vendor_completions.d/sendonce.fish; do
  [ -s "$f" ] || fail "completion script $f missing or empty"
  grep -q campaign "$f" || fail "completion script $f does not know the campaign command"
done
pass "bash, zsh and fish completions"

# -- the user, the directories, the conffile
entry=$(getent passwd sendonce) || fail "no user sendonce after install"
IFS=: read -r _ _ uid _ _ home shell <<<"$entry"
[ "$uid" -lt 1000 ] || fail "sendonce is not a system user (uid $uid)"
[ "$home" = "$data" ] || fail "sendonce's home is $home, not $data"
case "$shell" in */nologin | /bin/false) ;; *) fail "sendonce has a login shell: $shell" ;; esac
getent group sendonce >/dev/null || fail "no group sendonce after install"
pass "system user sendonce (uid $uid, home $home, shell $shell)"

mode() { stat -c '%a %U:%G' "$1"; }
[ "$(mode "$data")" = "700 sendonce:sendonce" ] || fail "$data is $(mode "$data"), want 700 sendonce:sendonce"
[ "$(mode "$conf")" = "750 root:sendonce" ] || fail "$conf is $(mode "$conf"), want 750 root:sendonce"
[ -f "$conf/sendonce.toml" ] || fail "no $conf/sendonce.toml"
conffiles=$(dpkg-query -W -f='${Conffiles}\n' sendonce)
grep -q "^ $conf/sendonce.toml " <<<"$conffiles" ||
  fail "$conf/sendonce.toml is not a conffile of the package"
pass "modes: $data 700 sendonce:sendonce, $conf 750 root:sendonce, sendonce.toml a conffile"

# -- a fresh database as the service user
cd "$data"
out=$(runuser -u sendonce -- sendonce init --db "$db" 2>&1) || fail "sendonce init as sendonce: $out"
pass "runuser -u sendonce -- sendonce init: $out"
# doctor on the fresh database, as the service user: healthy (exit 0), nothing written.
out=$(runuser -u sendonce -- sendonce doctor --db "$db" 2>&1) || fail "sendonce doctor on a fresh database: $out"
pass "runuser -u sendonce -- sendonce doctor"
# The shipped config parses and a worker starts on it (nothing is due: it exits at once).
out=$(runuser -u sendonce -- sendonce run --once --db "$db" --config "$conf/sendonce.toml" 2>&1) ||
  fail "sendonce run --once with the shipped $conf/sendonce.toml: $out"
pass "the shipped sendonce.toml loads (run --once)"
for f in "$db" "$db-wal" "$db-shm"; do
  [ -e "$f" ] || continue
  [ "$(mode "$f")" = "600 sendonce:sendonce" ] || fail "$f is $(mode "$f"), want 600 sendonce:sendonce"
done
pass "database files 600 sendonce:sendonce"
cd /

# -- the unit
[ -f "$unit" ] || fail "no unit at $unit"
grep -q '^ExecStart=/usr/bin/sendonce serve --worker' "$unit" || fail "$unit does not run /usr/bin/sendonce serve --worker"
out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit: $out"
if grep -i 'sendonce' <<<"$out"; then
  fail "systemd-analyze verify warns about our unit: $out"
fi
pass "systemd-analyze verify $unit"
if systemctl is-enabled sendonce.service >/dev/null 2>&1; then
  fail "the unit is enabled at install (it should wait for a provider and a database)"
fi
pass "unit not enabled at install"

# -- dpkg -r: binary and unit go, config and data stay
files=$(dpkg -L sendonce)
out=$(dpkg -r sendonce 2>&1) || fail "dpkg -r sendonce: $out"
for f in /usr/bin/sendonce "$unit" /usr/share/man/man1/sendonce.1.gz; do
  [ ! -e "$f" ] || fail "$f still there after dpkg -r"
done
[ -f "$conf/sendonce.toml" ] || fail "dpkg -r removed $conf/sendonce.toml (a conffile stays until purge)"
[ -f "$db" ] || fail "dpkg -r removed the database $db"
pass "dpkg -r: binary, unit and man pages gone; config and data kept"

# -- dpkg -P: everything the package listed goes, the user too; the data stays
out=$(dpkg -P sendonce 2>&1) || fail "dpkg -P sendonce: $out"
sed 's/^/  dpkg: /' <<<"$out"
grep -q "kept $data" <<<"$out" || fail "dpkg -P did not say it kept $data"
[ ! -e "$conf" ] || fail "$conf still there after purge: $(ls -la "$conf")"
left=()
while IFS= read -r f; do
  [ -d "$f" ] && continue # shared directories (/usr/bin, /etc...) stay
  [ -e "$f" ] && left+=("$f")
done <<<"$files"
[ ${#left[@]} -eq 0 ] || fail "files of the package left after purge: ${left[*]}"
[ -f "$db" ] || fail "dpkg -P removed the database $db (the ledger must be kept)"
[ "$(mode "$data")" = "700 root:root" ] || fail "$data after purge is $(mode "$data"), want 700 root:root"
! getent passwd sendonce >/dev/null || fail "user sendonce still there after purge"
! getent group sendonce >/dev/null || fail "group sendonce still there after purge"
pass "dpkg -P: $(echo "$files" | wc -l) listed paths gone, user and group removed, $data kept (root-owned)"

# -- reinstall over the kept data: the service user gets its ledger back
out=$(dpkg -i "$deb" 2>&1) || fail "dpkg -i over the kept data: $out"
touch "$marker"
[ "$(mode "$db")" = "600 sendonce:sendonce" ] || fail "kept $db is $(mode "$db") after reinstall, want 600 sendonce:sendonce"
out=$(runuser -u sendonce -- sendonce account list --db "$db" 2>&1) || fail "the kept database does not open after reinstall: $out"
pass "reinstall: the kept ledger is the service user's again and opens"

cleanup
trap - EXIT
[ ! -e "$data" ] && ! getent passwd sendonce >/dev/null || fail "cleanup left $data or the user behind"
pass "cleaned up (package purged, $data removed)"
echo "package test done in $(secs "$started")"
echo "package: $passed passed, 0 failed"
