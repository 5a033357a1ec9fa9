//! What a program reached, for the test suite's coverage tables (build/coverage.sh,
//! docs/COVERAGE.md): which `std.Io.VTable` entries, and which code blocks. Compiled in only
//! with `-Dcoverage=true`: each entry of weft's VTable is then wrapped in a function that
//! counts its calls (one relaxed atomic increment; off, the VTable holds the entries
//! themselves and this file costs nothing), and the build adds LLVM's block counters.
//!
//! Each `Runtime.deinit` appends to the file named by `WEFT_COVERAGE_FILE`, where `<config>`
//! is `WEFT_BACKEND` and `WEFT_EXECUTORS` as the build's test runs set them:
//!   - `<config> <entry> <calls>` per entry called since the previous flush (the counts then
//!     go back to zero);
//!   - `<config> exe <path>` once per process, and `<config> block <address>` per code block
//!     first run since the previous flush (see `flushBlocks`).
//! Lines go out in appends of at most 16 KiB, each ending on a whole line, under O_APPEND: the
//! test runs of the four configurations write to one file side by side without tearing one.
const std = @import("std");
const Io = std.Io;
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const build_options = @import("build_options");
const os = @import("../os/linux.zig");
const Mutex = @import("../os/Mutex.zig");

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
/// sets them to zero, then the code blocks first reached since the last call. Does nothing when
/// coverage is off or the variable is unset; a file that cannot be written is reported on
/// stderr, since the run's table would be wrong.
pub fn flush() void {
    if (!enabled) return;
    var path_buffer: [std.fs.max_path_bytes]u8 = undefined;
    const path = os.getEnv("WEFT_COVERAGE_FILE", &path_buffer) orelse return;
    var backend_buffer: [16]u8 = undefined;
    const backend = os.getEnv("WEFT_BACKEND", &backend_buffer) orelse "auto";
    var executors_buffer: [16]u8 = undefined;
    const executors = os.getEnv("WEFT_EXECUTORS", &executors_buffer) orelse "N";

    var path_z: [std.fs.max_path_bytes + 1]u8 = undefined;
    if (path.len >= path_z.len) return;
    @memcpy(path_z[0..path.len], path);
    path_z[path.len] = 0;
    const flags: linux.O = .{ .ACCMODE = .WRONLY, .CREAT = true, .APPEND = true, .CLOEXEC = true };
    const fd_rc = linux.open(@ptrCast(&path_z), flags, 0o644);
    if (os.errno(fd_rc) != .SUCCESS) {
        std.debug.print("weft coverage: cannot open {s}: {t}\n", .{ path, os.errno(fd_rc) });
        return;
    }
    const fd: i32 = @intCast(fd_rc);
    defer _ = linux.close(fd);

    // Runtimes of one process may end on several threads at once; each block is written once.
    flush_mutex.lock();
    defer flush_mutex.unlock();
    var out: Lines = .{ .fd = fd, .path = path };
    inline for (entries, 0..) |entry, index| {
        const count = calls[index].swap(0, .monotonic);
        if (count > 0) out.print("{s}-{s} {s} {d}\n", .{ backend, executors, entry.name, count });
    }
    if (builtin.fuzz) flushBlocks(&out, backend, executors);
    out.drain();
}

var flush_mutex: Mutex = .{};

/// Blocks run after the last `Runtime.deinit` (tests of std.Io code on `std.testing.io`, the
/// last steps of a forked child) would go unwritten: a coverage build links libc, whose `exit`
/// calls the `.fini_array` entries, and this one flushes once more.
const at_exit = if (enabled and builtin.fuzz and builtin.link_libc) struct {
    export const weft_coverage_at_exit: *const fn () callconv(.c) void linksection(".fini_array") =
        &flushAtExit;

    fn flushAtExit() callconv(.c) void {
        flush();
    }
} else struct {};

comptime {
    _ = at_exit;
}

/// Code block coverage, in a build with LLVM's sanitizer coverage (`-Dcoverage=true` builds the
/// tests with `-ffuzz`): the compiler gives every basic block an 8-bit counter in the section
/// `__sancov_cntrs` and its address, at the same index, in `__sancov_pcs1`. Each block whose
/// counter is non-zero and was not written before is written as `<config> block <address>`,
/// the address as linked (what `addr2line` reads), after one line `<config> exe <path>` per
/// process. A counter wraps at 256, so a block run a multiple of 256 times between two
/// flushes and never otherwise goes unseen; a function has several blocks, and its entry
/// block counts its calls, so a function reached is all but never missed.
fn flushBlocks(out: *Lines, backend: []const u8, executors: []const u8) void {
    const counters_start = @extern([*]const u8, .{ .name = "__start___sancov_cntrs" });
    const counters_end = @extern([*]const u8, .{ .name = "__stop___sancov_cntrs" });
    const addresses_start = @extern([*]const usize, .{ .name = "__start___sancov_pcs1" });
    const counters = counters_start[0 .. @intFromPtr(counters_end) - @intFromPtr(counters_start)];
    const addresses = addresses_start[0..counters.len];

    if (blocks_written == null) {
        const words = std.math.divCeil(usize, counters.len, 64) catch unreachable;
        blocks_written = std.heap.page_allocator.alloc(u64, words) catch {
            std.debug.print("weft coverage: no memory for {d} blocks\n", .{counters.len});
            return;
        };
        @memset(blocks_written.?, 0);
        var exe_buffer: [std.fs.max_path_bytes]u8 = undefined;
        const exe_rc = linux.readlink("/proc/self/exe", &exe_buffer, exe_buffer.len);
        if (os.errno(exe_rc) != .SUCCESS) return;
        out.print("{s}-{s} exe {s}\n", .{ backend, executors, exe_buffer[0..exe_rc] });
    }
    const written = blocks_written.?;
    const slide = loadSlide();
    for (counters, addresses, 0..) |count, address, index| {
        const bit = @as(u64, 1) << @intCast(index % 64);
        if (count == 0 or written[index / 64] & bit != 0) continue;
        written[index / 64] |= bit;
        out.print("{s}-{s} block {x}\n", .{ backend, executors, address -% slide });
    }
}

/// Which blocks `flushBlocks` wrote already, one bit per counter; allocated at the first flush.
var blocks_written: ?[]u64 = null;

/// How far the executable was loaded from its linked addresses (0 unless it is position
/// independent): the load bias of the first object `dl_iterate_phdr` reports, the program.
fn loadSlide() usize {
    var slide: usize = 0;
    std.posix.dl_iterate_phdr(&slide, error{Found}, struct {
        fn first(info: *std.posix.dl_phdr_info, size: usize, result: *usize) error{Found}!void {
            _ = size;
            result.* = info.addr;
            return error.Found; // the program comes first; the libraries are not wanted
        }
    }.first) catch {};
    return slide;
}

/// Text lines for the coverage file, written through a buffer: one flush can hold tens of
/// thousands of blocks. Each line is whole in one `write`: lines of the test runs side by side
/// never tear under O_APPEND.
const Lines = struct {
    fd: i32,
    path: []const u8,
    buffer: [16 * 1024]u8 = undefined,
    len: usize = 0,
    failed: bool = false,

    /// Longer than any line `flush` writes (an entry name, a count, a path).
    const line_max = std.fs.max_path_bytes + 64;

    fn print(lines: *Lines, comptime format: []const u8, args: anytype) void {
        if (lines.buffer.len - lines.len < line_max) lines.drain();
        const line = std.fmt.bufPrint(lines.buffer[lines.len..], format, args) catch
            unreachable; // line_max bytes hold every line
        lines.len += line.len;
    }

    fn drain(lines: *Lines) void {
        defer lines.len = 0;
        if (lines.len == 0 or lines.failed) return;
        const rc = linux.write(lines.fd, &lines.buffer, lines.len);
        if (os.errno(rc) != .SUCCESS or rc != lines.len) {
            lines.failed = true;
            std.debug.print("weft coverage: short write to {s}\n", .{lines.path});
        }
    }
};
