# Sourced by the device scripts of lab/gpu/: package_from_build BUILD DIR makes the Python package in DIR/jattn
# from the repository's python/src/jattn and BUILD's libjattn.so (with its abi_probe.txt), as the wheel lays it
# out; PYTHONPATH=DIR then imports it.
package_from_build() {
  local build=$1 dir=$2 lib
  lib=$(ls "$build"/libjattn.so.0.*.* 2> /dev/null | head -1)
  [ -n "$lib" ] || { echo "no libjattn.so.0.*.* in $build"; return 1; }
  rm -rf "$dir/jattn" && mkdir -p "$dir/jattn/_lib" && cp python/src/jattn/*.py "$dir/jattn/" &&
    cp "$lib" "$dir/jattn/_lib/libjattn.so" &&
    cc -Iinclude tests/abi/jattn_abi_probe.c -o "$dir/abi_probe" && "$dir/abi_probe" > "$dir/jattn/_lib/abi_probe.txt"
}
