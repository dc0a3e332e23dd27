// kiln entry: main
// kiln specialize: TILE=8
// kiln specialize: TILE=16
//
// Transpose of a row-major rows x columns matrix through a TILE x TILE tile
// in workgroup memory, padded by one column so that the column-wise reads
// hit different banks. Reads and writes are both along rows. TILE is at
// most 16.

override TILE: u32 = 16;

struct Shape {
    rows: u32,
    columns: u32,
}

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;

var<workgroup> tile: array<f32, 272>;

@compute @workgroup_size(TILE, TILE)
fn main(
    @builtin(local_invocation_id) local: vec3<u32>,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let column = group.x * TILE + local.x;
    let row = group.y * TILE + local.y;
    if row < shape.rows && column < shape.columns {
        tile[local.y * (TILE + 1u) + local.x] = input[row * shape.columns + column];
    }
    workgroupBarrier();
    let out_column = group.y * TILE + local.x;
    let out_row = group.x * TILE + local.y;
    if out_row < shape.columns && out_column < shape.rows {
        output[out_row * shape.rows + out_column] = tile[local.x * (TILE + 1u) + local.y];
    }
}
