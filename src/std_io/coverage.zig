//! Which `std.Io.VTable` entries a program reached, for the test suite's coverage table
//! (build/coverage.sh, docs/COVERAGE.md). Compiled in only with `-Dcoverage=true`: each entry
//! of weft's VTable is then wrapped in a function that counts its calls (one relaxed atomic
//! increment; off, the VTable holds the entries themselves and this file costs nothing).
//!
//! Each `Runtime.deinit` appends the counts since the previous one to the file named by
//! `WEFT_COVERAGE_FILE`, one line per entry called, `<config> <entry> <calls>`, where
//! `<config>` is `WEFT_BACKEND` and `WEFT_EXECUTORS` as the build's test runs set them, and
//! sets the counts back to zero. Appends of a few KiB under O_APPEND: the test runs of the
//! four configurations write to one file side by side without tearing a line.
const std = @import("std");
const Io = std.Io;
const build_options = @import("build_options");
const os = @import("../os/linux.zig");

pub const enabled = build_options.coverage;

const entries = @typeInfo(Io.VTable).@"struct".fields;

var calls: [entries.len]std.atomic.Value(u64) = @splat(.init(0));

/// The entry `function` of the field at `index`, counted.
pub fn counted(comptime index: usize, comptime function: anytype) @TypeOf(function) {
    const info = @typeInfo(@TypeOf(function)).@"fn";
    const P = info.params;
    const R = info.return_type.?;
    const cc = info.calling_convention;
    const hit = struct {
        inline fn hit() void {
            _ = calls[index].fetchAdd(1, .monotonic);
        }
    }.hit;
    return switch (P.len) {
        1 => struct {
            fn f(a: P[0].type.?) callconv(cc) R {
                hit();
                return function(a);
            }
        }.f,
        2 => struct {
            fn f(a: P[0].type.?, b: P[1].type.?) callconv(cc) R {
                hit();
                return function(a, b);
            }
        }.f,
        3 => struct {
            fn f(a: P[0].type.?, b: P[1].type.?, c: P[2].type.?) callconv(cc) R {
                hit();
                return function(a, b, c);
            }
        }.f,
        4 => struct {
            fn f(a: P[0].type.?, b: P[1].type.?, c: P[2].type.?, d: P[3].type.?) callconv(cc) R {
                hit();
                return function(a, b, c, d);
            }
        }.f,
        5 => struct {
            fn f(
                a: P[0].type.?,
                b: P[1].type.?,
                c: P[2].type.?,
                d: P[3].type.?,
                e: P[4].type.?,
            ) callconv(cc) R {
                hit();
                return function(a, b, c, d, e);
            }
        }.f,
        6 => struct {
            fn f(
                a: P[0].type.?,
                b: P[1].type.?,
                c: P[2].type.?,
                d: P[3].type.?,
                e: P[4].type.?,
                g: P[5].type.?,
            ) callconv(cc) R {
                hit();
                return function(a, b, c, d, e, g);
            }
        }.f,
        7 => struct {
            fn f(
                a: P[0].type.?,
                b: P[1].type.?,
                c: P[2].type.?,
                d: P[3].type.?,
                e: P[4].type.?,
                g: P[5].type.?,
                h: P[6].type.?,
            ) callconv(cc) R {
                hit();
                return function(a, b, c, d, e, g, h);
            }
        }.f,
        else => @compileError("coverage: no wrapper for a VTable entry of this many parameters"),
    };
}

/// Appends the counts since the last call to `WEFT_COVERAGE_FILE` (see the file's header) and
/// sets them to zero. Does nothing when coverage is off or the variable is unset; a file that
/// cannot be written is reported once on stderr, since the run's table would be wrong.
pub fn flush() void {
    if (!enabled) return;
    var path_buffer: [std.fs.max_path_bytes]u8 = undefined;
    const path = os.getEnv("WEFT_COVERAGE_FILE", &path_buffer) orelse return;
    var backend_buffer: [16]u8 = undefined;
    const backend = os.getEnv("WEFT_BACKEND", &backend_buffer) orelse "auto";
    var executors_buffer: [16]u8 = undefined;
    const executors = os.getEnv("WEFT_EXECUTORS", &executors_buffer) orelse "N";
    var text: [entries.len * 80]u8 = undefined;
    var writer: Io.Writer = .fixed(&text);
    inline for (entries, 0..) |entry, index| {
        const count = calls[index].swap(0, .monotonic);
        if (count > 0) {
            writer.print("{s}-{s} {s} {d}\n", .{ backend, executors, entry.name, count }) catch
                unreachable; // 80 bytes per line hold every name and count
        }
    }
    var path_z: [std.fs.max_path_bytes + 1]u8 = undefined;
    if (path.len >= path_z.len) return;
    @memcpy(path_z[0..path.len], path);
    path_z[path.len] = 0;
    const linux = std.os.linux;
    const flags: linux.O = .{ .ACCMODE = .WRONLY, .CREAT = true, .APPEND = true, .CLOEXEC = true };
    const fd_rc = linux.open(@ptrCast(&path_z), flags, 0o644);
    if (os.errno(fd_rc) != .SUCCESS) {
        std.debug.print("weft coverage: cannot open {s}: {t}\n", .{ path, os.errno(fd_rc) });
        return;
    }
    const fd: i32 = @intCast(fd_rc);
    defer _ = linux.close(fd);
    const data = writer.buffered();
    const rc = linux.write(fd, data.ptr, data.len);
    if (os.errno(rc) != .SUCCESS or rc != data.len) {
        std.debug.print("weft coverage: short write to {s}\n", .{path});
    }
}
