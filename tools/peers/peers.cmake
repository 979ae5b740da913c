# Peers measured by `jattn bench` (target jattn_peers).
add_library(jattn_peers STATIC ${CMAKE_CURRENT_LIST_DIR}/peers_stub.c)
target_include_directories(jattn_peers PUBLIC ${CMAKE_CURRENT_LIST_DIR})
