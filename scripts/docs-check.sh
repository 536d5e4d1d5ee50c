#!/usr/bin/env bash
# docs-check.sh: every relative link in the docs resolves, and every example marked runnable
# runs against a fresh node and prints what the page shows.
#
# Usage: scripts/docs-check.sh [--fixtures | FILE.md...]
#
# Files: README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/**/*.md but docs/plans/ (or the
# FILEs given). With --fixtures it checks scripts/docs-check-fixtures/*.md instead, and passes
# when the failures it finds are exactly the ones listed in
# scripts/docs-check-fixtures/expected-failures (a self-test of this script).
#
# Links: each relative link or image ([text](path), [text](path#anchor), [text](#anchor),
# [ref]: path, href="path") outside code must name a file or directory that exists (relative
# to the page; a leading / is the repository root), and an #anchor into a .md file must match
# one of its headings by GitHub's rules: lowercase, spaces to -, punctuation but - and _
# dropped, the second of two equal headings gets -1, the third -2. http:, https:, mailto: and
# other schemes are not fetched.
#
# History: outside code blocks and outside a section headed "Log", no words from the project's
# own history (the seed's API, isRequestAllowed, issue numbers, "not merged", "before the fix",
# "before, it was ..."): a user's page says what is true now.
#
# Examples: a fenced block whose info string is `console` is run when the line right before its
# opening fence is `<!-- run -->` or `<!-- run: FLAGS -->` (FLAGS: extra node flags, split on
# spaces). In it, a line starting with `$ ` is a shell command (a trailing \ continues it on the
# next line); the lines after it, up to the next `$ `, are the command's expected stdout and
# stderr together, compared after trimming trailing whitespace (and trailing blank lines); a
# line `...` matches zero or more lines. Each block gets a fresh node, `$SLUICE_BIN` (default:
# target/debug/sluice, or under $CARGO_TARGET_DIR) --bind 127.0.0.1 --threads 1 FLAGS, on a
# free RESP port and a free HTTP API port (`--http-port`), stopped by its PID when the block
# ends, on a failure too. The flags come after --threads 1, so FLAGS may override it.
# The commands run in order in one bash in the repository root, with a 60 s deadline for the
# block (DOCS_CHECK_TIMEOUT). Before they run, 6379 in a command becomes the node's RESP port
# and 8080 (the HTTP port the docs show; --http-port has no default) its HTTP port, in FLAGS
# too, and 8081 a third free port, for what a block starts besides the node (the nginx
# example); in what a command prints, those ports become 6379, 8080 and 8081 again. On PATH, `sluice` is
# the binary under test and `redis-cli` is given `-p PORT` of the node unless the command names
# -p, -u or -s.
#
# Prints each failure (file:line, the command, expected and got) and at the end
# `docs-check: N links, M examples run, K failed` (K counts broken links, misplaced run markers
# and failed examples); exits 1 on any failure. KEEP_LOGS=1 keeps the scratch directory (each
# block's script, outputs and node log). Needs bash, python3; redis-cli for examples that use
# it. Never starts anything on 6379.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "docs-check: $*" >&2; }
die() { log "$*"; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-docs-check.XXXXXX")
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

# The parser, the link check and the output comparison. Subcommands:
#   extract WORK FILE...  checks the links; writes WORK/blocks/NNNN/ (where, flags, cmd.K,
#                         line.K, expect.K), WORK/links (count) and WORK/failures (file:line
#                         per failure); prints the link failures.
#   ports TEXT RESP HTTP SIDE   prints TEXT with 6379, 8080 and 8081 rewritten to the ports.
#   script DIR RESP HTTP SIDE   prints the block's bash script (ports rewritten) on stdout.
#   compare DIR RESP HTTP SIDE  compares got.K with expect.K; prints the failures, appends them
#                               to WORK/failures; exits 1 on a difference.
read -r -d '' PY <<'EOF' || true
import os, re, sys, urllib.parse

ROOT = os.environ["ROOT"]

def rel(path):
    return os.path.relpath(path, ROOT)

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)")
RUN = re.compile(r"^<!--\s*run(?::\s*(.*?))?\s*-->$")

def scan(lines):
    """Yields (index, line, in_code) for each line, with fence lines counted as code."""
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)
            yield i, line, True
        elif fence is not None:
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) and not m.group(3):
                fence = None
            yield i, line, True
        else:
            yield i, line, False

def slug(text):
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    t = re.sub(r"<[^>]+>", "", t)
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")

ANCHOR_CACHE = {}

def anchors(path):
    if path in ANCHOR_CACHE:
        return ANCHOR_CACHE[path]
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    seen, out = {}, set()
    def add(s):
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    prev_text = None
    for i, line, code in scan(lines):
        if code:
            prev_text = None
            continue
        m = re.match(r"^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$", line)
        if m:
            add(slug(m.group(2) or ""))
            prev_text = None
            continue
        if prev_text and re.match(r"^ {0,3}(=+|-+)\s*$", line):
            add(slug(prev_text))
            prev_text = None
            continue
        for a in re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
            out.add(a)
        s = line.strip()
        prev_text = s if s and not re.match(r"^([|>*+-]|\d+[.)]\s)", s) else None
    ANCHOR_CACHE[path] = out
    return out

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HREF = re.compile(r"(?:href|src)=\"([^\"]+)\"")

def check_link(page, lineno, target, fail):
    target = target.strip("<>")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):
        return False
    path, _, anchor = target.partition("#")
    path = urllib.parse.unquote(path)
    if path == "":
        dest = page
    elif path.startswith("/"):
        dest = os.path.join(ROOT, path.lstrip("/"))
    else:
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path))
    where = f"{rel(page)}:{lineno}"
    if not os.path.exists(dest):
        fail(where, f"link to {target}: {rel(dest)} does not exist")
    elif anchor and dest.endswith(".md") and os.path.isfile(dest):
        if urllib.parse.unquote(anchor) not in anchors(dest):
            fail(where, f"link to {target}: no heading of {rel(dest)} has the anchor #{anchor}")
    return True

# Words from the project's own history, which a user's page has no use for: the starting brief
# ("the seed's API", its `isRequestAllowed`), issue numbers and merges, and what a feature was
# before a fix. A section headed "Log" (performance.md's dated log) is where history belongs.
HISTORY = [
    (re.compile(r"\bseed's\b|\bthe seed\b(?!s\b| nodes?\b| corpus\b)", re.I), "the seed"),
    (re.compile(r"isRequestAllowed"), "isRequestAllowed"),
    (re.compile(r"\bissues? #?\d+|\bissue's\b|\bthe [\w-]+ issue\b", re.I), "an issue"),
    (re.compile(r"\bnot merged\b|\bbefore the fix\b|\bthe build before\b", re.I), "a merge or a fix"),
    (re.compile(r"(?:^|[.;:(]\s*)before[,:]\s", re.I), "what it was before"),
]
LOG_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+Log\s*$")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s")

def check_history(page, lines, code_lines, fail):
    log_level = None
    for i, line in enumerate(lines):
        if i in code_lines:
            continue
        h = HEADING.match(line)
        if h:
            level = len(h.group(1))
            if log_level is not None and level <= log_level:
                log_level = None
            if LOG_HEADING.match(line):
                log_level = level
        if log_level is not None:
            continue
        for pattern, what in HISTORY:
            m = pattern.search(line)
            if m:
                fail(f"{rel(page)}:{i + 1}", f"history in a user's page ({what}: {m.group(0).strip()!r}); "
                     "say what is true now, or move it to a section headed Log")
                break

def extract(work, files):
    failures = open(os.path.join(work, "failures"), "a")
    def fail(where, msg):
        print(f"docs-check: FAIL {where}: {msg}")
        failures.write(where + "\n")
    links = 0
    nblock = 0
    for page in files:
        page = os.path.abspath(page)
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        code_lines = set()
        for i, line, code in scan(lines):
            if code:
                code_lines.add(i)
                continue
            text = re.sub(r"`+[^`]*`+", "", line)
            targets = [m.group(1) for m in INLINE.finditer(text)]
            m = REFDEF.match(text)
            if m:
                targets.append(m.group(1))
            targets += HREF.findall(text)
            for t in targets:
                links += check_link(page, i + 1, t, fail)
        check_history(page, lines, code_lines, fail)
        # Runnable blocks.
        for i, line in enumerate(lines):
            m = RUN.match(line.strip())
            if not m or i in code_lines:
                continue
            where = f"{rel(page)}:{i + 1}"
            fm = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if not fm:
                fail(where, "a run marker not on the line right before a code fence")
                continue
            if fm.group(3) != "console":
                fail(where, f"a run marker before a ```{fm.group(3)} block: runnable blocks are ```console")
                continue
            indent, fence = len(fm.group(1)), fm.group(2)
            body = []
            for j in range(i + 2, len(lines)):
                c = FENCE.match(lines[j])
                if c and c.group(2)[0] == fence[0] and len(c.group(2)) >= len(fence) and not c.group(3):
                    break
                l = lines[j]
                body.append((j + 1, l[min(indent, len(l) - len(l.lstrip(" "))):]))
            cmds = []
            k = 0
            while k < len(body):
                n, l = body[k]
                if l.startswith("$ "):
                    cmd = [l[2:]]
                    while cmd[-1].endswith("\\") and k + 1 < len(body):
                        k += 1
                        cmd.append(body[k][1])
                    cmds.append([n, "\n".join(cmd), []])
                elif cmds:
                    cmds[-1][2].append(l)
                elif l.strip():
                    fail(f"{rel(page)}:{n}", "output before the block's first `$ ` command")
                k += 1
            if not cmds:
                fail(where, "a runnable block with no `$ ` command")
                continue
            d = os.path.join(work, "blocks", f"{nblock:04d}")
            nblock += 1
            os.makedirs(d)
            with open(os.path.join(d, "where"), "w") as f:
                f.write(f"{rel(page)}:{i + 2}\n")
            with open(os.path.join(d, "flags"), "w") as f:
                f.write((m.group(1) or "") + "\n")
            for c, (n, cmd, expect) in enumerate(cmds):
                with open(os.path.join(d, f"cmd.{c}"), "w") as f:
                    f.write(cmd)
                with open(os.path.join(d, f"line.{c}"), "w") as f:
                    f.write(f"{rel(page)}:{n}")
                with open(os.path.join(d, f"expect.{c}"), "w") as f:
                    f.write("\n".join(expect))
    with open(os.path.join(work, "links"), "w") as f:
        f.write(f"{links}\n")

def ports(text, pairs):
    for a, b in pairs:
        text = re.sub(rf"(?<![0-9]){a}(?![0-9])", str(b), text)
    return text

def commands(d):
    c = 0
    while os.path.exists(os.path.join(d, f"cmd.{c}")):
        yield c
        c += 1

def script(d, resp, http, side):
    out = ["set +e"]
    for c in commands(d):
        cmd = ports(open(os.path.join(d, f"cmd.{c}")).read(),
                    [("6379", resp), ("8080", http), ("8081", side)])
        got = os.path.join(d, f"got.{c}")
        out.append(f"{{\n{cmd}\n}} >'{got}' 2>&1")
    print("\n".join(out))

def tidy(lines):
    lines = [l.rstrip() for l in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines

def matches(exp, got):
    # ok[i][j]: exp[i:] matches got[j:].
    ok = [[False] * (len(got) + 1) for _ in range(len(exp) + 1)]
    ok[len(exp)][len(got)] = True
    for i in range(len(exp) - 1, -1, -1):
        for j in range(len(got), -1, -1):
            if exp[i] == "...":
                ok[i][j] = ok[i + 1][j] or (j < len(got) and ok[i][j + 1])
            else:
                ok[i][j] = j < len(got) and exp[i] == got[j] and ok[i + 1][j + 1]
    return ok[0][0]

def compare(work, d, resp, http, side):
    bad = False
    with open(os.path.join(work, "failures"), "a") as failures:
        for c in commands(d):
            where = open(os.path.join(d, f"line.{c}")).read()
            cmd = open(os.path.join(d, f"cmd.{c}")).read()
            exp = tidy(open(os.path.join(d, f"expect.{c}")).read().split("\n"))
            path = os.path.join(d, f"got.{c}")
            if os.path.exists(path):
                raw = open(path, encoding="utf-8", errors="replace").read()
                got = tidy(ports(raw, [(resp, 6379), (http, 8080), (side, 8081)]).split("\n"))
            elif os.path.exists(os.path.join(d, "timedout")):
                got = ["<not run: the block's deadline passed first>"]
            else:
                got = ["<not run: the block's shell exited first>"]
            if matches(exp, got):
                continue
            bad = True
            failures.write(where + "\n")
            print(f"docs-check: FAIL {where}: the output differs")
            if os.path.exists(os.path.join(d, "timedout")):
                secs = open(os.path.join(d, "timedout")).read().strip()
                print(f"  (the block was stopped at its deadline, {secs} s: DOCS_CHECK_TIMEOUT)")
            print("  $ " + cmd.replace("\n", "\n    "))
            print("  expected:")
            print("".join(f"    | {l}\n" for l in exp), end="")
            print("  got:")
            print("".join(f"    | {l}\n" for l in got), end="")
    sys.exit(1 if bad else 0)

cmd = sys.argv[1]
if cmd == "extract":
    extract(sys.argv[2], sys.argv[3:])
elif cmd == "script":
    script(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
elif cmd == "ports":
    print(ports(sys.argv[2], [("6379", sys.argv[3]), ("8080", sys.argv[4]), ("8081", sys.argv[5])]))
elif cmd == "compare":
    compare(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6])
EOF
py() { ROOT=$ROOT python3 -c "$PY" "$@"; }

fixtures=0
files=()
case "${1:-}" in
    --fixtures) fixtures=1; files=("$ROOT"/scripts/docs-check-fixtures/*.md) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    "")
        for f in README.md ARCHITECTURE.md CONTRIBUTING.md; do
            [ -f "$ROOT/$f" ] && files+=("$ROOT/$f")
        done
        if [ -d "$ROOT/docs" ]; then
            mapfile -t -O "${#files[@]}" files < <(find "$ROOT/docs" -path "$ROOT/docs/plans" -prune -o -name '*.md' -type f -print | sort)
        fi
        ;;
    *) files=("$@") ;;
esac
[ ${#files[@]} -gt 0 ] || die "no files to check"

: >"$WORK/failures"
py extract "$WORK" "${files[@]}"
links=$(cat "$WORK/links")
blocks=()
[ -d "$WORK/blocks" ] && mapfile -t blocks < <(find "$WORK/blocks" -mindepth 1 -maxdepth 1 -type d | sort)

# The process group of the running block's commands (see run_block) goes at exit too.
BLOCK_GROUP=
trap '[ -z "$BLOCK_GROUP" ] || kill -- "-$BLOCK_GROUP" 2>/dev/null; cleanup' EXIT

# node_answers PORT: true when something on 127.0.0.1:PORT answers a RESP PING (any reply:
# a node started with a password answers -NOAUTH).
node_answers() {
    local reply
    reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'PING\r\n' >&3 && IFS= read -r -t 2 r <&3 && echo "$r") 2>/dev/null) || true
    [ -n "$reply" ]
}

# run_block DIR: starts a node with the block's flags, runs its commands, stops the node, and
# compares. Appends to WORK/failures on a failure.
ran=0
run_block() {
    local d=$1 where flags resp http side pid nodelog script deadline tpid
    where=$(cat "$d/where")
    free_port; resp=$PORT
    free_port; http=$PORT
    free_port; side=$PORT
    # The ports are rewritten in the flags too: `<!-- run: --http-port 8080 -->` binds no fixed port.
    read -r -a flags <<<"$(py ports "$(cat "$d/flags")" "$resp" "$http" "$side")" || true
    nodelog="$d/node.log"
    mkdir -p "$d/cwd"
    # The node runs in a scratch directory: a cluster node writes nodes-PORT.conf there.
    (cd "$d/cwd" && exec "$SLUICE" --bind 127.0.0.1 --port "$resp" --http-port "$http" --threads 1 ${flags[@]+"${flags[@]}"}) >"$nodelog" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    deadline=$((SECONDS + ${DOCS_CHECK_START_TIMEOUT:-30}))
    until node_answers "$resp"; do
        if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            echo "docs-check: FAIL $where: the node (flags: ${flags[*]:-none}) did not answer PING on port $resp; its log:"
            sed 's/^/    | /' "$nodelog" | tail -n 20
            echo "$where" >>"$WORK/failures"
            stop "$pid"
            return
        fi
        sleep 0.05
    done
    ran=$((ran + 1))
    script="$d/script.sh"
    py script "$d" "$resp" "$http" "$side" >"$script"
    # timeout leads a process group of its own: whatever the commands leave running in the
    # background is in it, and is stopped with it.
    (cd "$ROOT" && PATH="$WORK/bin:$PATH" DOCS_CHECK_RESP_PORT=$resp DOCS_CHECK_HTTP_PORT=$http \
        exec timeout -k 5 "${DOCS_CHECK_TIMEOUT:-60}" bash "$script") </dev/null >/dev/null 2>&1 &
    tpid=$!
    BLOCK_GROUP=$tpid
    local rc=0
    wait "$tpid" || rc=$?
    [ $rc -ne 124 ] || echo "${DOCS_CHECK_TIMEOUT:-60}" >"$d/timedout"
    kill -- "-$tpid" 2>/dev/null || true
    BLOCK_GROUP=
    stop "$pid"
    if ! py compare "$WORK" "$d" "$resp" "$http" "$side"; then
        echo "  the node's log (flags: ${flags[*]:-none}; RESP port $resp, HTTP port $http), its end:"
        tail -n 10 "$nodelog" | sed 's/^/    | /'
    fi
}

if [ ${#blocks[@]} -gt 0 ]; then
    target=${CARGO_TARGET_DIR:-target}
    case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
    SLUICE=${SLUICE_BIN:-$target/debug/sluice}
    [ -x "$SLUICE" ] || die "no sluice binary at $SLUICE: run \`cargo build -p sluice\` or set SLUICE_BIN"
    mkdir -p "$WORK/bin"
    ln -s "$SLUICE" "$WORK/bin/sluice"
    if real=$(command -v redis-cli); then
        cat >"$WORK/bin/redis-cli" <<SHIM
#!/usr/bin/env bash
# redis-cli with the port of the block's node, unless the command names one.
for a in "\$@"; do
    case "\$a" in -p|-u|-s) exec "$real" "\$@" ;; esac
done
exec "$real" -p "\$DOCS_CHECK_RESP_PORT" "\$@"
SHIM
        chmod +x "$WORK/bin/redis-cli"
    fi
    for d in "${blocks[@]}"; do
        run_block "$d"
    done
fi

failed=$(wc -l <"$WORK/failures")
echo "docs-check: $links links, $ran examples run, $failed failed"

if [ $fixtures = 1 ]; then
    expected="$ROOT/scripts/docs-check-fixtures/expected-failures"
    if diff <(grep -v '^#' "$expected" | sort) <(sort "$WORK/failures") >"$WORK/diff"; then
        echo "docs-check --fixtures: ok: the $failed planted failures and nothing else"
        exit 0
    fi
    echo "docs-check --fixtures: the failures differ from $expected (< planted, > found):"
    cat "$WORK/diff"
    exit 1
fi
[ "$failed" -eq 0 ]
