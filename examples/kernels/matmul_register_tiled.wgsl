// kiln entry: main
// kiln specialize: ROWS_PER_THREAD=2
// kiln specialize: ROWS_PER_THREAD=4
//
// C = A B, each invocation computing ROWS_PER_THREAD rows of one column of
// C from a 16-wide tile of B staged in workgroup memory.

override ROWS_PER_THREAD: u32 = 2;

struct Dims {
    m: u32,
    n: u32,
    k: u32,
}

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> b_tile: array<f32, 256>;

@compute @workgroup_size(16, 16)
fn main(
    @builtin(local_invocation_id) local: vec3<u32>,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let column = group.x * 16u + local.x;
    let first_row = (group.y * 16u + local.y) * ROWS_PER_THREAD;
    var totals = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    let tiles = (dims.k + 15u) / 16u;
    for (var t = 0u; t < tiles; t++) {
        let b_row = t * 16u + local.y;
        var b_value = 0.0;
        if b_row < dims.k && column < dims.n {
            b_value = b[b_row * dims.n + column];
        }
        b_tile[local.y * 16u + local.x] = b_value;
        workgroupBarrier();
        for (var r = 0u; r < ROWS_PER_THREAD; r++) {
            let row = first_row + r;
            if row < dims.m {
                for (var i = 0u; i < 16u; i++) {
                    let a_column = t * 16u + i;
                    if a_column < dims.k {
                        totals[r] += a[row * dims.k + a_column] * b_tile[i * 16u + local.x];
                    }
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < ROWS_PER_THREAD; r++) {
        let row = first_row + r;
        if row < dims.m && column < dims.n {
            c[row * dims.n + column] = totals[r];
        }
    }
}
