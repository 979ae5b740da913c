//! Builds libjattn and tells rustc how to link it.
//!
//! Two ways, chosen at build time:
//!
//! * **bundled** (default): the C sources of the repository this crate lives in (`../..`, or
//!   `JATTN_SRC_DIR`) are configured and built with CMake into `OUT_DIR/build`; only the target
//!   `jattn_static` (libjattn.a) is built, with `-DCMAKE_BUILD_TYPE=Release -DJATTN_BUILD_TESTS=OFF`.
//!   The CUDA backend is built as the C build decides (when nvcc is found;
//!   `JATTN_SYS_CMAKE_ARGS=-DJATTN_CUDA=OFF` turns it off). The libraries libjattn.a needs come
//!   from the C build's own pkg-config file (`OUT_DIR/build/jattn.pc`, its `Libs.private`), the
//!   OpenMP runtime's name from its CMake cache.
//! * **system** (feature `system`, or `JATTN_SYS_USE_PKG_CONFIG=1`): an installed libjattn,
//!   found by running `pkg-config --libs --static --cflags jattn`. libjattn.a is linked when
//!   the pkg-config directory has it (`JATTN_SYS_STATIC=0`: libjattn.so instead).
//!
//! Environment variables read (a change of any reruns this script):
//!
//! | variable | meaning |
//! | --- | --- |
//! | `JATTN_SYS_USE_PKG_CONFIG=1` | the system way, as the feature `system` |
//! | `JATTN_SRC_DIR` | the C sources (the directory holding `CMakeLists.txt` and `include/jattn.h`) |
//! | `JATTN_SYS_CMAKE` | the cmake program (default `cmake`) |
//! | `JATTN_SYS_CMAKE_ARGS` | more configure arguments, separated by whitespace (no quoting) |
//! | `JATTN_SYS_CMAKE_BUILD_DIR` | the CMake build directory, instead of `OUT_DIR/build`: one that several cargo commands share (`cargo test`, `clippy` and `doc` run this script each in its own `OUT_DIR`), so that libjattn is compiled once. A new or empty directory is configured here; one already configured by someone else (e.g. `make`'s `build/`) is only built (target `jattn_static`), as it is configured |
//! | `JATTN_SYS_CUDART=static\|shared` | how the CUDA runtime is linked when the cuda backend is in (default `static`: libcudart_static.a, so a program needs no CUDA library path at run time, only the driver) |
//! | `JATTN_SYS_STATIC=0` | system way: link libjattn.so even where libjattn.a is installed |
//! | `JATTN_SYS_OPENMP_LIB` | system way: the OpenMP runtime `-fopenmp` stands for (default `gomp`, GCC's) |
//! | `PKG_CONFIG`, `PKG_CONFIG_PATH`, ... | the pkg-config program and its search path |
//!
//! It also sets, for dependents' build scripts (`links = "jattn"`), `DEP_JATTN_INCLUDE` (the
//! directory of jattn.h) and `DEP_JATTN_CUDA` (`1` when the CUDA runtime is on the link line:
//! the cuda backend is built in and libjattn linked statically; else `0`), and for this crate's
//! tests `JATTN_SYS_INCLUDE_DIR`, `JATTN_SYS_LINKED` (what was linked) and `JATTN_SYS_ABI_PROBE`
//! (the repository's ABI probe, `tests/abi/jattn_abi_probe.c`).

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in [
        "JATTN_SYS_USE_PKG_CONFIG",
        "JATTN_SRC_DIR",
        "JATTN_SYS_CMAKE",
        "JATTN_SYS_CMAKE_ARGS",
        "JATTN_SYS_CMAKE_BUILD_DIR",
        "JATTN_SYS_CUDART",
        "JATTN_SYS_STATIC",
        "JATTN_SYS_OPENMP_LIB",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
        "CC",
        "CUDACXX",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    let system =
        env::var_os("CARGO_FEATURE_SYSTEM").is_some() || env::var("JATTN_SYS_USE_PKG_CONFIG").is_ok_and(|v| v == "1");
    let linked = if system { link_system() } else { build_bundled() };

    println!("cargo:rustc-env=JATTN_SYS_INCLUDE_DIR={}", linked.include_dir.display());
    // The ABI probe the tests compile: the one both bindings' ABI tests use (the repository's
    // tests/abi/jattn_abi_probe.c; JATTN_SRC_DIR names another checkout).
    let manifest = env_path("CARGO_MANIFEST_DIR").unwrap_or_else(|| fail("CARGO_MANIFEST_DIR is not set"));
    let src = env_path("JATTN_SRC_DIR").unwrap_or_else(|| manifest.join("..").join(".."));
    println!(
        "cargo:rustc-env=JATTN_SYS_ABI_PROBE={}",
        src.join("tests").join("abi").join("jattn_abi_probe.c").display()
    );
    println!("cargo:rustc-env=JATTN_SYS_LINKED={}", linked.library);
    println!("cargo:include={}", linked.include_dir.display());
    println!("cargo:cuda={}", if linked.cuda { 1 } else { 0 });
}

/// What was linked: the header's directory, the library (for this crate's tests), and whether
/// the CUDA runtime is on the link line.
struct Linked {
    include_dir: PathBuf,
    library: String,
    cuda: bool,
}

/// Stops the build with a message (cargo prints it with the build script's output).
fn fail(message: &str) -> ! {
    eprintln!("error: jattn-sys: {message}");
    std::process::exit(1);
}

fn env_path(var: &str) -> Option<PathBuf> {
    env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn run(cmd: &mut Command, what: &str) -> String {
    let shown = format!("{cmd:?}");
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) => fail(&format!("{what}: cannot run {shown}: {e}")),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Shown by cargo with -vv, and whenever the build fails (stderr: no line of it can be taken
    // for a cargo: instruction).
    eprintln!("{stdout}");
    eprintln!("{stderr}");
    if !output.status.success() {
        fail(&format!("{what} failed ({}): {shown}", output.status));
    }
    stdout
}

// ---- bundled: CMake into OUT_DIR -------------------------------------------------------------

fn build_bundled() -> Linked {
    let manifest = env_path("CARGO_MANIFEST_DIR").unwrap_or_else(|| fail("CARGO_MANIFEST_DIR is not set"));
    let src = env_path("JATTN_SRC_DIR").unwrap_or_else(|| manifest.join("..").join(".."));
    let src = src.canonicalize().unwrap_or(src);
    if !src.join("CMakeLists.txt").is_file() || !src.join("include").join("jattn.h").is_file() {
        fail(&format!(
            "no jattn C sources at {} (CMakeLists.txt and include/jattn.h): set JATTN_SRC_DIR to a jattn \
             checkout, or use the feature `system` (or JATTN_SYS_USE_PKG_CONFIG=1) to link an installed libjattn",
            src.display()
        ));
    }
    // What libjattn.a is made of; directories are scanned whole by cargo.
    for input in ["CMakeLists.txt", "cmake", "include", "src"] {
        println!("cargo:rerun-if-changed={}", src.join(input).display());
    }

    let build = match env_path("JATTN_SYS_CMAKE_BUILD_DIR") {
        Some(dir) => dir,
        None => env_path("OUT_DIR").unwrap_or_else(|| fail("OUT_DIR is not set")).join("build"),
    };
    let cmake = env::var("JATTN_SYS_CMAKE").unwrap_or_else(|_| "cmake".to_owned());
    // A tree this script configured carries a stamp, and is configured again on every run (so
    // that JATTN_SYS_CMAKE_ARGS applies). A tree configured by someone else (`make`'s build
    // directory, given as JATTN_SYS_CMAKE_BUILD_DIR) is built as it is configured, never
    // reconfigured: its own tests and options stay as they are.
    let stamp = build.join("jattn-sys-configured");
    let cache = build.join("CMakeCache.txt");
    if cache.is_file() && !stamp.is_file() {
        let home = read_cmake_cache(&cache).get("CMAKE_HOME_DIRECTORY").map(PathBuf::from);
        let same = home.as_ref().and_then(|h| h.canonicalize().ok()) == Some(src.clone());
        if !same {
            fail(&format!(
                "the CMake tree {} was configured for the sources {:?}, not {}",
                build.display(),
                home,
                src.display()
            ));
        }
    } else {
        let mut configure = Command::new(&cmake);
        configure
            .arg("-S")
            .arg(&src)
            .arg("-B")
            .arg(&build)
            .arg("-DCMAKE_BUILD_TYPE=Release")
            .arg("-DJATTN_BUILD_TESTS=OFF");
        if let Ok(args) = env::var("JATTN_SYS_CMAKE_ARGS") {
            configure.args(args.split_whitespace());
        }
        run(&mut configure, "configuring libjattn with CMake");
        if let Err(e) = fs::write(&stamp, "configured by jattn-sys's build.rs, which configures it again on each run\n")
        {
            fail(&format!("cannot write {}: {e}", stamp.display()));
        }
    }

    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "1".to_owned());
    run(
        Command::new(&cmake).arg("--build").arg(&build).arg("--target").arg("jattn_static").arg("--parallel").arg(jobs),
        "building libjattn with CMake",
    );
    if !build.join("libjattn.a").is_file() {
        fail(&format!("the CMake build made no {}", build.join("libjattn.a").display()));
    }

    // The libraries a static link needs, as the C build states them for C consumers.
    let pc = build.join("jattn.pc");
    let pc_text = fs::read_to_string(&pc).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", pc.display())));
    let private = pc_text.lines().find_map(|line| line.strip_prefix("Libs.private:")).unwrap_or("").to_owned();
    let cache = read_cmake_cache(&build.join("CMakeCache.txt"));

    println!("cargo:rustc-link-search=native={}", build.display());
    println!("cargo:rustc-link-lib=static=jattn");
    let cuda = emit_link_flags(&private, &OpenMp::FromCache(&cache));
    let library = format!("bundled {}", build.join("libjattn.a").display());
    Linked { include_dir: src.join("include"), library, cuda }
}

/// `KEY:TYPE=VALUE` entries of a CMake cache.
fn read_cmake_cache(path: &Path) -> BTreeMap<String, String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", path.display())));
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with("//"))
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let key = key.split_once(':').map_or(key, |(name, _type)| name);
            Some((key.to_owned(), value.to_owned()))
        })
        .collect()
}

// ---- system: pkg-config ----------------------------------------------------------------------

fn link_system() -> Linked {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_owned());
    let libs = run(
        Command::new(&pkg_config).args(["--libs", "--static", "jattn"]),
        "pkg-config --libs --static jattn (is libjattn installed, and PKG_CONFIG_PATH set to its lib/pkgconfig?)",
    );
    let cflags = run(Command::new(&pkg_config).args(["--cflags-only-I", "jattn"]), "pkg-config --cflags-only-I jattn");
    let include_dir = cflags
        .split_whitespace()
        .filter_map(|flag| flag.strip_prefix("-I"))
        .map(PathBuf::from)
        .find(|dir| dir.join("jattn.h").is_file())
        .or_else(|| {
            ["/usr/local/include", "/usr/include"].iter().map(PathBuf::from).find(|d| d.join("jattn.h").is_file())
        })
        .unwrap_or_else(|| {
            fail(&format!("pkg-config's jattn cflags ({}) name no directory with jattn.h", cflags.trim()))
        });

    // `${pcfiledir}/../../lib` of a relocatable .pc file: named plainly in link lines and messages.
    let dirs: Vec<PathBuf> = libs
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("-L"))
        .map(|d| Path::new(d).canonicalize().unwrap_or_else(|_| PathBuf::from(d)))
        .collect();
    let want_static = env::var("JATTN_SYS_STATIC").map_or(true, |v| v != "0");
    match dirs.iter().find(|dir| dir.join("libjattn.a").is_file()) {
        Some(dir) if want_static => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static=jattn");
            // What libjattn.a needs: the rest of the static link line.
            let openmp = env::var("JATTN_SYS_OPENMP_LIB").unwrap_or_else(|_| "gomp".to_owned());
            let others: Vec<&str> = libs.split_whitespace().filter(|f| *f != "-ljattn").collect();
            let cuda = emit_link_flags(&others.join(" "), &OpenMp::Named(&openmp));
            let library = format!("system {}", dir.join("libjattn.a").display());
            Linked { include_dir, library, cuda }
        }
        _ => {
            // libjattn.so names its own dependencies (OpenMP, the CUDA runtime).
            for dir in &dirs {
                println!("cargo:rustc-link-search=native={}", dir.display());
            }
            println!("cargo:rustc-link-lib=dylib=jattn");
            let library = format!("system -ljattn (shared) from {dirs:?}");
            Linked { include_dir, library, cuda: false }
        }
    }
}

// ---- link flags, from a pkg-config line ------------------------------------------------------

/// What `-fopenmp` in a link line stands for: the runtime the C build found (its CMake cache
/// names it), or a library named by the user.
enum OpenMp<'a> {
    FromCache(&'a BTreeMap<String, String>),
    Named(&'a str),
}

/// Emits rustc link lines for the libraries of a pkg-config link line (everything but libjattn
/// itself). Returns whether the CUDA runtime is among them.
fn emit_link_flags(flags: &str, openmp: &OpenMp) -> bool {
    let mut search: Vec<PathBuf> = Vec::new();
    let mut libs: Vec<String> = Vec::new();
    let mut cuda = false;
    for flag in flags.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            search.push(PathBuf::from(dir));
        } else if flag == "-lcudart" || flag == "-lcudart_static" {
            cuda = true;
        } else if let Some(lib) = flag.strip_prefix("-l") {
            libs.push(lib.to_owned());
        } else if flag == "-pthread" {
            libs.push("pthread".to_owned());
        } else if flag.starts_with("-fopenmp") || flag == "-qopenmp" {
            match openmp {
                OpenMp::Named(name) => libs.push((*name).to_owned()),
                OpenMp::FromCache(cache) => {
                    let names = cache.get("OpenMP_C_LIB_NAMES").map_or("gomp", String::as_str);
                    for name in names.split(';').filter(|n| !n.is_empty()) {
                        let path = cache.get(&format!("OpenMP_{name}_LIBRARY")).map(Path::new);
                        if let Some(dir) = path.and_then(Path::parent).filter(|d| !is_system_dir(d)) {
                            search.push(dir.to_path_buf());
                        }
                        libs.push(name.to_owned());
                    }
                }
            }
        } else {
            println!(
                "cargo:warning=jattn-sys: link flag {flag:?} of libjattn's pkg-config line is not understood and was left out"
            );
        }
    }
    if cuda {
        let shared = env::var("JATTN_SYS_CUDART").is_ok_and(|v| v == "shared");
        let static_found = search.iter().any(|dir| dir.join("libcudart_static.a").is_file());
        if shared || !static_found {
            libs.push("cudart".to_owned());
        } else {
            // libcudart_static.a loads the driver (libcuda.so) itself, with dlopen.
            libs.extend(["cudart_static", "dl", "rt", "pthread"].map(str::to_owned));
        }
    }
    for (n, dir) in search.iter().enumerate() {
        if !search[..n].contains(dir) {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
    }
    let mut seen = Vec::new();
    for lib in libs {
        if seen.contains(&lib) {
            continue;
        }
        if lib == "cudart_static" {
            println!("cargo:rustc-link-lib=static:-bundle={lib}");
        } else {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
        seen.push(lib);
    }
    cuda
}

/// A directory the linker searches anyway (`/usr/lib`, `/usr/lib/x86_64-linux-gnu`, ...): not
/// worth a `-L`, which would put it ahead of the user's own search paths.
fn is_system_dir(dir: &Path) -> bool {
    let roots = [Path::new("/lib"), Path::new("/lib64"), Path::new("/usr/lib"), Path::new("/usr/lib64")];
    roots.contains(&dir)
        || (dir.parent().is_some_and(|p| roots.contains(&p))
            && dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains("-linux-")))
}
