//! Export the C heap's entry points that `src/c_heap.rs` replaces from the `perfmodel` binary, so that the
//! libraries it loads (ONNX Runtime, with `dlopen`) call them: an executable exports no symbol by default.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        for symbol in [
            "malloc",
            "calloc",
            "free",
            "realloc",
            "reallocarray",
            "memalign",
            "aligned_alloc",
            "posix_memalign",
            "valloc",
            "pvalloc",
        ] {
            println!("cargo:rustc-link-arg-bin=perfmodel=-Wl,--export-dynamic-symbol={symbol}");
        }
    }
}
