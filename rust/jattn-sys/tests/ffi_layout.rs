//! The hand-written declarations of `src/lib.rs` against `jattn.h`: the repository's ABI probe
//! (`tests/abi/jattn_abi_probe.c`, which the Python package's ABI test reads too), compiled with
//! the header, prints the size, alignment and field offsets of every struct, every status code
//! and the value of every other enumerator and macro; the same list is made from the Rust
//! declarations, and the two must be equal. A third check reads the header itself, so that a
//! struct, enumerator or function added to it and missing here fails the test.

use jattn_sys::*;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory of the jattn.h this crate was built against (set by build.rs).
const INCLUDE_DIR: &str = env!("JATTN_SYS_INCLUDE_DIR");

macro_rules! record {
    (struct $lines:ident, $t:ident $(, $f:ident)*) => {{
        $lines.push(format!("sizeof {} {}", stringify!($t), size_of::<$t>()));
        $lines.push(format!("alignof {} {}", stringify!($t), align_of::<$t>()));
        $( $lines.push(format!("offsetof {}.{} {}", stringify!($t), stringify!($f), offset_of!($t, $f))); )*
    }};
    (value $lines:ident $(, $c:ident)*) => {{
        $( $lines.push(format!("value {} {}", stringify!($c), i64::from($c))); )*
    }};
    (status $lines:ident $(, $c:ident)*) => {{
        $( $lines.push(format!("status {} {}", stringify!($c), i64::from($c))); )*
    }};
}

/// The probe's lines, from the Rust declarations.
fn rust_lines() -> Vec<String> {
    let mut l = Vec::new();
    record!(struct l, jattn_strides, batch, head, token);
    record!(struct l, jattn_problem, batch, heads, seq_q, seq_kv, head_dim, scale, dtype, q, k, v, out, kv_heads);
    record!(struct l, jattn_exec, backend, precision, memory, threads, cuda_stream, workspace, workspace_bytes,
        alignment);
    record!(struct l, jattn_selection, backend, backend_name, kernel, isa, threads);
    record!(struct l, jattn_backend_info, backend, name, memory, is_gpu, has_backward, auto_rank);
    record!(struct l, jattn_key_padding, kv_len, mask, mask_batch, mask_keys, mask_batch_stride);
    record!(struct l, jattn_mask, padding, causal, block_q, block_kv, num_blocks, cu_seqlens_q, cu_seqlens_kv,
        num_segments, segments_batch_stride, key_bias, key_bias_batch_stride, key_bias_head_stride);
    record!(struct l, jattn_grad_strides, dout, dq, dk, dv);
    record!(struct l, jattn_status);
    record!(struct l, jattn_dtype);
    record!(struct l, jattn_backend);
    record!(struct l, jattn_precision);
    record!(struct l, jattn_memory);
    record!(struct l, jattn_causal);
    record!(struct l, jattn_pass);
    record!(status l, JATTN_OK, JATTN_ERROR_NULL_POINTER, JATTN_ERROR_INVALID_DIMENSION, JATTN_ERROR_OVERFLOW,
        JATTN_ERROR_INVALID_STRIDE, JATTN_ERROR_SELF_OVERLAP, JATTN_ERROR_ALIASING, JATTN_ERROR_INVALID_SCALE,
        JATTN_ERROR_INVALID_ARGUMENT, JATTN_ERROR_UNSUPPORTED, JATTN_ERROR_BACKEND_UNAVAILABLE,
        JATTN_ERROR_WORKSPACE_TOO_SMALL, JATTN_ERROR_OUT_OF_MEMORY, JATTN_ERROR_CUDA, JATTN_ERROR_TRANSPORT);
    record!(value l, JATTN_STATUS_COUNT,
        JATTN_DTYPE_F32, JATTN_DTYPE_BF16, JATTN_DTYPE_F16,
        JATTN_BACKEND_AUTO, JATTN_BACKEND_REF, JATTN_BACKEND_CPU, JATTN_BACKEND_CUDA, JATTN_BACKEND_VK,
        JATTN_BACKEND_COUNT,
        JATTN_PRECISION_F32, JATTN_PRECISION_TF32, JATTN_MEMORY_HOST, JATTN_MEMORY_DEVICE,
        JATTN_CAUSAL_NONE, JATTN_CAUSAL_TOP_LEFT, JATTN_CAUSAL_BOTTOM_RIGHT,
        JATTN_PASS_FORWARD, JATTN_PASS_BACKWARD,
        JATTN_VERSION_MAJOR, JATTN_VERSION_MINOR, JATTN_VERSION_PATCH, JATTN_VERSION_NUMBER);
    l
}

/// Every function the Rust declarations name, with its address (taking it makes the link
/// resolve each one against libjattn).
fn rust_functions() -> Vec<(&'static str, usize)> {
    macro_rules! fns { ($($f:ident),* $(,)?) => { vec![$((stringify!($f), $f as *const () as usize)),*] }; }
    fns![
        jattn_version_number,
        jattn_version_string,
        jattn_status_name,
        jattn_last_error,
        jattn_set_last_error,
        jattn_strides_head_major,
        jattn_strides_token_major,
        jattn_problem_flux,
        jattn_backend_name,
        jattn_backend_info_count,
        jattn_backend_info_at,
        jattn_select,
        jattn_workspace_size,
        jattn_ctx_create,
        jattn_ctx_free,
        jattn_forward,
        jattn_forward_padded,
        jattn_grad_strides_like,
        jattn_backward_select,
        jattn_backward_workspace_size,
        jattn_backward,
        jattn_forward_masked,
        jattn_backward_masked,
        jattn_plan_create,
        jattn_plan_free,
        jattn_plan_selection,
        jattn_plan_workspace_size,
        jattn_plan_forward,
        jattn_plan_backward,
    ]
}

fn header() -> String {
    let path = Path::new(INCLUDE_DIR).join("jattn.h");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Compiles and runs the ABI probe against the header; returns its lines.
fn c_lines() -> Vec<String> {
    let probe = Path::new(env!("JATTN_SYS_ABI_PROBE"));
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jattn_ffi_probe");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(INCLUDE_DIR)
        .arg(probe)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?} (set CC): {e}"));
    assert!(status.success(), "{cc} failed to compile {}", probe.display());
    let output = Command::new(&exe).output().expect("running the probe");
    assert!(output.status.success(), "the probe failed");
    String::from_utf8(output.stdout).expect("UTF-8").lines().map(str::to_owned).collect()
}

#[test]
fn struct_layouts_and_enum_values_match_the_header() {
    let c = c_lines();
    let rust = rust_lines();
    for line in &c {
        assert!(rust.contains(line), "C says `{line}`; the Rust declarations do not (Rust: {rust:#?})");
    }
    for line in &rust {
        assert!(c.contains(line), "Rust says `{line}`; the header does not (C: {c:#?})");
    }
    println!("{} lines of the probe agree", c.len());
}

/// Every `typedef struct`/`typedef enum`, enumerator, status code, `#define JATTN_*` number and
/// `JATTN_API` function of the header is covered by the probe and by the Rust declarations (the
/// sequence-parallel API, libjattn_parallel's, is in jattn_parallel.h and not bound here).
#[test]
fn the_header_declares_nothing_the_bindings_miss() {
    let text = header();
    let rust = rust_lines();
    let names: Vec<String> = rust.iter().filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned)).collect();
    let has = |name: &str| names.iter().any(|n| n == name);

    let mut missing = Vec::new();
    for line in text.lines().map(str::trim) {
        // typedef struct jattn_x {  /  typedef enum jattn_x {
        for kw in ["typedef struct ", "typedef enum "] {
            if let Some(rest) = line.strip_prefix(kw) {
                let name = rest.split_whitespace().next().unwrap_or("");
                if line.ends_with('{') && !has(name) {
                    missing.push(name.to_owned());
                }
            }
        }
        // X(JATTN_FOO, 3, "...")   (a status code, in JATTN_STATUS_LIST)
        if let Some(rest) = line.strip_prefix("X(") {
            let name = rest.split(',').next().unwrap_or("");
            if name.starts_with("JATTN_") && !has(name) {
                missing.push(name.to_owned());
            }
        }
        // JATTN_FOO = 3,   (an enumerator)
        if let Some((name, _)) = line.split_once(" = ") {
            if name.starts_with("JATTN_") && !name.contains(' ') && !has(name) {
                missing.push(name.to_owned());
            }
        }
        // #define JATTN_X_COUNT 14 and the version numbers (not the string helpers)
        if let Some(rest) = line.strip_prefix("#define ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
                let numeric = value.chars().all(|c| c.is_ascii_digit()) || name == "JATTN_VERSION_NUMBER";
                if name.starts_with("JATTN_") && numeric && !has(name) {
                    missing.push(name.to_owned());
                }
            }
        }
    }
    // Functions: `JATTN_API <type> jattn_name(` (the declaration may wrap after the '(').
    let functions = rust_functions();
    let mut declared = 0;
    for decl in text.split("JATTN_API ").skip(1) {
        let head = decl.split('(').next().unwrap_or("");
        let Some(name) = head.split(|c: char| c.is_whitespace() || c == '*').rfind(|s| !s.is_empty()) else {
            continue;
        };
        if !name.starts_with("jattn_") {
            continue; // the visibility macro's own definition lines
        }
        declared += 1;
        if !functions.iter().any(|(n, _)| *n == name) {
            missing.push(format!("{name}()"));
        }
    }
    assert!(missing.is_empty(), "in jattn.h but not in the Rust declarations: {missing:?}");
    assert_eq!(declared, functions.len(), "the header declares {declared} functions, Rust {}", functions.len());
    assert!(functions.iter().all(|(_, address)| *address != 0));
}

#[test]
fn linked_library_is_the_declared_version() {
    // SAFETY: no arguments; the string has static storage.
    let (number, string) = unsafe { (jattn_version_number(), std::ffi::CStr::from_ptr(jattn_version_string())) };
    assert_eq!(number, JATTN_VERSION_NUMBER, "library {string:?}, declarations {JATTN_VERSION_NUMBER}");
    let expected = format!("{JATTN_VERSION_MAJOR}.{JATTN_VERSION_MINOR}.{JATTN_VERSION_PATCH}");
    assert_eq!(string.to_str(), Ok(expected.as_str()));
}

#[test]
fn by_value_returns_match_the_c_helpers() {
    // SAFETY: plain value functions.
    let (hm, tm, p) = unsafe {
        (
            jattn_strides_head_major(24, 1536, 128),
            jattn_strides_token_major(24, 1536, 128),
            jattn_problem_flux(2, 24, 1536, 512, 128),
        )
    };
    assert_eq!(hm, jattn_strides { batch: 24 * 1536 * 128, head: 1536 * 128, token: 128 });
    assert_eq!(tm, jattn_strides { batch: 1536 * 24 * 128, head: 128, token: 24 * 128 });
    assert_eq!(
        (p.batch, p.heads, p.seq_q, p.seq_kv, p.head_dim, p.scale, p.dtype),
        (2, 24, 1536, 512, 128, 0.0, JATTN_DTYPE_F32)
    );
    assert_eq!(p.k, jattn_strides { batch: 24 * 512 * 128, head: 512 * 128, token: 128 });
    assert_eq!(p.out, jattn_strides { batch: 1536 * 24 * 128, head: 128, token: 24 * 128 });
    assert_eq!(p.kv_heads, 0, "jattn_problem_flux: each query head its own key/value head");
    let (exec, mask) = (jattn_exec::default(), jattn_mask::default());
    assert_eq!((exec.alignment, mask.causal, mask.num_blocks, mask.num_segments), (0, JATTN_CAUSAL_NONE, 0, 0));
    assert!(mask.block_q.is_null() && mask.cu_seqlens_q.is_null() && mask.key_bias.is_null());
}

/// With `JATTN_SYS_EXPECT_LINKED=<prefix>` set (make test-rust's check of the feature
/// `system`), the library linked must be the one named: e.g. `system /tmp/prefix/lib`.
#[test]
fn linked_library_is_the_expected_one() {
    let linked = env!("JATTN_SYS_LINKED");
    println!("linked: {linked}");
    if let Ok(expected) = std::env::var("JATTN_SYS_EXPECT_LINKED") {
        assert!(linked.starts_with(&expected), "linked {linked:?}, expected {expected:?}");
    }
}

/// Cargo.toml must hold a literal version: it is the header's JATTN_VERSION_MAJOR.MINOR.PATCH
/// (the version's one home, include/jattn.h; CONTRIBUTING.md's version policy).
#[test]
fn crate_version_is_the_headers() {
    let text = header();
    let part = |name: &str| -> String {
        let prefix = format!("#define JATTN_VERSION_{name} ");
        let value =
            text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {prefix}in jattn.h"));
        value.trim().to_owned()
    };
    let header_version = format!("{}.{}.{}", part("MAJOR"), part("MINOR"), part("PATCH"));
    assert_eq!(env!("CARGO_PKG_VERSION"), header_version, "rust/Cargo.toml's version differs from include/jattn.h's");
}
