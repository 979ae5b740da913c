#!/bin/sh
# The cuda backend's fatbinary carries machine code and PTX for the targets of JATTN_CUDA_ARCHS
# (src/cuda/sources.cmake: sm_80, sm_86, sm_89, sm_90a and compute_90 PTX by default), and the
# portable kernels (v7, the backward v3) are in every machine-code target and in the PTX.
# usage: test_fatbin.sh LIBRARY "ARCHS" CUOBJDUMP     exits 77 (skipped) without cuobjdump
lib=$1 archs=$2 cuobjdump=$3
if [ -z "$cuobjdump" ] || ! [ -x "$cuobjdump" ]; then
    echo "SKIP: no cuobjdump"
    exit 77
fi
fail=0
elf=$("$cuobjdump" --list-elf "$lib" 2>&1)
ptx=$("$cuobjdump" --list-ptx "$lib" 2>&1)
for a in $(echo "$archs" | tr ';' ' '); do
    case $a in
    compute_*)
        n=${a#compute_}
        if echo "$ptx" | grep -q "\.sm_$n\.ptx"; then echo "ok: PTX for $a"; else echo "FAIL: no PTX for $a"; fail=1; fi
        for k in attention_f32_mma_f16x2_v7 bwd_v3; do
            if "$cuobjdump" -ptx -arch "sm_$n" "$lib" 2>/dev/null | grep -q "$k"; then
                echo "ok: $k in the $a PTX"
            else
                echo "FAIL: $k not in the $a PTX"; fail=1
            fi
        done ;;
    *)
        if echo "$elf" | grep -q "\.sm_$a\.cubin"; then echo "ok: machine code for sm_$a"; else echo "FAIL: no machine code for sm_$a"; fail=1; fi
        if "$cuobjdump" -sass -arch "sm_$a" "$lib" 2>/dev/null | grep -q "attention_f32_mma_f16x2_v7"; then
            echo "ok: kernel v7 in sm_$a"
        else
            echo "FAIL: kernel v7 not in sm_$a"; fail=1
        fi ;;
    esac
done
[ $fail = 0 ] && echo "test_fatbin: PASS" || echo "test_fatbin: FAIL"
exit $fail
