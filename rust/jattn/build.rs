//! Sets `cfg(jattn_cuda)` when the CUDA runtime is linked with libjattn (jattn-sys says so in
//! `DEP_JATTN_CUDA`): the GPU test of `forward_device` declares CUDA runtime functions only then.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(jattn_cuda)");
    println!("cargo:rerun-if-env-changed=DEP_JATTN_CUDA");
    if std::env::var("DEP_JATTN_CUDA").is_ok_and(|v| v == "1") {
        println!("cargo:rustc-cfg=jattn_cuda");
    }
}
