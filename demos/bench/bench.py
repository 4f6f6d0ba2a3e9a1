#!/usr/bin/python3
"""bench.py: evrdma against perftest, measured in the same run on the same device, both over
rdma_cm. Every figure is the median of --runs runs, evrdma's and perftest's taken in turn (the
latency table's up to 4 KiB of --latency-runs).

  latency    pingpong's round trip against ib_send_lat's, 1 B to 1 MiB: event mode against
             ib_send_lat -e (both sleep on the completion channel), adaptive polling (-P, its
             window stretched up to --stretch: -G) against ib_send_lat (busy-polling) and against
             raw-pingpong (busy-polling straight on verbs, set up as pingpong is: the part of the
             polling gap that is evrdma's own); then where the latency goals stand
  bandwidth  blast per mode, 4 KiB to 1 MiB: send against ib_send_bw -e and read against
             ib_read_bw -e (event mode on both sides), write against ib_write_bw (which only
             busy-polls: blast -P)
  rate       message rate at 8 B to 4 KiB: blast send and write with -P against ib_send_bw and
             ib_write_bw, one request per post and in lists of 16 (blast -l 16, --post_list 16)
  idle       the CPU both pingpong processes use while their connection is open and idle (-P)
  streams    byte streams (stream-bench, a libevent program on evrdma's bufferevents) against
             rstream (librdmacm's rsockets benchmark, custom runs -S size -C count -I 1): one-way
             throughput with 64 B, 4 KiB and 64 KiB writes against rstream -T b (blocking) and its
             default (polling), with the CPU per GB each side spent; 64 B ping-pong latency; blast
             send at 64 KiB (evrdma's messages under the stream); TLS over the stream against TLS
             over TCP (stream-bench --tls); a TCP program through a pair of evrdma-proxy against
             direct TCP and the stream; TCP as a reference only (stream-bench --tcp, rstream -T s)

Prints each table with the ratios (evrdma / perftest: above 1 is evrdma slower for latency,
faster for bandwidth and rate), and writes latency.csv, bandwidth.csv, rate.csv and summary.txt
into --out. Meant for tools/rdma-run (make bench); demos/bench/plot.gp draws the CSV files.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

LATENCY_SIZES = [1, 8, 64, 512, 4096, 32768, 262144, 1048576]
BANDWIDTH_SIZES = [4096, 65536, 1048576]
RATE_SIZES = [8, 64, 512, 4096]
STREAM_SIZES = [64, 4096, 65536]
DEPTH = 16       # operations in flight (blast -b, perftest -t)
POST_LIST = 16   # the batched message rate's list length


class Failed(Exception):
    pass


class Bench:
    def __init__(self, args):
        self.args = args
        self.build = os.environ.get("BUILD_DIR", "build")
        self.ip = os.environ.get("EVRDMA_RDMA_IP")
        self.dev = os.environ.get("EVRDMA_RDMA_DEV")
        if not self.ip or not self.dev:
            sys.exit("bench.py: run this under tools/rdma-run (EVRDMA_RDMA_IP and EVRDMA_RDMA_DEV are not set)")
        self.logs = tempfile.mkdtemp(prefix="evrdma-bench-")
        self.lines = []

    def say(self, text=""):
        print(text, flush=True)
        self.lines.append(text)

    # ---- processes ----

    def server(self, cmd, ready, name):
        """Starts a server with its output in a file; returns it once `ready` shows there."""
        path = os.path.join(self.logs, name)
        out = open(path, "w")
        # Line-buffered: perftest says it is ready through C stdio, which a file would hold back.
        proc = subprocess.Popen(["stdbuf", "-oL"] + cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        for _ in range(400):
            time.sleep(0.025)
            with open(path) as f:
                text = f.read()
            if re.search(ready, text):
                return proc, path
            if proc.poll() is not None:
                break
        proc.kill()
        raise Failed(f"{cmd[0]} did not start: {open(path).read()[-400:]}")

    def client(self, cmd, timeout=300):
        try:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"{' '.join(cmd)}: no result within {timeout} s")
        return done.returncode, done.stdout

    def finish(self, proc, path, timeout=60):
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise Failed(f"the server did not exit: {open(path).read()[-400:]}")

    # ---- perftest ----

    def perftest(self, tool, size, iterations, extra, attempts=3):
        """perftest's result line (the numbers under its '#bytes' header)."""
        base = [tool, "-d", self.dev, "-R", "-s", str(size), "-n", str(iterations)] + extra
        for attempt in range(1, attempts + 1):
            proc, path = self.server(base, "Waiting for client", f"{tool}-server")
            try:
                rc, out = self.client(base + [self.ip])
            except Failed as e:
                # Seen: ib_send_bw --post_list 16 on rxe stalling for good, once in a run. Once more.
                proc.kill()
                proc.wait()
                if attempt == attempts:
                    raise
                print(f"bench.py: {e}; again", file=sys.stderr)
                continue
            if rc != 0 and attempt < attempts:
                # perftest's server says it waits before its rdma_cm listens: a client that comes
                # too early is refused and exits, and the server waits on for ever. Once more.
                proc.kill()
                proc.wait()
                print(f"bench.py: {tool} -s {size}: the client failed (status {rc}: "
                      f"{out.strip().splitlines()[-1] if out.strip() else 'no output'}); again", file=sys.stderr)
                continue
            self.finish(proc, path)
            lines = out.splitlines()
            row = None
            for i, line in enumerate(lines):
                if line.strip().startswith("#bytes") and i + 1 < len(lines):
                    row = [float(x) for x in lines[i + 1].split()]
            if row is not None and not all(math.isfinite(x) for x in row) and attempt < attempts:
                # Seen: ib_send_lat -e -s 1048576 printing "inf" for its maximum and average.
                print(f"bench.py: {tool} -s {size}: a figure is not a number ({' '.join(map(str, row))}); again",
                      file=sys.stderr)
                continue
            if row is not None:
                return row
            raise Failed(f"{tool}: no result (status {rc}): {out[-400:]}")

    def send_lat(self, size, iterations, events):
        """(average, typical) round trip: ib_send_lat prints half round trips, t_typical is the median."""
        row = self.perftest("ib_send_lat", size, iterations, ["-e"] if events else [])
        return 2 * row[5], 2 * row[4]

    def bw(self, tool, size, iterations, extra):
        row = self.perftest(tool, size, iterations, ["-t", str(DEPTH)] + extra)
        return row[4] * 1e6  # MsgRate, Mpps: operations per second

    # ---- evrdma ----

    def pingpong(self, size, iterations, window):
        polling = ["-P", str(window)] + (["-G", str(self.args.stretch)] if self.args.stretch else []) if window else []
        proc, path = self.server([f"{self.build}/demos/pingpong-server", "-a", self.ip, "-e", "1"] + polling,
                                 "listening", "pingpong-server")
        # -R 0: no round-trip watchdog timer re-armed on every send (perftest runs none).
        rc, out = self.client([f"{self.build}/demos/pingpong-client", "-a", self.ip, "-c", str(iterations),
                               "-s", str(size), "-R", "0", "-x"] + polling)
        self.finish(proc, path)
        return self.round_trips("pingpong-client", rc, out)

    @staticmethod
    def round_trips(program, rc, out):
        """(average, median) round trip from pingpong-client's or raw-pingpong's output; the average
        as ib_send_lat takes its t_avg, without the 2 longest round trips."""
        m = re.search(r"as ib_send_lat averages it \(its 2 longest left out\): ([0-9.]+) us", out)
        median = re.search(r"round trip: median ([0-9.]+) us", out)
        if rc != 0 or not m or not median:
            raise Failed(f"{program} (status {rc}): {out[-400:]}")
        return float(m.group(1)), float(median.group(1))

    def blast(self, mode, size, count, window=0, post_list=1):
        polling = ["-P", str(window)] if window else []
        proc, path = self.server([f"{self.build}/demos/blast-server", "-a", self.ip, "-p", "0", "-e", "1"] + polling,
                                 r"listening on .* port \d+", "blast-server")
        port = re.search(r"port (\d+)", open(path).read()).group(1)
        cmd = [f"{self.build}/demos/blast-client", "-a", self.ip, "-p", port, "-m", mode, "-s", str(size),
               "-c", str(count), "-b", str(DEPTH), "-x"] + polling
        if post_list > 1:
            cmd += ["-l", str(post_list)]
        rc, out = self.client(cmd)
        self.finish(proc, path)
        m = re.search(r"all connections: .* ([0-9.]+) ops/s", out)
        if rc != 0 or not m:
            raise Failed(f"blast-client (status {rc}): {out[-400:]}")
        return float(m.group(1))

    def raw_pingpong(self, size, iterations):
        proc, path = self.server([f"{self.build}/demos/raw-pingpong", "-S", "-a", self.ip, "-p", "0"],
                                 r"listening on port \d+", "raw-pingpong-server")
        port = re.search(r"port (\d+)", open(path).read()).group(1)
        rc, out = self.client([f"{self.build}/demos/raw-pingpong", "-a", self.ip, "-p", port, "-c", str(iterations),
                               "-s", str(size)])
        self.finish(proc, path)
        return self.round_trips("raw-pingpong", rc, out)

    # ---- byte streams ----

    @staticmethod
    def cpu_of(usage):
        return usage.ru_utime + usage.ru_stime

    def rstream(self, size, count, iterations, option):
        """rstream's Gb/s and usec/xfer, and the CPU s per GB each side spent (each side sends and
        receives size x count x iterations bytes)."""
        port = str(7600 + int(time.time() * 1000) % 300)
        common = ["-p", port, "-S", str(size), "-C", str(count), "-I", str(iterations)] + option
        proc, path = self.server(["rstream", "-b", self.ip] + common, r"usec/xfer", "rstream-server")
        client = subprocess.Popen(["rstream", "-s", self.ip] + common, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        out = client.stdout.read()
        _, client_status, client_usage = os.wait4(client.pid, 0)
        _, server_status, server_usage = os.wait4(proc.pid, 0)
        rows = [line.split() for line in out.splitlines() if line.startswith("custom")]
        if client_status != 0 or not rows:
            raise Failed(f"rstream {' '.join(common)} (status {client_status}): {out[-400:]}")
        gb = 2 * size * count * iterations / 1e9
        usec_per_xfer = float(rows[-1][7])
        # Its Gb/s from its usec/xfer: the Gb/s column has two decimals, 0.00 for small writes.
        return (size * 8 / (1000 * usec_per_xfer), usec_per_xfer, self.cpu_of(client_usage) / gb,
                self.cpu_of(server_usage) / gb)

    def stream_bench(self, transport, args, server_args=()):
        """One stream-bench client run against a stream-bench server started for it."""
        proc, path = self.server([f"{self.build}/demos/stream-bench", "--server", f"--{transport}", self.ip, "0",
                                  *server_args], r"listening on .* port \d+", f"stream-bench-{transport}")
        port = re.search(r"port (\d+)", open(path).read()).group(1)
        rc, out = self.client([f"{self.build}/demos/stream-bench", f"--{transport}", self.ip, port] + args)
        proc.send_signal(2)
        self.finish(proc, path)
        figures = dict(re.findall(r"(\w+)=([0-9.]+)", out))
        if rc != 0 or not figures:
            raise Failed(f"stream-bench {' '.join(args)} (status {rc}): {out[-400:]}")
        return figures

    def proxied(self, args):
        """One stream-bench --tcp client run through two evrdma-proxy (tcp -> rdma -> tcp) to a
        stream-bench --tcp server: the figures of a TCP program put on RDMA unchanged."""
        started = []
        try:
            server, spath = self.server([f"{self.build}/demos/stream-bench", "--server", "--tcp", self.ip, "0"],
                                        r"listening on .* port \d+", "proxied-server")
            started.append((server, spath))
            port = re.search(r"port (\d+)", open(spath).read()).group(1)
            for name, source, target in (("proxy-b", "rdma", "tcp"), ("proxy-a", "tcp", "rdma")):
                proc, path = self.server([f"{self.build}/demos/evrdma-proxy", "--from", source, self.ip, "0", "--to",
                                          target, self.ip, port], r"listening on .* port \d+", name)
                started.append((proc, path))
                port = re.search(r"port (\d+)", open(path).read()).group(1)
            rc, out = self.client([f"{self.build}/demos/stream-bench", "--tcp", self.ip, port] + args)
        finally:
            for proc, path in reversed(started):
                proc.send_signal(2)
                self.finish(proc, path)
        figures = dict(re.findall(r"(\w+)=([0-9.]+)", out))
        if rc != 0 or not figures:
            raise Failed(f"stream-bench through evrdma-proxy {' '.join(args)} (status {rc}): {out[-400:]}")
        return figures

    def stream_latency(self, transport, poll=0):
        """The 64 B ping-pong's mean and median half round trip, us; `poll`: both sides' polling
        window, us (RDMA)."""
        polling = ["--poll", str(poll)] if poll else []
        f = self.stream_bench(transport, ["--latency", "--size", "64", "--count", "2000"] + polling, polling)
        return float(f["half_rtt_us"]), float(f["p50_us"])

    def stream_throughput(self, transport, size, total, poll=0, copy=False, tls=False, in_place=False):
        """Gb/s and CPU s per GB of client and server; `copy`: the receiving side (the server) copies
        what it receives instead of lending its receive buffers; `tls`: TLS over the transport;
        `in_place`: the writer (the client) sends straight from its chains (--in-place)."""
        polling = ["--poll", str(poll)] if poll else []
        tls_flag = ["--tls"] if tls else []
        f = self.stream_bench(transport, ["--throughput", "--size", str(size), "--bytes", str(total)] + polling +
                              tls_flag + (["--in-place"] if in_place else []),
                              polling + (["--copy"] if copy else []) + tls_flag)
        return float(f["gbps"]), float(f["client_cpu_s_per_gb"]), float(f["server_cpu_s_per_gb"])

    def streams(self):
        self.say(f"byte streams, one way, Gb/s, median of {self.args.runs} runs; evrdma = stream-bench (a libevent "
                 f"program on evrdma's bufferevents, writes of the size), rstream = rsockets, -S size -C count -I 1 "
                 f"(which sends the bytes, then gets them back: its Gb/s is the one-way rate); ratio = evrdma / "
                 f"rstream (>= 1: evrdma as fast or faster); evrdma event-driven against rstream -T b, evrdma "
                 f"--poll 100 (both sides poll 100 us after a completion) against rstream's default, which polls; "
                 f"CPU = s per GB through each side, client/server; receive = the receiving side's CPU when it "
                 f"lends its receive buffers to the program's input (the default) against when it copies "
                 f"(stream-bench --copy on the server), same run")
        self.say(f"  {'size':>6} {'evrdma':>8} {'rstream -T b':>13} {'ratio':>6} {'--poll 100':>10} {'rstream':>8} "
                 f"{'ratio':>6}   {'CPU evrdma':>12} {'CPU -T b':>12} {'receive lent/copied':>20}   {'TCP stream':>10} "
                 f"{'rstream -T s':>12}")
        rows = []
        for size in STREAM_SIZES:
            total = (2 << 20) if size <= 64 else (32 << 20)
            count = total // size
            (ours, our_ccpu, our_scpu), (blocking, _, b_ccpu, b_scpu), (ours_polled, _, _), \
                (polling, _, _, _), (tcp, _, _), (tcp_rs, _, _, _), (_, _, copied_scpu) = self.medians([
                    lambda: self.stream_throughput("rdma", size, total),
                    lambda: self.rstream(size, count, 1, ["-T", "b"]),
                    lambda: self.stream_throughput("rdma", size, total, 100),
                    lambda: self.rstream(size, count, 1, []),
                    lambda: self.stream_throughput("tcp", size, total),
                    lambda: self.rstream(size, count, 1, ["-T", "s"]),
                    lambda: self.stream_throughput("rdma", size, total, copy=True)])
            rows.append((size, ours, blocking, polling, tcp, tcp_rs, our_ccpu, our_scpu, b_ccpu, b_scpu, ours_polled,
                         copied_scpu))
            self.say(f"  {size:>6} {ours:>8.3f} {blocking:>13.3f} {ours / blocking:>6.2f} {ours_polled:>10.3f} "
                     f"{polling:>8.3f} {ours_polled / polling:>6.2f}   {our_ccpu:>5.1f}/{our_scpu:<6.1f} "
                     f"{b_ccpu:>5.1f}/{b_scpu:<6.1f} {our_scpu:>7.2f}/{copied_scpu:<5.2f} = {our_scpu / copied_scpu:.2f}   "
                     f"{tcp:>10.3f} {tcp_rs:>12.3f}")
        # The stream with and without sending in place, and evrdma's own messages, same run.
        blast_ops, (copied_64k, copied_ccpu, _), (in_place, in_place_ccpu, _) = self.medians([
            lambda: self.blast("send", 65536, 500),
            lambda: self.stream_throughput("rdma", 65536, 32 << 20),
            lambda: self.stream_throughput("rdma", 65536, 32 << 20, in_place=True)])
        blast_gbps = blast_ops * 65536 * 8 / 1e9
        ours_64k = rows[-1][1]
        self.say(f"  64 KiB: blast send (evrdma's messages, {DEPTH} in flight) {blast_gbps:.3f} Gb/s; the stream "
                 f"{ours_64k / blast_gbps:.2f} x of it; again, paired with --in-place (evrdma_use_registered_memory: "
                 f"sent straight from the writer's chains): copied {copied_64k:.3f} Gb/s ({copied_64k / blast_gbps:.2f} x "
                 f"blast, writer CPU {copied_ccpu:.1f} s per GB), in place {in_place:.3f} Gb/s "
                 f"({in_place / blast_gbps:.2f} x blast, writer CPU {in_place_ccpu:.1f} s per GB, "
                 f"{in_place_ccpu / copied_ccpu:.2f} x the copy's)")
        # TLS (libevent's OpenSSL filter on both ends' bufferevents) costs the same CPU on either
        # transport: the ratio against TLS over TCP says what the stream under it adds or saves.
        (tls_rdma, tls_ccpu, tls_scpu), (tls_tcp, tcp_ccpu, tcp_scpu) = self.medians([
            lambda: self.stream_throughput("rdma", 65536, 8 << 20, tls=True),
            lambda: self.stream_throughput("tcp", 65536, 8 << 20, tls=True)])
        self.say(f"  64 KiB, TLS over the stream (stream-bench --tls, 8 MiB): {tls_rdma:.3f} Gb/s, CPU "
                 f"{tls_ccpu:.1f}/{tls_scpu:.1f} s per GB; the plain stream {ours_64k:.3f} Gb/s "
                 f"({ours_64k / tls_rdma:.1f} x); TLS over TCP {tls_tcp:.3f} Gb/s, CPU {tcp_ccpu:.1f}/{tcp_scpu:.1f} "
                 f"(RDMA / TCP {tls_rdma / tls_tcp:.2f})")
        # rsockets' blocking calls poll the CQ for 10 us (its polling_time) before they sleep: the
        # same strategy as a 10 us polling window. Its default (non-blocking) mode spins throughout.
        (lat, p50), (lat10, _), (lat100, _), (_, rs_b, _, _), (_, rs_poll, _, _), (tcp_lat, _), \
            (_, rs_s, _, _) = self.medians([
                lambda: self.stream_latency("rdma"),
                lambda: self.stream_latency("rdma", 10),
                lambda: self.stream_latency("rdma", 100),
                lambda: self.rstream(64, 1, 2000, ["-T", "b"]),
                lambda: self.rstream(64, 1, 2000, []),
                lambda: self.stream_latency("tcp"),
                lambda: self.rstream(64, 1, 2000, ["-T", "s"])])
        self.say(f"  64 B ping-pong, half round trip, us: evrdma event-driven {lat:.1f} (median {p50:.1f}); "
                 f"evrdma --poll 10 {lat10:.1f} vs rstream -T b (polls 10 us, then sleeps) {rs_b:.1f}: ratio "
                 f"{lat10 / rs_b:.2f}; evrdma --poll 100 {lat100:.1f} vs rstream polling {rs_poll:.1f}: ratio "
                 f"{lat100 / rs_poll:.2f}; TCP: stream-bench {tcp_lat:.1f}, rstream -T s {rs_s:.1f}")
        # A TCP program on RDMA through a pair of evrdma-proxy, against the same program on TCP and
        # on the stream directly, same run.
        total = 32 << 20
        (p_gbps, p_lat), (t_gbps, t_lat), (r_gbps, r_lat) = self.medians([
            lambda: (float(self.proxied(["--throughput", "--bytes", str(total)])["gbps"]),
                     float(self.proxied(["--latency", "--count", "2000"])["half_rtt_us"])),
            lambda: (self.stream_throughput("tcp", 65536, total)[0], self.stream_latency("tcp")[0]),
            lambda: (self.stream_throughput("rdma", 65536, total)[0], self.stream_latency("rdma")[0])])
        self.say(f"  TCP through evrdma-proxy (tcp -> rdma -> tcp, stream-bench --tcp at both ends): 64 KiB "
                 f"{p_gbps:.3f} Gb/s against direct TCP {t_gbps:.3f} ({p_gbps / t_gbps:.2f} x) and the stream "
                 f"{r_gbps:.3f} ({p_gbps / r_gbps:.2f} x); 64 B half round trip {p_lat:.1f} us: {p_lat - t_lat:+.1f} "
                 f"us on direct TCP's {t_lat:.1f}, {p_lat - r_lat:+.1f} us on the stream's {r_lat:.1f}")
        self.write("streams.csv", "size,evrdma_gbps,rstream_b_gbps,rstream_gbps,tcp_stream_gbps,rstream_s_gbps,"
                   "evrdma_client_cpu_s_per_gb,evrdma_server_cpu_s_per_gb,rstream_b_client_cpu_s_per_gb,"
                   "rstream_b_server_cpu_s_per_gb,evrdma_poll100_gbps,evrdma_copy_server_cpu_s_per_gb", rows)
        return rows

    # ---- the runs ----

    def medians(self, measures, runs=None):
        """Runs each measure --runs (or `runs`) times, in turn; the median of each."""
        results = [[] for _ in measures]
        for _ in range(runs or self.args.runs):
            for i, measure in enumerate(measures):
                results[i].append(measure())
        # A measure giving several figures (a tuple) has the median of each.
        return [tuple(statistics.median(x) for x in zip(*r)) if isinstance(r[0], tuple) else statistics.median(r)
                for r in results]

    def latency(self):
        window = self.args.window
        polling = f"-P{window}" + (f" -G{self.args.stretch}" if self.args.stretch else "")
        head = (f"  {'size':>8} {'ib_send_lat -e':>15} {'pingpong':>10} {'ratio':>6}   "
                f"{'ib_send_lat':>12} {'pingpong ' + polling:>22} {'ratio':>6}   {'raw':>8} {'-P/raw':>6}")
        small_runs = max(self.args.runs, self.args.latency_runs)
        self.say(f"round-trip latency, us, on {self.dev}, median of {small_runs} runs up to 4 KiB and of "
                 f"{self.args.runs} above; ratio = evrdma / perftest "
                 f"(<= 1: evrdma as fast or faster); each run's average round trip (taken as ib_send_lat takes its "
                 f"t_avg: its 2 longest round trips left out, for every program), and below its typical one; "
                 f"raw = raw-pingpong (busy-polling on verbs, no library)")
        self.say(head)
        rows = []
        for size in LATENCY_SIZES:
            n = 5000 if size <= 4096 else max(200, int(20e6 // size))
            (pe, pet), (oe, oet), (pp, ppt), (op, opt), (rp, rpt) = self.medians([
                lambda: self.send_lat(size, n, True), lambda: self.pingpong(size, n, 0),
                lambda: self.send_lat(size, n, False), lambda: self.pingpong(size, n, window),
                lambda: self.raw_pingpong(size, n)], small_runs if size <= 4096 else None)
            rows.append((size, pe, oe, pp, op, pet, oet, ppt, opt, rp, rpt))
            self.say(f"  {size:>8} {pe:>15.1f} {oe:>10.1f} {oe / pe:>6.2f}   {pp:>12.1f} {op:>22.1f} {op / pp:>6.2f}"
                     f"   {rp:>8.1f} {op / rp:>6.2f}")
        self.say()
        self.say("typical round trip, us: ib_send_lat's t_typical (x 2), pingpong-client's and raw-pingpong's median; "
                 "an average is pulled up by the few round trips the emulator descheduled")
        self.say(head)
        for size, _, _, _, _, pet, oet, ppt, opt, _, rpt in rows:
            self.say(f"  {size:>8} {pet:>15.1f} {oet:>10.1f} {oet / pet:>6.2f}   {ppt:>12.1f} {opt:>22.1f} "
                     f"{opt / ppt:>6.2f}   {rpt:>8.1f} {opt / rpt:>6.2f}")
        self.say()
        self.latency_goals(rows)
        self.write("latency.csv", "size,ib_send_lat_e,evrdma_event,ib_send_lat,evrdma_polling,"
                   "ib_send_lat_e_typical,evrdma_event_median,ib_send_lat_typical,evrdma_polling_median,"
                   "raw_pingpong,raw_pingpong_median", rows)
        return rows

    def latency_goals(self, rows):
        """Where the latency goals stand (issue 31), by the average and by the typical round trip."""
        def worst(pairs):
            size, ratio = max(pairs, key=lambda p: p[1])
            return f"{ratio:.2f} at {size} B"
        goals = [
            ("event mode / ib_send_lat -e <= 1.00, every size",
             [(r[0], r[2] / r[1]) for r in rows], [(r[0], r[6] / r[5]) for r in rows]),
            ("pingpong -P / raw-pingpong <= 1.10, every size",
             [(r[0], r[4] / r[9]) for r in rows], [(r[0], r[8] / r[10]) for r in rows]),
            ("pingpong -P / ib_send_lat <= 1.10, up to 4 KiB",
             [(r[0], r[4] / r[3]) for r in rows if r[0] <= 4096], [(r[0], r[8] / r[7]) for r in rows if r[0] <= 4096]),
        ]
        self.say("latency goals: the worst ratio, by the average and by the typical round trip")
        for name, average, typical in goals:
            self.say(f"  {name:<52} average {worst(average):<18} typical {worst(typical)}")
        self.say()

    def bandwidth(self):
        window = self.args.window
        self.say(f"one-way throughput, MB/s (10^6 bytes), {DEPTH} in flight, median of {self.args.runs} runs; "
                 f"ratio = evrdma / perftest")
        self.say(f"  {'mode':<10} {'size':>8} {'blast':>10} {'perftest':>10} {'ratio':>6}  against")
        plans = [("send", "ib_send_bw", ["-e"], 0), ("write", "ib_write_bw", [], window),
                 ("read", "ib_read_bw", ["-e"], 0)]
        rows = []
        for size in BANDWIDTH_SIZES:
            count = max(200, min(20000, int(150e6 // size)))
            for mode, tool, extra, polling in plans:
                ours, theirs = self.medians([lambda: self.blast(mode, size, count, polling),
                                             lambda: self.bw(tool, size, count, extra)])
                rows.append((mode, size, ours * size / 1e6, theirs * size / 1e6))
                against = f"{tool} {' '.join(extra)}".strip() + (f" (blast -P {polling})" if polling else "")
                self.say(f"  {mode:<10} {size:>8} {ours * size / 1e6:>10.1f} {theirs * size / 1e6:>10.1f} "
                         f"{ours / theirs:>6.2f}  {against}")
        self.write("bandwidth.csv", "mode,size,evrdma_MBps,perftest_MBps", rows)
        return rows

    def rate(self):
        window = self.args.window
        count = self.args.rate_count
        self.say(f"message rate, operations/s, {DEPTH} in flight, {count} per run, blast -P {window} against "
                 f"busy-polling perftest, median of {self.args.runs} runs")
        self.say(f"  {'op':<6} {'size':>6} {'blast':>9} {'perftest':>9} {'ratio':>6}   "
                 f"{'blast -l' + str(POST_LIST):>10} {'--post_list':>11} {'ratio':>6}")
        rows = []
        for size in RATE_SIZES:
            for mode, tool in (("send", "ib_send_bw"), ("write", "ib_write_bw")):
                ours, theirs, ours_l, theirs_l = self.medians([
                    lambda: self.blast(mode, size, count, window), lambda: self.bw(tool, size, count, []),
                    lambda: self.blast(mode, size, count, window, POST_LIST),
                    lambda: self.bw(tool, size, count, ["--post_list", str(POST_LIST)])])
                rows.append((mode, size, ours, theirs, ours_l, theirs_l))
                self.say(f"  {mode:<6} {size:>6} {ours:>9.0f} {theirs:>9.0f} {ours / theirs:>6.2f}   "
                         f"{ours_l:>10.0f} {theirs_l:>11.0f} {ours_l / theirs_l:>6.2f}")
        self.write("rate.csv", "op,size,evrdma,perftest,evrdma_post_list,perftest_post_list", rows)
        return rows

    def idle(self):
        window, seconds = self.args.window, self.args.idle
        polling = ["-P", str(window)]
        proc, spath = self.server([f"{self.build}/demos/pingpong-server", "-a", self.ip] + polling, "listening",
                                  "idle-server")
        cpath = os.path.join(self.logs, "idle-client")
        client = subprocess.Popen([f"{self.build}/demos/pingpong-client", "-a", self.ip, "-c", "100", "-k"] + polling,
                                  stdout=open(cpath, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for _ in range(400):
            time.sleep(0.025)
            if "holding them open" in open(cpath).read():
                break
        else:
            client.kill()
            proc.kill()
            raise Failed("the idle client did not connect: " + open(cpath).read()[-400:])
        time.sleep(0.5)  # past the last window
        ticks = lambda pid: sum(int(x) for x in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11:13])
        s0, c0 = ticks(proc.pid), ticks(client.pid)
        time.sleep(seconds)
        s1, c1 = ticks(proc.pid), ticks(client.pid)
        client.send_signal(2)
        client.wait(timeout=30)
        proc.send_signal(2)
        self.finish(proc, spath)
        hz = os.sysconf("SC_CLK_TCK")
        server_pct, client_pct = 100 * (s1 - s0) / hz / seconds, 100 * (c1 - c0) / hz / seconds
        self.say(f"idle, connection open, -P {window}: server {server_pct:.2f} % of a core, client {client_pct:.2f} % "
                 f"(over {seconds} s)")
        return server_pct, client_pct

    def write(self, name, header, rows):
        if isinstance(rows[0][0], str):
            rows = sorted(rows, key=lambda row: row[0])  # each mode's rows together: one line each in plot.gp
        with open(os.path.join(self.args.out, name), "w") as f:
            f.write(header + "\n")
            for row in rows:
                f.write(",".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in row) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--out", default="bench-results", help="directory for the CSV files (default bench-results)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure, the median is kept (default 3)")
    parser.add_argument("--latency-runs", type=int, default=5,
                        help="runs per latency figure up to 4 KiB, if more than --runs (default 5): a run there "
                             "lasts about 0.1 s, so one slow spell of the emulator moves a whole run, "
                             "and these ratios are the ones the goals read closest")
    parser.add_argument("--window", type=int, default=100, help="adaptive polling window in us (default 100)")
    parser.add_argument("--stretch", type=int, default=50000,
                        help="pingpong -G: the polling window stretches up to this many us to cover a round trip "
                             "longer than --window (default 50000; 0: no stretching)")
    parser.add_argument("--idle", type=int, default=10, help="seconds of the idle measurement (default 10)")
    parser.add_argument("--rate-count", type=int, default=50000, help="operations per message-rate run (default 50000)")
    parser.add_argument("--only", choices=["latency", "bandwidth", "rate", "idle", "streams"], action="append",
                        help="run only these parts (repeatable; default all)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    bench = Bench(args)
    parts = args.only or ["latency", "bandwidth", "rate", "idle", "streams"]
    started = time.time()
    try:
        for part in parts:
            getattr(bench, part)()
            bench.say()
    except Failed as e:
        print(f"bench.py: a measurement failed: {e}", file=sys.stderr)
        return 1
    bench.say(f"({time.time() - started:.0f} s; driver {os.environ.get('EVRDMA_RDMA_DRIVER', '?')}, "
              f"test bed {os.environ.get('EVRDMA_TESTBED', '?')})")
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write("\n".join(bench.lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
