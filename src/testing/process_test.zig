//! std.process on weft: run with captured output, spawn, wait, kill, and cancel of a wait.
//! Runs on both backends (`WEFT_BACKEND`). Children are /bin/sh one-liners.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");

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
            var child = try std.process.spawn(io, .{ .argv = argv });
            const pid = child.id.?;
            var waiting = try io.concurrent(waitFor, .{ io, &child });
            try io.sleep(.fromMilliseconds(5), .awake); // let it block (not required to)
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
                .stdout = .pipe,
            });
            defer child.kill(io);
            var reading = try io.concurrent(readAll, .{ io, child.stdout.? });
            try io.sleep(.fromMilliseconds(5), .awake);
            try testing.expectError(error.Canceled, reading.cancel(io));
        }
    }.body);
}
