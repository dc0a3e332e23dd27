//! The WGSL kernels the wgpu benchmarks and the pipeline example measure
//! with: tiled matmuls and row softmaxes, each salted so that no two are
//! the same SPIR-V and no driver shares machine code between them. Plain
//! text, so any crate's benches or examples take it without naming a
//! backend.

/// A tiled matmul whose output is scaled by `salt`, so that every kernel
/// is other SPIR-V and no driver can share machine code between them.
pub fn matmul(salt: usize) -> String {
    format!(
        "struct Dims {{ m: u32, n: u32, k: u32 }}
@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
var<workgroup> a_tile: array<f32, 256>;
var<workgroup> b_tile: array<f32, 256>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) local: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>) {{
    let row = group.y * 16u + local.y;
    let column = group.x * 16u + local.x;
    var total = 0.0;
    for (var t = 0u; t < (dims.k + 15u) / 16u; t++) {{
        let a_column = t * 16u + local.x;
        let b_row = t * 16u + local.y;
        a_tile[local.y * 16u + local.x] = select(0.0, a[row * dims.k + a_column], row < dims.m && a_column < dims.k);
        b_tile[local.y * 16u + local.x] = select(0.0, b[b_row * dims.n + column], b_row < dims.k && column < dims.n);
        workgroupBarrier();
        for (var i = 0u; i < 16u; i++) {{
            total += a_tile[local.y * 16u + i] * b_tile[i * 16u + local.x];
        }}
        workgroupBarrier();
    }}
    if row < dims.m && column < dims.n {{
        c[row * dims.n + column] = total * {salt}.0 + exp(total) * 0.001;
    }}
}}
"
    )
}

/// A row softmax whose output is scaled by `salt`, as [`matmul`]'s.
pub fn softmax(salt: usize) -> String {
    format!(
        "struct Shape {{ rows: u32, columns: u32 }}
@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;
var<workgroup> scratch: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) local: u32, @builtin(workgroup_id) group: vec3<u32>) {{
    let start = group.x * shape.columns;
    var found = -3.0e38;
    for (var j = local; j < shape.columns; j += 256u) {{ found = max(found, input[start + j]); }}
    scratch[local] = found;
    workgroupBarrier();
    for (var width = 128u; width > 0u; width /= 2u) {{
        if local < width {{ scratch[local] = max(scratch[local], scratch[local + width]); }}
        workgroupBarrier();
    }}
    let row_max = scratch[0];
    workgroupBarrier();
    var total = 0.0;
    for (var j = local; j < shape.columns; j += 256u) {{ total += exp(input[start + j] - row_max); }}
    scratch[local] = total;
    workgroupBarrier();
    for (var width = 128u; width > 0u; width /= 2u) {{
        if local < width {{ scratch[local] += scratch[local + width]; }}
        workgroupBarrier();
    }}
    for (var j = local; j < shape.columns; j += 256u) {{
        output[start + j] = exp(input[start + j] - row_max) / scratch[0] * {salt}.0;
    }}
}}
"
    )
}

/// What `make` builds of each of `count` salted sources no earlier `round`
/// had: `make(salt, source)`, a matmul for every even index and a softmax
/// for every odd one, salted `round * 100_000 + index + 1`.
pub fn salted<K>(round: usize, count: usize, make: impl Fn(usize, String) -> K) -> Vec<K> {
    (0..count)
        .map(|index| {
            let salt = round * 100_000 + index + 1;
            let source = if index % 2 == 0 {
                matmul(salt)
            } else {
                softmax(salt)
            };
            make(salt, source)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::salted;

    #[test]
    fn every_kernel_of_every_round_is_other_text() {
        let sources: Vec<(usize, String)> = [0, 1]
            .into_iter()
            .flat_map(|round| salted(round, 4, |salt, source| (salt, source)))
            .collect();
        let salts: Vec<usize> = sources.iter().map(|(salt, _)| *salt).collect();
        assert_eq!(salts, [1, 2, 3, 4, 100_001, 100_002, 100_003, 100_004]);
        let texts: std::collections::HashSet<&str> =
            sources.iter().map(|(_, source)| source.as_str()).collect();
        assert_eq!(texts.len(), sources.len(), "each salt is other text");
        assert!(sources[0].1.contains("a_tile") && sources[1].1.contains("row_max"));
        assert!(
            sources[2]
                .1
                .contains("c[row * dims.n + column] = total * 3.0")
        );
    }
}
