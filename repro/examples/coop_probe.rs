//! Tensor cores from WGSL, measured: opens the adapter with wgpu's
//! experimental cooperative-matrix feature, prints the configurations the
//! driver reports, and times a product C = X Y^T (X n x d, Y m x d, f32 in
//! and out) through 16 x 16 cooperative matrices in two precisions:
//!
//! - `f16`: one f16 x f16 -> f32 product per tile (TF32-like accuracy);
//! - `split`: each f32 operand as hi = f16(x) plus lo = f16(x - hi), and
//!   C += hi_x hi_y + hi_x lo_y + lo_x hi_y in the f32 accumulator (three
//!   products; single-precision accuracy for data of one scale, Ootomo and
//!   Yokota 2022).
//!
//! Each result is checked against an f64 product on sampled rows. Needs a
//! GPU whose driver has `VK_KHR_cooperative_matrix`; exits 0 with a message
//! where there is none (software Vulkan has none).
//!
//! `cargo run --release -p gramian-repro --example coop_probe [-- --quick | --validate]`
//! (the engine's own cooperative variants are timed by `gpu_variants`).

use std::time::Instant;
use wgpu::util::DeviceExt;

const BM: u32 = 64;
const BN: u32 = 64;
const BK: u32 = 32;
/// Row stride of the staged f16 tiles (elements): BK plus padding, a
/// multiple of 8 so every 16 x 16 load starts 16-byte aligned.
const SA: u32 = 40;

/// The product shader: one workgroup of 4 subgroups per 64 x 64 tile of C,
/// each subgroup 32 x 32 (2 x 2 cooperative tiles). `split` selects the
/// three-product f32-accurate form.
pub fn shader(split: bool) -> String {
    let lo_stage = if split {
        "let lx = vec4<f16>(vx - vec4<f32>(hx)); let ly = vec4<f16>(vy - vec4<f32>(hy));
        for (var e = 0u; e < 4u; e++) { a_lo[ra * SA + ca + e] = lx[e]; b_lo[ra * SA + ca + e] = ly[e]; }"
    } else {
        ""
    };
    let lo_mma = if split {
        "let al0 = coopLoadT<TileA>(&a_lo[(wm + 0u) * SA + kk], SA);
            let al1 = coopLoadT<TileA>(&a_lo[(wm + 16u) * SA + kk], SA);
            let bl0 = coopLoad<TileB>(&b_lo[(wn + 0u) * SA + kk], SA);
            let bl1 = coopLoad<TileB>(&b_lo[(wn + 16u) * SA + kk], SA);
            c00 = coopMultiplyAdd(ah0, bl0, c00); c00 = coopMultiplyAdd(al0, bh0, c00);
            c01 = coopMultiplyAdd(ah0, bl1, c01); c01 = coopMultiplyAdd(al0, bh1, c01);
            c10 = coopMultiplyAdd(ah1, bl0, c10); c10 = coopMultiplyAdd(al1, bh0, c10);
            c11 = coopMultiplyAdd(ah1, bl1, c11); c11 = coopMultiplyAdd(al1, bh1, c11);"
    } else {
        ""
    };
    let lo_decl = if split { "var<workgroup> a_lo: array<f16, 2560>;\nvar<workgroup> b_lo: array<f16, 2560>;" } else { "" };
    format!(
        "enable f16;
enable wgpu_cooperative_matrix;
alias TileA = coop_mat16x16<f16, A>;
alias TileB = coop_mat16x16<f16, B>;
alias TileC = coop_mat16x16<f32, C>;
struct Dims {{ n: u32, m: u32, d: u32, pad: u32 }}
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> y: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;
const SA: u32 = {SA}u;
var<workgroup> a_hi: array<f16, 2560>;
var<workgroup> b_hi: array<f16, 2560>;
{lo_decl}
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sg: u32) {{
    let r0 = wg.y * {BM}u;
    let c0 = wg.x * {BN}u;
    let wm = (sg / 2u) * 32u;
    let wn = (sg % 2u) * 32u;
    var c00: TileC = TileC();
    var c01: TileC = TileC();
    var c10: TileC = TileC();
    var c11: TileC = TileC();
    let d4 = dims.d / 4u;
    for (var k0 = 0u; k0 < dims.d; k0 += {BK}u) {{
        for (var j = 0u; j < 4u; j++) {{
            let i = t + 128u * j;
            let ra = i / 8u;
            let ca = (i % 8u) * 4u;
            let vx = x[(r0 + ra) * d4 + k0 / 4u + i % 8u];
            let vy = y[(c0 + ra) * d4 + k0 / 4u + i % 8u];
            let hx = vec4<f16>(vx);
            let hy = vec4<f16>(vy);
            for (var e = 0u; e < 4u; e++) {{ a_hi[ra * SA + ca + e] = hx[e]; b_hi[ra * SA + ca + e] = hy[e]; }}
            {lo_stage}
        }}
        workgroupBarrier();
        for (var kk = 0u; kk < {BK}u; kk += 16u) {{
            let ah0 = coopLoadT<TileA>(&a_hi[(wm + 0u) * SA + kk], SA);
            let ah1 = coopLoadT<TileA>(&a_hi[(wm + 16u) * SA + kk], SA);
            let bh0 = coopLoad<TileB>(&b_hi[(wn + 0u) * SA + kk], SA);
            let bh1 = coopLoad<TileB>(&b_hi[(wn + 16u) * SA + kk], SA);
            {lo_mma}
            c00 = coopMultiplyAdd(ah0, bh0, c00);
            c01 = coopMultiplyAdd(ah0, bh1, c01);
            c10 = coopMultiplyAdd(ah1, bh0, c10);
            c11 = coopMultiplyAdd(ah1, bh1, c11);
        }}
        workgroupBarrier();
    }}
    // Each stored matrix, index and the stride as named values: naga's SPIR-V
    // writer needs them emitted before the store.
    let m = dims.m;
    let base = (r0 + wm) * m + c0 + wn;
    let s00 = c00;
    let s01 = c01;
    let s10 = c10;
    let s11 = c11;
    let i01 = base + 16u;
    let i10 = base + 16u * m;
    let i11 = i10 + 16u;
    coopStoreT(s00, &c[base], m);
    coopStoreT(s01, &c[i01], m);
    coopStoreT(s10, &c[i10], m);
    coopStoreT(s11, &c[i11], m);
}}
"
    )
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let validate_only = std::env::args().any(|a| a == "--validate");
    for split in [false, true] {
        let src = shader(split);
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        let caps = naga::valid::Capabilities::COOPERATIVE_MATRIX | naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::SUBGROUP;
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps).validate(&module).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        let mut spv_caps = naga::FastHashSet::default();
        for c in [naga::back::spv::Capability::Shader, naga::back::spv::Capability::CooperativeMatrixKHR, naga::back::spv::Capability::VulkanMemoryModel, naga::back::spv::Capability::Float16, naga::back::spv::Capability::GroupNonUniform, naga::back::spv::Capability::StorageBuffer16BitAccess] {
            spv_caps.insert(c);
        }
        for policy in [naga::proc::BoundsCheckPolicy::Unchecked, naga::proc::BoundsCheckPolicy::Restrict] {
            let policies = naga::proc::BoundsCheckPolicies { index: policy, buffer: policy, ..Default::default() };
            let words = naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options { lang_version: (1, 6), capabilities: Some(spv_caps.clone()), bounds_check_policies: policies, ..Default::default() }, None).expect("SPIR-V");
            println!("naga: split={split} {policy:?} validated, {} SPIR-V words, OpTypeCooperativeMatrixKHR {}", words.len(), words.iter().any(|w| w & 0xffff == 4456));
        }
    }
    if validate_only {
        return;
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() })).expect("adapter");
    let info = adapter.get_info();
    println!("adapter: {} ({:?}, {:?}), driver {} {}", info.name, info.backend, info.device_type, info.driver, info.driver_info);
    let props = adapter.cooperative_matrix_properties();
    for p in &props {
        println!("  cooperative matrix: M={} N={} K={} AB={:?} C={:?} saturating={}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type, p.saturating_accumulation);
    }
    let limits = adapter.limits();
    println!("  workgroup storage {} bytes", limits.max_compute_workgroup_storage_size);
    let need = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    if !adapter.features().contains(need) {
        println!("no cooperative matrices (or no f16 / subgroups) on this adapter: nothing to time");
        return;
    }
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("coop-probe"),
        required_features: need,
        required_limits: limits.clone(),
        // SAFETY: the cooperative-matrix shaders below are validated by naga
        // and their results checked against an f64 product.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        ..Default::default()
    }))
    .expect("device");
    let shapes: &[(u32, u32, u32)] = if quick { &[(128, 128, 64), (1024, 1024, 256)] } else { &[(128, 128, 64), (8192, 8192, 256), (16384, 16384, 256), (8192, 8192, 8192)] };
    for (split, checked) in [(false, true), (false, false), (true, true), (true, false)] {
        let desc = wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(shader(split).into()) };
        // SAFETY: every index the shader forms is in range for the shapes
        // below (multiples of the 64 x 64 x 32 tile), and the checked build
        // of the same shader is timed beside it.
        let module = if checked { device.create_shader_module(desc) } else { unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) } };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor { label: None, layout: None, module: &module, entry_point: Some("main"), compilation_options: Default::default(), cache: None });
        for &(n, m, d) in shapes {
            let mut state = 0x9e3779b97f4a7c15u64;
            let mut rand = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
            };
            let xs: Vec<f32> = (0..n as usize * d as usize).map(|_| rand()).collect();
            let ys: Vec<f32> = (0..m as usize * d as usize).map(|_| rand()).collect();
            let bx = device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(&xs), usage: wgpu::BufferUsages::STORAGE });
            let by = device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(&ys), usage: wgpu::BufferUsages::STORAGE });
            let bytes = n as u64 * m as u64 * 4;
            let bc = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC, mapped_at_creation: false });
            let bu = device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(&[n, m, d, 0u32]), usage: wgpu::BufferUsages::UNIFORM });
            let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: bx.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: by.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: bc.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: bu.as_entire_binding() },
                ],
            });
            let run = |reps: u32| {
                let mut enc = device.create_command_encoder(&Default::default());
                for _ in 0..reps {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&pipeline);
                    pass.set_bind_group(0, &bind, &[]);
                    pass.dispatch_workgroups(m / BN, n / BM, 1);
                }
                queue.submit([enc.finish()]);
                device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
            };
            run(1);
            let reps = 5;
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t = Instant::now();
                run(reps);
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            // Check sampled rows against f64.
            let rows: Vec<u32> = (0..8).map(|i| (i * 7919 + 3) % n).collect();
            let staging = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: m as u64 * 4 * rows.len() as u64, usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, mapped_at_creation: false });
            let mut enc = device.create_command_encoder(&Default::default());
            for (k, &r) in rows.iter().enumerate() {
                enc.copy_buffer_to_buffer(&bc, r as u64 * m as u64 * 4, &staging, k as u64 * m as u64 * 4, m as u64 * 4);
            }
            queue.submit([enc.finish()]);
            staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
            device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
            let got: Vec<f32> = bytemuck::cast_slice(&staging.slice(..).get_mapped_range().expect("mapped")).to_vec();
            let (mut max_abs, mut scale) = (0.0f64, 0.0f64);
            for (k, &r) in rows.iter().enumerate() {
                for j in 0..m as usize {
                    let mut s = 0.0f64;
                    let mut a = 0.0f64;
                    for l in 0..d as usize {
                        let p = xs[r as usize * d as usize + l] as f64 * ys[j * d as usize + l] as f64;
                        s += p;
                        a += p.abs();
                    }
                    max_abs = max_abs.max((got[k * m as usize + j] as f64 - s).abs());
                    scale = scale.max(a);
                }
            }
            let flops = 2.0 * n as f64 * m as f64 * d as f64;
            println!(
                "coop {:5} {:9} {n}x{m}x{d}: {:8.3} ms, {:7.1} TFLOP/s (products counted once), max |err| / max sum|x y| = {:.2e}",
                if split { "split" } else { "f16" },
                if checked { "checked" } else { "unchecked" },
                best * 1e3,
                flops / best / 1e12,
                max_abs / scale
            );
        }
    }
}
