#!/usr/bin/env python3
"""Streams completions at `epserve serve --np N` while engine ranks are killed and stopped.

Used by tests/serve/self_heal_test.sh (short, in CTest) and scripts/chaos_soak.sh (the long
soak of issue 40). Phase 1 runs every request case once, undisturbed, and keeps its tokens.
Phase 2 keeps --streams streams open for --duration seconds (each a random case) while a
chaos thread SIGKILLs a random engine rank every --kill-every seconds and SIGSTOPs another for
--stop-for seconds every --stop-every seconds (then SIGCONT). Every request must complete:
HTTP 200, no error event, [DONE], finish_reason length (its full max_tokens) or stop, and the
same token ids as in phase 1 for the greedy cases, or ids that first differ at a top-2 tie
(< 0.02 nats, as serve.load allows an EP world; counted) (seeded sampled ones: the same count; their
tokens can differ even undisturbed, as the CPU engine's logits depend in their last bits on
the batch a request runs in, and a sampled draw near a boundary then flips). Prints one JSON summary line
(requests, longest pause inside a stream: p50/p99/max, kills, stops); exits 1 on any failure.
Loopback only; every wait is bounded.
"""
import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time


TIE = 0.02  # nats: a top-2 gap below this is a tie (serve.load's bound)


def engine_pids(pattern):
    """The engine ranks matching `pattern`: `epserve engine` processes, not mpirun (whose
    command line holds the same words) nor this script."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    pids = []
    for p in out.split():
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and os.path.basename(argv[0]) == b"epserve" and argv[1] == b"engine":
            pids.append(int(p))
    return pids


def make_cases(n, seed):
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        prompt = [rng.randrange(3, 1000) for _ in range(rng.randrange(2, 40))]
        body = {"prompt": prompt, "max_tokens": rng.randrange(16, 160), "ignore_eos": True,
                "return_token_ids": True}
        if i % 2 == 0:
            body["temperature"] = 0
        else:
            body.update({"temperature": 1.0, "top_p": 0.9, "seed": rng.randrange(1 << 30)})
        cases.append(body)
    return cases


def complete(port, body, timeout):
    """Streams one completion. Returns (token_ids, finish, longest gap s, error or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return None, None, 0, "HTTP %d: %s" % (resp.status, resp.read()[:300])
        tokens, finish, done = [], None, False
        last, gap = time.monotonic(), 0.0
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            now = time.monotonic()
            gap, last = max(gap, now - last), now
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                return tokens, None, gap, "error event: %s" % chunk["error"]
            for c in chunk.get("choices", []):
                tokens += c.get("token_ids") or []
                finish = c.get("finish_reason") or finish
        if not done:
            return tokens, finish, gap, "the stream ended without [DONE]"
        return tokens, finish, gap, None
    except Exception as e:  # a timeout or a reset connection is a failure like any other
        return None, None, 0, "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()


def chaos(args, stop, log):
    rng = random.Random(args.seed + 1)
    start = time.monotonic()
    next_kill = start + args.kill_every if args.kill_every > 0 else float("inf")
    first_stop = args.stop_first if args.stop_first is not None else args.stop_every
    next_stop = start + first_stop if args.stop_every > 0 else float("inf")
    stopped = None  # (pid, until)
    while not stop.is_set():
        now = time.monotonic()
        if stopped and now >= stopped[1]:
            os.kill(stopped[0], signal.SIGCONT)
            log.append(("cont", round(now - start, 1), stopped[0]))
            stopped = None
        pids = engine_pids(args.engine_pattern)
        if now >= next_kill and pids:
            victim = rng.choice([p for p in pids if not stopped or p != stopped[0]] or pids)
            try:
                os.kill(victim, signal.SIGKILL)
                log.append(("kill", round(now - start, 1), victim))
            except ProcessLookupError:
                pass
            next_kill = now + args.kill_every
        if now >= next_stop and pids and not stopped:
            victim = rng.choice(pids)
            try:
                os.kill(victim, signal.SIGSTOP)
                stopped = (victim, now + args.stop_for)
                log.append(("stop", round(now - start, 1), victim))
            except ProcessLookupError:
                pass
            next_stop = now + args.stop_every
        time.sleep(0.1)
    if stopped:
        try:
            os.kill(stopped[0], signal.SIGCONT)
        except ProcessLookupError:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--engine-pattern", required=True, help="pgrep -f pattern of the ranks")
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--cases", type=int, default=24)
    ap.add_argument("--kill-every", type=float, default=60)
    ap.add_argument("--stop-every", type=float, default=60)
    ap.add_argument("--stop-for", type=float, default=20)
    ap.add_argument("--stop-first", type=float, default=None,
                    help="seconds to the first SIGSTOP (default: --stop-every)")
    ap.add_argument("--request-timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    cases = make_cases(args.cases, args.seed)
    reference, gaps_top2 = [], []
    for i, body in enumerate(cases):
        tokens, finish, _, err = complete(args.port, body, args.request_timeout)
        if err or len(tokens) != body["max_tokens"]:
            print("FAIL: undisturbed case %d: %s (%s tokens)" % (i, err, tokens and len(tokens)))
            return 1
        reference.append(tokens)
        # Each token's top-2 log-probability gap, whole (an EP world's greedy output is not yet
        # independent of the batch: a difference may start at a tie, as serve.load allows).
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=args.request_timeout)
        conn.request("POST", "/v1/completions", json.dumps(dict(body, logprobs=2)),
                     {"Content-Type": "application/json"})
        whole = json.loads(conn.getresponse().read())["choices"][0]
        conn.close()
        gaps_top2.append([(lambda v: v[0] - v[1] if len(v) > 1 else 1e9)(sorted(t.values(), reverse=True))
                          for t in whole["logprobs"]["top_logprobs"]])

    stop = threading.Event()
    log, results, lock = [], [], threading.Lock()
    deadline = time.monotonic() + args.duration

    def worker(w):
        rng = random.Random(args.seed * 1000 + w)
        while time.monotonic() < deadline:
            i = rng.randrange(len(cases))
            tokens, finish, gap, err = complete(args.port, cases[i], args.request_timeout)
            greedy = cases[i].get("temperature") == 0
            if err is None and not greedy and len(tokens) != len(reference[i]):
                err = "case %d: %d tokens, want %d" % (i, len(tokens), len(reference[i]))
            tie = False
            if err is None and greedy and tokens != reference[i]:
                n = next((k for k, (a, b) in enumerate(zip(tokens, reference[i])) if a != b),
                         min(len(tokens), len(reference[i])))
                tie = len(tokens) == len(reference[i]) and gaps_top2[i][n] < TIE
                if not tie:
                    err = "case %d: tokens differ from the undisturbed run at %d (%d vs %d " \
                          "tokens; top-2 gap there %.3g nats)" % (
                              i, n, len(tokens), len(reference[i]), gaps_top2[i][min(n, len(gaps_top2[i]) - 1)])
            if err is None and finish != "length":
                err = "case %d: finish_reason %s" % (i, finish)
            with lock:
                results.append((i, gap, err, tie))

    chaos_thread = threading.Thread(target=chaos, args=(args, stop, log))
    chaos_thread.start()
    workers = [threading.Thread(target=worker, args=(w,)) for w in range(args.streams)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    chaos_thread.join()

    failures = [r for r in results if r[2]]
    gaps = sorted(r[1] for r in results)
    pct = lambda q: round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 2) if gaps else 0
    summary = {"requests": len(results), "failed": len(failures), "pause_p50_s": pct(0.5),
               "pause_p99_s": pct(0.99), "pause_max_s": round(gaps[-1], 2) if gaps else 0,
               "kills": sum(1 for e in log if e[0] == "kill"),
               "stops": sum(1 for e in log if e[0] == "stop"),
               "greedy_ties": sum(1 for r in results if r[3]), "events": log}
    print(json.dumps(summary))
    for f in failures[:10]:
        print("FAIL:", f[2])
    return 1 if failures or not results else 0


if __name__ == "__main__":
    sys.exit(main())
