//! The memory limits a process runs under: `RLIMIT_AS` with the address space in use, and the
//! cgroup v2 `memory.max` of the process's cgroup (what a container's memory limit sets). Read
//! at `Runtime.init`, which sizes its fiber stacks and its task ceiling to fit (fiber/stack.zig,
//! `plan`), and by `weft.Server` to say why a worker could not start.
//!
//! Text from /proc and /sys is the kernel's, but a sandbox may hide or fake it: it is
//! validated, never asserted on. A file missing or unreadable, a line or number that does not
//! parse, a cgroup v1 hierarchy: each reads as no limit, the behaviour before limits were read.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const os = @import("linux.zig");

/// Where cgroup v2 is mounted on every distribution that runs it alone (systemd's default
/// since 2021, Docker's and Kubernetes' containers). A hybrid host mounts it elsewhere
/// (`/sys/fs/cgroup/unified`) without the memory controller, which then reads as no limit.
const cgroup_root = "/sys/fs/cgroup";

/// Ancestors looked at above the process's own cgroup: a limit set on a parent (a systemd
/// slice, a pod) bounds the children too. Bounds the walk over a path read from outside.
const cgroup_depth_max = 16;

pub const Limits = struct {
    /// The soft `RLIMIT_AS`; null when unlimited or unreadable.
    address_space_bytes: ?u64,
    /// The address space mapped now (`VmSize`); 0 if unknown.
    address_space_used_bytes: u64,
    /// The lowest `memory.max` of the process's cgroup and its ancestors; null where none is
    /// set ("max"), or no cgroup v2 memory controller is found.
    cgroup_memory_bytes: ?u64,
    /// The cgroup's `memory.current` where `cgroup_memory_bytes` was found; 0 if unknown.
    cgroup_memory_used_bytes: u64,

    /// No limit at all: what a runtime plans for when told not to read them (tests).
    pub const none: Limits = .{
        .address_space_bytes = null,
        .address_space_used_bytes = 0,
        .cgroup_memory_bytes = null,
        .cgroup_memory_used_bytes = 0,
    };
};

/// Reads every limit: a getrlimit and a few small files, at init only.
pub fn read() Limits {
    var limits: Limits = .none;
    limits.address_space_bytes = addressSpaceLimitBytes();
    limits.address_space_used_bytes = addressSpaceUsedBytes();
    readCgroup(&limits);
    return limits;
}

/// The soft `RLIMIT_AS` (`ulimit -v`); null when unlimited or unreadable.
pub fn addressSpaceLimitBytes() ?u64 {
    var limit: linux.rlimit = undefined;
    if (linux.getrlimit(.AS, &limit) != 0) return null;
    if (limit.cur == linux.RLIM.INFINITY) return null;
    return limit.cur;
}

/// The process's mapped address space (`VmSize`, what `RLIMIT_AS` bounds); 0 if unknown.
pub fn addressSpaceUsedBytes() u64 {
    var buffer: [128]u8 = undefined;
    const text = os.readFile("/proc/self/statm", &buffer) orelse return 0;
    var fields = std.mem.tokenizeScalar(u8, text, ' ');
    const pages = std.fmt.parseInt(u64, fields.next() orelse return 0, 10) catch return 0;
    return pages *| std.heap.pageSize();
}

fn readCgroup(limits: *Limits) void {
    var text_buffer: [4096]u8 = undefined;
    const text = os.readFile("/proc/self/cgroup", &text_buffer) orelse return;
    const own = unifiedPath(text) orelse return;
    var path_buffer: [std.Io.Dir.max_path_bytes]u8 = undefined;
    var path: []const u8 = own;
    for (0..cgroup_depth_max) |_| {
        if (readCgroupValue(&path_buffer, path, "memory.max")) |max_bytes| {
            if (limits.cgroup_memory_bytes == null or max_bytes < limits.cgroup_memory_bytes.?) {
                limits.cgroup_memory_bytes = max_bytes;
                limits.cgroup_memory_used_bytes =
                    readCgroupValue(&path_buffer, path, "memory.current") orelse 0;
            }
        }
        if (path.len <= 1) break;
        path = parentOf(path);
    }
}

/// The value of `file` in the cgroup at `path` (from the cgroup root) as bytes; null when
/// missing, "max" or not a number.
fn readCgroupValue(path_buffer: []u8, path: []const u8, file: []const u8) ?u64 {
    const full = std.fmt.bufPrintSentinel(path_buffer, "{s}{s}/{s}", .{
        cgroup_root, if (path.len == 1) "" else path, file,
    }, 0) catch return null;
    var buffer: [64]u8 = undefined;
    return parseBytes(os.readFile(full, &buffer) orelse return null);
}

/// The cgroup v2 line of `/proc/self/cgroup` ("0::/path"): its path, which starts with '/'.
fn unifiedPath(text: []const u8) ?[]const u8 {
    var lines = std.mem.splitScalar(u8, text, '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, "0::")) continue;
        const path = line[3..];
        if (path.len == 0 or path[0] != '/') return null;
        // A path with ".." could climb out of the cgroup root: not the kernel's text.
        if (std.mem.indexOf(u8, path, "..") != null) return null;
        return path;
    }
    return null;
}

fn parentOf(path: []const u8) []const u8 {
    const slash = std.mem.lastIndexOfScalar(u8, path, '/') orelse return "/";
    return if (slash == 0) "/" else path[0..slash];
}

/// A byte count as cgroup files write it: digits and a newline; "max" and anything else is
/// none.
fn parseBytes(text: []const u8) ?u64 {
    const trimmed = std.mem.trim(u8, text, " \n");
    return std.fmt.parseInt(u64, trimmed, 10) catch null;
}

test "memory_limits: the cgroup v2 path and values parse, and what is not theirs does not" {
    const testing = std.testing;
    const hybrid = "4:memory:/a/b\n0::/user.slice/session-1.scope\n";
    try testing.expectEqualStrings("/user.slice/session-1.scope", unifiedPath(hybrid).?);
    try testing.expectEqualStrings("/", unifiedPath("0::/\n").?);
    try testing.expect(unifiedPath("4:memory:/a\n") == null);
    try testing.expect(unifiedPath("0::relative\n") == null);
    try testing.expect(unifiedPath("0::/a/../../etc\n") == null);
    try testing.expectEqualStrings("/user.slice", parentOf("/user.slice/session-1.scope"));
    try testing.expectEqualStrings("/", parentOf("/user.slice"));
    try testing.expectEqual(@as(?u64, 67108864), parseBytes("67108864\n"));
    try testing.expectEqual(@as(?u64, null), parseBytes("max\n"));
    try testing.expectEqual(@as(?u64, null), parseBytes("-1\n"));
    try testing.expectEqual(@as(?u64, null), parseBytes("99999999999999999999999\n"));
    try testing.expectEqual(@as(?u64, null), parseBytes(""));
    // Whatever this machine has, reading it neither fails nor asserts.
    const limits = read();
    try testing.expect(limits.address_space_used_bytes > 0);
}
