//! `forward_device` on a GPU: device buffers from the CUDA runtime (linked by jattn-sys with the
//! cuda backend), the call on a stream (and on the default stream, with a caller workspace, with
//! a Context), the output copied back and checked against the float64 reference. Skipped, with a
//! message, where the library has no cuda backend or the machine no GPU; the checks of the
//! device path that need no GPU are in tests/errors.rs.

mod common;

#[cfg(not(jattn_cuda))]
#[test]
fn forward_device_on_a_gpu() {
    common::note(
        "SKIP: the CUDA runtime is not linked (libjattn without the cuda backend, or libjattn.so): forward_device is not run on a GPU",
    );
}

#[cfg(jattn_cuda)]
mod gpu {
    use std::ffi::{c_int, c_void};
    use std::ptr;

    use super::common::*;
    use jattn::{
        Backend, Context, DeviceKeyPadding, DeviceTensors, DeviceWorkspace, Exec, Layout, Problem, Status, Tensor,
    };

    // The few CUDA runtime functions the test needs (cuda_runtime_api.h).
    unsafe extern "C" {
        fn cudaMalloc(ptr: *mut *mut c_void, bytes: usize) -> c_int;
        fn cudaFree(ptr: *mut c_void) -> c_int;
        fn cudaMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int) -> c_int;
        fn cudaStreamCreate(stream: *mut *mut c_void) -> c_int;
        fn cudaStreamSynchronize(stream: *mut c_void) -> c_int;
        fn cudaStreamDestroy(stream: *mut c_void) -> c_int;
        fn cudaDeviceSynchronize() -> c_int;
    }
    const HOST_TO_DEVICE: c_int = 1;
    const DEVICE_TO_HOST: c_int = 2;

    fn cuda(code: c_int, what: &str) {
        assert_eq!(code, 0, "{what}: cudaError {code}");
    }

    /// Device memory, freed on drop.
    struct DeviceBuffer {
        ptr: *mut c_void,
        bytes: usize,
    }

    impl DeviceBuffer {
        fn new(bytes: usize) -> DeviceBuffer {
            let mut ptr = ptr::null_mut();
            // SAFETY: `ptr` receives the allocation.
            cuda(unsafe { cudaMalloc(&mut ptr, bytes.max(1)) }, "cudaMalloc");
            DeviceBuffer { ptr, bytes }
        }

        fn from<T: Copy>(host: &[T]) -> DeviceBuffer {
            let b = DeviceBuffer::new(std::mem::size_of_val(host));
            // SAFETY: both ranges hold `bytes` bytes.
            cuda(unsafe { cudaMemcpy(b.ptr, host.as_ptr().cast(), b.bytes, HOST_TO_DEVICE) }, "cudaMemcpy H2D");
            b
        }

        fn to_host(&self, n: usize) -> Vec<f32> {
            let mut host = vec![0.0f32; n];
            assert!(n * 4 <= self.bytes);
            // SAFETY: both ranges hold n floats; the device work was synchronised before.
            cuda(unsafe { cudaMemcpy(host.as_mut_ptr().cast(), self.ptr, n * 4, DEVICE_TO_HOST) }, "cudaMemcpy D2H");
            host
        }
    }

    impl Drop for DeviceBuffer {
        fn drop(&mut self) {
            // SAFETY: allocated by cudaMalloc, freed once; no work on it is pending.
            unsafe { cudaFree(self.ptr) };
        }
    }

    fn gpu_present() -> bool {
        match jattn::select_device(&Problem::flux(1, 1, 16, 16, 64), &Exec::default()) {
            Ok(sel) => {
                note(&format!("GPU: {sel}"));
                true
            }
            Err(e) => {
                note(&format!("SKIP: no GPU for forward_device ({e})"));
                false
            }
        }
    }

    /// One device call of `problem`, as `how` says; the output copied back and checked.
    fn check(problem: &Problem, how: &str, rng: &mut Rng) {
        let dist = Dist::Normal;
        let (q, k, v) = inputs(problem, dist, rng);
        let (dq, dk, dv) = (DeviceBuffer::from(&q), DeviceBuffer::from(&k), DeviceBuffer::from(&v));
        let out_len = problem.required_len(Tensor::Out).unwrap();
        let lse_len = problem.lse_len().unwrap();
        let dout = DeviceBuffer::from(&poisoned(out_len));
        let dlse = DeviceBuffer::from(&poisoned(lse_len));
        let tensors =
            DeviceTensors::new(dq.ptr.cast(), dk.ptr.cast(), dv.ptr.cast(), dout.ptr.cast()).with_lse(dlse.ptr.cast());
        let exec = Exec::new().with_backend(Backend::Cuda);
        let mut stream = ptr::null_mut();
        // SAFETY: a fresh stream.
        cuda(unsafe { cudaStreamCreate(&mut stream) }, "cudaStreamCreate");
        let ws_bytes = jattn::device_workspace_size(problem, &exec).unwrap();
        let ws = DeviceBuffer::new(ws_bytes);
        let mut ctx = Context::new().unwrap();
        // SAFETY: every pointer is a live device allocation of the extent the problem addresses;
        // nothing touches them until the stream is synchronised below.
        let r = unsafe {
            match how {
                "stream" => jattn::forward_device(problem, &exec, &tensors, stream, None, None),
                "default stream" => jattn::forward_device(problem, &exec, &tensors, ptr::null_mut(), None, None),
                "workspace" => jattn::forward_device(
                    problem,
                    &exec,
                    &tensors,
                    stream,
                    Some(DeviceWorkspace { ptr: ws.ptr, bytes: ws_bytes }),
                    None,
                ),
                "context" => ctx.forward_device(problem, &exec, &tensors, stream, None, None),
                _ => unreachable!(),
            }
        };
        // SAFETY: the stream is live; the default stream is synchronised with the device.
        cuda(unsafe { cudaStreamSynchronize(stream) }, "cudaStreamSynchronize");
        cuda(unsafe { cudaDeviceSynchronize() }, "cudaDeviceSynchronize");
        // SAFETY: no work is pending on it.
        unsafe { cudaStreamDestroy(stream) };
        r.unwrap_or_else(|e| panic!("{problem:?} {how}: {e}"));
        let (out, lse) = (dout.to_host(out_len), dlse.to_host(lse_len));
        let (want, want_lse) = reference(problem, &q, &k, &v, &attends_all);
        let m = Metrics::of(gather_out(problem, &out), want);
        assert!(m.passes_f32(), "{problem:?} {how}: over the f32 gate: {m}");
        lse_passes(&lse, &want_lse).unwrap();
        assert!(only_out_written(problem, &out));
        note(&format!(
            "forward_device {how} {:?}: {m}",
            (problem.batch(), problem.heads(), problem.seq_q(), problem.seq_kv(), problem.head_dim())
        ));
    }

    #[test]
    fn forward_device_on_a_gpu() {
        if !gpu_present() {
            return;
        }
        let mut rng = rng_for("forward_device_on_a_gpu");
        let shapes = [
            Problem::flux(1, 4, 256, 256, 128),
            Problem::flux(2, 3, 77, 300, 64),
            Problem::flux(1, 2, 129, 65, 72),
            Problem::flux(1, 2, 33, 33, 1),
            Problem::flux(2, 2, 100, 100, 64).with_qkv(Layout::TokenMajor).with_out(Layout::HeadMajor),
        ];
        for p in &shapes {
            for how in ["stream", "default stream", "workspace", "context"] {
                check(p, how, &mut rng);
            }
        }
    }

    /// Device key padding: checked against the reference once the cuda backend implements it;
    /// until then it must refuse it (Unsupported) before writing anything.
    #[test]
    fn forward_device_with_key_padding() {
        if !gpu_present() {
            return;
        }
        let mut rng = rng_for("forward_device_with_key_padding");
        let p = Problem::flux(3, 2, 50, 70, 64);
        let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
        let lengths: Vec<i64> = vec![70, 13, 0];
        let (dq, dk, dv, dlen) =
            (DeviceBuffer::from(&q), DeviceBuffer::from(&k), DeviceBuffer::from(&v), DeviceBuffer::from(&lengths));
        let out_len = p.required_len(Tensor::Out).unwrap();
        let dout = DeviceBuffer::from(&poisoned(out_len));
        let tensors = DeviceTensors::new(dq.ptr.cast(), dk.ptr.cast(), dv.ptr.cast(), dout.ptr.cast());
        let padding = DeviceKeyPadding { kv_len: dlen.ptr.cast(), ..DeviceKeyPadding::default() };
        // SAFETY: live device allocations of the extents the problem addresses; synchronised below.
        let r = unsafe { jattn::forward_device(&p, &Exec::default(), &tensors, ptr::null_mut(), None, Some(&padding)) };
        // SAFETY: plain synchronisation.
        cuda(unsafe { cudaDeviceSynchronize() }, "cudaDeviceSynchronize");
        let out = dout.to_host(out_len);
        match r {
            Ok(()) => {
                let (want, _) = reference(&p, &q, &k, &v, &|b, j| (j as i64) < lengths[b]);
                let m = Metrics::of(gather_out(&p, &out), want);
                assert!(m.passes_f32(), "{m}");
                note(&format!("forward_device with key lengths: {m}"));
            }
            Err(e) if e.status() == Status::Unsupported => {
                assert!(out.iter().all(|&x| is_poison(x)));
                note(&format!("SKIP: the cuda backend does not implement key padding yet ({e})"));
            }
            Err(e) => panic!("{e}"),
        }
    }
}
