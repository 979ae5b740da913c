# Tests of the cpu backend (included by tests/CMakeLists.txt).
#
# The parity suite once per instruction set, forced by JATTN_CPU_ISA: a test whose instruction
# set this CPU (or this build) lacks is skipped (test_parity exits 77 when select() refuses).
foreach(isa avx512 avx2 neon generic)
  add_test(NAME test_parity_cpu_${isa} COMMAND test_parity cpu)
  set_tests_properties(test_parity_cpu_${isa} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_CPU_ISA=${isa}")
  add_test(NAME test_padding_cpu_${isa} COMMAND test_padding cpu)
  set_tests_properties(test_padding_cpu_${isa} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_CPU_ISA=${isa}")
  add_test(NAME test_backward_cpu_${isa} COMMAND test_backward cpu)
  set_tests_properties(test_backward_cpu_${isa} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_CPU_ISA=${isa}")
  add_test(NAME test_masks_cpu_${isa} COMMAND test_masks cpu)
  set_tests_properties(test_masks_cpu_${isa} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_CPU_ISA=${isa}")
endforeach()

# No error common to a row of out (near one-hot rows, whose backward amplifies it): the cpu forward
# on each instruction set, and the ref backend. The GPU forwards are not asked yet (not measured).
jattn_add_test(test_row_factor SOURCES test_row_factor.c ARGS cpu)
jattn_add_test(test_row_factor SOURCES test_row_factor.c ARGS ref)
foreach(isa avx512 avx2 neon generic)
  add_test(NAME test_row_factor_cpu_${isa} COMMAND test_row_factor cpu)
  set_tests_properties(test_row_factor_cpu_${isa} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_CPU_ISA=${isa}")
endforeach()

# The vector exp2 of every instruction set present, against libm.
jattn_add_test(test_cpu_exp SOURCES test_cpu_exp.c)

# Each micro-kernel alone against a scalar float64 loop, every edge size, every ISA present.
jattn_add_test(test_cpu_kernels SOURCES test_cpu_kernels.c)

# Bitwise determinism across thread counts, the JATTN_CPU_ISA choice, limits, workspace.
jattn_add_test(test_cpu_threads SOURCES test_cpu_threads.c)

# The NEON kernels, cross-compiled for aarch64 and run under qemu-user (skipped, exit 77, when
# aarch64-linux-gnu-gcc or qemu-aarch64 is absent). Linux hosts only.
if(CMAKE_HOST_UNIX AND NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  add_test(NAME test_cpu_neon_qemu
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_neon_qemu.sh ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/neon_qemu)
  set_tests_properties(test_cpu_neon_qemu PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
