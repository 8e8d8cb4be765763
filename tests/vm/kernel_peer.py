#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""kernel_peer.py: the other end for interop tests with the kernel's SMC (AF_SMC), and a
probe that shows what a kernel SMC peer puts on the wire. Runs inside the VM of
tests/vm/run-vm.sh (needs smc.ko, and for --optin the eBPF map of
`smc_preload.sh --setup`).

Application exchange (app-server / app-client), the same over TCP and SMC: the client
sends an 8-byte big-endian length and that many random bytes; the server answers with
the SHA-256 of what it received, an 8-byte length, that many random bytes, and their
SHA-256. Each side checks the digests and prints one JSON line with them, so a test can
compare both sides' views.

  app-server --port P [--smc] [--count N] [--respond BYTES]
  app-client --port P [--smc] [--request BYTES]
      --smc: an AF_SMC socket (the kernel's SMC), else AF_INET (plain TCP, or
      smc-preload's when run under it).

  sniff-server --port P [--optin] [--reply none|decline|accept-echo] [--then-app]
      A TCP listener (opted in to the SMC option with --optin) that records the first
      CLC message a client sends and prints it decoded; --reply decline answers with an
      SMC-R v1 Decline (reason 0x03030000), --then-app then serves one app exchange.

  probe-kernel-server --port P [--optin] [--gid G] [--mac M] [--after-accept decline|wait]
                      [--send proposal|decline|smcu]
      A TCP client against a kernel AF_SMC server: with --optin its SYN carries the SMC
      option; it sends an SMC-R v1 Proposal with a made-up GID and MAC and prints what
      the kernel answers; after an Accept it sends a Decline, then runs an app exchange
      over the same TCP connection.
"""

import argparse
import ctypes
import hashlib
import json
import os
import socket
import struct
import sys
import time

AF_SMC = 43
SMCPROTO_SMC = 0
SMCPROTO_SMC6 = 1
EYE_SMCR = b"\xe2\xd4\xc3\xd9"
EYE_SMCD = b"\xe2\xd4\xc3\xc4"
CLC_TYPES = {1: "proposal", 2: "accept", 3: "confirm", 4: "decline"}
SMC_TYPES = {0: "SMC-R", 1: "SMC-D", 2: "none", 3: "SMC-R+SMC-D"}


# ------------------------------------------------------------------ eBPF opt-in

def bpf_optin(fd, bpf_dir):
    """Writes TCPOPT_WANT (2) for socket fd into the pinned sk_storage map, as the
    library does (core/negotiate/tcpopt.h), so its SYN or SYN-ACK carries the SMC option."""
    libc = LIBC
    sys_bpf = 321  # x86_64
    path = ctypes.create_string_buffer((bpf_dir + "/smc_peer").encode())
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("=QII", attr, 0, ctypes.addressof(path), 0, 0)
    map_fd = libc.syscall(sys_bpf, 7, attr, 128)  # BPF_OBJ_GET
    if map_fd < 0:
        raise OSError(ctypes.get_errno(), "bpf(BPF_OBJ_GET, %s)" % path.value.decode())
    key = ctypes.c_int(fd)
    val = ctypes.c_uint32(2)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("=IIQQQ", attr, 0, map_fd, 0, ctypes.addressof(key),
                     ctypes.addressof(val), 0)
    rc = libc.syscall(sys_bpf, 2, attr, 128)  # BPF_MAP_UPDATE_ELEM
    err = ctypes.get_errno()
    os.close(map_fd)
    if rc < 0:
        raise OSError(err, "bpf(BPF_MAP_UPDATE_ELEM) for fd %d" % fd)


# ------------------------------------------------------------------ SMC generic netlink

def genl_request(sock, family, cmd, attrs=b"", flags=0x5):  # NLM_F_REQUEST | NLM_F_ACK
    """Sends one generic netlink request, returns the payloads of the answers (after
    their genl header) until the ACK or DONE; raises OSError on an error answer."""
    body = struct.pack("=BBH", cmd, 1, 0) + attrs
    sock.send(struct.pack("=IHHII", 16 + len(body), family, flags, 1, 0) + body)
    payloads = []
    while True:
        data = sock.recv(65536)
        at = 0
        while at + 16 <= len(data):
            length, typ, _, _, _ = struct.unpack_from("=IHHII", data, at)
            if typ == 2:  # NLMSG_ERROR: an ACK when the error is 0
                err = struct.unpack_from("=i", data, at + 16)[0]
                if err:
                    raise OSError(-err, "generic netlink command %d: %s" % (cmd, os.strerror(-err)))
                return payloads
            if typ == 3:  # NLMSG_DONE
                return payloads
            payloads.append(data[at + 20:at + length])
            at += (length + 3) & ~3


def nl_attrs(buf):
    """{type: payload} of a netlink attribute stream (nested flag stripped)."""
    res = {}
    at = 0
    while at + 4 <= len(buf):
        length, typ = struct.unpack_from("=HH", buf, at)
        if length < 4:
            break
        res.setdefault(typ & 0x3FFF, []).append(buf[at + 4:at + length])
        at += (length + 3) & ~3
    return res


def nl_attr(typ, payload):
    return struct.pack("=HH", 4 + len(payload), typ) + payload + b"\0" * (-len(payload) % 4)


def smc_genl():
    """A generic netlink socket and the id of the kernel's SMC family."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)  # NETLINK_GENERIC
    sock.bind((0, 0))
    ans = genl_request(sock, 0x10, 3, nl_attr(2, b"SMC_GEN_NETLINK\0"))  # CTRL_CMD_GETFAMILY
    fam = struct.unpack("=H", nl_attrs(ans[0])[1][0][:2])[0]  # CTRL_ATTR_FAMILY_ID
    return sock, fam


def cmd_ueid_add(a):
    """SMC-Rv2 needs a user-defined EID on both sides (what smc-tools' smc_ueid add
    does)."""
    sock, fam = smc_genl()
    # The kernel wants exactly 32 characters, blank padded, and the NUL.
    eid = a.eid.upper().ljust(32)[:32].encode() + b"\0"
    genl_request(sock, fam, 10, nl_attr(1, eid))  # ADD_UEID, ENTRY
    out({"ueid_added": a.eid})
    return 0


def cmd_fallback_stats(a):
    """The kernel's SMC fallback counters: {reason: {server, client}} (reasons as hex)."""
    sock, fam = smc_genl()
    ans = genl_request(sock, fam, 8, flags=0x301)  # GET_FBACK_STATS, NLM_F_DUMP
    res = {}
    for p in ans:
        top = nl_attrs(p)
        for nested in top.get(8, []):  # SMC_GEN_FBACK_STATS
            at = nl_attrs(nested)
            if 4 not in at or 5 not in at:  # SMC_NLA_FBACK_STATS_RSN_CODE, _CNT
                continue
            code = "0x%08x" % struct.unpack("=I", at[4][0][:4])[0]
            cnt = struct.unpack("=H", at[5][0][:2])[0]
            kind = "server" if at.get(1, [b"\0"])[0][0] == 1 else "client"  # _TYPE
            res.setdefault(code, {})[kind] = cnt
    out({"kernel_fallback_reasons": res})
    return 0


# ------------------------------------------------------------------ socket helpers

def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


LIBC = ctypes.CDLL(None, use_errno=True)


def sockaddr(host, port):
    """struct sockaddr_in / sockaddr_in6 bytes, for the libc calls an AF_SMC socket needs:
    Python's socket module cannot convert addresses for a family it does not know."""
    if ":" in host:
        return struct.pack("=HHI16sI", socket.AF_INET6, socket.htons(port), 0,
                           socket.inet_pton(socket.AF_INET6, host), 0)
    return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(host))


def libc_call(name, *args):
    rc = getattr(LIBC, name)(*args)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s(): %s" % (name, os.strerror(err)))
    return rc


class Endpoint:
    """A listening or connecting stream socket: AF_INET/AF_INET6 through Python, AF_SMC
    through libc."""

    def __init__(self, smc, host="127.0.0.1"):
        self.smc = smc
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if smc:
            proto = SMCPROTO_SMC6 if family == socket.AF_INET6 else SMCPROTO_SMC
            self.sock = socket.socket(AF_SMC, socket.SOCK_STREAM, proto)
        else:
            self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen(self, port):
        if self.smc:
            sa = sockaddr(self.host, port)
            libc_call("bind", self.sock.fileno(), sa, len(sa))
            libc_call("listen", self.sock.fileno(), 16)
        else:
            self.sock.bind((self.host, port))
            self.sock.listen(16)

    def accept(self):
        if not self.smc:
            return self.sock.accept()[0]
        fd = libc_call("accept", self.sock.fileno(), None, None)
        return socket.socket(fileno=fd)

    def connect(self, port):
        if self.smc:
            sa = sockaddr(self.host, port)
            libc_call("connect", self.sock.fileno(), sa, len(sa))
        else:
            self.sock.connect((self.host, port))
        return self.sock


def out(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


# ------------------------------------------------------------------ CLC decoding

def decode_clc(msg):
    """A dict describing a kernel CLC message (RFC 7609 framing, Linux v1/v2 layout)."""
    d = {"hex": msg.hex(), "bytes": len(msg)}
    if len(msg) < 8:
        d["error"] = "short"
        return d
    eye, typ, length, vbyte = msg[:4], msg[4], struct.unpack(">H", msg[5:7])[0], msg[7]
    d["eyecatcher"] = {EYE_SMCR: "SMCR", EYE_SMCD: "SMCD"}.get(eye, eye.hex())
    d["type"] = CLC_TYPES.get(typ, typ)
    d["length"] = length
    d["version"] = vbyte >> 4
    d["typev1"] = SMC_TYPES[vbyte & 3]
    d["typev2"] = SMC_TYPES[(vbyte >> 2) & 3]
    d["trailer"] = {EYE_SMCR: "SMCR", EYE_SMCD: "SMCD"}.get(msg[-4:], msg[-4:].hex())
    if typ == 1 and len(msg) >= 40:
        d["peer_id"] = msg[8:16].hex()
        d["gid"] = socket.inet_ntop(socket.AF_INET6, msg[16:32])
        d["mac"] = msg[32:38].hex(":")
        off = struct.unpack(">H", msg[38:40])[0]
        d["iparea_offset"] = off
        v2_ext_at = None
        if off == 40:  # SMC-D area: ISM GID, CHID, v2 extension offset ...
            smcd = msg[40:80]
            d["smcd_gid"] = smcd[0:8].hex()
            d["smcd_chid"] = smcd[8:10].hex()
            v2off = struct.unpack(">H", smcd[10:12])[0]
            d["v2_ext_offset"] = v2off
            if v2off:
                v2_ext_at = 40 + 12 + v2off
        p = 40 + off
        if len(msg) >= p + 8:
            d["ipv4_subnet"] = socket.inet_ntoa(msg[p:p + 4])
            d["ipv4_prefix_len"] = msg[p + 4]
            n6 = msg[p + 7]
            d["ipv6_prefixes"] = [
                "%s/%d" % (socket.inet_ntop(socket.AF_INET6, msg[p + 8 + 17 * i:p + 24 + 17 * i]),
                           msg[p + 24 + 17 * i]) for i in range(n6)
                if len(msg) >= p + 25 + 17 * i]
        if v2_ext_at is not None and len(msg) >= v2_ext_at + 40:
            e = msg[v2_ext_at:v2_ext_at + 40]
            d["v2"] = {"eid_cnt": e[0], "ism_gid_cnt": e[1], "flag": e[3],
                       "seid": e[3] & 1, "release": e[3] >> 4,
                       "smcd_v2_ext_offset": struct.unpack(">H", e[6:8])[0],
                       "roce_gid": socket.inet_ntop(socket.AF_INET6, e[8:24]),
                       "max_conns": e[24], "max_links": e[25],
                       "feature_mask": struct.unpack(">H", e[26:28])[0]}
            eids = msg[v2_ext_at + 40:v2_ext_at + 40 + 32 * e[0]]
            d["v2"]["user_eids"] = [eids[i:i + 32].rstrip(b"\0 ").decode("ascii", "replace")
                                    for i in range(0, len(eids), 32)]
    elif typ == 4 and len(msg) >= 20:
        d["peer_id"] = msg[8:16].hex()
        d["diagnosis"] = "0x%08x" % struct.unpack(">I", msg[16:20])[0]
    elif typ in (2, 3) and len(msg) >= 68:
        d["peer_id"] = msg[8:16].hex()
        d["gid"] = socket.inet_ntop(socket.AF_INET6, msg[16:32])
        d["mac"] = msg[32:38].hex(":")
        d["qpn"] = int.from_bytes(msg[38:41], "big")
        d["rkey"] = "0x%08x" % struct.unpack(">I", msg[41:45])[0]
        d["rmbe_idx"] = msg[45]
        d["alert_token"] = "0x%08x" % struct.unpack(">I", msg[46:50])[0]
        d["rmbe_size"] = msg[50] >> 4
        d["qp_mtu"] = msg[50] & 15
        d["rmb_vaddr"] = "0x%016x" % struct.unpack(">Q", msg[52:60])[0]
        d["psn"] = int.from_bytes(msg[61:64], "big")
        d["first_contact"] = bool(vbyte & 8) if d["version"] == 1 else bool(vbyte & 2 << 2)
    return d


def recv_clc(s, timeout):
    """Reads one CLC message (by its length field), or what arrived before timeout."""
    s.settimeout(timeout)
    head = b""
    try:
        while len(head) < 8:
            chunk = s.recv(8 - len(head))
            if not chunk:
                break
            head += chunk
        if len(head) == 8 and head[:4] in (EYE_SMCR, EYE_SMCD):
            length = struct.unpack(">H", head[5:7])[0]
            if 8 <= length <= 4096:
                return head + recv_exact(s, length - 8)
    except socket.timeout:
        pass
    finally:
        s.settimeout(None)
    return head


def clc_decline(diag, version=1):
    body = b"\x11\x22\x33\x44\x55\x66\x77\x88" + struct.pack(">I", diag) + b"\0" * 4
    length = 8 + len(body) + 4
    return EYE_SMCR + bytes([4]) + struct.pack(">H", length) + bytes([version << 4]) + \
        body + EYE_SMCR


def clc_v1_proposal(gid, mac):
    """An SMC-R v1 Proposal as a Linux client lays it out without SMC-D (iparea offset
    0), for 127.0.0.0/8."""
    body = b"\x00\x01\x02\x03\x04\x05\x06\x07" + gid + mac
    body += struct.pack(">H", 0)
    body += socket.inet_aton("127.0.0.0") + bytes([8, 0, 0, 0])
    length = 8 + len(body) + 4
    return EYE_SMCR + bytes([1]) + struct.pack(">H", length) + bytes([0x10]) + body + EYE_SMCR


# ------------------------------------------------------------------ app exchange

def app_serve(conn, respond):
    n = struct.unpack(">Q", recv_exact(conn, 8))[0]
    h = hashlib.sha256()
    left = n
    while left:
        chunk = conn.recv(min(left, 65536))
        if not chunk:
            raise EOFError("request cut short")
        h.update(chunk)
        left -= len(chunk)
    reply = os.urandom(respond)
    conn.sendall(h.digest() + struct.pack(">Q", len(reply)) + reply +
                 hashlib.sha256(reply).digest())
    return {"role": "server", "request_bytes": n, "request_sha256": h.hexdigest(),
            "response_bytes": len(reply), "response_sha256": hashlib.sha256(reply).hexdigest()}


def app_request(s, nbytes):
    req = os.urandom(nbytes)
    s.sendall(struct.pack(">Q", len(req)) + req)
    echoed = recv_exact(s, 32)
    m = struct.unpack(">Q", recv_exact(s, 8))[0]
    reply = recv_exact(s, m)
    digest = recv_exact(s, 32)
    ok = echoed == hashlib.sha256(req).digest() and digest == hashlib.sha256(reply).digest()
    return ok, {"role": "client", "request_bytes": len(req),
                "request_sha256": hashlib.sha256(req).hexdigest(),
                "response_bytes": m, "response_sha256": hashlib.sha256(reply).hexdigest(),
                "digests_ok": ok}


# ------------------------------------------------------------------ commands

def cmd_app_server(a):
    ep = Endpoint(a.smc, a.host)
    ep.listen(a.port)
    out({"listening": a.port, "smc": a.smc})
    for _ in range(a.count):
        with ep.accept() as conn:
            out(app_serve(conn, a.respond))
    return 0


def cmd_app_client(a):
    s = Endpoint(a.smc, a.host).connect(a.port)
    ok, r = app_request(s, a.request)
    s.close()
    out(r)
    return 0 if ok else 1


def cmd_sniff_server(a):
    ep = Endpoint(False, a.host)
    if a.optin:
        bpf_optin(ep.sock.fileno(), a.bpf_dir)
    ep.listen(a.port)
    out({"listening": a.port, "optin": a.optin})
    conn = ep.accept()
    msg = recv_clc(conn, a.timeout)
    d = decode_clc(msg)
    d["role"] = "received by sniff-server"
    out(d)
    if a.reply == "decline" and msg:
        conn.sendall(clc_decline(0x03030000))
    if a.then_app:
        r = app_serve(conn, a.respond)
        out(r)
    else:
        time.sleep(0.5)
    conn.close()
    return 0 if msg else 1


def cmd_probe_kernel_server(a):
    ep = Endpoint(False, a.host)
    if a.optin:
        bpf_optin(ep.sock.fileno(), a.bpf_dir)
    s = ep.connect(a.port)
    gid = socket.inet_pton(socket.AF_INET6, a.gid)
    mac = bytes.fromhex(a.mac.replace(":", ""))
    prop = clc_v1_proposal(gid, mac)
    if a.send == "decline":
        prop = clc_decline(0x03030000)
    elif a.send == "smcu":  # the eyecatcher of smc-preload's same-host messages
        prop = b"\xe2\xd4\xc3\xe4" + prop[4:-4] + b"\xe2\xd4\xc3\xe4"
    out({"sent": decode_clc(prop)})
    s.sendall(prop)
    answer = recv_clc(s, a.timeout)
    d = decode_clc(answer)
    d["role"] = "kernel server's answer"
    out(d)
    if d.get("type") == "accept":
        if a.after_accept == "decline":
            s.sendall(clc_decline(0x03030000))
            out({"sent": "decline 0x03030000 after the accept"})
        else:
            out({"sent": "nothing after the accept; waiting"})
            more = recv_clc(s, a.timeout)
            out({"after_silence": decode_clc(more)})
    ok, r = app_request(s, a.request)
    out(r)
    s.close()
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("ueid-add")
    u.add_argument("eid")
    sub.add_parser("fallback-stats")
    for name in ("app-server", "app-client", "sniff-server", "probe-kernel-server"):
        c = sub.add_parser(name)
        c.add_argument("--port", type=int, required=True)
        c.add_argument("--host", default="127.0.0.1", help="127.0.0.1 or ::1")
        c.add_argument("--smc", action="store_true")
        c.add_argument("--count", type=int, default=1)
        c.add_argument("--request", type=int, default=100000)
        c.add_argument("--respond", type=int, default=200000)
        c.add_argument("--optin", action="store_true")
        c.add_argument("--bpf-dir", default=os.environ.get("SMC_BPF_DIR",
                                                           "/sys/fs/bpf/smc_preload"))
        c.add_argument("--timeout", type=float, default=5.0)
        c.add_argument("--reply", choices=("none", "decline"), default="none")
        c.add_argument("--then-app", action="store_true")
        c.add_argument("--gid", default="fe80::1234:56ff:fe78:9abc")
        c.add_argument("--mac", default="02:12:34:56:78:9a")
        c.add_argument("--after-accept", choices=("decline", "wait"), default="decline")
        c.add_argument("--send", choices=("proposal", "decline", "smcu"), default="proposal",
                       help="probe-kernel-server: the first message")
    a = p.parse_args()
    fn = {"ueid-add": cmd_ueid_add, "fallback-stats": cmd_fallback_stats,
          "app-server": cmd_app_server, "app-client": cmd_app_client,
          "sniff-server": cmd_sniff_server, "probe-kernel-server": cmd_probe_kernel_server}[a.cmd]
    try:
        return fn(a)
    except (OSError, EOFError) as e:
        out({"cmd": a.cmd, "error": str(e)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
