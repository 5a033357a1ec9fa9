//! Which mounts answer `statx` from memory. The stat fast path (`nowait.zig`) runs `statx` on
//! the calling executor and keeps the result only where the file system's `getattr` never
//! fetches attributes from elsewhere; a mount of any other type gets the slow path's call, so
//! the caller sees exactly what a plain `statx` returns.
//!
//! The fast call passes `AT_STATX_DONT_SYNC`, which the network and FUSE file systems honour by
//! answering from their cache instead of asking their server: that probe cannot wait, and its
//! result (possibly stale there) is thrown away. A few file systems ignore the flag and always
//! ask their server or cluster (`waits_always` below: 9p, gfs2, ocfs2, ...). While one is
//! mounted, the probe could wait on it, so the fast path stays off for the whole process: a
//! cost paid only on machines that have such a mount. A mount made after the first look is
//! seen at the first stat on it (one probe waits once, as a std.Io.Threaded stat would).
//!
//! The mount of a file comes with the probe (`STATX_MNT_ID`, Linux 5.8); its type is read once
//! per mount from `/proc/self/mountinfo`, whose first field is that id. Reading it is memory
//! work in the kernel (it waits at most for a mount being made elsewhere), done once per mount
//! this process stats, at most `table_len` of them: beyond that, further mounts take the slow
//! path without a look, so a process on thousands of mounts never rereads the file per call.
//! A mount id can be reused after an unmount; a reused id keeps its first type here (a
//! remembered local type then lets a probe's `DONT_SYNC` answer through: a possibly stale stat,
//! never a wait).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const os = @import("../os/linux.zig");

pub const Kind = enum(u2) {
    /// `getattr` answers from memory: a probe's result is the call's result.
    local,
    /// Anything else: honours `DONT_SYNC` or is not known to. The slow path asks again.
    other,
    /// Ignores `DONT_SYNC` and may ask a server: no probe while one is mounted.
    waits_always,
};

/// Mounts remembered, as `(id + 1) << 2 | kind`; 0 is an empty slot. Slots are claimed with a
/// compare-and-swap and never change after, so readers need no lock.
const table_len = 64;
var table: [table_len]std.atomic.Value(u64) = @splat(.init(0));

const Probe = enum(u8) { unknown, allowed, refused };
/// Whether a `waits_always` mount exists (`refused`, final). Monotonic: a stale `unknown`
/// costs one more read of mountinfo, a stale `allowed` one probe.
var probe_state: std.atomic.Value(Probe) = .init(.unknown);

/// Tests only: when set (a `Kind` plus one), every mount is of that kind, as on a machine with
/// such mounts.
pub var kind_for_testing: std.atomic.Value(u8) = .init(0);

/// Whether the stat probe may run: no mount of a type that ignores `DONT_SYNC` has been seen.
/// The first call reads mountinfo.
pub fn probeAllowed() bool {
    if (forcedKind()) |kind| return kind != .waits_always;
    return switch (probe_state.load(.monotonic)) {
        .allowed => true,
        .refused => false,
        .unknown => {
            _ = scan(null);
            return probe_state.load(.monotonic) == .allowed;
        },
    };
}

/// The kind of the mount with this id (`statx`'s `mnt_id`): remembered, or read from
/// mountinfo once. A mount that cannot be looked up counts as `.other`.
pub fn kindOf(mount_id: u64) Kind {
    if (forcedKind()) |kind| return kind;
    if (lookup(mount_id)) |kind| return kind;
    if (table[table_len - 1].load(.monotonic) != 0) return .other; // full: no more looks
    const kind = scan(mount_id) orelse .other;
    remember(mount_id, kind);
    return kind;
}

fn lookup(mount_id: u64) ?Kind {
    for (&table) |*slot| {
        const entry = slot.load(.monotonic);
        if (entry == 0) return null;
        if (entry >> 2 == mount_id + 1) return @enumFromInt(@as(u2, @truncate(entry)));
    }
    return null;
}

fn remember(mount_id: u64, kind: Kind) void {
    const entry = (mount_id + 1) << 2 | @intFromEnum(kind);
    for (&table) |*slot| {
        // Claims the first empty slot; another thread may fill it first (with this mount
        // too, which only repeats it).
        const seen = slot.cmpxchgStrong(0, entry, .monotonic, .monotonic) orelse return;
        if (seen == entry) return;
    }
}

/// Reads /proc/self/mountinfo: latches `probe_state` from every mount's type, and returns the
/// kind of `wanted` (null when it is not listed, or the file cannot be read).
fn scan(wanted: ?u64) ?Kind {
    const fd_rc = linux.open("/proc/self/mountinfo", .{ .CLOEXEC = true }, 0);
    if (os.errno(fd_rc) != .SUCCESS) {
        // No /proc: no way to know the types, so no probe.
        probe_state.store(.refused, .monotonic);
        return null;
    }
    const fd: i32 = @intCast(fd_rc);
    defer os.closeFd(fd);
    var lines: Lines = .{};
    var found: ?Kind = null;
    var chunk: [4096]u8 = undefined;
    while (true) {
        const rc = linux.read(fd, &chunk, chunk.len);
        switch (os.errno(rc)) {
            .SUCCESS => {},
            .INTR => continue,
            else => {
                probe_state.store(.refused, .monotonic);
                return null;
            },
        }
        if (rc == 0) break;
        var rest: []const u8 = chunk[0..rc];
        while (lines.next(&rest)) |line| {
            const mount = parseLine(line) orelse continue;
            if (mount.kind == .waits_always) probe_state.store(.refused, .monotonic);
            if (wanted != null and mount.id == wanted.?) found = mount.kind;
        }
    }
    if (probe_state.load(.monotonic) == .unknown) {
        _ = probe_state.cmpxchgStrong(.unknown, .allowed, .monotonic, .monotonic);
    }
    return found;
}

/// Splits a stream into lines, keeping the first `prefix_len` bytes of each: a line's id and
/// type come before its mount source and options, which can run to kilobytes (an overlay's
/// lower directories).
const Lines = struct {
    const prefix_len = 512;
    prefix: [prefix_len]u8 = undefined,
    len: usize = 0,

    /// The next whole line (its prefix) from `rest`, which it consumes; null when `rest` ends
    /// inside a line (kept for the next chunk).
    fn next(lines: *Lines, rest: *[]const u8) ?[]const u8 {
        while (rest.len > 0) {
            const byte = rest.*[0];
            rest.* = rest.*[1..];
            if (byte == '\n') {
                const line = lines.prefix[0..lines.len];
                lines.len = 0;
                return line;
            }
            if (lines.len < prefix_len) {
                lines.prefix[lines.len] = byte;
                lines.len += 1;
            }
        }
        return null;
    }
};

const Mount = struct { id: u64, kind: Kind };

/// One mountinfo line: `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`. The
/// type follows the lone `-`; paths cannot hold it, since mountinfo escapes their spaces.
fn parseLine(line: []const u8) ?Mount {
    const id_end = std.mem.indexOfScalar(u8, line, ' ') orelse return null;
    const id = std.fmt.parseInt(u64, line[0..id_end], 10) catch return null;
    const separator = std.mem.indexOf(u8, line, " - ") orelse return .{ .id = id, .kind = .other };
    const after = line[separator + 3 ..];
    const type_end = std.mem.indexOfScalar(u8, after, ' ') orelse after.len;
    return .{ .id = id, .kind = kindOfType(after[0..type_end]) };
}

/// File systems whose `getattr` reads only the inode in memory.
const local_types = [_][]const u8{
    "ext2",     "ext3",     "ext4",     "xfs",       "btrfs",      "tmpfs",    "ramfs",
    "f2fs",     "vfat",     "msdos",    "exfat",     "ntfs3",      "jfs",      "hfsplus",
    "squashfs", "erofs",    "iso9660",  "udf",       "zfs",        "bcachefs", "overlay",
    "proc",     "sysfs",    "devtmpfs", "devpts",    "cgroup",     "cgroup2",  "debugfs",
    "tracefs",  "configfs", "mqueue",   "hugetlbfs", "securityfs", "bpf",      "pstore",
};

/// File systems whose `getattr` asks a server or a cluster lock even with `DONT_SYNC`.
const waits_always_types = [_][]const u8{
    "9p", "gfs2", "ocfs2", "afs", "coda", "orangefs", "lustre", "gpfs",
};

fn kindOfType(name: []const u8) Kind {
    for (local_types) |local| {
        if (std.mem.eql(u8, name, local)) return .local;
    }
    for (waits_always_types) |waits| {
        if (std.mem.eql(u8, name, waits)) return .waits_always;
    }
    return .other;
}

fn forcedKind() ?Kind {
    if (!builtin.is_test) return null;
    const forced = kind_for_testing.load(.monotonic);
    if (forced == 0) return null;
    return @enumFromInt(forced - 1);
}

/// Tests only: forgets every mount and the probe's state.
pub fn resetForTesting() void {
    comptime assert(builtin.is_test);
    kind_for_testing.store(0, .monotonic);
    for (&table) |*slot| slot.store(0, .monotonic);
    probe_state.store(.unknown, .monotonic);
}

test "mounts: a mountinfo line gives its id and kind" {
    const ext4 = parseLine("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext4 /dev/root rw");
    try std.testing.expectEqual(Mount{ .id = 36, .kind = .local }, ext4.?);
    const nfs = parseLine("40 1 0:52 / /net rw shared:7 - nfs4 host:/export rw,vers=4.2");
    try std.testing.expectEqual(Mount{ .id = 40, .kind = .other }, nfs.?);
    const p9 = parseLine("41 1 0:53 / /mnt/c rw - 9p drvfs rw");
    try std.testing.expectEqual(Mount{ .id = 41, .kind = .waits_always }, p9.?);
    // No separator (a line cut before it): listed, of no known type.
    try std.testing.expectEqual(Mount{ .id = 7, .kind = .other }, parseLine("7 1 0:5 / /x rw").?);
    try std.testing.expectEqual(@as(?Mount, null), parseLine("garbage"));
    try std.testing.expectEqual(@as(?Mount, null), parseLine(""));
}

test "mounts: lines longer than the prefix are cut, and split across chunks" {
    var lines: Lines = .{};
    var long: [Lines.prefix_len + 100]u8 = @splat('x');
    @memcpy(long[0..12], "5 1 0:1 / / ");
    var first: []const u8 = "3 1 0:1 / / rw - ext4 sda rw\n4 1 0:2 / /n rw - nf";
    try std.testing.expectEqualStrings("3 1 0:1 / / rw - ext4 sda rw", lines.next(&first).?);
    try std.testing.expectEqual(@as(?[]const u8, null), lines.next(&first));
    var second: []const u8 = "s host:/ rw\n";
    try std.testing.expectEqualStrings("4 1 0:2 / /n rw - nfs host:/ rw", lines.next(&second).?);
    var third: []const u8 = &long;
    try std.testing.expectEqual(@as(?[]const u8, null), lines.next(&third));
    var end: []const u8 = "\n";
    const cut = lines.next(&end).?;
    try std.testing.expectEqual(@as(usize, Lines.prefix_len), cut.len);
    try std.testing.expectEqual(@as(u64, 5), parseLine(cut).?.id);
}

test "mounts: this process's root is found and remembered" {
    resetForTesting();
    defer resetForTesting();
    var statx: linux.Statx = undefined;
    const rc = linux.statx(linux.AT.FDCWD, "/", 0, .{ .MNT_ID = true }, &statx);
    try std.testing.expectEqual(linux.E.SUCCESS, os.errno(rc));
    if (!statx.mask.MNT_ID) return os.skipTest(@src(), "no STATX_MNT_ID before Linux 5.8");
    _ = probeAllowed();
    try std.testing.expect(probe_state.load(.monotonic) != .unknown);
    const kind = kindOf(statx.mnt_id);
    try std.testing.expectEqual(kind, lookup(statx.mnt_id).?);
    try std.testing.expectEqual(@as(?Kind, null), lookup(statx.mnt_id + 1_000_000));
}
