# The cpu backend's sources, added to jattn_objects.
target_sources(jattn_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cpu_backend.c)
