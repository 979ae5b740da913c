# The cuda backend: built when nvcc is found (JATTN_CUDA=AUTO) or required (ON); otherwise the
# stub that reports the backend unavailable. Sets JATTN_CUDA_ENABLED.
set(JATTN_CUDA_ENABLED OFF)
target_sources(jattn_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_unavailable.c)
