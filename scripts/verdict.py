#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The honest count of a `make check` run.

Reads what one boot left in the results directory and prints KTAP: the host
checks already recorded (host.ktap), the selftests' own KTAP, then one result per
property of the run itself, each failing result followed by the lines that made
it fail:

  - the VM run exited 0 (a panic, a timeout or any failure of the guest is not);
  - every planned test program reported a result;
  - every program reached its own plan (a program cut short by a crash, a timeout
    or an early exit is not);
  - the kernel log of the whole boot (console and dmesg) holds no report, and no
    `Call Trace:` that no report header explains; the guest's dmesg holds both
    vm-run's start line and run_tests.sh's end marker;
  - no task was blocked (the hung-task detector panics the guest and names it);
  - kmemleak, scanned after every cmecho module was unloaded, reports nothing
    allocated by cmecho, and the scan itself worked;
  - the kernel gained no taint bit but those that loading the test modules sets
    (O, E, N) and lockdep is still on (debug_locks 1) at the end.

Ends with `totals: N passed, N failed[, N skipped]` over leaf results (a program
that ended early counts one failure per missing leaf, a missing program one),
writes verdict.json for `scripts/check --canary`, and exits 1 on any failure or
skip.

  verdict.py RESULTS_DIR VM_EXIT_STATUS PROGRAM...
"""
import json
import re
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
SELFTESTS_LIB = TOP / "tools/testing/selftests/cmecho/lib.sh"
SCRIPTS_LIB = TOP / "scripts/lib.sh"


def shell_value(path, name):
    """The value of NAME='...' or NAME="..." in a shell file."""
    m = re.search(rf"^{name}=(['\"]?)(.*)\1$", Path(path).read_text(), re.M)
    if not m:
        sys.exit(f"verdict.py: no {name} in {path}")
    return m.group(2)


# Kernel log reports: the selftests' DMESG_REPORTS (an ERE Python reads alike).
REPORT = re.compile(shell_value(SELFTESTS_LIB, "DMESG_REPORTS"))
VM_RUN_STARTED = shell_value(SCRIPTS_LIB, "VM_RUN_STARTED")
END_MARKER = "cmecho: run_tests.sh: end of the kernel log of this run"
# A report's header comes at most this many lines before its Call Trace (KASAN
# prints the access, the CPU line and the hardware name in between).
CALL_TRACE_WINDOW = 40
CONTEXT = re.compile(r"stack backtrace:|NMI backtrace for cpu|^task:\S+ +state:"
                     r"|Sending NMI from CPU|Showing all locks held")
# Taint bits that loading the test modules sets (kernel/panic.c): O, an
# out-of-tree module (12); E, an unsigned module (13, with module signing); N, a
# KUnit test ran (18). Any other new bit fails the run.
TAINT_ALLOWED = (1 << 12) | (1 << 13) | (1 << 18)
TAINT_LETTERS = "PFSRMBUDAWCIOELKXTN"
HUNG = re.compile(r"INFO: task (\S+):(\d+) blocked for more than (\d+) seconds")
PANIC = re.compile(r"Kernel panic - not syncing: ?(.*)")
TIMESTAMP = re.compile(r"^(<\d+>)?\[\s*\d+\.\d+\]\s?")
TOP_RESULT = re.compile(r"^(not )?ok \d+ selftests: \S+: (\S+)(.*)$")
PROG_START = re.compile(r"^# selftests: \S+: (\S+)\s*$")
NESTED_PLAN = re.compile(r"^# 1\.\.(\d+)")
NESTED_LEAF = re.compile(r"^# (not )?ok \d+ ?(.*)$")
# A frame of a kmemleak backtrace inside cmecho: symbolized while it is loaded, or
# a bare module-area address once it (or its init section) is gone.
CMECHO_FRAME = re.compile(r"\[cmecho[a-z_]*\]|^\s+0xffffffff([a-f][0-9a-f]{7})\b")


def read(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def ktap_lines(results):
    """The selftests' KTAP: the file the guest wrote, or the guest's stdout as the
    host saw it, whichever holds more results (a panic can cut the file short)."""
    best = []
    for name in ("selftests.ktap", "vm.log"):
        text = read(results / name) or ""
        lines = text.splitlines()
        if name == "vm.log":
            start = [i for i, l in enumerate(lines) if l.strip() == "TAP version 13"]
            lines = lines[start[0]:] if start else []
        score = sum(1 for l in lines if re.match(r"^(# )?(not )?ok ", l))
        if score > sum(1 for l in best if re.match(r"^(# )?(not )?ok ", l)):
            best = lines
    return best


def parse_programs(lines):
    """Per program, in order: name, nested plan, leaves (pass, fail, skip),
    top-level verdict (None when the program never finished)."""
    progs = []
    cur = None
    top_plan = None
    for line in lines:
        if top_plan is None and re.match(r"^1\.\.\d+$", line):
            top_plan = int(line[3:])
            continue
        m = PROG_START.match(line)
        if m:
            cur = {"name": m.group(1), "plan": None, "pass": 0, "fail": 0,
                   "skip": 0, "fail_names": [], "result": None}
            progs.append(cur)
            continue
        m = TOP_RESULT.match(line)
        if m:
            if cur is None or cur["name"] != m.group(2):
                cur = {"name": m.group(2), "plan": None, "pass": 0, "fail": 0,
                       "skip": 0, "fail_names": [], "result": None}
                progs.append(cur)
            cur["result"] = ("skip" if "# SKIP" in m.group(3)
                             else "fail" if m.group(1) else "pass")
            cur["directive"] = m.group(3).strip()
            cur = None
            continue
        if cur is None:
            continue
        m = NESTED_PLAN.match(line)
        if m and cur["plan"] is None:
            cur["plan"] = int(m.group(1))
            continue
        m = NESTED_LEAF.match(line)
        if m:
            if "# SKIP" in line:
                cur["skip"] += 1
            elif m.group(1):
                cur["fail"] += 1
                cur["fail_names"].append(m.group(2))
            else:
                cur["pass"] += 1
    return top_plan, progs


def kernel_log(results):
    """Every kernel log line of the boot, console and dmesg merged, timestamps
    dropped, each line once."""
    seen = set()
    out = []
    for name in ("console.log", "dmesg.log"):
        for line in (read(results / name) or "").splitlines():
            line = TIMESTAMP.sub("", line.rstrip())
            if line and line not in seen:
                seen.add(line)
                out.append(line)
    return out


def unexplained_traces(results):
    """Each `Call Trace:` with no report header in the CALL_TRACE_WINDOW lines
    before it (a line of CONTEXT, such as lockdep's "stack backtrace:", carries
    a report's header on). Read from the guest's dmesg, whole and in order (the
    merged log drops repeated lines, and every trace starts with the same one);
    from the console when there is no dmesg."""
    text = read(results / "dmesg.log")
    if text is None:
        text = read(results / "console.log") or ""
    lines = [TIMESTAMP.sub("", l.rstrip()) for l in text.splitlines()]
    out = []
    last = None
    for i, l in enumerate(lines):
        if REPORT.search(l) or (last is not None and CONTEXT.search(l)):
            last = i
        elif "Call Trace:" in l and (last is None or i - last > CALL_TRACE_WINDOW):
            before = " | ".join(x for x in lines[max(0, i - 6):i] if x)
            out.append(f"a Call Trace with no report header before it: {before}")
    return out


def kernel_state(path):
    """run_tests.sh's kernel_state file: tainted (an int), debug_locks, cpus."""
    text = read(path)
    if text is None:
        return None
    kv = dict(l.split(None, 1) for l in text.splitlines() if " " in l)
    try:
        return {"tainted": int(kv["tainted"]), "debug_locks": kv.get("debug_locks", "").strip(),
                "cpus": int(kv.get("cpus", "1"))}
    except (KeyError, ValueError):
        return None


def taint_letters(mask):
    return "".join(c for b, c in enumerate(TAINT_LETTERS) if mask & (1 << b)) + f" ({mask:#x})"


def program_times(results, cpus):
    """Per program from times.log: wall seconds, and how many of the vCPUs'
    seconds were busy and idle (the idle column sums over the vCPUs)."""
    rows = []
    cur = None
    for line in (read(results / "times.log") or "").splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3:
            continue
        try:
            up, idle = float(parts[0]), float(parts[1])
        except ValueError:
            continue
        m = PROG_START.match(parts[2])
        if m:
            cur = (m.group(1), up, idle)
            continue
        m = TOP_RESULT.match(parts[2])
        if m and cur and cur[0] == m.group(2):
            wall = up - cur[1]
            idle_s = idle - cur[2]
            rows.append((cur[0], wall, wall * cpus - idle_s, idle_s))
            cur = None
    return rows


def kmemleak_blocks(text):
    blocks = []
    for block in re.split(r"(?m)^(?=unreferenced object )", text):
        if block.startswith("unreferenced object "):
            blocks.append(block.rstrip("\n"))
    return blocks


def main():
    results = Path(sys.argv[1])
    vm_rc = int(sys.argv[2])
    planned = sys.argv[3:]

    out = []
    counts = {"pass": 0, "fail": 0, "skip": 0}
    checks = {}

    # Host checks recorded by scripts/check (build, rustfmt).
    n = 0
    for line in (read(results / "host.ktap") or "").splitlines():
        out.append(line)
        if re.match(r"^ok \d+ .*# SKIP", line):
            counts["skip"] += 1
            n += 1
        elif line.startswith("ok "):
            counts["pass"] += 1
            n += 1
        elif line.startswith("not ok "):
            counts["fail"] += 1
            n += 1

    def result(key, ok, desc, diag=()):
        nonlocal n
        n += 1
        out.append(f"{'ok' if ok else 'not ok'} {n} {desc}")
        for d in list(diag)[:60]:
            out.append(f"# {d}")
        if len(diag) > 60:
            out.append(f"# ... {len(diag) - 60} more")
        counts["pass" if ok else "fail"] += 1
        checks[key] = {"ok": ok, "diag": list(diag)}

    # The selftests' own results, nested as the kselftest runner printed them.
    lines = ktap_lines(results)
    top_plan, progs = parse_programs(lines)
    selftests_out = list(lines)
    for p in progs:
        counts["pass"] += p["pass"]
        counts["fail"] += p["fail"]
        counts["skip"] += p["skip"]
        leaves = p["pass"] + p["fail"] + p["skip"]
        if p["plan"] is not None and leaves < p["plan"]:
            counts["fail"] += p["plan"] - leaves
        elif p["result"] == "fail" and p["fail"] == 0:
            counts["fail"] += 1
        elif p["result"] == "skip" and leaves == 0:
            counts["skip"] += 1
        elif p["result"] == "skip":
            # Exit status 4 (KSFT_SKIP) after results of its own: the program
            # gave up on something; that is a failure, not a pass.
            counts["fail"] += 1
        # The runner prints exit status 2 (KSFT_XFAIL) as "ok ... # XFAIL": a
        # program that exits so has failed, whatever its leaves say.
        if "XFAIL" in p.get("directive", "") and p["fail"] == 0:
            counts["fail"] += 1
        if p["plan"] is None:
            counts["fail"] += 1

    # 1. The VM run.
    log = kernel_log(results)
    panics = [l for l in log if PANIC.search(l)]
    # A guest that died before the command started was booted again (vm-run);
    # say so, pass or fail.
    diag = [l.removeprefix("cmecho: ") for l in (read(results / "vm.log") or "").splitlines()
            if l.startswith("cmecho: vm-run: ") and "booting again" in l]
    if vm_rc != 0:
        diag.append(f"vm-run exited {vm_rc}" + (
            " (timed out on the host)" if vm_rc == 124 else
            " (the guest died: panic or crash)" if vm_rc == 255 else ""))
        diag += panics[:5]
        console = (read(results / "console.log") or "").splitlines()
        diag += ["console: " + l for l in console[-25:]]
    result("vm", vm_rc == 0, "vm-run: the guest ran the selftests and exited 0", diag)

    # 2. Every planned program reported.
    reported = [p["name"] for p in progs if p["result"] is not None]
    missing = [p for p in planned if p not in reported]
    diag = []
    if top_plan is None:
        diag.append("no top-level plan in the selftests' KTAP")
    elif top_plan != len(planned):
        diag.append(f"top-level plan 1..{top_plan}, expected 1..{len(planned)}")
    if missing:
        diag.append(f"{len(missing)} of {len(planned)} programs never reported: {' '.join(missing)}")
    counts["fail"] += len([m for m in missing if m not in [p["name"] for p in progs]])
    if not (results / "run-complete").exists():
        diag.append("the guest never finished run_tests.sh (no run-complete marker)")
    result("programs", not diag,
           f"selftests: all {len(planned)} planned programs reported a result", diag)

    # 3. Every program reached its own plan.
    diag = []
    for p in progs:
        leaves = p["pass"] + p["fail"] + p["skip"]
        if p["plan"] is None:
            diag.append(f"{p['name']}: printed no plan")
        elif leaves != p["plan"]:
            how = "never finished" if p["result"] is None else f"exited ({p.get('directive') or 'ok'})"
            diag.append(f"{p['name']}: planned {p['plan']}, reported {leaves}; {how}")
    result("plans", not diag, "selftests: every program reached its own plan", diag)

    # 4. Kernel log reports anywhere in the boot, and stack dumps no report
    # header explains (a dump_stack(), or a report this list does not know).
    reports = [l for l in log if REPORT.search(l)]
    reports += unexplained_traces(results)
    if (results / "run-complete").exists():
        dmesg_text = read(results / "dmesg.log") or ""
        for what, line in (("vm-run's start line", VM_RUN_STARTED),
                           ("run_tests.sh's end marker", END_MARKER)):
            if line not in dmesg_text:
                reports.append(f"dmesg.log lacks {what} ({line!r}): the kernel log was not followed whole")
    result("dmesg", not reports,
           "kernel log of the whole boot: no BUG, WARNING, Oops, lockdep, KASAN, KFENCE, "
           "SLUB, UBSAN, refcount, RCU stall, lockup, hung task or kmemleak report, "
           "no unexplained Call Trace", reports)

    # 5. Blocked tasks.
    hung = [HUNG.search(l) for l in log if HUNG.search(l)]
    result("hung", not hung, "hung-task detector: no task blocked",
           [f"task {m.group(1)} (pid {m.group(2)}) blocked for more than {m.group(3)} s"
            for m in hung])

    # 6. kmemleak after unload.
    diag = []
    left = (read(results / "modules-left.txt") or "").strip()
    if left:
        diag.append(f"still loaded at the end: {left}")
    leak = read(results / "kmemleak.txt")
    if leak is None:
        diag.append("no kmemleak scan: the run did not get that far")
    elif "not available" in leak or leak.startswith("kmemleak: scan failed"):
        diag.append(leak.strip())
    else:
        blocks = kmemleak_blocks(leak)
        ours = [b for b in blocks if any(CMECHO_FRAME.search(l) for l in b.splitlines()
                                         if l.startswith(" "))]
        if ours:
            diag.append(f"{len(ours)} unreferenced object(s) allocated by cmecho "
                        f"(a cmecho frame, or a frame in an unloaded module):")
            for b in ours[:10]:
                diag += b.splitlines()
        elif blocks:
            out.append(f"# kmemleak: {len(blocks)} object(s), none allocated by cmecho")
    result("kmemleak", not diag,
           "kmemleak, after every cmecho module was unloaded: nothing allocated by cmecho",
           diag)

    # 7. Taint and lockdep, before and after the run.
    start, end = kernel_state(results / "kernel-state.start"), kernel_state(results / "kernel-state.end")
    diag = []
    if start is None or end is None:
        diag.append("no kernel state recorded " + ("before" if start is None else "after") +
                    " the run (kernel-state.start/.end): the run did not get that far")
    else:
        new = end["tainted"] & ~start["tainted"] & ~TAINT_ALLOWED
        if new:
            diag.append(f"new taint: {taint_letters(new)} (mask {end['tainted']}, "
                        f"{start['tainted']} at the start)")
    result("taint", not diag,
           "taint: no new taint bit but O, E and N (the test modules) over the run", diag)
    diag = []
    if start is None or end is None:
        diag.append("no debug_locks recorded: the run did not get that far")
    else:
        for when, st in (("at the start", start), ("at the end", end)):
            if st["debug_locks"] != "1":
                diag.append(f"debug_locks {st['debug_locks']} {when}: lockdep turned itself off")
    result("debug_locks", not diag, "lockdep still on (debug_locks 1) at the end of the run", diag)

    cpus = start["cpus"] if start else 1
    times = program_times(results, cpus)
    if times:
        out.append(f"# time per program: wall s, vCPU s busy, vCPU s idle ({cpus} vCPUs)")
        try:
            limit = int(shell_value(SELFTESTS_LIB.parent / "settings", "timeout"))
        except SystemExit:
            limit = None
        for name, wall, busy, idle in times:
            over = f" (over half of its {limit} s timeout)" if limit and wall > limit / 2 else ""
            out.append(f"#   {name}: {wall:.0f} {busy:.0f} {idle:.0f}{over}")
        tw, tb, ti = (sum(t[i] for t in times) for i in (1, 2, 3))
        out.append(f"#   all programs: {tw:.0f} {tb:.0f} {ti:.0f}")

    for line in selftests_out:
        print(line)
    print("# run checks (scripts/verdict.py), numbered after the host checks:")
    for line in out:
        print(line)
    p, f, s = counts["pass"], counts["fail"], counts["skip"]
    (results / "verdict.json").write_text(json.dumps(
        {"pass": p, "fail": f, "skip": s, "checks": checks,
         "programs": progs, "planned": planned}, indent=1))
    print(f"totals: {p} passed, {f} failed" + (f", {s} skipped" if s else ""))
    return 0 if f == 0 and s == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
