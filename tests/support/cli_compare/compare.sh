#!/usr/bin/env bash
# No behaviour change, checked by hand for a refactor: `OLD=… NEW=… compare.sh` runs script.sh with
# the OLD and the NEW binary, plain and --json, in fresh temp dirs; masks
# volatile values and diffs OLD vs NEW. Writes cli-{old,new}.txt, cli-{old,new}.json.txt,
# cli-plain.diff, cli-json.diff (raw, unmasked outputs under raw/). Exit 0 when both diffs are empty.
HERE=$(cd "$(dirname "$0")" && pwd)
OLD=${OLD:?set OLD to the sendonce binary before the change}
NEW=${NEW:?set NEW to the sendonce binary after it}
OUT=${OUT:-$(mktemp -d)}
echo "outputs in $OUT"
mkdir -p "$OUT/raw"
mask() { # mask DIR < raw > masked
  sed -E \
    -e "s#$1#<DIR>#g" \
    -e 's#/tmp/tmp\.[A-Za-z0-9]+#<DIR>#g' \
    -e "s#\b$(hostname)\b#<HOST>#g" \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:?[0-9]{2})?/<TIME>/g' \
    -e 's/\b1[0-9]{12}\b/<EPOCHMS>/g' \
    -e 's/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/<UUID>/g' \
    -e 's/obx-[0-9a-f]{32}/obx-<MSGID>/g; s/null-<UUID>/null-<MSGID>/g' \
    -e 's/\b[0-9a-f]{32}\b/<HEX32>/g' \
    -e 's/@[0-9a-f]{16}\b/@<INST>/g' \
    -e 's/so_[A-Za-z0-9_-]{6}/so_<PREFIX>/g' \
    -e 's/\b(ms|[a-z_]+_ms|secs)([=:"]+)[0-9.]+/\1\2<N>/g' \
    -e 's/\b[0-9]+\.[0-9]+ ?(ns|µs|us|ms|s)\b/<DUR>/g; s/\b[0-9]+ ?(ns|µs|us|ms)\b([^=]|$)/<DUR>\2/g' \
    -e 's/\b(pid|PID)([ =:"]+)[0-9]+/\1\2<PID>/g' \
    -e 's/[0-9]+(\.[0-9]+)? MiB free/<N> MiB free/g' \
    -e 's/\b[0-9]+ bytes\b/<N> bytes/g; s/"(bytes|size|size_bytes|wal_bytes|db_bytes|free_bytes)":[0-9]+/"\1":<N>/g'
}
rc_all=0
for mode in plain json; do
  j=0; suf=txt; [ $mode = json ] && { j=1; suf=json.txt; }
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    d=$(mktemp -d)
    "$HERE/script.sh" "$bin" "$d" $j > "$OUT/raw/cli-$which.$suf" 2>&1
    mask "$d" < "$OUT/raw/cli-$which.$suf" > "$OUT/cli-$which.$suf"
    rm -rf "$d"
  done
  diff -u "$OUT/cli-old.$suf" "$OUT/cli-new.$suf" > "$OUT/cli-$mode.diff" && echo "$mode: identical" \
    || { echo "$mode: DIFFERENT ($(grep -c '^[-+][^-+]' "$OUT/cli-$mode.diff") changed lines, $OUT/cli-$mode.diff)"; rc_all=1; }
done
# sanity: OLD vs OLD is identical after masking (proves the masks catch all run-to-run noise)
if [ -n "${SELFCHECK:-}" ]; then
  d=$(mktemp -d); "$HERE/script.sh" "$OLD" "$d" 0 2>&1 | mask "$d" | diff -u "$OUT/cli-old.txt" - > "$OUT/cli-selfcheck.diff" \
    && echo "selfcheck old-vs-old: identical" || echo "selfcheck old-vs-old: DIFFERENT ($OUT/cli-selfcheck.diff)"; rm -rf "$d"
fi
exit $rc_all
