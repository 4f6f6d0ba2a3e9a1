#!/usr/bin/python3
"""evrdma-proxy puts a TCP client and a TCP server on RDMA unchanged (run under tools/rdma-run):
client --tcp--> proxy --rdma--> proxy --tcp--> server, every byte intact and in order.

- Random bytes in writes of random sizes, echoed by the server as they come, come back with an
  equal SHA-256; the client's half-close reaches the server, and the server's close comes back
  as the client's EOF (half-close carried through both proxies, both ways).
- A server that reads slowly gets every byte (its SHA-256 equal) while the proxies' largest backlog
  (SIGUSR1's figures) stays within their window and two reads (the last read before a stream's EOF
  may pass the read watermark: libevent's filter finishes without it): back-pressure end to end,
  where without it the backlog grows to most of what was sent.
- 32 connections at once (16 under EVRDMA_STRESS=light), each intact; clients that close the instant they have sent leave the
  proxies serving; a target nobody listens on closes the client's connection and is counted.
- An RDMA program (stream-bench --rdma --verify) reaches a TCP server through one proxy.
- --help, bad arguments, SIGINT: exit 0 with the figures, no connection left.
  proxy_test.py <build dir>
"""
import hashlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

build = sys.argv[1]
address = os.environ.get("EVRDMA_RDMA_IP")
if not address:
    sys.exit("run this under tools/rdma-run")
light = os.environ.get("EVRDMA_STRESS") == "light"
proxy_program = f"{build}/demos/evrdma-proxy"
window = 256 << 10
largest_read = 256 << 10  # the proxy's read high watermark: a backlog may pass the window by a read or two
logs = tempfile.mkdtemp()
failures = 0
children = []


def check(what, ok):
    global failures
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    failures += 0 if ok else 1


def wait_for(condition, what, limit=120.0):
    """Waits for condition() to hold; the limit only bounds a hang."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {limit} s")


def start(name, argv):
    out = open(os.path.join(logs, name), "w+")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    children.append(proc)
    return proc, out.name


def text_of(path):
    with open(path) as f:
        return f.read()


def start_proxy(name, source, target, target_port):
    proc, path = start(name, [proxy_program, "--from", source, address, "0", "--to", target, address,
                              str(target_port), "--window", str(window)])
    port = wait_for(lambda: re.search(r"listening on \S+ \w+ port (\d+)", text_of(path)), f"{name} listening")
    return proc, path, int(port.group(1))


def figures(proc, path):
    """The proxy's figures, asked for with SIGUSR1."""
    seen = text_of(path).count("figures:")
    proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: text_of(path).count("figures:") > seen, "figures after SIGUSR1")
    line = [l for l in text_of(path).splitlines() if "figures:" in l][-1]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


# ---- the TCP server behind the proxies: the first byte picks echo ('E') or slow sink ('S') ----

def serve_one(conn):
    with conn:
        first = conn.recv(1)
        if first == b"E":
            conn.sendall(first)
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                conn.sendall(data)
        elif first == b"S":
            digest = hashlib.sha256(first)
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                digest.update(data)
                time.sleep(0.002)  # slower than the chain: the proxies' windows fill
            conn.sendall(digest.hexdigest().encode())
        conn.shutdown(socket.SHUT_WR)


backend = socket.socket()
backend.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
backend.bind((address, 0))
backend.listen(256)


def accept_forever():
    while True:
        try:
            conn, _ = backend.accept()
        except OSError:
            return
        threading.Thread(target=serve_one, args=(conn,), daemon=True).start()


threading.Thread(target=accept_forever, daemon=True).start()


def random_writes(rng, first, total):
    """`total` random bytes starting with `first`, as writes of random sizes."""
    yield first
    left = total - 1
    while left > 0:
        n = min(left, rng.randint(1, 200000))
        yield rng.randbytes(n)
        left -= n


def echo_through(port, total, seed):
    """Sends `total` random bytes through `port` while reading the echo, half-closes, reads until
    EOF: (sent sha256, echoed sha256, echoed length)."""
    rng = random.Random(seed)
    sent, echoed = hashlib.sha256(), hashlib.sha256()
    got = [0]
    with socket.create_connection((address, port)) as s:
        def read_all():
            while True:
                data = s.recv(1 << 16)
                if not data:
                    return
                echoed.update(data)
                got[0] += len(data)
        reader = threading.Thread(target=read_all)
        reader.start()
        for chunk in random_writes(rng, b"E", total):
            sent.update(chunk)
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        reader.join(300)
    return sent.hexdigest(), echoed.hexdigest(), got[0]


try:
    proc_a, path_a, port_a = None, None, None
    proc_b, path_b, port_b = start_proxy("proxy-b", "rdma", "tcp", backend.getsockname()[1])
    proc_a, path_a, port_a = start_proxy("proxy-a", "tcp", "rdma", port_b)
    check(f"two proxies listen: tcp port {port_a} -> rdma port {port_b} -> tcp port {backend.getsockname()[1]}", True)

    total = (4 << 20) if light else (16 << 20)
    sent, echoed, length = echo_through(port_a, total, 1)
    check(f"{total} random bytes echoed through tcp -> rdma -> tcp, SHA-256 equal, and the server's close "
          f"came back as EOF ({length} bytes)", sent == echoed and length == total)

    total = (6 << 20) if light else (24 << 20)
    rng = random.Random(2)
    digest = hashlib.sha256()
    with socket.create_connection((address, port_a)) as s:
        for chunk in random_writes(rng, b"S", total):
            digest.update(chunk)
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while True:
            data = s.recv(256)
            if not data:
                break
            answer += data
    check(f"a slow server read all {total} bytes, SHA-256 equal (its answer after the half-close)",
          answer.decode() == digest.hexdigest())
    for name, proc, path in (("tcp -> rdma", proc_a, path_a), ("rdma -> tcp", proc_b, path_b)):
        f = figures(proc, path)
        check(f"{name}: the largest backlog ({f['largest_backlog']} bytes) stays within the window "
              f"({window}) and two reads ({largest_read} each) while {total} bytes went to a slow server",
              f["largest_backlog"] <= window + 2 * largest_read and f["forwarded_bytes"] >= total)

    connections = 16 if light else 32  # siw pins each stream's buffers: 64 ran out of memory in the guest
    results = [None] * connections
    def one(i):
        results[i] = echo_through(port_a, 256 << 10, 100 + i)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    intact = sum(1 for r in results if r is not None and r[0] == r[1] and r[2] == 256 << 10)
    check(f"{connections} connections at once, 256 KiB echoed each: {intact} of {connections} intact", intact == connections)

    for i in range(20):  # send and close at once, without reading
        with socket.create_connection((address, port_a)) as s:
            s.sendall(b"E" + os.urandom(100000))
    sent, echoed, length = echo_through(port_a, 1 << 20, 3)
    check(f"after 20 clients that closed the instant they had sent, a connection is served intact "
          f"({length} bytes back, SHA-256 {'equal' if sent == echoed else 'different'})",
          sent == echoed and length == 1 << 20)
    wait_for(lambda: figures(proc_a, path_a)["active"] == 0 and figures(proc_b, path_b)["active"] == 0,
             "no connection left", 120)
    check("no connection is left in either proxy once their clients are done", True)

    nobody = socket.socket()
    nobody.bind((address, 0))  # a port nobody listens on
    proc_c, path_c, port_c = start_proxy("proxy-c", "tcp", "rdma", nobody.getsockname()[1])
    with socket.create_connection((address, port_c)) as s:
        s.sendall(b"hello")
        s.settimeout(120)
        closed = s.recv(16) == b""
    f = figures(proc_c, path_c)
    check(f"a target nobody listens on: the client's connection is closed, counted ({f['target_failed']})",
          closed and f["target_failed"] == 1 and f["active"] == 0)
    proc_c.send_signal(signal.SIGINT)
    proc_c.wait(120)
    nobody.close()

    bench = f"{build}/demos/stream-bench"
    server, server_path = start("bench-server", [bench, "--server", "--tcp", address, "0"])
    tcp_port = int(wait_for(lambda: re.search(r"tcp port (\d+)", text_of(server_path)), "stream-bench").group(1))
    proc_d, path_d, port_d = start_proxy("proxy-d", "rdma", "tcp", tcp_port)
    verify = subprocess.run([bench, "--rdma", address, str(port_d), "--verify", "--bytes", str(2 << 20)],
                            capture_output=True, text=True, timeout=300)
    check(f"an RDMA program reaches a TCP server through one proxy: {verify.stdout.strip()[:120]}",
          verify.returncode == 0 and " equal" in verify.stdout)
    server.send_signal(signal.SIGINT)
    server.wait(120)
    proc_d.send_signal(signal.SIGINT)
    proc_d.wait(120)

    for name, proc, path in (("tcp -> rdma", proc_a, path_a), ("rdma -> tcp", proc_b, path_b)):
        proc.send_signal(signal.SIGINT)
        status = proc.wait(120)
        check(f"{name} proxy ends on SIGINT with exit 0 and its figures: "
              f"{[l for l in text_of(path).splitlines() if 'at exit' in l][-1:]}",
              status == 0 and re.search(r"at exit: accepted=\d+ active=0 ", text_of(path)) is not None)

    usage = subprocess.run([proxy_program, "--help"], capture_output=True, text=True)
    check("--help prints the usage, exit 0", usage.returncode == 0 and "usage" in usage.stdout)
    bad = subprocess.run([proxy_program, "--from", "udp", address, "0", "--to", "tcp", address, "1"],
                         capture_output=True, text=True)
    check("an unknown transport: the usage, exit 2", bad.returncode == 2 and "usage" in bad.stderr)
    bad = subprocess.run([proxy_program, "--from", "tcp", "no.such.host", "0", "--to", "tcp", address, "1"],
                         capture_output=True, text=True)
    check(f"a bad address is named, exit 1: {bad.stderr.strip()}", bad.returncode == 1 and "no.such.host" in bad.stderr)
    with socket.socket() as taken:
        taken.bind((address, 0))
        taken.listen(1)
        busy = subprocess.run([proxy_program, "--from", "tcp", address, str(taken.getsockname()[1]), "--to", "rdma",
                               address, "1"], capture_output=True, text=True, timeout=60)
    check(f"a port in use is named, exit 1: {busy.stderr.strip()}", busy.returncode == 1 and "in use" in busy.stderr)
except Exception as error:  # a hang bounded, a process gone: say so and fail
    check(f"the test ran to its end ({error!r})", False)
finally:
    for proc in children:
        if proc.poll() is None:
            proc.kill()
    for name in sorted(os.listdir(logs)) if failures else []:
        print(f"--- {name}:\n{text_of(os.path.join(logs, name))[-2000:]}")

print(f"{failures} failed")
sys.exit(1 if failures else 0)
