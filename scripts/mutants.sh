#!/usr/bin/env bash
# The mutation check of SECURITY.md's bounds. Each mutant removes one guard
# that enforces a bound SECURITY.md states (a limit, a timeout, an access
# check) in a private copy of the working tree and runs the test that must
# notice: the mutant must be KILLED (that test fails).
#
#   scripts/mutants.sh                 every mutant (as root, as CI does)
#   scripts/mutants.sh NAME...         only these
#   scripts/mutants.sh -l              list the mutants
#   scripts/mutants.sh --check         only check that every snippet applies
#
# Options: --no-baseline (skip the first pass, which runs each test on the
# unmutated copy and requires it to pass), -t SECONDS (go test -timeout of
# each run, default 300), -v (print the tail of every test log).
#
# Results: KILLED (good); SURVIVED (the test passed: a bound no test holds);
# SURVIVED-NOT-RUN (the test skipped or matched nothing); STALE (the
# snippet does not occur exactly once: the guard changed, update its entry
# with the code); BROKEN (the mutant does not build); BASELINE-FAIL or
# BASELINE-NOT-RUN (the test fails or skips even without the mutant);
# SKIPPED (its test needs root and this is not root; under CI=true that is
# NEEDS-ROOT, a failure). The last line is "N passed, N failed" (passed:
# killed); the exit status is 0 only when nothing failed.
#
# Mutants run one after the other (the test machines have 2 cores). The
# copy holds the working tree's tracked files and its untracked files that
# are not ignored, as they are when the script starts, in a temporary
# directory removed on exit; the working tree is never modified.
set -euo pipefail
export LC_ALL=C
shopt -u patsub_replacement 2>/dev/null || true

root=$(cd "$(dirname "$0")/.." && pwd)

# ---------------------------------------------------------------------------
# The mutants: name, needs root (yes/no), file, package, -run pattern of the
# test expected to FAIL, the guard (for the table), the exact snippet (it
# must occur exactly once in the file) and what replaces it.
names=() roots=() files=() pkgs=() runs=() guards=() snips=() repls=()
m() {
	names+=("$1") roots+=("$2") files+=("$3") pkgs+=("$4") runs+=("$5") guards+=("$6") snips+=("$7") repls+=("$8")
}

# Remote access to memory: mem.Table.Check, in its order (SECURITY.md "What
# a remote peer can do"; negative suite, TestPDIsolation, TestRevocation).
m stag-key no mem/check.go ./internal/engine '^TestNegativeSuite$/stale_STag_key' \
	"Check: the STag's key must match" \
	'm == nil || m.stag != stag || m.invalid.Load()' \
	'm == nil || m.stag>>8 != stag>>8 || m.invalid.Load()'
m stag-invalidated no mem/check.go ./reliability '^TestRevocation$' \
	"Check: an invalidated STag is refused" \
	'm == nil || m.stag != stag || m.invalid.Load()' \
	'm == nil || m.stag != stag'
m pd-isolation no mem/check.go ./reliability '^TestPDIsolation$' \
	"Check: the STag's PD must be the QP's" \
	'if m.pd != pd || (m.stream != 0 && m.stream != stream) {' \
	'if (m.stream != 0 && m.stream != stream) {'
m stream-binding no mem/check.go ./internal/engine '^TestNegativeSuite$/another_stream' \
	"Check: a stream-bound STag only from its stream" \
	'if m.pd != pd || (m.stream != 0 && m.stream != stream) {' \
	'if m.pd != pd {'
m access-rights no mem/check.go ./internal/engine '^TestNegativeSuite$/without_remote' \
	"Check: the access rights of the registration" \
	'if m.access&need != need {' \
	'if false {'
m to-wrap no mem/check.go ./internal/engine '^TestNegativeSuite$/TO_wrap' \
	"Check: TO+length-1 must not wrap 2^64" \
	'if length != 0 && length-1 > math.MaxUint64-to {' \
	'if false && length-1 > math.MaxUint64-to {'
m bounds no mem/check.go ./internal/engine '^TestNegativeSuite$/past_the_end' \
	"Check: [TO, TO+length) within the registration" \
	'if off > m.size || length > m.size-off {' \
	'if off > m.size {'
m atomic-alignment no mem/check.go ./mem '^TestCheckTable$' \
	"Check: an atomic target is 8-byte aligned" \
	'if op == OpAtomic && (m.addr+off)&7 != 0 {' \
	'if false {'

# STags are unguessable and revocation is immediate (TestSTagNeighbours,
# TestSTagSpace, TestRevocation).
m stag-random-index no mem/table.go ./mem '^TestSTagAllocation$' \
	"STag index: a random free slot" \
	'slot := t.rng.Uint32() & t.mask' \
	'slot := uint32(t.live+1) & t.mask'
m stag-seed no mem/table.go ./reliability '^TestSTagSpace$' \
	"STag generator seeded by crypto/rand" \
	'crand.Read(seed[:])' \
	'_ = crand.Read // mutant: a zero seed'
m stag-random-key no mem/table.go ./mem '^TestSTagKeysUnpredictable$' \
	"STag key: random, not derived from the last" \
	'k := uint8(t.rng.UintN(255)) // 0..254' \
	'k := t.lastKey[slot] // mutant: the next key is the previous one + 1'
m rereg-new-key no mem/table.go ./reliability '^TestRevocation$' \
	"Reregister: a new key, the old STag refused" \
	'mr := t.newMR(old.stag&^0xFF|uint32(t.newKey(slot)), buf, &o, baseTO)' \
	'mr := t.newMR(old.stag, buf, &o, baseTO)'
m remote-inv-stream no mem/table.go ./internal/engine '^TestNegativeSuite$/Invalidate,_other_stream' \
	"Send with Invalidate: only the STag's PD/stream" \
	$'if m.pd != pd || (m.stream != 0 && m.stream != stream) {\n\t\tt.fails[opInvalidate]' \
	$'if m.pd != pd {\n\t\tt.fails[opInvalidate]'
m remote-inv-allowed no mem/table.go ./internal/engine '^TestNegativeSuite$/Invalidate,_not_allowed' \
	"Send with Invalidate: only if registered for it" \
	'if !m.remoteInv {' \
	'if false {'

# Inbound queues and stalled peers (SECURITY.md "Exhaust inbound queues",
# "A QP held by a stalled peer", "Completions that lie", "Memory after
# invalidation").
m ird-cap no internal/engine/rx.go ./internal/engine '^TestNegativeSuite$/^IRD_' \
	"inbound Reads+Atomics per QP <= IRD (--max-ird)" \
	'if int(qp.irdTail-qp.irdHead) >= qp.ird {' \
	'if false {'
m ulpdu-mulpdu no internal/engine/cm.go ./internal/engine '^TestULPDU(LongerThanMULPDU|OverAdvertisedMULPDU)$' \
	"ULPDU_Length <= MULPDU of the advertised MSS" \
	'return min(mpa.MULPDU(mss, false), mpa.MaxULPDU)' \
	'return mpa.MaxULPDU'
m deframer-max-ulpdu no wire/mpa/deframer.go ./wire/mpa '^TestDeframerLimits$' \
	"Deframer: ULPDU_Length over MaxULPDU is an error" \
	'if n > d.maxULPDU {' \
	'if false {'
m fpdu-stall no internal/engine/watchdog.go ./internal/engine '^TestPartialFPDUStall$' \
	"partial FPDU without progress for --fpdu-timeout" \
	'} else if now.Sub(w.rxSince) >= fpduTimeout {' \
	'} else if false {'
m request-timeout no internal/engine/watchdog.go ./internal/engine '^TestRequestTimeout$' \
	"Read/Atomic unanswered for --request-timeout" \
	'case qp.reqTimeout > 0 && now.Sub(w.reqSince) >= qp.reqTimeout:' \
	'case false:'
m untagged-mo no internal/engine/rx.go ./internal/engine '^TestNegativeSuite$/^Send_(with_a_gap|overlapping|first_segment)' \
	"untagged segment starts where the message ends" \
	'if mo != qp.recvLen || mo > r.length {' \
	'if mo > r.length {'
m read-resp-order no internal/engine/rx.go ./internal/engine '^TestReadResponseMustCoverSink$' \
	"Read Response at the sink offset reached so far" \
	'if t.TO() != to+e.got || n > e.length-e.got {' \
	'if false && t.TO() != to+e.got || n > e.length-e.got {'
m read-resp-cover no internal/engine/rx.go ./internal/engine '^TestReadResponseMustCoverSink$' \
	"a Read completes only when the sink is covered" \
	'if e.got != e.length {' \
	'if false {'
m local-inv-grace no internal/engine/invalidate.go ./internal/engine '^TestLocalInvalidateWaitsForPlacement$' \
	"Local Invalidate completes after placements end" \
	$'qp.dev.table.Synchronize()\n\tqp.mu.Lock()\n\tqp.invPending.Store(false)' \
	$'qp.mu.Lock()\n\tqp.invPending.Store(false)'
m remote-inv-grace no internal/engine/invalidate.go ./internal/engine '^TestRemoteInvalidateWaitsForPlacement$' \
	"remote invalidation delivered after placements" \
	$'qp.dev.table.Synchronize()\n\tqp.mu.Lock()\n\tqp.holdRecv.Store(false)' \
	$'qp.mu.Lock()\n\tqp.holdRecv.Store(false)'

# MPA setup (SECURITY.md "MPA setup slots", "MPA connections").
m allow-before-read no internal/engine/listener.go ./internal/engine '^TestListenerAdmitBeforeRead$' \
	"listener: Admit (--allow) before a byte is read" \
	'if l.cfg.Admit != nil && !l.cfg.Admit(remote) {' \
	'if false {'
m setup-per-peer no internal/engine/listener.go ./internal/engine '^TestListenerPerPeer' \
	"connections in MPA setup per peer (--max-setup-per-peer)" \
	'case l.perPeer[s.peer] >= l.cfg.MaxSetupPerPeer:' \
	'case false:'
m setup-total no internal/engine/listener.go ./internal/engine '^TestListener' \
	"connections in MPA setup (--max-setup)" \
	'case l.inSetup >= l.cfg.MaxSetup:' \
	'case false:'
m setup-evict-heaviest no internal/engine/listener.go ./internal/engine '^TestListener' \
	"over --max-setup the heaviest address is evicted" \
	'if victim = l.oldest(l.heaviest()); victim == nil {' \
	'if victim = l.oldest(s.peer); victim == nil {'
m setup-timeout no internal/engine/cm.go ./internal/engine '^TestListener' \
	"an MPA Request is read within --conn-timeout" \
	'done := guard(ctx, llp, d.cfg.ConnTimeout)' \
	'done := guard(ctx, llp, 1<<62)'

# The daemon's QPs, regions and peers (SECURITY.md "Hold the daemon's QPs",
# "Limits on memory", --allow).
m max-qps no internal/engine/qp.go ./reliability '^TestIntegrationQPLimit$' \
	"QPs of the device (--max-qps)" \
	'if d.closed || len(d.qps) >= d.cfg.MaxQPs {' \
	'if d.closed {'
m max-qps-per-peer no cmd/xrnicd/limits.go ./reliability '^TestIntegrationQPLimitPerPeer$' \
	"QPs of one peer address (--max-qps-per-peer)" \
	'if p.n[k] >= max {' \
	'if false {'
m allow-list no cmd/xrnicd/daemon.go ./cmd/xrnicd '^TestAllowAndStartupLog$' \
	"xrnicd: peers outside --allow are refused" \
	'if p.Contains(ip) {' \
	'if p.Contains(ip) || true {'
m max-registered-bytes no cmd/xrnicd/config.go ./cmd/xrnicd '^TestConfigFile$' \
	"regions in total (--max-registered-bytes)" \
	'if total > c.MaxRegBytes {' \
	'if false {'

# Descriptors and logs (SECURITY.md "File descriptors", "Log volume").
m fd-raise no cmd/xrnicd/fdlimit.go ./cmd/xrnicd '^TestRaiseNoFile$' \
	"RLIMIT_NOFILE soft limit raised to the hard one" \
	'if before.Cur < before.Max {' \
	'if false {'
m fd-plan-lower no cmd/xrnicd/fdlimit.go ./cmd/xrnicd '^TestPlanFDs$' \
	"--max-setup + --max-qps fit the descriptor limit" \
	'if sum := c.MaxSetup + c.MaxQPs; sum > b.MPA {' \
	'if sum := c.MaxSetup + c.MaxQPs; sum < 0 {'
m fd-plan-minimum no cmd/xrnicd/fdlimit.go ./cmd/xrnicd '^TestPlanFDs$' \
	"start-up fails if MPA's descriptor share < 16" \
	'if b.MPA < minMPA {' \
	'if false {'
m log-rate no cmd/xrnicd/ratelog.go ./cmd/xrnicd '^TestRateLog$' \
	"peer-caused log lines: 5 per second per kind" \
	'if k.n < r.burst {' \
	'if true {'
m log-rate-refused no cmd/xrnicd/daemon.go ./reliability '^TestIntegrationBoundsRefusedFlood$/^allow$' \
	"peers refused by --allow are logged rate-limited" \
	'd.rlog.Log(slog.LevelInfo, "mpa-refused-allow", "connection refused by --allow", "peer", addrString(remote))' \
	'd.log.Info("connection refused by --allow", "peer", addrString(remote))'

# The control socket and the HTTP servers (SECURITY.md "The control socket",
# "Connections to the metrics port", "Connections to the control socket").
m socket-mode no control/socket.go ./control '^TestControlSocket$' \
	"control socket mode 0660" \
	'if err := os.Chmod(path, 0o660); err != nil {' \
	'if err := os.Chmod(path, 0o666); err != nil {'
m socket-cred-at-accept no control/socket.go ./control '^TestSocketRefusedAtAccept$' \
	"SO_PEERCRED checked at accept, refused closed" \
	'if err == nil && l.policy(cr) {' \
	'if err == nil {'
m socket-policy yes control/socket.go ./reliability '^TestIntegration(ControlSocketOtherUser|BoundsWrongUID)$' \
	"only root, the daemon's user, --socket-group" \
	'if c.UID == 0 || c.UID == me || c.GID == gid {' \
	'if true {'
m conns-cap no control/limit.go ./control '^TestLimitListener$' \
	"connections per server (--http/--socket-max-conns)" \
	'if l.max > 0 && len(l.conns) >= l.max {' \
	'if false {'
m conns-evict-idle-only no control/limit.go ./control '^TestLimitListener$' \
	"at the cap only an idle connection is evicted" \
	'if o.idle && (victim == nil || o.since.Before(victim.since)) {' \
	'if victim == nil || o.since.Before(victim.since) {'
m accept-retry no control/limit.go ./control '^TestLimitListenerAcceptErrors$' \
	"a failed accept (EMFILE...) is retried, never fatal" \
	$'l.sleep(backoff, l.closed)\n\t\t\tcontinue' \
	'return nil, err'
m busy-limit no control/limit.go ./control '^TestLimitListenerBusyLimit$' \
	"a connection busy too long is closed" \
	'if l.busyLimit <= 0 {' \
	'if true {'
m busy-limit-servers no control/server.go ./control '^TestServerBoundsDefaults$' \
	"busy limit = the read and write timeouts together" \
	'ln.busyLimit = c.ReadTimeout + c.WriteTimeout' \
	'ln.busyLimit = 0'
m http-idle-timeout no control/server.go ./control '^TestHTTPServerBounds$' \
	"keep-alive idle connection (--*-idle-timeout)" \
	'IdleTimeout:       c.IdleTimeout,' \
	'IdleTimeout:       -1,'
m http-header-timeout no control/server.go ./control '^TestServerBounds' \
	"request headers within 5 s" \
	'ReadHeaderTimeout: hdr,' \
	'ReadHeaderTimeout: max(hdr, c.ReadTimeout),'
m http-read-timeout no control/server.go ./control '^TestServerBounds' \
	"whole request within --*-read-timeout" \
	'ReadTimeout:       c.ReadTimeout,' \
	'ReadTimeout:       0,'
m http-write-timeout no control/server.go ./control '^TestServerBounds' \
	"response written within --*-write-timeout" \
	'WriteTimeout:      c.WriteTimeout,' \
	'WriteTimeout:      0,'
m http-header-bytes no control/server.go ./control '^TestServerBounds' \
	"request headers at most 16 KiB" \
	'MaxHeaderBytes:    maxHeaderBytes,' \
	'MaxHeaderBytes:    0,'

# User-space TCP (SECURITY.md "Abuse TCP", "SYN floods").
m tcp-rst-exact no tcpstack/input.go ./tcpstack '^TestHostileRST$' \
	"RST accepted only at exactly RCV.NXT" \
	'if g.seq != c.rcvNxt {' \
	'if false {'
m tcp-rst-out-of-window no tcpstack/input.go ./tcpstack '^TestHostileRST$' \
	"out-of-window RSTs are ignored" \
	$'if !ok {\n\t\tif !rst {' \
	$'if !ok && !rst {\n\t\tif !rst {'
m tcp-syn-challenge no tcpstack/input.go ./tcpstack '^TestHostileRST$' \
	"in-window SYN draws a challenge ACK" \
	'if syn { // RFC 5961 §4.2' \
	'if false {'
m tcp-challenge-rate no tcpstack/input.go ./tcpstack '^TestHostileChallengeACKLimit$' \
	"challenge ACKs: 1000 per second" \
	'if s.challengeN >= 1000 {' \
	'if false {'
m tcp-half-open no tcpstack/listener.go ./tcpstack '^TestHostileSYNFlood$' \
	"half-open table bound (256), then SYN cookies" \
	'if l.halfOpen >= l.o.MaxHalfOpen {' \
	'if false {'
m tcp-synack-retries no tcpstack/output.go ./tcpstack '^TestHostileSYNFlood$' \
	"half-open entry: 3 SYN-ACK retries (~15 s)" \
	'limit = s.cfg.SynAckRetries' \
	'limit = 1 << 30'
m tcp-syn-cookie-mac no tcpstack/cookie.go ./tcpstack '^TestHostileSYNCookieRejected$' \
	"a final ACK needs a valid SYN cookie" \
	'if s.cookieMAC(k, key, seq.Sub(1), t, p) != iss&cookieMACMask {' \
	'if false {'
m tcp-zero-window-silent no tcpstack/output.go ./tcpstack '^TestHostileZeroWindow$' \
	"zero window: an unanswered peer, bounded probes" \
	'if c.probes > s.cfg.MaxRetries || c.orphanProbes > min(orphanProbes, s.cfg.MaxRetries) {' \
	'if c.orphanProbes > min(orphanProbes, s.cfg.MaxRetries) {'
m tcp-zero-window-orphan no tcpstack/output.go ./tcpstack '^TestHostileZeroWindow$' \
	"zero window after Close: bounded probes" \
	'if c.probes > s.cfg.MaxRetries || c.orphanProbes > min(orphanProbes, s.cfg.MaxRetries) {' \
	'if c.probes > s.cfg.MaxRetries {'
m tcp-mss-clamp no tcpstack/input.go ./tcpstack '^TestHostileTinyMSS$' \
	"a peer's tiny MSS is clamped to 64" \
	'if c.sndMSS < 64 {' \
	'if false {'

# One owner per interface (SECURITY.md "One owner per interface").
m afxdp-owner-lock no transport/afxdp/owner.go ./transport/afxdp '^TestOwnerLock$' \
	"afxdp: exclusive owner lock per interface" \
	'err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)' \
	'err = nil'
m afxdp-readyz-detached yes transport/afxdp/owner.go ./transport/afxdp '^TestIntegrationOwnerHealthyDetached$' \
	"/readyz fails when our XDP program is detached" \
	'case len(ids) == 0:' \
	$'case len(ids) == 0:\n\t\treturn nil // mutant'

# ---------------------------------------------------------------------------

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit "${1:-0}"
}

timeout_s=300
baseline=1
verbose=0
mode=run
sel=()
while (($#)); do
	case $1 in
	-h | --help) usage 0 ;;
	-l | --list) mode=list ;;
	--check) mode=check ;;
	--no-baseline) baseline=0 ;;
	-v | --verbose) verbose=1 ;;
	-t | --timeout)
		timeout_s=${2:-}
		if [[ ! $timeout_s =~ ^[1-9][0-9]*$ ]]; then
			echo "mutants: -t needs a number of seconds" >&2
			exit 2
		fi
		shift
		;;
	-*) echo "mutants: unknown option $1" >&2 && usage 2 ;;
	*) sel+=("$1") ;;
	esac
	shift
done

declare -A index=()
for i in "${!names[@]}"; do
	if [[ -n ${index[${names[i]}]:-} ]]; then
		echo "mutants: duplicate mutant name ${names[i]}" >&2
		exit 2
	fi
	index[${names[i]}]=$i
done
todo=()
if ((${#sel[@]})); then
	for n in "${sel[@]}"; do
		if [[ -z ${index[$n]:-} ]]; then
			echo "mutants: no mutant named $n (scripts/mutants.sh -l lists them)" >&2
			exit 2
		fi
		todo+=("${index[$n]}")
	done
else
	todo=("${!names[@]}")
fi

if [[ $mode == list ]]; then
	printf '%-24s %-4s %-52s %s\n' NAME ROOT GUARD "FILE -> TEST"
	for i in "${todo[@]}"; do
		printf '%-24s %-4s %-52s %s -> %s %s\n' "${names[i]}" "${roots[i]}" "${guards[i]}" "${files[i]}" "${pkgs[i]}" "${runs[i]}"
	done
	exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/xrnic-mutants.XXXXXX")
cur="" # the session of the go test running now
cleanup() {
	if [[ -n $cur ]]; then kill -KILL -- "-$cur" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The private copy: the working tree's tracked files and untracked ones that
# are not ignored (new test files), as they are now.
mkdir "$work/src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard) |
	(cd "$root" && while IFS= read -r -d '' f; do
		if [[ -e $f || -L $f ]]; then printf '%s\0' "$f"; fi # not deleted in the working tree
	done) |
	(cd "$root" && xargs -0 -r cp -a --parents -t "$work/src" --)
if [[ ! -f $work/src/go.mod ]]; then
	echo "mutants: copying the working tree of $root failed" >&2
	exit 2
fi

# apply DIR I: replace mutant I's snippet, which must occur exactly once.
apply() {
	local f=$1/${files[$2]} s=${snips[$2]} r=${repls[$2]} content stripped n
	if [[ ! -f $f ]]; then
		echo "${files[$2]} does not exist"
		return 1
	fi
	content=$(
		cat "$f"
		printf x
	)
	content=${content%x}
	stripped=${content//"$s"/}
	n=$(((${#content} - ${#stripped}) / ${#s}))
	if ((n != 1)); then
		echo "the snippet occurs $n times in ${files[$2]} (want exactly 1): $(head -1 <<<"$s")"
		return 1
	fi
	printf '%s' "${content/"$s"/"$r"}" >"$f"
}

# gotest DIR PKG RUN LOG: go test in its own session, whose leftovers (a
# daemon a timed-out test did not stop) are killed afterwards.
gotest() {
	local dir=$1 pkg=$2 run=$3 log=$4 pid rc=0
	(
		cd "$dir"
		GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" exec setsid timeout -k 30 $((timeout_s + 120)) \
			go test -count=1 -vet=off -timeout "${timeout_s}s" -run "$run" -v "$pkg"
	) >"$log" 2>&1 </dev/null &
	pid=$!
	cur=$pid
	wait "$pid" || rc=$?
	kill -KILL -- "-$pid" 2>/dev/null || true
	cur=""
	return "$rc"
}

# verdict LOG RC: PASS (tests ran and passed), NOT-RUN (nothing ran or
# everything skipped), BROKEN (did not build), FAIL.
verdict() {
	local log=$1 rc=$2
	if grep -qE '\[(build|setup) failed\]' "$log"; then
		echo BROKEN
	elif ((rc != 0)); then
		echo FAIL
	elif grep -q 'no tests to run' "$log" || ! grep -qE '^--- PASS: ' "$log"; then
		echo NOT-RUN
	else
		echo PASS
	fi
}

# failed_tests LOG: the failing tests (deepest first), or what ended the run.
failed_tests() {
	local log=$1 f
	f=$(grep -E '^ *--- FAIL: ' "$log" | sed -E 's/^ *--- FAIL: ([^ ]+).*/\1/' | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2- | head -1 || true)
	if [[ -z $f ]] && grep -q 'panic: test timed out' "$log"; then
		f="timeout ($(grep -A3 'running tests:' "$log" | sed -n 2p | awk '{print $1}'))"
	elif [[ -z $f ]] && grep -q '^panic: ' "$log"; then
		f="panic in $(sed -n '/^panic: /q; s/^=== RUN *//p' "$log" | tail -1): $(grep -m1 '^panic: ' "$log" | cut -c8-50)"
	fi
	echo "${f:-?}"
}

tail_log() { sed -e 's/^/    | /' <(tail -n "${2:-25}" "$1"); }

status=0
# --check: every snippet applies to the copy (no tests run).
if [[ $mode == check ]]; then
	for i in "${todo[@]}"; do
		rm -rf "$work/m" && mkdir -p "$work/m/$(dirname "${files[i]}")"
		if [[ -f $work/src/${files[i]} ]]; then cp "$work/src/${files[i]}" "$work/m/${files[i]}"; fi
		if msg=$(apply "$work/m" "$i"); then
			printf '%-24s ok\n' "${names[i]}"
		else
			printf '%-24s STALE: %s\n' "${names[i]}" "$msg"
			status=1
		fi
	done
	exit "$status"
fi

start=$(date +%s)
is_root=0
[[ $EUID -eq 0 ]] && is_root=1
declare -A base=() # "pkg run" -> PASS/...
results=() tests=() times=()
passed=0 failed=0 skipped=0

# Baseline: each test passes on the unmutated copy (else a "killed" mutant
# proves nothing).
if ((baseline)); then
	for i in "${todo[@]}"; do
		key="${pkgs[i]} ${runs[i]}"
		[[ -n ${base[$key]:-} ]] && continue
		if [[ ${roots[i]} == yes && $is_root -eq 0 ]]; then
			base[$key]=SKIP
			continue
		fi
		t0=$(date +%s)
		rc=0
		gotest "$work/src" "${pkgs[i]}" "${runs[i]}" "$work/log" || rc=$?
		base[$key]=$(verdict "$work/log" "$rc")
		printf 'baseline %-16s %-60s %-8s %ss\n' "${pkgs[i]}" "${runs[i]}" "${base[$key]}" $(($(date +%s) - t0))
		if [[ ${base[$key]} != PASS ]] || ((verbose)); then
			tail_log "$work/log"
		fi
	done
fi

for i in "${todo[@]}"; do
	name=${names[i]}
	t0=$(date +%s)
	test=${runs[i]}
	if [[ ${roots[i]} == yes && $is_root -eq 0 ]]; then
		if [[ ${CI:-} == true ]]; then
			res=NEEDS-ROOT
			echo "$name: needs root (its test $test is privileged); CI=true: failing" >&2
		else
			res=SKIPPED
			echo "$name: skipped, needs root (its test $test is privileged): run as root"
		fi
	elif [[ $baseline -eq 1 && ${base["${pkgs[i]} ${runs[i]}"]} != PASS ]]; then
		res=BASELINE-${base["${pkgs[i]} ${runs[i]}"]}
	else
		rm -rf "$work/m" && cp -a "$work/src" "$work/m"
		if ! msg=$(apply "$work/m" "$i"); then
			res=STALE
			echo "$name: STALE: $msg" >&2
		else
			rc=0
			gotest "$work/m" "${pkgs[i]}" "${runs[i]}" "$work/log" || rc=$?
			case $(verdict "$work/log" "$rc") in
			FAIL)
				res=KILLED
				test=$(failed_tests "$work/log")
				;;
			PASS) res=SURVIVED ;;
			NOT-RUN) res=SURVIVED-NOT-RUN ;;
			BROKEN) res=BROKEN ;;
			esac
		fi
	fi
	dt=$(($(date +%s) - t0))
	printf '%-24s %-18s %4ss  %s\n' "$name" "$res" "$dt" "$test"
	if [[ -f $work/log ]] && [[ $res == SURVIVED* || $res == BROKEN || $verbose == 1 ]]; then
		tail_log "$work/log"
	fi
	rm -f "$work/log"
	results[i]=$res tests[i]=$test times[i]=$dt
	case $res in
	KILLED) passed=$((passed + 1)) ;;
	SKIPPED) skipped=$((skipped + 1)) ;;
	*) failed=$((failed + 1)) ;;
	esac
done
rm -rf "$work/m"

echo
printf '%-24s %-22s %-52s %s\n' MUTANT RESULT GUARD "TEST (the failing test when killed)"
for i in "${todo[@]}"; do
	printf '%-24s %-22s %-52s %s\n' "${names[i]}" "${results[i]} (${times[i]}s)" "${guards[i]}" "${pkgs[i]#./} ${tests[i]}"
done
echo
total=$(($(date +%s) - start))
echo "mutants: ${#todo[@]} in ${total}s; killed $passed, skipped $skipped (need root)"
echo "$passed passed, $failed failed"
((failed == 0))
