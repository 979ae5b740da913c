# Device-resident timing for the jattn command (target jattn_device_timer).
add_library(jattn_device_timer STATIC ${CMAKE_CURRENT_LIST_DIR}/device_timer_none.c)
target_include_directories(jattn_device_timer PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(jattn_device_timer PUBLIC jattn_static)
