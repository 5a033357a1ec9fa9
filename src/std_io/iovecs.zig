//! The iovecs of one read or write, built from std.Io's buffer lists: the layout std's
//! `Reader`/`Writer` hand to `netRead`, `netWrite`, `fileReadPositional`, `fileWritePositional`
//! and the streaming file operations.
//!
//! Empty buffers are left out (the kernel checks a pointer before its length, and a read into
//! only empty buffers would look like end of file), and what does not fit is left for the next
//! call, which std's readers and writers make.
const std = @import("std");
const posix = std.posix;
const assert = std.debug.assert;

/// Iovecs per call, as std.Io.Threaded uses.
pub const iovecs_max = std.Io.Threaded.max_iovecs_len;
/// Bytes of a one-byte splat pattern expanded per iovec (std.Io.Threaded uses the same).
pub const splat_buffer_bytes = std.Io.Threaded.splat_buffer_size;

/// A write: `header`, then `data[0 .. data.len - 1]`, then the last element `splat` times.
pub const Iovecs = struct {
    buffer: [iovecs_max]posix.iovec_const = undefined,
    count: usize = 0,

    /// The iovecs of std's `Writer.drain` layout. `scratch` holds an expanded one-byte
    /// pattern and must outlive the iovecs.
    pub fn drain(
        header: []const u8,
        data: []const []const u8,
        splat: usize,
        scratch: *[splat_buffer_bytes]u8,
    ) Iovecs {
        var iovecs: Iovecs = .{};
        iovecs.add(header);
        // std's `Writer.drain` never passes an empty `data`, but a caller of the vtable may:
        // std.Io.Threaded then indexes `data[data.len - 1]` (a panic); here it is no data, and
        // only the header is written.
        if (data.len == 0) return iovecs;
        for (data[0 .. data.len - 1]) |bytes| iovecs.add(bytes);
        iovecs.addSplat(data[data.len - 1], splat, scratch);
        return iovecs;
    }

    pub fn slice(iovecs: *const Iovecs) []const posix.iovec_const {
        return iovecs.buffer[0..iovecs.count];
    }

    fn add(iovecs: *Iovecs, bytes: []const u8) void {
        if (bytes.len == 0 or iovecs.count == iovecs.buffer.len) return;
        iovecs.buffer[iovecs.count] = .{ .base = bytes.ptr, .len = bytes.len };
        iovecs.count += 1;
    }

    /// `pattern` repeated `splat` times. A one-byte pattern is expanded into `scratch`, which
    /// then stands for up to `scratch.len` bytes per iovec.
    fn addSplat(iovecs: *Iovecs, pattern: []const u8, splat: usize, scratch: []u8) void {
        if (pattern.len == 0 or splat == 0) return;
        if (pattern.len > 1 or splat == 1) {
            for (0..splat) |_| {
                if (iovecs.count == iovecs.buffer.len) return;
                iovecs.add(pattern);
            }
            return;
        }
        @memset(scratch, pattern[0]);
        var remaining = splat;
        while (remaining > 0 and iovecs.count < iovecs.buffer.len) {
            const chunk = @min(remaining, scratch.len);
            iovecs.add(scratch[0..chunk]);
            remaining -= chunk;
        }
    }
};

/// A read into the first `iovecs_max` non-empty buffers of `data`.
pub const ReadIovecs = struct {
    buffer: [iovecs_max]posix.iovec = undefined,
    count: usize = 0,

    pub fn init(data: []const []u8) ReadIovecs {
        var iovecs: ReadIovecs = .{};
        for (data) |bytes| {
            if (iovecs.count == iovecs.buffer.len) break;
            if (bytes.len == 0) continue;
            iovecs.buffer[iovecs.count] = .{ .base = bytes.ptr, .len = bytes.len };
            iovecs.count += 1;
        }
        return iovecs;
    }

    pub fn slice(iovecs: *const ReadIovecs) []const posix.iovec {
        return iovecs.buffer[0..iovecs.count];
    }
};

test "Iovecs: drain layout, empty buffers left out, one-byte splat expanded" {
    var scratch: [splat_buffer_bytes]u8 = undefined;
    const iovecs: Iovecs = .drain("ab", &.{ "", "cd", "x" }, 100, &scratch);
    // header, "cd", then 100 bytes of "x" as 64 + 36.
    try std.testing.expectEqual(@as(usize, 4), iovecs.count);
    try std.testing.expectEqual(@as(usize, 64), iovecs.buffer[2].len);
    try std.testing.expectEqual(@as(usize, 36), iovecs.buffer[3].len);
    const none: Iovecs = .drain("", &.{"abc"}, 0, &scratch);
    try std.testing.expectEqual(@as(usize, 0), none.count);
    const header_only: Iovecs = .drain("ab", &.{}, 1, &scratch);
    try std.testing.expectEqual(@as(usize, 1), header_only.count);
    var a: [4]u8 = undefined;
    var b: [0]u8 = .{};
    const read: ReadIovecs = .init(&.{ &b, &a, &b });
    try std.testing.expectEqual(@as(usize, 1), read.count);
}
