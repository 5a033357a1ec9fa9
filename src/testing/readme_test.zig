//! Keeps the docs true: docs/STD_IO.md's status table has one row per VTable entry, in VTable
//! order, with the status weft really has; the README's usage example is examples/hello.zig,
//! which `./zigw build examples` compiles (and CI runs).
const std = @import("std");
const vtable = @import("../std_io/vtable.zig");

test "docs/STD_IO.md: the status table matches the VTable" {
    @setEvalBranchQuota(100_000);
    const doc = @embedFile("STD_IO.md");
    const fields = @typeInfo(std.Io.VTable).@"struct".fields;
    var rows: usize = 0;
    var lines = std.mem.splitScalar(u8, doc, '\n');
    var field_index: usize = 0;
    // The table under its `| function | status |` header, to its first non-row line: other
    // tables' rows may start with a name in backticks too.
    while (lines.next()) |line| {
        if (std.mem.eql(u8, line, "| function | status |")) break;
    } else return error.TestStatusTableMissing;
    _ = lines.next(); // the |---|---| rule
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, "| `")) break;
        try std.testing.expect(field_index < fields.len);
        var buffer: [128]u8 = undefined;
        inline for (fields, 0..) |field, i| {
            if (i == field_index) {
                const expected = try std.fmt.bufPrint(&buffer, "| `{s}` | {t} |", .{
                    field.name, vtable.status(field.name),
                });
                try std.testing.expectEqualStrings(expected, line);
            }
        }
        field_index += 1;
        rows += 1;
    }
    try std.testing.expectEqual(fields.len, rows);
}

test "README: the usage example is examples/hello.zig, verbatim" {
    const readme = @embedFile("README.md");
    const example = @embedFile("hello.zig");
    const block = "```zig\n" ++ example ++ "```\n";
    try std.testing.expect(std.mem.indexOf(u8, readme, block) != null);
}
