# Fails the build when a SPIR-V module lacks the SignedZeroInfNanPreserve execution mode (the
# mode that keeps MoltenVK from compiling the kernel with Metal's fast math).
# Usage: cmake -DSPIRV_DIS=<spirv-dis> -DSPV=<module.spv> -P check_spirv.cmake
execute_process(COMMAND ${SPIRV_DIS} ${SPV} OUTPUT_VARIABLE _dis RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "spirv-dis ${SPV} failed")
endif()
if(NOT _dis MATCHES "OpExecutionMode %[A-Za-z0-9_]+ SignedZeroInfNanPreserve 32")
  message(FATAL_ERROR "${SPV}: no OpExecutionMode SignedZeroInfNanPreserve 32")
endif()
