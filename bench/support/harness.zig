//! The measuring harness shared by `examples/demo.zig` and every `bench/*.zig` program.
//!
//! Each measurement runs in a child process of the program (see `subprocess.zig` for why): the
//! parent re-executes itself as `<program> --child key=value...`, the child builds the runtime
//! named by `runtime=threaded|weft`, runs one scenario against the resulting `std.Io`, prints
//! the scenario's result as `key=value` words on stdout and exits. The parent adds the child's
//! peak RSS and prints one line:
//!
//!     bench=<name> <config key=value...> status=ok <result key=value...> peak_rss_kib=<n>
//!
//! Keys carry their unit (`wall_ns`, `ns_per_round`, `peak_rss_kib`), so every line is
//! self-describing and can be grepped or split on spaces and `=`. A measurement that did not
//! complete says so instead: `status=timeout`, `status=crashed signal=SEGV`,
//! `status=failed exit=1 error=<name>`.
//!
//! This is a module (wired in build.zig) rather than a file next to each program because a
//! relative `@import` cannot leave the importing program's folder, and the demo lives in
//! `examples/` while the benchmarks live in `bench/`.
//!
//! The harness is generic over the weft module (`Backend(weft)`, `childMain(weft, ...)`) so that
//! it does not import weft itself: the programs pass in their `@import("weft")`.
const std = @import("std");
const assert = std.debug.assert;

pub const subprocess = @import("subprocess.zig");
pub const sleep_seed = @import("sleep_seed.zig");
pub const monotonicNs = subprocess.monotonicNs;

/// Which `std.Io` implementation a measurement runs on.
pub const IoKind = enum { threaded, weft };

/// Marks a child invocation; it must be the first argument after argv[0].
pub const child_flag = "--child";

/// The `std.Io` under test, owned by the child process that measures it.
pub fn Backend(comptime weft: type) type {
    return union(IoKind) {
        threaded: std.Io.Threaded,
        weft: weft.Runtime,

        const Self = @This();

        /// Builds the runtime named by `runtime=`. For weft, `executors=`, `backend=` (`io_uring`
        /// or `epoll`: `Options.backend`), `cpu_threads=` (the
        /// CPU lane of `Runtime.compute`), `pinned=` (1: `Options.pinned`), `stack=` (unless
        /// `default`), `stack_kib=` (`stack_size_bytes` in KiB) and `stall_ms=`
        /// (`stall_threshold_ns` in ms, 0 for none) override the defaults of
        /// `weft.Runtime.Options`. Threaded always runs with
        /// its defaults, as a program using `std.process.Init.io` would.
        pub fn init(gpa: std.mem.Allocator, config: Config) !Self {
            switch (try config.enumValue(IoKind, "runtime")) {
                .threaded => return .{ .threaded = .init(gpa, .{}) },
                .weft => {
                    var options: weft.Runtime.Options = .{};
                    if (config.get("executors") != null) {
                        options.executors = try config.int(usize, "executors");
                    }
                    if (config.get("pinned") != null) {
                        options.pinned = switch (try config.int(u1, "pinned")) {
                            0 => false,
                            1 => true,
                        };
                    }
                    if (config.get("backend")) |text| {
                        const Choice = @FieldType(weft.Runtime.Options, "backend");
                        options.backend = std.meta.stringToEnum(Choice, text) orelse
                            return error.ConfigInvalid;
                    }
                    if (config.get("cpu_threads") != null) {
                        options.cpu.threads = try config.int(u32, "cpu_threads");
                    }
                    if (config.get("stack_kib") != null) {
                        options.stack_size_bytes = try config.int(usize, "stack_kib") * 1024;
                    }
                    if (config.get("stall_ms") != null) {
                        const ms = try config.int(u32, "stall_ms");
                        options.stall_threshold_ns =
                            if (ms == 0) null else @as(u64, ms) * std.time.ns_per_ms;
                    }
                    // `stack=default` is accepted so that result lines always name the mode.
                    const stack = config.get("stack") orelse "default";
                    if (!std.mem.eql(u8, stack, "default")) try applyStack(&options, stack);
                    return .{ .weft = try weft.Runtime.init(gpa, options) };
                },
            }
        }

        /// `stack=guarded|dense`: guarded = every stack has a guard page (an overflow faults),
        /// dense = no guard page, a canary checked on every switch. Written against either
        /// spelling of the option (`stack_mode`, or the older `stack_guard = .page | .none`)
        /// so that the programs keep building while weft's options settle.
        fn applyStack(options: *weft.Runtime.Options, stack: []const u8) Config.Error!void {
            const Options = weft.Runtime.Options;
            if (@hasField(Options, "stack_mode")) {
                const Mode = @FieldType(Options, "stack_mode");
                options.stack_mode = std.meta.stringToEnum(Mode, stack) orelse
                    return error.ConfigInvalid;
            } else if (@hasField(Options, "stack_guard")) {
                options.stack_guard = if (std.mem.eql(u8, stack, "guarded"))
                    .page
                else if (std.mem.eql(u8, stack, "dense"))
                    .none
                else
                    return error.ConfigInvalid;
            } else {
                return error.ConfigInvalid;
            }
        }

        /// The Io of the runtime; valid until `deinit`. The backend must not move after this.
        pub fn io(backend: *Self) std.Io {
            return switch (backend.*) {
                .threaded => |*threaded| threaded.io(),
                .weft => |*runtime| runtime.io(),
            };
        }

        pub fn deinit(backend: *Self) void {
            switch (backend.*) {
                .threaded => |*threaded| threaded.deinit(),
                .weft => |*runtime| runtime.deinit(),
            }
        }
    };
}

/// A measurement's configuration: the `key=value` words passed to the child (and echoed in the
/// result line), e.g. `runtime=weft executors=1 tasks=10000`.
pub const Config = struct {
    words: []const []const u8,

    pub const Error = error{ ConfigMissing, ConfigInvalid };

    pub fn get(config: Config, key: []const u8) ?[]const u8 {
        for (config.words) |word| {
            const eq = std.mem.indexOfScalar(u8, word, '=') orelse continue;
            if (std.mem.eql(u8, word[0..eq], key)) return word[eq + 1 ..];
        }
        return null;
    }

    pub fn int(config: Config, comptime T: type, key: []const u8) Error!T {
        const text = config.get(key) orelse return error.ConfigMissing;
        return std.fmt.parseInt(T, text, 10) catch error.ConfigInvalid;
    }

    pub fn enumValue(config: Config, comptime E: type, key: []const u8) Error!E {
        const text = config.get(key) orelse return error.ConfigMissing;
        return std.meta.stringToEnum(E, text) orelse error.ConfigInvalid;
    }
};

/// Child side of a measurement. `measure(io, config)` runs the scenario on the Io named by the
/// config and returns a struct of integer or float fields; they are printed as `name=value`.
/// A `measure(io, config, backend)` also gets the `*Backend(weft)`, for scenarios that call
/// the runtime itself (`Runtime.compute`).
/// On error the child prints `error=<name>` and exits with status 1, so that the parent can
/// show which error the runtime returned.
pub fn childMain(
    comptime weft: type,
    init: std.process.Init,
    args: []const []const u8,
    comptime measure: anytype,
) !void {
    assert(args.len >= 2);
    assert(std.mem.eql(u8, args[1], child_flag));
    const config: Config = .{ .words = args[2..] };

    // The result is reported through the process's own Threaded Io (`init.io`), never through
    // the Io under test, so that a missing file-write path in the runtime cannot hide a result.
    var buffer: [512]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;

    var backend = Backend(weft).init(init.gpa, config) catch |err| return fail(out, err);
    const takes_backend = @typeInfo(@TypeOf(measure)).@"fn".params.len == 3;
    const measured = if (takes_backend)
        measure(backend.io(), config, &backend)
    else
        measure(backend.io(), config);
    const result = measured catch |err| return fail(out, err);
    // Printed before `deinit`, so that a runtime that hangs on shutdown still reports.
    try writeFields(out, result);
    try out.writeByte('\n');
    try out.flush();
    backend.deinit();
}

fn fail(out: *std.Io.Writer, err: anyerror) noreturn {
    out.print("error={t}\n", .{err}) catch {};
    out.flush() catch {};
    std.process.exit(1);
}

/// Prints every field of `result` as ` name=value` (no leading space for the first).
pub fn writeFields(out: *std.Io.Writer, result: anytype) std.Io.Writer.Error!void {
    const fields = @typeInfo(@TypeOf(result)).@"struct".fields;
    inline for (fields, 0..) |field, index| {
        if (index > 0) try out.writeByte(' ');
        const value = @field(result, field.name);
        switch (@typeInfo(field.type)) {
            .int, .comptime_int => try out.print("{s}={d}", .{ field.name, value }),
            .float, .comptime_float => try out.print("{s}={d:.1}", .{ field.name, value }),
            .@"enum" => try out.print("{s}={t}", .{ field.name, value }),
            else => @compileError("unsupported result field type: " ++ @typeName(field.type)),
        }
    }
}

/// Parent side: runs measurements in children and prints their result lines.
pub const Session = struct {
    arena: std.mem.Allocator,
    environ: std.process.Environ,
    out: *std.Io.Writer,
    stdout_buffer: [1024]u8 = undefined,

    /// Runs `<program> --child <config...>` and returns its outcome. The returned `stdout`
    /// points into the session and is valid until the next call.
    pub fn measure(
        session: *Session,
        config: []const []const u8,
        timeout_ns: u64,
    ) subprocess.Error!subprocess.Outcome {
        assert(config.len > 0);
        const args = try session.arena.alloc([]const u8, config.len + 1);
        args[0] = child_flag;
        @memcpy(args[1..], config);
        return subprocess.runSelf(session.arena, .{
            .args = args,
            .environ = session.environ,
            .timeout_ns = timeout_ns,
            .stdout_buffer = &session.stdout_buffer,
        });
    }

    /// Measures in a child and prints one line: `bench=<name> <config> status=... <result>
    /// peak_rss_kib=<n>`. Returns the outcome for callers that also want the numbers.
    pub fn report(
        session: *Session,
        bench: []const u8,
        config: []const []const u8,
        timeout_ns: u64,
    ) !subprocess.Outcome {
        const outcome = try session.measure(config, timeout_ns);
        const out = session.out;
        try out.print("bench={s}", .{bench});
        for (config) |pair| try out.print(" {s}", .{pair});
        const result = std.mem.trim(u8, outcome.stdout, " \n");
        switch (outcome.end) {
            .exited => |code| if (code == 0) {
                try out.print(" status=ok {s}", .{result});
            } else {
                try out.print(" status=failed exit={d}", .{code});
                if (outcome.field("error")) |name| try out.print(" error={s}", .{name});
            },
            .signaled => |signal| try out.print(" status=crashed signal={t}", .{signal}),
            .timed_out => try out.print(" status=timeout timeout_s={d}", .{
                timeout_ns / std.time.ns_per_s,
            }),
        }
        try out.print(" peak_rss_kib={d}\n", .{outcome.rss_kib});
        try out.flush();
        return outcome;
    }

    /// Prints a line for a measurement deliberately not run, with the reason (no spaces).
    pub fn skip(
        session: *Session,
        bench: []const u8,
        config: []const []const u8,
        reason: []const u8,
    ) !void {
        assert(std.mem.indexOfScalar(u8, reason, ' ') == null);
        const out = session.out;
        try out.print("bench={s}", .{bench});
        for (config) |pair| try out.print(" {s}", .{pair});
        try out.print(" status=skipped reason={s}\n", .{reason});
        try out.flush();
    }

    /// Measures `bench` once per runtime in `kinds`, and weft once per count in
    /// `weft_executors`: each config is `runtime=<kind>`, for weft `executors=<n>`, then
    /// `words`. One line per measurement, as `report`.
    pub fn reportEach(
        session: *Session,
        bench: []const u8,
        kinds: []const IoKind,
        weft_executors: []const u64,
        words: []const []const u8,
        timeout_ns: u64,
    ) !void {
        assert(weft_executors.len > 0);
        for (kinds) |kind| {
            const counts: []const u64 = if (kind == .weft) weft_executors else &.{0};
            for (counts) |executors| {
                var config: std.ArrayList([]const u8) = .empty;
                try config.append(session.arena, try session.word("runtime", kind));
                if (kind == .weft) {
                    try config.append(session.arena, try session.word("executors", executors));
                }
                try config.appendSlice(session.arena, words);
                _ = try session.report(bench, config.items, timeout_ns);
            }
        }
    }

    /// `key=value` built in the session's arena, for assembling configs.
    pub fn word(session: *Session, key: []const u8, value: anytype) ![]const u8 {
        const arena = session.arena;
        return switch (@typeInfo(@TypeOf(value))) {
            .int, .comptime_int => std.fmt.allocPrint(arena, "{s}={d}", .{ key, value }),
            .@"enum", .enum_literal => std.fmt.allocPrint(arena, "{s}={t}", .{ key, value }),
            else => std.fmt.allocPrint(arena, "{s}={s}", .{ key, value }),
        };
    }
};

/// The whole `main` of a benchmark program. As a measurement child (`--child ...`) it runs
/// `measure` through `childMain`; otherwise it builds a `Session` on stdout and calls
/// `plan(session, args)`, which chooses the configurations and reports them (`args` holds
/// argv[0] and the program's flags).
///
/// ```
/// pub fn main(init: std.process.Init) !void {
///     return harness.main(weft, init, measure, plan);
/// }
/// ```
pub fn main(
    comptime weft: type,
    init: std.process.Init,
    comptime measure: anytype,
    comptime plan: fn (session: *Session, args: []const []const u8) anyerror!void,
) !void {
    const arena = init.arena.allocator();
    const args = try argsAlloc(arena, init.minimal.args);
    if (isChild(args)) return childMain(weft, init, args, measure);

    var buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    var session: Session = .{
        .arena = arena,
        .environ = init.minimal.environ,
        .out = &stdout.interface,
    };
    try plan(&session, args);
}

/// The runtimes selected by `--io threaded|weft|both` (default: `default`).
pub fn ioKinds(
    args: []const []const u8,
    default: []const IoKind,
) error{InvalidArgs}![]const IoKind {
    const text = flagValue(args, "--io") orelse return default;
    if (std.mem.eql(u8, text, "both")) return &.{ .threaded, .weft };
    if (std.mem.eql(u8, text, "threaded")) return &.{.threaded};
    if (std.mem.eql(u8, text, "weft")) return &.{.weft};
    std.debug.print("--io must be threaded, weft or both, not '{s}'\n", .{text});
    return error.InvalidArgs;
}

/// The argument after `--name`, if `--name` is present.
pub fn flagValue(args: []const []const u8, name: []const u8) ?[]const u8 {
    for (args, 0..) |arg, index| {
        if (!std.mem.eql(u8, arg, name)) continue;
        if (index + 1 < args.len) return args[index + 1];
    }
    return null;
}

/// `--name <unsigned integer>`, or `default` when absent.
pub fn flagInt(args: []const []const u8, name: []const u8, default: u64) error{InvalidArgs}!u64 {
    const text = flagValue(args, name) orelse return default;
    return std.fmt.parseInt(u64, text, 10) catch {
        std.debug.print("{s} needs an unsigned integer, not '{s}'\n", .{ name, text });
        return error.InvalidArgs;
    };
}

pub fn hasFlag(args: []const []const u8, name: []const u8) bool {
    for (args) |arg| if (std.mem.eql(u8, arg, name)) return true;
    return false;
}

/// Whether this process is a measurement child (`<program> --child ...`).
pub fn isChild(args: []const []const u8) bool {
    return args.len >= 2 and std.mem.eql(u8, args[1], child_flag);
}

/// The process's arguments as plain slices (argv[0] included), in `arena`.
pub fn argsAlloc(arena: std.mem.Allocator, args: std.process.Args) ![]const []const u8 {
    const with_sentinel = try args.toSlice(arena);
    const plain = try arena.alloc([]const u8, with_sentinel.len);
    for (plain, with_sentinel) |*dst, src| dst.* = src;
    return plain;
}
