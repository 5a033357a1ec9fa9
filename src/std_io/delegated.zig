//! VTable entries that weft does not implement natively yet ("delegated" in the README).
//!
//! Each runs the very syscall path of `std.Io.Threaded`, the reference implementation, but
//! off the executor: the calling fiber parks while a Threaded worker thread makes the call,
//! so a blocking syscall never stalls the other fibers. A handful of calls that cannot block
//! (closing, stderr locking, process-wide state) run inline. On a thread weft does not run,
//! every call runs inline, as it would on Threaded.
//!
//! Trade-offs, until each group of entries becomes native:
//! - a delegated call is a cancelation point only before it starts; once on the worker it runs
//!   to completion.
const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const Runtime = @import("../Runtime.zig");
const Executor = @import("../sched/Executor.zig");

const State = Runtime.State;

/// Entries that never block, or that touch per-thread or process-wide state and so must run
/// on the caller's thread.
const inline_entries = [_][]const u8{
    "dirClose",              "fileClose",            "netClose",
    "lockStderr",            "tryLockStderr",        "unlockStderr",
    "processReplace",        "processReplacePath",   "processSetCurrentDir",
    "processSetCurrentPath", "processExecutablePath", "processCurrentPath",
    "progressParentFile",    "fileMemoryMapDestroy",
};

fn isInline(comptime name: []const u8) bool {
    for (inline_entries) |inline_name| if (std.mem.eql(u8, inline_name, name)) return true;
    return false;
}

fn Signature(comptime name: []const u8) std.builtin.Type.Fn {
    return @typeInfo(@typeInfo(@FieldType(Io.VTable, name)).pointer.child).@"fn";
}

fn ReturnType(comptime name: []const u8) type {
    return Signature(name).return_type.?;
}

fn canFailCanceled(comptime R: type) bool {
    return switch (@typeInfo(R)) {
        .error_union => |eu| @typeInfo(eu.error_set).error_set == null or
            for (@typeInfo(eu.error_set).error_set.?) |e| {
                if (std.mem.eql(u8, e.name, "Canceled")) break true;
            } else false,
        else => false,
    };
}

/// The VTable entry `name`, delegated.
pub fn entry(comptime name: []const u8) @FieldType(Io.VTable, name) {
    const params = Signature(name).params;
    const R = ReturnType(name);
    const P = struct {
        fn at(comptime i: usize) type {
            return params[i].type.?;
        }
    };
    return switch (params.len) {
        1 => &struct {
            fn f(u: ?*anyopaque) R {
                return call(name, u, .{});
            }
        }.f,
        2 => &struct {
            fn f(u: ?*anyopaque, a: P.at(1)) R {
                return call(name, u, .{a});
            }
        }.f,
        3 => &struct {
            fn f(u: ?*anyopaque, a: P.at(1), b: P.at(2)) R {
                return call(name, u, .{ a, b });
            }
        }.f,
        4 => &struct {
            fn f(u: ?*anyopaque, a: P.at(1), b: P.at(2), c: P.at(3)) R {
                return call(name, u, .{ a, b, c });
            }
        }.f,
        5 => &struct {
            fn f(u: ?*anyopaque, a: P.at(1), b: P.at(2), c: P.at(3), d: P.at(4)) R {
                return call(name, u, .{ a, b, c, d });
            }
        }.f,
        6 => &struct {
            fn f(u: ?*anyopaque, a: P.at(1), b: P.at(2), c: P.at(3), d: P.at(4), e: P.at(5)) R {
                return call(name, u, .{ a, b, c, d, e });
            }
        }.f,
        7 => &struct {
            fn f(
                u: ?*anyopaque,
                a: P.at(1),
                b: P.at(2),
                c: P.at(3),
                d: P.at(4),
                e: P.at(5),
                g: P.at(6),
            ) R {
                return call(name, u, .{ a, b, c, d, e, g });
            }
        }.f,
        else => @compileError("delegated entry with an unexpected arity: " ++ name),
    };
}

fn call(comptime name: []const u8, userdata: ?*anyopaque, args: anytype) ReturnType(name) {
    const state: *State = @ptrCast(@alignCast(userdata.?));
    const threaded_io = state.threaded.io();
    const function = @field(threaded_io.vtable.*, name);
    const R = ReturnType(name);
    const task = Executor.currentTask() orelse
        return @call(.auto, function, .{threaded_io.userdata} ++ args);
    if (comptime isInline(name)) return @call(.auto, function, .{threaded_io.userdata} ++ args);
    if (comptime canFailCanceled(R)) try task.checkCancel();

    const Job = struct {
        args: @TypeOf(args),
        function: @TypeOf(function),
        result: R = undefined,
        userdata: ?*anyopaque,
        task: *@import("../sched/Task.zig"),

        fn run(job: *@This()) void {
            job.result = @call(.auto, job.function, .{job.userdata} ++ job.args);
            // The task waits uncancelably and nothing else wakes it, so this wake is the one
            // that resumes it, and the job's memory (on the task's stack) outlives it.
            job.task.wake();
        }
    };
    var job: Job = .{ .args = args, .function = function, .userdata = threaded_io.userdata, .task = task };
    task.prepareWait(false);
    var future = threaded_io.concurrent(Job.run, .{&job}) catch {
        // No worker thread could be started: make the call here, blocking this executor.
        task.abandonWait();
        Job.run(&job);
        task.abandonWait();
        return job.result;
    };
    task.park();
    future.await(threaded_io);
    return job.result;
}
