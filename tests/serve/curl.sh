#!/usr/bin/env bash
# lql --serve driven by curl over loopback: every route once, the status codes of the
# checks in front of them, the API key on a non-loopback-style start, and --read-only.
# usage: curl.sh LQL_BINARY WORK_DIR. Bounded: every curl has --max-time; servers are killed.
# LQL_TEST_SLOW=F stretches the waits by F (an instrumented server).
set -u
LQL=$(realpath "$1"); WORK=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK"; mkdir -p "$WORK"; WORK=$(realpath "$WORK")
pass=0; fail=0; pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT
# stretched once, as test_serve.py's stretch(): the start wait's tries and curl's limit
stretch() { awk -v f="${LQL_TEST_SLOW:-1}" -v s="$1" 'BEGIN { print s * f }'; }
tries=$(stretch 50) max_time=$(stretch 30)
ok() { if [ "$1" = "$2" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $3: got $1, want $2"; fi; }

"$LQL" -c "EXTRACT MODEL \"$ROOT/tests/fixtures/models/tinyllama\" INTO \"$WORK/tiny.vindex3\";" >/dev/null 2>&1 || exit 1

start() {   # start ARGS...: sets PORT
  TMPDIR=$WORK "$LQL" "$WORK/tiny.vindex3" --serve "$@" 2>"$WORK/err" & pids+=($!)
  for _ in $(seq "$tries"); do grep -q serving "$WORK/err" && break; sleep 0.1; done
  PORT=$(grep -o '[0-9]*$' "$WORK/err" | head -1)
}
code() { curl -s -o "$WORK/body" -w '%{http_code}' --max-time "$max_time" "$@"; }
J=(-H 'Content-Type: application/json')

start 127.0.0.1:0
U=http://127.0.0.1:$PORT
ok "$(code $U/health)" 200 health
ok "$(code $U/v1/models)" 200 models
ok "$(code "${J[@]}" -d '{"lql":"STATS;","format":"csv"}' $U/v1/query)" 200 query
ok "$(code "${J[@]}" -d '{"lql":"STATS;"}' -H 'Host: attacker.example' $U/v1/query)" 403 host
ok "$(code -d '{"lql":"STATS;"}' $U/v1/query)" 415 content-type
ok "$(code "${J[@]}" -d '{"lql":"USE \"/\";"}' $U/v1/query)" 403 use
ok "$(code "${J[@]}" -d '{"text":"Hello"}' $U/v1/tokenize)" 200 tokenize
ok "$(code "${J[@]}" -d '{"tokens":[1,2]}' $U/v1/detokenize)" 200 detokenize
ok "$(code "${J[@]}" -d '{"prompt":"The capital of France is","max_tokens":4,"temperature":0}' $U/v1/completions)" 200 completions
grep -q '"finish_reason":"length"' "$WORK/body"; ok $? 0 completion-body
ok "$(code -N "${J[@]}" -d '{"prompt":"Hi","max_tokens":3,"stream":true}' $U/v1/completions)" 200 stream
tail -c 20 "$WORK/body" | grep -q 'data: \[DONE\]'; ok $? 0 stream-done
ok "$(code "${J[@]}" -d '{"messages":[]}' $U/v1/chat/completions)" 400 chat
ok "$(code "${J[@]}" -d '{"prompt":"The capital"}' $U/v1/trace)" 200 trace
ok "$(code -X POST $U/v1/sessions)" 415 session-needs-json
ok "$(code "${J[@]}" -X POST $U/v1/sessions)" 201 session
SID=$(sed 's/.*"id":"\([0-9a-f]*\)".*/\1/' "$WORK/body")
ok "$(code -X PUT --data-binary 'abc' $U/v1/sessions/$SID/files/a.txt)" 201 put
ok "$(code $U/v1/sessions/$SID/files/a.txt)" 200 get-file
ok "$(cat "$WORK/body")" abc file-bytes
ok "$(code $U/v1/sessions/$SID)" 200 get-session
ok "$(code "${J[@]}" -d "{\"lql\":\"DELETE FROM EDGES WHERE layer = 0 AND feature = 4;\",\"session\":\"$SID\"}" $U/v1/query)" 200 edit-in-session
ok "$(code -X DELETE $U/v1/sessions/$SID)" 200 delete
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null

# --read-only: edits refused in sessions too; --limit sets each limit
start 127.0.0.1:0 --read-only --limit session_ttl_s=1 --limit sessions_max=1 --limit trace_max=1000 \
  --limit tokens_max=4 --limit stmts_max=2
U=http://127.0.0.1:$PORT
code "${J[@]}" -X POST $U/v1/sessions >/dev/null
SID=$(sed 's/.*"id":"\([0-9a-f]*\)".*/\1/' "$WORK/body")
ok "$(code "${J[@]}" -d "{\"lql\":\"UNDO;\",\"session\":\"$SID\"}" $U/v1/query)" 403 read-only
ok "$(code "${J[@]}" -X POST $U/v1/sessions)" 429 sessions_max
sleep 2.2
ok "$(code "${J[@]}" -X POST $U/v1/sessions)" 201 ttl-frees-a-slot
ok "$(code $U/v1/sessions/$SID)" 404 idle-session-dropped
ok "$(code "${J[@]}" -d '{"prompt":"The capital"}' $U/v1/trace)" 413 trace_max
ok "$(code "${J[@]}" -d '{"prompt":"Hi","max_tokens":5}' $U/v1/completions)" 400 tokens_max
ok "$(code "${J[@]}" -d '{"lql":"STATS; STATS; STATS;"}' $U/v1/query)" 400 stmts_max
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null
"$LQL" "$WORK/tiny.vindex3" --serve 127.0.0.1:0 --limit nonsense=1 2>"$WORK/err"; ok $? 2 bad-limit
grep -q 'expected NAME=VALUE' "$WORK/err"; ok $? 0 bad-limit-message

# an API key: required when given, compared whole
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/key"
start 127.0.0.1:0 --api-key-file "$WORK/key"
U=http://127.0.0.1:$PORT
ok "$(code $U/v1/models)" 401 no-key
ok "$(code -H "Authorization: Bearer $(cat "$WORK/key")x" $U/v1/models)" 401 wrong-key
ok "$(code -H "Authorization: Bearer $(cat "$WORK/key")" $U/v1/models)" 200 key
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null

# encode snapshots a checkpoint's chat_template.jinja, and the server takes it from there
mkdir -p "$WORK/ckpt"
for f in "$ROOT"/tests/fixtures/models/tinyllama/*; do ln -s "$f" "$WORK/ckpt/"; done
cp "$ROOT/tests/fixtures/chatml.jinja" "$WORK/ckpt/chat_template.jinja"
"$LQL" -c "EXTRACT MODEL \"$WORK/ckpt\" INTO \"$WORK/chat.vindex3\";" >/dev/null 2>&1
cmp -s "$WORK/chat.vindex3/chat_template.jinja" "$ROOT/tests/fixtures/chatml.jinja"; ok $? 0 snapshot
TMPDIR=$WORK "$LQL" "$WORK/chat.vindex3" --serve 127.0.0.1:0 2>"$WORK/err" & pids+=($!)
for _ in $(seq "$tries"); do grep -q serving "$WORK/err" && break; sleep 0.1; done
PORT=$(grep -o '[0-9]*$' "$WORK/err" | head -1); U=http://127.0.0.1:$PORT
code $U/v1/models >/dev/null
grep -q '"chat_template":"ok"' "$WORK/body"; ok $? 0 template-from-container
ok "$(code "${J[@]}" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}' $U/v1/chat/completions)" 200 chat
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null

# a template outside the subset disables chat, and /v1/models says which construct and line
printf 'x\n{%% macro m() %%}y{%% endmacro %%}' > "$WORK/macro.jinja"
start 127.0.0.1:0 --chat-template "$WORK/macro.jinja"
U=http://127.0.0.1:$PORT
code $U/v1/models >/dev/null
grep -q '"chat_template":"unsupported: line 2: unsupported tag {% macro %}"' "$WORK/body"; ok $? 0 template-unsupported-status
ok "$(code "${J[@]}" -d '{"messages":[{"role":"user","content":"Hi"}]}' $U/v1/chat/completions)" 400 chat-disabled
grep -q 'chat_template_unavailable' "$WORK/body"; ok $? 0 chat-disabled-code
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null

# a non-loopback bind without a key does not start
TMPDIR=$WORK timeout 10 "$LQL" "$WORK/tiny.vindex3" --serve 0.0.0.0:0 2>"$WORK/err"
ok $? 1 non-loopback-needs-key
grep -q 'api-key-file' "$WORK/err"; ok $? 0 non-loopback-message

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
