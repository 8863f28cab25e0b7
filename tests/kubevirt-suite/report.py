#!/usr/bin/env python3
"""Reads Ginkgo's JSON report of KubeVirt's suite and the spec list, prints one line per listed
spec (result, seconds, location, why it failed) and "N passed, M failed".

Exit status 0 when every spec the list expects to pass passed and every spec it expects to fail
failed; 1 otherwise (a regression, or a fixed spec whose line in the list is out of date).
A spec the suite skipped or did not run counts as failed: nothing passes by not running.
"""

import json
import re
import sys


def load_list(path):
    specs = []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) < 3 or fields[1] not in ("pass", "fail"):
            sys.exit(f"{path}:{number}: want FILE:LINE<TAB>pass|fail<TAB>TEXT[<TAB>WHY], got {line!r}")
        location, expect, text = fields[:3]
        why = fields[3] if len(fields) > 3 else ""
        if expect == "fail" and not why:
            sys.exit(f"{path}:{number}: a spec expected to fail needs its reason")
        specs.append((location, expect, text, why))
    return specs


def first_line(message, width=110):
    for line in message.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= width else line[: width - 1] + "…"
    return ""


def main():
    report_path, list_path = sys.argv[1], sys.argv[2]
    specs = load_list(list_path)
    suites = json.load(open(report_path, encoding="utf-8"))
    results = {}
    setup_failures = []
    for suite in suites:
        for spec in suite.get("SpecReports") or []:
            loc = spec.get("LeafNodeLocation") or {}
            file_name = loc.get("FileName", "")
            match = re.search(r"(tests/.*)$", file_name)
            key = f"{match.group(1) if match else file_name}:{loc.get('LineNumber')}"
            state = spec.get("State", "")
            failure = spec.get("Failure") or {}
            message = failure.get("Message", "")
            if spec.get("LeafNodeType") != "It":
                if state not in ("passed", "skipped"):
                    setup_failures.append(f"{spec.get('LeafNodeType')} {state}: {first_line(message)}")
                continue
            results[key] = (state, spec.get("RunTime", 0) / 1e9, message)

    passed = failed = regressions = fixed = 0
    rows = []
    for location, expect, text, why in specs:
        state, seconds, message = results.get(location, ("not run", 0.0, "the suite did not run it"))
        ok = state == "passed"
        passed += ok
        failed += not ok
        note = ""
        if expect == "pass" and not ok:
            regressions += 1
            note = "REGRESSION "
        elif expect == "fail" and ok:
            fixed += 1
            note = "NOW PASSES (update the list) "
        reason = "" if ok else first_line(message) or state
        rows.append(f"{state:<11} {seconds:7.1f}s  {location:<44} {note}{reason}")
        if not ok and why:
            rows.append(f"{'':<11} {'':8}  {'':<44} known: {why}")
    print("\n".join(rows))
    for failure in setup_failures:
        print(f"suite setup: {failure}")
    print(f"\n{passed} passed, {failed} failed of {len(specs)} listed specs"
          f" ({regressions} expected to pass failed, {fixed} expected to fail passed)")
    sys.exit(0 if regressions == 0 and fixed == 0 else 1)


if __name__ == "__main__":
    main()
