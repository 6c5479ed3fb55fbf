#!/usr/bin/env python3
"""A FUSE filesystem that loses what was not fsynced when the power is cut (tests/crash/powerloss.rs).

    powercut.py MOUNTPOINT DISK_DIR --seed N

DISK_DIR is the "disk": what survived the last cut. At start its tree is loaded into memory and
served at MOUNTPOINT; from then on DISK_DIR is not touched until the cut. Every write, truncate,
create, unlink and rename is visible at once to every process (as the kernel's page cache makes
it) but is only *durable* once fsynced:

  - a file's data and size: by fsync/fdatasync of that file;
  - a directory entry (a create, unlink or rename in a directory): by fsync of that directory.

Commands on stdin, one per line:

  cut    the power goes out: of each file's writes since its last fsync a random subset
         survives, each write possibly torn at a 512-byte sector boundary, in a random
         order (a disk reorders what it was not told to order); of each directory's
         unsynced entries a random prefix survives (a journal keeps metadata in order).
         The survivors are written to DISK_DIR, every later operation fails with EIO, and
         the line `cut WRITES_KEPT/WRITES_PENDING ENTRIES_KEPT/ENTRIES_PENDING` is printed.
         The caller then unmounts (fusermount3 -u) and, to "boot", starts a new instance.
  sync   makes everything durable and writes it to DISK_DIR (sync(1), then a clean
         shutdown; later operations fail with EIO); prints `synced`.
  stats  prints `stats FSYNCS WRITES` (how many fsyncs and writes were served so far).

The caller kills every process using the mount before `cut` (a power cut stops them all).
Single-threaded: one lock serves FUSE requests and the command thread.
"""
import argparse
import errno
import os
import random
import shutil
import stat
import sys
import threading
import time

import mfusepy as fuse

SECTOR = 512


class Node:
    """A file or directory. `data` is what processes see; `durable` what a cut keeps for sure;
    `pending` the data operations since the last fsync: ("w", offset, bytes) or ("t", size)."""

    def __init__(self, kind, mode, data=b""):
        self.kind = kind
        self.mode = mode
        self.data = bytearray(data)
        self.durable = bytes(data)
        self.pending = []
        self.mtime = time.time()


class PowerCut(fuse.Operations):
    use_ns = True

    def __init__(self, disk, seed):
        self.disk = disk
        self.rng = random.Random(seed)
        self.mu = threading.Lock()
        self.dead = False
        self.fsyncs = 0
        self.writes = 0
        # The namespace as processes see it, and as the disk has it (path -> Node).
        self.ns = {"/": Node("d", 0o755)}
        self.durable_ns = {"/": self.ns["/"]}
        # Directory entry changes not yet fsynced, per directory, in order:
        # ("link", name, node), ("unlink", name) or ("rename", old, new, node).
        self.ns_pending = {}
        self.load(disk, "/")

    def load(self, real, path):
        for name in sorted(os.listdir(real)):
            full = os.path.join(real, name)
            p = os.path.join(path, name)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                self.ns[p] = self.durable_ns[p] = Node("d", st.st_mode & 0o7777)
                self.load(full, p)
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    self.ns[p] = self.durable_ns[p] = Node("f", st.st_mode & 0o7777, f.read())

    # ------------------------------------------------------------------ helpers
    def node(self, path):
        if self.dead:
            raise fuse.FuseOSError(errno.EIO)
        n = self.ns.get(path)
        if n is None:
            raise fuse.FuseOSError(errno.ENOENT)
        return n

    def entry(self, path, op):
        self.ns_pending.setdefault(os.path.dirname(path), []).append(op)

    def link(self, path, node):
        self.ns[path] = node
        self.entry(path, ("link", os.path.basename(path), node))

    def unlink_entry(self, path):
        del self.ns[path]
        self.entry(path, ("unlink", os.path.basename(path)))

    # ------------------------------------------------------------------ metadata
    def getattr(self, path, fh=None):
        with self.mu:
            n = self.node(path)
            kind = stat.S_IFDIR if n.kind == "d" else stat.S_IFREG
            now = int(n.mtime * 1e9)
            return {
                "st_mode": kind | n.mode,
                "st_nlink": 2 if n.kind == "d" else 1,
                "st_size": len(n.data),
                "st_uid": os.getuid(),
                "st_gid": os.getgid(),
                "st_atime": now,
                "st_mtime": now,
                "st_ctime": now,
                "st_blocks": (len(n.data) + 511) // 512,
            }

    def readdir(self, path, fh):
        with self.mu:
            self.node(path)
            prefix = path.rstrip("/") + "/"
            names = [
                p[len(prefix):]
                for p in self.ns
                if p != path and p.startswith(prefix) and "/" not in p[len(prefix):]
            ]
            return [".", ".."] + names

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 20, "f_bfree": 1 << 19,
                "f_bavail": 1 << 19, "f_files": 1 << 16, "f_ffree": 1 << 15, "f_namemax": 255}

    def access(self, path, amode):
        with self.mu:
            self.node(path)
            return 0

    def chmod(self, path, mode):
        with self.mu:
            self.node(path).mode = mode & 0o7777
            return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        with self.mu:
            self.node(path).mtime = time.time()
            return 0

    def mkdir(self, path, mode):
        with self.mu:
            if self.dead:
                raise fuse.FuseOSError(errno.EIO)
            if path in self.ns:
                raise fuse.FuseOSError(errno.EEXIST)
            self.link(path, Node("d", mode & 0o7777))
            return 0

    def rmdir(self, path):
        with self.mu:
            self.node(path)
            if any(p.startswith(path.rstrip("/") + "/") for p in self.ns):
                raise fuse.FuseOSError(errno.ENOTEMPTY)
            self.unlink_entry(path)
            return 0

    def create(self, path, mode, fi=None):
        with self.mu:
            if self.dead:
                raise fuse.FuseOSError(errno.EIO)
            if path not in self.ns:
                self.link(path, Node("f", mode & 0o7777))
            return 0

    def open(self, path, flags):
        with self.mu:
            n = self.node(path)
            if flags & os.O_TRUNC and n.kind == "f":
                del n.data[:]
                n.pending.append(("t", 0))
            return 0

    def unlink(self, path):
        with self.mu:
            self.node(path)
            self.unlink_entry(path)
            return 0

    def rename(self, old, new):
        with self.mu:
            n = self.node(old)
            if n.kind == "d":
                raise fuse.FuseOSError(errno.EXDEV)  # nothing here renames directories
            if os.path.dirname(old) != os.path.dirname(new):
                raise fuse.FuseOSError(errno.EXDEV)  # nothing here moves across directories
            # One entry, as a journaling filesystem makes it: a cut keeps the old name or the
            # new one, never neither.
            del self.ns[old]
            self.ns[new] = n
            self.entry(new, ("rename", os.path.basename(old), os.path.basename(new), n))
            return 0

    # ------------------------------------------------------------------ data
    def read(self, path, size, offset, fh):
        with self.mu:
            n = self.node(path)
            return bytes(n.data[offset:offset + size])

    def write(self, path, data, offset, fh):
        with self.mu:
            n = self.node(path)
            end = offset + len(data)
            if end > len(n.data):
                n.data.extend(b"\0" * (end - len(n.data)))
            n.data[offset:end] = data
            n.pending.append(("w", offset, bytes(data)))
            n.mtime = time.time()
            self.writes += 1
            return len(data)

    def truncate(self, path, length, fh=None):
        with self.mu:
            n = self.node(path)
            if length < len(n.data):
                del n.data[length:]
            else:
                n.data.extend(b"\0" * (length - len(n.data)))
            n.pending.append(("t", length))
            return 0

    def fallocate(self, path, mode, offset, size, fh):
        raise fuse.FuseOSError(errno.EOPNOTSUPP)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        with self.mu:
            n = self.node(path)
            n.durable = bytes(n.data)
            n.pending = []
            self.fsyncs += 1
            return 0

    def fsyncdir(self, path, datasync, fh):
        with self.mu:
            self.node(path)
            for op in self.ns_pending.pop(path, []):
                self.apply_entry(path, op)
            self.fsyncs += 1
            return 0

    def opendir(self, path):
        with self.mu:
            self.node(path)
            return 0

    def releasedir(self, path, fh):
        return 0

    def sync(self):
        """Everything durable, as sync(1) then a clean shutdown would make it."""
        with self.mu:
            for parent in list(self.ns_pending):
                for op in self.ns_pending.pop(parent):
                    self.apply_entry(parent, op)
            for n in self.ns.values():
                n.durable = bytes(n.data)
                n.pending = []
            self.dead = True
            self.write_disk({p: n.durable for p, n in self.durable_ns.items() if n.kind == "f"})
            return "synced"

    # ------------------------------------------------------------------ the cut
    def apply_entry(self, parent, op):
        p = os.path.join(parent, op[1])
        if op[0] == "link":
            self.durable_ns[p] = op[2]
        elif op[0] == "rename":
            self.durable_ns.pop(p, None)
            self.durable_ns[os.path.join(parent, op[2])] = op[3]
        else:
            self.durable_ns.pop(p, None)

    def survive(self, n):
        """What a cut leaves of a file: its durable bytes plus a random subset of its pending
        operations, in a random order, each write possibly torn at a sector boundary."""
        data = bytearray(n.durable)
        ops = [op for op in n.pending if self.rng.random() < 0.5]
        self.rng.shuffle(ops)
        for op in ops:
            if op[0] == "t":
                size = op[1]
                if size < len(data):
                    del data[size:]
                else:
                    data.extend(b"\0" * (size - len(data)))
                continue
            _, offset, chunk = op
            # Sector boundaries (absolute multiples of 512) inside the write: a torn write
            # reached the platter up to one of them.
            first = (offset // SECTOR + 1) * SECTOR
            inside = range(first, offset + len(chunk), SECTOR)
            if len(inside) > 0 and self.rng.random() < 0.3:
                chunk = chunk[:self.rng.choice(inside) - offset]
            end = offset + len(chunk)
            if end > len(data):
                data.extend(b"\0" * (end - len(data)))
            data[offset:end] = chunk
        return bytes(data), len(ops)

    def write_disk(self, images):
        """Write the disk anew: exactly the durable namespace, files with `images`."""
        for name in os.listdir(self.disk):
            full = os.path.join(self.disk, name)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
        for p in sorted(self.durable_ns):
            if p == "/":
                continue
            n = self.durable_ns[p]
            full = os.path.join(self.disk, p.lstrip("/"))
            if n.kind == "d":
                os.makedirs(full, exist_ok=True)
            else:
                with open(full, "wb") as f:
                    f.write(images[p])
                os.chmod(full, n.mode)

    def cut(self):
        with self.mu:
            self.dead = True
            entries = kept_entries = 0
            for parent, ops in self.ns_pending.items():
                entries += len(ops)
                keep = self.rng.randint(0, len(ops))
                kept_entries += keep
                for op in ops[:keep]:
                    self.apply_entry(parent, op)
            pending = kept = 0
            images = {}
            for p, n in self.durable_ns.items():
                if n.kind == "f":
                    pending += len(n.pending)
                    images[p], k = self.survive(n)
                    kept += k
            self.write_disk(images)
            return f"cut {kept}/{pending} {kept_entries}/{entries}"


def commands(fs, mountpoint):
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "cut":
            print(fs.cut(), flush=True)
        elif cmd == "sync":
            print(fs.sync(), flush=True)
        elif cmd == "stats":
            with fs.mu:
                print(f"stats {fs.fsyncs} {fs.writes}", flush=True)
        elif cmd:
            print(f"error unknown command {cmd!r}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("disk")
    ap.add_argument("--seed", type=int, required=True)
    a = ap.parse_args()
    fs = PowerCut(a.disk, a.seed)
    threading.Thread(target=commands, args=(fs, a.mountpoint), daemon=True).start()
    # attr/entry timeouts 0: every process sees sizes and names as this process has them.
    # hard_remove: an unlinked open file goes at once (no .fuse_hidden file in the disk).
    fuse.FUSE(fs, a.mountpoint, foreground=True, nothreads=True, attr_timeout=0,
              entry_timeout=0, negative_timeout=0, hard_remove=True)


if __name__ == "__main__":
    main()
