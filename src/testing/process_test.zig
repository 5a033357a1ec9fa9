//! std.process on weft: run with captured output, spawn, wait, kill, and cancel of a wait.
//! Runs on both backends (`WEFT_BACKEND`). Children are /bin/sh one-liners.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");
const qemu = @import("qemu.zig");

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

test "process: run captures stdout and stderr and the exit code" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const result = try std.process.run(testing.allocator, io, .{
                .argv = &.{ "/bin/sh", "-c", "echo out; echo err >&2; exit 3" },
            });
            defer testing.allocator.free(result.stdout);
            defer testing.allocator.free(result.stderr);
            try testing.expectEqualStrings("out\n", result.stdout);
            try testing.expectEqualStrings("err\n", result.stderr);
            try testing.expectEqual(std.process.Child.Term{ .exited = 3 }, result.term);
        }
    }.body);
}

test "process: run captures output larger than a pipe buffer on both streams" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            // 200 KB on each stream, interleaved: the child blocks unless both are drained.
            const line = "0123456789" ** 10; // echo adds a newline: 101 bytes
            const script = "i=0; while [ $i -lt 2000 ]; do " ++
                "echo " ++ line ++ "; echo " ++ line ++ " >&2; i=$((i+1)); done";
            const result = try std.process.run(testing.allocator, io, .{
                .argv = &.{ "/bin/sh", "-c", script },
            });
            defer testing.allocator.free(result.stdout);
            defer testing.allocator.free(result.stderr);
            try testing.expectEqual(@as(usize, 2000 * 101), result.stdout.len);
            try testing.expectEqual(@as(usize, 2000 * 101), result.stderr.len);
            try testing.expectEqual(std.process.Child.Term{ .exited = 0 }, result.term);
        }
    }.body);
}

test "process: kill a sleeping child, then its wait is over" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var child = try std.process.spawn(io, .{
                .argv = &.{ "/bin/sh", "-c", "exec sleep 100" },
                .stdin = .ignore,
                .stdout = .ignore,
            });
            child.kill(io);
            try testing.expectEqual(@as(?std.process.Child.Id, null), child.id);
        }
    }.body);
}

test "process: wait reports a signal, and resource usage when asked" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var child = try std.process.spawn(io, .{
                .argv = &.{ "/bin/sh", "-c", "kill -KILL $$" },
                .request_resource_usage_statistics = true,
            });
            const term = try child.wait(io);
            try testing.expectEqual(std.process.Child.Term{ .signal = .KILL }, term);
            try testing.expect(child.resource_usage_statistics.getMaxRss() != null);
        }
    }.body);
}

test "process: a blocked wait is canceled, and the child can still be killed" {
    try withRuntime(struct {
        fn waitFor(io: Io, child: *std.process.Child) !std.process.Child.Term {
            return child.wait(io);
        }
        fn body(io: Io) !void {
            const argv: []const []const u8 = &.{ "/bin/sh", "-c", "exec sleep 100" };
            // None of our stdio: a child outliving a crashed test would hold the test runner's
            // pipes open, and the build runner would report a timeout, not the crash.
            var child = try std.process.spawn(io, .{
                .argv = argv,
                .stdin = .ignore,
                .stdout = .ignore,
                .stderr = .ignore,
            });
            const pid = child.id.?;
            var waiting = try io.concurrent(waitFor, .{ io, &child });
            try parked.waitParked(io, &waiting, .cancelable);
            try testing.expectError(error.Canceled, waiting.cancel(io));
            // The canceled wait cleaned up the handle (as on std.Io.Threaded); reap by hand.
            _ = std.os.linux.kill(pid, .KILL);
            var status: u32 = 0;
            _ = std.os.linux.wait4(pid, &status, 0, null);
        }
    }.body);
}

test "process: a pipe read from a child is canceled" {
    try withRuntime(struct {
        fn readAll(io: Io, file: Io.File) !usize {
            var buffer: [16]u8 = undefined;
            var reader = file.readerStreaming(io, &buffer);
            return reader.interface.discardRemaining() catch |err| switch (err) {
                error.ReadFailed => return reader.err.?,
            };
        }
        fn body(io: Io) !void {
            var child = try std.process.spawn(io, .{
                .argv = &.{ "/bin/sh", "-c", "exec sleep 100" },
                .stdin = .ignore, // none of our stdio (see the test above)
                .stdout = .pipe,
                .stderr = .ignore,
            });
            defer child.kill(io);
            var reading = try io.concurrent(readAll, .{ io, child.stdout.? });
            try parked.waitParked(io, &reading, .cancelable);
            try testing.expectError(error.Canceled, reading.cancel(io));
        }
    }.body);
}

test "process: currentPath, setCurrentDir and setCurrentPath (restored after)" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var before_buffer: [std.fs.max_path_bytes]u8 = undefined;
            const before = before_buffer[0..try std.process.currentPath(io, &before_buffer)];
            defer std.process.setCurrentPath(io, before) catch unreachable;
            try std.process.setCurrentPath(io, "/tmp");
            var buffer: [std.fs.max_path_bytes]u8 = undefined;
            var n = try std.process.currentPath(io, &buffer);
            try testing.expectEqualStrings("/tmp", buffer[0..n]);
            var root = try Io.Dir.cwd().openDir(io, "/", .{});
            defer root.close(io);
            try std.process.setCurrentDir(io, root);
            n = try std.process.currentPath(io, &buffer);
            try testing.expectEqualStrings("/", buffer[0..n]);
            var tiny: [1]u8 = undefined;
            try testing.expectError(error.NameTooLong, std.process.currentPath(io, &tiny));
            const missing = std.process.setCurrentPath(io, "/nonexistent-weft/x");
            try testing.expectError(error.FileNotFound, missing);
            try testing.expectError(error.NotDir, std.process.setCurrentPath(io, "/dev/null"));
        }
    }.body);
}

test "process: executablePath and openExecutable name this test binary" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [std.fs.max_path_bytes]u8 = undefined;
            const path = buffer[0..try std.process.executablePath(io, &buffer)];
            try testing.expect(std.fs.path.isAbsolute(path));
            const file = try std.process.openExecutable(io, .{});
            defer file.close(io);
            const by_path = try Io.Dir.cwd().statFile(io, path, .{});
            try testing.expectEqual(by_path.inode, (try file.stat(io)).inode);
            var tiny: [1]u8 = undefined;
            // readlink truncates silently; the caller sees a one-byte path.
            try testing.expectEqual(@as(usize, 1), try std.process.executablePath(io, &tiny));
        }
    }.body);
}

test "process: progressParentFile reads ZIG_PROGRESS from the runtime's environment" {
    const with_progress: [:null]const ?[*:0]const u8 = &.{ "A=1", "ZIG_PROGRESS=7" };
    const bad: [:null]const ?[*:0]const u8 = &.{"ZIG_PROGRESS=x"};
    const empty: [:null]const ?[*:0]const u8 = &.{};
    const cases = .{
        .{ with_progress, @as(std.Progress.ParentFileError!i32, 7) },
        .{ bad, @as(std.Progress.ParentFileError!i32, error.UnrecognizedFormat) },
        .{ empty, @as(std.Progress.ParentFileError!i32, error.EnvironmentVariableMissing) },
    };
    inline for (cases) |case| {
        const environ: std.process.Environ = .{ .block = .{ .slice = @constCast(case[0]) } };
        var rt = try Runtime.init(testing.allocator, .{ .environ = environ });
        defer rt.deinit();
        const io = rt.io();
        const handle = if (io.vtable.progressParentFile(io.userdata)) |file|
            file.handle
        else |err|
            err;
        try testing.expectEqual(case[1], handle);
    }
}

test "process: the stderr lock is held across parks, re-entrant, and excludes tasks and threads" {
    try withRuntime(struct {
        const Shared = struct {
            order: std.atomic.Value(u32) = .init(0),
            second_at: u32 = 0,
            thread_at: u32 = 0,
        };
        fn second(io: Io, shared: *Shared) !void {
            _ = try io.lockStderr(&.{}, .no_color);
            defer io.unlockStderr();
            shared.second_at = shared.order.fetchAdd(1, .monotonic);
        }
        fn thread(io: Io, shared: *Shared) void {
            _ = io.lockStderr(&.{}, .no_color) catch unreachable; // a thread is never canceled
            defer io.unlockStderr();
            shared.thread_at = shared.order.fetchAdd(1, .monotonic);
        }
        fn body(io: Io) !void {
            var shared: Shared = .{};
            var buffer: [16]u8 = undefined;
            const locked = try io.lockStderr(&buffer, .no_color);
            try testing.expectEqual(Io.Terminal.Mode.no_color, locked.terminal_mode);
            // Re-entrant for its holder, as std.Io.Threaded's is for a thread.
            _ = try io.lockStderr(&buffer, null);
            io.unlockStderr();
            var waiting = try io.concurrent(second, .{ io, &shared });
            const other = try std.Thread.spawn(.{}, thread, .{ io, &shared });
            // Parks while holding the lock (and may resume on another executor thread).
            for (0..5) |_| try io.sleep(.fromMilliseconds(1), .awake);
            // The other task contends: parked on the lock (uncancelably, as lockStderr waits).
            try parked.waitParked(io, &waiting, .uncancelable);
            try testing.expect(try io.vtable.tryLockStderr(io.userdata, null) != null);
            io.unlockStderr();
            _ = shared.order.fetchAdd(1, .monotonic); // 0: still ours
            io.unlockStderr();
            try waiting.await(io);
            other.join();
            try testing.expect(shared.second_at >= 1 and shared.thread_at >= 1);
            // Free again: tryLock succeeds, from a task that does not hold it.
            try testing.expect(try io.vtable.tryLockStderr(io.userdata, .no_color) != null);
            io.unlockStderr();
        }
    }.body);
}

test "process: tryLockStderr fails while another task holds the lock" {
    try withRuntime(struct {
        fn tryOther(io: Io) !bool {
            const locked = try io.vtable.tryLockStderr(io.userdata, .no_color) orelse return false;
            _ = locked;
            io.unlockStderr();
            return true;
        }
        fn body(io: Io) !void {
            _ = try io.lockStderr(&.{}, .no_color);
            var held = try io.concurrent(tryOther, .{io});
            try testing.expect(!try held.await(io));
            io.unlockStderr();
            var free = try io.concurrent(tryOther, .{io});
            try testing.expect(try free.await(io));
        }
    }.body);
}

test "process: spawn with pipes on every stream, searched in PATH" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var child = try std.process.spawn(io, .{
                .argv = &.{ "sh", "-c", "read line; echo \"got $line\"; echo oops >&2; exit 4" },
                .stdin = .pipe,
                .stdout = .pipe,
                .stderr = .pipe,
            });
            defer if (child.id != null) child.kill(io);
            try child.stdin.?.writeStreamingAll(io, "hello\n");
            child.stdin.?.close(io);
            child.stdin = null;
            var buffer: [64]u8 = undefined;
            var reader = child.stdout.?.readerStreaming(io, &buffer);
            const out = try reader.interface.allocRemaining(testing.allocator, .unlimited);
            defer testing.allocator.free(out);
            try testing.expectEqualStrings("got hello\n", out);
            var err_reader = child.stderr.?.readerStreaming(io, &buffer);
            const err_out = try err_reader.interface.allocRemaining(testing.allocator, .unlimited);
            defer testing.allocator.free(err_out);
            try testing.expectEqualStrings("oops\n", err_out);
            try testing.expectEqual(std.process.Child.Term{ .exited = 4 }, try child.wait(io));
        }
    }.body);
}

test "process: spawn sets the working directory, environment and ignored streams" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var environ: std.process.Environ.Map = .init(testing.allocator);
            defer environ.deinit();
            try environ.put("WEFT_TEST_VALUE", "42");
            const result = try std.process.run(testing.allocator, io, .{
                .argv = &.{ "/bin/sh", "-c", "pwd; echo $WEFT_TEST_VALUE; cat" },
                .cwd = .{ .path = "/tmp" },
                .environ_map = &environ,
            });
            defer testing.allocator.free(result.stdout);
            defer testing.allocator.free(result.stderr);
            try testing.expectEqualStrings("/tmp\n42\n", result.stdout);
            var root = try Io.Dir.cwd().openDir(io, "/", .{});
            defer root.close(io);
            var child = try std.process.spawn(io, .{
                .argv = &.{ "/bin/sh", "-c", "test \"$(pwd)\" = / && exec cat" },
                .cwd = .{ .dir = root },
                .stdin = .ignore,
                .stdout = .ignore,
            });
            try testing.expectEqual(std.process.Child.Term{ .exited = 0 }, try child.wait(io));
        }
    }.body);
}

test "process: children inherit the process's environment by default" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            // The build runs the tests with WEFT_BACKEND set; a child must see it too.
            var buffer: [16]u8 = undefined;
            const expected = os.getEnv("WEFT_BACKEND", &buffer) orelse
                return os.skipTest(@src(), "WEFT_BACKEND unset: run through the build");
            const result = try std.process.run(testing.allocator, io, .{
                .argv = &.{ "sh", "-c", "printf %s \"$WEFT_BACKEND\"" },
            });
            defer testing.allocator.free(result.stdout);
            defer testing.allocator.free(result.stderr);
            try testing.expectEqualStrings(expected, result.stdout);
        }
    }.body);
}

/// Spawns on std.Io.Threaded and on weft and expects the same error from both.
fn expectSameSpawnError(options: std.process.SpawnOptions) !void {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    const expected = if (std.process.spawn(threaded.io(), options)) |spawned| {
        var child = spawned;
        child.kill(threaded.io());
        return error.TestUnexpectedResult;
    } else |err| err;
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try testing.expectError(expected, std.process.spawn(rt.io(), options));
}

test "process: spawn errors are std.Io.Threaded's, and nothing is left behind" {
    try expectSameSpawnError(.{ .argv = &.{"/nonexistent-weft/program"} });
    try expectSameSpawnError(.{ .argv = &.{"weft-no-such-program-anywhere"} });
    try expectSameSpawnError(.{ .argv = &.{"/tmp"}, .stdout = .pipe });
    try expectSameSpawnError(.{ .argv = &.{"/etc/hostname"}, .stdin = .pipe });
    try expectSameSpawnError(.{ .argv = &.{"/bin/sh"}, .cwd = .{ .path = "/nonexistent-weft" } });
    try withRuntime(struct {
        fn body(io: Io) !void {
            const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
            var status: u32 = 0;
            // Reap what Threaded's failed spawns left behind (it does not reap them), and wait
            // for any child another test left running: whatever exits below must be weft's.
            var polls: u32 = 0;
            while (true) {
                const rc = linux.wait4(-1, &status, linux.W.NOHANG, null);
                if (linux.errno(rc) == .CHILD) break;
                if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
                if (rc != 0) continue;
                polls += 1;
                if (polls == 500) return os.skipTest(@src(), "a child of another test runs on");
                try io.sleep(.fromMilliseconds(10), .awake);
            }
            const missing = std.process.spawn(io, .{ .argv = &.{"/nonexistent"}, .stdout = .pipe });
            try testing.expectError(error.FileNotFound, missing);
            // weft reaped its failed child: no exited child is left to wait for.
            const rc = linux.wait4(-1, &status, linux.W.NOHANG, null);
            try testing.expect(rc == 0 or linux.errno(rc) == .CHILD);
        }
    }.body);
}

test "process: spawnPath runs argv[0] relative to a directory, never searched" {
    try qemu.skipUnderQemu(.execveat, @src());
    try withRuntime(struct {
        fn body(io: Io) !void {
            var bin = try Io.Dir.cwd().openDir(io, "/bin", .{});
            defer bin.close(io);
            var child = try std.process.spawnPath(io, bin, .{ .argv = &.{ "sh", "-c", "exit 5" } });
            try testing.expectEqual(std.process.Child.Term{ .exited = 5 }, try child.wait(io));
            var tmp = try Io.Dir.cwd().openDir(io, "/tmp", .{});
            defer tmp.close(io);
            const missing = std.process.spawnPath(io, tmp, .{ .argv = &.{"sh"} });
            try testing.expectError(error.FileNotFound, missing);
        }
    }.body);
}

/// Forks; the child calls `replace` (or `replacePath` in /bin) and, if it returns, exits with
/// 101 for `error.FileNotFound`, 102 for another error. Returns the child's exit code.
/// The child touches no loop (the rings belong to the parent): only replace's own syscalls.
fn replaceInChild(io: Io, comptime how: enum { search, path }, argv: []const []const u8) !u8 {
    const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
    const bin_rc = linux.open("/bin", .{ .DIRECTORY = true, .CLOEXEC = true }, 0);
    try testing.expectEqual(linux.E.SUCCESS, linux.errno(bin_rc));
    const bin: Io.Dir = .{ .handle = @intCast(bin_rc) };
    defer _ = linux.close(bin.handle);
    const pid: linux.pid_t = @intCast(linux.fork());
    if (pid == 0) {
        const err = switch (how) {
            .search => std.process.replace(io, .{ .argv = argv }),
            .path => std.process.replacePath(io, bin, .{ .argv = argv }),
        };
        linux.exit_group(if (err == error.FileNotFound) 101 else 102);
    }
    var status: u32 = 0;
    while (std.os.linux.errno(linux.wait4(pid, &status, 0, null)) == .INTR) {}
    return switch (Io.Threaded.statusToTerm(status)) {
        .exited => |code| code,
        else => error.TestUnexpectedResult,
    };
}

test "process: replace and replacePath, in a forked child" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const exit7 = &.{ "sh", "-c", "exit 7" };
            try testing.expectEqual(@as(u8, 7), try replaceInChild(io, .search, exit7));
            const missing = &.{"weft-no-such-program-anywhere"};
            try testing.expectEqual(@as(u8, 101), try replaceInChild(io, .search, missing));
            // `replace` (execve) was checked; `replacePath` needs execveat.
            try qemu.skipUnderQemu(.execveat, @src());
            const exit8 = &.{ "sh", "-c", "exit 8" };
            try testing.expectEqual(@as(u8, 8), try replaceInChild(io, .path, exit8));
            try testing.expectEqual(@as(u8, 101), try replaceInChild(io, .path, missing));
        }
    }.body);
}
