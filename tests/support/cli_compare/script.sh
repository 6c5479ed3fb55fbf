#!/usr/bin/env bash
# The CLI behaviour script of compare.sh: script.sh BIN DIR [JSON]. Runs ~80 sendonce commands in DIR (fresh,
# empty) against ./s.db; prints "### cmd", stdout, stderr, "exit=N" for each. JSON=1 adds --json.
BIN=$1; DIR=$2; JSON=${3:-0}
cd "$DIR" || exit 2
for v in $(env | grep -o '^SENDONCE_[A-Z_]*'); do unset "$v"; done
export HOME=$DIR/home XDG_CONFIG_HOME=$DIR/xdg-config XDG_STATE_HOME=$DIR/xdg-state TZ=UTC NO_COLOR=1 LC_ALL=C
export SENDONCE_PUBLIC_URL=https://news.example.org
export SENDONCE_UNSUBSCRIBE_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
mkdir -p "$HOME"
JF=(); [ "$JSON" = 1 ] && JF=(--json)
N=0; OUT=""
# r ARGS...: run "$BIN [--json] ARGS" (no --db); s ARGS...: the same with --db ./s.db. OUT = stdout.
r() {
  N=$((N+1)); echo "### $*"
  OUT=$("$BIN" "${JF[@]}" "$@" 2>.err); rc=$?
  [ -n "$MASK" ] && OUT=$(printf '%s' "$OUT" | sed -E "$MASK")
  [ -n "$OUT" ] && printf '%s\n' "$OUT"; cat .err; echo "exit=$rc"; MASK=""
}
s() { r --db ./s.db "$@"; }
# id: the id printed by the last command (plain: first line; --json: .id)
id() { if [ "$JSON" = 1 ]; then jq -r '.id' <<<"$OUT"; else head -1 <<<"$OUT"; fi; }
printf 'email,phone,name,city\nbo@example.org,,Bo,Paris\ncy@example.org,+14155550111,Cy,Lyon\nnot-an-address,,Bad,Nowhere\n,+33612345678,Di,Nice\n' > subs.csv
printf 'email,name\neve@example.org,Eve\nada@example.org,Ada\n' > vip.csv
printf 'Hello {{ name }},\nnews from {{ city | default("somewhere") }}.\nStop: {{ unsubscribe_url }}\n' > body.txt
printf 'Hi {{ name }}, short news.\n' > sms.txt
s init
s init
s account add Acme
s account add Beta
s account add Acme
s account list
s subscriber add --account Acme --email ada@example.org --name Ada --attr city=London
s subscriber add --account Acme --phone +14155550100 --name Sam
s subscriber add --account Acme --email zed@example.org --phone +14155550102 --name Zed --attr city=Rome
s subscriber add --account Acme --email 'not an address'
s subscriber add --account Acme --phone 12345
s subscriber import --account Acme subs.csv
s subscriber import --account Acme --skip-invalid subs.csv
s subscriber list --account Acme
s subscriber list --account Acme --status confirmed --limit 2 --after 1
s subscriber show --account Acme ada@example.org
s subscriber show --account Acme 2
s subscriber update --account Acme ada@example.org --name 'Ada L.' --attr plan=pro
s subscriber update --account Acme +14155550100 --status unsubscribed
s subscriber show --account Acme nobody@example.org
s subscriber remove --account Acme zed@example.org
s subscriber remove --account Acme zed@example.org
s subscriber list --account Acme
s list create --account Acme vip --description 'Very important'
s list create --account Acme dbl --optin double
s list create --account Acme vip
s subscriber add --account Acme --email ada@example.org --list vip
s subscriber import --account Acme --list vip vip.csv
s list list --account Acme
s list show --account Acme vip
s list show --account Acme nolist
s suppress add --account Acme --channel email bo@example.org --reason 'hard bounce'
s suppress add --account Acme --channel sms +14155550111
s suppress add --account Acme --channel email 'bad address'
s suppress list --account Acme
s suppress remove --account Acme --channel sms +14155550111
s suppress remove --account Acme --channel sms +14155550111
s suppress list --account Acme
MASK='s/(sendonce_|so_)?[A-Za-z0-9_-]{24,}/<TOKEN>/g'; s token create --account Acme --name ci
MASK='s/(sendonce_|so_)?[A-Za-z0-9_-]{24,}/<TOKEN>/g'; s token create --account Acme --name reader --scope read
s token list --account Acme
s campaign create --account Acme --name All --channel email --from news@example.org --subject 'News for {{ name }}' --body-file body.txt
C1=$(id)
s campaign create --account Acme --name VIP --channel email --from 'News <news@example.org>' --subject 'VIP {{ name }}' --body-file body.txt --list vip
C2=$(id)
s campaign create --account Acme --name Tocancel --channel email --from news@example.org --subject S --body-file body.txt
C3=$(id)
s campaign create --account Acme --name NoSubject --channel email --from news@example.org --body-file body.txt
s campaign create --account Acme --name Dry --channel email --from news@example.org --subject D --body-file body.txt --dry-run
s campaign create --account Acme --name Texts --channel sms --from +14155550000 --body-file sms.txt
C4=$(id)
s campaign create --account Acme --name Broken --channel email --from news@example.org --subject '{{ name' --body-file body.txt
s campaign audience "$C1"
s campaign list
s campaign approve "$C1"
s campaign approve "$C1"
s campaign approve "$C2"
s campaign approve "$C4"
s campaign approve "$C3" --at 2099-01-01T00:00:00Z
s campaign pause "$C2"
s campaign status "$C2"
s campaign resume "$C2"
s campaign cancel "$C3"
s campaign cancel "$C3"
s campaign resume "$C1"
s run --once
s run --once --provider bogus:thing
s run --once --provider outbox:./outbox.jsonl --concurrency 0
s run --once --provider outbox:./outbox.jsonl --lease nonsense
s run --once --provider outbox:./outbox.jsonl --worker-id w1 --concurrency 1
s campaign status "$C1"
s campaign status "$C2"
s campaign status "$C3"
s campaign status "$C4"
s campaign report "$C1"
s campaign report "$C2" --format json
s campaign list --account Acme --status sent
s doubts list --campaign "$C1"
s check --campaign "$C1" --campaign "$C2" --campaign "$C4" --log outbox.jsonl
s check --campaign "$C1" --log missing.jsonl
r notify --to ops@example.org --to +14155550199 --from ci@example.org --subject Done --message 'build 42 ok' --key job-42 --provider outbox:./notify.jsonl --state ./notify.db
r notify --to ops@example.org --to +14155550199 --from ci@example.org --subject Done --message 'build 42 ok' --key job-42 --provider outbox:./notify.jsonl --state ./notify.db
r notify --to 'not an address' --message x --key job-43 --provider outbox:./notify.jsonl --state ./notify.db
echo "### notify.jsonl lines: $(wc -l < notify.jsonl)  outbox.jsonl lines: $(wc -l < outbox.jsonl)"
s doctor
s backup ./backup.db
s backup ./backup.db
r bench --only nothing
r bench --sync fast
r bench --recipients many
s config show
s config show --config ./missing.toml
s subscriber list --account Nope
s campaign create --account Nope --name X --channel sms --body-file sms.txt
s campaign status 999
s campaign approve 999
s campaign report 999
s doubts list --campaign 999
s subscriber add --account Beta --email 'ada@@example..org'
echo "### commands run: $N"
