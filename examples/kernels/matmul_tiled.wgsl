// kiln entry: main
// kiln specialize: TILE=8
// kiln specialize: TILE=16
//
// C = A B for row-major A (m x k) and B (k x n), in TILE x TILE tiles: a
// workgroup stages one tile of A and one of B in workgroup memory at a time,
// so each element of A and B is read from memory k / TILE times instead of
// k times. TILE is at most 16.

override TILE: u32 = 16;

struct Dims {
    m: u32,
    n: u32,
    k: u32,
}

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> a_tile: array<f32, 256>;
var<workgroup> b_tile: array<f32, 256>;

@compute @workgroup_size(TILE, TILE)
fn main(
    @builtin(local_invocation_id) local: vec3<u32>,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let row = group.y * TILE + local.y;
    let column = group.x * TILE + local.x;
    var total = 0.0;
    let tiles = (dims.k + TILE - 1u) / TILE;
    for (var t = 0u; t < tiles; t++) {
        let a_column = t * TILE + local.x;
        let b_row = t * TILE + local.y;
        var a_value = 0.0;
        if row < dims.m && a_column < dims.k {
            a_value = a[row * dims.k + a_column];
        }
        var b_value = 0.0;
        if b_row < dims.k && column < dims.n {
            b_value = b[b_row * dims.n + column];
        }
        a_tile[local.y * TILE + local.x] = a_value;
        b_tile[local.y * TILE + local.x] = b_value;
        workgroupBarrier();
        for (var i = 0u; i < TILE; i++) {
            total += a_tile[local.y * TILE + i] * b_tile[i * TILE + local.x];
        }
        workgroupBarrier();
    }
    if row < dims.m && column < dims.n {
        c[row * dims.n + column] = total;
    }
}
