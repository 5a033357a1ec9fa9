//! Test runner for `./zigw build test-std`: runs the standard library's own tests with weft
//! behind `std.testing.io`.
//!
//! It only works with the patched lib directory written by `build/std_lib_patch.zig`, whose
//! `std/testing.zig` resolves `io` to `@import("root").std_testing_io`; in a test binary the
//! root module is this file.
//!
//! `std_testing_io` has to be comptime-known, but a runtime is created per test (so that every
//! test starts from a clean runtime and its leaks show up in that test). It is therefore a
//! forwarding Io: a constant VTable whose every entry reads `current_io` and calls through.
//! The alternative, weft exporting its VTable plus a statically allocated runtime state, would
//! tie this file to weft internals; forwarding needs only `Runtime.init`, `io` and `deinit`.
//!
//! Per test, like the default runner (`lib/compiler/test_runner.zig`): a fresh
//! `std.testing.allocator` (leaks fail the test), a fresh Io built on it, log errors counted.
//! Each test body runs on the calling (main) thread; weft's `Runtime.init` adopts that thread
//! as its main fiber, so the test may block in Io calls directly. Tests that spawn
//! `std.Thread`s call the Io from those foreign threads as well.
//!
//! Output: one line per test that does not pass (or every test with WEFT_STD_TEST_VERBOSE=1),
//! then `N passed, N failed, N skipped`; the exit code is 1 if any test failed or leaked. A
//! watchdog names the test and exits when one makes no progress for WEFT_STD_TEST_TIMEOUT_S
//! seconds (default 120, 0 disables), so a hang in the runtime does not hang the build.
const std = @import("std");
const builtin = @import("builtin");
const options = @import("std_runner_options");
const weft = @import("weft");

const Io = std.Io;
const testing = std.testing;

pub const std_options: std.Options = .{ .logFn = log };

/// A runtime bug usually surfaces as a panic, which ends the process; name the test first.
pub const panic = std.debug.FullPanic(panicNamingTest);

/// Read by the patched `std.testing.io`. See the file comment for why it forwards.
pub const std_testing_io: Io = .{ .userdata = &current_io, .vtable = &forwarding_vtable };

/// The Io of the test being run. Written by the main thread only between tests, while no test
/// code (hence no other thread of the test) is running.
var current_io: Io = undefined;

const vtable_fields = @typeInfo(Io.VTable).@"struct".fields;

/// Number of calls through `std_testing_io`, from all threads, per VTable entry (in field
/// order). Printed at the end as evidence that the tests exercised the Io under test, and which
/// parts of it.
var io_calls: [vtable_fields.len]std.atomic.Value(u64) = @splat(.init(0));

/// For the runner's own clock and sleeps, never the Io under test: a broken runtime must not
/// be able to break the runner's bookkeeping.
const runner_io: Io = Io.Threaded.global_single_threaded.io();

/// The Io behind `std.testing.io`, chosen by `-Dstd-test-io` (weft by default).
const TestIo = switch (options.test_io) {
    .weft => struct {
        runtime: weft.Runtime,

        fn init(gpa: std.mem.Allocator, _: std.process.Init.Minimal) !@This() {
            // Default options: the loop backend follows WEFT_BACKEND, set by the build step.
            // No stall detector: std's tests compute on the main task by design (its crypto
            // tests for seconds), and a report for each would bury the results.
            const runtime = try weft.Runtime.init(gpa, .{ .stall_threshold_ns = null });
            io_name = switch (runtime.backend()) {
                inline else => |kind| "weft (" ++ @tagName(kind) ++ ")",
            };
            return .{ .runtime = runtime };
        }
        fn io(self: *@This()) Io {
            return self.runtime.io();
        }
        fn deinit(self: *@This()) void {
            self.runtime.deinit();
        }
    },
    .threaded => struct {
        threaded: Io.Threaded,

        fn init(gpa: std.mem.Allocator, init_minimal: std.process.Init.Minimal) !@This() {
            return .{ .threaded = .init(gpa, .{
                .argv0 = .init(init_minimal.args),
                .environ = init_minimal.environ,
            }) };
        }
        fn io(self: *@This()) Io {
            return self.threaded.io();
        }
        fn deinit(self: *@This()) void {
            self.threaded.deinit();
        }
    },
};

/// Lives in a global because `Io.Threaded` must not move once `io()` has been taken.
var test_io_instance: TestIo = undefined;

/// For the summary: which Io (and, on weft, which loop backend) the last test ran on.
var io_name: []const u8 = @tagName(options.test_io);

const Status = enum { pass, skip, fail };

const Totals = struct {
    passed: u32 = 0,
    failed: u32 = 0,
    skipped: u32 = 0,
    leaked: u32 = 0,
    logged_errors: u32 = 0,
};

var log_err_count: u32 = 0;

pub fn main(init: std.process.Init.Minimal) void {
    const verbose = envFlag(init.environ, "WEFT_STD_TEST_VERBOSE");
    const timeout_s = envInt(init.environ, "WEFT_STD_TEST_TIMEOUT_S") orelse 120;
    if (timeout_s != 0) watchdog.start(timeout_s);

    const test_fns = builtin.test_functions;
    const run_start = Io.Clock.awake.now(runner_io);
    var totals: Totals = .{};
    for (test_fns, 0..) |test_fn, index| {
        const test_start = Io.Clock.awake.now(runner_io);
        const calls_before = ioCallsTotal();
        watchdog.enter(index);
        const outcome = runOne(init, test_fn);
        watchdog.leave();
        const ms = test_start.durationTo(Io.Clock.awake.now(runner_io)).toMilliseconds();
        const calls = ioCallsTotal() - calls_before;

        switch (outcome.status) {
            .pass => totals.passed += 1,
            .skip => totals.skipped += 1,
            .fail => totals.failed += 1,
        }
        totals.leaked += @intFromBool(outcome.leaked);
        totals.logged_errors += @intFromBool(outcome.logged_errors != 0);
        if (verbose or outcome.status != .pass) {
            std.debug.print("{d}/{d} {s}... {s} ({d} ms, {d} Io calls)\n", .{
                index + 1, test_fns.len, test_fn.name, outcome.describe(), ms, calls,
            });
        }
    }
    const run_ms = run_start.durationTo(Io.Clock.awake.now(runner_io)).toMilliseconds();

    if (verbose) printIoCalls();
    std.debug.print("std tests on {s}: {d} tests in {d} ms; {d} Io calls ({d} of {d} VTable " ++
        "entries) through std.testing.io\n", .{
        io_name,        test_fns.len,      run_ms,
        ioCallsTotal(), ioEntriesCalled(), vtable_fields.len,
    });
    if (totals.leaked != 0) std.debug.print("{d} tests leaked memory\n", .{totals.leaked});
    if (totals.logged_errors != 0) {
        std.debug.print("{d} tests logged errors\n", .{totals.logged_errors});
    }
    std.debug.print("{d} passed, {d} failed, {d} skipped\n", .{
        totals.passed, totals.failed, totals.skipped,
    });
    std.debug.assert(totals.passed + totals.failed + totals.skipped == test_fns.len);
    if (totals.failed != 0) std.process.exit(1);
}

const Outcome = struct {
    status: Status,
    /// Set when the test itself returned an error other than `SkipZigTest`.
    err: ?anyerror = null,
    leaked: bool = false,
    logged_errors: u32 = 0,

    fn describe(outcome: Outcome) []const u8 {
        if (outcome.err) |err| return @errorName(err);
        if (outcome.leaked) return "LEAK";
        if (outcome.logged_errors != 0) return "LOGGED ERRORS";
        return switch (outcome.status) {
            .pass => "OK",
            .skip => "SKIP",
            .fail => "FAIL",
        };
    }
};

/// Runs one test with a fresh allocator and a fresh Io. A test that passes (or skips) but
/// leaks memory or logs an error counts as failed, as with the default runner.
fn runOne(init: std.process.Init.Minimal, test_fn: std.builtin.TestFn) Outcome {
    testing.allocator_instance = .init;
    testing.log_level = .warn;
    testing.environ = init.environ;
    log_err_count = 0;

    // The Io is built on the testing allocator so that memory the runtime fails to release
    // is reported against the test that made it allocate.
    test_io_instance = TestIo.init(testing.allocator, init) catch |err| {
        _ = testing.allocator_instance.deinit();
        return .{ .status = .fail, .err = err };
    };
    current_io = test_io_instance.io();

    var outcome: Outcome = if (test_fn.func()) |_|
        .{ .status = .pass }
    else |err| switch (err) {
        error.SkipZigTest => .{ .status = .skip },
        else => failed: {
            // The trace comes before the runner's result line, so name the test here.
            std.debug.print("{s} returned error.{t}\n", .{ test_fn.name, err });
            if (@errorReturnTrace()) |trace| std.debug.dumpErrorReturnTrace(trace);
            break :failed .{ .status = .fail, .err = err };
        },
    };

    test_io_instance.deinit();
    current_io = undefined;
    // Read before the allocator's leak report, which is itself logged as errors.
    outcome.logged_errors = log_err_count;
    outcome.leaked = testing.allocator_instance.deinit() == .leak;
    if (outcome.leaked or outcome.logged_errors != 0) outcome.status = .fail;
    return outcome;
}

pub fn log(
    comptime message_level: std.log.Level,
    comptime scope: @EnumLiteral(),
    comptime format: []const u8,
    args: anytype,
) void {
    if (@intFromEnum(message_level) <= @intFromEnum(std.log.Level.err)) {
        log_err_count +|= 1;
    }
    if (@intFromEnum(message_level) <= @intFromEnum(testing.log_level)) {
        std.debug.print(
            "[" ++ @tagName(scope) ++ "] (" ++ @tagName(message_level) ++ "): " ++ format ++ "\n",
            args,
        );
    }
}

fn ioCallsTotal() u64 {
    var total: u64 = 0;
    for (&io_calls) |*calls| total += calls.load(.monotonic);
    return total;
}

fn ioEntriesCalled() usize {
    var called: usize = 0;
    for (&io_calls) |*calls| called += @intFromBool(calls.load(.monotonic) != 0);
    return called;
}

fn printIoCalls() void {
    std.debug.print("Io calls per VTable entry:\n", .{});
    inline for (vtable_fields, &io_calls) |field, *calls| {
        const count = calls.load(.monotonic);
        if (count != 0) std.debug.print("  {s}: {d}\n", .{ field.name, count });
    }
}

fn panicNamingTest(message: []const u8, first_trace_address: ?usize) noreturn {
    if (watchdog.running()) |test_index| {
        std.debug.print("panic in {d}/{d} {s}\n", .{
            test_index + 1,
            builtin.test_functions.len,
            builtin.test_functions[test_index].name,
        });
    }
    std.debug.defaultPanic(message, first_trace_address);
}

// ---- forwarding VTable ----------------------------------------------------------------------

const forwarding_vtable: Io.VTable = vtable: {
    var vtable: Io.VTable = undefined;
    for (vtable_fields, 0..) |field, index| {
        @field(vtable, field.name) = &Forward(field.name, index).call;
    }
    break :vtable vtable;
};

/// A function with the signature of `Io.VTable.<name>` that counts the call and forwards it,
/// with the same arguments, to the same entry of the Io that `userdata` points to. Zig cannot
/// declare a parameter list from a type, so there is one case per arity.
fn Forward(comptime name: []const u8, comptime index: usize) type {
    const Fn = @typeInfo(@FieldType(Io.VTable, name)).pointer.child;
    const params = @typeInfo(Fn).@"fn".params;
    const R = @typeInfo(Fn).@"fn".return_type.?;
    const P = struct {
        fn at(comptime i: usize) type {
            return params[i].type.?;
        }
    }.at;
    const U = ?*anyopaque;
    comptime std.debug.assert(params[0].type.? == U);
    return switch (params.len) {
        1 => struct {
            fn call(u: U) R {
                return forward(name, index, R, u, .{});
            }
        },
        2 => struct {
            fn call(u: U, a: P(1)) R {
                return forward(name, index, R, u, .{a});
            }
        },
        3 => struct {
            fn call(u: U, a: P(1), b: P(2)) R {
                return forward(name, index, R, u, .{ a, b });
            }
        },
        4 => struct {
            fn call(u: U, a: P(1), b: P(2), c: P(3)) R {
                return forward(name, index, R, u, .{ a, b, c });
            }
        },
        5 => struct {
            fn call(u: U, a: P(1), b: P(2), c: P(3), d: P(4)) R {
                return forward(name, index, R, u, .{ a, b, c, d });
            }
        },
        6 => struct {
            fn call(u: U, a: P(1), b: P(2), c: P(3), d: P(4), e: P(5)) R {
                return forward(name, index, R, u, .{ a, b, c, d, e });
            }
        },
        7 => struct {
            fn call(u: U, a: P(1), b: P(2), c: P(3), d: P(4), e: P(5), f: P(6)) R {
                return forward(name, index, R, u, .{ a, b, c, d, e, f });
            }
        },
        8 => struct {
            fn call(u: U, a: P(1), b: P(2), c: P(3), d: P(4), e: P(5), f: P(6), g: P(7)) R {
                return forward(name, index, R, u, .{ a, b, c, d, e, f, g });
            }
        },
        else => @compileError("Io.VTable." ++ name ++ ": add a case for this arity"),
    };
}

inline fn forward(
    comptime name: []const u8,
    comptime index: usize,
    comptime R: type,
    userdata: ?*anyopaque,
    args: anytype,
) R {
    _ = io_calls[index].fetchAdd(1, .monotonic);
    const target: *const Io = @ptrCast(@alignCast(userdata.?));
    return @call(.auto, @field(target.vtable, name), .{target.userdata} ++ args);
}

// ---- watchdog -------------------------------------------------------------------------------

/// Names the test and ends the process when a test runs longer than the timeout. A separate
/// OS thread, sleeping on `runner_io`, so that it runs even when the runtime under test has
/// wedged the main thread.
const watchdog = struct {
    /// Odd while a test runs, even between tests; bumped by the main thread on both edges, so
    /// the watchdog sees progress as a changed value. Release/acquire pairs it with `index`.
    var generation: std.atomic.Value(u32) = .init(0);
    var index: std.atomic.Value(usize) = .init(0);

    fn start(timeout_s: u32) void {
        const thread = std.Thread.spawn(.{}, run, .{timeout_s}) catch |err| {
            std.debug.print("std_runner: no watchdog ({t}); a hung test will hang\n", .{err});
            return;
        };
        thread.detach();
    }

    fn enter(test_index: usize) void {
        index.store(test_index, .monotonic);
        std.debug.assert(generation.fetchAdd(1, .release) % 2 == 0);
    }

    fn leave() void {
        std.debug.assert(generation.fetchAdd(1, .release) % 2 == 1);
    }

    /// The index of the test running, if any. Any thread may ask.
    fn running() ?usize {
        if (generation.load(.acquire) % 2 == 0) return null;
        return index.load(.monotonic);
    }

    fn run(timeout_s: u32) void {
        var seen: u32 = generation.load(.acquire);
        var stalled_s: u32 = 0;
        while (true) {
            runner_io.sleep(.fromSeconds(1), .awake) catch {};
            const now = generation.load(.acquire);
            if (now != seen or now % 2 == 0) {
                seen = now;
                stalled_s = 0;
                continue;
            }
            stalled_s += 1;
            if (stalled_s < timeout_s) continue;
            const test_index = index.load(.monotonic);
            std.debug.print("{d}/{d} {s}... TIMEOUT (still running after {d} s)\n", .{
                test_index + 1,
                builtin.test_functions.len,
                builtin.test_functions[test_index].name,
                timeout_s,
            });
            std.process.exit(1);
        }
    }
};

fn envFlag(environ: std.process.Environ, key: []const u8) bool {
    const value = environ.getPosix(key) orelse return false;
    return value.len != 0 and !std.mem.eql(u8, value, "0");
}

fn envInt(environ: std.process.Environ, key: []const u8) ?u32 {
    const value = environ.getPosix(key) orelse return null;
    return std.fmt.parseUnsigned(u32, value, 10) catch {
        std.debug.print("std_runner: ignoring {s}={s}: not a number\n", .{ key, value });
        return null;
    };
}
